"""Photos put on the device by the threads that decode them, not by the one that feeds the device.

Uploading a decoded photo (about 2.4 MB for 1024x768) is a copy into wgpu's staging memory: on the thread that
feeds the GPU it was a third of that thread's time a photo in a library run. A decoding thread calls `stage` once its
photo is laid out: the bytes go into a device buffer of this pool (`queue.write_buffer`, in C, the interpreter lock
let go), and the photo comes back as a `runner.StagedImage` holding a `Staged` handle. A batch of photos then only
records a copy from that buffer on the device (batch.py) and gives the buffer back once it is submitted: the queue
runs a later write to the buffer after that submission's copy, so the next photo may be written at once.

The pool holds at most FACERUN_PHOTO_STAGING_MB of buffers; a photo that finds no room (or a GPU gone) is simply
not staged, and goes up the old way. A staged photo never submitted gives its buffer back when it is dropped.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from .. import counters, settings
from ..runner import StagedImage
from . import device as D

GRAIN = 256 * 1024  # buffer sizes rounded up to this: photos of one bucket share buffers
LOOSE = 1.5  # a free buffer takes a photo of at least 1 / LOOSE of its size


def _wgpu():
    import wgpu

    return wgpu


class Staged:
    """A photo's bytes in one of the pool's buffers, from byte 0, `nbytes` long (whole words; the last padded)."""

    def __init__(self, pool: PhotoStaging, buffer, nbytes: int, shape: tuple):
        self.pool, self.buffer, self.nbytes, self.shape = pool, buffer, nbytes, shape
        self._live = True

    def taken(self, pool: PhotoStaging, shape: tuple) -> bool:
        """Whether these bytes are still in the buffer, staged by `pool` for an image of `shape`."""
        return self._live and self.pool is pool and self.shape == tuple(shape)

    def release(self) -> None:
        """The buffer back to the pool (once the submission copying it is made, or the photo is dropped)."""
        if self._live:
            self._live = False
            self.pool._give_back(self.buffer)


class PhotoStaging:
    """One device's staged photos: buffers of at most `budget` bytes in all, reused photo after photo."""

    def __init__(self, dev, budget: int | None = None):
        self.dev = dev
        self.budget = int(settings.get("FACERUN_PHOTO_STAGING_MB") * 2**20) if budget is None else int(budget)
        self.free: list = []  # buffers not holding a photo
        self.held = 0  # bytes of every buffer made and not destroyed
        self._lock = threading.Lock()

    def stage(self, rgb: np.ndarray) -> np.ndarray:
        """`rgb` (H x W x C uint8) as a StagedImage whose bytes are on the device, or `rgb` itself where it does not
        fit the pool now (or the GPU is gone)."""
        if self.budget <= 0 or rgb.dtype != np.uint8 or D.broken_reason():
            return rgb
        data = np.ascontiguousarray(rgb).reshape(-1)
        nbytes = -(-data.size // 4) * 4
        buffer = self._take(nbytes)
        if buffer is None:
            counters.bump("gpu_photos_unstaged")
            return rgb
        try:
            write_words(self.dev.queue, buffer, 0, data)
        except Exception:  # the run finds the GPU's trouble itself; this photo goes up the old way
            self._give_back(buffer)
            return rgb
        staged = Staged(self, buffer, nbytes, tuple(rgb.shape))
        image = rgb.view(StagedImage)
        image.staged = staged
        weakref.finalize(image, staged.release)
        counters.bump("gpu_photos_staged")
        return image

    def _take(self, nbytes: int):
        """A free buffer of at least `nbytes` (the smallest that fits, not far larger), or a new one within the
        budget (free buffers that do not fit destroyed to make room), or None."""
        size = -(-nbytes // GRAIN) * GRAIN
        with self._lock:
            fits = [b for b in self.free if size <= b.size <= size * LOOSE]
            if fits:
                buffer = min(fits, key=lambda b: b.size)
                self.free.remove(buffer)
                return buffer
            while self.held + size > self.budget and self.free:
                old = self.free.pop(0)
                self.held -= old.size
                old.destroy()
            if self.held + size > self.budget:
                return None
            self.held += size
        wgpu = _wgpu()
        try:
            return self.dev.device.create_buffer(label="facerun staged photo", size=size,
                                                 usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        except Exception:
            with self._lock:
                self.held -= size
            return None

    def _give_back(self, buffer) -> None:
        with self._lock:
            self.free.append(buffer)


def write_words(queue, buffer, at: int, data: np.ndarray) -> None:
    """Bytes `data` into `buffer` from byte `at` (write_buffer moves whole words: the last bytes padded to one)."""
    whole = data.size - data.size % 4
    if whole:
        queue.write_buffer(buffer, at, data[:whole])
    if whole != data.size:
        queue.write_buffer(buffer, at + whole, np.pad(data[whole:], (0, 4 - (data.size - whole))))


def staged_bytes(rgb, pool: PhotoStaging | None) -> Staged | None:
    """The live Staged handle of `rgb` made by `pool`, or None: the image goes up from the host."""
    staged = getattr(rgb, "staged", None)
    if staged is None or pool is None or not staged.taken(pool, rgb.shape):
        return None
    return staged
