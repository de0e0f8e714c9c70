"""A model's activation, parameter and read-back buffers, shared by all of its compiled programs.

A photo library meets hundreds of input sizes; each size is its own program, but they all have the same steps, so
they can run in the same buffers: slot i of every program lives in the arena's buffer i, grown (with headroom) only
when a larger size needs more. Bind groups are made over those buffers once and found again by what they bind, so a
new size costs planning and a parameter upload, not new buffers and bind groups. One program of the model runs at a
time (`lock`); the parameters in the shared uniform buffer are those of the program that ran last (`owner`).
"""

from __future__ import annotations

import threading

from .. import counters
from .kernels import PHOTO_ITEMS

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
        self.owner = None  # what the uniform buffer's parameters are: a program, or (program, photo size) when masked
        self.photos = None  # a batch's items' photo sizes (rows, columns), for per-item masks (epilogue.wgsl)
        self._groups: dict[tuple, object] = {}

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
        if self.photos is None:
            self.photos = dev.create_buffer(label="facerun batch photo sizes", size=8 * PHOTO_ITEMS,
                                            usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
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

    def drop_groups(self, tag: str) -> None:
        """Forget the bind groups whose key starts with `tag` (a buffer of theirs was replaced; lock held)."""
        self._groups = {k: g for k, g in self._groups.items() if k[0] != tag}

    def bind_group(self, key: tuple, make):
        """The bind group for `key` (what it binds), made once by `make()`."""
        group = self._groups.get(key)
        if group is None:
            group = make()
            self._groups[key] = group
            counters.bump("gpu_bind_groups_created")
        return group

    def load_params(self, owner, blob: bytes, write=None) -> None:
        """Put the parameters `blob` of `owner` (a program, or a program and a photo size) in the uniform buffer
        unless they are there already (call with `lock` held), by `write` (buffer, offset, data; the queue's
        write_buffer by default)."""
        same = self.owner is owner if not isinstance(owner, tuple) else (
            isinstance(self.owner, tuple) and self.owner[0] is owner[0] and self.owner[1] == owner[1])
        if not same:
            (write or self.dev.queue.write_buffer)(self.uniform, 0, blob)
            self.owner = owner
