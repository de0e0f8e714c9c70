"""Photos in, faces and embeddings out: the one loop that detect, embed, index, identify and search stand on.

`iter_photo_faces` is pipelined: photos are decoded and shrunk on worker threads, the detector network runs on the
calling thread (the device works on one photo while the CPU decodes the next ones), the heads' decoding, NMS and
face alignment run on a post-processing thread, and faces are embedded `batch` at a time across photos. Queues are
bounded, so memory stays flat on any number of photos. `iter_photo_faces_serial` is the same work one photo after
another (the reference the pipelined run must equal, and the baseline of `facerun bench --photos`).

How a run goes is one `LibraryOptions` value; these two loops are the "threads" and "serial" engines of
face/engines.py's `run`, beside the processes (face/processes.py) and Ray (face/ray_engine.py) ones. The detector is
used through face/photo_detector.py's `PhotoDetector` (a plain one, with only `detect`, through its adapter).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import phases, settings
from ..errors import ImageError, InputError
from . import decoders as _decoders
from .buckets import Buckets, Slot, photo_batch
from .images import load_photo, load_photo_shrunk, upright_size
from .photo_detector import PhotoDetector, photo_detector

STAGES = ("decode", "compile", "detect", "post", "align", "embed")


@dataclass
class PhotoFaces:
    """The faces of one photo. `error` is set (and `faces` empty) when the photo could not be read."""

    path: Path
    width: int = 0
    height: int = 0
    faces: list = field(default_factory=list)  # facerun.face.detect.Face: score, box (x, y, w, h), landmarks 5x2
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32), repr=False)  # n x d
    error: str | None = None
    image: np.ndarray | None = field(default=None, repr=False)  # the decoded photo, only with keep_images=True
    input_size: tuple[int, int] | None = None  # (height, width) the detector network ran at
    detect_ms: float = 0.0  # the detector's network and post-processing on this photo
    device: str | None = None  # where the network ran, when another process ran it (face.processes)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class LibraryOptions:
    """How one library run goes, handed whole from the commands down to the loops (face/engines.py `run`).

    batch: faces per embedding call, across photos. all_faces: every face, else each photo's largest.
    workers: decoding threads (None: default_workers(); per process with the processes engine); 0 with the threads
    engine runs serially. keep_images: each result keeps its decoded photo (`image`; threads and serial only).
    draft: without an embedder and kept images, large JPEGs decode scaled down (see iter_photo_faces).
    engine: "threads" (pipelined), "serial", "processes", "auto" (threads, or processes where they pay:
    face.processes.auto_count) or "ray" (face/engines.py ENGINES).
    processes: the processes engine's count; detector_args: the facerun.face.detect.Detector keyword arguments each
    process makes its own from (else the detector given to `run` must be those arguments).
    ray: the Ray engine's facerun.face.ray_engine.RaySettings (its actors load the models it names).
    decoders: where the threads engine decodes, "threads" (the `workers` threads), "processes" (decoder_processes
    processes, default the cores, writing into shared memory: face/decoders.py; for drafted runs, the others decode
    on the threads) or "auto" (decoders.choose); None: FACERUN_DECODERS (threads unless set)."""

    batch: int = 16
    all_faces: bool = True
    workers: int | None = None
    keep_images: bool = False
    draft: bool = True
    engine: str = "threads"
    processes: int = 1
    detector_args: dict | None = field(default=None, compare=False)
    ray: object = field(default=None, compare=False)
    decoders: str | None = None
    decoder_processes: int | None = None

    def __post_init__(self):
        if self.decoders is not None and self.decoders not in _decoders.DECODERS:
            raise InputError(f"unknown decoders '{self.decoders}' ({' or '.join(_decoders.DECODERS)})")
        if self.decoder_processes is not None and self.decoder_processes < 1:
            raise InputError(f"decoder processes must be 1 or more, not {self.decoder_processes}")
        if self.processes < 1:
            raise InputError(f"processes must be 1 or more, not {self.processes}")
        if self.batch < 1:
            raise InputError(f"batch must be 1 or more, not {self.batch}")


class LibraryStats:
    """What a library run did: busy seconds per stage (summed over the threads doing it), photos, faces, the
    distinct network input sizes, when the first photo came out, and where other processes (or Ray actors) ran
    the network. Shared by the threads of one run. `clock`: where the thread feeding the network spent its busy
    time, phase by phase (phases.py; the threads and serial engines fill it)."""

    def __init__(self):
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.clock = phases.PhaseClock()
        self.photos = 0
        self.faces = 0
        self.sizes: set[tuple[int, int]] = set()
        self.started = time.perf_counter()
        self.first_photo_s: float | None = None
        self.wall_s = 0.0
        self.post_threads = 1
        self.decoder_processes = 0  # the pipelined run's decoder processes (decoders.py), 0: it decoded on threads
        self.embed_thread = False  # the faces were embedded on a thread of their own (_EmbedThread)
        self.counted: dict[str, float] = {}  # facerun.counters of other processes (face.processes), summed
        self.devices: set[str] = set()  # the results' `device`, where another process or actor ran the network
        # over processes (face/processes.py): each process's start, (seconds from spawning it to its own code
        # running: the interpreter and the imports it was started with, seconds making its models)
        self.process_starts: list[tuple[float, float]] = []
        self.processes = 1  # the processes the photos were shared out over (the processes engine; "auto" chooses)
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] += seconds

    def add_counted(self, counts: dict) -> None:
        with self._lock:
            for name, value in counts.items():
                self.counted[name] = self.counted.get(name, 0) + value

    def photo_out(self, result: PhotoFaces) -> None:
        now = time.perf_counter() - self.started
        with self._lock:
            self.photos += 1
            self.faces += len(result.faces)
            if result.input_size is not None:
                self.sizes.add(result.input_size)
            if result.device:
                self.devices.add(result.device)
            if self.first_photo_s is None:
                self.first_photo_s = now
            self.wall_s = now


def post_threads(workers: int) -> int:
    """Post-processing threads (NMS, alignment) beside `workers` decoding threads: FACERUN_POST_THREADS, else one
    per two, 1 to 4 (with one, aligning an embed run's faces bound the library run: docs/bench/code-figures.md)."""
    chosen = settings.get("FACERUN_POST_THREADS")
    return chosen if chosen is not None else max(1, min(4, workers // 2))


# Decoding threads: on the CPU path the rate grows up to about 8, past which the network thread binds
# (docs/bench/code-figures.md); feeding the GPU on 16 cores, 12 ran 3-12% faster than 8 (docs/benchmarks.md).
DECODE_THREADS = 8
DECODE_THREADS_GPU = 12


FIRST_AHEAD = 2  # photos decoded ahead while the network runs its first FIRST_RUNS photos
# The model's GPU check finishes before the second run (the variants of the programs it expects, layer by layer on
# the network thread): with the whole window decoding beside it (new sizes compiling) it took a few times longer
# than with two photos decoding (docs/bench/code-figures.md).
FIRST_RUNS = 2


def default_workers(device: str | None = "cpu") -> int:
    """Decoding threads: the cores but one (the network thread has its own), at most DECODE_THREADS, or
    DECODE_THREADS_GPU where the network runs on a GPU (`device`: "gpu", or a detector's device, which names its
    GPU; "cpu" or None: the CPU)."""
    most = DECODE_THREADS if device in (None, "cpu") else DECODE_THREADS_GPU
    return max(1, min(most, (os.cpu_count() or 2) - 1))


# ------------------------------------------------------------------------------------------------- the stages


@dataclass
class _Photo:
    result: PhotoFaces
    rgb: np.ndarray | None = None
    prepared: object = None  # what the detector's prepare gave, between the stages
    crops: list = field(default_factory=list)
    release: Callable[[], None] | None = None  # frees the decoder's shared slot `rgb` views, once the network ran
    # what _decode took: decoding and laying out (a failed file too), then a new size's programs (precompile)
    decode_s: float = 0.0
    compile_s: float = 0.0


def _decode(path: Path, detector: PhotoDetector, stats: LibraryStats, draft: bool = False,
            processes=None) -> _Photo:
    """draft: the run needs the photo only as the detector's input (images.load_photo_shrunk: large JPEGs decode
    scaled down); else the photo at its own size too, for alignment or drawing. processes: a drafted run's
    decoders.DecoderProcesses, which decode it into a shared slot (released once the network ran on it)."""
    photo = _Photo(PhotoFaces(path=path))
    start = time.perf_counter()
    shrunk = size = None
    try:
        if processes is not None:
            pixels, size, slot = processes.decode(path)
            if slot is not None:
                photo.release = lambda: processes.release(slot)
        elif draft:
            pixels, size = load_photo_shrunk(path, detector.fit_size)
        else:
            pixels, shrunk = load_photo(path, detector.fit_size)
    except (ImageError, InputError) as e:
        photo.result.error = str(e)
        photo.decode_s = time.perf_counter() - start
        return photo
    _prepare(photo, pixels, detector, shrunk, size)
    decoded = time.perf_counter()
    photo.decode_s = decoded - start
    stats.add("decode", photo.decode_s)
    detector.precompile(photo.prepared)  # a new size's programs made here, beside the network thread
    photo.compile_s = time.perf_counter() - decoded
    stats.add("compile", photo.compile_s)
    return photo


def _decoded_here(clock: phases.PhaseClock, photo: _Photo, start: int) -> None:
    """A photo the feeding thread decoded itself, from `start` on its clock: the decode as DECODE, its new size's
    programs as PROGRAM, the rest of the time (the interpreter lock taken back from other threads) as PYTHON."""
    decode, compile_ = int(photo.decode_s * 1e9), int(photo.compile_s * 1e9)
    clock.add(phases.DECODE, decode)
    clock.add(phases.PROGRAM, compile_)
    clock.add(phases.PYTHON, max(0, phases.perf_counter_ns() - start - decode - compile_))


def _prepare(photo: _Photo, pixels: np.ndarray, detector: PhotoDetector, shrunk: np.ndarray | None = None,
             photo_size: tuple[int, int] | None = None) -> None:
    """The decoded photo's size, and the detector's input laid out (CPU work, no model). `pixels` is HxWx3 RGB, or
    HxWx4 from load_photo (the detector takes that layout as it is; the rest of the run sees its RGB view).
    `photo_size`: the photo's (width, height) when `pixels` is only the detector's input (load_photo_shrunk)."""
    photo.result.height, photo.result.width = int(pixels.shape[0]), int(pixels.shape[1])
    if photo_size is not None:
        photo.result.width, photo.result.height = int(photo_size[0]), int(photo_size[1])
    photo.rgb = pixels[:, :, :3]
    photo.prepared = detector.prepare(pixels, shrunk, photo_size)
    photo.result.input_size = tuple(int(d) for d in photo.prepared.shape[2:4]) or None


def _detect(photo: _Photo, detector: PhotoDetector, stats: LibraryStats) -> None:
    clock = stats.clock
    inner = clock.total_ns()
    start = phases.perf_counter_ns()
    before = phases.swap(clock)  # the runners' phases on this thread (upload, submit, wait ...)
    try:
        detector.run_network(photo.prepared)
    finally:
        phases.swap(before)
    if photo.release is not None:  # the photo is on the device (or in its blob): its decoder slot is free
        photo.release()
        photo.release, photo.rgb = None, None
    ns = phases.perf_counter_ns() - start
    # the Python around the runner: what its own phases leave of the call
    clock.add(phases.PYTHON, max(0, ns - (clock.total_ns() - inner)))
    photo.result.detect_ms += ns / 1e6
    stats.add("detect", ns / 1e9)


def _post(photo: _Photo, detector: PhotoDetector, embedder, all_faces: bool, keep_images: bool,
          stats: LibraryStats) -> _Photo:
    start = time.perf_counter()
    faces = detector.faces_from(photo.prepared)
    photo.prepared = None
    if not all_faces and faces:
        faces = [max(faces, key=lambda f: float(f.box[2]) * float(f.box[3]))]
    photo.result.faces = list(faces)
    middle = time.perf_counter()
    photo.result.detect_ms += (middle - start) * 1000.0
    stats.add("post", middle - start)
    if embedder is not None:
        photo.crops = [embedder.cut(photo.rgb, face.landmarks) for face in photo.result.faces]
        stats.add("align", time.perf_counter() - middle)
    if keep_images:
        photo.result.image = np.ascontiguousarray(photo.rgb)  # HxWx3 on its own, not a view of the decoded pixels
    photo.rgb = None  # the decoded photo goes once its faces are cropped
    return photo


@dataclass
class _Entry:
    """A photo in the pipelined run: its decode's future, then (fed to the network) its post-processing's (a
    Future, or a buckets.Slot until its bucket's batch ran)."""

    future: Future | None
    path: Path
    out: Future | Slot | None = None


class _Lookahead:
    """Paths read ahead, `window` of them, and handed out for decoding grouped by the bucket their headers say
    (FACERUN_PHOTO_LOOKAHEAD): the oldest path's bucket, then up to `size` - 1 more of it from the window, so a
    bucket's batch fills from photos decoded together instead of waiting, held, for the folder to bring more. A path
    enters `order` (the reorder buffer) in input order when it is read. `key_of(width, height)`: a photo's bucket
    from its upright size (None: unknown, it goes alone). `submit(fn, path)`: where the headers are read (the
    decoding threads' pool: a header read on the feeding thread waits for the interpreter lock at its every file
    call, with a dozen threads wanting it); None: here, at once."""

    READS = 8  # paths read a call at most: the window fills over a few dozen photos, not in one pause

    def __init__(self, source: Iterator, key_of: Callable, window: int, size: int, order: deque,
                 submit: Callable | None = None):
        self.source, self.key_of, self.window, self.size, self.order = source, key_of, window, size, order
        self.submit = submit
        # [bucket, or the Future reading it; entry] read, not handed out, in input order
        self.waiting: list[list] = []
        self.key, self.left = None, 0  # the bucket being handed out, and how many more of it

    def __len__(self) -> int:
        return len(self.waiting)

    def _key_of_path(self, path: Path):
        size = upright_size(path)
        return self.key_of(*size) if size is not None else None

    def next(self, window: int | None = None) -> _Entry | None:
        """The next path to decode (an _Entry already in `order`), or None: no path left. window: read ahead this
        many at most now (the run's first photos: 1)."""
        want = self.window if window is None else window
        for _ in range(self.READS):
            if len(self.waiting) >= want:
                break
            raw = next(self.source, None)
            if raw is None:
                break
            entry = _Entry(None, Path(raw))
            self.order.append(entry)
            key = self._key_of_path(entry.path) if self.submit is None else self.submit(self._key_of_path, entry.path)
            self.waiting.append([key, entry])
        if not self.waiting:
            return None
        at = None
        if self.left > 0 and self.key is not None:
            for i, item in enumerate(self.waiting):
                key = item[0]
                if isinstance(key, Future):
                    if not key.done():  # the newest headers, still being read: not grouped yet
                        break
                    key = item[0] = key.result()
                if key == self.key:
                    at = i
                    break
        if at is None:
            oldest = self.waiting[0]
            if isinstance(oldest[0], Future):  # read long ago, but for the run's first photos: then read it here
                # (not waited for: behind decodes that may wait on this thread for shared slots)
                oldest[0] = oldest[0].result() if oldest[0].done() else self._key_of_path(oldest[1].path)
            at, self.key, self.left = 0, oldest[0], self.size
        self.left -= 1
        return self.waiting.pop(at)[1]


class _Batcher:
    """Faces embedded `batch` at a time across photos; a photo comes out once all its faces are embedded, in order.

    A batch is submitted and read back at the next batch's submission (or at the end), so the feeding thread goes on
    while the device runs it (behind the detector's batches in the queue) instead of waiting for it. Except for the
    run's first photo: its faces are embedded at once, a batch of their own read back at once, so it comes out as
    soon as it is detected (else it waited for two batches of faces to fill: docs/benchmarks.md, stop 53)."""

    def __init__(self, embedder, batch: int, stats: LibraryStats, clock: phases.PhaseClock | None = None):
        self.embedder, self.batch, self.stats = embedder, batch, stats
        self.clock = clock  # the feeding thread's, where it embeds (not on a thread of its own)
        self.dim = embedder.dim if embedder is not None else 0
        self.waiting: deque[tuple[PhotoFaces, list]] = deque()  # photos in order, with their vectors so far
        self.pending: list[tuple[list, object]] = []  # (the photo's vector list, Embedder.cut's face), oldest first
        self.running: tuple[list, Callable] | None = None  # the batch submitted: its owners, its vectors' function
        self.first = True  # no photo has come out yet

    def add(self, photo: _Photo) -> Iterator[PhotoFaces]:
        vectors: list = []
        self.waiting.append((photo.result, vectors))
        photo.result.embeddings = np.zeros((0, self.dim), np.float32)
        if self.embedder is not None:
            self.pending.extend((vectors, crop) for crop in photo.crops)
            photo.crops = []
            while len(self.pending) >= self.batch:
                self._embed(self.batch)
            if self.first and self.pending:  # the first photo's latency is what a user sees first
                self._embed(len(self.pending))
                self._collect()
        for result in self._ready():
            self.first = False
            yield result

    def finish(self) -> Iterator[PhotoFaces]:
        if self.pending:
            self._embed(len(self.pending))
        self._collect()
        yield from self._ready()

    def _embed(self, count: int) -> None:
        self._collect()  # the last batch first: its read-back buffer is this one's
        start = phases.perf_counter_ns()
        owners = [owner for owner, _ in self.pending[:count]]
        vectors = self.embedder.submit_faces([face for _, face in self.pending[:count]])
        self._lap(start)
        self.running = (owners, vectors)
        del self.pending[:count]

    def _collect(self) -> None:
        if self.running is None:
            return
        start = phases.perf_counter_ns()
        owners, vectors = self.running
        self.running = None
        for owner, vector in zip(owners, vectors()):
            owner.append(vector)
        self._lap(start)

    def _lap(self, start: int) -> None:
        ns = phases.perf_counter_ns() - start
        self.stats.add("embed", ns / 1e9)
        if self.clock is not None:
            self.clock.add(phases.EMBED, ns)

    def _ready(self) -> Iterator[PhotoFaces]:
        while self.waiting:
            result, vectors = self.waiting[0]
            if self.embedder is not None and len(vectors) < len(result.faces):
                return
            self.waiting.popleft()
            if vectors:
                result.embeddings = np.ascontiguousarray(np.stack(vectors), dtype=np.float32)
            yield result


def embed_thread(embedder) -> bool:
    """Whether a pipelined run embeds on a thread of its own: FACERUN_EMBED_THREAD=on, where the embedder runs on
    the GPU (on the CPU its interpreter would take the cores the detector's needs). Off by default: in one process
    the two threads share the interpreter lock, and the whole job measured no faster with it (docs/benchmarks.md)."""
    # a net's device is its adapter's name on the GPU ("cpu" on the CPU)
    return (embedder is not None and bool(settings.get("FACERUN_EMBED_THREAD"))
            and getattr(embedder, "device", "cpu") != "cpu")


class _EmbedThread:
    """The batcher on a thread of its own: the feeding thread hands it each photo, in order, and goes on detecting
    while it gathers the faces into batches, submits them and reads them back; what it finished comes back in order.
    At most `limit` photos wait for it (then the feeding thread waits too: ON_EMBED)."""

    def __init__(self, batcher: _Batcher, limit: int):
        self.batcher, self.limit = batcher, limit
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="facerun-embed")
        self.handed: deque[Future] = deque()  # per photo handed over: the results it let out, in order

    def add(self, photo: _Photo) -> None:
        self.handed.append(self.pool.submit(lambda: list(self.batcher.add(photo))))

    def ready(self, busy: phases.Busy, everything: bool = False) -> Iterator[PhotoFaces]:
        """What the thread finished, in order; waiting for it past `limit` photos (or for all: `everything`)."""
        while self.handed and (self.handed[0].done() or everything or len(self.handed) > self.limit):
            future = self.handed.popleft()
            waited = not future.done()
            if waited:
                busy.stop(phases.ON_EMBED)
            results = future.result()
            if waited:
                busy.start()
            yield from phases.handed(results, busy)

    def finish(self, busy: phases.Busy) -> Iterator[PhotoFaces]:
        self.handed.append(self.pool.submit(lambda: list(self.batcher.finish())))
        yield from self.ready(busy, everything=True)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------- the runs


def iter_photo_faces(
    paths: Iterable,
    detector,
    embedder=None,
    batch: int = 16,
    all_faces: bool = True,
    progress: Callable[[PhotoFaces], None] | None = None,
    workers: int | None = None,
    keep_images: bool = False,
    stats: LibraryStats | None = None,
    draft: bool = True,
) -> Iterator[PhotoFaces]:
    """Detect (and with an embedder: align and embed) the faces of each photo; yield one `PhotoFaces` per photo.

    Contract (the serial and the pipelined run keep it alike):
    - Order: exactly one result per input path, in input order, whatever runs in parallel underneath.
    - Faces: every face the detector finds (all_faces=True) or only the largest (False), best score first;
      `embeddings[i]` (float32, unit length, `embedder.dim` wide) belongs to `faces[i]`. A photo without a face
      gives an empty list and a 0 x d array; that is not an error. Without an embedder, embeddings are 0 x 0.
    - Errors: a missing, unreadable or non-image file gives a result with `error` set to a one-line message and the
      iteration goes on. Any other failure (a model or GPU error) raises, and the results already yielded stand.
    - Memory: bounded by a few decoded photos per worker plus about `batch` aligned faces, never the whole list;
      decoded photos are dropped once their faces are cropped (kept in `image` only with keep_images=True).
      Results are yielded once their faces are embedded, so a consumer may lag the detector by one batch of faces.
    - Batching: faces are embedded `batch` at a time across photo boundaries (one network call, one GPU
      submission), the last batch holding the rest; so the serial and pipelined runs embed the very same batches.
    - progress(result) is called once per photo, in order, just before it is yielded.
    - Stopping: closing the iterator early, an exception or Ctrl-C cancels the queued work; the threads finish
      the photo in hand and end.
    workers: decoding threads (default: the cores but one); 0 runs everything serially on the calling thread.
    draft: where the run needs a photo only as the detector's input (no embedder, keep_images=False), JPEGs at least
    twice the detector's fitted size decode scaled down (images.load_photo_shrunk); their faces are then close to
    full decoding's, not the same numbers. Runs that align or keep photos always decode them at full size.
    detector: a PhotoDetector (facerun's Detector), or anything with detect(rgb) (photo_detector.PlainDetector).
    """
    options = LibraryOptions(batch=batch, all_faces=all_faces, workers=workers, keep_images=keep_images, draft=draft)
    stats = stats if stats is not None else LibraryStats()
    yield from observed(threads(paths, detector, embedder, options, stats), stats, progress)


def iter_photo_faces_serial(paths: Iterable, detector, embedder=None, **options) -> Iterator[PhotoFaces]:
    """`iter_photo_faces` one photo after another on the calling thread: the reference for the pipelined run."""
    return iter_photo_faces(paths, detector, embedder, workers=0, **options)


def observed(results: Iterable[PhotoFaces], stats: LibraryStats,
             progress: Callable[[PhotoFaces], None] | None = None) -> Iterator[PhotoFaces]:
    """An engine's results as a run hands them on: counted in `stats`, then progress(result), then yielded.
    Closing this closes the engine's run at once (its threads or processes stop)."""
    try:
        for result in results:
            stats.photo_out(result)
            if progress is not None:
                progress(result)
            yield result
    finally:
        if isinstance(results, Generator):
            results.close()


# The engines of this process (face/engines.py ENGINES): each gives (paths, detector, embedder, options, stats) ->
# the PhotoFaces, in input order, counted in stats by the caller (observed).


def threads(paths: Iterable, detector, embedder, options: LibraryOptions, stats: LibraryStats
            ) -> Iterator[PhotoFaces]:
    """The pipelined run over options.workers decoding threads (0: serial)."""
    workers = default_workers(getattr(detector, "device", "cpu")) if options.workers is None else int(options.workers)
    if workers <= 0:
        return _serial(paths, photo_detector(detector), embedder, options, stats)
    return _pipelined(paths, photo_detector(detector), embedder, options, workers, stats)


def serial(paths: Iterable, detector, embedder, options: LibraryOptions, stats: LibraryStats
           ) -> Iterator[PhotoFaces]:
    """One photo after another on the calling thread, whatever options.workers says."""
    return _serial(paths, photo_detector(detector), embedder, options, stats)


def _drafted(embedder, options: LibraryOptions) -> bool:
    """Whether photos decode only as the detector's input (see iter_photo_faces' draft)."""
    return bool(options.draft) and embedder is None and not options.keep_images


def _serial(paths, detector: PhotoDetector, embedder, options: LibraryOptions, stats: LibraryStats
            ) -> Iterator[PhotoFaces]:
    batcher = _Batcher(embedder, options.batch, stats, stats.clock)
    draft = _drafted(embedder, options)
    clock, busy = stats.clock, phases.Busy(stats.clock)
    busy.start()
    try:
        for raw in paths:
            start = phases.perf_counter_ns()
            photo = _decode(Path(raw), detector, stats, draft)
            _decoded_here(clock, photo, start)
            if photo.result.ok:
                _detect(photo, detector, stats)
                start = phases.perf_counter_ns()
                _post(photo, detector, embedder, options.all_faces, options.keep_images, stats)
                clock.lap(phases.POST, start)
            yield from phases.handed(batcher.add(photo), busy)
        yield from phases.handed(batcher.finish(), busy)
    finally:
        busy.close()


def iter_decoded_faces(decoded: Iterable[tuple], detector, embedder=None, batch: int = 16, all_faces: bool = True,
                       stats: LibraryStats | None = None) -> Iterator[PhotoFaces]:
    """The stages after decoding, one photo after another, for photos decoded elsewhere (a Ray task): `decoded`
    gives (path, rgb, error) with rgb an HxWx3 uint8 array, or None and error the one-line reason. Yields what
    `iter_photo_faces` gives for the same photos (same faces, same batches of `batch` faces across photos)."""
    options = LibraryOptions(batch=batch, all_faces=all_faces)
    stats = stats if stats is not None else LibraryStats()
    yield from observed(_decoded(decoded, photo_detector(detector), embedder, options, stats), stats)


def _decoded(decoded: Iterable[tuple], detector: PhotoDetector, embedder, options: LibraryOptions,
             stats: LibraryStats) -> Iterator[PhotoFaces]:
    batcher = _Batcher(embedder, options.batch, stats, stats.clock)
    for path, rgb, error in decoded:
        photo = _Photo(PhotoFaces(path=Path(path), error=error))
        if error is None:
            start = time.perf_counter()
            _prepare(photo, rgb, detector)
            stats.add("decode", time.perf_counter() - start)
            _detect(photo, detector, stats)
            _post(photo, detector, embedder, options.all_faces, False, stats)
        yield from batcher.add(photo)
    yield from batcher.finish()


def _pipelined(paths, detector: PhotoDetector, embedder, options: LibraryOptions, workers: int, stats: LibraryStats
               ) -> Iterator[PhotoFaces]:
    threaded = embed_thread(embedder)
    batcher = _Batcher(embedder, options.batch, stats, None if threaded else stats.clock)
    draft = _drafted(embedder, options)
    source = iter(paths)
    processes = None
    kind = options.decoders if options.decoders is not None else settings.get("FACERUN_DECODERS")
    if _decoders.choose(kind, draft, detector.device) == "processes":
        from .decoders import DecoderProcesses, default_processes, fit_of

        count = options.decoder_processes or default_processes()
        workers = max(workers, count)  # a thread per process waits on it, then lays its photo out
        # slots: the decoding window, and the photos the detect stage holds (a bucket's batch gathering, one in
        # flight: a batch each, at most twice that waiting)
        processes = DecoderProcesses(count, fit_of(detector), slots=2 * workers + 4 + 4 * photo_batch())
        stats.decoder_processes = count
    through = {"processes": processes} if processes is not None else {}
    ahead = 2 * workers + 2  # decoded photos waiting for the network, at most
    decoding: deque[_Entry] = deque()  # photos being decoded, not fed to the network yet, in the order asked
    order: deque[_Entry] = deque()  # every photo not handed on yet, in input order (the reorder buffer)
    # photos asked for in input order, or grouped by bucket from their headers read ahead (_Lookahead)
    # on the CPU the decoding threads run nicer, and their photos not started yet are taken back (decoders.py)
    priority = settings.get("FACERUN_DECODER_PRIORITY")
    nicer = priority != "same" and processes is None and detector.device == "cpu"
    decoders = ThreadPoolExecutor(workers, thread_name_prefix="facerun-decode",
                                  initializer=_decoders.nicer_thread if nicer else None,
                                  initargs=(priority,) if nicer else ())
    window, key_of = settings.get("FACERUN_PHOTO_LOOKAHEAD"), detector.batch_key_of_size
    lookahead = (_Lookahead(source, key_of, window, photo_batch(), order, decoders.submit)  # buckets only
                 if window and photo_batch() > 1 and key_of(640, 480) is not None else None)
    # NMS and alignment (a few ms a photo of many faces) on threads of their own: numpy lets go of the GIL there
    posters = post_threads(workers)
    stats.post_threads = posters
    poster = ThreadPoolExecutor(posters, thread_name_prefix="facerun-post")

    ran = [False]  # the network ran its first FIRST_RUNS photos (the model's GPU check is behind it)
    runs = [0]

    def top_up() -> None:
        # until the network has run its first FIRST_RUNS photos, two photos are decoded ahead of it, not a window's
        # worth: more decoders' Python (and their new sizes' compiling) would hold the GIL the model's check and the
        # first compiles need (the first photo came soonest with 2: docs/bench/code-figures.md)
        limit = ahead if ran[0] else FIRST_AHEAD
        while len(decoding) < limit:
            if lookahead is not None:
                entry = lookahead.next(None if ran[0] else 1)
                if entry is None:
                    return
            else:
                raw = next(source, None)
                if raw is None:
                    return
                entry = _Entry(None, Path(raw))
                order.append(entry)
            entry.future = decoders.submit(_decode, entry.path, detector, stats, draft, **through)
            decoding.append(entry)

    def fed() -> int:
        """Photos handed to the network (or failed) and not handed on yet: `order` less those decoding or not
        started."""
        return len(order) - len(decoding) - (len(lookahead) if lookahead is not None else 0)

    def next_decoded() -> _Entry:
        """The photo to feed next: the oldest one decoded, not the oldest one (a slow decode would hold the decoded
        photos behind it, and with the window full the decoders would wait too); in input order on the CPU (its
        decodes are taken back) and once many fed photos wait on the oldest one (memory)."""
        if nicer or not ran[0] or fed() > 4 * ahead:
            return decoding[0]
        entry = next((e for e in decoding if e.future.done()), None)
        if entry is None:
            if buckets.groups:
                buckets.idle()  # nothing decoded yet: the device runs what is gathered
            busy.stop(phases.ON_DECODERS)  # waiting on the decoders is no busy time
            wait([e.future for e in decoding], return_when=FIRST_COMPLETED)
            busy.start()
            entry = next(e for e in decoding if e.future.done())
        return entry

    def post(photo: _Photo) -> _Photo:
        return _post(photo, detector, embedder, options.all_faces, options.keep_images, stats)

    # photos of one bucket run a batch to a submission; `order` keeps input order (the reorder buffer)
    hurried = settings.get("FACERUN_PHOTO_HURRY")
    buckets = Buckets(detector, stats, lambda photo: poster.submit(post, photo),
                      lambda photo: _detect(photo, detector, stats))
    busy = phases.Busy(stats.clock)
    embedding = _EmbedThread(batcher, limit=ahead) if threaded else None
    stats.embed_thread = threaded
    busy.start()
    try:
        top_up()
        while order:
            if decoding:
                entry = next_decoded()
                decoding.remove(entry)
                if nicer and entry.future.cancel():  # not started: the decoders are behind, decode it here
                    start = phases.perf_counter_ns()
                    photo = _decode(entry.path, detector, stats, draft)
                    _decoded_here(stats.clock, photo, start)
                else:
                    waited = not entry.future.done()
                    if waited:
                        if buckets.groups:
                            buckets.idle()  # the device runs what is gathered while the decoders finish
                        busy.stop(phases.ON_DECODERS)  # waiting on the decoders is no busy time
                    photo = entry.future.result()
                    if waited:
                        busy.start()
                top_up()
                if photo.result.ok and ran[0]:
                    entry.out = buckets.add(photo)  # the device works while the decoders go on
                elif photo.result.ok:
                    _detect(photo, detector, stats)  # the first photos alone: the model's checks run there
                    entry.out = poster.submit(post, photo)
                    if not ran[0]:
                        runs[0] += 1
                        if runs[0] >= FIRST_RUNS:
                            ran[0] = True
                            top_up()  # the whole window from now on
                else:
                    entry.out = Future()
                    entry.out.set_result(photo)
            # hand on what post-processing finished, in input order; wait for it only when it falls behind, for the
            # first photo (its latency is what a user sees first) or when nothing else is left. A batch read back
            # hands its photos to post-processing all at once: a batch of them may wait there while this thread
            # runs the next (else it waited on the first few of each batch)
            # A photo still waiting on the device is not forced while decoding goes on: its group is submitted
            # (hurry) and read back when the next batch goes in, unless FACERUN_PHOTO_HURRY batches more wait behind
            # it (forcing it read it back at once, and the device waited while this thread recorded the next batch)
            behind = posters + 1 + buckets.held + buckets.batch_slack
            while order and order[0].out is not None and (
                    order[0].out.done() or fed() > behind or not decoding
                    or stats.first_photo_s is None):
                head = order[0].out
                if (decoding and stats.first_photo_s is not None and not head.done() and isinstance(head, Slot)
                        and fed() <= behind + hurried * buckets.size and buckets.hurry(head)):
                    break
                busy.stop(phases.ON_POST)
                done_photo = order.popleft().out.result()
                busy.start()
                if embedding is not None:
                    embedding.add(done_photo)
                    yield from embedding.ready(busy)
                else:
                    yield from phases.handed(batcher.add(done_photo), busy)
        if embedding is not None:
            yield from embedding.finish(busy)
        else:
            yield from phases.handed(batcher.finish(), busy)
    finally:
        busy.close()
        if embedding is not None:
            embedding.close()
        decoders.shutdown(wait=False, cancel_futures=True)
        poster.shutdown(wait=False, cancel_futures=True)
        if processes is not None:
            processes.close()  # a thread still waiting on it gets a FacerunError, which nobody reads


__all__ = ["LibraryOptions", "LibraryStats", "PhotoFaces", "iter_decoded_faces", "iter_photo_faces",
           "iter_photo_faces_serial", "observed", "serial", "threads"]
