"""The thread feeding the GPU, on photos of one bucket: photo after photo, a batch as the bucket's program once a
photo in one submission (FACERUN_PHOTO_ITEMS=off), and a batch in the bucket's program of N items (one pass).

    python benchmarks/photo_batches.py FOLDER [--batch 8] [--rounds 5] [--buckets 1]

The photos of FOLDER are decoded and laid out first (load_photo_shrunk, as a detect-only library run decodes them);
the photos of the most common buckets (--buckets) are then run through YuNet on the GPU again and again in batches of
--batch, two batches in flight, as face/buckets.py runs them, with no decoding or post-processing beside: what the
library run's feeding thread costs a photo when it never waits on the decoders. Prints photos/s (median over
--rounds) and the feeding thread's ms a photo by phase (facerun.phases), per mode.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

from facerun import phases
from facerun.errors import FacerunError
from facerun.face.detect import Detector
from facerun.face.images import load_photo_shrunk

MODES = {"photo-after-photo": ("1", "on"), "runs": (None, "off"), "items": (None, "on")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--buckets", type=int, default=1, help="the photos of this many most common buckets")
    args = ap.parse_args(argv)
    paths = sorted(p for p in Path(args.folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not paths:
        print(f"{args.folder}: no .jpg .jpeg .png photos found", file=sys.stderr)
        return 1
    try:
        det = Detector("yunet-2023mar", device="gpu")
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    prepared = []
    for p in paths:
        pixels, size = load_photo_shrunk(p, det.fit_size)
        prepared.append(det.prepare(pixels, None, size))
    det.detect(load_photo_shrunk(paths[0], det.fit_size)[0][:, :, :3].copy())  # the model's checks
    by_bucket = collections.defaultdict(list)
    for p in prepared:
        by_bucket[p.bucket].append(p)
    common = sorted(by_bucket, key=lambda b: -len(by_bucket[b]))[: args.buckets]
    photos = [p for b in common for p in by_bucket[b]]
    print(f"{len(photos)} photos of buckets {[tuple(b[2:]) for b in common]}, {len(paths)} decoded; batch {args.batch}")
    for mode, (batch, items) in MODES.items():
        os.environ["FACERUN_PHOTO_BATCH"] = batch or str(args.batch)
        os.environ["FACERUN_PHOTO_ITEMS"] = items
        size = int(os.environ["FACERUN_PHOTO_BATCH"])
        batches = [[p for p in photos if p.bucket == b][i : i + size] for b in common
                   for i in range(0, len(by_bucket[b]), size)]
        rates, clocks = [], []
        for r in range(args.rounds + 1):  # the first round compiles and checks: not counted
            clock = phases.PhaseClock()
            inflight = collections.deque()
            start = time.perf_counter()
            with phases.recording(clock):
                for group in batches:
                    if size == 1:
                        det.run_network(group[0])
                        continue
                    inflight.append(det.submit_networks(group))
                    while len(inflight) > 1:
                        inflight.popleft()()
                while inflight:
                    inflight.popleft()()
            wall = time.perf_counter() - start
            if r:
                rates.append(len(photos) / wall)
                clocks.append(clock)
        n = len(photos) * len(clocks)
        total = [sum(c.ns[i] for c in clocks) for i in range(len(phases.PHASES))]
        split = " ".join(f"{name} {t / 1e6 / n:.3f}" for name, t in sorted(zip(phases.PHASES, total),
                                                                            key=lambda kv: -kv[1]) if t)
        print(f"{mode:>18} {statistics.median(rates):8.1f} photos/s (min {min(rates):.1f} max {max(rates):.1f}) "
              f"| ms a photo: {split}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
