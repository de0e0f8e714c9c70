"""Where the library run's feeding thread spends its time: the detect-only GPU run over a folder under cProfile (the
loop runs on the calling thread), the top functions by own time and by cumulative time.

    python benchmarks/library_profile.py PHOTO_DIR [--device gpu] [--top 25] [--embedder NAME]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from facerun.face.detect import Detector
from facerun.face.embed import Embedder
from facerun.face.engines import run
from facerun.face.images import iter_images
from facerun.face.library import LibraryOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos")
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--embedder", default=None, help="the whole job: also align and embed with this model")
    args = parser.parse_args()
    paths = list(iter_images([args.photos]))
    detector = Detector(device=args.device)
    embedder = Embedder(args.embedder, device=args.device) if args.embedder else None
    list(run(paths[:8], detector, embedder, LibraryOptions()))  # programs and checks out of the way
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    faces = sum(len(r.faces) for r in run(paths, detector, embedder, LibraryOptions()))
    profile.disable()
    seconds = time.perf_counter() - start
    print(f"{len(paths)} photos, {faces} faces, {len(paths) / seconds:.1f} photos/s under the profiler")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
