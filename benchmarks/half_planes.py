"""Whole-run A/B of --precision f16 (Winograd's transformed inputs, weights and products stored as f16, the sums
f32) against f32: run medians over alternating rounds, the GPU time of each, and how far the f16 outputs are from
the f32 ones (largest difference against the output's range, smallest cosine of a row).

    python benchmarks/half_planes.py [MODEL[:BATCH] ...]    (default auraface-arch:1 auraface-arch:8
                                                          auraface-arch:16; needs a GPU adapter with shader-f16)
"""

from __future__ import annotations

import sys

import numpy as np
from ab import ab_main, alternating_runs

import facerun
from facerun.gpu.model import GpuModel
from facerun.gpu.tune import gpu_seconds

ROUNDS = 3
RUNS = 15  # per variant and round


def row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(a.shape[0], -1).astype(np.float64), b.reshape(b.shape[0], -1).astype(np.float64)
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)).min())


def ab(specs: list[tuple[str, int]]) -> None:
    models = {p: GpuModel(budget_mb=16384, precision=p) for p in ("f32", "f16")}
    for name, batch in specs:
        net = facerun.load(name, device="cpu")
        prog = net.program(net.default_shape(batch))
        x = np.random.default_rng(0).uniform(-1, 1, prog.input_shape).astype(np.float32)
        feeds = {prog.inputs[0][0]: x}
        gps = {p: m.compile(prog) for p, m in models.items()}
        medians = alternating_runs(gps, feeds, ROUNDS, RUNS)
        ref = gps["f32"].run(feeds)
        for label, gp in gps.items():
            out = gp.run(feeds)
            diff = max(float(np.abs(out[k] - ref[k]).max() / max(np.ptp(ref[k]), 1e-30)) for k in ref)
            cos = min(row_cosine(out[k], ref[k]) for k in ref)
            half = sum(d.kernel.half for d in gp.dispatches)
            print(f"{name}:{batch} {label:10s}  dispatches {len(gp.dispatches):4d} ({half:3d} half)  run "
                  f"{medians[label] * 1e3:7.3f} ms  gpu {gpu_seconds(gp, 10) * 1e3:7.3f} ms  "
                  f"maxdiff/range {diff:.1e}  min cosine {cos:.7f}", flush=True)


def main(argv=None) -> int:
    return ab_main(__doc__.splitlines()[0], ab, argv)


if __name__ == "__main__":
    sys.exit(main())
