"""facerun's GPU path: step programs run as WGSL compute kernels through wgpu-py.

    plan.py     kernel, tile, K split and grid of each step: pure functions of shapes and device limits
    kernels.py  the WGSL sources, their templates, op codes and parameter packing
    lower.py    program steps -> dispatches (through plan.py), no device needed
    memory.py   resident weights under a budget, buffer slots by lifetime, weight packing
    runner.py   GpuProgram: device objects, encode, submit, watch for errors, read back
    model.py    GpuModel: one model's compiled programs, the per-convolution mode
    photo.py    a photo on the device: its bytes laid out as the input, bucket programs masked to its size
    checked.py  the checked runner facerun.load gives a Net; device.py the one wgpu device; pace.py GPU pacing;
                tune.py timing

The API Net and the commands use:
    gpu_available() -> (bool, reason)        whether a usable adapter exists (creates the device on first use)
    gpu_runner(workload)(programs)           the checked runner (a CheckedGpu, a runner.Runner); GpuError: no GPU
    CheckedGpu.run(prog, feeds)              outputs by name, or None: run this one on the CPU (reason in .reason)
    GpuModel(budget_mb=None)                 one model's GPU side without the checks:
        .run(prog, inputs) -> dict           whole program on the device (GpuError on failure)
        .run_per_conv(prog, inputs) -> dict  the CPU interpreter with each convolution on the GPU
        .conv_hook(prog)                     the `conv=` hook of cpu.run_program
        .compile(prog) -> GpuProgram         the compiled program (its dispatches, plans, timing)
    describe_adapters(), adapter_reason(), allow_software(True), set_pace(concurrency, share)
"""

from ..errors import GpuError
from .checked import CheckedGpu, Disagreement, disagreement, gpu_runner
from .device import (
    adapter_reason,
    allow_software,
    broken_reason,
    describe_adapters,
    get_device,
    gpu_available,
    inject_failure,
)
from .model import DoesNotFit, GpuModel
from .pace import set_pace

__all__ = [
    "CheckedGpu",
    "Disagreement",
    "DoesNotFit",
    "GpuError",
    "GpuModel",
    "adapter_reason",
    "allow_software",
    "broken_reason",
    "describe_adapters",
    "disagreement",
    "get_device",
    "gpu_available",
    "gpu_runner",
    "inject_failure",
    "set_pace",
]
