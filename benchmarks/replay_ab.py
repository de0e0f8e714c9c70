"""Feeding the GPU: per-photo milliseconds and photos/s of YuNet's network stage with and without the native replay
list (FACERUN_GPU_REPLAY=native|api), photo by photo vs photos of one bucket N to a submission (two in flight).

    python benchmarks/replay_ab.py PHOTO_DIR [--batch 8] [--repeat 3] [--max-side 1280] [--json]

Photos are decoded and laid out first (not timed); the loop timed is the network stage alone, on this thread, as
the library's detect stage runs it, so its wall time is the feeding thread's time plus the GPU's waits. Each row
checks its outputs against the first row's (np.array_equal): every row must give the same bits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def _prepared(det, files):
    from facerun.face.images import load_photo_shrunk

    out = []
    for f in files:
        pixels, size = load_photo_shrunk(f, det.fit_size)
        out.append(det.prepare(pixels, None, size))
    return out


def _row(mode: str, batch: int, files, repeat: int, max_side: int):
    os.environ["FACERUN_GPU_REPLAY"] = mode  # read when a program is compiled: a detector of its own
    from facerun.face.detect import Detector

    det = Detector("yunet-2023mar", device="gpu", max_side=max_side)
    prepared = _prepared(det, files)
    for p in prepared[:2]:
        det.run_network(p)  # the check, the layout check
    if batch > 1:  # the first batch's own check
        det.submit_networks(prepared[:2])()
    by_bucket: dict = {}
    for p in prepared:
        by_bucket.setdefault(p.bucket, []).append(p)
    chunks = [g[i : i + batch] for g in by_bucket.values() for i in range(0, len(g), batch)]
    for c in chunks:  # every program compiled and its parameters on the device before timing
        det.submit_networks(c)() if batch > 1 else [det.run_network(p) for p in c]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        if batch == 1:
            for p in prepared:
                det.run_network(p)
        else:
            waiting = None
            for c in chunks:
                done = det.submit_networks(c)
                if waiting is not None:
                    waiting()  # read the batch before while the device runs this one
                waiting = done
            if waiting is not None:
                waiting()
        best = min(best, time.perf_counter() - start)
    outputs = {str(p.shape) + str(i): p.outputs for i, p in enumerate(prepared)}
    return {"replay": mode, "batch": batch, "ms_per_photo": 1000 * best / len(prepared),
            "photos_per_s": len(prepared) / best, "device": det.device}, outputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-side", type=int, default=1280)
    ap.add_argument("--limit", type=int, default=0, help="at most this many photos (0: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from facerun.face.images import iter_images

    files = iter_images([args.folder])
    if args.limit:
        files = files[: args.limit]
    if not files:
        print(f"error: no photos in {args.folder}", file=sys.stderr)
        return 1
    rows, first = [], None
    for mode in ("api", "native"):
        for batch in (1, args.batch):
            row, outputs = _row(mode, batch, files, args.repeat, args.max_side)
            if first is None:
                first = outputs
            row["same_bits"] = all(np.array_equal(first[k][n], outputs[k][n]) for k in first for n in first[k])
            rows.append(row)
    if args.json:
        print(json.dumps({"photos": len(files), "rows": rows}, indent=1))
        return 0
    print(f"{len(files)} photos from {args.folder}, best of {args.repeat}")
    print(f"{'replay':<8}{'batch':>6}{'ms/photo':>10}{'photos/s':>10}  same bits  device")
    for r in rows:
        print(f"{r['replay']:<8}{r['batch']:>6}{r['ms_per_photo']:>10.2f}{r['photos_per_s']:>10.1f}  "
              f"{'yes' if r['same_bits'] else 'NO':<9}  {r['device']}")
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
