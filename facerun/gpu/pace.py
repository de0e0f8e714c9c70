"""How much of the GPU facerun may take: at most `concurrency` runs at once, busy for at most `share` of the time.

After a run of t seconds the next one waits t * (1 - share) / share (at most 2 s), resting while still holding the
turn so the GPU stays idle for the rest of the period. Every GPU run in the process goes through `turn()`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

MAX_REST = 2.0
MIN_SHARE = 0.05

_cond = threading.Condition()
_concurrency = 1 << 30
_share = 1.0
_running = 0


def set_pace(concurrency: int | None = None, share: float | None = None) -> None:
    """Limit GPU work: `concurrency` runs at once (at least 1; None: unlimited) and `share` of the time (0.05-1)."""
    global _concurrency, _share
    with _cond:
        _concurrency = (1 << 30) if concurrency is None else max(1, int(concurrency))
        if share is None or share != share:  # None or NaN: no limit
            _share = 1.0
        else:
            _share = min(1.0, max(MIN_SHARE, float(share)))
        _cond.notify_all()


def get_pace() -> tuple[int | None, float]:
    return (None if _concurrency >= 1 << 30 else _concurrency), _share


def rest_after(elapsed: float, share: float) -> float:
    """Seconds to rest after a run of `elapsed` seconds so the GPU is busy `share` of the time."""
    if share >= 1.0:
        return 0.0
    return min(MAX_REST, elapsed * (1.0 - share) / share)


@contextmanager
def turn():
    """Wait for a turn on the GPU under the pace; hold it for the run and the rest after it."""
    global _running
    with _cond:
        while _running >= _concurrency:
            _cond.wait(0.2)
        _running += 1
        share = _share
    start = time.perf_counter()
    try:
        yield
    finally:
        try:
            rest = rest_after(time.perf_counter() - start, share)
            if rest > 0:
                time.sleep(rest)
        finally:
            with _cond:
                _running -= 1
                _cond.notify()
