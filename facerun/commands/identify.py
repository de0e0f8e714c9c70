"""`facerun identify`: name every face in photos from a gallery of known people."""

from __future__ import annotations

import contextlib
import csv
import sys
from pathlib import Path

import click
from rich.table import Table

from ..errors import InputError
from ..fsnames import shown
from .cluster import gate_options
from .common import err, error_line, finish, fmt_box, json_dumps, out, path_column, plural, progress_bar, short_paths
from .embed import embedder_options, make_detector
from .index import embedder_for
from .options import batch_option, csv_option, json_option
from .types import FiniteRange


def _calibrated() -> str:
    """The known embedders' thresholds and the false-match rates they were calibrated at, for --help."""
    from ..zoo.known import KNOWN

    rated = [f"{m.name} {m.threshold:g} (false-match rate {100 * m.false_match_rate:g}% on impostor pairs of the "
             "shared identity photos)" for m in KNOWN if m.kind == "embedder" and m.false_match_rate is not None]
    return "; ".join(rated) or "see `facerun compare --help`"


@click.command("identify")
@click.argument("photos", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--known", "known_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Known people: one folder per person (known/alice/*.jpg), or photos named after the person "
                   "(known/alice.jpg, known/alice_2.jpg).")
@click.option("--known-db", type=click.Path(dir_okay=False, path_type=Path),
              help="Keep the known gallery's embeddings in this face database: later runs embed only new or "
                   "changed known photos; without --known, the gallery is used as stored. Any face database made "
                   "by `facerun index` serves: its people (clusters named with `cluster --name`) are the known "
                   "people, with --known's photos added to them.")
@embedder_options
@click.option("--threshold", type=FiniteRange(-1, 1), default=None,
              help="The cosine threshold: below it a face is 'unknown'. Default: the model's calibrated one, "
                   f"{_calibrated()}.")
@gate_options("they are called unknown")
@click.option("--draw", "draw_to", type=click.Path(file_okay=False, path_type=Path), metavar="OUT",
              help="Write annotated copies into the folder OUT: each photo with its faces' boxes and names (PNG).")
@batch_option(16, "faces.")
@json_option('instead of tables: [{"image","box","name","cosine"}], one per face.')
@csv_option("instead of tables: image,name,cosine,x,y,w,h, one row per face.")
def command(photos, known_dir, known_db, model, device, detector_model, input_size, mean, std, bgr, threshold,
            min_face, min_score, draw_to, batch, as_json, as_csv):
    """Name every face in the PHOTOS (files or folders) after the best-matching known person, or 'unknown'.

    Each known photo contributes its largest face; a face's score for a person is its best cosine over that
    person's known faces. Faces below the quality gate (--min-face, --min-score) are unknown. Unreadable photos
    are reported, the rest go on, and the exit status is 1.
    """
    from ..face.images import iter_images
    from ..io import check_output_folder
    from ..people.identify import build_gallery, identify_photos
    from ..people.quality import Gate
    from ..people.storage import reported

    if as_json and as_csv:
        raise InputError("choose one of --json and --csv")
    if known_dir is None and known_db is None:
        raise InputError("give the known people with --known DIR (and/or --known-db FILE)")
    if known_db is not None and known_dir is None and not known_db.is_file():
        raise InputError(f"--known-db {known_db}: no such file; build it with --known DIR --known-db {known_db}")
    gate = Gate(min_face, min_score)
    draw_dir = check_output_folder(draw_to, "--draw") if draw_to is not None else None  # before any work
    paths = iter_images(photos)
    if not paths:
        raise InputError(f"no images found in {', '.join(str(p) for p in photos)}")
    db_model = None
    if known_db is not None and known_db.is_file():
        from ..people.index import FaceIndex

        with FaceIndex(known_db, create=False) as index:
            db_model = index.stored_model()
    embedder = embedder_for(db_model, model, device, input_size, mean, std, bgr, threshold)
    limit = embedder.threshold
    if limit is None:
        raise InputError(f"no threshold known for {embedder.name}; pass --threshold")
    detector = make_detector(detector_model, device)

    failed: list[str] = []
    bar = progress_bar() if err.is_terminal else None
    with bar if bar is not None else contextlib.nullcontext():
        with reported(known_db, "index") if known_db is not None else contextlib.nullcontext():
            gallery, skipped = build_gallery(embedder, detector, known_dir=known_dir, known_db=known_db,
                                             batch=batch)
        for _, reason in skipped:
            err.print(f"note: known photo skipped: {reason}", markup=False)
        for note in gallery.notes:
            err.print(f"note: {note}", markup=False)
        task = bar.add_task("identifying", total=len(paths)) if bar is not None else None

        def advance(result):
            if bar is not None:
                bar.advance(task)

        def on_error(message):
            failed.append(message)
            error_line(message, bar.console if bar is not None else err)

        used: set[str] = set()

        def draw(result, identified):
            _draw(draw_dir, result, [f"{r.name} {r.cosine:.2f}" for r in identified], used)

        rows = list(identify_photos(gallery, paths, embedder, detector, limit, batch=batch, progress=advance,
                                    on_error=on_error, gate=gate, on_photo=draw if draw_dir is not None else None))
    err.print(f"{plural(len(gallery.people), 'known person', 'known people')} "
              f"({plural(len(gallery.names), 'face')}), {plural(len(rows), 'face')} in "
              f"{plural(len(paths) - len(failed), 'photo')}, threshold {limit:g} ({embedder.name}, {embedder.device})",
              markup=False)
    if as_json:
        click.echo(json_dumps([r.to_dict() for r in rows], indent=2))
    elif as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["image", "name", "cosine", "x", "y", "w", "h"])
        for r in rows:
            writer.writerow([shown(r.image), r.name, f"{r.cosine:.6f}", *(f"{v:.2f}" for v in r.box)])
    else:
        _print_table(rows)
    small = sum(1 for r in rows if r.name == "unknown" and not gate.passes([r.box])[0])
    if small:
        err.print(f"{plural(small, 'face')} under {gate.min_face:g} px called unknown (--min-face)", markup=False)
    if draw_dir is not None:
        err.print(f"wrote {plural(len(used), 'drawing')} to {draw_dir}", markup=False)
    if failed:
        finish(False)


def _draw(folder: Path, result, labels, used: set[str]) -> None:
    """The photo with its faces' boxes and names, as folder/<stem>.png (-2, -3 ... for a second photo of a name)."""
    from ..errors import ImageError
    from ..face.draw import draw_faces
    from ..io import atomic_write

    stem, n = result.path.stem, 1
    name = f"{stem}.png"
    while name in used:
        n += 1
        name = f"{stem}-{n}.png"
    used.add(name)
    picture = draw_faces(result.image, result.faces, labels=labels).convert("RGB")
    atomic_write(folder / name, lambda handle: picture.save(handle, format="PNG"), error=ImageError)


def _print_table(rows) -> None:
    if not rows:
        out.print("no faces found")
        return
    root, names = short_paths([r.image for r in rows])
    table = Table(title=f"under {root}" if root else None, title_justify="left")
    path_column(table, names)
    table.add_column("name")
    table.add_column("cosine", justify="right")
    table.add_column("box x,y,w,h")
    for r, name in zip(rows, names):
        table.add_row(name, r.name, f"{r.cosine:.3f}", fmt_box(r.box))
    out.print(table)
