"""`facerun cluster`: group the faces of a face database by person, incrementally or all again; name, merge and
move; contact sheets."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ..errors import InputError
from .common import err, json_dumps, out, plural, short_paths
from .options import box_cells, csv_option, json_option, one_output, print_csv
from .types import FiniteRange


def gate_options(what: str):
    """--min-face and --min-score, the quality gate (facerun.people.quality), with their measured defaults."""
    from ..people.quality import MIN_FACE, MIN_SCORE

    def wrap(f):
        f = click.option("--min-score", type=FiniteRange(0, 1), default=MIN_SCORE, show_default=True, metavar="S",
                         help=f"Faces the detector scored below this are not named: {what}.")(f)
        return click.option("--min-face", type=FiniteRange(min=0), default=MIN_FACE, show_default=True, metavar="PX",
                            help=f"Faces smaller than this on their box's shorter side are not named: {what}. "
                                 "Measured on the shared photos: 98.8% of faces shrunk to 32 px named right, none "
                                 "wrongly; 74% at 20 px, with 2.4% named wrongly.")(f)
    return wrap


@click.command("cluster")
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The face database made by `facerun index`.")
@click.option("--all", "full", is_flag=True,
              help="Cluster every face again from scratch (a k-nearest-neighbour graph's components); names "
                   "follow their people. Without it only faces not in a person yet are placed.")
@click.option("--min-size", type=click.IntRange(min=2), default=2, show_default=True,
              help="Fewest faces a cluster may have; faces in no cluster are noise.")
@gate_options("they go to the unsorted group, never into a person")
@click.option("--sheets", "sheets_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one contact sheet per cluster here (cluster-<id>[-<name>].png, noise.png, unsorted.png).")
@click.option("--name", "naming", nargs=2, type=(int, str), metavar="ID NAME",
              help="Name cluster ID (as the last clustering numbered it) instead of clustering; '' clears it. "
                   "Names are kept in the database and carried to the matching cluster by later runs.")
@click.option("--merge", "merging", nargs=2, type=(str, str), metavar="A B",
              help="Merge two clusters or people into one instead of clustering: B's faces join A (each a cluster "
                   "id or a person's name); the result keeps A's name, or B's when A has none.")
@click.option("--move", "move_face", type=int, metavar="FACE_ID",
              help="Move this face to the person --to instead of clustering (face ids: `cluster --show --json`).")
@click.option("--to", "move_to", metavar="NAME|ID",
              help="The person or cluster --move puts the face in: a cluster id, or a name (a new person when "
                   "nobody has it).")
@click.option("--show", is_flag=True, help="Show the stored clustering instead of clustering again.")
@json_option('instead of tables: {"clusters": [{"id","name","size","faces": [{"image","box","face_id"}]}], '
             '"noise": [...], "unsorted": [...]}.')
@csv_option("instead of tables: cluster,name,image,face_id,x,y,w,h, one row per face (cluster 0: noise, "
            "-3: unsorted).")
def command(db_path, full, min_size, min_face, min_score, sheets_dir, naming, merging, move_face, move_to, show,
            as_json, as_csv):
    """Group the faces indexed in --db by person. A plain run is incremental: faces already in a person stay, each
    new face joins the person most of its near neighbours (cosine 0.50 or more, 3 agreeing) belong to, through the
    database's vector index, and the rest are grouped among themselves into new clusters. --all groups every face
    again: a graph joining each face to those of its 10 nearest at cosine 0.50 or more, clusters its connected
    components, numbered 1, 2, ... by size. A named cluster is a person: names survive both, and `--merge`,
    `--move ... --to` edit people by hand. Faces below the quality gate (--min-face, --min-score) go to the
    unsorted group, shown on its own contact sheet.
    """
    from ..people import persons
    from ..people.cluster import cluster_index, name_cluster, stored_clusters
    from ..people.index import FaceIndex
    from ..people.quality import Gate
    from ..people.storage import reported

    one_output(as_json, as_csv)
    edits = [n for n, v in (("--name", naming), ("--merge", merging), ("--move", move_face is not None),
                            ("--show", show), ("--all", full)) if v]
    if len(edits) > 1:
        raise InputError(f"{' and '.join(edits[:2])} do not go together")
    if (move_face is None) != (move_to is None):
        raise InputError("--move FACE_ID and --to NAME|ID go together")
    gate = Gate(min_face, min_score)
    with reported(db_path, "write"), FaceIndex(db_path, create=False) as index:  # a full or read-only disk: one line
        if naming:
            cid, name = naming
            name_cluster(index, cid, name)
            err.print(f"cluster {cid} " + (f"is now {name!r}" if name else "has no name now"), markup=False)
        elif merging:
            cid, name = persons.merge(index.conn, *merging)
            err.print(f"merged {merging[1]} into cluster {cid}" + (f" ({name!r})" if name else ""), markup=False)
        elif move_face is not None:
            cid, name = persons.move(index.conn, move_face, move_to)
            err.print(f"face {move_face} is now in cluster {cid}" + (f" ({name!r})" if name else ""), markup=False)
        if naming or merging or move_face is not None or show:
            result = stored_clusters(index)
        else:
            if index.counts()["faces"] == 0:
                raise InputError(f"{db_path} holds no faces; index photos first (`facerun index PHOTOS --db "
                                 f"{db_path}`)")
            result = cluster_index(index, min_size=min_size, full=full, gate=gate)
            placed = len(result.labels) if full else result.new_faces
            err.print(f"{db_path}: {'clustered' if full else 'placed'} {plural(placed, 'face')}; "
                      f"{plural(len(result.unsorted), 'face')} unsorted ({gate.describe()})", markup=False)
        for note in index.notes:
            err.print(f"note: {note}", markup=False)
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
    elif not (naming or merging or move_face is not None):
        _print(result)


def _face_rows(data: dict):
    """(cluster id, its name, face) for every face of the clusters, then the noise's as cluster 0 and the
    unsorted faces' as -3."""
    for c in data["clusters"]:
        for face in c["faces"]:
            yield c["id"], c["name"] or "", face
    for face in data["noise"]:
        yield 0, "", face
    for face in data.get("unsorted", ()):
        yield -3, "", face


def _print(result) -> None:
    faces = sum(c.size for c in result.clusters) + len(result.noise) + len(result.unsorted)
    # one rule with search, identify and embed: photos named relative to the folder they all share
    every = sorted({str(p) for c in result.clusters for p in c.images})
    root, names = short_paths(every)
    short = dict(zip(every, names))
    title = (f"{plural(len(result.clusters), 'cluster')}, {len(result.noise)} of {plural(faces, 'face')} in none, "
             f"{len(result.unsorted)} unsorted" + (f"; photos under {root}" if root else ""))
    table = Table(title=title, title_justify="left")
    for name in ("id", "name", "faces"):
        table.add_column(name, justify="right" if name in ("id", "faces") else "left")
    table.add_column("photos", overflow="fold")
    for c in result.clusters:
        photos = sorted({short[str(p)] for p in c.images})
        shown = ", ".join(photos[:4]) + (f", ... ({plural(len(photos), 'photo')})" if len(photos) > 4 else "")
        table.add_row(str(c.id), c.name or "", str(c.size), shown)
    out.print(table)
