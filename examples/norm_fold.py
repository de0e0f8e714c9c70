"""Whole-run A/B of the batch norms folded into Winograd's input transform: each model's program with the fold (as
facerun runs it) against the same program with every norm a dispatch of its own; run medians over alternating
rounds, and the GPU time of each.

    python examples/norm_fold.py [MODEL[:BATCH] ...]      (default auraface-arch:1 auraface-arch:8
                                                           auraface-arch:16; needs a GPU adapter)

The unfolded form is made by hiding the norms from the lowering (lower.prologues returning none): a measuring tool,
not a way to run a model.
"""

from __future__ import annotations

import sys

import numpy as np

import facerun
from facerun.gpu import lower
from facerun.gpu.model import GpuModel
from facerun.gpu.tune import ab_main, alternating_runs, gpu_seconds

ROUNDS = 3
RUNS = 15  # per variant and round
FOLDING = lower.prologues


def compiled(model: GpuModel, prog, fold: bool):
    lower.prologues = FOLDING if fold else (lambda prog: {})
    try:
        return model._compile(prog, None)  # uncached: each variant its own program
    finally:
        lower.prologues = FOLDING


def ab(specs: list[tuple[str, int]]) -> None:
    model = GpuModel(budget_mb=16384)  # both variants' weights stay resident
    for name, batch in specs:
        net = facerun.load(name, device="cpu")
        prog = net.program(net.default_shape(batch))
        x = np.random.default_rng(0).uniform(-1, 1, prog.input_shape).astype(np.float32)
        feeds = {prog.inputs[0][0]: x}
        gps = {"folded": compiled(model, prog, True), "unfolded": compiled(model, prog, False)}
        medians = alternating_runs(gps, feeds, ROUNDS, RUNS)
        ref = gps["unfolded"].run(feeds)
        folds = len(FOLDING(prog))
        for label, gp in gps.items():
            out = gp.run(feeds)
            diff = max(float(np.abs(out[k] - ref[k]).max()) for k in ref)
            run_ms = medians[label] * 1e3
            print(f"{name}:{batch} {label:9s} dispatches {len(gp.dispatches):4d}  run {run_ms:7.3f} ms  "
                  f"gpu {gpu_seconds(gp, 10) * 1e3:7.3f} ms  maxdiff {diff:.1e}  ({folds} norms before convs)",
                  flush=True)


def main(argv=None) -> int:
    return ab_main(__doc__.splitlines()[0], ab, argv)


if __name__ == "__main__":
    sys.exit(main())
