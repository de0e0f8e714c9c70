"""The roofline of `bench models`: each row's arithmetic and memory traffic against the device's own peaks.

Counts, from the step program alone (the same for every path, so rows compare):
  FLOP   2 x the program's multiply-accumulates (program.py's `macs`: a convolution counted as the direct one, also
         where the GPU runs it as Winograd, which does fewer), times the batch.
  bytes  every step reads each value it takes once and writes its output once, and reads its parameters (weights,
         bias, scale, shift, PReLU slopes) once, all as float32; a view moves nothing. A batch of a program that
         takes batches reads the parameters once and the activations per item; a file fixed at batch 1, run item by
         item, everything per item. It counts the unfused program: a step a kernel folds into another still counts.
Achieved: TFLOP/s = FLOP / median time, GB/s = bytes / median time. Peaks: gpu/probe.py's (fp32 fma, copy
bandwidth), measured once per adapter and cached. Fractions are shown for rows on a GPU (facerun's and the peers',
which run on the same device); the CPU rows get achieved figures only (no CPU peak is measured).

facerun's own GPU rows also get the device's time for their program alone (`device_ms`: the dispatches repeated
in one submission, no upload or read-back) and the limit's fraction of it (`device_of_limit`): how far the kernels
are from the device, apart from moving the row's input and outputs.

Per kernel family (`--by-kernel`), the dispatches of the GPU rows' programs are timed family by family
(gpu/tune.subset_seconds, the families of gpu/tune.family_of), each family's steps counted as above, and held to the
limit that binds it: its time at the device's limits, max(FLOP / fma peak, bytes / bandwidth), over its measured
time; "compute" when its FLOP per byte is past the ridge point (peak FLOP/s over peak bytes/s), else "memory".
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .. import program as P
from .paths import MODEL_PATHS

PARAMETERS = ("weight", "bias", "scale", "shift")
KERNEL_PATHS = ("gpu", "gpu-batch", "gpu-f16", "gpu-batch-f16")  # the rows whose program --by-kernel breaks down
KERNEL_REPEAT = 6  # passes per timing of one family (the difference of 2 and 2+this many, best of 3)


# ------------------------------------------------------------------------------------------------------ counts


def step_bytes(prog: P.Program, st: P.Step) -> tuple[int, int]:
    """(activation bytes, parameter bytes) one step moves: each value it reads once (constant values count as
    parameters), its output once, its parameter arrays once."""
    values = prog.values
    act = params = 0
    for vid in dict.fromkeys(st.reads):
        v = values[vid]
        if values[v.base].kind == "const":  # a constant, or a view of one
            params += v.nbytes
        else:
            act += v.nbytes
    act += values[st.out].nbytes
    for name in PARAMETERS:
        a = getattr(st, name, None)
        if isinstance(a, np.ndarray):
            params += a.size * 4
    activation = getattr(st, "act", None)
    if isinstance(activation, P.Activation) and activation.slope is not None:
        params += np.asarray(activation.slope).size * 4
    return act, params


def program_bytes(prog: P.Program) -> tuple[int, int]:
    """(activation bytes, parameter bytes) of one run of `prog`."""
    act = params = 0
    for st in prog.steps:
        a, p = step_bytes(prog, st)
        act += a
        params += p
    return act, params


def run_bytes(net, shape: tuple, batch: int) -> int:
    """Bytes one run of `batch` items moves, counted on the batch-1 program of `shape` (see the module's doc)."""
    act, params = program_bytes(net.program(shape))
    if batch == 1:
        return act + params
    if getattr(net, "batch_free", False):
        return batch * act + params
    return batch * (act + params)


# -------------------------------------------------------------------------------------------------- fractions


def achieved(flop: float, nbytes: float, seconds: float) -> tuple[float, float]:
    """(TFLOP/s, GB/s)."""
    return flop / seconds / 1e12, nbytes / seconds / 1e9


def limit_seconds(flop: float, nbytes: float, peaks: dict) -> float:
    """The least time the work can take at the device's peaks."""
    return max(flop / (peaks["fma_tflops"] * 1e12), nbytes / (peaks["bandwidth_gbps"] * 1e9))


def bound(flop: float, nbytes: float, peaks: dict) -> str:
    """"compute" when the work's FLOP per byte is at or past the ridge point, else "memory"."""
    ridge = peaks["fma_tflops"] * 1e12 / (peaks["bandwidth_gbps"] * 1e9)
    return "compute" if nbytes == 0 or flop / nbytes >= ridge else "memory"


def annotate(rows: Iterable, peaks: dict | None) -> None:
    """Fill each timed row's tflops and gbps, and on GPU rows (with peaks) its fractions of the peaks."""
    for r in rows:
        if r.median_ms is None or not r.median_ms > 0:
            continue
        seconds = r.median_ms / 1e3
        if r.macs is not None:
            r.tflops = 2 * r.macs * r.batch / seconds / 1e12
        if r.bytes_per_run is not None:
            r.gbps = r.bytes_per_run / seconds / 1e9
        path = MODEL_PATHS.get(r.path)
        if peaks and path is not None and path.on_device:
            if r.tflops is not None:
                r.of_fma_peak = r.tflops / peaks["fma_tflops"]
            if r.gbps is not None:
                r.of_bandwidth_peak = r.gbps / peaks["bandwidth_gbps"]


def percent(f: float | None) -> str:
    if f is None:
        return "—"
    return f"{f:.0%}" if f >= 0.1 else f"{f:.1%}" if f >= 0.001 else "<0.1%"


def peaks_line(peaks: dict) -> str:
    """The header line: the device's peaks as probed."""
    f16 = f", f16 {peaks['f16_tflops']:.3g}" if peaks.get("f16_tflops") else ""
    return (f"fma {peaks['fma_tflops']:.3g} TFLOP/s fp32"
            f"{f16}, copy bandwidth {peaks['bandwidth_gbps']:.4g} GB/s, ridge "
            f"{peaks['fma_tflops'] * 1e3 / peaks['bandwidth_gbps']:.3g} FLOP/byte (facerun's probe kernels, "
            f"{peaks.get('measured', '?')})")


def device_cell(r) -> str:
    """'2.31 (3.1% of limit)' for a row with a device time, '—' otherwise."""
    if r.device_ms is None:
        return "—"
    limit = f" ({percent(r.device_of_limit)} of limit)" if r.device_of_limit is not None else ""
    return f"{r.device_ms:.3g}{limit}"


def roofline_cell(r) -> str:
    """'12% fma · 31% bw' (GPU rows), '—' otherwise."""
    if r.of_fma_peak is None and r.of_bandwidth_peak is None:
        return "—"
    return f"{percent(r.of_fma_peak)} fma · {percent(r.of_bandwidth_peak)} bw"


# ---------------------------------------------------------------------------------------------------- peaks


def device_peaks(device: dict, reprobe: bool = False) -> dict:
    """The probe's peaks as JSON for result.device["peaks"] (cached per adapter), or {"error": why}."""
    from ..errors import FacerunError
    from ..gpu import probe

    adapter = {k: device.get(k) for k in ("name", "driver", "backend")}
    try:
        return probe.peaks(adapter=adapter if adapter.get("name") else None, reprobe=reprobe).to_json()
    except FacerunError as e:
        return {"error": str(e)}


# ------------------------------------------------------------------------------------------------ by kernel


def kernel_program(case, path_name: str):
    """(net, program) that a GPU row of `path_name` runs in one submission, or None (item by item, no GPU)."""
    path = MODEL_PATHS[path_name]
    net = case.net_for(path)
    if net.gpu is None:
        return None
    if not path.batch:
        return net, net.program(case.x.shape)
    shape = (case.settings.batch,) + tuple(case.x.shape[1:])
    prog = net.program(shape) if net.batch_free else net.batch_program(shape)
    # None: a file fixed at batch 1 whose graph mixes its items runs them one by one (the gpu row's breakdown)
    return None if prog is None else (net, prog)


def by_kernel(gp, prog: P.Program, peaks: dict | None, repeat: int = KERNEL_REPEAT) -> dict:
    """The families of compiled program `gp` (of `prog`): dispatches, ms, share of the whole pass, FLOP and bytes
    of their steps, and the fraction of the limit that binds them."""
    from ..gpu import tune

    families = [tune.family_of(d) for d in gp.dispatches]
    main: dict[str, str] = {}  # node -> the family doing its step's work (a planned dispatch first)
    for d, f in zip(gp.dispatches, families):
        if d.node not in main or (d.plan is not None and main[d.node] in ("elementwise", "copy")):
            main[d.node] = f
        for node in d.also:  # a step made in this dispatch's pass (a depthwise after its 1x1)
            main.setdefault(node, f)
    whole = tune.subset_seconds(gp, [True] * len(families), repeat)
    out = []
    for family in dict.fromkeys(families):
        keep = [f == family for f in families]
        seconds = tune.subset_seconds(gp, keep, repeat)
        flop = nbytes = 0
        for st in prog.steps:
            if main.get(st.node) == family:
                flop += 2 * st.macs(prog)
                nbytes += sum(step_bytes(prog, st))
        row = {"family": family, "dispatches": sum(keep), "ms": seconds * 1e3,
               "share": seconds / whole if whole > 0 else None, "gflop": flop / 1e9, "mib": nbytes / (1 << 20),
               "flop_per_byte": flop / nbytes if nbytes else None}
        if peaks and seconds > 0:
            row["tflops"], row["gbps"] = achieved(flop, nbytes, seconds)
            row["bound"] = bound(flop, nbytes, peaks)
            row["of_limit"] = limit_seconds(flop, nbytes, peaks) / seconds
        out.append(row)
    out.sort(key=lambda r: -r["ms"])
    folded = sorted({st.node for st in prog.steps if st.node not in main})
    return {"dispatches": len(families), "pass_ms": whole * 1e3, "families": out, "folded_steps": len(folded)}


def _kernel_rows(result, cases: Iterable):
    """(row, path name, found) for each passing GPU row of KERNEL_PATHS whose program runs as one on a GpuModel:
    found is (compiled program, program), or the FacerunError that making it raised."""
    from ..errors import FacerunError

    rows = {r.key(): r for r in result.rows}
    for size, case in cases:
        for name in KERNEL_PATHS:
            batch = case.settings.batch if MODEL_PATHS[name].batch else 1
            row = rows.get((case.net.label, size, name, batch))
            if row is None or row.skipped or row.ok is False:
                continue
            try:
                found = kernel_program(case, name)
                if found is None:
                    continue
                net, prog = found
                model = getattr(net.gpu, "model", None)  # a runner of another kind (a test's stand-in): none
                if model is None:
                    continue
                yield row, name, (model.compile(prog), prog)
            except FacerunError as e:
                yield row, name, e


def kernel_breakdowns(result, cases: Iterable, peaks: dict | None) -> list[dict]:
    """One breakdown per GPU row of KERNEL_PATHS that ran on the GPU and passed: {model, size, path, batch,
    run_ms (the row's median), ...by_kernel}. `cases`: (size as the rows write it, bench._Case)."""
    from ..errors import FacerunError

    out = []
    for row, name, found in _kernel_rows(result, cases):
        try:
            if isinstance(found, FacerunError):
                raise found
            entry = by_kernel(*found, peaks)
        except FacerunError as e:
            entry = {"error": str(e)}
        out.append({"model": row.model, "size": row.size, "path": name, "batch": row.batch, "run_ms": row.median_ms,
                    **entry})
    return out


def device_times(result, cases: Iterable, peaks: dict) -> None:
    """Each passing facerun GPU row of KERNEL_PATHS: its program's device time (`device_ms`: the dispatches alone,
    gpu/tune.device_seconds) and the time its work takes at the device's peaks over that (`device_of_limit`). A
    row's median also holds the upload of its input and the read-back of its outputs, which at large batches of
    float32 images take more than the dispatches."""
    from ..errors import FacerunError
    from ..gpu import tune

    for row, _, found in _kernel_rows(result, cases):
        if isinstance(found, FacerunError):
            continue
        try:
            seconds = tune.device_seconds(found[0])
        except FacerunError:
            continue
        if seconds > 0:
            row.device_ms = seconds * 1e3
            if row.macs is not None and row.bytes_per_run is not None:
                row.device_of_limit = limit_seconds(2 * row.macs * row.batch, row.bytes_per_run, peaks) / seconds


def finish(result, settings, cases: Iterable) -> None:
    """After the rows: the probe's peaks in result.device["peaks"] (when a row ran on the GPU), every row's
    achieved figures and fractions, and with settings.by_kernel the kernel families of the GPU rows. `cases`:
    (size, bench._Case) of every model and size that ran."""
    on_device = [r for r in result.rows if not r.skipped and MODEL_PATHS.get(r.path) is not None
                 and MODEL_PATHS[r.path].on_device]
    peaks = None
    if on_device and result.device.get("name"):
        result.device["peaks"] = device_peaks(result.device, settings.reprobe)
        peaks = None if "error" in result.device["peaks"] else result.device["peaks"]
    annotate(result.rows, peaks)
    if peaks:
        device_times(result, cases, peaks)
    if settings.by_kernel:
        result.kernels = kernel_breakdowns(result, cases, peaks)
