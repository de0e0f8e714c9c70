"""Process-wide counts of the costly one-off work (programs compiled, GPU pipelines created, agreement checks run),
so a benchmark can show what a run of many photo sizes paid for. Counting is all this module does.

Names in use:
    programs_compiled       step programs compiled from the ONNX graph (one per input shape, net.py)
    programs_evicted        step programs dropped from a model's cache to stay under its budget
    separable_checks        seeded checks that a fixed-batch file's batch program keeps its items apart (net.py)
    gpu_programs_compiled   programs lowered onto the device: plans, parameters, bind groups (gpu/model.py)
    gpu_programs_evicted    compiled GPU programs dropped to stay under the device budget
    gpu_arena_grown         a model's shared device buffers replaced by larger ones (gpu/arena.py)
    gpu_bind_groups_created bind groups made over the arena's buffers (a new size mostly finds its own)
    pipelines_created       WGSL compute pipelines created (one per kernel variant and device, gpu/device.py)
    trusted_modules         of those, compiled without runtime bounds checks
    gpu_checks              a model's agreement check: the whole network at batch 1 (one per model and device,
                            gpu/checked.py); its parts are timed as gpu_checks_cpu, _gpu and _layers
    gpu_checks_kept         a model's check taken from an earlier process's that passed (gpu/verdicts.py), instead
                            of running it; gpu_checks_written: such findings written to facerun's cache
    gpu_variant_checks      a later program's check of kernel variants it needs that were not checked yet
    gpu_layer_checks        single-layer agreement runs (in the model's check, for the variants of the programs
                            it expects, and in variant checks)
    ffi_types_parsed        (seconds only) the C type names of wgpu's calls parsed when a device is made
    garbage_collection      (bench --photos, seconds only) Python's cyclic garbage collector during a library run
    device_probes           the device's peaks measured by the probe kernels (gpu/probe.py; cached per adapter),
                            their dispatches counted as device_probe_dispatches

Each name may also carry the seconds spent on it (`timed(name)`), counted under `name + "_s"`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager

_counts: Counter = Counter()
_lock = threading.Lock()


def bump(name: str, by: int = 1) -> None:
    with _lock:
        _counts[name] += by


@contextmanager
def timed(name: str):
    """Count the seconds of the block under `name + "_s"` (summed over threads)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        bump(name + "_s", time.perf_counter() - start)


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def since(before: dict[str, int]) -> dict[str, int]:
    """What was counted after `before` (a snapshot()), by name; names not counted since are absent."""
    now = snapshot()
    return {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}
