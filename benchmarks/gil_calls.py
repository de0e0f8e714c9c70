"""What a short C call costs the thread making it while other threads want the interpreter lock: through cffi (which
lets go of the lock around every call, as wgpu-py's calls do) and through ctypes.PyDLL (which holds it, as facerun's
recording calls do: gpu/replay.py `held`).

    python benchmarks/gil_calls.py [--threads 0,2,6] [--calls 20000]

The other threads each run ~50 µs of Python, then wait half a millisecond outside the lock (a decode, a GPU wait),
over and over. Prints µs a call for each count of such threads. The C function is libc's `abs`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import sys
import threading
import time


@contextlib.contextmanager
def busy_threads(count: int):
    """`count` threads beside, each running ~50 µs of Python (holding the lock), then waiting half a millisecond
    outside it (a decode, a GPU wait), over and over, until the block ends."""
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            total = 0
            for i in range(2000):  # Python holding the lock
                total += i
            time.sleep(0.0005)  # then a wait outside it

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="0,2,6", help="counts of busy threads beside, comma-separated")
    parser.add_argument("--calls", type=int, default=20000, help="calls timed a row")
    args = parser.parse_args(argv)
    try:
        import cffi
    except ImportError:
        print("gil_calls: needs cffi (wgpu-py brings it)", file=sys.stderr)
        return 1
    ffi = cffi.FFI()
    ffi.cdef("int abs(int);")
    released = ffi.dlopen(None).abs
    held = ctypes.PyDLL(None).abs
    held.argtypes, held.restype = [ctypes.c_int], ctypes.c_int

    def per_call(f) -> float:
        start = time.perf_counter()
        for i in range(args.calls):
            f(i)
        return (time.perf_counter() - start) / args.calls * 1e6

    print(f"{'busy threads':>12} {'cffi µs/call':>13} {'ctypes.PyDLL µs/call':>21}")
    for count in (int(t) for t in args.threads.split(",")):
        with busy_threads(count):
            a, b = per_call(released), per_call(held)
        print(f"{count:>12} {a:>13.2f} {b:>21.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
