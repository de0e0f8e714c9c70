"""The library run's pipeline alone, A/B across checkouts: photos decoded on the run's threads and fed to a stand-in
detector that takes MS milliseconds a photo (a sleep, which lets go of the interpreter lock as a GPU wait does), so
the rate is the decoding and feeding machinery's, not a network's.

    python benchmarks/feed_order.py TREE FOLDER [--workers 2] [--ms 2] [--repeat 2]

TREE: a checkout's root (or a folder holding a `facerun` package, e.g. `git archive REV facerun | tar -x -C DIR`).
Prints one line: photos/s. Run two trees in turn, a few rounds, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def use_tree(tree: Path, script: str) -> bool:
    """Import facerun from checkout `tree` from now on; False (said on stderr) when it holds no facerun package."""
    tree = tree.resolve()
    if not (tree / "facerun" / "__init__.py").is_file():
        print(f"{script}: no facerun package in {tree}", file=sys.stderr)
        return False
    sys.path.insert(0, str(tree))
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--workers", type=int, default=2, help="decoding threads")
    parser.add_argument("--ms", type=float, default=2.0, help="the stand-in detector's milliseconds a photo")
    parser.add_argument("--repeat", type=int, default=2, help="the folder's photos this many times over")
    args = parser.parse_args(argv)
    if not use_tree(args.tree, "feed_order"):
        return 1
    from facerun.face.images import iter_images
    from facerun.face.library import iter_photo_faces

    class StandIn:
        def detect(self, rgb):
            time.sleep(args.ms / 1000)
            return []

    paths = iter_images([args.folder]) * args.repeat
    if not paths:
        print(f"feed_order: no photos in {args.folder}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    done = sum(1 for r in iter_photo_faces(paths, StandIn(), workers=args.workers) if r.ok)
    rate = done / (time.perf_counter() - start)
    print(f"{args.tree.resolve().name}: {rate:.1f} photos/s ({done} photos, {args.workers} "
          f"decoding threads, {args.ms:g} ms a photo)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
