"""`facerun index`: every face of every photo into a SQLite face database, brought up to date incrementally."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from .common import err, error_line, finish, json_dumps, progress_bar
from .embed import embedder_options, make_detector, make_embedder
from .engine import engine_options, local_processes, photo_faces_in_processes, ray_settings
from .types import FiniteRange


def embedder_for(db_model: str | None, model, device, input_size, mean, std, bgr, threshold=None):
    """The embedder asked for, else the one a database was built with, else the default one."""
    embedder = make_embedder(model if model is not None else db_model, device, input_size, mean, std, bgr,
                             threshold)
    if embedder.note:
        err.print(f"note: {embedder.note}", markup=False)
    return embedder


@click.command("index")
@click.argument("photos", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The face database (SQLite), made if missing.")
@embedder_options
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True,
              help="Faces per network call (on the GPU: one submission per batch).")
@click.option("--commit-every", type=click.IntRange(min=1), default=16, show_default=True,
              help="Photos per transaction: a killed run loses at most these, never part of a photo.")
@click.option("--wait", type=FiniteRange(min=0), default=0.0, show_default=True,
              help="Seconds to wait for another process writing the same database before refusing.")
@click.option("--keep-missing", is_flag=True, help="Keep photos that are gone from disk (default: drop them).")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"added","changed","unchanged","removed","failed","faces","seconds","photos_per_s",'
                   '"db","model","photos_total","faces_total"} (with --engine ray also "engine","devices").')
@engine_options
def command(photos, db_path, model, device, detector_model, input_size, mean, std, bgr, batch, commit_every, wait,
            keep_missing, as_json, engine, ray_address, workers, gpus_per_worker, processes):
    """Index every face of the PHOTOS (files, or folders searched recursively) into the database --db.

    A re-run skips unchanged photos (same size and modification time, or same sha256 when those differ),
    re-indexes changed ones and drops photos that are gone from the folders given, and says how many of each.
    Writes go in one transaction per --commit-every photos, so an interrupted run (even kill -9) leaves every photo
    fully indexed or not at all; run it again to finish. One embedder per database: the first run's --model
    (default: the first of sface-2021dec, auraface-v1, mobilefacenet found) is used by later runs and a different
    one is refused. Unreadable files are reported, the rest go on, and the exit status is 1.

    With --engine ray the photos are detected and embedded on a Ray cluster (or a local Ray instance) and their rows
    merge into the database here, as a plain run's would.
    """
    from ..people.index import FaceIndex

    processes = local_processes(engine, processes)
    settings = ray_settings(engine, ray_address, workers, gpus_per_worker, batch=batch, all_faces=True, models={})
    with FaceIndex(db_path) as index:
        # with Ray the models here only name and check what the actors load: they stay on the CPU
        here = device if settings is None else "cpu"
        embedder = embedder_for(index.stored_model(), model, here, input_size, mean, std, bgr)
        index.check_embedder(embedder)  # before the detector loads: a wrong model fails at once
        detector = make_detector(detector_model, here if processes == 1 else "cpu")  # processes make their own
        photo_faces, devices = None, set()
        if processes > 1:
            photo_faces = photo_faces_in_processes(processes, detector, device)
        if settings is not None:
            from ..face.ray_engine import iter_photo_faces_ray

            settings.models = {**settings.models, "model": model if model is not None else index.stored_model(),
                               "detector": detector_model, "device": device, "input_size": input_size,
                               "mean": mean, "std": std, "bgr": bgr, "sha256": getattr(embedder.net, "sha256", None)}

            def photo_faces(paths, detector, embedder, **_):
                return iter_photo_faces_ray(paths, settings, devices)
        bar = progress_bar() if err.is_terminal else None
        task = None

        def on_plan(todo, skipped):
            nonlocal task
            if bar is not None and todo:
                task = bar.add_task("indexing", total=todo)

        def on_photo(path, faces):
            if bar is not None and task is not None:
                bar.advance(task)

        with bar if bar is not None else contextlib.nullcontext():
            report = index.update(photos, embedder=embedder, detector=detector, batch=batch,
                                  commit_every=commit_every, wait=wait, prune=not keep_missing,
                                  progress=on_photo, on_plan=on_plan, photo_faces=photo_faces)
        totals = index.counts()
    for _, error in report.failed:
        error_line(error)
    if as_json:
        extra = {"engine": "ray", "devices": sorted(devices)} if settings is not None else {}
        click.echo(json_dumps({**report.to_dict(), "db": str(db_path), "model": embedder.name,
                               "photos_total": totals["photos"], "faces_total": totals["faces"], **extra}, indent=2))
    else:
        speed = f", {report.indexed / report.seconds:.2f} photos/s" if report.indexed and report.seconds else ""
        click.echo(f"{db_path}: {report.added} added, {report.changed} changed, {report.unchanged} unchanged, "
                   f"{report.removed} removed, {len(report.failed)} unreadable; {report.faces} faces written in "
                   f"{report.seconds:.1f} s{speed}")
        photos = f"{totals['photos']} photo{'' if totals['photos'] == 1 else 's'}"
        on = embedder.device if settings is None else "Ray actors on " + "; ".join(sorted(devices) or ["-"])
        click.echo(f"{db_path}: {photos}, {totals['faces']} faces ({embedder.name}, {embedder.dim}-d, {on})")
    if report.failed:
        finish(False)
