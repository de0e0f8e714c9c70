"""The host's share of embedding faces, A/B across checkouts: aligning a face (`align.align_face`) and making an
embedder's input from 16 aligned crops (`Preprocess.apply`), the two numpy parts a library run that embeds spent its
post-processing and feeding threads on; and, in a tree that has it, cutting a face for the GPU to align
(`align.cut_face`, what is left of them on the host where the device aligns).

    python benchmarks/face_prep.py TREE PHOTO [--faces 100] [--rounds 5]

The faces: FACES similarity placements of the ArcFace template on PHOTO, 15 to 300 pixels across (log-uniform, a
fixed seed), rotated up to 0.4 radians. Prints the best round's ms a face and ms for 16 crops, and a digest of the
crops and inputs made, so two trees can be checked to give the same bytes.
TREE: a checkout's root (or a folder holding a `facerun` package: `git archive REV facerun | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
from feed_order import use_tree  # benchmarks/ is this script's folder, first on the path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("photo", type=Path)
    parser.add_argument("--faces", type=int, default=100, help="faces placed on the photo")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (the best is printed)")
    args = parser.parse_args(argv)
    if not use_tree(args.tree, "face_prep"):
        return 1
    from facerun.errors import FacerunError
    from facerun.face import align
    from facerun.face.images import load_image
    from facerun.zoo.card import Preprocess

    try:
        image = load_image(args.photo)
    except FacerunError as e:
        print(f"face_prep: {e}", file=sys.stderr)
        return 1
    h, w = image.shape[:2]
    rng = np.random.default_rng(1)
    marks = []
    for _ in range(args.faces):
        size, angle = np.exp(rng.uniform(np.log(15), np.log(300))), rng.uniform(-0.4, 0.4)
        turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        centre = rng.uniform(0.2, 0.8, 2) * (w, h)
        marks.append((align.ARCFACE_TEMPLATE - 56) @ turn.T * size / 56 + centre)
    prep = Preprocess((112, 112), (127.5,) * 3, (128.0,) * 3)

    def best(work) -> float:
        work()  # warm
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return min(times)

    crops = [align.align_face(image, m) for m in marks]
    batch = np.stack((crops * (-(-16 // len(crops))))[:16])
    face_s = best(lambda: [align.align_face(image, m) for m in marks]) / len(marks)
    input_s = best(lambda: prep.apply(batch))
    digest = hashlib.sha256(np.stack(crops).tobytes() + prep.apply(batch).tobytes()).hexdigest()[:16]
    cut = ""
    if hasattr(align, "cut_face"):  # the host's part where the GPU aligns (since stop 48)
        cut_s = best(lambda: [align.cut_face(image, m) for m in marks]) / len(marks)
        cut = f", cut for the GPU {1000 * cut_s:.3f} ms a face"
    print(f"{args.tree}: align {1000 * face_s:.3f} ms a face, embedder input {1000 * input_s:.3f} ms for 16, "
          f"bytes {digest}{cut}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
