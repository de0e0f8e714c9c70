"""Photos written into the device's upload memory by the threads that decode them, not by the one that feeds the device.

Uploading a decoded photo (about 2.4 MB for 1024x768) through `queue.write_buffer` is a copy into wgpu's staging
memory on the thread that feeds the GPU: a third of that thread's time a photo in a library run. Calling it from the
decoding threads instead measured slower still (wgpu-native serialises its queue's writes with the feeding thread's
recording and submitting: docs/benchmarks.md). So the pool keeps upload buffers (MAP_WRITE | COPY_SRC) mapped into
the host's memory, and a decoding thread only copies its photo into one (numpy, the interpreter lock let go; no wgpu
call): the photo comes back as a `runner.StagedImage` holding a `Staged` handle. The thread feeding the device then
unmaps the buffer, records a copy from it on the device (batch.py, photo.py) and, once the submission is made, asks
for the buffer mapped again; it is taken again once the mapping is done (after that submission ran).

The pool holds at most FACERUN_PHOTO_STAGING_MB of buffers; a photo that finds none free (or a GPU gone, or a wgpu
build without the native calls) is simply not staged and goes up the old way. A staged photo never run gives its
buffer back when it is dropped.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import counters, settings
from ..runner import StagedImage
from . import device as D
from .readback import mapping_calls
from .replay import native_calls

GRAIN = 256 * 1024  # buffer sizes rounded up to this: photos of one bucket share buffers
LOOSE = 1.5  # a free buffer takes a photo of at least 1 / LOOSE of its size


def _wgpu():
    import wgpu

    return wgpu


# Mappings asked for and not completed: slot number -> the slot, kept alive until its callback came (one callback
# for every slot, made once: wgpu may call it after a pool, or its model, is gone).
_PENDING: dict[int, _Slot] = {}
_NUMBERS = itertools.count(1)
_callback = None  # the cffi callback, made at the first slot
_ffi = None


def _mapped(status, message, user1, user2) -> None:
    slot = _PENDING.pop(int(_ffi.cast("uintptr_t", user1)), None)
    if slot is not None:
        slot.status = int(status)


def _callback_info(native, number: int):
    """The mapping's callback, naming slot `number` (its first user pointer)."""
    global _callback, _ffi
    ffi, lib = native.ffi, native.lib
    info = ffi.new("WGPUBufferMapCallbackInfo *")
    if _callback is None:
        _ffi = ffi
        _callback = ffi.callback(ffi.typeof(info.callback))(_mapped)
    info.mode = lib.WGPUCallbackMode_AllowProcessEvents
    info.callback = _callback
    info.userdata1 = ffi.cast("void *", number)
    return info


class _Slot:
    """One upload buffer: mapped (its memory `view`), or handed to a submission, or being mapped again."""

    def __init__(self, native, buffer):
        self.native, self.buffer, self.size = native, buffer, buffer.size
        self.view: np.ndarray | None = None
        self.status = None  # the mapping's status, set by its callback (in a poll, on any thread)
        self.number = next(_NUMBERS)
        self._info = _callback_info(native, self.number)

    def map(self) -> None:
        """Ask for the buffer's memory (done once every submission using it ran; seen in a poll)."""
        self.status = None
        _PENDING[self.number] = self
        try:
            self.native.lib.wgpuBufferMapAsync(self.buffer._internal, self.native.lib.WGPUMapMode_Write, 0,
                                               self.size, self._info[0])
        except Exception:
            _PENDING.pop(self.number, None)
            raise

    def mapped(self) -> bool:
        """Whether the memory is the host's now (`view` made at the first ask after the mapping completed)."""
        if self.view is None and self.status == self.native.lib.WGPUMapAsyncStatus_Success:
            ffi, lib = self.native.ffi, self.native.lib
            ptr = lib.wgpuBufferGetMappedRange(self.buffer._internal, 0, self.size)
            self.view = np.frombuffer(ffi.buffer(ptr, self.size), np.uint8)
        return self.view is not None

    def unmap(self) -> None:
        self.view = None
        self.status = None
        held = native_calls()  # on the feeding thread: with the interpreter lock held where runs record so
        if held is not None:
            held.unmap(self.buffer)
        else:
            self.native.lib.wgpuBufferUnmap(self.buffer._internal)


class Staged:
    """A photo's bytes in one of the pool's buffers, from byte 0, `nbytes` long (whole words; the last padded)."""

    def __init__(self, pool: PhotoStaging, slot: _Slot, nbytes: int, shape: tuple):
        self.pool, self.slot, self.nbytes, self.shape = pool, slot, nbytes, shape
        self._live = True  # the bytes are in the mapped buffer, not handed to a submission yet
        self._handed = False

    def taken(self, pool: PhotoStaging, shape: tuple) -> bool:
        """Whether these bytes are still in the buffer, staged by `pool` for an image of `shape`."""
        return self._live and self.pool is pool and self.shape == tuple(shape)

    def hand_over(self):
        """The buffer, unmapped, for a submission's copy (the feeding thread, before recording it)."""
        self._live = False
        self._handed = True
        self.slot.unmap()
        return self.slot.buffer

    def release(self) -> None:
        """The buffer back to the pool: mapped again once the submission that copies it is made (the mapping waits
        for it), or as it is when the photo was dropped unrun."""
        if self._handed:
            self._handed = False
            try:
                self.slot.map()
            except Exception:  # a GPU gone: the pool does not take this buffer again
                return
            self.pool._give_back(self.slot)
        elif self._live:
            self._live = False
            self.pool._give_back(self.slot)


class PhotoStaging:
    """One device's upload buffers for photos: at most `budget` bytes in all, reused photo after photo."""

    def __init__(self, dev, budget: int | None = None):
        self.dev = dev
        self.budget = int(settings.get("FACERUN_PHOTO_STAGING_MB") * 2**20) if budget is None else int(budget)
        self.native = mapping_calls() if self.budget > 0 else None
        self.free: list[_Slot] = []  # buffers not holding a photo (mapped, or being mapped again)
        self.held = 0  # bytes of every buffer made and not destroyed
        # re-entrant: a staged photo dropped unrun gives its buffer back from a finalizer, which a collection may
        # run on a thread already holding the lock (in _take)
        self._lock = threading.RLock()
        self._threads: ThreadPoolExecutor | None = None  # stage_all's, made at its first use

    def stage_all(self, items: list, threads: int) -> list:
        """Batch items [(rgb, photo)] with every photo not yet staged staged by `threads` threads side by side (the
        copies let go of the interpreter lock): one thread copies at the host's one-core memcpy speed, and a batch
        of 16 photos of 640x640 is 19.7 MB. Items as they were where there is nothing to do (threads 0, a photo
        or none left to stage, no staging here)."""
        todo = [k for k, (rgb, _) in enumerate(items) if getattr(rgb, "staged", None) is None]
        if threads <= 0 or len(todo) < 2 or self.native is None:
            return items
        if self._threads is None:
            with self._lock:
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(threads, thread_name_prefix="facerun-upload")
                    weakref.finalize(self, self._threads.shutdown, wait=False)
        staged = self._threads.map(self.stage, [items[k][0] for k in todo])
        out = list(items)
        for k, rgb in zip(todo, staged):
            out[k] = (rgb, items[k][1])
        return out

    def stage(self, rgb: np.ndarray) -> np.ndarray:
        """`rgb` (H x W x C uint8) as a StagedImage whose bytes are in the device's upload memory, or `rgb` itself
        where no buffer is free now (or the GPU is gone)."""
        if self.native is None or rgb.dtype != np.uint8 or D.broken_reason():
            return rgb
        data = np.ascontiguousarray(rgb).reshape(-1)
        nbytes = -(-data.size // 4) * 4
        try:
            slot = self._take(nbytes)
        except Exception:  # the run finds the GPU's trouble itself; this photo goes up the old way
            slot = None
        if slot is None:
            counters.bump("gpu_photos_unstaged")
            return rgb
        slot.view[:data.size] = data  # no wgpu call: a plain copy into mapped memory
        staged = Staged(self, slot, nbytes, tuple(rgb.shape))
        image = rgb.view(StagedImage)
        image.staged = staged
        weakref.finalize(image, staged.release)
        counters.bump("gpu_photos_staged")
        return image

    def _take(self, nbytes: int) -> _Slot | None:
        """A free mapped buffer of at least `nbytes` (the smallest that fits, not far larger), or a new one within
        the budget (free buffers that do not fit destroyed to make room), or None."""
        size = -(-nbytes // GRAIN) * GRAIN
        for polled in (False, True):
            with self._lock:
                fits = [s for s in self.free if size <= s.size <= size * LOOSE]
                ready = [s for s in fits if s.mapped()]
                if ready:
                    slot = min(ready, key=lambda s: s.size)
                    self.free.remove(slot)
                    return slot
            if polled or not fits:
                break
            self.native.poll(self.dev.device)  # mappings asked for and done: their callbacks run now
        with self._lock:
            while self.held + size > self.budget:  # a buffer whose mapping is pending is not destroyed
                unfit = [s for s in self.free if not size <= s.size <= size * LOOSE and s.mapped()]
                if not unfit:
                    return None
                old = unfit[0]
                self.free.remove(old)
                self.held -= old.size
                old.buffer.destroy()
            self.held += size
        wgpu = _wgpu()
        try:
            buffer = self.dev.device.create_buffer(label="facerun staged photo", size=size,
                                                   usage=wgpu.BufferUsage.MAP_WRITE | wgpu.BufferUsage.COPY_SRC)
            slot = _Slot(self.native, buffer)
            slot.map()
            while slot.status is None:
                self.native.poll(self.dev.device, wait=True)
            if not slot.mapped():
                raise RuntimeError(f"could not map an upload buffer (status {slot.status})")
        except Exception:
            with self._lock:
                self.held -= size
            raise
        return slot

    def _give_back(self, slot: _Slot) -> None:
        with self._lock:
            self.free.append(slot)


def write_words(write, buffer, at: int, data: np.ndarray) -> None:
    """Bytes `data` into `buffer` from byte `at` by `write` (a queue's write_buffer, or replay.writer's), which moves
    whole words: the last bytes padded to one."""
    whole = data.size - data.size % 4
    if whole:
        write(buffer, at, data[:whole])
    if whole != data.size:
        write(buffer, at + whole, np.pad(data[whole:], (0, 4 - (data.size - whole))))


def write_pieces(write, buffer, at: int, data: np.ndarray) -> None:
    """Array `data` (whole words) into `buffer` from byte `at` by `write`, in writes of at most
    FACERUN_UPLOAD_PIECE_MB (0, the default: one write): wgpu stages each write in memory of its own, and one write
    of 78.6 MB measured 5.2 GB/s against 12-16 for writes up to 20 MB (docs/benchmarks.md); whether pieces restore
    that rate is still to be measured on a device (docs/bench/h200-stop54/run20.sh)."""
    flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    piece = int(settings.get("FACERUN_UPLOAD_PIECE_MB") * 2**20) // 4 * 4
    if piece <= 0 or flat.nbytes <= piece:
        write(buffer, at, flat)
        return
    for start in range(0, flat.nbytes, piece):
        write(buffer, at + start, flat[start : start + piece])


def staged_bytes(rgb, pool: PhotoStaging | None) -> Staged | None:
    """The live Staged handle of `rgb` made by `pool`, or None: the image goes up from the host."""
    staged = getattr(rgb, "staged", None)
    if staged is None or pool is None or not staged.taken(pool, rgb.shape):
        return None
    return staged
