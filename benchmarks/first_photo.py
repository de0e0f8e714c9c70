"""A library run's first photo and rate, in a fresh process: for A/B runs of two checkouts (the first photo is
one-off work, so each run needs a process of its own).

    python benchmarks/first_photo.py DIR [--model DET] [--embedder EMB] [--device gpu] [--serial] [--limit N]

    git worktree add ../before <commit>
    for i in 1 2 3; do for tree in ../before .; do (cd /tmp && PYTHONPATH=$OLDPWD/$tree \\
        python $OLDPWD/benchmarks/first_photo.py PHOTOS); done; done

With --embedder, the whole job (detect, align, embed 16 faces at a time). Prints one JSON line: which facerun ran,
device creation seconds, the first photo's ms after it (what `facerun bench --photos` calls first_photo_ms),
photos/s, faces, busy seconds by stage and the one-off work counted (facerun.counters: checks, pipelines, programs
compiled).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import facerun
from facerun import counters
from facerun.face.detect import Detector
from facerun.face.embed import Embedder
from facerun.face.library import LibraryStats, iter_photo_faces

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photos", type=Path)
    ap.add_argument("--model", default=None, help="detector model (default: the built-in default)")
    ap.add_argument("--embedder", default=None, help="also embed the faces with this model (the whole job)")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--serial", action="store_true", help="one photo after another on this thread")
    ap.add_argument("--limit", type=int, default=None, help="only the first N photos (sorted by name)")
    args = ap.parse_args(argv)
    if not args.photos.is_dir():
        print(f"error: {args.photos}: not a folder", file=sys.stderr)
        return 1
    photos = sorted(p for p in args.photos.rglob("*") if p.suffix.lower() in PHOTO_SUFFIXES)[: args.limit]
    if not photos:
        print(f"no photos under {args.photos}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    detector = Detector(args.model, device=args.device)
    embedder = Embedder(args.embedder, device=args.device) if args.embedder else None
    created = time.perf_counter() - start
    before = counters.snapshot()
    stats = LibraryStats()  # the clock starts here, as in bench --photos
    faces = sum(len(p.faces) for p in iter_photo_faces(photos, detector, embedder,
                                                       workers=0 if args.serial else None, stats=stats))
    paid = counters.since(before)
    print(json.dumps({
        "facerun": str(Path(facerun.__file__).parent), "device": detector.device, "device_s": round(created, 3),
        "first_photo_ms": round((stats.first_photo_s or 0.0) * 1000, 1), "photos": stats.photos,
        "photos_per_s": round(stats.photos / max(stats.wall_s, 1e-9), 1), "faces": faces,
        "seconds": {k: round(v, 3) for k, v in stats.seconds.items()},
        "paid": {k: round(v, 4) if isinstance(v, float) else v for k, v in paid.items()}}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except facerun.FacerunError as e:  # a bad model, no usable GPU ...: one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
