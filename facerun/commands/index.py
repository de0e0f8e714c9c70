"""`facerun index`: every face of every photo into a SQLite face database, brought up to date incrementally."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

import click

from ..people.index import LOST_REFUSE_MIN
from .common import err, error_line, finish, json_dumps, plural, progress_bar
from .embed import embedder_options, make_detector, make_embedder
from .engine import detector_device, engine_options, local_options, local_processes, ray_settings
from .options import batch_option, json_option
from .types import FiniteRange


def embedder_for(db_model: str | None, model, device, input_size, mean, std, bgr, threshold=None):
    """The embedder asked for, else the one a database was built with, else the default one."""
    embedder = make_embedder(model if model is not None else db_model, device, input_size, mean, std, bgr,
                             threshold)
    if embedder.note:
        err.print(f"note: {embedder.note}", markup=False)
    return embedder


@click.command("index")
@click.argument("photos", nargs=-1, type=click.Path(path_type=Path))
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The face database (SQLite), made if missing.")
@embedder_options
@batch_option(16, "faces (on the GPU: one submission per batch).")
@click.option("--commit-every", type=click.IntRange(min=1), default=16, show_default=True,
              help="Photos per transaction: a killed run loses at most these, never part of a photo.")
@click.option("--wait", type=FiniteRange(min=0), default=0.0, show_default=True,
              help="Seconds to wait for another process writing the same database before refusing.")
@click.option("--prune", is_flag=True,
              help="Delete the photos marked missing under PHOTOS (without PHOTOS: all of them) and their faces, "
                   "and say how many. Names given with `cluster --name` stay.")
@click.option("--allow-missing", is_flag=True,
              help="Go on when a folder is empty, unreadable or has lost more than half of its indexed photos "
                   f"(at least {LOST_REFUSE_MIN}); refused by default, since an unmounted drive looks like that. "
                   "Its photos not found are then marked missing (deleted with --prune).")
@click.option("--list-missing", is_flag=True,
              help="List the photos marked missing (under PHOTOS when given) instead of indexing; with --json "
                   '{"db", "missing": [{"image", "missing_since", "faces", "sha256"}]}.')
@click.option("--skip-small", is_flag=True,
              help="Do not store faces below --min-face / --min-score (cluster's and identify's quality gate, at "
                   "its defaults: 32 px, score 0.65). By default they are stored and go to the unsorted group.")
@click.option("--keep-missing", is_flag=True, hidden=True,
              help="Kept for old scripts: photos not found are always kept (marked missing) unless --prune.")
@json_option("instead of the summary: "
             '{"added","changed","unchanged","missing","back","removed","removed_faces","failed",'
             '"faces","seconds","photos_per_s","links_followed","skipped","skipped_paths","db","model",'
             '"photos_total","faces_total","photos_missing","faces_missing"} (with --engine ray also '
             '"engine","devices").')
@engine_options
def command(photos, db_path, model, device, detector_model, input_size, mean, std, bgr, batch, commit_every, wait,
            prune, allow_missing, list_missing, skip_small, keep_missing, as_json, engine, ray_address, workers,
            gpus_per_worker, processes):
    """Index every face of the PHOTOS (files, or folders searched recursively) into the database --db.

    A re-run skips unchanged photos (same size and modification time, or same sha256 when those differ),
    re-indexes changed ones, and says how many of each. Photos no longer found under the folders given are marked
    missing, not deleted: kept with their faces, left out of search, identify, cluster and the counts, listed by
    --list-missing, and back as they were (same faces, no re-detection) when the file reappears unchanged. --prune
    deletes them. A folder that is empty, unreadable, or lost most of its indexed photos since the last run is
    refused (exit 1, nothing changed) unless --allow-missing: a drive or share that is not mounted looks like that.

    Symlinks: below a folder, links to files and to folders are followed; the real tree is walked first, so a
    photo reached both ways is indexed once, at its real path, and each folder once, which stops link loops. A photo
    keeps the path it was found at. Link loops, broken links and unreadable folders are skipped and counted in the
    summary; the photos indexed under an unreadable folder are left as they are.

    Writes go in one transaction per --commit-every photos, so an interrupted run (even kill -9) leaves every photo
    fully indexed or not at all; run it again to finish. One embedder per database: the first run's --embedder
    (default: the first of sface-2021dec, auraface-v1, mobilefacenet found) is used by later runs and a different
    one is refused. Unreadable files are reported, the rest go on, and the exit status is 1.

    With --engine ray the photos are detected and embedded on a Ray cluster (or a local Ray instance) and their rows
    merge into the database here, as a plain run's would.
    """
    from ..face.library import LibraryStats
    from ..people.index import FaceIndex
    from ..people.quality import DEFAULT_GATE
    from ..people.storage import removed_if_new, reported

    if keep_missing and prune:
        raise click.UsageError("--keep-missing and --prune do not go together")
    if list_missing:
        return _list_missing(db_path, photos, as_json)
    if not photos:
        if not prune:
            raise click.UsageError("give the PHOTOS to index (or --prune, or --list-missing, alone)")
        return _prune_all(db_path, wait, as_json)

    processes = local_processes(engine, processes, device)
    settings = ray_settings(engine, ray_address, workers, gpus_per_worker, batch=batch, all_faces=True, models={})
    # a full disk is one line saying what is kept; a first run that fails leaves no database file behind
    with removed_if_new(db_path), reported(db_path, "index"), FaceIndex(db_path) as index:
        # with Ray the models here only name and check what the actors load: they stay on the CPU
        here = device if settings is None else "cpu"
        embedder = embedder_for(index.stored_model(), model, here, input_size, mean, std, bgr)
        index.check_embedder(embedder)  # before the detector loads: a wrong model fails at once
        detector = make_detector(detector_model, here if settings is not None else detector_device(processes, here))
        options = local_options(processes, detector, device, batch=batch)
        if settings is not None:
            settings.models = {**settings.models, "model": model if model is not None else index.stored_model(),
                               "detector": detector_model, "device": device, "input_size": input_size,
                               "mean": mean, "std": std, "bgr": bgr, "sha256": getattr(embedder.net, "sha256", None)}
            options = replace(options, engine="ray", ray=settings)
        stats = LibraryStats()
        devices = stats.devices  # where the Ray actors ran
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
            report = index.update(photos, embedder=embedder, detector=detector, options=options,
                                  commit_every=commit_every, wait=wait, prune=prune,
                                  allow_missing=allow_missing,
                                  progress=on_photo, on_plan=on_plan, stats=stats,
                                  keep_face=DEFAULT_GATE.keeps if skip_small else None)
        totals = index.counts()
    for _, error in report.failed:
        error_line(error)
    for path, reason in report.skipped:
        err.print(f"note: skipped {path} ({SKIP_WORDS[reason][0]})", markup=False)
    for note in index.notes:
        err.print(f"note: {note}", markup=False)
    if as_json:
        extra = ({"engine": "ray", "devices": sorted(devices)} if settings is not None
                 else {"processes": stats.processes})
        click.echo(json_dumps({**report.to_dict(), "db": str(db_path), "model": embedder.name,
                               "photos_total": totals["photos"], "faces_total": totals["faces"],
                               "photos_missing": totals["missing_photos"], "faces_missing": totals["missing_faces"],
                               **extra}, indent=2))
    else:
        _print_summary(db_path, report, totals, embedder, settings, devices, stats.processes)
    if report.failed:
        finish(False)


# reason -> (one, many) as the summary says it
SKIP_WORDS = {"link_loops": ("link loop", "link loops"), "duplicate_links": ("link to a photo or folder already "
              "listed", "links to photos or folders already listed"), "broken_links": ("broken link", "broken links"),
              "unreadable_folders": ("unreadable folder", "unreadable folders")}


def _print_summary(db_path, report, totals, embedder, settings, devices, processes: int) -> None:
    speed = f", {report.indexed / report.seconds:.2f} photos/s" if report.indexed and report.seconds else ""
    speed += f" over {processes} processes" if processes > 1 else ""
    news = "".join(f", {n} {what}" for n, what in ((report.missing, "now missing"), (report.back, "back")) if n)
    click.echo(f"{db_path}: {report.added} added, {report.changed} changed, {report.unchanged} unchanged, "
               f"{report.removed} removed, {len(report.failed)} unreadable{news}; {plural(report.faces, 'face')} "
               f"written in {report.seconds:.1f} s{speed}")
    if report.removed:
        click.echo(f"{db_path}: pruned {plural(report.removed, 'missing photo')} and "
                   f"{plural(report.removed_faces, 'face')}; names given to people stay")
    skipped = [plural(n, *SKIP_WORDS[reason]) for reason, n in report.skipped_counts().items() if n]
    if report.links_followed or skipped:
        click.echo(f"{db_path}: followed {plural(report.links_followed, 'link')}"
                   + (f"; skipped {', '.join(skipped)}" if skipped else ""))
    photos = plural(totals["photos"], "photo")
    on = embedder.device if settings is None else "Ray actors on " + "; ".join(sorted(devices) or ["-"])
    click.echo(f"{db_path}: {photos}, {totals['faces']} faces ({embedder.name}, {embedder.dim}-d, {on})")
    if totals["missing_photos"]:
        click.echo(f"{db_path}: {plural(totals['missing_photos'], 'photo')} missing, "
                   f"{plural(totals['missing_faces'], 'face')} kept, left out of results (--list-missing lists "
                   f"them, --prune deletes them)")


def _list_missing(db_path, photos, as_json) -> None:
    from ..people.index import FaceIndex

    with FaceIndex(db_path, create=False) as index:
        rows = index.missing_photos(photos or None)
    if as_json:
        click.echo(json_dumps({"db": str(db_path), "missing": rows}, indent=2))
        return
    for row in rows:
        click.echo(f"{row['image']}\tmissing since {row['missing_since']}\t{plural(row['faces'], 'face')}")
    err.print(f"{db_path}: {plural(len(rows), 'photo')} missing, {plural(sum(r['faces'] for r in rows), 'face')}",
              markup=False)


def _prune_all(db_path, wait, as_json) -> None:
    from ..people.index import FaceIndex

    with FaceIndex(db_path, create=False) as index:
        photos, faces = index.prune(wait=wait)
    if as_json:
        click.echo(json_dumps({"db": str(db_path), "removed": photos, "removed_faces": faces}, indent=2))
    else:
        click.echo(f"{db_path}: pruned {plural(photos, 'missing photo')} and {plural(faces, 'face')}; names "
                   f"given to people stay")
