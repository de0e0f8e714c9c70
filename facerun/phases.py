"""Where the thread feeding the network spends its time, phase by phase (`facerun bench photos`' `seconds.phases`).

A run hands its `PhaseClock` to the code it calls on its own thread with `recording(clock)`: the runners ask for it
once per run (`current()`, None when nobody records) and add perf_counter_ns differences to its phases. The clock is
per thread, so work the same objects do on other threads (decoders compiling ahead) is not counted in it. A run's
cost is a few list additions: no objects are made per photo.

The phases, in a photo's order (what each covers is said where it is timed):
    decode    decoding and laying out the photo (only where the feeding thread decodes: the serial run, and a CPU run
              taking back a decode its decoding threads had not started)
    program   choosing the program of the photo's size, compiling it where no decoder did (net.py, gpu/photo.py)
    params    writing the program's parameters, a photo's mask sizes (gpu/runner.py `current`)
    upload    the photo's bytes or the input written to the device (queue.write_buffer)
    record    recording the command buffer (the pass, the copies); mostly done for the next run after submitting
    submit    queue.submit
    wait      waiting for the device to finish (the read-back buffer's mapping)
    readback  copying the outputs out of the mapped buffer
    cut       the outputs cut by name and cropped to the photo's own size
    cpu       the CPU interpreter's run (the network on the CPU)
    post      NMS and alignment (only where the feeding thread does them: the serial run)
    embed     the embedding network's batches (where the feeding thread embeds: not where a thread of its own does)
    python    the rest of the feeding thread's busy time: the library's loop and the Python around the runner
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from time import perf_counter_ns

# What the feeding thread waits for, outside its busy time: the photo next in order from the decoders, a photo's
# post-processing (in order), the embedding thread (where one embeds: face/library.py) and the consumer of its
# results (progress bars, the index, a bench row).
WAITS = ("decoders", "post", "embedder", "consumer")
(ON_DECODERS, ON_POST, ON_EMBED, ON_CONSUMER) = WAITS
PHASES = ("decode", "program", "params", "upload", "record", "submit", "wait", "readback", "cut", "cpu", "post",
          "embed", "python")
(DECODE, PROGRAM, PARAMS, UPLOAD, RECORD, SUBMIT, WAIT, READBACK, CUT, CPU, POST, EMBED, PYTHON) = range(len(PHASES))


class PhaseClock:
    """Nanoseconds per phase (`ns[PROGRAM]` ...), and `busy_ns`: the feeding thread's busy time measured on its own
    (the loop's time less its waits), which the phases should add up to."""

    __slots__ = ("ns", "busy_ns", "idle_ns")

    def __init__(self):
        self.ns = [0] * len(PHASES)
        self.busy_ns = 0
        self.idle_ns = dict.fromkeys(WAITS, 0)  # the feeding thread's waits, by what it waited for (WAITS)

    def add(self, phase: int, ns: int) -> None:
        self.ns[phase] += ns

    def lap(self, phase: int, since: int) -> int:
        """Add the time from `since` (a perf_counter_ns) to now to `phase`; now, for the next lap."""
        now = perf_counter_ns()
        self.ns[phase] += now - since
        return now

    def seconds(self) -> dict[str, float]:
        return {name: ns / 1e9 for name, ns in zip(PHASES, self.ns)}

    def total_ns(self) -> int:
        return sum(self.ns)


_local = threading.local()


def current() -> PhaseClock | None:
    """The clock this thread records into, or None."""
    return getattr(_local, "clock", None)


def swap(clock: PhaseClock | None) -> PhaseClock | None:
    """Make `clock` this thread's (None: nobody's); the one before, to swap back (`recording` without the context
    manager's objects, for a once-a-photo call)."""
    before = getattr(_local, "clock", None)
    _local.clock = clock
    return before


@contextmanager
def recording(clock: PhaseClock | None):
    """Within the block, this thread's runners add their phases to `clock` (None: to nobody)."""
    before = getattr(_local, "clock", None)
    _local.clock = clock
    try:
        yield clock
    finally:
        _local.clock = before


class Busy:
    """The feeding thread's busy time (stats.clock.busy_ns): the loop's time less its waits on the decoders, on
    post-processing and on the consumer of its results. At the end, what the timed phases leave of it is the loop's
    own Python (PYTHON). Phases timed within a wait (a batch of photos run when its first one is asked
    for) are busy time all the same."""

    def __init__(self, clock: PhaseClock):
        self.clock, self.since = clock, None
        self.before = self.stopped = clock.total_ns()
        self.waiting: tuple[str, int] | None = None  # (what for, since when) while stopped by a wait

    def start(self) -> None:
        self.since = perf_counter_ns()
        timed = self.clock.total_ns() - self.stopped  # phases timed within the wait: busy all the same
        self.clock.busy_ns += timed
        if self.waiting is not None:
            what, since = self.waiting
            self.clock.idle_ns[what] += max(0, self.since - since - timed)
            self.waiting = None

    def stop(self, waiting_for: str | None = None) -> None:
        """Busy time stops (`waiting_for`: one of WAITS, the wait until start() is counted there)."""
        if self.since is not None:
            now = perf_counter_ns()
            self.clock.busy_ns += now - self.since
            self.since = None
            self.stopped = self.clock.total_ns()
            if waiting_for is not None:
                self.waiting = (waiting_for, now)

    def close(self) -> None:
        self.stop()
        timed = self.clock.total_ns() - self.before
        self.clock.add(PYTHON, max(0, self.clock.busy_ns - timed))


def handed(results: Iterable, busy: Busy) -> Iterator:
    """`results` yielded on, the consumer's time not counted as the feeding thread's."""
    for result in results:
        busy.stop(ON_CONSUMER)
        yield result
        busy.start()


__all__ = ["PHASES", "WAITS", "Busy", "PhaseClock", "current", "handed", "perf_counter_ns", "recording", "swap"]
