"""How full a library run's GPU batches can be, from the photos' headers alone: each photo's bucket (the detector's
fit, YuNet's padding to 32, the 128-rounded bucket of facerun's photo layout), then the photos taken in folder
order by two policies, the mean photos a batch of `--batch` for each setting:

- held: today's detect stage (face/buckets.py) with the decoders ahead of the network: photos gather by bucket, a
  full group runs, and past FACERUN_PHOTO_HELD photos held the fullest group runs;
- window: the photos' headers read ahead over a window of paths, and the oldest photo's bucket run with the others
  of its bucket in the window (FACERUN_PHOTO_LOOKAHEAD, issue 36's header-first order).

    python benchmarks/batch_fill.py DIR [--repeat 20] [--batch 8]

No network runs; no timing. A count of how many photos each batch program of N items would really carry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def buckets_of(paths: list[Path]) -> list[tuple[int, int] | None]:
    """Each photo's bucket from its header (upright size, the detector's fit, padding to 32, rounding to the
    bucket), None where the header cannot be read."""
    from facerun.face.detect import Detector, photo_bucket
    from facerun.face.images import upright_size
    from facerun.face.yunet import padded_size

    detector, step = Detector("yunet-2023mar", device="cpu"), photo_bucket()
    keys = []
    for path in paths:
        size = upright_size(path)
        if size is None:
            keys.append(None)
            continue
        fit_w, fit_h = detector.fit_size(*size) or size
        rows, cols = padded_size(fit_h, fit_w)
        keys.append((-(-rows // step) * step, -(-cols // step) * step))
    return keys


def held(order: list, size: int, most: int) -> float:
    groups: dict = {}
    batches = []
    for key in order:
        groups.setdefault(key, []).append(key)
        if len(groups[key]) >= size:
            batches.append(len(groups.pop(key)))
        elif sum(map(len, groups.values())) > most:
            batches.append(len(groups.pop(max(groups, key=lambda k: len(groups[k])))))
    batches += [len(g) for g in groups.values()]
    return sum(batches) / len(batches)


def window(order: list, size: int, ahead: int) -> float:
    waiting, upcoming, batches = list(range(min(ahead, len(order)))), min(ahead, len(order)), []
    while waiting:
        key = order[waiting[0]]
        taken = set([i for i in waiting if order[i] == key][:size])
        batches.append(len(taken))
        waiting = [i for i in waiting if i not in taken]
        while len(waiting) < ahead and upcoming < len(order):
            waiting.append(upcoming)
            upcoming += 1
    return sum(batches) / len(batches)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeat", type=int, default=20, help="the folder's photos this many times over")
    parser.add_argument("--batch", type=int, default=8, help="photos a batch, at most (FACERUN_PHOTO_BATCH)")
    args = parser.parse_args(argv)
    from facerun.face.images import iter_images

    if not args.folder.is_dir():
        print(f"batch_fill: no folder {args.folder}", file=sys.stderr)
        return 1
    keys = [k for k in buckets_of(iter_images([args.folder])) if k is not None]  # unreadable files left out
    if not keys:
        print(f"batch_fill: no photos in {args.folder}", file=sys.stderr)
        return 1
    order = keys * args.repeat
    print(f"{len(order)} photos, {len(set(keys))} buckets, batches of at most {args.batch}: mean photos a batch")
    b = args.batch
    print("  held (FACERUN_PHOTO_HELD): " + "  ".join(f"{m}: {held(order, b, m):.2f}" for m in (2 * b, 4 * b, 8 * b,
                                                                                               16 * b)))
    print("  header-first window:       " + "  ".join(f"{w}: {window(order, b, w):.2f}" for w in (64, 128, 256,
                                                                                               512)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
