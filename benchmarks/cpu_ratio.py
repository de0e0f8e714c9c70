"""Ratios of facerun's CPU interpreter to its peers (the README's CPU tables).

    python benchmarks/cpu_ratio.py MODEL[:BATCH]... [--size WxH] [--repeat 7] [--reference] [--threads N]
        facerun's CPU interpreter against onnxruntime, the same input, runs interleaved
    python benchmarks/cpu_ratio.py --detect PHOTO [--repeat 15] [--reference] [--threads N]
        facerun detect (CPU) against OpenCV's cv2.FaceDetectorYN on one photo, decoded once

MODEL is an .onnx file, a known model's name or a replica name (sface-arch, auraface-arch:16, ...). By default both
sides run on one thread (set before numpy loads) and time is the process's CPU time, so other work on a shared machine
adds little; medians. --threads N gives every side N threads (facerun's lanes and OpenBLAS, onnxruntime's intra-op
pool, OpenCV's) and times wall clock, with a `one-lane` row: facerun built without lanes, whose products then get
OpenBLAS's N threads (the interpreter as it ran before lanes); the sides share one process, so each waits 0.25 s for
the last one's threads to stop spinning (for A/B figures of two checkouts, benchmarks/cpu_wall.py runs one process
each). --reference adds the plain NCHW reference interpreter (what ran before the fast path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _threads_asked(argv: list[str]) -> int:
    """--threads N, read before numpy loads (OpenBLAS takes its thread count from the environment at load)."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


THREADS = _threads_asked(sys.argv[1:])
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))
os.environ.setdefault("FACERUN_CPU_THREADS", str(THREADS))

import numpy as np  # noqa: E402

import facerun  # noqa: E402
from facerun import cpu  # noqa: E402


def medians(runs: dict, repeat: int) -> dict[str, float]:
    """Median ms of each callable (CPU time on one thread, wall clock on more), run interleaved so a change of load
    hits every row alike."""
    clock = time.process_time if THREADS == 1 else time.perf_counter
    for fn in runs.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            if THREADS > 1:  # the last side's threads may still spin (OpenBLAS's ~0.1 s, onnxruntime's, OpenCV's):
                time.sleep(0.25)  # let them park, and give this side's threads one untimed run
                fn()
            t = clock()
            fn()
            times[k].append((clock() - t) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def _one_lane(build):
    """What `build()` makes with lanes off (the interpreter as it was before them)."""
    from facerun.cpu import lanes

    kept = lanes.MAX_LANES
    lanes.MAX_LANES = 1
    try:
        return build()
    finally:
        lanes.MAX_LANES = kept


def networks(args) -> list[str]:
    lines = []
    for spec in args.models:
        name, _, batch = spec.partition(":")
        net = facerun.load(name)
        n = int(batch or 1)
        declared = net.input_shape[2:]
        if None in declared or (args.size and net.card.kind == "detector"):  # detectors run at any size
            w, h = (int(v) for v in (args.size or "640x480").lower().split("x"))
            shape = (n, net.input_shape[1], h, w)
        else:
            shape = (n, net.input_shape[1], *declared)
        prog = net.program(shape) if n == 1 or net.batch_free else net.batch_program(shape)
        if prog is None:
            lines.append(f"{spec}: no batch program")
            continue
        lines.append(_line(f"{net.label} {shape[3]}x{shape[2]} batch {n}", _time_network(args, net, prog, shape),
                           "onnxruntime"))
    return lines


def _time_network(args, net, prog, shape) -> dict[str, float]:
    from facerun.bench import oracle
    from facerun.cpu import interpreter

    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    feeds = {net.input_name: x}
    sess = oracle.session(net.path, threads=THREADS)
    name = sess.get_inputs()[0].name
    runs = {"facerun": lambda: cpu.run_program(prog, feeds), "onnxruntime": lambda: sess.run(None, {name: x})}
    if THREADS > 1:
        before = _one_lane(lambda: interpreter.Executable(prog))
        runs["one-lane"] = lambda: before.run(feeds)
    if args.reference:
        runs["reference"] = lambda: cpu.run_program(prog, feeds, reference=True)
    return medians(runs, args.repeat if shape[0] == 1 else max(3, args.repeat // 3))


def detect(args) -> list[str]:
    import cv2

    from facerun.face.images import load_image
    from facerun.zoo.find import default_detector

    cv2.setNumThreads(THREADS)
    rgb = load_image(args.detect)
    h, w = rgb.shape[:2]
    det = facerun.Detector(device="cpu")
    yn = cv2.FaceDetectorYN.create(str(default_detector()), "", (w, h), 0.6, 0.3, 5000)
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    runs = {"facerun": lambda: det.detect(rgb), "opencv": lambda: yn.detect(bgr)}
    if THREADS > 1:
        before = facerun.Detector(device="cpu")
        _one_lane(lambda: before.detect(rgb))  # its program and executable made now, with lanes off
        runs["one-lane"] = lambda: before.detect(rgb)
    if args.reference:
        def reference():
            os.environ["FACERUN_CPU_REFERENCE"] = "1"
            try:
                det.detect(rgb)
            finally:
                del os.environ["FACERUN_CPU_REFERENCE"]

        runs["reference"] = reference
    return [_line(f"detect {w}x{h}", medians(runs, args.repeat), "opencv")]


def _line(label: str, got: dict[str, float], peer: str) -> str:
    cells = "  ".join(f"{k} {v:.1f} ms" for k, v in got.items())
    return f"{label}: {cells}  ratio {got['facerun'] / got[peer]:.2f}x"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--size", help="WxH for detectors (default: the file's own size, else 640x480)")
    ap.add_argument("--detect", metavar="PHOTO")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="threads for every side (default 1: CPU time)")
    args = ap.parse_args(argv)
    if not args.models and not args.detect:
        ap.error("give MODEL(s) or --detect PHOTO")
    lines = (networks(args) if args.models else []) + (detect(args) if args.detect else [])
    clock = "one thread, CPU time" if THREADS == 1 else f"{THREADS} threads, wall clock"
    print(f"{clock}, medians of {args.repeat}; load {os.getloadavg()[0]:.1f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
