"""`facerun cluster`: group the faces of a face database by person (HDBSCAN); name clusters; contact sheets."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..errors import InputError
from .common import err, json_dumps, out, plural, short_paths
from .options import box_cells, csv_option, json_option, one_output, print_csv


@click.command("cluster")
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The face database made by `facerun index`.")
@click.option("--min-size", type=click.IntRange(min=2), default=2, show_default=True,
              help="Fewest faces a cluster may have; faces in no cluster are noise.")
@click.option("--sheets", "sheets_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one contact sheet per cluster here (cluster-<id>[-<name>].png, noise.png).")
@click.option("--name", "naming", nargs=2, type=(int, str), metavar="ID NAME",
              help="Name cluster ID (as the last clustering numbered it) instead of clustering; '' clears it. "
                   "Names are kept in the database and carried to the matching cluster by later runs.")
@click.option("--show", is_flag=True, help="Show the stored clustering instead of clustering again.")
@json_option('instead of tables: {"clusters": [{"id","name","size","faces": [{"image","box","face_id"}]}], '
             '"noise": [...]}.')
@csv_option("instead of tables: cluster,name,image,face_id,x,y,w,h, one row per face (cluster 0: in none).")
def command(db_path, min_size, sheets_dir, naming, show, as_json, as_csv):
    """Group the faces indexed in --db by person, with scikit-learn's HDBSCAN on the embeddings (unit vectors,
    so Euclidean distance ranks as cosine distance does). Clusters are numbered 1, 2, ... by size, largest first,
    and saved in the database (faces.cluster, table clusters). Needs scikit-learn: pip install 'facerun[cluster]'.
    """
    from ..people.cluster import cluster_index, name_cluster, stored_clusters
    from ..people.index import FaceIndex
    from ..people.storage import reported

    one_output(as_json, as_csv)
    if naming and show:
        raise InputError("--name and --show do not go together")
    with reported(db_path, "write"), FaceIndex(db_path, create=False) as index:  # a full or read-only disk: one line
        if naming:
            cid, name = naming
            name_cluster(index, cid, name)
            result = stored_clusters(index)
            err.print(f"cluster {cid} " + (f"is now {name!r}" if name else "has no name now"), markup=False)
        elif show:
            result = stored_clusters(index)
        else:
            if index.counts()["faces"] == 0:
                raise InputError(f"{db_path} holds no faces; index photos first (`facerun index PHOTOS --db "
                                 f"{db_path}`)")
            result = cluster_index(index, min_size=min_size)
    if sheets_dir is not None:
        from ..people.sheets import write_sheets

        written = write_sheets(result, sheets_dir)
        err.print(f"wrote {plural(len(written), 'contact sheet')} to {sheets_dir}", markup=False)
    if as_json:
        click.echo(json_dumps(result.to_dict(), indent=2))
    elif as_csv:
        print_csv(["cluster", "name", "image", "face_id", "x", "y", "w", "h"],
                  ([cid, name, str(face["image"]), face["face_id"], *box_cells(face["box"])]
                   for cid, name, face in _face_rows(result.to_dict())))
    elif not naming:
        _print(result)


def _face_rows(data: dict):
    """(cluster id, its name, face) for every face of the clusters, then the noise's as cluster 0."""
    for c in data["clusters"]:
        for face in c["faces"]:
            yield c["id"], c["name"] or "", face
    for face in data["noise"]:
        yield 0, "", face


def _print(result) -> None:
    faces = sum(c.size for c in result.clusters) + len(result.noise)
    # one rule with search, identify and embed: photos named relative to the folder they all share
    every = sorted({str(p) for c in result.clusters for p in c.images})
    root, names = short_paths(every)
    short = dict(zip(every, names))
    title = (f"{plural(len(result.clusters), 'cluster')}, {len(result.noise)} of {plural(faces, 'face')} in none"
             + (f"; photos under {root}" if root else ""))
    table = Table(title=title, title_justify="left")
    for name in ("id", "name", "faces"):
        table.add_column(name, justify="right" if name in ("id", "faces") else "left")
    table.add_column("photos", overflow="fold")
    for c in result.clusters:
        photos = sorted({short[str(p)] for p in c.images})
        shown = ", ".join(photos[:4]) + (f", ... ({plural(len(photos), 'photo')})" if len(photos) > 4 else "")
        table.add_row(str(c.id), c.name or "", str(c.size), shown)
    out.print(table)
