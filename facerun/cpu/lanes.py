"""Lanes: a kernel's bands of rows split into contiguous runs that separate threads can make at once.

numpy's einsum, copies and ufuncs run on one core, and they are most of a detector's time on the CPU (OpenBLAS
threads only the products). So a convolution's bands are dealt out to lanes when the program is built: each lane has
its own scratch (a role suffix) and runs its products on one BLAS thread, and at run time the lanes run on a small pool
of threads, or one after another on the caller's thread while the machine is busy. Which lane makes which band is
fixed when the program is built, so a run's result does not depend on how many threads ran it.
"""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from .. import settings

# Below this many multiply-adds a step runs as one lane: handing a lane to a thread and waiting costs ~20-40 us.
LANE_MACS = 8 << 20
# Nor is a band split below this many values for a lane: the threads take turns holding the GIL between numpy calls,
# and calls over less than ~64K values (tens of microseconds) gain nothing in parallel (measured: a 14x14x512 1x1 +
# depthwise pair in two lanes of 7 rows ran 1.2x slower than in one band on OpenBLAS's two threads).
MIN_BAND_VALUES = 1 << 16
MAX_LANES = 4
# A product outside the lanes of a band (a fully connected layer, a small map's 1x1) runs on the OpenBLAS threads the
# lanes leave (`share`); where they leave none, it is split by output columns over the lanes from this many
# multiply-adds on. OpenBLAS's threads spin on their cores for ~0.1 s after each call (measured: onnxruntime ran 3x
# slower just after one two-thread product), so on two cores they would take the lanes' core.
SPLIT_MACS = 24 << 20
# ... except a product of one row (a fully connected layer at batch 1), bound by reading its weights: split from
# this many multiply-adds (4 MB of weights) on.
SPLIT_ROW_MACS = 1 << 20


def threads() -> int:
    """The CPU interpreter's threads: FACERUN_CPU_THREADS when set, else the cores this process may run on."""
    fixed = settings.get("FACERUN_CPU_THREADS")
    if fixed:
        return fixed
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def share(total: int) -> tuple[int, int]:
    """(lanes, OpenBLAS threads) out of `total` threads. Lanes take turns holding the GIL between numpy calls, so
    past four they gain little (docs/bench/code-figures.md); OpenBLAS takes the cores
    the lanes leave for the products outside lanes, where its threads can spin without taking a lane's core. Up to
    two threads both are lanes, and OpenBLAS stays on one: there is no core to spare for its spinning."""
    if total <= 2:
        return max(1, min(MAX_LANES, total)), 1
    lanes = max(2, min(MAX_LANES, total // 2))
    return lanes, max(1, total - lanes)


def available() -> int:
    """Lanes a program is built with (see `share`)."""
    return share(threads())[0]


def count(macs: int, bands: int, values: int | None = None) -> int:
    """Lanes for a step of `macs` multiply-adds made in `bands` bands (of `values` output values in all, when
    given: no lane gets fewer than MIN_BAND_VALUES of them)."""
    if values is not None:
        bands = min(bands, values // MIN_BAND_VALUES)
    if macs < LANE_MACS or bands < 2:
        return 1
    return max(1, min(available(), bands))


def parts(macs: int, columns: int, rows: int = 2) -> int:
    """Lanes a lone matrix product of `macs` multiply-adds is split into, by its output's `columns` (a block of 32
    columns at least: BLAS runs narrow blocks slowly). Handing work to a thread costs tens of microseconds on a
    shared machine (measured: a 28x28 1x1 convolution of 6.4M multiply-adds split in two ran 1.8x slower)."""
    if macs < (SPLIT_ROW_MACS if rows == 1 else SPLIT_MACS):
        return 1
    return max(1, min(available(), columns // 32))


def balanced(total: int, per_band: int, lanes: int, step: int = 1) -> int:
    """Rows (or items) per band so that `total` splits into a multiple of `lanes` bands of nearly equal size, each
    about `per_band` or smaller and a multiple of `step` (a lane that makes one band more than another sets the
    time: 7 bands over 2 lanes ran at 1.4x, not 2x)."""
    if lanes <= 1:
        return per_band
    bands = -(-total // max(per_band, 1))
    bands = -(-bands // lanes) * lanes
    size = -(-total // bands)
    return max(step, -(-size // step) * step)


def deal(bands: int, lanes: int) -> list[int]:
    """The lane of each band: contiguous runs of nearly equal length."""
    return [b * lanes // max(bands, 1) for b in range(bands)]


class One:
    """A run context for code inside a lane: its products run on one BLAS thread (the lanes are the threads)."""

    threads = 1
    blas = 1


ONE = One()


class _Pool:
    """Daemon threads that run lanes handed to them; any number of callers may hand lanes at once (each waits only
    for its own)."""

    def __init__(self):
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.started = 0
        self.lock = threading.Lock()

    def _grow(self, n: int) -> None:
        with self.lock:
            while self.started < n:
                threading.Thread(target=self._work, name=f"facerun-lane-{self.started}", daemon=True).start()
                self.started += 1

    def _work(self) -> None:
        while True:
            fn, done = self.tasks.get()
            try:
                with np.errstate(all="ignore"):  # as on the caller's thread (numpy's error state is per thread)
                    fn()
            except BaseException as e:  # handed back to the caller, which raises it
                done.put(e)
            else:
                done.put(None)

    def run(self, lanes: list, threads: int) -> None:
        """Run the callables in `lanes`, `threads` at a time at most (the caller's thread is one of them)."""
        if threads <= 1 or len(lanes) <= 1:
            for fn in lanes:
                fn()
            return
        groups = _groups(lanes, min(threads, len(lanes)))
        self._grow(len(groups) - 1)
        done: queue.SimpleQueue = queue.SimpleQueue()
        for g in groups[1:]:
            self.tasks.put((g, done))
        error = None
        try:
            groups[0]()
        except BaseException as e:
            error = e
        for _ in groups[1:]:
            got = done.get()
            error = error or got
        if error is not None:
            raise error


def _groups(lanes: list, threads: int) -> list:
    """`lanes` in `threads` contiguous groups, each one callable that runs its lanes in order."""
    owners = deal(len(lanes), threads)
    groups = [[fn for fn, o in zip(lanes, owners) if o == t] for t in range(threads)]

    def chain(fns):
        if len(fns) == 1:
            return fns[0]

        def run():
            for fn in fns:
                fn()

        return run

    return [chain(g) for g in groups if g]


POOL = _Pool()


_built = threading.local()  # bands dealt to lanes by the programs being built on this thread


def runner(lanes: list, ctx, bands: bool = True):
    """One callable running `lanes` (callables) with this run's thread count (ctx.threads), in parallel when it is
    above one. `bands`: they are a step's bands (counted by `dealt_bands`), not the pieces of a split product."""
    if len(lanes) == 1:
        return lanes[0]
    if bands:
        _built.count = getattr(_built, "count", 0) + 1
    return lambda: POOL.run(lanes, ctx.threads)


def dealt_bands() -> int:
    """How many steps built on this thread so far dealt their bands to lanes (Executable compares before and after)."""
    return getattr(_built, "count", 0)


def sequence(fns: list):
    """One callable running `fns` in order."""
    fns = [f for f in fns if f is not None]

    def run():
        for fn in fns:
            fn()

    return run
