"""The rows of `facerun bench photos`: one path's run over a folder of photos (facerun's library run in threads,
one photo after another, or over processes; OpenCV's FaceDetectorYN), with what it counted and where its time went.
Which path runs which row is facerun.bench.paths' PHOTO_PATHS.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import counters
from ..errors import FacerunError

STAGE_COLUMNS = ("decode", "compile", "detect", "post", "align", "embed", "total")


@dataclass(frozen=True)
class PhotoJob:
    """What every row of one run shares: the photos, the detector, and how wide to run."""

    photos: list
    detector_model: object = None  # None: the default YuNet
    batch: int = 16  # faces per embedding call
    workers: int | None = None  # decoding threads of the library run (None: its default for the row's device)
    processes: int = 4  # of the *-processes paths
    opencv_threads: int = 2  # of opencv-threads


@dataclass
class PhotoRow:
    path: str
    photos: int = 0
    faces: int = 0
    distinct_sizes: int = 0
    photos_per_s: float | None = None
    faces_per_s: float | None = None
    first_photo_ms: float | None = None
    # photos/s from the first photo out to the last: the rate once running, its start-up (and, over processes, most
    # of their spawning) left out
    after_first_per_s: float | None = None
    gpu_checks: int = 0  # CPU agreement runs: whole-network checks plus single-layer checks of new kernel variants
    gpu_whole_checks: int = 0
    gpu_checks_kept: int = 0  # models whose check an earlier process passed and kept (gpu/verdicts.py)
    programs_compiled: int = 0  # step programs (one per input size and model)
    gpu_programs_compiled: int = 0
    pipelines_created: int = 0
    programs_evicted: int = 0
    # GPU submissions of several photos: in a batch program (one pass, each item masked to its photo), or once a photo
    photo_item_batches: int = 0
    photo_run_batches: int = 0
    # photos a decoding thread put on the device (gpu/staging.py), and those that found no buffer free
    photos_staged: int = 0
    photos_unstaged: int = 0
    workers: int = 0
    processes: int = 1
    parent_photos: int = 0  # over processes: the photos the process starting them ran itself (FACERUN_PARENT_RUNS)
    # over processes, their start-up (seconds, [fastest, slowest] process): from spawning to the process's own code
    # (`python`: the interpreter and its imports), making its models (`models`), and both (`ready`)
    process_start_s: dict = field(default_factory=dict)
    device: str = ""
    one_off_seconds: dict = field(default_factory=dict)  # seconds of the one-off work above (facerun.counters)
    seconds: dict = field(default_factory=dict)  # busy seconds per stage (summed over threads), total = wall
    agree_with_cpu: dict | None = None
    bottleneck: str = ""
    skipped: str | None = None
    vs_decode: float | None = None  # photos/s over the faster decode row's (the floor), when one ran
    decoders: str = ""  # where the library run decoded: "threads" or "N processes"
    floor: bool = False  # a decode row: decoding alone
    # with --repeat N: every run's photos/s, and their spread (min–max for fewer than SPREAD_PERCENTILES_FROM runs,
    # else p10–p90); photos_per_s and faces_per_s are then the runs' medians, the rest the median run's
    runs: int = 1
    photos_per_s_runs: list = field(default_factory=list)
    photos_per_s_low: float | None = None
    photos_per_s_high: float | None = None
    spread: str | None = None
    faces_by_photo: list = field(default_factory=list, repr=False)  # [(score, box)] per photo, for agreement

    def to_json(self) -> dict:
        d = {k: v for k, v in vars(self).items() if k != "faces_by_photo"}
        return d


def facerun_row(job: PhotoJob, name: str, device: str, embed_model=None, serial: bool = False,
                decoders: str | None = None) -> PhotoRow:
    """facerun's library run on `device` ("cpu" or "gpu"): pipelined over job.workers decoding threads (or
    decoder processes: `decoders`, None: as FACERUN_DECODERS says), or `serial`, one photo after another (the loop
    facerun ran before the pipeline)."""
    from ..face.detect import Detector
    from ..face.embed import Embedder
    from ..face.engines import run
    from ..face.library import LibraryOptions, LibraryStats, default_workers

    photos, detector_model, batch = job.photos, job.detector_model, job.batch
    row = PhotoRow(name + ("+embed" if embed_model is not None else ""))
    models = _models(row, device, lambda: (Detector(detector_model, device=device),
                                           Embedder(embed_model, device=device) if embed_model is not None else None))
    if models is None:
        return row
    detector, embedder = models
    row.device = detector.device
    row.workers = 0 if serial else job.workers if job.workers is not None else default_workers(detector.device)
    options = LibraryOptions(batch=batch, workers=row.workers, engine="serial" if serial else "threads",
                             decoders=decoders)
    before = counters.snapshot()
    stats = LibraryStats()  # the clock starts here: models loaded, the device created
    with _garbage_collection() as collected:
        for photo in run(photos, detector, embedder, options, stats=stats):
            row.faces_by_photo.append([(float(f.score), tuple(float(v) for v in f.box)) for f in photo.faces])
    paid = counters.since(before)
    paid["garbage_collection_s"] = collected[0]
    wall = _fill(row, stats, paid)
    if not serial:
        row.decoders = f"{stats.decoder_processes} processes" if stats.decoder_processes else "threads"
    row.bottleneck = bottleneck(stats.seconds, wall, max(1, row.workers), serial, stats.post_threads,
                                stats.embed_thread)
    if device == "gpu" and detector.device == "cpu":
        row.skipped = f"the GPU was not used: {detector.net.gpu_reason}"
    return row


def _models(row: PhotoRow, device: str, load) -> tuple | None:
    """load()'s models, or None with the row marked skipped when a GPU path cannot load them (on the CPU the error
    is the command's)."""
    try:
        return load()
    except FacerunError as e:
        if device != "gpu":
            raise
        row.skipped = str(e)
        return None


def _fill(row: PhotoRow, stats, paid: dict) -> float:
    """The row's figures from a run's LibraryStats and the one-off work it counted (facerun.counters); the wall time."""
    wall = max(stats.wall_s, 1e-9)
    row.photos, row.faces, row.distinct_sizes = stats.photos, stats.faces, len(stats.sizes)
    row.photos_per_s, row.faces_per_s = stats.photos / wall, stats.faces / wall
    row.first_photo_ms = None if stats.first_photo_s is None else stats.first_photo_s * 1000.0
    if stats.first_photo_s is not None and stats.photos > 1 and wall > stats.first_photo_s:
        row.after_first_per_s = (stats.photos - 1) / (wall - stats.first_photo_s)
    row.gpu_whole_checks = paid.get("gpu_checks", 0)
    row.gpu_checks = row.gpu_whole_checks + paid.get("gpu_variant_checks", 0)
    row.gpu_checks_kept = paid.get("gpu_checks_kept", 0)
    row.programs_compiled = paid.get("programs_compiled", 0)
    row.gpu_programs_compiled = paid.get("gpu_programs_compiled", 0)
    row.pipelines_created = paid.get("pipelines_created", 0)
    row.programs_evicted = paid.get("programs_evicted", 0) + paid.get("gpu_programs_evicted", 0)
    row.photo_item_batches = paid.get("gpu_photo_item_batches", 0)
    row.photo_run_batches = paid.get("gpu_photo_batches", 0)
    row.photos_staged = paid.get("gpu_photos_staged", 0)
    row.photos_unstaged = paid.get("gpu_photos_unstaged", 0)
    row.seconds = {**{k: round(v, 4) for k, v in stats.seconds.items()}, "total": round(wall, 4)}
    clock = getattr(stats, "clock", None)
    if clock is not None and clock.busy_ns:
        # the thread feeding the network: its busy seconds, and their split by phase (facerun.phases)
        row.seconds["feeding"] = round(clock.busy_ns / 1e9, 4)
        row.seconds["phases"] = {k: round(v, 5) for k, v in clock.seconds().items()}
        row.seconds["waiting"] = {k: round(v / 1e9, 4) for k, v in clock.idle_ns.items()}
    row.one_off_seconds = {k[:-2]: round(v, 4) for k, v in sorted(paid.items()) if k.endswith("_s")}
    return wall


def processes_row(job: PhotoJob, name: str, device: str, embed_model=None) -> PhotoRow:
    """The library run over job.processes processes: the clock starts before they are spawned (this process's own
    models loaded, as a one-process row's), so their start-up (imports, device, check) is in every figure; the
    checks and programs are theirs, summed."""
    from ..face.detect import Detector, _card
    from ..face.embed import Embedder
    from ..face.engines import run
    from ..face.library import LibraryOptions, LibraryStats
    from ..face.processes import parent_runs, start_ahead

    photos, detector_model, batch, processes = job.photos, job.detector_model, job.batch, job.processes
    row = PhotoRow(name + ("+embed" if embed_model is not None else ""), processes=processes)
    start_ahead(processes, device)  # as the commands do: the fork server loads while the models here load
    options = {"model": str(_card(detector_model).path), "device": device, "for_alignment": embed_model is not None}
    # as the commands load them: the embedder, and where this process runs photos too, its detector
    models = _models(row, device, lambda: (Embedder(embed_model, device=device) if embed_model is not None else None,
                                           Detector(**options) if parent_runs() else None))
    if models is None:
        return row
    embedder, detector = models
    stats = LibraryStats()  # the clock starts here, before the processes are spawned
    devices = set()
    try:
        for photo in run(photos, detector, embedder, LibraryOptions(batch=batch, engine="processes",
                                                                    processes=processes, detector_args=options),
                         stats=stats):
            row.faces_by_photo.append([(float(f.score), tuple(float(v) for v in f.box)) for f in photo.faces])
            if photo.device:
                devices.add(photo.device)
    except FacerunError as e:
        if device == "gpu":
            row.skipped = str(e)
            return row
        raise
    wall = _fill(row, stats, stats.counted)  # what the processes counted, summed
    row.device = "; ".join(sorted(devices)) + f" x {processes} processes"
    row.parent_photos = int(stats.counted.get("photos_here", 0))
    starts = stats.process_starts
    if starts:
        spans = {"python": [a for a, _ in starts], "models": [b for _, b in starts],
                 "ready": [a + b for a, b in starts]}
        row.process_start_s = {k: [round(min(v), 3), round(max(v), 3)] for k, v in spans.items()}
    busiest = max(("decode", "detect", "post", "align", "embed"), key=lambda k: stats.seconds[k])
    row.bottleneck = (f"{processes} processes, wall {wall:.2f} s including their start-up; busiest stage over them: "
                      f"{busiest} {stats.seconds[busiest] / (wall * processes):.0%} of their time; "
                      f"{row.parent_photos} photos run by the process starting them")
    if row.process_start_s:
        (r0, r1), (p0, p1), (m0, m1) = (row.process_start_s[k] for k in ("ready", "python", "models"))
        row.bottleneck += (f"; ready after {r0:.2f}-{r1:.2f} s (Python and imports {p0:.2f}-{p1:.2f}, models "
                           f"{m0:.2f}-{m1:.2f})")
    if device == "gpu" and not any(d != "cpu" for d in devices):
        row.skipped = "the GPU was not used in the processes"
    return row


@contextlib.contextmanager
def _garbage_collection():
    """[seconds Python's cyclic garbage collector ran] over the block (it stops every thread while it runs)."""
    seconds, started = [0.0], [0.0]

    def timed(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            seconds[0] += time.perf_counter() - started[0]

    gc.callbacks.append(timed)
    try:
        yield seconds
    finally:
        gc.callbacks.remove(timed)


def bottleneck(seconds: dict, wall: float, workers: int, serial: bool, posters: int = 1,
               embed_thread: bool = False) -> str:
    """Where the time goes, in words: each thread group's busy share of the wall time, the busiest first
    (embed_thread: the faces were embedded on a thread of their own, not the network thread)."""
    if serial:
        groups = {"decode": seconds["decode"], "detect": seconds["compile"] + seconds["detect"] + seconds["post"],
                  "align + embed": seconds["align"] + seconds["embed"]}
        parts = [f"{name} {s / wall:.0%}" for name, s in sorted(groups.items(), key=lambda kv: -kv[1])]
        return "one thread: " + ", ".join(parts)
    groups = {
        f"decode + compile ({workers} thread{'s' if workers > 1 else ''})":
            (seconds["decode"] + seconds["compile"]) / workers,
        **({"network thread (detect)": seconds["detect"], "embed thread": seconds["embed"]} if embed_thread else
           {"network thread (detect + embed)": seconds["detect"] + seconds["embed"]}),
        f"post ({posters} thread{'s' if posters > 1 else ''}: NMS + align)":
            (seconds["post"] + seconds["align"]) / posters,
    }
    ranked = sorted(groups.items(), key=lambda kv: -kv[1])
    return "bound by " + ranked[0][0] + "; busy: " + ", ".join(f"{name} {s / wall:.0%}" for name, s in ranked)


def decode_row(job: PhotoJob, processes: bool = False) -> PhotoRow:
    """Decoding alone, the floor every other row is read against: the library's drafted decode
    (images.load_photo_shrunk with the detector's fit, large JPEGs scaled down in the decoder) of every photo, over
    job.workers threads (`decode`) or over as many processes as cores writing into shared memory, the library's
    decoder processes (`decode-processes`; the clock starts once they are up, so their start-up is not in it).
    The pixels are dropped; no network runs."""
    from ..face.decoders import DecoderProcesses, default_processes, fit_of_family
    from ..face.detect import _card
    from ..face.families import family_of
    from ..face.images import load_photo_shrunk
    from ..face.library import default_workers

    fit = fit_of_family(family_of(_card(job.detector_model).path))
    photos = job.photos
    threads = job.workers if job.workers is not None else default_workers("gpu")  # as the GPU's library run
    count = default_processes() if processes else max(1, threads)
    row = PhotoRow("decode-processes" if processes else "decode", workers=0 if processes else count,
                   processes=count if processes else 1, floor=True)
    row.device = f"cpu ({count} decoder processes, shared memory)" if processes else f"cpu ({count} threads)"
    ring = DecoderProcesses(count, fit, slots=2 * count + 2) if processes else None
    failed = [0]

    def one(path):
        t0 = time.perf_counter()
        try:
            if ring is not None:
                pixels, _, slot = ring.decode(path)
                ring.release(slot)
            else:
                pixels, _ = load_photo_shrunk(path, fit)
            del pixels
        except FacerunError:
            failed[0] += 1
        return time.perf_counter() - t0

    pool = ThreadPoolExecutor(count, thread_name_prefix="facerun-decode-row")
    start = time.perf_counter()
    try:
        seconds = 0.0
        for i, s in enumerate(pool.map(one, photos)):
            seconds += s
            row.faces_by_photo.append([])
            if i == 0:
                row.first_photo_ms = (time.perf_counter() - start) * 1000.0
        wall = max(time.perf_counter() - start, 1e-9)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if ring is not None:
            ring.close()
    row.photos = len(photos)
    row.photos_per_s, row.faces_per_s = row.photos / wall, 0.0
    row.seconds = {**dict.fromkeys(STAGE_COLUMNS, 0.0), "decode": round(seconds, 4), "total": round(wall, 4)}
    what = "waiting on the processes" if processes else "decoding"
    row.bottleneck = (f"{count} {'processes' if processes else 'threads'}: busy {what} {seconds / wall / count:.0%} "
                      f"of their time" + (f"; {failed[0]} photos did not decode" if failed[0] else ""))
    return row


def opencv_row(photos: list, detector_model, threads: int = 1) -> PhotoRow:
    """cv2.FaceDetectorYN over the same decoded photos, shrunk the same way (images.load_photo_shrunk, as facerun's
    detect-only library run decodes them: large JPEGs scaled down in the decoder), with the detector's default
    thresholds: one photo after another with OpenCV's own threads inside (`opencv`), or `threads` photos at once,
    each thread decoding and detecting with a FaceDetectorYN of its own (`opencv-threads`)."""
    row = PhotoRow("opencv" if threads <= 1 else "opencv-threads", workers=threads if threads > 1 else 0)
    try:
        from .opencv import import_cv2

        cv2 = import_cv2()
    except ImportError:
        row.skipped = "OpenCV is not installed (pip install opencv-python-headless)"
        return row
    from ..face import yunet
    from ..face.detect import DEFAULT_MAX_SIDE, _card
    from ..face.families import family_of
    from ..face.images import load_photo_shrunk

    model = _card(detector_model).path
    if not isinstance(family_of(model), yunet.YuNet):
        row.skipped = f"cv2.FaceDetectorYN runs YuNet models; {model.name} is another family"
        return row

    def create():
        return cv2.FaceDetectorYN.create(str(model), "", (320, 320), 0.6, 0.3, 5000)

    local = threading.local()  # each thread's own detector; this one's made here, before the clock starts
    try:
        local.yn = create()
    except cv2.error as e:
        row.skipped = f"OpenCV cannot load {model.name}: {str(e).strip().splitlines()[-1]}"
        return row
    row.device = f"cpu (OpenCV {cv2.__version__}, {cv2.getNumThreads()} threads" + (
        f", {threads} photos at once)" if threads > 1 else ")")

    def fit(width: int, height: int):
        return yunet.shrunk_size(width, height, DEFAULT_MAX_SIDE)

    def one(path):
        """(faces, decode s, detect s, padded size) of one photo, on this thread's own detector."""
        yn = getattr(local, "yn", None)
        if yn is None:
            yn = local.yn = create()
        t0 = time.perf_counter()
        try:
            small, (width, height) = load_photo_shrunk(path, fit)
        except FacerunError:
            return [], time.perf_counter() - t0, 0.0, None
        sx, sy = small.shape[1] / width, small.shape[0] / height
        bgr = np.ascontiguousarray(small[:, :, 2::-1])
        t1 = time.perf_counter()
        yn.setInputSize((bgr.shape[1], bgr.shape[0]))
        _, found = yn.detect(bgr)
        t2 = time.perf_counter()
        faces = []
        for r in (found if found is not None else []):
            box = (r[0] / sx, r[1] / sy, r[2] / sx, r[3] / sy)
            faces.append((float(r[14]), tuple(float(v) for v in box)))
        return faces, t1 - t0, t2 - t1, yunet.padded_size(*bgr.shape[:2])

    seconds = dict.fromkeys(STAGE_COLUMNS, 0.0)
    sizes = set()
    pool = ThreadPoolExecutor(threads, thread_name_prefix="facerun-opencv") if threads > 1 else None
    start = time.perf_counter()
    try:
        for faces, decode_s, detect_s, size in (pool.map(one, photos) if pool is not None else map(one, photos)):
            seconds["decode"] += decode_s
            seconds["detect"] += detect_s
            if size is not None:
                sizes.add(size)
            row.faces_by_photo.append(faces)
            if row.first_photo_ms is None:
                row.first_photo_ms = (time.perf_counter() - start) * 1000.0
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    wall = max(time.perf_counter() - start, 1e-9)
    row.photos, row.faces = len(photos), sum(len(f) for f in row.faces_by_photo)
    row.distinct_sizes = len(sizes)
    row.photos_per_s, row.faces_per_s = row.photos / wall, row.faces / wall
    row.seconds = {k: round(v, 4) for k, v in seconds.items()} | {"total": round(wall, 4)}
    if pool is None:
        row.bottleneck = bottleneck(seconds, wall, 1, True)
    else:
        share = {k: seconds[k] / wall / threads for k in ("decode", "detect")}
        row.bottleneck = (f"{threads} threads, each decoding and detecting: busy {sum(share.values()):.0%} of their "
                          f"time (decode {share['decode']:.0%}, detect {share['detect']:.0%})")
    return row


