"""A least-recently-used cache under a cost budget: compiled programs for thousands of input sizes in flat memory.

Each entry has a cost (bytes it holds); once the total passes the budget the least recently used entries go, the
newest always staying (a single entry over the budget is still usable). Callers hold their own lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np


class LruCache:
    def __init__(self, budget: int, cost: Callable[[object], int],
                 on_evict: Callable[[Hashable, object], None] | None = None):
        self.budget = int(budget)
        self.cost = cost
        self.on_evict = on_evict
        self.total = 0  # the entries' cost, summed
        self.evictions = 0
        self._entries: OrderedDict = OrderedDict()  # key -> (value, cost), least recently used first

    def get(self, key, default=None):
        hit = self._entries.get(key)
        if hit is None:
            return default
        self._entries.move_to_end(key)
        return hit[0]

    def put(self, key, value) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.total -= old[1]
        cost = max(0, int(self.cost(value)))
        self._entries[key] = (value, cost)
        self.total += cost
        while self.total > self.budget and len(self._entries) > 1:
            gone, (gone_value, gone_cost) = self._entries.popitem(last=False)
            self.total -= gone_cost
            self.evictions += 1
            if self.on_evict is not None:
                self.on_evict(gone, gone_value)

    def pop(self, key, default=None):
        hit = self._entries.pop(key, None)
        if hit is None:
            return default
        self.total -= hit[1]
        return hit[0]

    def __contains__(self, key) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(list(self._entries))

    def keys(self) -> list:
        return list(self._entries)


_PLAIN = frozenset((int, float, bool, str, tuple, type(None)))  # field types that hold no array


def program_bytes(prog) -> int:
    """Host memory a compiled step program holds: its constants and the arrays its steps carry (weights in their
    packed layouts), each array counted once."""
    seen: dict[int, int] = {}
    for v in prog.values:
        if v.data is not None:
            seen[id(v.data)] = v.data.nbytes
    for st in prog.steps:
        for item in vars(st).values():
            if type(item) in _PLAIN:  # most of a step's fields: value ids, node names, windows
                continue
            if isinstance(item, np.ndarray):
                seen[id(item)] = item.nbytes
            elif hasattr(item, "slope") and isinstance(item.slope, np.ndarray):
                seen[id(item.slope)] = item.slope.nbytes
    return sum(seen.values()) + 64 * len(prog.steps)


def budget_from_env(variable: str) -> int:
    """A budget in bytes from the setting `variable` (MiB; its default in facerun.settings when unset)."""
    from . import settings

    return max(0, int(settings.get(variable) * (1 << 20)))


class InFlight:
    """Work on one key by one thread at a time, different keys at once: a program being compiled by one thread is
    waited for by the next that wants it, while a thread wanting a cached program or another size goes on."""

    def __init__(self):
        self._events: dict = {}
        self._lock = threading.Lock()

    def claim(self, key) -> threading.Event | None:
        """None: the caller does the work, then calls done(key). Else the event to wait for before looking again
        (the work may have failed: then the caller claims it next)."""
        with self._lock:
            event = self._events.get(key)
            if event is None:
                self._events[key] = threading.Event()
            return event

    def done(self, key) -> None:
        with self._lock:
            event = self._events.pop(key, None)
        if event is not None:
            event.set()
