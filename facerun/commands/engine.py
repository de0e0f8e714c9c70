"""`--engine ray` for `embed` and `index`: the options, and `embed`'s run into a Parquet folder. Ray itself is imported
only when the engine is asked for (facerun.face.ray_engine)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import FacerunError, InputError
from .common import Interrupted, err, error_line, finish, json_dumps, out, plural, progress_bar
from .options import actors_option, gpus_per_actor_option, processes_option
from .types import AUTO

ENGINES = ("local", "ray")


def engine_options(function):
    """--engine and the Ray options, shared by `embed` and `index`."""
    options = [
        click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                     help="local: this process (decoding on threads); ray: a Ray cluster (Ray Data: decoding on CPU "
                          "tasks, --actors actors holding the models). Needs pip install 'facerun[ray]'."),
        click.option("--ray-address", default=None, metavar="ADDR",
                     help="The Ray cluster to join (e.g. 10.0.0.1:6379 or ray://host:10001; `auto` finds a local "
                          "`ray start`). Default: start a local Ray instance on this machine's cores."),
        actors_option(),
        gpus_per_actor_option(),
        processes_option("(N, local engine): they detect, align and embed, each with its own Python, device queue, "
                         "models and check of the GPU (one process is bound by Python's GIL), --batch faces at a "
                         "time across its photos; results come in photo order, as with one. Each process takes a "
                         "second or more to start: this pays on libraries of thousands of photos, on 12 or more "
                         "cores."),
    ]
    for decorate in reversed(options):
        function = decorate(function)
    return function


def local_processes(engine: str, processes: int | str, device: str, photos: int | None = None) -> int | str:
    """--processes: a count, or AUTO where processes may pay (`photos` on `device`, None: not counted yet), else 1.
    A count above 1 is refused beside --engine ray (Ray has its own workers). The processes' fork server is started
    now, to load while this process loads its models."""
    if engine == "ray":
        if processes != AUTO and processes > 1:
            raise InputError("--processes applies to --engine local (Ray's are --actors)")
        return 1
    from ..face.processes import auto_count, available_cores, start_ahead

    if processes == AUTO:
        from .. import settings

        least = settings.get("FACERUN_PROCESSES_FROM")
        if auto_count(least if photos is None else photos, available_cores(), device != "cpu", least) == 1:
            return 1
    elif photos is not None:
        processes = min(processes, photos)
    start_ahead(2 if processes == AUTO else processes, device)
    return processes


def detector_device(processes: int | str, device: str) -> str:
    """Where this process loads its detector: on `device`, unless processes run every photo (then on the CPU, only
    to name and check it); while they start, this process runs photos too (FACERUN_PARENT_RUNS). With AUTO on
    `device`: where it runs says whether processes pay."""
    from ..face.processes import parent_runs

    return device if processes == AUTO or processes <= 1 or parent_runs() else "cpu"


def local_options(processes: int | str, detector, device: str, **options):
    """The library run's LibraryOptions for --engine local: this process's threads, or `processes` processes (AUTO:
    as many as pay, face.processes.auto_count) that each make the detector the one here names on `device`."""
    from ..face.library import LibraryOptions

    if processes != AUTO and processes <= 1:
        return LibraryOptions(**options)
    arguments = {"model": str(detector.model_path), "device": device, "for_alignment": True}
    if processes == AUTO:
        return LibraryOptions(engine="auto", detector_args=arguments, **options)
    return LibraryOptions(engine="processes", processes=processes, detector_args=arguments, **options)


def ray_settings(engine, ray_address, workers, gpus_per_worker, *, batch, all_faces, models):
    """The RaySettings of the options, or None for the local engine (which refuses the Ray-only options)."""
    if engine != "ray":
        given = [name for name, value in (("--ray-address", ray_address), ("--actors", workers),
                                           ("--gpus-per-actor", gpus_per_worker or None)) if value is not None]
        if given:
            raise InputError(f"{given[0]} applies to --engine ray")
        return None
    from ..face.ray_engine import RaySettings, require_ray
    from ..zoo import find

    require_ray()
    # --models DIR is this process's setting: the actors search it too (a path every node has, on a cluster)
    given = [str(folder) for folder, source in find.search_dirs_with_sources() if source == "--models"]
    models = {**models, "models_dir": given[0] if given else None}
    return RaySettings(address=ray_address, workers=workers, gpus_per_worker=float(gpus_per_worker), batch=batch,
                       all_faces=all_faces, models=models)


class RayTally:
    """What the rows of a Ray run say: photos, faces, photos without a face, unreadable ones, models, devices."""

    def __init__(self):
        self.photos = self.faces = self.faceless = 0
        self.failed: list[tuple[str, str]] = []
        self.models: set[str] = set()
        self.devices: set[str] = set()

    def add(self, table) -> int:
        """Count a table's rows; returns the photos it finished."""
        done = 0
        for row in table.select(["image", "faces", "face", "model", "error", "device"]).to_pylist():
            self.models.add(row["model"])
            self.devices.add(row["device"])
            if row["face"] is not None:
                self.faces += 1
                done += row["face"] == 0
                continue
            done += 1
            if row["error"] is not None:
                self.failed.append((row["image"], row["error"]))
            else:
                self.faceless += 1
        self.photos += done
        return done


def embed_on_ray(images, settings, out_path: Path | None, as_json: bool) -> None:
    """`facerun embed --engine ray`: the faces into the Parquet folder --out, a summary on stdout."""
    from ..face.face_rows import ParquetFolder, check_parquet_out
    from ..face.ray_engine import run_tables

    if out_path is None:
        raise InputError("--engine ray writes its rows to a Parquet folder: give --out x.parquet")
    check_parquet_out(out_path)
    tally, folder = RayTally(), None
    start = time.perf_counter()
    bar = progress_bar()
    task = None

    def on_total(total):
        nonlocal task
        task = bar.add_task("embedding", total=total)

    def summary() -> dict:
        seconds = time.perf_counter() - start
        return {"engine": "ray", "photos": tally.photos, "faces": tally.faces, "without_face": tally.faceless,
                "failed": [{"image": image, "error": error} for image, error in tally.failed],
                "seconds": round(seconds, 3), "photos_per_s": round(tally.photos / seconds, 3) if seconds else None,
                "model": ", ".join(sorted(tally.models)), "devices": sorted(tally.devices)}

    try:
        with bar:
            for table in run_tables(images, settings, on_total=on_total):
                if folder is None:
                    folder = ParquetFolder(out_path)
                folder.write(table)
                done = tally.add(table)
                if task is not None:
                    bar.advance(task, done)
    except (FacerunError, KeyboardInterrupt) as e:
        if folder is None:
            raise
        where = folder.abandon(str(e) or type(e).__name__, summary())
        if isinstance(e, KeyboardInterrupt):
            raise Interrupted(f"the rows so far are in {where}, marked incomplete") from None
        raise FacerunError(f"{e}; the rows so far are in {where}, marked incomplete") from None
    result = summary()
    written = folder.finish(result)
    for image, error in tally.failed:
        error_line(f"{error}" if error.startswith(image) else f"{image}: {error}")
    if as_json:
        click.echo(json_dumps({**result, "out": str(written), "complete": True}, indent=2))
    else:
        speed = f", {result['photos_per_s']:.2f} photos/s" if result["photos_per_s"] else ""
        out.print(f"{plural(tally.photos, 'photo')} ({tally.faceless} without a face, {len(tally.failed)} "
                  f"unreadable), {plural(tally.faces, 'face')} in {result['seconds']:.1f} s{speed}; "
                  f"model {result['model']}", markup=False)
        for device in result["devices"]:
            err.print(f"actors on: {device}", markup=False)
        out.print(f"wrote {written}", markup=False)
    if tally.failed:
        finish(False)
