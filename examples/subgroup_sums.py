"""Whole-run A/B of the fully connected layers' sums added up within subgroups first (subgroupAdd, one barrier)
against shared memory alone (a tree of seven barriers): run medians over alternating rounds, the GPU time of each
program, of its gemv dispatches alone, and how far apart the outputs are.

    python examples/subgroup_sums.py [MODEL[:BATCH] ...]    (default auraface-arch:1 auraface-arch:8
                                                            auraface-arch:16; needs a GPU adapter with `subgroup`)
"""

from __future__ import annotations

import dataclasses
import statistics
import sys

import numpy as np

import facerun
from facerun.errors import GpuError
from facerun.gpu.model import GpuModel
from facerun.gpu.tune import ab_main, alternating_runs, gpu_seconds

ROUNDS = 3
RUNS = 15  # per variant and round


def gemv_seconds(gp, repeat: int = 20, rounds: int = 7) -> float:
    """Device seconds of the program's gemv dispatches alone (a pass over them only, as examples/gpu_families.py)."""
    keep = [i for i, d in enumerate(gp.dispatches) if d.kernel.file == "gemv.wgsl"]
    recorded, handles = list(gp.recorded), list(gp.handles)
    try:
        gp.recorded = [recorded[i] for i in keep]
        gp.handles = [handles[i] for i in keep] if handles else []
        gp.time_passes(repeat)
        return statistics.median(gp.time_passes(repeat) / repeat for _ in range(rounds))
    finally:
        gp.recorded, gp.handles = recorded, handles


def ab(specs: list[tuple[str, int]]) -> None:
    model = GpuModel(budget_mb=16384)
    if not model.dev.limits.subgroups:
        raise GpuError(f"{model.dev.label} does not grant the subgroup feature (or FACERUN_GPU_SUBGROUPS=0)")
    limits = model.dev.limits
    for name, batch in specs:
        net = facerun.load(name, device="cpu")
        prog = net.program(net.default_shape(batch))
        x = np.random.default_rng(0).uniform(-1, 1, prog.input_shape).astype(np.float32)
        feeds = {prog.inputs[0][0]: x}
        gps = {}
        for label, subgroups in (("shared", False), ("subgroup", True)):
            model.dev.limits = dataclasses.replace(limits, subgroups=subgroups)  # the plans read it when compiled
            try:
                gps[label] = model.compile(prog)
            finally:
                model.dev.limits = limits
        medians = alternating_runs(gps, feeds, ROUNDS, RUNS)
        ref = gps["shared"].run(feeds)
        for label, gp in gps.items():
            out = gp.run(feeds)
            diff = max(float(np.abs(out[k] - ref[k]).max() / max(np.ptp(ref[k]), 1e-30)) for k in ref)
            count = sum(d.kernel.file == "gemv.wgsl" for d in gp.dispatches)
            print(f"{name}:{batch} {label:9s} gemv dispatches {count}  run {medians[label] * 1e3:7.3f} ms  "
                  f"gpu {gpu_seconds(gp, 10) * 1e3:7.3f} ms  gemv alone {gemv_seconds(gp) * 1e6:7.1f} us  "
                  f"maxdiff/range {diff:.1e}", flush=True)


def main(argv=None) -> int:
    return ab_main(__doc__.splitlines()[0], ab, argv)


if __name__ == "__main__":
    sys.exit(main())
