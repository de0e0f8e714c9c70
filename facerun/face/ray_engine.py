"""The library run on Ray Data: photos decoded by CPU tasks, faces detected, aligned and embedded by actors that each
hold a loaded detector and embedder, rows streamed back to the caller (a Parquet folder, or the face index).

Imported only for `--engine ray`. Each actor picks its own wgpu adapter from the GPU Ray gives it (Vulkan ignores
CUDA_VISIBLE_DEVICES, so the id becomes FACERUN_GPU_ADAPTER=#N) and falls back to the CPU path when no GPU is
usable, saying why in the `device` column. A photo that cannot be read is a row with `error`; an actor that dies is
restarted and its batch run again by Ray.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .. import fsnames
from ..errors import FacerunError, ImageError, InputError

# half a core per decoding task: reads wait on storage, and resources unlike the actors' keep Ray from fusing the
# decoding into the actors (it stays its own stage, scaled on the CPUs apart from the model actors)
DECODE_CPUS = 0.5
PHOTOS_PER_CALL = 16  # photos handed to an actor at once; faces are embedded `batch` at a time across them
log = logging.getLogger("facerun.ray")


def require_ray():
    """The ray module, or one line saying how to get it."""
    try:
        import pyarrow  # noqa: F401
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise FacerunError("--engine ray needs Ray Data and pyarrow: pip install 'facerun[ray]'") from None
    return ray


@dataclass
class RaySettings:
    """How to run: where Ray is, how many actors and GPUs, and what each actor loads (the CLI's model options)."""

    address: str | None = None  # None: start a local Ray instance
    workers: int | None = None  # actors holding a model; None: one per GPU share, else 1
    gpus_per_worker: float = 0.0
    batch: int = 16
    all_faces: bool = True
    models: dict = field(default_factory=dict)  # model, detector, device, input_size, mean, std, bgr, sha256
    limits: dict = field(default_factory=dict)  # the run's size limits, for every worker (see `run_limits`)
    num_cpus: int | None = None  # of a local instance; None: all cores


# ------------------------------------------------------------------------------------------------ start


def start(settings: RaySettings):
    """Connect to the cluster (or start a local instance) quietly; returns whether this call started it."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    # errors only: Ray's start-up notes (token authentication, dashboard) are not this command's output
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if settings.address:
            ray.init(address=settings.address, **options)
        else:
            # "local": a new instance of our own, even when a `ray start` runs here (that one is --ray-address auto)
            ray.init(address="local", num_cpus=settings.num_cpus or os.cpu_count() or 1, **options)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = settings.address or "a local instance"
        raise FacerunError(f"cannot start Ray on {where}: {_first_line(e)}") from None
    return True


def _quiet_data():
    """Ray Data's own progress bars and execution log off: the caller shows progress on stderr."""
    from ray.data import DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = False
    if hasattr(context, "print_on_execution_start"):
        context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


def _plan_workers(ray, settings: RaySettings) -> int:
    """The actor count, checked against the cluster: GPU actors need the GPUs, and a core must stay for decoding."""
    resources = ray.cluster_resources()
    cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    workers = settings.workers
    if settings.gpus_per_worker > 0:
        if gpus < settings.gpus_per_worker:
            raise InputError(f"--gpus-per-actor {settings.gpus_per_worker:g}: the Ray cluster has {gpus:g} GPUs")
        if workers is None:
            workers = max(1, int(gpus / settings.gpus_per_worker + 1e-9))
        elif workers * settings.gpus_per_worker > gpus + 1e-9:
            raise InputError(f"--actors {workers} x --gpus-per-actor {settings.gpus_per_worker:g} needs "
                             f"{workers * settings.gpus_per_worker:g} GPUs; the Ray cluster has {gpus:g}")
    workers = 1 if workers is None else workers
    if workers + DECODE_CPUS > cpus:
        raise InputError(f"--actors {workers}: each actor takes a CPU and decoding needs some more; the Ray cluster "
                         f"has {cpus:g}")
    return workers


# ------------------------------------------------------------------------------------------------ decoding


def run_limits() -> dict:
    """This process's size limits (--max-pixels, --max-tensor-mb or the variables), to apply in every worker."""
    from .. import limits

    return {"FACERUN_MAX_PIXELS": limits.max_pixels(), "FACERUN_MAX_TENSOR_MB": limits.max_tensor_bytes() / (1 << 20)}


def _apply_limits(values: dict) -> None:
    from .. import limits

    for name, value in values.items():
        limits.set_limit(name, value)


def _decoded_row(image: str, rgb: np.ndarray | None, error: str | None) -> dict:
    # "" for no error, never None: a block whose photos all decoded would get a null column, which numpy batches
    # turn into NaN
    if rgb is None:
        return {"image": image, "pixels": b"", "height": 0, "width": 0, "error": error or "unreadable"}
    return {"image": image, "pixels": rgb.tobytes(), "height": int(rgb.shape[0]), "width": int(rgb.shape[1]),
            "error": ""}


def decoded_photos(batch: dict) -> Iterator[tuple]:
    """A numpy batch of decoded rows as (image, rgb, error) for `iter_decoded_faces`: an error is a non-empty
    string, whatever type an all-empty column took on the way."""
    for image, pixels, height, width, error in zip(batch["image"], batch["pixels"], batch["height"],
                                                   batch["width"], batch["error"]):
        if isinstance(error, str) and error:
            yield str(image), None, error
        else:
            yield str(image), np.frombuffer(pixels, np.uint8).reshape(int(height), int(width), 3), None


def decode_path(row: dict, limits: dict) -> dict:
    """A CPU task: one local photo decoded exactly as the single-process run decodes it, or its error."""
    from .images import load_image

    _apply_limits(limits)
    try:
        return _decoded_row(row["image"], load_image(row["image"]), None)
    except (ImageError, InputError) as e:
        return _decoded_row(row["image"], None, str(e))


def decode_bytes(row: dict, limits: dict) -> dict:
    """A CPU task: one photo read from object storage (read_binary_files' bytes and path)."""
    from .images import decode_image

    _apply_limits(limits)
    image = row["path"]
    try:
        return _decoded_row(image, decode_image(io.BytesIO(row["bytes"]), image), None)
    except (ImageError, InputError) as e:
        return _decoded_row(image, None, str(e))


def is_uri(source) -> bool:
    return "://" in str(source)


def dataset(sources: Iterable, ray, limits: dict) -> tuple[object, int | None]:
    """The decoded photos as a Ray Dataset, and their count when known (local files are listed here; URIs are
    listed by Ray's readers). Local paths keep `facerun embed`'s rules: folders searched recursively."""
    from .images import IMAGE_EXTENSIONS, iter_images

    sources = list(sources)
    uris = [str(s) for s in sources if is_uri(s)]
    local = [str(p) for p in iter_images([s for s in sources if not is_uri(s)])]
    odd = next((p for p in local if not fsnames.is_utf8(p)), None)
    if odd is not None:  # refused before Ray starts: Arrow, which carries the rows, holds UTF-8 text only
        raise InputError(f"{fsnames.shown(odd)}: a file name that is not UTF-8, which the Ray engine cannot carry; "
                         "rename it, or run without --engine ray (the local engine indexes it)")
    parts, count = [], len(local)
    if local:
        items = [{"image": path} for path in local]
        blocks = max(1, min(len(items), len(items) // 4 or 1, 1000))  # small blocks: decoding streams into actors
        parts.append(ray.data.from_items(items, override_num_blocks=blocks).map(decode_path, num_cpus=DECODE_CPUS,
                                                                                 fn_kwargs={"limits": limits}))
    if uris:
        extensions = sorted(e.lstrip(".") for e in IMAGE_EXTENSIONS)
        read = ray.data.read_binary_files(uris, include_paths=True, file_extensions=extensions)
        parts.append(read.map(decode_bytes, num_cpus=DECODE_CPUS, fn_kwargs={"limits": limits}))
        count = None
    if not parts:
        raise InputError(f"no images found in {', '.join(str(s) for s in sources)}")
    data = parts[0] if len(parts) == 1 else parts[0].union(*parts[1:])
    return data, count


# ------------------------------------------------------------------------------------------------ the actors


def adapter_for_gpus(gpu_ids: list, environ=None) -> tuple[str | None, str]:
    """The FACERUN_GPU_ADAPTER an actor sets for the GPUs Ray gave it (None: leave it), and a note saying so.
    A value the user set wins; a GPU id that is not a number (a UUID) cannot be numbered."""
    from .. import settings  # here, not at the top: `start` takes a RaySettings of that name

    if not gpu_ids:
        return None, ""
    wanted = settings.get("FACERUN_GPU_ADAPTER", environ)  # environ: the process's own when None
    if wanted:
        return None, f"Ray GPU {gpu_ids[0]}, FACERUN_GPU_ADAPTER={wanted} as set"
    try:
        number = int(gpu_ids[0])
    except (TypeError, ValueError):
        return None, f"Ray GPU {gpu_ids[0]} is not numbered; the default adapter"
    return f"#{number}", f"Ray GPU {number}"


class FaceActor:
    """One Ray actor: a detector and an embedder loaded once, photos in, face rows out."""

    def __init__(self, models: dict, batch: int, all_faces: bool, limits: dict):
        import ray

        from .. import settings
        from ..zoo import find
        from .detect import Detector
        from .embed import Embedder

        find.use_models_dir(models.get("models_dir"))
        _apply_limits(limits)
        adapter, note = adapter_for_gpus(list(ray.get_gpu_ids()))
        if adapter is not None:
            settings.pass_on({"FACERUN_GPU_ADAPTER": adapter})  # before the first GPU use: the device is made lazily
        device = models.get("device", "auto")
        # as the commands' make_embedder and make_detector load them
        self.embedder = Embedder(model=models.get("model"), device=device, input_size=models.get("input_size"),
                                 mean=models.get("mean"), std=models.get("std"), bgr=models.get("bgr"))
        self.detector = Detector(model=models.get("detector"), device=device, for_alignment=True)
        expected, sha = models.get("sha256"), getattr(self.embedder.net, "sha256", None)
        if expected and sha != expected:
            raise FacerunError(f"the Ray actor's {self.embedder.name} is another file than the driver's "
                               f"(sha256 {str(sha)[:12]} vs {expected[:12]}): give every node the same models")
        self.device = self._describe(device, note)
        self.batch, self.all_faces, self.models = batch, all_faces, models
        log.info("facerun actor on %s", self.device)

    def _describe(self, asked: str, note: str) -> str:
        on = self.embedder.device
        if self.detector.device != on:
            on += f" (detector: {self.detector.device})"
        if on == "cpu" and asked != "cpu":
            from ..gpu.device import adapter_reason

            on = f"cpu ({adapter_reason()})"
        return f"{on}; {note}" if note else on

    def _die_if_told(self) -> None:
        """Tests: models["die_once"] names a file; the first call anywhere to find it missing makes it and kills
        its own process, as a crash would (Ray must restart the actor and run the batch again)."""
        marker = self.models.get("die_once")
        if marker:
            try:
                with open(marker, "x"):
                    pass
            except FileExistsError:
                return
            os._exit(1)

    def __call__(self, batch: dict) -> object:
        from .face_rows import photo_rows, rows_table
        from .library import iter_decoded_faces

        self._die_if_told()
        rows = []
        photos = decoded_photos(batch)
        for photo in iter_decoded_faces(photos, self.detector, self.embedder, self.batch, self.all_faces):
            rows.extend(photo_rows(photo, str(photo.path), self.embedder.name, self.device))
        return rows_table(rows)


def _bound_actor(models: dict, batch: int, all_faces: bool, limits: dict) -> type:
    """FaceActor with its arguments in the class: Ray ships the class with the task, so a restarted actor does not
    depend on constructor arguments kept in the object store."""

    class BoundFaceActor(FaceActor):
        def __init__(self):
            super().__init__(models, batch, all_faces, limits)

    return BoundFaceActor


# ------------------------------------------------------------------------------------------------ the run


def run_tables(sources: Iterable, settings: RaySettings, on_total: Callable[[int | None], None] | None = None
               ) -> Iterator[object]:
    """Run the library on Ray; yield pyarrow Tables of face rows (in no particular order) as actors finish them.
    A local instance started here is shut down at the end."""
    ray = require_ray()
    started = start(settings)
    try:
        _quiet_data()
        workers = _plan_workers(ray, settings)
        limits = settings.limits or run_limits()
        data, total = dataset(sources, ray, limits)
        if on_total is not None:
            on_total(total)
        faces = data.map_batches(
            _bound_actor(settings.models, settings.batch, settings.all_faces, limits), batch_size=PHOTOS_PER_CALL,
            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1,
            num_gpus=settings.gpus_per_worker if settings.gpus_per_worker > 0 else None)
        try:
            yield from faces.iter_batches(batch_size=None, batch_format="pyarrow")
        except FacerunError:
            raise
        except Exception as e:  # Ray wraps what the actors raised: say it in one line
            raise FacerunError(f"the Ray run failed: {_cause(e)}") from None
    finally:
        if started:
            ray.shutdown()


def iter_photo_faces_ray(paths: Iterable, settings: RaySettings, devices: set | None = None) -> Iterator:
    """`PhotoFaces` (as `iter_photo_faces` gives them, in no particular order) from a Ray run over `paths`;
    `devices` collects what the actors ran on."""
    from .face_rows import PhotoCollector

    collector = PhotoCollector()
    for table in run_tables(paths, settings):
        if devices is not None:
            devices.update(table.column("device").to_pylist())
        yield from collector.add(table)


def engine(paths: Iterable, detector, embedder, options, stats) -> Iterator:
    """The Ray engine (face/engines.py): the actors load what options.ray (a RaySettings) names, so the detector
    and embedder given here only named and checked them; options' batch and all_faces are the run's. PhotoFaces in
    no particular order; where the actors ran goes into stats.devices."""
    from dataclasses import replace

    if not isinstance(options.ray, RaySettings):
        raise InputError("the Ray engine runs what LibraryOptions.ray (a RaySettings) names; none was given")
    settings = replace(options.ray, batch=options.batch, all_faces=options.all_faces)
    return iter_photo_faces_ray(paths, settings, stats.devices)


def _cause(error: Exception) -> str:
    """The first line of what really failed, under Ray's wrappers."""
    seen = error
    for _ in range(8):
        inner = getattr(seen, "cause", None) or seen.__cause__
        if inner is None or inner is seen:
            break
        seen = inner
    if isinstance(seen, FacerunError):
        return _first_line(seen)
    return f"{type(seen).__name__}: {_first_line(seen)}"


def _first_line(error: Exception) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(error).__name__


__all__ = ["FaceActor", "RaySettings", "adapter_for_gpus", "engine", "iter_photo_faces_ray", "require_ray",
           "run_tables"]
