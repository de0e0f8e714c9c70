"""Wall-clock medians of the CPU interpreter at its default threads, one line per model: for A/B runs of two
checkouts, each in its own process (one process holding both would share one OpenBLAS and one lane pool).

    python benchmarks/cpu_wall.py MODEL[:BATCH]... [--size WxH] [--repeat 15]

    git worktree add ../before <commit>
    for tree in ../before .; do (cd /tmp && PYTHONPATH=$OLDPWD/$tree python $OLDPWD/benchmarks/cpu_wall.py \\
        face_detection_yunet_2023mar.onnx sface-arch sface-arch:16 auraface-arch auraface-arch:16); done

MODEL is an .onnx file, a known model's name or a replica name; detectors run at --size (default 640x480). Inputs are
uniform 0..255 (what the networks see from a photo). The first line says which facerun ran.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import facerun
from facerun import cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--size", default="640x480", help="WxH for detectors")
    ap.add_argument("--repeat", type=int, default=15, help="timed runs at batch 1 (a third of them, 3 at least, "
                                                           "for a batch)")
    args = ap.parse_args(argv)
    w, h = (int(v) for v in args.size.lower().split("x"))
    print(f"facerun {facerun.__file__.rsplit('/', 2)[0]}")
    for spec in args.models:
        name, _, batch = spec.partition(":")
        n = int(batch or 1)
        net = facerun.load(name)
        shape = (n, net.input_shape[1], h, w) if net.card.kind == "detector" else (n, *net.input_shape[1:])
        prog = net.program(shape) if n == 1 or net.batch_free else net.batch_program(shape)
        x = np.random.default_rng(0).uniform(0, 255, shape).astype(np.float32)
        feeds = {net.input_name: x}
        for _ in range(2):
            cpu.run_program(prog, feeds)
        times = []
        for _ in range(args.repeat if n == 1 else max(3, args.repeat // 3)):
            start = time.perf_counter()
            cpu.run_program(prog, feeds)
            times.append((time.perf_counter() - start) * 1e3)
        print(f"{spec} {shape[3]}x{shape[2]} batch {n}: {statistics.median(times):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
