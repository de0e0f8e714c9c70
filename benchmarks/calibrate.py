"""Identify's threshold, calibrated on the shared identity folders (FACERUN_DATA/faces/<identity>/; group/ and the
near copies of one frame left out): every pair of two photos' largest faces, genuine when both come from one folder,
impostor otherwise. Prints the false-match rate (impostor pairs at or above t) and the false non-match rate (genuine
pairs below t) over a range of t, the lowest t at the target false-match rate, and the same with mirror averaging
(each face embedded with its horizontal flip, the two summed and normalised), with the separation of the two
distributions (d' = |mean_g - mean_i| / sqrt((var_g + var_i) / 2)).

    python benchmarks/calibrate.py [--embedder mobilefacenet] [--rate 0.001]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("FACERUN_DATA", "/work/shared/data")) / "faces"
NEAR_COPIES = ("obama/obama-240p.jpg", "obama/obama-480p.jpg", "obama/obama-720p.jpg", "obama/obama_small.jpg")


def pairs(people: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cos = vectors @ vectors.T
    i, j = np.triu_indices(len(people), 1)
    same = people[i] == people[j]
    return cos[i, j][same], cos[i, j][~same]


def report(label: str, genuine: np.ndarray, impostor: np.ndarray, rate: float) -> float:
    d = abs(genuine.mean() - impostor.mean()) / np.sqrt((genuine.var() + impostor.var()) / 2)
    ordered = np.sort(impostor)[::-1]
    allowed = int(np.floor(rate * len(impostor)))  # impostor pairs that may reach t
    t = float(ordered[allowed] + 1e-6) if allowed < len(ordered) else float(ordered[-1])
    t = float(np.ceil(t * 100) / 100)  # to two decimals, upwards: the rate stays at or under the target
    fmr = float((impostor >= t).mean())
    fnmr = float((genuine < t).mean())
    print(f"{label}: {len(genuine)} genuine, {len(impostor)} impostor pairs; d' {d:.3f}; highest impostor "
          f"{impostor.max():.3f}; lowest genuine {genuine.min():.3f}")
    for probe in (0.25, 0.30, 0.35, 0.40, t):
        print(f"  t {probe:.2f}: false-match rate {(impostor >= probe).mean():.4f}  "
              f"false non-match rate {(genuine < probe).mean():.4f}")
    print(f"  at false-match rate <= {rate:g}: t = {t:.2f} (FMR {fmr:.4f}, FNMR {fnmr:.4f})")
    return t


def main() -> None:
    from facerun.face.detect import Detector
    from facerun.face.embed import Embedder
    from facerun.face.images import iter_images, load_image

    parser = argparse.ArgumentParser()
    parser.add_argument("--embedder", default="mobilefacenet")
    parser.add_argument("--rate", type=float, default=0.001)
    args = parser.parse_args()
    embedder = Embedder(args.embedder, device="cpu")
    detector = Detector(device="cpu")
    people, plain, mirrored = [], [], []
    for path in iter_images([DATA]):
        if path.parent.name == "group" or str(path.relative_to(DATA)) in NEAR_COPIES:
            continue
        image = load_image(path)
        faces = sorted(detector.detect(image), key=lambda f: -f.box[2] * f.box[3])
        if not faces:
            continue
        crop = embedder.align(image, faces[0].landmarks)
        both = embedder.embed(np.stack([crop, crop[:, ::-1]]))
        people.append(path.parent.name)
        plain.append(both[0])
        summed = both[0] + both[1]
        mirrored.append(summed / np.linalg.norm(summed))
    people = np.array(people)
    print(f"{embedder.name}: {len(people)} photos of {len(set(people))} people")
    report("plain", *pairs(people, np.stack(plain)), args.rate)
    report("mirror-averaged", *pairs(people, np.stack(mirrored)), args.rate)


if __name__ == "__main__":
    main()
