"""`facerun search`: the photos of the person in a query photo, from a face database, ranked by cosine."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..errors import InputError
from .common import err, fmt_box, json_dumps, models_dir_option, out, path_column, plural, short_paths
from .options import box_cells, csv_option, detector_option, device_option, json_option, one_output, print_csv
from .types import FiniteRange


@click.command("search")
@click.argument("query", required=False, type=click.Path(path_type=Path))
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The face database made by `facerun index`.")
@click.option("--person", metavar="NAME",
              help="List the photos of the person called NAME instead of searching by a QUERY photo: the faces of "
                   "the clusters named NAME (`cluster --name`, `--merge`, `--move`), one row per face.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Photos to list.")
@click.option("--threshold", type=FiniteRange(-1, 1), default=None,
              help="The cosine threshold: photos below it are left out. Default: the embedder's calibrated one "
                   "(mobilefacenet 0.39); -1 lists the --top best whatever their cosine.")
@device_option(detail="the query's face is detected and embedded there. auto: the GPU when one is usable, else "
                     "the CPU; gpu: fail if there is no GPU.")
@detector_option(detail="It finds the query's face. Default: yunet-2023mar.")
@models_dir_option()
@json_option('instead of a table: [{"image","box","cosine","face_id"}], best first (--person: '
             '[{"image","box","face_id","person"}], by photo).')
@csv_option("instead of a table: rank,cosine,image,face_id,x,y,w,h, one row per photo, best first (--person: "
            "person,image,face_id,x,y,w,h).")
def command(query, db_path, person, top, threshold, device, detector_model, as_json, as_csv):
    """List the photos in --db showing the person of QUERY's largest face, best match first (one row per photo:
    its best-matching face), down to the threshold; or, with --person NAME, every photo of that person. The query
    is embedded with the database's own model and looked up in the database's vector index."""
    from ..people.index import FaceIndex
    from ..people.search import person_photos, search_index
    from .embed import make_detector

    one_output(as_json, as_csv)
    if (query is None) == (person is None):
        raise InputError("give a QUERY photo or --person NAME (one of them)")
    if query is not None and not query.is_file():
        raise InputError(f"{query}: no such file")
    with FaceIndex(db_path, create=False) as index:
        if person is not None:
            return _print_person(person, person_photos(index, person), as_json, as_csv)
        embedder = index.embedder(device=device)
        detector = make_detector(detector_model, device)
        limit = threshold if threshold is not None else embedder.threshold
        matches = search_index(index, query, embedder=embedder, detector=detector, top=top, threshold=limit)
        for note in index.notes:
            err.print(f"note: {note}", markup=False)
    if as_json:
        click.echo(json_dumps([m.to_dict() for m in matches], indent=2))
        return
    if as_csv:
        print_csv(["rank", "cosine", "image", "face_id", "x", "y", "w", "h"],
                  ([rank, f"{m.cosine:.6f}", str(m.image), m.face_id, *box_cells(m.box)]
                   for rank, m in enumerate(matches, start=1)))
        return
    shown = "none" if limit is None else f"{limit:g}" + (" (given)" if threshold is not None else " (calibrated)")
    err.print(f"{query}: {plural(len(matches), 'photo')} at or above the threshold ({embedder.name}, threshold "
              f"{shown})", markup=False)
    root, names = short_paths([m.image for m in matches])
    table = Table(title=f"under {root}" if root else None, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("cosine", justify="right")
    path_column(table, names)
    table.add_column("box x,y,w,h")
    for rank, (m, cell) in enumerate(zip(matches, names), start=1):
        table.add_row(str(rank), f"{m.cosine:.3f}", cell, fmt_box(m.box))
    out.print(table)


def _print_person(person: str, matches, as_json: bool, as_csv: bool) -> None:
    if as_json:
        click.echo(json_dumps([{"image": m.image, "box": [round(float(v), 2) for v in m.box], "face_id": m.face_id,
                                "person": person} for m in matches], indent=2))
        return
    if as_csv:
        print_csv(["person", "image", "face_id", "x", "y", "w", "h"],
                  ([person, str(m.image), m.face_id, *box_cells(m.box)] for m in matches))
        return
    err.print(f"{person}: {plural(len({m.image for m in matches}), 'photo')}", markup=False)
    root, names = short_paths([m.image for m in matches])
    table = Table(title=f"under {root}" if root else None, title_justify="left")
    path_column(table, names)
    table.add_column("face", justify="right")
    table.add_column("box x,y,w,h")
    for m, cell in zip(matches, names):
        table.add_row(cell, str(m.face_id), fmt_box(m.box))
    out.print(table)


def print_bench(rows, as_json: bool) -> None:
    """`facerun bench --search`: the brute-force query time table."""
    if as_json:
        click.echo(json_dumps({"search": rows}, indent=2))
        return
    table = Table(title="brute-force cosine search, random unit vectors (top 10 photos)", title_justify="left")
    for name in ("faces", "dim", "matrix", "query median", "query p90", "product alone"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(f"{r['faces']:,}", str(r["dim"]), f"{r['matrix_mb']:.0f} MiB", f"{r['median_ms']:.2f} ms",
                      f"{r['p90_ms']:.2f} ms", f"{r['product_ms']:.2f} ms")
    out.print(table)
