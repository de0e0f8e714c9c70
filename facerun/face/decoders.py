"""Decoding photos in processes of their own, into shared memory (LibraryOptions.decoders = "processes").

In one process every decoding thread's Python (opening the file, reading the header, shrinking, laying out) takes
turns on the GIL with the thread feeding the network; processes have a GIL each. `DecoderProcesses` starts N spawned
processes and one shared memory block cut into slots, each large enough for the largest photo the detector is fed
(SLOT_SIDE on the long side, four bytes a pixel): a process decodes a photo (images.load_photo_shrunk, the very
decoder and shrink the threads use) into the slot the caller reserved for it, and the caller gets the pixels as a
view of that slot: no copy on this side, and the GPU's upload reads the slot itself. A slot is free again when the
caller releases it (after the network ran on it). A photo that does not fit a slot (a detector that takes photos
at their own size) comes back through the results queue instead.

Errors stay per photo: a file that does not decode gives the ImageError a thread would have raised, with the same
one-line message. A process that dies fails the photos it had, and the run, with a FacerunError. The segment's name
is removed as soon as every process has it mapped, so no segment outlives the run however it ends (the memory goes
with its last mapping); `close` (also on an exception or Ctrl-C: the processes ignore SIGINT, their parent stops
them) ends the processes.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import queue
import signal
import threading
from concurrent.futures import Future
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from .. import settings
from ..errors import FacerunError, ImageError, InputError

DECODERS = settings.DECODER_KINDS  # FACERUN_DECODERS: "threads", "processes", "auto"
SLOT_SIDE = 1280  # detect.DEFAULT_MAX_SIDE: what a YuNet detector is fed at most
SLOT_BYTES = SLOT_SIDE * SLOT_SIDE * 4
START_S = 60.0  # a process not ready by then (imports on a loaded machine take seconds) fails the run
POLL_S = 0.5  # how often a wait looks whether the processes are alive and the run still on


# A library run on the CPU is bound by the network thread, whose interpreter lanes wait for each other at every
# step: a decoding thread at the same priority takes a lane's core in the middle of a band and holds the whole step
# up (on 2 cores the pipelined run was slower than the serial one). At a lower priority (this much nicer, Linux
# threads) the decoders run in the lanes' gaps and while the network waits for them; and where they fall behind (a
# machine busy with other work starves them), the network thread takes back the next photo's decode, not started
# yet, and decodes it itself at full priority, as the serial run would. 2 cores, 100 shared photos, 3 alternating
# rounds, medians: serial 21.6 photos/s, pipelined 23.8 before, 25.7 so.
DECODER_NICE = 10


def nicer_thread(priority: str = "nice") -> None:
    """Lower this thread's priority (the decoding threads of a run on the CPU, FACERUN_DECODER_PRIORITY): by
    DECODER_NICE (`nice`), or to Linux's SCHED_IDLE (`idle`: it runs only on a core no other thread wants; a lane
    waking up takes its core back at once); nothing where the platform has no per-thread priority, or for `same`."""
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        if priority == "idle":
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        elif priority == "nice":
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + DECODER_NICE))


# `auto` decodes in processes from this many cores, on the GPU: there the feeding thread shares its process's GIL
# with every decoding thread's Python (docs/benchmarks.md); a small machine decodes as fast on threads, without
# the processes' start-up, and a run on the CPU needs its cores for the interpreter.
AUTO_CORES = 8


def choose(kind: str, drafted: bool, device: str | None, cores: int | None = None) -> str:
    """Where a library run decodes, "threads" or "processes", for FACERUN_DECODERS' `kind` ("threads",
    "processes", "auto"): processes only for a drafted run (photos decoded only as the detector's input), and under
    `auto` only for a run on a GPU with at least AUTO_CORES cores. `device`: the detector's ("cpu", or on a GPU the
    adapter's name; None: not known, taken as the CPU); `cores`: os.cpu_count() when None."""
    if not drafted or kind == "threads":
        return "threads"
    if kind == "processes":
        return "processes"
    cores = os.cpu_count() if cores is None else cores
    on_gpu = device not in (None, "cpu")
    return "processes" if on_gpu and (cores or 1) >= AUTO_CORES else "threads"


def default_processes() -> int:
    """Decoding processes: the cores (the feeding thread mostly waits on the device)."""
    return max(1, os.cpu_count() or 1)


class DecoderProcesses:
    """`processes` decoding processes over `slots` shared slots; `decode(path)` from any thread (it blocks until a
    slot is free and the photo is decoded). fit: images.load_photo_shrunk's, picklable (functools.partial of
    yunet.shrunk_size), the same the threads would use."""

    def __init__(self, processes: int, fit, slots: int):
        from .. import limits

        self.slots = max(1, int(slots))
        self._closed = False
        self._free: queue.Queue = queue.Queue()
        for i in range(self.slots):
            self._free.put(i)
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._count = itertools.count()
        self._failed: str | None = None
        ctx = multiprocessing.get_context("spawn")  # no fork: threads, a device or a BLAS pool must not be copied
        _check_room(self.slots * SLOT_BYTES)
        self.shm = _Segment(create=True, size=self.slots * SLOT_BYTES)
        self.name = self.shm.name
        self._named = True
        self._tasks, self._results = ctx.Queue(), ctx.Queue()
        passed = {"FACERUN_MAX_PIXELS": str(limits.max_pixels())}
        self.procs = [ctx.Process(target=_child, args=(self.name, fit, passed, self._tasks, self._results),
                                  name=f"facerun-decode-{i}", daemon=True) for i in range(max(1, int(processes)))]
        try:
            for p in self.procs:
                p.start()
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        self._unlink()  # every process has it mapped: its name can go now, so no crash of ours can leave it behind
        self._reader = threading.Thread(target=self._read, name="facerun-decode-results", daemon=True)
        self._reader.start()

    # ---- the caller's side
    def decode(self, path) -> tuple[np.ndarray, tuple[int, int], int | None]:
        """(pixels, the photo's own (width, height), its slot or None): what load_photo_shrunk(path, fit) gives,
        the pixels a view of the slot until `release(slot)`. Raises ImageError as load_photo_shrunk would."""
        slot = self._take_slot()
        future: Future = Future()
        with self._lock:
            index = next(self._count)
            self._pending[index] = future
        try:
            self._tasks.put((index, str(Path(path)), slot))
            kind, value = self._result(future)
        except BaseException:
            self.release(slot)
            raise
        if kind == "slot":
            shape, size = value
            view = np.ndarray(shape, np.uint8, buffer=self.shm.buf, offset=slot * SLOT_BYTES)
            return view, tuple(size), slot
        self.release(slot)
        if kind == "array":
            pixels, size = value
            return pixels, tuple(size), None
        if kind == "image":
            raise ImageError(value)
        if kind == "input":
            raise InputError(value)
        raise FacerunError(f"decoding {path} failed in a decoder process: {value}")

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._free.put(slot)

    def _take_slot(self) -> int:
        while True:
            self._check()
            try:
                return self._free.get(timeout=POLL_S)
            except queue.Empty:
                continue

    def _result(self, future: Future):
        while True:
            self._check()
            try:
                return future.result(timeout=POLL_S)
            except TimeoutError:
                continue

    def _check(self) -> None:
        if self._failed is not None:
            raise FacerunError(self._failed)
        if self._closed:
            raise FacerunError("the decoder processes were stopped")

    # ---- the processes' side
    def _wait_ready(self) -> None:
        ready = 0
        waited = 0.0
        while ready < len(self.procs):
            try:
                message = self._results.get(timeout=POLL_S)
            except queue.Empty:
                waited += POLL_S
                dead = [p for p in self.procs if p.exitcode is not None]
                if dead:
                    raise FacerunError(f"a decoder process ended as it started (exit code {dead[0].exitcode})"
                                       ) from None
                if waited > START_S:
                    raise FacerunError(f"the decoder processes were not ready after {START_S:.0f} s") from None
                continue
            if message[0] == "ready":
                ready += 1
            elif message[0] == "broken":
                raise FacerunError(f"a decoder process could not start: {message[1]}")

    def _read(self) -> None:
        """The results thread: each result to its photo's future; a dead process fails the run."""
        while not self._closed:
            try:
                index, kind, value = self._results.get(timeout=POLL_S)
            except queue.Empty:
                dead = [p for p in self.procs if p.exitcode is not None]
                if dead and not self._closed:
                    self._fail(f"a decoder process ended (exit code {dead[0].exitcode})")
                    return
                continue
            except (EOFError, OSError, ValueError):  # the queue was closed under us: the run is ending
                return
            with self._lock:
                future = self._pending.pop(index, None)
            if future is not None:
                future.set_result((kind, value))

    def _fail(self, why: str) -> None:
        self._failed = why
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(FacerunError(why))

    def close(self) -> None:
        """End the processes (at once: queued photos are dropped) and unlink the shared memory. Idempotent."""
        if getattr(self, "_shut", False):
            return
        self._shut = self._closed = True
        try:
            reader = getattr(self, "_reader", None)
            if reader is not None and reader is not threading.current_thread():
                reader.join(timeout=4 * POLL_S)  # it sees _closed within POLL_S, before the queues close under it
            started = [p for p in self.procs if p.pid is not None]
            for p in started:
                if p.is_alive():
                    p.terminate()
            for p in started:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
            for q in (self._tasks, self._results):
                q.close()
                # its feeder thread ends at once (the tasks in it are a few hundred bytes each, at most one per
                # slot: they fit the pipe, read or not), and with it the last hold on the queue's semaphores
                q.join_thread()
            # the queues' named semaphores are unlinked when the queues go (spawned children open them by name)
            self._tasks = self._results = None
        finally:  # the segment's name goes whatever happened above
            self._unlink()

    def _unlink(self) -> None:
        """Remove the segment's name. The memory itself stays mapped while a view of a slot lives (a photo still
        on its way through a stage), and goes with the last one: unmapping it here could pull it from under a
        thread still reading a photo."""
        if self._named:
            self._named = False
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_room(nbytes: int, where: str = "/dev/shm") -> None:
    """A FacerunError when the shared memory file system has less room than the ring needs: its pages are only
    taken as photos are written, and a write past a full one kills the process (SIGBUS) instead of failing."""
    try:
        stat = os.statvfs(where)
    except (AttributeError, OSError):
        return
    free = stat.f_bavail * stat.f_frsize
    if free < nbytes:
        raise FacerunError(f"{where} has {free >> 20} MB free; the decoder processes' photo slots need {nbytes >> 20} "
                           "MB (decode on threads instead, or give the container more shared memory)")


class _Segment(shared_memory.SharedMemory):
    """A shared memory block unmapped only when nothing views it any more (not at the object's end while a
    photo's view still lives, which SharedMemory.__del__ would report as an ignored BufferError)."""

    def __del__(self):
        with contextlib.suppress(BufferError, OSError):
            self.close()


def no_fit(width: int, height: int) -> None:
    """A fit that keeps every photo at its own size (a detector that resizes photos itself)."""
    return None


def fit_of(detector):
    """`detector.fit_size` as a picklable function a decoding process can call: facerun's YuNet detectors shrink
    past their max_side (yunet.shrunk_size), the other detectors take photos at their own size."""
    import functools

    from . import yunet
    from .detect import Detector

    if isinstance(detector, Detector) and detector.family.follows_image:
        return functools.partial(yunet.shrunk_size, max_side=detector.max_side)
    return no_fit


def fit_of_family(family, max_side: int | None = None):
    """The fit a facerun Detector of `family` at `max_side` (default detect.DEFAULT_MAX_SIDE) decodes with."""
    import functools

    from . import yunet
    from .detect import DEFAULT_MAX_SIDE

    if not family.follows_image:
        return no_fit
    return functools.partial(yunet.shrunk_size, max_side=DEFAULT_MAX_SIDE if max_side is None else max_side)


def _child(name: str, fit, passed: dict, tasks, results) -> None:
    """A decoding process: photos from `tasks` decoded into their slots of the shared memory `name`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops this process
    try:
        settings.pass_on(passed)
        from .images import load_photo_shrunk

        shm = shared_memory.SharedMemory(name=name)
    except Exception as e:  # noqa: BLE001 (said to the parent, which fails the run with it)
        results.put(("broken", f"{type(e).__name__}: {e}", None))
        return
    results.put(("ready", os.getpid(), None))
    while (task := tasks.get()) is not None:
        index, path, slot = task
        try:
            pixels, size = load_photo_shrunk(path, fit)
        except ImageError as e:
            results.put((index, "image", str(e)))
            continue
        except InputError as e:
            results.put((index, "input", str(e)))
            continue
        except Exception as e:  # noqa: BLE001 (a decoder bug: the parent raises it for this photo)
            results.put((index, "failed", f"{type(e).__name__}: {e}"))
            continue
        if pixels.nbytes <= SLOT_BYTES:
            np.ndarray(pixels.shape, np.uint8, buffer=shm.buf, offset=slot * SLOT_BYTES)[...] = pixels
            results.put((index, "slot", (pixels.shape, size)))
        else:
            results.put((index, "array", (pixels, size)))
        del pixels


__all__ = ["AUTO_CORES", "DECODER_NICE", "DECODERS", "DecoderProcesses", "choose", "default_processes", "fit_of",
           "fit_of_family", "nicer_thread", "no_fit"]
