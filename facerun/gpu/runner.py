"""Running a lowered program: one command encoder, one compute pass, one submission and one read-back per run.

`GpuProgram` takes a program's dispatches from lower.py and runs them in an `Arena` (arena.py) that all programs of
the model share: a buffer per slot, one uniform buffer for every dispatch's parameters, a staging buffer for the
outputs, and the bind groups over them. Per run it writes the inputs (and its parameters, when another program of
the model ran last), submits the commands and reads every output back. A re-run records nothing: the next run's
command buffer is recorded while the GPU works on this one. Any device error on the way marks the device broken
(device.py) and raises GpuError with the reason, so the caller carries on on the CPU.
"""

from __future__ import annotations

import time

import numpy as np

from .. import phases
from .. import program as P
from ..errors import GpuError
from . import device as D
from . import kernels as K
from . import pace, readback
from .arena import Arena
from .faces import FacesInput
from .lower import Dispatch, lower
from .memory import Transient, WeightStore
from .photo import ITEMS, PARAMS_COPIED, PhotoInput
from .replay import Replay, encoder, native_calls, writer
from .staging import write_pieces


def _wgpu():
    import wgpu

    return wgpu


def short_error(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


class GpuProgram:
    """A program compiled for the device: dispatches, buffers and bind groups, ready to run again and again.

    `dispatches`, `kernels` (source -> dispatches), `conv_plans` ((node, plan in words)), `slots` and
    `device_bytes` describe it; `run` and `run_many` run it; `time_passes` and `time_encoding` measure it."""

    def __init__(self, dev: D.Device, prog: P.Program, weights: WeightStore, force: dict | None = None,
                 arena: Arena | None = None, half: bool = False, separable: bool = True):
        self.dev = dev
        self.prog = prog
        self.arena = arena or Arena(dev)  # without one of the model's: buffers of its own
        self.lock = self.arena.lock
        low = lower(prog, dev.limits, weights.consts(dev), force, half, separable)
        self.dispatches = low.dispatches
        self.items = low.items  # a batch program whose batches of fewer items dispatch less (items.py), else 0
        self.slots = low.slots
        self.kernels = low.kernels
        self.conv_plans = low.conv_plans
        self.outputs = low.outputs
        self.staging_bytes = low.staging_bytes
        self.kernel_keys = frozenset(d.kernel.key for d in self.dispatches)  # the pipelines it runs
        self.inputs = [(name, slot, v) for name, slot, v in low.inputs]
        # every dispatch's parameters at its UNIFORM_SLOT offset, zero filled
        slot = K.UNIFORM_SLOT
        self.params = b"".join(d.params.ljust(slot, b"\0") for d in self.dispatches) if self.dispatches else bytes(slot)
        self.pipes = self.dev.pipelines([d.kernel for d in self.dispatches])
        # dispatches reading weights uploaded per run (past the residency budget) get their bind groups per run:
        # no replay list then (the plain path, `_encode`)
        self._transient = [any(isinstance(r, Transient) for r in d.reads) for d in self.dispatches]
        self.native = None if any(self._transient) else native_calls()
        # write(buffer, offset, data): a queue write through the native calls where the runs are recorded so
        self.write = writer(self.native, dev.queue)
        self.replay: Replay | None = None  # the run as a list (replay.py), made with the bind groups
        self.generation = None  # the arena's generation the bind groups were made in
        self.photo = PhotoInput(self)  # a photo laid out on the device, a smaller photo masked (photo.py)
        self.faces = FacesInput(self)  # faces aligned on the device into an embedder's input (faces.py)
        self._started: Started | None = None  # the last run submitted and not waited for (submit)
        self._started_staging = None  # its read-back buffer, the program's own
        with self.lock:
            self._bind()
        # what the arena's LRU accounting charges this program: its parameters (the buffers are the arena's)
        self.device_bytes = len(self.params)

    # ---- device objects
    def _bind(self) -> None:
        """Fit the arena to this program and find (or make) its bind groups; again after the arena grew. Called with
        the lock held."""
        self.arena.fit(self.slots.sizes, len(self.params), self.staging_bytes)
        self.generation = self.arena.generation
        self._ready = None  # the next run's command buffer, recorded while the GPU ran the last one
        self.recorded = []  # (pipeline, bind group or None, groups, dispatch index)
        for i, (d, pipe, transient) in enumerate(zip(self.dispatches, self.pipes, self._transient)):
            self.recorded.append((pipe, None if transient else self._shared_group(i, d), d.groups, i))
        self.replay = (None if any(self._transient) else
                       Replay(self.recorded, self.outputs, self.prog.values, self.buffers, self.native,
                              self.items, [d.per_item for d in self.dispatches]))

    @property
    def raw(self) -> bool:
        """Whether runs are recorded natively (the next run's commands are then recorded ahead, cheaply)."""
        return self.native is not None and self.replay is not None

    def current(self, photo: tuple[int, int] | None = None) -> None:
        """Before a run (lock held): rebind when the arena grew since, and load this program's parameters (masked to
        a `photo` of fewer rows and columns than the input, or each batch item to its own with ITEMS:
        photo.PhotoInput; PARAMS_COPIED: none, the run copies them into place itself)."""
        clock = phases.current()
        t = phases.perf_counter_ns() if clock else 0
        if self.generation != self.arena.generation:
            self._bind()
        if photo == PARAMS_COPIED:
            pass
        elif photo is None or photo == self.photo.input_hw:
            self.arena.load_params(self, self.params, self.write)
        elif photo == ITEMS:
            self.arena.load_params((self, ITEMS), self.photo.item_params(), self.write)
        else:
            self.arena.load_params((self, photo), self.photo.params(photo), self.write)
        if clock:
            clock.lap(phases.PARAMS, t)

    def mask_reason(self, align: int) -> str | None:
        """None when this program runs a photo of a multiple of `align` rows and columns up to its input's exactly
        (masking.maskable); else why not."""
        return self.photo.mask_reason(align)

    @property
    def buffers(self) -> list:
        return self.arena.buffers

    @property
    def staging(self):
        return self.arena.staging

    def _shared_group(self, i: int, d: Dispatch):
        """The arena's bind group for dispatch i over the buffers it binds now (found by their identity: most of a
        new program's groups exist already)."""
        buffers, dummy = self.buffers, self.dev.dummy
        refs = [dummy if r is None else buffers[r[1]] if type(r) is tuple else r for r in d.reads]
        refs.append(buffers[d.out[1]])
        key = (i, id(self.arena.uniform), *map(id, refs))
        return self.arena.bind_group(key, lambda: self._bind_group(i, d, {}))

    def _resolve(self, ref, uploads: dict):
        if ref is None:
            return self.dev.dummy
        if isinstance(ref, tuple) and ref[0] == "slot":
            return self.buffers[ref[1]]
        if isinstance(ref, Transient):
            buf = uploads.get(id(ref))
            if buf is None:
                buf = self.dev.device.create_buffer_with_data(label="facerun weights (per run)", data=ref.data,
                                                              usage=_wgpu().BufferUsage.STORAGE)
                uploads[id(ref)] = buf
            return buf
        return ref

    def _bind_group(self, i: int, d: Dispatch, uploads: dict):
        entries = [{"binding": K.UNIFORM_BINDING,
                    "resource": {"buffer": self.arena.uniform, "offset": i * K.UNIFORM_SLOT, "size": K.UNIFORM_SLOT}}]
        for b, ref in zip(K.READ_BINDINGS, d.reads):
            buf = self._resolve(ref, uploads)
            entries.append({"binding": b, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        out = self._resolve(d.out, uploads)
        entries.append({"binding": K.OUT_BINDING, "resource": {"buffer": out, "offset": 0, "size": out.size}})
        sizes = self.arena.photos
        entries.append({"binding": K.PHOTOS_BINDING, "resource": {"buffer": sizes, "offset": 0, "size": sizes.size}})
        return self.dev.device.create_bind_group(layout=self.dev.layout, entries=entries)

    # ---- encoding
    def _encode(self, cp) -> None:
        """Record every dispatch into the compute pass `cp` (wgpu-py's object; the raw path has its own, _pass)."""
        uploads: dict = {}
        last = None
        for pipe, bg, (gx, gy), i in self.recorded:
            if bg is None:
                bg = self._bind_group(i, self.dispatches[i], uploads)
            if pipe is not last:
                cp.set_pipeline(pipe)
                last = pipe
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(gx, gy, 1)

    def encode_pass(self, enc, repeat: int = 1, first=None, count: int | None = None) -> None:
        """One compute pass over the dispatches (`repeat` times over, for timing); `first`: (pipeline, bind group,
        workgroups) of a dispatch to run before them (a photo's layout, run_image). count: a batch program's items
        that are there, where the rest need not run (items.py; the replay list only)."""
        if self.replay is not None:
            self.replay.encode(enc, first, repeat, count)
            return
        cp = enc.begin_compute_pass(label="facerun")
        if first is not None:
            cp.set_pipeline(first[0])
            cp.set_bind_group(0, first[1])
            cp.dispatch_workgroups(first[2], first[3], 1)
        for _ in range(repeat):
            self._encode(cp)
        cp.end()

    def copy_outputs(self, enc, staging, at: int) -> None:
        if self.replay is not None:
            self.replay.copy_outputs(enc, staging, at)
            return
        for _, vid, slot, offset, src in self.outputs:
            if slot is not None:
                enc.copy_buffer_to_buffer(self.buffers[slot], src, staging, at + offset, self.prog.values[vid].nbytes)

    def _commands(self):
        """A run's command buffer: the pass, then the outputs copied to the staging buffer."""
        enc = encoder(self.native, self.dev.device, "facerun program")
        self.encode_pass(enc)
        self.copy_outputs(enc, self.staging, 0)
        return enc.finish()

    # ---- inputs and outputs
    def _arrays(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The inputs in the program's order, checked against its shapes, as contiguous float32."""
        arrays = []
        for name, _, v in self.inputs:
            if name not in inputs:
                raise GpuError(f"input '{name}' is missing")
            a = np.ascontiguousarray(inputs[name], dtype=np.float32)
            if a.shape != v.shape:
                raise GpuError(f"input '{name}' has shape {list(a.shape)}, the program takes {list(v.shape)}")
            arrays.append(a)
        return arrays

    def _unpack(self, flat: np.ndarray, at: int = 0) -> dict[str, np.ndarray]:
        """The outputs by name from read-back data whose outputs start at byte `at`."""
        if self.replay is not None:
            return self.replay.unpack(flat, at)
        out = {}
        for name, vid, slot, offset, _ in self.outputs:
            v = self.prog.values[vid]
            if slot is None:
                out[name] = np.array(v.data, np.float32).reshape(v.shape)
            else:
                first = (at + offset) // 4
                out[name] = flat[first : first + v.size].reshape(v.shape)  # `flat` is this run's own copy
        return out

    # ---- running
    def run(self, inputs: dict[str, np.ndarray], photo: tuple[int, int] | None = None,
            align: int = 32) -> dict[str, np.ndarray]:
        """The program on `inputs`. photo: (rows, columns) of the input's top-left that hold a photo (a multiple of
        `align`), the rest zero: every layer is then masked to it, so the outputs on its region are those of the
        photo's own program."""
        arrays = self._arrays(inputs)
        photo = self.photo.checked(photo, align)

        def prepare():
            self.current(photo)
            clock = phases.current()
            t = phases.perf_counter_ns() if clock else 0
            for (_, slot, _), a in zip(self.inputs, arrays):
                write_pieces(self.write, self.buffers[slot], 0, a)
            if clock:
                t = clock.lap(phases.UPLOAD, t)
            commands, self._ready = self._ready, None
            if commands is None:
                commands = self._commands()
            if clock:
                clock.lap(phases.RECORD, t)
            return commands, self.staging

        def record_next():
            if self.raw:  # the next run then only writes its inputs and submits
                self._ready = self._commands()

        return self.submit_run(prepare, record_next)

    def submit_run(self, prepare, record_next, unpack=None):
        """One run's submission (the lock held, at the GPU's pace) and its outputs by name (or what
        `unpack(read-back)` makes of them)."""
        with self.lock, pace.turn():
            flat = self._submit("the program", prepare, record_next)
        clock = phases.current()
        t = phases.perf_counter_ns() if clock else 0
        out = self._unpack(flat) if unpack is None else unpack(flat)
        if clock:
            clock.lap(phases.CUT, t)
        return out

    def submit(self, inputs: dict[str, np.ndarray]) -> Started:
        """The program on `inputs`, submitted and not waited for: `Started.result()` reads the outputs back, so the
        caller works on while the device runs it (a library's embedder, whose batches would otherwise wait behind
        the detector's work in the queue). One such run a program at a time: the next submit reads the last one
        back first (they share a read-back buffer of their own, apart from `run`'s)."""
        arrays = self._arrays(inputs)

        def write():
            for (_, slot, _), a in zip(self.inputs, arrays):
                write_pieces(self.write, self.buffers[slot], 0, a)

        return self.start(write)

    def start(self, write, first=None) -> Started:
        """submit's run: `write()` puts the inputs on the device (lock held), `first()` gives a dispatch to run
        before the program's, as encode_pass takes it (None: none): a layout kernel making the input."""
        if D.broken_reason():
            raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
        with self.lock, pace.turn():
            if self._started is not None:
                self._started.collect()  # its read-back buffer is taken again below
            clock = phases.current()
            try:
                self.current()
                t = phases.perf_counter_ns() if clock else 0
                write()
                if clock:
                    t = clock.lap(phases.UPLOAD, t)
                staging = self._started_buffer()
                enc = encoder(self.native, self.dev.device, "facerun program, not waited for")
                self.encode_pass(enc, first=first() if first is not None else None)
                self.copy_outputs(enc, staging, 0)
                commands = enc.finish()
                if clock:
                    t = clock.lap(phases.RECORD, t)
            except GpuError:
                raise
            except Exception as e:
                raise GpuError(f"recording the GPU work failed: {short_error(e)}") from None
            index = self.submit_commands(commands, "the program")
            if clock:
                clock.lap(phases.SUBMIT, t)
            self._started = Started(self, staging, index)
            return self._started

    def submit_commands(self, commands, what: str) -> int | None:
        """Submit recorded `commands` (lock held): the submission's index where submitted natively (for
        readback.read to wait on it alone), else None. GpuError, the GPU marked broken, on a failure."""
        seen = D.errors_seen()[0]
        try:
            if D.take_injected("submit"):
                raise RuntimeError("injected failure at submit (FACERUN_GPU_INJECT_FAILURE)")
            if self.replay is not None:
                index = self.replay.submit(self.dev.queue, commands)
            else:
                self.dev.queue.submit([commands])
                index = None
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
        except Exception as e:
            why = f"the GPU failed running {what}: {short_error(e)}"
            D.mark_broken(why)
            raise GpuError(why) from None
        return index

    def _started_buffer(self):
        """submit's read-back buffer (lock held), made at the first and again when the outputs grew."""
        buf = self._started_staging
        if buf is None or buf.size < self.staging_bytes:
            wgpu = _wgpu()
            buf = self._started_staging = self.dev.device.create_buffer(
                label="facerun read-back, not waited for", size=-(-max(16, self.staging_bytes) // 16) * 16,
                usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        return buf

    def run_image(self, rgb: np.ndarray, bgr: bool = True, photo: tuple[int, int] | None = None,
                  align: int = 32, select=None, stager=None):
        """The program on one photo laid out on the device (photo.PhotoInput.run_image)."""
        return self.photo.run_image(rgb, bgr, photo, align, select, stager)

    def run_many(self, items: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several independent inputs through this program in ONE submission: for each item, its inputs copied into
        the input slots, the whole pass, its outputs copied to its own part of one staging buffer. (For files fixed
        at batch 1, whose batch cannot be folded into the kernels.)"""
        every_input = np.concatenate([a.reshape(-1) for item in items for a in self._arrays(item)])
        per_item = -(-self.staging_bytes // 256) * 256  # copy offsets must be 4-aligned; keep items apart

        def prepare():
            self.current()
            src, staging = self._batch_buffers(every_input.nbytes, per_item * len(items))
            write_pieces(self.write, src, 0, every_input)
            enc = encoder(self.native, self.dev.device, "facerun batch")
            at = 0
            for i in range(len(items)):
                for _, slot, v in self.inputs:
                    enc.copy_buffer_to_buffer(src, at, self.buffers[slot], 0, v.nbytes)
                    at += v.nbytes
                self.encode_pass(enc)
                self.copy_outputs(enc, staging, i * per_item)
            return enc.finish(), staging

        with self.lock, pace.turn():
            flat = self._submit("a batch", prepare)
        return [self._unpack(flat, i * per_item) for i in range(len(items))]

    def _batch_buffers(self, input_bytes: int, staging_bytes: int):
        """run_many's input and read-back buffers, kept for the next batch of the same size (a library embeds
        batch after batch of 16 faces)."""
        kept = getattr(self, "_batch", None)
        if kept is None or kept[0] != (input_bytes, staging_bytes):
            wgpu = _wgpu()
            dev = self.dev.device
            src = dev.create_buffer(label="facerun batch inputs", size=-(-input_bytes // 16) * 16,
                                    usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
            staging = dev.create_buffer(label="facerun batch read-back", size=staging_bytes,
                                        usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            kept = self._batch = ((input_bytes, staging_bytes), src, staging)
        return kept[1], kept[2]

    def _submit(self, what: str, prepare, after_submit=None) -> np.ndarray:
        """Record (`prepare` -> command buffer (or a list of them, submitted together), staging buffer[, the bytes
        of it to read]), submit, wait and read the staging buffer back, watching for device errors: one at submit or
        read-back marks the device broken and raises GpuError."""
        if D.broken_reason():
            raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
        try:
            commands, staging, *nbytes = prepare()
        except Exception as e:
            raise GpuError(f"recording the GPU work failed: {short_error(e)}") from None
        seen = D.errors_seen()[0]
        clock = phases.current()  # the feeding thread's phases (phases.py): the wait and read-back in readback.py
        try:
            if D.take_injected("submit"):
                raise RuntimeError("injected failure at submit (FACERUN_GPU_INJECT_FAILURE)")
            t = phases.perf_counter_ns() if clock else 0
            if self.replay is not None:
                self.replay.submit(self.dev.queue, commands)
            else:
                self.dev.queue.submit(commands if isinstance(commands, list) else [commands])
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
            if clock:
                t = clock.lap(phases.SUBMIT, t)
            if after_submit is not None:
                after_submit()
                if clock:
                    clock.lap(phases.RECORD, t)
            if D.take_injected("readback"):
                raise RuntimeError("injected failure at read-back (FACERUN_GPU_INJECT_FAILURE)")
            data = readback.read(self.dev.device, staging, None, *nbytes)
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
        except Exception as e:
            self._ready = None
            why = f"the GPU failed running {what}: {short_error(e)}"
            D.mark_broken(why)
            raise GpuError(why) from None
        return data

    # ---- measuring (facerun tune)
    def time_passes(self, repeat: int) -> float:
        """Wall seconds of one submission of `repeat` passes over the dispatches, until the GPU is done."""
        with self.lock:
            try:
                self.current()
                enc = self.dev.device.create_command_encoder(label="facerun timing")
                self.encode_pass(enc, repeat)
                # wait through a read-back of 16 bytes (wgpu-py 0.32's on_submitted_work_done is broken)
                enc.copy_buffer_to_buffer(self.buffers[0], 0, self.staging, 0, 16)
                commands = enc.finish()
                start = time.perf_counter()
                self.dev.queue.submit([commands])
                readback.read(self.dev.device, self.staging)
                elapsed = time.perf_counter() - start
            except Exception as e:
                raise GpuError(f"timing the program failed: {short_error(e)}") from None
        return elapsed

    def time_encoding(self, repeat: int = 10) -> float:
        """Seconds of host time to record one pass over the dispatches (what a run's recording costs)."""
        with self.lock:
            self.current()
            start = time.perf_counter()
            for _ in range(repeat):
                enc = self.dev.device.create_command_encoder()
                self.encode_pass(enc)
                enc.finish()
            return (time.perf_counter() - start) / repeat


class Started:
    """A run submitted by GpuProgram.submit: `result()` waits for it (its submission alone) and gives its outputs by
    name; a failure at read-back raises GpuError there (the device marked broken)."""

    def __init__(self, gp: GpuProgram, staging, index: int | None):
        self.gp, self.staging, self.index = gp, staging, index
        self._outputs: dict[str, np.ndarray] | None = None
        self._error: GpuError | None = None

    @property
    def done(self) -> bool:
        return self._outputs is not None or self._error is not None

    def result(self) -> dict[str, np.ndarray]:
        if not self.done:
            with self.gp.lock:
                self.collect()
        if self._error is not None:
            raise self._error
        return self._outputs

    def collect(self) -> None:
        """Read the outputs back (the program's lock held), or keep the failure for `result`."""
        if self.done:
            return
        gp = self.gp
        seen = D.errors_seen()[0]
        try:
            if D.take_injected("readback"):
                raise RuntimeError("injected failure at read-back (FACERUN_GPU_INJECT_FAILURE)")
            flat = readback.read(gp.dev.device, self.staging, self.index, max(16, gp.staging_bytes))
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
        except Exception as e:
            why = f"the GPU failed reading the program's outputs back: {short_error(e)}"
            D.mark_broken(why)
            self._error = GpuError(why)
            return
        finally:
            if gp._started is self:
                gp._started = None
        clock = phases.current()
        t = phases.perf_counter_ns() if clock else 0
        self._outputs = gp._unpack(flat)
        if clock:
            clock.lap(phases.CUT, t)
