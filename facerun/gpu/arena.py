"""A model's activation, parameter and read-back buffers, shared by all of its compiled programs.

A photo library meets hundreds of input sizes; each size is its own program, but they all have the same steps, so
they can run in the same buffers: slot i of every program lives in the arena's buffer i, grown (with headroom) only
when a larger size needs more. Bind groups are made over those buffers once and found again by what they bind, so a
new size costs planning and a parameter upload, not new buffers and bind groups. One program of the model runs at a
time (`lock`); the parameters in the shared uniform buffer are those of the program that ran last (`owner`).
"""

from __future__ import annotations

import threading
import weakref

from .. import counters

GROWTH = 1.25  # a buffer that must grow takes this much headroom, so sizes creeping upwards do not regrow it each time


def _wgpu():
    import wgpu

    return wgpu


class Arena:
    def __init__(self, dev):
        self.dev = dev
        self.lock = threading.RLock()
        self.buffers: list = []  # by slot
        self.uniform = None
        self.staging = None
        self.generation = 0  # bumped when a buffer is replaced: bind groups and recorded commands made before are stale
        self.owner = None  # the program whose parameters the uniform buffer holds
        self.image_generation = 0  # bumped when the photo-bytes buffer (image_buffers) is replaced
        self._groups: dict[tuple, object] = {}
        self._photos: PhotoPool | None = None

    @property
    def device_bytes(self) -> int:
        extra = (self.uniform.size if self.uniform is not None else 0) + (self.staging.size if self.staging else 0)
        return sum(b.size for b in self.buffers) + extra

    def fit(self, slot_sizes: list[int], uniform_bytes: int, staging_bytes: int) -> None:
        """Make every buffer at least as large as a program needs (call with `lock` held)."""
        wgpu = _wgpu()
        dev = self.dev.device
        grown = False

        def bigger(need: int, old, most: int | None = None) -> int | None:
            if old is not None and old.size >= need:
                return None
            size = need if old is None else max(need, int(old.size * GROWTH))
            size = -(-size // 256) * 256
            if most is not None and size > most:  # the headroom stops at what can be bound
                size = max(need, most - most % 16)
            return size

        # a slot is bound whole, so its headroom must not take it past the device's largest binding (the lowering
        # keeps every value and split-K scratch within it)
        most = getattr(getattr(self.dev, "limits", None), "max_binding", None)
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        for i, need in enumerate(slot_sizes):
            old = self.buffers[i] if i < len(self.buffers) else None
            size = bigger(need, old, most)
            if size is None:
                continue
            buf = dev.create_buffer(label=f"facerun value {i}", size=size, usage=usage)
            if old is None:
                self.buffers.append(buf)
            else:
                self.buffers[i] = buf
                grown = True
        size = bigger(max(16, uniform_bytes), self.uniform)
        if size is not None:
            grown = grown or self.uniform is not None
            self.uniform = dev.create_buffer(label="facerun params", size=size,
                                             usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            self.owner = None
        size = bigger(max(16, staging_bytes), self.staging)
        if size is not None:
            grown = grown or self.staging is not None  # recorded commands copy into the old one
            self.staging = dev.create_buffer(label="facerun read-back", size=size,
                                             usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        if grown:
            self.generation += 1
            self._groups.clear()
            counters.bump("gpu_arena_grown")

    def image_buffers(self, nbytes: int) -> tuple:
        """(a buffer of at least `nbytes` for a photo's bytes, a uniform buffer for its layout's parameters): for
        GpuProgram.run_image (call with `lock` held). The buffer grows with headroom like the slots."""
        wgpu = _wgpu()
        dev = self.dev.device
        image = getattr(self, "_image", None)
        if image is None or image.size < nbytes:
            size = max(nbytes, int(image.size * GROWTH) if image is not None else nbytes, 16)
            image = self._image = dev.create_buffer(label="facerun photo bytes", size=-(-size // 256) * 256,
                                                    usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
            self.image_generation += 1  # the bind groups and commands over the old buffer are stale
            self._groups = {k: g for k, g in self._groups.items() if k[0] != "image"}
        if getattr(self, "_image_params", None) is None:
            self._image_params = dev.create_buffer(label="facerun photo params", size=256,
                                                   usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        return image, self._image_params

    def stage_photo(self, data, capacity: int):
        """A photo's bytes (`data`, flat uint8) written to a device buffer of their own, on the calling thread (a
        library's decoding thread) ahead of the run: a Staged for GpuProgram.run_image, or None (no buffer free, or
        the photo is past `capacity` bytes). Not under `lock`: the queue takes writes from any thread, in order
        before the next submission, and a pool buffer is not in use by any run until it is given back."""
        if self._photos is None or self._photos.capacity != capacity:
            with self.lock:
                if self._photos is None or self._photos.capacity != capacity:
                    self._photos = PhotoPool(self.dev, capacity)
        return self._photos.stage(data)

    def bind_group(self, key: tuple, make):
        """The bind group for `key` (what it binds), made once by `make()`."""
        group = self._groups.get(key)
        if group is None:
            group = make()
            self._groups[key] = group
            counters.bump("gpu_bind_groups_created")
        return group

    def load_params(self, program, blob: bytes) -> None:
        """Put `program`'s parameters in the uniform buffer unless they are there already (call with `lock` held)."""
        if self.owner is not program:
            self.dev.queue.write_buffer(self.uniform, 0, blob)
            self.owner = program


# photos staged ahead of their runs, at most: a library run keeps up to 2 x its decoding threads + 2 photos decoded
# ahead of the network (face.library), 18 with 8 threads
STAGED_PHOTOS = 24
STAGED_BUDGET_MB = 192  # and at most this much device memory for them (FACERUN_GPU_STAGED_MB)


def write_photo(queue, buffer, data) -> None:
    """A photo's bytes (flat uint8) into `buffer`: write_buffer moves whole 4-byte words, so the last bytes padded."""
    import numpy as np

    whole = data.size - data.size % 4
    if whole:
        queue.write_buffer(buffer, 0, data[:whole])
    if whole != data.size:
        queue.write_buffer(buffer, whole, np.pad(data[whole:], (0, 4 - (data.size - whole))))


class Staged:
    """A photo's bytes on the device, in a buffer of the pool until `release()` (or until this object is gone)."""

    def __init__(self, pool: PhotoPool, buffer, nbytes: int):
        self.buffer, self.nbytes = buffer, nbytes
        self._finalizer = weakref.finalize(self, pool.give, buffer)

    def release(self) -> None:
        self._finalizer()


class PhotoPool:
    """Device buffers of `capacity` bytes each that photos are written into on decoding threads (a write of 4-7 MB
    a photo was 1 ms of the network thread's 7 on the H200 host). A buffer goes back to the pool when its photo's
    run is done, or when the photo is dropped unrun (its Staged is collected)."""

    def __init__(self, dev, capacity: int):
        import os

        self.dev, self.capacity = dev, -(-int(capacity) // 256) * 256
        try:
            budget = float(os.environ.get("FACERUN_GPU_STAGED_MB", STAGED_BUDGET_MB)) * 2**20
        except ValueError:
            budget = STAGED_BUDGET_MB * 2**20
        self.most = min(STAGED_PHOTOS, int(budget // max(self.capacity, 1)))
        self.free: list = []
        self.made = 0
        self._lock = threading.Lock()

    def stage(self, data) -> Staged | None:
        if data.size > self.capacity or self.most <= 0:
            return None
        with self._lock:
            if self.free:
                buffer = self.free.pop()
            elif self.made < self.most:
                self.made += 1
                buffer = None
            else:
                return None
        if buffer is None:
            wgpu = _wgpu()
            buffer = self.dev.device.create_buffer(label="facerun staged photo", size=self.capacity,
                                                   usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
        staged = Staged(self, buffer, int(data.size))
        try:
            write_photo(self.dev.queue, buffer, data)
        except Exception:  # the run writes the photo itself, and reports the device's trouble if it is one
            staged.release()
            return None
        counters.bump("gpu_photos_staged")
        return staged

    def give(self, buffer) -> None:
        with self._lock:
            self.free.append(buffer)
