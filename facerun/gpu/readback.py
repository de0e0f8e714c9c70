"""Reading a run's staging buffer back: map, wait, copy, unmap.

wgpu-py's map_sync first submits an empty command buffer (a guard for buffers never written by a submission, which
a run's staging buffer always is) and then waits for its poll thread to see the mapping done, a hand-off between
threads on every run. Here the mapping is asked of wgpu-native directly and the device is polled on the calling
thread until it completes; where this wgpu build lacks the calls, wgpu-py's own path is used.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import phases


class _Native:
    """wgpu-native's mapping calls, with one callback per thread (a run holds its program's lock while reading)."""

    def __init__(self):
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.local = threading.local()
        # fail now, not on the first run, if a name is missing
        self.calls = (lib.wgpuBufferMapAsync, lib.wgpuDevicePoll, lib.wgpuBufferGetConstMappedRange,
                      lib.wgpuBufferGetMappedRange, lib.wgpuBufferUnmap, lib.WGPUMapMode_Read, lib.WGPUMapMode_Write,
                      lib.WGPUMapAsyncStatus_Success, lib.WGPUCallbackMode_AllowProcessEvents)

    def poll(self, device, wait: bool = False) -> None:
        """Let the device run the callbacks of what completed (waiting for all submitted work when `wait`)."""
        self.lib.wgpuDevicePoll(device._internal, wait, self.ffi.NULL)

    def _callback(self):
        cb = getattr(self.local, "cb", None)
        if cb is None:
            ffi, lib = self.ffi, self.lib
            state = {"status": None}
            info = ffi.new("WGPUBufferMapCallbackInfo *")

            # the callback's C type taken from the struct's field: cffi parses a type named by a string once per
            # process, and that costs 40-90 ms (pycparser over all of wgpu's typedefs), on the first photo
            @ffi.callback(ffi.typeof(info.callback))
            def done(status, message, user1, user2):
                state["status"] = int(status)

            info.mode = lib.WGPUCallbackMode_AllowProcessEvents
            info.callback = done
            cb = self.local.cb = (state, done, info)
        return cb

    def read(self, device, buffer, nbytes: int, index: int | None = None) -> np.ndarray:
        ffi, lib = self.ffi, self.lib
        state, _, info = self._callback()
        state["status"] = None
        handle = buffer._internal
        # waiting on the submission that wrote the buffer, not the last one (a later one may still be running)
        until = ffi.NULL if index is None else ffi.new("WGPUSubmissionIndex *", index)
        clock = phases.current()  # the feeding thread's phases: the wait, then the copy out
        t = phases.perf_counter_ns() if clock else 0
        lib.wgpuBufferMapAsync(handle, lib.WGPUMapMode_Read, 0, nbytes, info[0])
        while state["status"] is None:
            lib.wgpuDevicePoll(device._internal, True, until)
        if state["status"] != lib.WGPUMapAsyncStatus_Success:
            raise RuntimeError(f"could not map the read-back buffer (status {state['status']})")
        if clock:
            t = clock.lap(phases.WAIT, t)
        try:
            ptr = lib.wgpuBufferGetConstMappedRange(handle, 0, nbytes)
            return np.frombuffer(ffi.buffer(ptr, nbytes), np.float32).copy()
        finally:
            lib.wgpuBufferUnmap(handle)
            if clock:
                clock.lap(phases.READBACK, t)


_native: _Native | None = None
_native_tried = False


def _get_native() -> _Native | None:
    global _native, _native_tried
    if not _native_tried:
        _native_tried = True
        try:
            _native = _Native()
        except (ImportError, AttributeError):
            _native = None
    return _native


def mapping_calls() -> _Native | None:
    """wgpu-native's mapping calls (`ffi`, `lib`, `poll`), or None where this wgpu build lacks them (staging.py's
    upload buffers use them too)."""
    return _get_native()


def read(device, buffer, index: int | None = None, nbytes: int | None = None) -> np.ndarray:
    """The whole of a MAP_READ `buffer` (or its first `nbytes`), written by a submission already made on `device`,
    as float32. index: that submission's (replay.Native.submit): only it is waited for."""
    native = _get_native()
    nbytes = buffer.size if nbytes is None else nbytes
    if native is not None:
        return native.read(device, buffer, nbytes, index)
    import wgpu

    clock = phases.current()
    t = phases.perf_counter_ns() if clock else 0
    buffer.map_sync(wgpu.MapMode.READ)
    if clock:
        t = clock.lap(phases.WAIT, t)
    try:
        return np.frombuffer(buffer.read_mapped(0, nbytes, copy=True), np.float32)
    finally:
        buffer.unmap()
        if clock:
            clock.lap(phases.READBACK, t)
