"""People as first-class: a named cluster is a person. Finding a person's faces, merging two people or clusters,
and moving one face to a person; every change recorded in `person_faces` too (facerun.people.names), so that it
survives `cluster --all` and photos indexed again.
"""

from __future__ import annotations

from ..errors import InputError
from .names import FACE_KEYS, match, name_faces

PRESENT = "p.id NOT IN (SELECT photo_id FROM missing)"


def person_names(conn) -> list[str]:
    names = {n for (n,) in conn.execute("SELECT name FROM clusters WHERE name IS NOT NULL AND name != ''")}
    return sorted(names | {n for (n,) in conn.execute("SELECT name FROM people")})


def named_faces(conn) -> dict[int, str]:
    """face id -> person name for every present face with one: the faces of named clusters, and faces outside any
    named cluster that a name was recorded on (clustered since into nothing, or not clustered yet)."""
    out = {fid: name for fid, name in conn.execute(
        "SELECT f.id, c.name FROM faces f JOIN clusters c ON c.id = f.cluster JOIN photos p ON p.id = f.photo_id "
        f"WHERE c.name IS NOT NULL AND c.name != '' AND {PRESENT}")}
    rows = conn.execute(FACE_KEYS + f" LEFT JOIN clusters c ON c.id = f.cluster WHERE {PRESENT} AND "
                        "(c.name IS NULL OR c.name = '')").fetchall()
    people = dict(conn.execute("SELECT id, name FROM people"))
    for face_id, (person, _) in match(conn, rows).items():
        out.setdefault(face_id, people[person])
    return out


def person_face_ids(conn, name: str) -> list[int]:
    """The present faces of the person `name`; an InputError naming the people there are when nobody is called so."""
    faces = sorted(f for f, n in named_faces(conn).items() if n == name)
    if not faces:
        known = person_names(conn)
        hint = (f"people: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else
                "name a cluster first: `facerun cluster --db DB --name ID NAME`")
        raise InputError(f"no person called {name!r} ({hint})")
    return faces


def cluster_of(conn, ref: str, what: str) -> int:
    """A cluster id from `ref`: its number, or a person's name (their largest cluster)."""
    ref = str(ref)
    if ref.lstrip("-").isdigit():
        row = conn.execute("SELECT id FROM clusters WHERE id = ?", (int(ref),)).fetchone()
    else:
        row = conn.execute("SELECT id FROM clusters WHERE name = ? ORDER BY size DESC, id LIMIT 1", (ref,)).fetchone()
    if row is None:
        raise InputError(f"{what} {ref}: no such cluster or person (see `facerun cluster --db DB --show`)")
    return row[0]


def merge(conn, first: str, second: str) -> tuple[int, str | None]:
    """Put the faces of `second` into `first` (ids or names); the merged cluster keeps first's name, else takes
    second's. Returns (cluster id, name)."""
    a, b = cluster_of(conn, first, "--merge"), cluster_of(conn, second, "--merge")
    if a == b:
        raise InputError(f"--merge {first} {second}: the same cluster")
    names = dict(conn.execute("SELECT id, name FROM clusters WHERE id IN (?, ?)", (a, b)))
    name = names[a] or names[b] or None
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("UPDATE faces SET cluster = ? WHERE cluster = ?", (a, b))
        conn.execute("DELETE FROM clusters WHERE id = ?", (b,))
        _resize(conn, a)
        conn.execute("UPDATE clusters SET name = ? WHERE id = ?", (name, a))
        if name or names[b]:
            name_faces(conn, conn.execute(FACE_KEYS + " WHERE f.cluster = ?", (a,)).fetchall(), name)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return a, name


def move(conn, face_id: int, target: str) -> tuple[int, str | None]:
    """Move one face to the cluster `target` (an id, or a person's name: a new person when nobody has it).
    Returns (cluster id, its name)."""
    face = conn.execute(FACE_KEYS + " WHERE f.id = ?", (int(face_id),)).fetchall()
    if not face:
        raise InputError(f"--move {face_id}: no such face (face ids are in `facerun cluster --show --json`)")
    source = conn.execute("SELECT cluster FROM faces WHERE id = ?", (int(face_id),)).fetchone()[0]
    try:
        cid = cluster_of(conn, target, "--to")
    except InputError:
        if str(target).lstrip("-").isdigit() or not str(target).strip():
            raise
        cid = None  # a new person
    conn.execute("BEGIN IMMEDIATE")
    try:
        if cid is None:
            cid = conn.execute("SELECT MAX(m) FROM (SELECT MAX(id) AS m FROM clusters UNION ALL "
                               "SELECT MAX(cluster) FROM faces)").fetchone()[0] or 0
            cid = max(cid, 0) + 1
            conn.execute("INSERT INTO clusters(id, name, size) VALUES (?, ?, 0)", (cid, str(target)))
        name = conn.execute("SELECT name FROM clusters WHERE id = ?", (cid,)).fetchone()[0]
        conn.execute("UPDATE faces SET cluster = ? WHERE id = ?", (cid, int(face_id)))
        _resize(conn, cid)
        if source is not None and source >= 1 and source != cid:
            _resize(conn, source)
        name_faces(conn, face, name or None)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return cid, name


def _resize(conn, cid: int) -> None:
    size = conn.execute("SELECT COUNT(*) FROM faces WHERE cluster = ?", (cid,)).fetchone()[0]
    if size:
        conn.execute("UPDATE clusters SET size = ? WHERE id = ?", (size, cid))
    else:
        conn.execute("DELETE FROM clusters WHERE id = ?", (cid,))


__all__ = ["cluster_of", "merge", "move", "named_faces", "person_face_ids", "person_names"]
