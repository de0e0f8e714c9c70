"""The library run's pipeline against a simulated GPU detector, A/B across checkouts: the real loop (decoding threads,
buckets, batches in flight, post-processing threads, the reorder buffer) with every cost of the detector stood in,
so the machinery's own waits show on a small machine as they would on a large one.

    python benchmarks/pipeline_sim.py TREE FOLDER [--decode-ms 10] [--feed-ms 1.0] [--device-ms 0.3]
                                      [--post-ms 0.4] [--batch 8] [--workers 12] [--repeat 4]

The stand-in: `prepare` sleeps DECODE_MS a photo on average, in proportion to its pixels (a decode in C, the lock
let go), after the real decode of the (small) photo; a submission holds the interpreter lock for FEED_MS a photo
(the feeding thread's Python) and queues DEVICE_MS a photo on a simulated device that runs one submission after
another; reading it back waits for it; `faces_from` holds the lock for a time drawn exponentially about POST_MS (a
crowd's NMS takes many times a portrait's). Photos fall in buckets by their size times SCALE (as YuNet's 128-rounded
buckets of photos fitted to 1280 do for a folder of camera photos). Prints photos/s and the feeding thread's busy
time and waits a photo.
TREE: a checkout's root (or a folder holding a `facerun` package: `git archive REV facerun | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from feed_order import use_tree  # benchmarks/ is this script's folder, first on the path


def spin(seconds: float) -> None:
    """Python that holds the interpreter lock for `seconds` (as a feeding or post-processing thread's does)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Device:
    """Submissions run one after another, each `ms` a photo, from when it is both submitted and the device is free."""

    def __init__(self):
        self.free_at = 0.0
        self.lock = threading.Lock()

    def queue(self, seconds: float) -> float:
        with self.lock:
            self.free_at = max(self.free_at, time.perf_counter()) + seconds
            return self.free_at


def make_detector(base, args, area: float):
    @dataclass
    class Input:
        shape: tuple

    class Simulated(base):
        device = "gpu"

        def __init__(self):
            self.dev = Device()
            self.random = random.Random(0)

        def fit_size(self, width, height):
            return None

        def prepare(self, pixels, shrunk=None, photo_size=None):
            h, w = pixels.shape[:2]
            time.sleep(args.decode_ms / 1000 * h * w / area)  # a decode's time goes with the photo's pixels
            step = 128
            return Input((1, 3, -(-int(h * args.scale) // step) * step, -(-int(w * args.scale) // step) * step))

        def batch_key(self, prepared):
            return prepared.shape if args.batch > 1 else None

        def run_network(self, prepared):
            self.submit_networks([prepared])()
            return prepared

        def submit_networks(self, prepared):
            spin(args.feed_ms / 1000 * len(prepared))
            done_at = self.dev.queue(args.device_ms / 1000 * len(prepared))

            def finish():
                left = done_at - time.perf_counter()
                if left > 0:
                    time.sleep(left)
                return prepared

            return finish

        def faces_from(self, prepared):
            with self.dev.lock:
                seconds = self.random.expovariate(1000 / args.post_ms)  # a crowd takes many times the median
            spin(seconds)
            return []

    return Simulated()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--decode-ms", type=float, default=10.0, help="a photo's decode, the lock let go")
    parser.add_argument("--feed-ms", type=float, default=1.0, help="the feeding thread's Python a photo")
    parser.add_argument("--device-ms", type=float, default=0.3, help="the device's time a photo")
    parser.add_argument("--post-ms", type=float, default=0.4, help="post-processing's Python a photo")
    parser.add_argument("--batch", type=int, default=8, help="photos of one bucket in a submission")
    parser.add_argument("--scale", type=float, default=8.0, help="a photo's bucket: its size times this")
    parser.add_argument("--workers", type=int, default=12, help="decoding threads")
    parser.add_argument("--repeat", type=int, default=4, help="the folder's photos this many times over")
    args = parser.parse_args(argv)
    if not use_tree(args.tree, "pipeline_sim"):
        return 1
    from facerun.face.images import iter_images
    from facerun.face.library import LibraryStats, iter_photo_faces
    from facerun.face.photo_detector import PhotoDetector

    paths = iter_images([args.folder]) * args.repeat
    if not paths:
        print(f"pipeline_sim: no photos in {args.folder}", file=sys.stderr)
        return 1
    from PIL import Image

    sizes = [Image.open(p).size for p in paths[:len(paths) // args.repeat]]
    detector = make_detector(PhotoDetector, args, sum(w * h for w, h in sizes) / len(sizes))
    stats = LibraryStats()
    start = time.perf_counter()
    done = sum(1 for r in iter_photo_faces(paths, detector, workers=args.workers, stats=stats) if r.ok)
    wall = time.perf_counter() - start
    waits = getattr(stats.clock, "idle_ns", {})
    waited = " ".join(f"{k} {v / 1e6 / max(done, 1):.2f}" for k, v in waits.items())
    busy = stats.clock.total_ns() / 1e6 / max(done, 1)
    print(f"{args.tree.resolve().name}: {done / wall:.1f} photos/s ({done} photos; feeding busy {busy:.2f} ms a "
          f"photo; waiting on {waited or '-'} ms a photo)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
