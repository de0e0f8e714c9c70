"""A program's replay list: everything a run records, resolved once when the program's bind groups are made.

A run records the same commands every time: the same pipelines, bind groups and workgroup counts, the same output
copies into the read-back buffer, and it cuts the same slices out of what comes back. `Replay` holds them as plain
tuples (native handles where wgpu-native's C calls can be used, wgpu-py objects otherwise), so recording a run is a
tight loop with no Python objects made per dispatch, and a pipeline bound by the dispatch before is not bound again.

Three ways to record the same list: wgpu-native's C functions called directly (`Native`: no per-call error capture,
no cffi array per set_bind_group), either through ctypes holding the interpreter lock (`held`) or through wgpu-py's
own cffi `lib`, which lets go of the lock at every call (`native`), or wgpu-py's API (the fallback). A recording call
takes well under a microsecond; letting go of the lock and taking it back cost 10-16 microseconds a call with six
other threads wanting the lock (a library run's decoding and post-processing threads: docs/benchmarks.md), and a pass is
about a hundred calls. All give the very same command stream, so the outputs are the same bits. `FACERUN_GPU_REPLAY`
picks: `auto` (held where the C signatures are the ones this was written against), `held`, `native`, `api`. A
wgpu-py whose signatures differ falls back to the API and says so once. Errors made while recording are reported by
the device at finish/submit, where the runner watches for them. A batch of photos' queue writes and the unmapping of
staged photos' buffers take the same path (`writer`, `Native.unmap`): both are short C calls on the feeding thread.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from .. import settings
from .device import errors_seen
from .items import groups_for

log = logging.getLogger("facerun.gpu")

# the C signatures (cffi's spelling) this module calls, as wgpu-py 0.32's wgpu-native declares them
SIGNATURES = {
    "wgpuComputePassEncoderSetPipeline":
        "void(*)(struct WGPUComputePassEncoderImpl *, struct WGPUComputePipelineImpl *)",
    "wgpuComputePassEncoderSetBindGroup":
        "void(*)(struct WGPUComputePassEncoderImpl *, uint32_t, struct WGPUBindGroupImpl *, size_t, uint32_t *)",
    "wgpuComputePassEncoderDispatchWorkgroups":
        "void(*)(struct WGPUComputePassEncoderImpl *, uint32_t, uint32_t, uint32_t)",
    "wgpuCommandEncoderBeginComputePass":
        "struct WGPUComputePassEncoderImpl *(*)(struct WGPUCommandEncoderImpl *, WGPUComputePassDescriptor *)",
    "wgpuComputePassEncoderEnd": "void(*)(struct WGPUComputePassEncoderImpl *)",
    "wgpuComputePassEncoderRelease": "void(*)(struct WGPUComputePassEncoderImpl *)",
    "wgpuCommandEncoderCopyBufferToBuffer":
        "void(*)(struct WGPUCommandEncoderImpl *, struct WGPUBufferImpl *, uint64_t, struct WGPUBufferImpl *, "
        "uint64_t, uint64_t)",
    "wgpuQueueSubmitForIndex": "uint64_t(*)(struct WGPUQueueImpl *, size_t, struct WGPUCommandBufferImpl * *)",
    "wgpuQueueWriteBuffer": "void(*)(struct WGPUQueueImpl *, struct WGPUBufferImpl *, uint64_t, void *, size_t)",
    "wgpuBufferUnmap": "void(*)(struct WGPUBufferImpl *)",
    "wgpuDeviceCreateCommandEncoder":
        "struct WGPUCommandEncoderImpl *(*)(struct WGPUDeviceImpl *, WGPUCommandEncoderDescriptor *)",
    "wgpuCommandEncoderFinish":
        "struct WGPUCommandBufferImpl *(*)(struct WGPUCommandEncoderImpl *, WGPUCommandBufferDescriptor *)",
    "wgpuCommandEncoderRelease": "void(*)(struct WGPUCommandEncoderImpl *)",
    "wgpuCommandBufferRelease": "void(*)(struct WGPUCommandBufferImpl *)",
    "wgpuCommandEncoderClearBuffer":
        "void(*)(struct WGPUCommandEncoderImpl *, struct WGPUBufferImpl *, uint64_t, uint64_t)",
}


_P, _U32, _U64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
# the recording calls made through ctypes (held): argument and result types, matching SIGNATURES
HELD = {
    "wgpuComputePassEncoderSetPipeline": ([_P, _P], None),
    "wgpuComputePassEncoderSetBindGroup": ([_P, _U32, _P, ctypes.c_size_t, _P], None),
    "wgpuComputePassEncoderDispatchWorkgroups": ([_P, _U32, _U32, _U32], None),
    "wgpuCommandEncoderBeginComputePass": ([_P, _P], _P),
    "wgpuComputePassEncoderEnd": ([_P], None),
    "wgpuComputePassEncoderRelease": ([_P], None),
    "wgpuCommandEncoderCopyBufferToBuffer": ([_P, _P, _U64, _P, _U64, _U64], None),
    "wgpuQueueWriteBuffer": ([_P, _P, _U64, _P, ctypes.c_size_t], None),  # a copy into wgpu's staging memory
    "wgpuBufferUnmap": ([_P], None),
    # a run's encoder made, finished and released, and its submission: wgpu-py's API lets go of the lock at each
    # of these calls, and taking it back behind a library run's other threads measured a quarter of the feeding
    # thread's time (docs/benchmarks.md)
    "wgpuDeviceCreateCommandEncoder": ([_P, _P], _P),
    "wgpuCommandEncoderFinish": ([_P, _P], _P),
    "wgpuCommandEncoderRelease": ([_P], None),
    "wgpuCommandBufferRelease": ([_P], None),
    "wgpuCommandEncoderClearBuffer": ([_P, _P, _U64, _U64], None),
    "wgpuQueueSubmitForIndex": ([_P, ctypes.c_size_t, _P], _U64),
}


def _held_calls(path: str) -> dict:
    """HELD's functions of the wgpu-native library at `path` (the one wgpu-py loaded), called through ctypes with
    the interpreter lock held (ctypes.PyDLL)."""
    dll = ctypes.PyDLL(path)
    calls = {}
    for name, (args, result) in HELD.items():
        f = getattr(dll, name)
        f.argtypes, f.restype = args, result
        calls[name] = f
    return calls


class Native:
    """wgpu-native's recording calls, after their signatures were compared with SIGNATURES (a different wgpu-py
    raises here, and the API path is used): through ctypes holding the interpreter lock (`held`), or wgpu-py's cffi
    `lib`. `handle(obj)` is what the calls take for a wgpu-py object."""

    def __init__(self, ffi=None, lib=None, held: bool = False, path: str | None = None):
        if ffi is None or lib is None:
            from wgpu.backends.wgpu_native._ffi import ffi, lib, lib_path

            path = path or lib_path
        for name, want in SIGNATURES.items():
            got = ffi.typeof(getattr(lib, name)).cname
            if got != want:
                raise TypeError(f"{name} is {got}, not {want}")
        self.ffi = ffi
        self.held = held
        calls = _held_calls(path) if held else {name: getattr(lib, name) for name in HELD}
        self.set_pipeline = calls["wgpuComputePassEncoderSetPipeline"]
        self.set_bind_group = calls["wgpuComputePassEncoderSetBindGroup"]
        self.dispatch = calls["wgpuComputePassEncoderDispatchWorkgroups"]
        self.begin = calls["wgpuCommandEncoderBeginComputePass"]
        self.end = calls["wgpuComputePassEncoderEnd"]
        self.release = calls["wgpuComputePassEncoderRelease"]
        self.copy = calls["wgpuCommandEncoderCopyBufferToBuffer"]
        self._write = calls["wgpuQueueWriteBuffer"]
        self._unmap = calls["wgpuBufferUnmap"]
        self.create_encoder = calls["wgpuDeviceCreateCommandEncoder"]
        self.finish = calls["wgpuCommandEncoderFinish"]
        self.release_encoder = calls["wgpuCommandEncoderRelease"]
        self.release_commands = calls["wgpuCommandBufferRelease"]
        self.clear = calls["wgpuCommandEncoderClearBuffer"]
        self.submit_for_index = calls["wgpuQueueSubmitForIndex"]
        self.pass_desc = ffi.new("WGPUComputePassDescriptor *")  # no label, no timestamps
        self.encoder_desc = ffi.new("WGPUCommandEncoderDescriptor *")  # no label
        self.commands_desc = ffi.new("WGPUCommandBufferDescriptor *")
        if held:
            self.null = None
            self.pass_arg = int(ffi.cast("uintptr_t", self.pass_desc))
            self.encoder_arg = int(ffi.cast("uintptr_t", self.encoder_desc))
            self.commands_arg = int(ffi.cast("uintptr_t", self.commands_desc))
        else:
            self.null = ffi.NULL
            self.pass_arg, self.encoder_arg, self.commands_arg = self.pass_desc, self.encoder_desc, self.commands_desc

    def compute_pass(self, enc, steps, first=None, repeat: int = 1) -> None:
        """One compute pass into wgpu-py command encoder `enc`: `first` (pipeline, bind group, x, y groups: wgpu-py
        objects) dispatched, then `steps` (pipeline handle or None: the one bound before, bind group handle, x, y
        groups) `repeat` times over."""
        set_pipeline, set_bind_group, dispatch, null = self.set_pipeline, self.set_bind_group, self.dispatch, self.null
        h = self.begin(self.handle(enc), self.pass_arg)
        try:
            if first is not None:
                set_pipeline(h, self.handle(first[0]))
                set_bind_group(h, 0, self.handle(first[1]), 0, null)
                dispatch(h, first[2], first[3], 1)
            for _ in range(repeat):
                for pipe, group, gx, gy in steps:
                    if pipe is not None:
                        set_pipeline(h, pipe)
                    set_bind_group(h, 0, group, 0, null)
                    dispatch(h, gx, gy, 1)
            self.end(h)
        finally:
            self.release(h)

    def handle(self, obj):
        """What the recording calls take for wgpu-py object `obj` (or an Encoder or Commands of these calls): its
        native pointer (as an int when held)."""
        if type(obj) in _OWN:
            return obj._raw
        if self.held:
            return int(self.ffi.cast("uintptr_t", obj._internal))
        return obj._internal

    def write(self, queue, buffer, at: int, data) -> None:
        """queue.write_buffer(buffer, at, data) by the native call: `data` a contiguous array or bytes-like object
        of whole words."""
        a = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        address = a.ctypes.data if self.held else self.ffi.cast("void *", a.ctypes.data)
        self._write(self.handle(queue), self.handle(buffer), at, address, a.nbytes)

    def unmap(self, buffer) -> None:
        """Unmap wgpu-py buffer `buffer` mapped by native calls (staging.py)."""
        self._unmap(self.handle(buffer))

    def submit(self, queue, commands) -> int:
        """Submit a command buffer, or a list of them in order (wgpu-py's, or Commands, released once submitted);
        the submission's index (for readback.read to wait on it alone)."""
        many = commands if isinstance(commands, list) else [commands]
        handles = [self.handle(c) for c in many]
        if self.held:
            index = self.submit_for_index(self.handle(queue), len(handles), (ctypes.c_void_p * len(handles))(*handles))
        else:
            index = self.submit_for_index(queue._internal, len(handles), self.ffi.new("WGPUCommandBuffer[]", handles))
        for c in many:
            if type(c) is Commands:
                c.release()
        return int(index)


class Encoder:
    """A command encoder made, finished and released by Native's calls instead of wgpu-py's (the lock held where
    Native holds it). Takes what the recording paths give it where `native` is used: Native.compute_pass,
    `copier`, `clear_buffer`; `finish` gives Commands, or raises where wgpu reported an error while recording (as
    wgpu-py's finish does: a command buffer wgpu found invalid must never be submitted, wgpu-native aborts the
    process on it)."""

    __slots__ = ("native", "_raw", "_errors")

    def __init__(self, native: Native, device):
        self.native = native
        self._errors = errors_seen()[0]
        self._raw = native.create_encoder(native.handle(device), native.encoder_arg)
        if not self._raw:
            raise RuntimeError("wgpu-native made no command encoder")

    def copy_buffer_to_buffer(self, src, src_at: int, dst, dst_at: int, nbytes: int) -> None:
        n = self.native
        n.copy(self._raw, n.handle(src), src_at, n.handle(dst), dst_at, nbytes)

    def clear_buffer(self, buffer, offset: int = 0, size: int | None = None) -> None:
        n = self.native
        n.clear(self._raw, n.handle(buffer), offset, buffer.size - offset if size is None else size)

    def finish(self) -> Commands:
        n = self.native
        raw = n.finish(self._raw, n.commands_arg)
        n.release_encoder(self._raw)
        self._raw = None
        if not raw:
            raise RuntimeError("wgpu-native finished no command buffer")
        commands = Commands(n, raw)
        count, last = errors_seen()
        if count != self._errors:  # reported through wgpu's logger while recording or finishing
            commands.release()
            raise RuntimeError(last or "wgpu reported an error while recording")
        return commands

    def __del__(self):
        if self._raw is not None:  # never finished (an error while recording)
            self.native.release_encoder(self._raw)
            self._raw = None


class Commands:
    """A command buffer Encoder.finish made: Native.submit takes it (and releases it once submitted)."""

    __slots__ = ("native", "_raw")

    def __init__(self, native: Native, raw):
        self.native = native
        self._raw = raw

    def release(self) -> None:
        if self._raw is not None:
            self.native.release_commands(self._raw)
            self._raw = None

    def __del__(self):
        self.release()


_OWN = (Encoder, Commands)  # made by Native's own calls: their handles as those calls gave them


def encoder(native: Native | None, device, label: str):
    """A command encoder for a run recorded through `native` (replay.Encoder), or wgpu-py's own (`native` None: the
    API path)."""
    if native is None:
        return device.create_command_encoder(label=label)
    return Encoder(native, device)


def writer(native: Native | None, queue):
    """write(buffer, offset, data) into wgpu-py queue `queue`: through `native`'s call (with the lock held where it
    records so), or wgpu-py's API without it."""
    if native is None:
        return queue.write_buffer

    def write(buffer, at: int, data) -> None:
        native.write(queue, buffer, at, data)

    return write


def copier(native: Native | None, enc):
    """copy(src, src offset, dst, dst offset, bytes) into wgpu-py command encoder `enc`: through `native`'s calls, or
    wgpu-py's API without them."""
    if native is None:
        return enc.copy_buffer_to_buffer
    e, call, handle = native.handle(enc), native.copy, native.handle

    def copy(src, src_at: int, dst, dst_at: int, nbytes: int) -> None:
        call(e, handle(src), src_at, handle(dst), dst_at, nbytes)

    return copy


_native: Native | None = None  # made for the setting's mode (`_native.held`)
_said: set[str] = set()


def _say_once(key: str, message: str, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(message, *args)


def native_calls() -> Native | None:
    """The native calls to record with, or None: the API path (FACERUN_GPU_REPLAY=api, or native calls this
    wgpu-py does not have as expected, said once)."""
    global _native
    mode = settings.get("FACERUN_GPU_REPLAY")
    if mode == "api":
        return None
    held = mode in ("auto", "held")
    if _native is None or _native.held != held:
        try:
            _native = Native(held=held)
        except Exception as e:  # an import, a missing name, a signature of another wgpu-native
            _native = None
            _say_once("native", "GPU runs are recorded through wgpu-py's API: its native calls differ (%s)", e)
            return None
    return _native


class Replay:
    """One program's run as a list, resolved once. steps: (pipeline, bind group, x groups, y groups), the pipeline
    None where the step before bound the same one; copies: (output buffer, byte offset in it, staging offset,
    bytes); slices: (name, first float, count, shape) of each output in the read-back data; consts: outputs the
    compiler folded.
    `native`: a Native (steps and copies hold wgpu-native handles) or None (they hold wgpu-py objects). items: a
    batch program's items where fewer may be run (items.py), with `per_item` each step's (inner, units) or None."""

    def __init__(self, recorded: list, outputs: list, values, buffers, native: Native | None, items: int = 0,
                 per_item: list | None = None):
        self.native = native
        self.items = items
        self.per_item = per_item or [None] * len(recorded)
        self._fewer: dict[int, list] = {}  # items run -> the steps with their grids
        self.steps = []
        last = None
        for pipe, group, (gx, gy), _ in recorded:
            same = pipe is last
            last = pipe
            if native is not None:
                self.steps.append((None if same else native.handle(pipe), native.handle(group), gx, gy))
            else:
                self.steps.append((None if same else pipe, group, gx, gy))
        self.copies, self.slices, self.consts = [], [], []
        for name, vid, slot, offset, at in outputs:
            v = values[vid]
            if slot is None:
                self.consts.append((name, np.array(v.data, np.float32).reshape(v.shape)))
                continue
            src = buffers[slot]
            self.copies.append((native.handle(src) if native is not None else src, at, offset, v.nbytes))
            self.slices.append((name, offset // 4, v.size, tuple(v.shape)))
        self.keep = (recorded, [buffers[o.slot] for o in outputs if o.slot is not None])  # alive

    def steps_for(self, count: int | None) -> list:
        """The steps of a run of the first `count` items (all of them: None), each dispatch's grid cut to them."""
        if count is None or not self.items or count >= self.items:
            return self.steps
        steps = self._fewer.get(count)
        if steps is None:
            steps = self._fewer[count] = [
                (pipe, group, *groups_for((gx, gy), per_item, self.items, count))
                for (pipe, group, gx, gy), per_item in zip(self.steps, self.per_item)]
        return steps

    def encode(self, enc, first=None, repeat: int = 1, count: int | None = None) -> None:
        """One compute pass over the steps into the command encoder `enc` (`repeat` times over, for timing);
        `first`: (pipeline, bind group, x groups, y groups) of wgpu-py objects to dispatch before them. count: a
        batch program's items that are there (the rest padding, not run where the program allows: items.py)."""
        n = self.native
        steps = self.steps_for(count)
        if n is None:
            cp = enc.begin_compute_pass(label="facerun")
            if first is not None:
                cp.set_pipeline(first[0])
                cp.set_bind_group(0, first[1])
                cp.dispatch_workgroups(first[2], first[3], 1)
            for _ in range(repeat):
                for pipe, group, gx, gy in steps:  # the first step always names its pipeline
                    if pipe is not None:
                        cp.set_pipeline(pipe)
                    cp.set_bind_group(0, group)
                    cp.dispatch_workgroups(gx, gy, 1)
            cp.end()
            return
        n.compute_pass(enc, steps, first, repeat)

    def copy_outputs(self, enc, staging, at: int) -> None:
        """The outputs copied into `staging` from byte `at` on."""
        n = self.native
        if n is not None:
            e, s, copy = n.handle(enc), n.handle(staging), n.copy
            for src, src_at, offset, nbytes in self.copies:
                copy(e, src, src_at, s, at + offset, nbytes)
        else:
            for src, src_at, offset, nbytes in self.copies:
                enc.copy_buffer_to_buffer(src, src_at, staging, at + offset, nbytes)

    def unpack(self, flat: np.ndarray, at: int = 0) -> dict[str, np.ndarray]:
        """The outputs by name from read-back floats whose outputs start at byte `at` (`flat` is the run's own)."""
        out = {name: value.copy() for name, value in self.consts}
        base = at // 4
        for name, first, size, shape in self.slices:
            out[name] = flat[base + first : base + first + size].reshape(shape)
        return out

    def submit(self, queue, commands) -> int | None:
        """Submit `commands` (a command buffer or a list of them); the submission's index when submitted natively
        (None through the API)."""
        if self.native is not None:
            return self.native.submit(queue, commands)
        queue.submit(commands if isinstance(commands, list) else [commands])
        return None
