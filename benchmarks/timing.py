"""End-to-end timings against the peers, medians in one run (the README's detect and embed tables).

    python benchmarks/timing.py detect PHOTO [--repeat 20]
        facerun detect on the CPU and the GPU, and OpenCV's cv2.FaceDetectorYN, on one photo (decoded once)
    python benchmarks/timing.py embed MODEL [--batch 16] [--faces 64] [--repeat 5]
        faces per second embedding aligned 112x112 crops: facerun CPU, facerun GPU (one submission per batch),
        onnxruntime CPU (and its WebGPU provider when installed), batches of --batch

The GPU rows need a usable adapter (FACERUN_ALLOW_SOFTWARE=1 accepts a software one); missing peers are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import facerun


def median_ms(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def detect(args) -> list[tuple[str, float, str]]:
    from facerun.face.images import load_image

    rgb = load_image(args.photo)
    rows = []
    for device in ("cpu", "gpu"):
        try:
            det = facerun.Detector(device=device)
        except facerun.FacerunError as e:
            rows.append((f"facerun {device}", float("nan"), str(e)))
            continue
        faces = det.detect(rgb)
        ms = median_ms(lambda det=det: det.detect(rgb), args.repeat)
        rows.append((f"facerun {device}", ms, f"{len(faces)} faces, {det.device}"))
    try:
        import cv2

        from facerun.zoo.find import default_detector

        h, w = rgb.shape[:2]
        yn = cv2.FaceDetectorYN.create(str(default_detector()), "", (w, h), 0.6, 0.3, 5000)
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])
        n = len(yn.detect(bgr)[1] if yn.detect(bgr)[1] is not None else [])
        ms = median_ms(lambda: yn.detect(bgr), args.repeat)
        rows.append(("opencv FaceDetectorYN", ms, f"{n} faces, {cv2.getNumThreads()} threads"))
    except ImportError:
        rows.append(("opencv FaceDetectorYN", float("nan"), "opencv-python-headless not installed"))
    return rows


def embed(args) -> list[tuple[str, float, str]]:
    from facerun.bench import oracle
    from facerun.face.embed import Embedder

    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, size=(args.faces, 112, 112, 3), dtype=np.uint8)
    rows = []
    cpu = None
    for device in ("cpu", "gpu"):
        try:
            e = Embedder(args.model, device=device)
        except facerun.FacerunError as err:
            rows.append((f"facerun {device}", float("nan"), str(err)))
            continue
        cpu = cpu or e
        ms = median_ms(lambda e=e: e.embed(crops, batch=args.batch), args.repeat, warmup=1)
        rows.append((f"facerun {device}", ms, f"{e.device}"))
    x = cpu.preprocessing.apply(crops)
    for provider in ("cpu", "webgpu"):
        try:
            sess = oracle.session(cpu.net.path, provider=provider)
        except facerun.FacerunError as err:
            rows.append((f"onnxruntime {provider}", float("nan"), str(err)))
            continue
        step = args.batch if cpu.net.batch_free else 1  # a file fixed at batch 1 runs a face at a time

        def run(sess=sess, name=cpu.net.input_name, step=step):
            return [oracle.run(sess, {name: x[i : i + step]}) for i in range(0, len(x), step)]

        rows.append((f"onnxruntime {provider}", median_ms(run, args.repeat, warmup=1), ""))
    return [(label, ms, f"{args.faces / ms * 1e3:.0f} faces/s" + (f"; {note}" if note else ""))
            for label, ms, note in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="job", required=True)
    d = sub.add_parser("detect")
    d.add_argument("photo")
    d.add_argument("--repeat", type=int, default=20)
    e = sub.add_parser("embed")
    e.add_argument("model")
    e.add_argument("--batch", type=int, default=16)
    e.add_argument("--faces", type=int, default=64)
    e.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = detect(args) if args.job == "detect" else embed(args)
    unit = "median ms" if args.job == "detect" else f"median ms for {args.faces} faces"
    print(f"{'path':<24} {unit:>22}  note")
    for label, ms, note in rows:
        print(f"{label:<24} {ms:>22.2f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
