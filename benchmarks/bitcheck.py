"""GPU outputs of a fixed set of models and inputs, saved to .npz, to show a refactor left them bit-identical.

    FACERUN_ALLOW_SOFTWARE=1 python benchmarks/bitcheck.py OUT.npz            # run the set, save every output
    python benchmarks/bitcheck.py --compare BEFORE.npz AFTER.npz              # np.array_equal on every array

The set: YuNet 2023mar on real photos through the Detector (laid out on the device; one photo masked in a larger
bucket's program), YuNet at two blob sizes through Net.run, MobileFaceNet at batch 1 and 4, the sface-arch replica,
and SCRFD (det_500m) on a photo. Each net must still be on the GPU at the end, or the run fails: a silent CPU
fallback would compare the CPU with itself. Only the public API is used, so the script runs on any tree.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("FACERUN_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
MODELS = Path(os.environ.get("FACERUN_MODELS") or DATA.parent / "models")


def photos(n: int) -> list[np.ndarray]:
    from facerun.face.images import load_image

    files = sorted((DATA / "wider" / "images").rglob("*.jpg"))[:n]
    return [load_image(f) for f in files]


def seeded(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def on_gpu(what: str, device: str) -> None:
    if device == "cpu":
        sys.exit(f"error: {what} ran on the CPU: the comparison would say nothing about the GPU")


def run_set() -> dict[str, np.ndarray]:
    import facerun
    from facerun.face.detect import Detector

    out: dict[str, np.ndarray] = {}

    def keep(prefix: str, outputs) -> None:
        for name, value in outputs.items():
            out[f"{prefix}/{name}"] = np.asarray(value)

    # YuNet through the Detector: photos laid out on the device, shrunk to 480 wide, so sizes fall in buckets
    det = Detector("yunet-2023mar", device="gpu", max_side=480)
    pics = photos(4)
    rng = np.random.default_rng(9)
    odd = rng.integers(0, 256, (200, 300, 3), dtype=np.uint8)  # pads to 224x320: run masked in a 256x384 program
    odd[40:160, 100:220] = 200
    for i, rgb in enumerate(pics + [odd]):
        prepared = det.run_network(det.prepare(rgb))
        keep(f"yunet-photo{i}", prepared.outputs)
        faces = det.faces_from(prepared)
        out[f"yunet-photo{i}/faces"] = np.array([[f.score, *f.box] for f in faces], np.float32).reshape(-1, 5)
    on_gpu("the YuNet detector", det.device)

    yunet = facerun.load("yunet-2023mar", device="gpu")
    for h, w in ((320, 320), (480, 640)):
        keep(f"yunet-blob{h}x{w}", yunet.run(seeded((1, 3, h, w), 3) * 127 + 128))
    on_gpu("YuNet", yunet.device)

    mfn = facerun.load(str(MODELS / "MobileFaceNet.onnx"), device="gpu")
    for b in (1, 4):
        keep(f"mobilefacenet-b{b}", mfn.run_batch(seeded((b, 3, 112, 112), 11 + b)))
    on_gpu("MobileFaceNet", mfn.device)

    sface = facerun.load("sface-arch", device="gpu")
    keep("sface-arch", sface.run(seeded((1, 3, 112, 112), 21)))
    on_gpu("sface-arch", sface.device)

    scrfd = Detector(str(MODELS / "det_500m.onnx"), device="gpu")
    prepared = scrfd.run_network(scrfd.prepare(pics[0]))
    keep("scrfd-photo0", prepared.outputs)
    on_gpu("SCRFD", scrfd.device)
    return out


def compare(a_path: str, b_path: str) -> int:
    a, b = np.load(a_path), np.load(b_path)
    if set(a.files) != set(b.files):
        print(f"different arrays: only before {sorted(set(a.files) - set(b.files))}, "
              f"only after {sorted(set(b.files) - set(a.files))}")
        return 1
    differ = [k for k in sorted(a.files) if not np.array_equal(a[k], b[k])]
    for k in differ:
        print(f"DIFFERS {k}: max abs {float(np.max(np.abs(a[k].astype(np.float64) - b[k]))):.3g}")
    print(f"{len(a.files) - len(differ)}/{len(a.files)} arrays bit-identical (np.array_equal)")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--compare", action="store_true")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.paths)
    out = run_set()
    np.savez(args.paths[0], **out)
    print(f"{len(out)} arrays written to {args.paths[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
