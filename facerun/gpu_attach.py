"""Attaching the WGSL device path to a Net: checked against the CPU interpreter first, dropped on a device error.

(Interim: the runner in facerun/gpu/ is being written; until it lands every attach fails with a GpuError.)
"""

from __future__ import annotations

from .errors import GpuError

_ALLOW_SOFTWARE: bool | None = None


def set_allow_software(allow: bool = True) -> None:
    """The CLI's --allow-software: accept llvmpipe/lavapipe, WARP or SwiftShader (FACERUN_ALLOW_SOFTWARE=1 too)."""
    global _ALLOW_SOFTWARE
    _ALLOW_SOFTWARE = allow


def attach(net, required: bool) -> None:
    """Give `net` the GPU path. required=True (device "gpu") raises GpuError when the GPU cannot be used;
    otherwise ("auto") the net stays on the CPU and `net.gpu_reason` says why."""
    reason = "the GPU path is not available in this build yet"
    net.gpu = None
    net.gpu_reason = reason
    if required:
        raise GpuError(reason)


def first_departing_gpu_step(net, x):
    raise GpuError("the GPU path is not available in this build yet")
