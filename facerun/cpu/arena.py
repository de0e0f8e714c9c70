"""Memory for the fast interpreter: every buffer a program needs, allocated once, reused by every run.

Buffers get slots by lifetime (a slot is reused once its last reader has run), scratch space is shared by role
across steps (a step's scratch lives only while it runs). Executables, each holding an arena, are kept per program
under a byte budget (FACERUN_CPU_ARENA_MB, default 1024), least recently used first out, so thousands of input sizes
don't pin thousands of arenas.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from math import prod

import numpy as np

from .. import settings

ARENA_BUDGET_MB = settings.default("FACERUN_CPU_ARENA_MB")


class SlotPlan:
    """Assigns each buffer a slot: a freed slot is reused (smallest that fits, else the largest, grown)."""

    def __init__(self):
        self.sizes: list[int] = []  # elements per slot
        self.users: list[int] = []  # live buffers in each slot
        self.slot_of: dict[object, int] = {}

    def take(self, key, size: int) -> int:
        free = [s for s, n in enumerate(self.users) if n == 0]
        fits = [s for s in free if self.sizes[s] >= size]
        if fits:
            slot = min(fits, key=lambda s: self.sizes[s])
        elif free:
            slot = max(free, key=lambda s: self.sizes[s])
            self.sizes[slot] = size
        else:
            slot = len(self.sizes)
            self.sizes.append(size)
            self.users.append(0)
        self.users[slot] += 1
        self.slot_of[key] = slot
        return slot

    def share(self, key, other) -> None:
        """`key` lives in `other`'s slot too (an elementwise step writing over its dying input)."""
        slot = self.slot_of[other]
        self.users[slot] += 1
        self.slot_of[key] = slot

    def release(self, key) -> None:
        self.users[self.slot_of[key]] -= 1


def _fill_of(role: str) -> float | None:
    return float(role[5:]) if role.startswith("fill:") else None


class Scratch:
    """Per-step working space by role: requests of one role are views of one buffer, which grows (geometrically,
    to a new buffer) when a request is larger; views made earlier keep the buffer they were made on. Roles named
    "fill:<value>" hold that value and are never written."""

    def __init__(self):
        self.buffers: dict[str, np.ndarray] = {}
        self.retired = 0  # elements in buffers grown out of (still held by earlier views)

    def get(self, role: str, shape) -> np.ndarray:
        n = prod(shape)
        buf = self.buffers.get(role)
        if buf is None or buf.size < n:
            size = n if buf is None else max(n, 2 * buf.size)
            self.retired += 0 if buf is None else buf.size
            fill = _fill_of(role)
            buf = np.empty(size, np.float32) if fill is None else np.full(size, fill, np.float32)
            self.buffers[role] = buf
        return buf[:n].reshape(shape)

    def constant(self, value: float, shape) -> np.ndarray:
        """A read-only array of `value` (numpy's maximum/minimum run their fast loops on two arrays, not on an
        array and a scalar)."""
        a = self.get(f"fill:{float(value)!r}", shape)
        a.flags.writeable = False
        return a

    @property
    def nbytes(self) -> int:
        return 4 * (sum(b.size for b in self.buffers.values()) + self.retired)

    def lane(self, k: int):
        """This scratch as lane `k` of a step sees it (lanes.py): its own buffer for every role, lane 0 the plain
        one; constants are shared (nobody writes them)."""
        return self if k == 0 else _Lane(self, k)


class _Lane:
    def __init__(self, scratch: Scratch, k: int):
        self.scratch, self.suffix = scratch, f"@{k}"

    def get(self, role: str, shape) -> np.ndarray:
        return self.scratch.get(role + self.suffix, shape)

    def constant(self, value: float, shape) -> np.ndarray:
        return self.scratch.constant(value, shape)

    def lane(self, k: int):
        return self.scratch.lane(k)


# ---------------------------------------------------------------------------------------- executables per program

_lock = threading.Lock()
_kept: OrderedDict = OrderedDict()  # id(program) -> [weakref(program), idle executables, bytes]
_total = 0


def _budget() -> int:
    return settings.get("FACERUN_CPU_ARENA_MB") << 20


def _forget(key, lock=_lock, kept=_kept) -> None:
    """A program was collected: its executables go (bound defaults: this also runs while the interpreter exits)."""
    global _total
    with lock:
        entry = kept.pop(key, None)
        if entry is not None:
            _total -= entry[2]


def borrow(prog, build):
    """An idle executable of `prog` (built by `build(prog)` when none is idle: the first run, or a concurrent one).
    Give it back with `give_back` once the run is over."""
    global _total
    with _lock:
        entry = _kept.get(id(prog))
        if entry is not None and entry[0]() is prog and entry[1]:
            _kept.move_to_end(id(prog))
            exe = entry[1].pop()
            entry[2] -= exe.nbytes
            _total -= exe.nbytes
            return exe
    return build(prog)


def give_back(prog, exe) -> None:
    global _total
    key = id(prog)
    evicted = []
    with _lock:
        entry = _kept.get(key)
        if entry is None or entry[0]() is not prog:
            if entry is not None:
                _total -= entry[2]
            entry = [weakref.ref(prog, lambda _ref, k=key, forget=_forget: forget(k)), [], 0]
            _kept[key] = entry
        entry[1].append(exe)
        entry[2] += exe.nbytes
        _total += exe.nbytes
        _kept.move_to_end(key)
        budget = _budget()
        while _total > budget and len(_kept) > 1:
            _, gone = _kept.popitem(last=False)
            _total -= gone[2]
            evicted.append(gone)
    del evicted  # dropped outside the lock


def kept_bytes() -> int:
    """Bytes of the executables kept for later runs (all programs)."""
    return _total
