"""How many threads numpy's OpenBLAS uses, and how many the CPU interpreter runs at once.

The fast interpreter keeps OpenBLAS on one thread for the whole of a run and makes its own threads' work instead
(cpu/lanes.py): OpenBLAS's threads spin on their cores for ~0.1 s after each product, which took a core from the
interpreter's lanes, from the library's decoders and from other programs. How many lanes run at once is
`default_threads()`: the cores, or one while the machine is busy (load average at or above its core count), since
threads on an oversubscribed machine wait a scheduler slice (4 to 16 ms) for each other. OpenBLAS is found in the
process's memory map, through ctypes; the count it had comes back after each run (the reference interpreter still asks
it for threads on large products, one on small ones). `FACERUN_CPU_THREADS=N` fixes the count instead.
Where OpenBLAS can't be reached (another BLAS, another OS), nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from contextlib import contextmanager

from . import settings

# Below this many multiply-adds a product runs on one thread (measured: ~0.1 ms lost at most when the machine is idle)
SMALL_MACS = 4 << 20

_lock = threading.Lock()
_api: tuple | None = None
_lib: tuple | None = None
_looked = False
_current: int | None = None


def openblas_symbol(name: str):
    """A function of the OpenBLAS numpy loaded (found in this process's memory map), or None. numpy's wheels prefix
    the symbols (scipy_) and add 64_ for the 64-bit-integer build: `openblas_symbol("get_corename")`."""
    global _looked, _lib
    if not _looked:
        _looked = True
        _lib = _load()
    if _lib is None:
        return None
    lib, prefix, suffix = _lib
    return getattr(lib, f"{prefix}{name}{suffix}", None)


def _load():
    import numpy  # noqa: F401  (loads OpenBLAS, so it shows in the memory map)

    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln})
    except OSError:
        return None
    for path in _numpys_first(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"),
                               ("openblas_", "")):
            if getattr(lib, f"{prefix}get_num_threads{suffix}", None) is not None:
                return lib, prefix, suffix
    return None


def _numpys_first(paths: list[str]) -> list[str]:
    """The OpenBLAS numpy's wheel carries first (numpy.libs/, numpy/.libs/), then a system one; never another
    wheel's private copy (faiss-cpu's faiss_cpu.libs/ holds an OpenBLAS of its own, which numpy never calls: steering
    that one left numpy's on its own thread count, and its products rounded otherwise)."""
    def folder(path: str) -> str:
        return os.path.basename(os.path.dirname(path))

    numpys = [p for p in paths if folder(p) == "numpy.libs" or p.replace(os.sep, "/").count("/numpy/.libs/")]
    others = [p for p in paths if p not in numpys and not folder(p).endswith(".libs")]
    return numpys + others


def _find() -> tuple | None:
    """(set_num_threads, get_num_threads, threads at start) of numpy's OpenBLAS, or None."""
    global _api
    if _api is None:
        setter, getter = openblas_symbol("set_num_threads"), openblas_symbol("get_num_threads")
        if setter is None or getter is None:
            return None
        setter.argtypes = [ctypes.c_int]
        getter.restype = ctypes.c_int
        _api = (setter, getter, int(getter()))
    return _api


def _set(n: int) -> None:
    global _current
    api = _find()
    if api is None or n == _current:
        return
    api[0](n)
    _current = n


def current_threads() -> int | None:
    """The thread count OpenBLAS runs with now (None where it can't be reached)."""
    api = _find()
    if api is None:
        return None
    return _current if _current is not None else api[2]


def set_threads(n: int) -> None:
    """Ask OpenBLAS for `n` threads (nothing happens when it already runs with `n`, or can't be reached)."""
    with _lock:
        _set(max(1, int(n)))


def threads_for_macs(macs: int, default: int) -> int:
    """Threads for one product of `macs` multiply-adds: one when small, else `default`."""
    return 1 if macs < SMALL_MACS else default


def default_threads() -> int:
    fixed = settings.get("FACERUN_CPU_THREADS")
    if fixed:
        return fixed
    api = _find()
    full = api[2] if api else (os.cpu_count() or 1)
    try:
        busy = os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:
        busy = False
    return 1 if busy else full


@contextmanager
def threads_for(macs: int, default: int):
    """Run the products inside with one thread when small, else with `default` threads; the count in effect before
    comes back on leaving, so numpy products elsewhere in the process don't stay on one thread."""
    before = current_threads()
    set_threads(threads_for_macs(macs, default))
    try:
        yield
    finally:
        if before is not None:
            set_threads(before)
