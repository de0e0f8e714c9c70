"""What the processes engine's fork server loads once, before it forks each library process (FACERUN_PROCESS_START).

A spawned library process spends seconds before its first photo on work that is the same in every process: the
imports (numpy, onnx, wgpu and facerun's own modules) and cffi parsing each C type wgpu's calls name (some 20-40 ms
a type: pycparser over every wgpu typedef, some forty types). The fork server does it once, ahead, and each process
forked from it starts with it done. Nothing here makes a device or a thread: a device and threads must not be forked.
"""

from __future__ import annotations

import contextlib

from ..gpu import device
from . import detect, embed, processes  # noqa: F401  (imported to be inherited by the forked processes)

# the C types a library process's device creation, pipelines, bind groups, passes and read-backs name, beyond
# those device.FFI_TYPES lists (wgpu-py's own, seen in a run: detector and embedder made, a photo run)
DEVICE_TYPES = (
    "WGPUAdapterInfo *", "WGPUAdapter[]", "WGPUBindGroupLayoutDescriptor *", "WGPUBindGroupLayoutEntry *",
    "WGPUBindGroupLayoutEntry[]", "WGPUBindGroupLayout[]", "WGPUBufferBindingLayout *", "WGPUBufferDescriptor *",
    "WGPUChainedStruct *", "WGPUCommandBuffer[1]", "WGPUDeviceDescriptor *", "WGPUDeviceExtras *",
    "WGPUDeviceLostCallbackInfo *", "WGPUFeatureName[]", "WGPUInstanceDescriptor *", "WGPUInstanceExtras *",
    "WGPULimits *", "WGPUNativeLimits *", "WGPUPipelineLayoutDescriptor *", "WGPUQueueDescriptor *",
    "WGPURequestDeviceCallbackInfo *", "WGPUUncapturedErrorCallbackInfo *", "char []",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
)


def _load() -> None:
    with contextlib.suppress(ImportError):
        import onnx  # noqa: F401  (the model loader's; its import alone takes most of a second)
        import wgpu.backends.wgpu_native  # noqa: F401
    device.parse_ffi_types(device.FFI_TYPES + DEVICE_TYPES)


_load()
