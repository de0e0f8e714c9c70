"""A bucket's batch program on short batches: the padding items run (FACERUN_PHOTO_PADDING=run) or skipped (the
default, gpu/items.py), batch by batch, YuNet on the GPU.

    python benchmarks/short_batches.py PHOTO [--items 8] [--side 640] [--rounds 7] [--repeat 5]

PHOTO is cropped to photos of one bucket (sizes within the bucket the whole photo falls in at --side); each batch of
k = 2 .. --items of them (one photo runs on its own) runs in the bucket's program of --items items
(FACERUN_PHOTO_ITEMS=on), submitted and read back, --repeat batches a timing, the median of --rounds timings
alternating the two modes. Prints ms a batch and a photo for each k and mode, and checks that both modes find the
same faces (boxes, landmarks, scores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photo")
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--side", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ["FACERUN_PHOTO_ITEMS"] = "on"
    os.environ["FACERUN_PHOTO_BATCH"] = str(args.items)
    from facerun.errors import FacerunError
    from facerun.face.detect import Detector
    from facerun.face.images import load_image

    try:
        rgb = load_image(args.photo)
        det = Detector("yunet-2023mar", device="gpu", max_side=args.side)
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    whole = det.prepare(rgb)
    bucket = whole.bucket
    h, w = whole.image.shape[:2]
    # crops a few rows and columns smaller each: the same bucket, each masked to its own size
    crops = [np.ascontiguousarray(whole.image[: h - 2 * i, : w - 2 * i, :3]) for i in range(args.items)]
    prepared = [det.prepare(c) for c in crops]
    if {p.bucket for p in prepared} != {bucket} or bucket is None:
        print(f"error: the crops of {args.photo} do not share one bucket", file=sys.stderr)
        return 1
    det.detect(crops[0])  # the model's check and the first photo's layout check
    from facerun.gpu.device import get_device

    print(f"YuNet, bucket {bucket[2]}x{bucket[3]}, a program of {args.items} items, on {get_device().label}")

    def run(batch):
        return det.submit_networks(batch)()

    def timed(batch, mode) -> float:
        os.environ["FACERUN_PHOTO_PADDING"] = mode
        start = time.perf_counter()
        for _ in range(args.repeat):
            run(batch)
        return (time.perf_counter() - start) / args.repeat

    print(f"{'photos':>6} {'padding run ms':>15} {'skipped ms':>11} {'ratio':>6} {'skipped ms a photo':>19}  same")
    for k in range(2, args.items + 1):
        batch = prepared[:k]
        outs = {}
        for mode in ("run", ""):
            os.environ["FACERUN_PHOTO_PADDING"] = mode
            outs[mode] = run(batch)
        same = all(_faces(det, a) == _faces(det, b) for a, b in zip(outs["run"], outs[""]))
        times = {"run": [], "": []}
        for _ in range(args.rounds):
            for mode in ("run", ""):
                times[mode].append(timed(batch, mode))
        padded, skipped = (1000 * statistics.median(times[m]) for m in ("run", ""))
        print(f"{k:>6} {padded:>15.2f} {skipped:>11.2f} {skipped / padded:>6.2f} {skipped / k:>19.3f}  {same}")
    return 0


def _faces(det, prepared) -> list:
    """A photo's faces as plain numbers (boxes, landmarks, scores): what the two modes must agree on."""
    return [f.to_dict(digits=6) for f in det.faces_from(prepared)]


if __name__ == "__main__":
    sys.exit(main())
