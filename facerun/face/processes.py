"""The library run over several processes (`facerun detect|embed|index --processes N`): each process has its own
Python, so its own GIL, its own device queue and its own threaded pipeline (library.iter_photo_faces), and they share
out the photos; with an embedder they also align and embed the faces, and the results are put back in photo order
here.

Why: in one process every stage's Python (decoding's, the compiler's for each new size, the network thread's
recording of GPU work, NMS) takes turns on one GIL, which bounds a library run on a fast GPU whatever the GPU's
speed. N processes lift that bound N times, at a start-up cost: each process makes its device and models and checks
them against the CPU. On the GPU they are forked from a fork server that imported facerun, onnx and wgpu once
(face/preload.py), and this process runs photos itself until they are ready (`_Parent`), so the start-up is
short and not idle; it still pays only from a few thousand photos on (the figures: docs/benchmarks.md).

The contract is iter_photo_faces's (one result per path, in input order, errors as results, same faces): each process
runs that very loop (library.threads, with the run's LibraryOptions) on the photos it takes from one shared queue,
and results are put back in order here. `engine` is the "processes" entry of face/engines.py's table.

With a facerun Embedder each process also makes its own from the embedder's `arguments()` and embeds its own faces
(its batches span its photos), so the whole job scales with the processes; this process only puts the results in
order. An embedder that cannot say how it is made (no `arguments`) stays here: the processes align the faces and
send the crops back, and they are embedded here in input order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from .. import settings
from ..errors import FacerunError, InputError
from .library import LibraryOptions, LibraryStats, PhotoFaces, _Batcher, _Photo, observed, threads

# How long the parent waits on the results before it looks whether its processes are still alive.
POLL_S = 1.0
# How often this process's own run (FACERUN_PARENT_RUNS) looks whether it is to stop, while waiting on a queue.
PARENT_POLL_S = 0.05
# Results (a photo's faces, and its crops when embedding) waiting for this process, per process: when the consumer
# here is the slower side (the embedding, the database), the processes wait instead of piling crops up in memory.
RESULTS_PER_PROCESS = 16


def iter_photo_faces_in_processes(paths: Iterable, detector: dict, processes: int, workers: int | None = None,
                                  all_faces: bool = True, stats: LibraryStats | None = None, progress=None,
                                  embedder=None, batch: int = 16, draft: bool = True) -> Iterator[PhotoFaces]:
    """iter_photo_faces over `processes` processes. `detector` holds facerun.face.detect.Detector's keyword
    arguments (each process makes its own); `workers`: decoding threads per process (default: the cores shared out).
    With `embedder` (a facerun Embedder), each process makes its own (`embedder.arguments()`) and embeds its faces
    `batch` at a time across its photos; an embedder without `arguments` stays here: the processes align the faces
    and send the crops back, embedded here `batch` at a time in input order.
    `draft` as in iter_photo_faces (without an embedder, large JPEGs decode scaled down).
    A failure in a process (a model or GPU error) raises FacerunError here with its message; the others are stopped.
    Closing the iterator, an exception or Ctrl-C stops every process. The processes are spawned, so a script calling
    this keeps its top-level work under `if __name__ == "__main__":` (Python's rule for spawned processes)."""
    options = LibraryOptions(batch=batch, all_faces=all_faces, workers=workers, draft=draft, engine="processes",
                             processes=processes, detector_args=detector)
    stats = stats if stats is not None else LibraryStats()
    yield from observed(engine(paths, None, embedder, options, stats), stats, progress)


def engine(paths: Iterable, detector, embedder, options: LibraryOptions, stats: LibraryStats
           ) -> Iterator[PhotoFaces]:
    """The processes engine (face/engines.py): options.processes processes, each making its detector from
    options.detector_args (else `detector`, when that is those keyword arguments); options.workers decoding threads
    in each. A loaded `detector` stays here: this process runs photos on it while the processes start, where it is
    loaded where theirs run (FACERUN_PARENT_RUNS). The results in input order, not yet counted in `stats`."""
    arguments = options.detector_args if options.detector_args is not None else detector
    if not isinstance(arguments, Mapping):
        raise InputError("the processes engine makes a detector in each process: give the Detector's keyword "
                         "arguments (LibraryOptions.detector_args), not a loaded detector")
    paths = [Path(p) for p in paths]
    workers = options.workers
    if workers is None:  # the cores shared out (measured on 16: 8 processes of 2 threads beat 8 of 1, 322 to 237/s)
        workers = max(1, min(4, available_cores() // options.processes))
    processes = max(1, min(options.processes, len(paths)))
    stats.processes = processes
    remade = getattr(embedder, "arguments", None)  # how the processes make the embedder themselves
    embedder_args = remade() if remade is not None else None
    here = embedder if embedder_args is None else None  # the embedder that stays in this process (crops back)
    # what each process runs: its own threads, aligning (and so keeping the photo) only for an embedder here
    local = dataclasses.replace(options, engine="threads", workers=workers, keep_images=here is not None,
                                detector_args=None, ray=None, decoders="threads")  # a daemon process has no children
    ctx = _context(str(arguments.get("device", "auto")))
    tasks, results = ctx.Queue(), ctx.Queue(maxsize=RESULTS_PER_PROCESS * processes)
    passed = _settings(processes)
    align_size = None if here is None else here.input_size
    procs = [ctx.Process(target=_worker, args=(dict(arguments), embedder_args, local, align_size, passed, tasks,
                                               results), name=f"facerun-library-{i}", daemon=True)
             for i in range(processes)]
    mode = settings.get("FACERUN_PARENT_RUNS") if here is None else "off"
    # this process's own run takes the detector given, unless it runs on the CPU where the processes were asked for
    # the GPU (or the other way round); with "auto" it runs where auto put it here
    loaded = detector if detector is not None and not isinstance(detector, Mapping) else None
    asked = arguments.get("device", "auto")
    if loaded is not None and asked != "auto" and (getattr(loaded, "device", "cpu") == "cpu") != (asked == "cpu"):
        loaded = None
    parent = _Parent(dict(arguments), loaded, embedder, local, tasks, results) if mode != "off" else None
    try:
        spawned = time.time()
        for p in procs:
            p.start()
        if parent is not None:
            parent.start()
        for item in enumerate(map(str, paths)):  # all at once: a path is small, and no process ever waits for one
            tasks.put(item)
        for _ in range(len(procs) + (parent is not None)):  # an end for each taker, this process's run included
            tasks.put(None)
        held: dict[int, tuple] = {}
        batcher = _Batcher(here, options.batch, stats, stats.clock) if embedder_args is None else None
        ready = finished = 0
        for index in range(len(paths)):
            while index not in held:
                kind, *rest = _next(results, procs, parent.busy if parent is not None else None)
                if kind == "error":
                    raise _error(*rest)
                if kind == "photo":
                    held[rest[0]] = (rest[1], rest[2])
                elif kind == "ready":
                    ready += 1
                    stats.process_starts.append((rest[0] - spawned, rest[1] - rest[0]))
                    if ready == len(procs) and parent is not None and mode == "until-ready":
                        parent.stop()  # the processes take it from here
                elif kind == "done":
                    finished += 1
                    _done(stats, *rest)
            result, crops = held.pop(index)
            if batcher is None:  # embedded (or only detected) in its process
                yield result
            else:
                yield from batcher.add(_Photo(result, crops=crops))
        if batcher is not None:
            yield from batcher.finish()
        while finished < ready:  # the stage times of the processes that ran; one still starting is not waited for
            try:
                kind, *rest = results.get(timeout=POLL_S)
            except queue.Empty:
                break
            if kind == "done":
                finished += 1
                _done(stats, *rest)
    finally:
        if parent is not None:
            parent.close()
            _done(stats, parent.stats.seconds, {**parent.counted, "photos_here": parent.stats.photos})
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
        # paths still queued for processes that are gone: drop them, or this process would wait at exit for its
        # queue's feeder thread to hand them over
        tasks.cancel_join_thread()
        tasks.close()
        results.close()


def _done(stats: LibraryStats, seconds: dict, counted: dict) -> None:
    """A process's last word: its busy seconds per stage and what it counted (its GPU checks, its programs)."""
    for stage, value in seconds.items():
        stats.add(stage, value)
    stats.add_counted(counted)


def _next(results, procs, busy=None) -> tuple:
    """The next message from the processes (busy(): whether this process's own run may still send one)."""
    while True:
        try:
            return results.get(timeout=POLL_S)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise FacerunError(f"a library process ended unexpectedly (exit code {dead[0].exitcode})") from None
            if all(p.exitcode == 0 for p in procs) and not (busy is not None and busy()):
                try:  # what a process put last can still be on its way
                    return results.get(timeout=POLL_S)
                except queue.Empty:
                    raise FacerunError("the library processes ended before every photo came back") from None


# `--processes auto` (the commands' default) runs processes only where they measured faster than one process: a
# GPU, enough photos to pay for their start (FACERUN_PROCESSES_FROM), cores enough for each to decode (4 processes
# beat 6 and 8 on 16 cores; 2 processes lost to one; docs/benchmarks.md, stops 51 and 52).
AUTO_CORES_EACH = 4
AUTO_MOST = 4
AUTO_LEAST_CORES = 12


def available_cores() -> int:
    """The cores this process may run on (its affinity where the platform says, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def auto_count(photos: int, cores: int, on_gpu: bool, least_photos: int) -> int:
    """How many processes `--processes auto` runs: one, unless the network runs on a GPU, there are `least_photos`
    photos or more and AUTO_LEAST_CORES cores or more; then one per AUTO_CORES_EACH cores, at most AUTO_MOST."""
    if not on_gpu or photos < least_photos or cores < AUTO_LEAST_CORES:
        return 1
    return max(1, min(AUTO_MOST, cores // AUTO_CORES_EACH))


def auto_engine(paths: Iterable, detector, embedder, options: LibraryOptions, stats: LibraryStats
                ) -> Iterator[PhotoFaces]:
    """The "auto" engine (face/engines.py): this process's threads, or `auto_count` processes (`engine`) where the
    loaded `detector` runs on a GPU, options.detector_args says how a process makes its own, and the embedder (if
    any) can be made again in each (`arguments`): an embedder left here measured no faster over processes."""
    paths = list(paths)
    on_gpu = (getattr(detector, "device", "cpu") != "cpu" and options.detector_args is not None
              and (embedder is None or hasattr(embedder, "arguments")))
    count = auto_count(len(paths), available_cores(), on_gpu, settings.get("FACERUN_PROCESSES_FROM"))
    if count > 1:
        return engine(paths, detector, embedder, dataclasses.replace(options, engine="processes", processes=count),
                      stats)
    return threads(paths, detector, embedder, dataclasses.replace(options, engine="threads", processes=1), stats)


def parent_runs() -> bool:
    """Whether the process starting the processes runs photos too (FACERUN_PARENT_RUNS): the commands then load its
    detector where the network runs, so that it starts at once."""
    return settings.get("FACERUN_PARENT_RUNS") != "off"


def start_ahead(processes: int, device: str) -> None:
    """Start the fork server now (where `processes` > 1 and processes on `device` start from it), so that it loads
    while this process loads its own models: the commands call this first. Later runs find it started."""
    if processes > 1 and _context(device).get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _context(device: str):
    """How the processes start (FACERUN_PROCESS_START): forked from the fork server, which loaded face/preload.py
    once (started on first use and kept for this process's life, so a second run's processes start at once), or
    spawned. On the CPU they are spawned: what the server loads ahead is mostly the GPU's (wgpu, its C types),
    and on a small machine it takes a core from this process's own loading (2 cores, 10 photos, `index
    --processes 2`: 7.4 s against 5.0 spawned). Never forked from this process: a device, threads or a BLAS pool
    must not be copied."""
    if (device != "cpu" and settings.get("FACERUN_PROCESS_START") == "forkserver"
            and "forkserver" in multiprocessing.get_all_start_methods()):
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["facerun.face.preload"])  # read when the server starts
        return ctx
    return multiprocessing.get_context("spawn")


def _settings(processes: int) -> dict:
    """What the CLI set in this process that a new process must see: the software-adapter switch and the limits;
    and the CPU interpreter's threads, the cores shared out (unless FACERUN_CPU_THREADS says), so N processes don't
    each start a lane per core."""
    from .. import limits
    from ..cpu import lanes
    from ..gpu import device

    threads = settings.text("FACERUN_CPU_THREADS") or str(max(1, lanes.threads() // processes))
    return {**settings.environment(), "FACERUN_ALLOW_SOFTWARE": "1" if device.software_allowed() else "0",
            "FACERUN_MAX_PIXELS": str(limits.max_pixels()),
            "FACERUN_MAX_TENSOR_MB": repr(limits.max_tensor_bytes() / (1 << 20)),
            "FACERUN_CPU_THREADS": threads}


def _worker(detector: dict, embedder: dict | None, options: LibraryOptions, align_size, passed: dict, tasks,
            results) -> None:
    started = time.time()  # wall clock: the parent's spawning is timed against it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops this process
    settings.adopt(passed)  # a forked process has the fork server's environment: this run's settings instead
    try:
        from .. import counters
        from .align import align_face
        from .detect import Detector
        from .embed import Embedder

        det = Detector(**detector)
        emb = Embedder(**embedder) if embedder is not None else None
        results.put(("ready", started, time.time()))
        order: list[int] = []

        def source() -> Iterator[str]:
            while (item := tasks.get()) is not None:
                order.append(item[0])
                yield item[1]

        stats = LibraryStats()
        for i, result in enumerate(observed(threads(source(), det, emb, options, stats), stats)):
            result.device = det.device
            crops = []
            if align_size is not None:  # what FaceEmbedder.align does, here beside the photo
                start = time.perf_counter()
                crops = [align_face(result.image, face.landmarks, align_size) for face in result.faces]
                result.image = None
                stats.add("align", time.perf_counter() - start)
            results.put(("photo", order[i], result, crops))
        results.put(("done", stats.seconds, counters.snapshot()))
    except FacerunError as e:
        results.put(("error", type(e).__name__, str(e)))
    except Exception as e:  # a bug: still one line in the parent, with what it was
        results.put(("error", "FacerunError", f"a library process failed: {type(e).__name__}: {e}"))


class _Parent:
    """This process running photos from the shared queue too, on a thread of its own (the threads engine, with its
    own detector and the run's embedder), while the processes start (FACERUN_PARENT_RUNS): the first photos come
    as soon as one process's would, and a small library may be done before any process is up. Its results go
    through the results queue like a process's; `stop` makes it take no more photos (those taken are finished and
    handed on), `close` ends it (what it has not handed on is dropped: the run is over)."""

    def __init__(self, detector: dict, loaded, embedder, options: LibraryOptions, tasks, results):
        self.detector, self.loaded, self.embedder, self.options = detector, loaded, embedder, options
        self.tasks, self.results = tasks, results
        self.stats = LibraryStats()
        self.counted: dict = {}
        self._stop, self._over = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="facerun-parent-run", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def busy(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        self._over.set()
        self._thread.join()

    def _source(self, order: list) -> Iterator[str]:
        while not self._stop.is_set():
            try:
                item = self.tasks.get(timeout=PARENT_POLL_S)
            except queue.Empty:
                continue
            if item is None:  # the end put for this run
                return
            order.append(item[0])
            yield item[1]

    def _put(self, message: tuple) -> None:
        while not self._over.is_set():  # the queue is bounded: give up only once the run is over
            try:
                self.results.put(message, timeout=PARENT_POLL_S)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        from .. import counters
        from .detect import Detector

        before = counters.snapshot()
        try:
            det = self.loaded if self.loaded is not None else Detector(**self.detector)
            order: list[int] = []
            run = observed(threads(self._source(order), det, self.embedder, self.options, self.stats), self.stats)
            with contextlib.closing(run):  # the run over (an error, Ctrl-C): its threads stop at once
                for i, result in enumerate(run):
                    if self._over.is_set():
                        break
                    result.device = det.device
                    self._put(("photo", order[i], result, []))
        except FacerunError as e:
            self._put(("error", type(e).__name__, str(e)))
        except Exception as e:  # a bug: one line in the run, as a process's
            self._put(("error", "FacerunError", f"the library run here failed: {type(e).__name__}: {e}"))
        finally:
            self.counted = counters.since(before)


def _error(name: str, message: str) -> FacerunError:
    """The process's error as the same facerun error class (the CLI's exit status follows the class)."""
    from .. import errors

    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, FacerunError)):
        kind = FacerunError
    error = kind.__new__(kind)  # not kind(message): UnsupportedOps, say, is made from its operators
    Exception.__init__(error, message)
    return error


__all__ = ["engine", "iter_photo_faces_in_processes", "parent_runs", "start_ahead"]
