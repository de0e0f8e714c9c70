"""Time the GPU kernels of a program, to choose tiles and splits by measurement (`facerun tune`).

For each distinct convolution: the planned kernel's time and rate, and the time of other tiles asked for (and of the
planned tile without its K split). Then the whole program: its GPU time (dispatches only, repeated in one
submission), a full run (input upload, dispatches, read-back) as `run` does it, and the host time to encode it.
Everything goes through GpuModel.compile and GpuProgram's public measuring calls.

`python -m facerun.gpu.tune` is the same as `facerun tune`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
import time

import numpy as np

from .. import program as P
from .lower import conv_shape
from .model import GpuModel, one_conv_program
from .plan import ConvPlan, GemmPlan, PlanError, WinogradPlan, plan_conv
from .replay import Replay
from .runner import GpuProgram


def gpu_seconds(gp: GpuProgram, repeat: int) -> float:
    """Seconds of device time for one pass over the program's dispatches (repeated in one submission, the
    submission overhead taken out by the difference between two repeat counts)."""
    gp.time_passes(1)  # warm up (pipelines, clocks)
    few = min(gp.time_passes(2) for _ in range(3))
    many = min(gp.time_passes(2 + repeat) for _ in range(3))
    return max(0.0, (many - few) / repeat)


def family_of(d) -> str:
    """The kernel family a dispatch belongs to (what `bench models --by-kernel` and benchmarks/gpu_families.py group
    by): a convolution's by its plan (Winograd's transforms and products together, a split's reduce with its tiled
    pass, a head group's separable pass: "heads"), the rest by kernel source (unary and binary: "elementwise")."""
    plan = d.plan
    if isinstance(plan, WinogradPlan):
        return f"winograd F({plan.m}x{plan.m})"
    if isinstance(plan, ConvPlan):
        if plan.kernel == "tiled":
            return "tiled 1x1" if plan.pointwise else "tiled im2col"
        return plan.kernel  # direct, depthwise
    if isinstance(plan, GemmPlan):
        return plan.kernel if plan.kernel == "gemv" else "tiled 1x1"
    stem = d.kernel.stem
    if stem == "separable" and dict(d.kernel.subst).get("HEADS"):
        return "heads"
    return "elementwise" if stem in ("unary", "binary") else stem


DEVICE_TARGET_S = 0.03  # device work in a timing's longer submission: well past the jitter of a submission's own cost


def device_seconds(gp: GpuProgram, rounds: int = 3) -> float:
    """gpu_seconds with the repeat count sized to the program (about DEVICE_TARGET_S of passes in the longer
    submission, so the jitter of a submission's fixed cost, a tenth of a millisecond or more, stays a few percent of
    what is measured), the median of `rounds` such timings; a program long enough to be timed so with 4 passes is
    timed once, and one whose single pass takes DEVICE_TARGET_S or more by three passes against one."""
    first = gp.time_passes(1)  # also the warm-up: one pass and a submission's cost, at most
    if first >= DEVICE_TARGET_S:  # a long pass (a software adapter's): the submission's cost is lost in it
        return max(0.0, (gp.time_passes(3) - gp.time_passes(1)) / 2)
    est = gpu_seconds(gp, 4)
    if est * 4 >= DEVICE_TARGET_S:
        return est
    repeat = min(400, max(4, math.ceil(DEVICE_TARGET_S / max(est, 1e-6))))
    return statistics.median(gpu_seconds(gp, repeat) for _ in range(rounds))


def subset_seconds(gp: GpuProgram, keep: list[bool], repeat: int) -> float:
    """gpu_seconds of a pass over only the dispatches i with keep[i]. A pass with dispatches left out computes
    nothing meaningful; only its time is of use."""
    with gp.lock:
        gp.current()  # rebinds now if the arena grew, so the lists swapped below are the ones timed
    recorded, replay = gp.recorded, gp.replay
    gp.recorded = [r for r, k in zip(recorded, keep) if k]
    if replay is not None:  # the list a pass is encoded from (replay.py), made over the kept dispatches
        gp.replay = Replay(gp.recorded, gp.outputs, gp.prog.values, gp.buffers, gp.native)
    try:
        return gpu_seconds(gp, repeat)
    finally:
        gp.recorded, gp.replay = recorded, replay


def conv_rows(model: GpuModel, prog: P.Program, repeat: int, tiles: list[str]) -> list[dict]:
    """One row per distinct convolution of `prog` (shape, count), with the time of each variant."""
    seen: dict[tuple, dict] = {}
    for st in prog.steps:
        if not isinstance(st, P.Conv):
            continue
        xshape = prog.values[st.x].shape
        key = (xshape, st.weight.shape, st.groups, st.stride, st.pads, st.dilation)
        if key in seen:
            seen[key]["count"] += 1
            continue
        one = one_conv_program(prog, dataclasses.replace(st, residual=None))
        macs = one.macs
        variants: list[tuple[str, dict | None]] = [("planned", None)]
        winograd = _winograd_applies(conv_shape(one, one.steps[0]), model)
        if winograd:  # a 3x3 at stride 1: timed both ways
            variants += [("im2col", {"force_winograd": False}), ("winograd F(2x2)", {"force_winograd": 2}),
                         ("winograd F(4x4)", {"force_winograd": 4})]
        variants += [(f"tile {name}", {"force_tile": name}) for name in tiles]
        if tiles:
            variants.append(("planned, no split", {"force_splits": 1}))
        if tiles and winograd:  # the tiles of Winograd's products, in either form
            for form in (2, 4):
                variants += [(f"winograd F({form}x{form}) tile {name}", {"force_winograd": form, "force_tile": name})
                             for name in tiles]
                variants.append((f"winograd F({form}x{form}), no split", {"force_winograd": form, "force_splits": 1}))
        row = {"node": st.node, "input": list(xshape), "weight": list(st.weight.shape), "groups": st.groups,
               "stride": list(st.stride), "macs": macs, "count": 1, "variants": []}
        for label, force in variants:
            try:
                gp = model.compile(one, force)
            except Exception as e:  # a variant the shape does not take
                row["variants"].append({"variant": label, "error": str(e)})
                continue
            t = gpu_seconds(gp, repeat)
            row["variants"].append({"variant": label, "plan": gp.conv_plans[0][1], "us": t * 1e6,
                                    "tflops": 2 * macs / t / 1e12 if t > 0 else None})
        seen[key] = row
    return list(seen.values())


def _winograd_applies(shape, model: GpuModel) -> bool:
    try:
        return plan_conv(shape, model.dev.limits, force_winograd=True).kernel == "winograd"
    except PlanError:
        return False


def program_row(model: GpuModel, prog: P.Program, repeat: int, force: dict | None = None) -> dict:
    """The whole program: dispatches, kernels, GPU time, run time (median, min), encoding time, device memory.
    `force`: every convolution's plan forced so (GpuModel.compile)."""
    gp = model.compile(prog, force)
    feeds = {name: np.random.default_rng(0).uniform(-1, 1, prog.values[vid].shape).astype(np.float32)
             for name, vid in prog.inputs}
    gp.run(feeds)
    gpu_t = gpu_seconds(gp, max(3, repeat // 4))
    runs = []
    for _ in range(max(5, repeat)):
        t = time.perf_counter()
        gp.run(feeds)
        runs.append(time.perf_counter() - t)
    return {"dispatches": len(gp.dispatches), "kernels": dict(gp.kernels), "gpu_ms": gpu_t * 1e3,
            "run_ms_median": float(np.median(runs)) * 1e3, "run_ms_min": min(runs) * 1e3,
            "encode_ms": gp.time_encoding() * 1e3, "tflops_gpu": 2 * prog.macs / gpu_t / 1e12 if gpu_t > 0 else None,
            "device_mib": (gp.arena.device_bytes + gp.device_bytes) / (1 << 20),  # its buffers are the arena's
            "weights_mib": model.resident_bytes / (1 << 20)}


WARM_UP_S = 0.5  # passes over the whole program before any timing: a GPU idles at low clocks until it is kept busy


def warm_up(model: GpuModel, prog: P.Program, seconds: float = WARM_UP_S) -> None:
    """Keep the GPU busy with `prog` for `seconds`, so the first row is not timed while the clocks rise (single layers
    still vary widely between identical variants on an H200: whole programs are what to compare)."""
    gp = model.compile(prog)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        gp.time_passes(4)


def tune(prog: P.Program, repeat: int = 20, tiles: list[str] | None = None, convs: bool = True,
         model: GpuModel | None = None, force: dict | None = None) -> dict:
    """The timing report of `prog`: {"device", "shape", "gmacs", "convs" (unless convs=False), "program"}; `force`
    applies to the whole program's row."""
    model = model or GpuModel()
    report = {"device": model.device_name, "shape": list(prog.input_shape), "gmacs": prog.macs / 1e9}
    warm_up(model, prog)
    # the whole program first: the variants' packed weights (one set per tile) can outgrow the resident-weight
    # budget, and a program timed after them would upload its weights for every run
    whole = program_row(model, prog, repeat, force)
    if convs:
        report["convs"] = conv_rows(model, prog, repeat, list(tiles or []))
    report["program"] = whole
    return report


if __name__ == "__main__":
    import sys

    from ..cli import main

    main(["tune", *sys.argv[1:]], prog_name="facerun")
