"""People's names, attached to faces rather than to cluster numbers.

`cluster --name 3 Penny` records each face of cluster 3 in `person_faces` by its photo's sha256 and box (and its
face id). A face is Penny's again when it has that face id in a photo of that sha256, or, once its photo was indexed
afresh (new face ids), a box overlapping the recorded one by half or more (IoU) in a photo of that sha256. The
records outlive the faces (a pruned photo indexed again gets its name back), and a later clustering gives each name
to the new cluster holding most of its faces.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

MIN_IOU = 0.5  # the same face detected again: the same box, give or take a detector run on another device

FACE_KEYS = "SELECT f.id, p.sha256, f.x, f.y, f.w, f.h FROM faces f JOIN photos p ON p.id = f.photo_id"


def _iou(a, b) -> float:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    iw = max(0.0, min(ax + aw, bx + bw) - max(ax, bx))
    ih = max(0.0, min(ay + ah, by + bh) - max(ay, by))
    inter = iw * ih
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


def match(conn, faces) -> dict[int, tuple[int, tuple]]:
    """face id -> (person id, the record's key) for the faces (face_id, sha256, x, y, w, h) that carry a name."""
    shas = sorted({f[1] for f in faces})
    records = defaultdict(list)
    for start in range(0, len(shas), 500):  # SQLite's limit on bound parameters
        chunk = shas[start : start + 500]
        rows = conn.execute("SELECT person, face_id, sha256, x, y, w, h FROM person_faces WHERE sha256 IN "
                            f"({','.join('?' * len(chunk))})", chunk)
        for person, face_id, sha, *box in rows:
            records[sha].append((person, face_id, tuple(box)))
    found = {}
    for face_id, sha, *box in faces:
        candidates = records.get(sha)
        if not candidates:
            continue
        same = [c for c in candidates if c[1] == face_id]
        if same:
            best = same[0]
        else:
            scored = [(_iou(box, c[2]), c) for c in candidates]
            overlap, best = max(scored, key=lambda s: s[0])
            if overlap < MIN_IOU:
                continue
        found[int(face_id)] = (best[0], (sha, *best[2]))
    return found


def names_for_clusters(conn, face_ids: np.ndarray, labels: np.ndarray) -> dict[int, str]:
    """cluster id -> name: each person's name goes to the cluster holding most of their faces (the larger overlap
    wins when two names want one cluster)."""
    wanted = {int(f): int(label) for f, label in zip(face_ids, labels) if label >= 0}
    if not wanted:
        return {}
    rows = conn.execute(FACE_KEYS + " WHERE p.id NOT IN (SELECT photo_id FROM missing)").fetchall()
    persons = match(conn, [r for r in rows if r[0] in wanted])
    votes: dict[tuple[int, int], int] = defaultdict(int)
    for face_id, (person, _) in persons.items():
        votes[(person, wanted[face_id])] += 1
    names = dict(conn.execute("SELECT id, name FROM people"))
    claims = sorted(((n, cid, names[person]) for (person, cid), n in votes.items()), reverse=True)
    given: dict[int, str] = {}
    for _, cid, name in claims:
        if cid not in given and name not in given.values():
            given[cid] = name
    return given


def name_faces(conn, faces, name: str | None) -> None:
    """Give `faces` (face_id, sha256, x, y, w, h) the person `name` (None: no name); inside the caller's
    transaction. A person left with no faces recorded by this goes; one whose faces were only deleted stays."""
    for _, key in match(conn, faces).values():
        conn.execute("DELETE FROM person_faces WHERE sha256 = ? AND x = ? AND y = ? AND w = ? AND h = ?", key)
    if name:
        conn.execute("INSERT OR IGNORE INTO people(name) VALUES (?)", (name,))
        person = conn.execute("SELECT id FROM people WHERE name = ?", (name,)).fetchone()[0]
        conn.executemany("INSERT OR REPLACE INTO person_faces(person, face_id, sha256, x, y, w, h) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", [(person, *f) for f in faces])
    conn.execute("DELETE FROM people WHERE id NOT IN (SELECT DISTINCT person FROM person_faces)")


__all__ = ["MIN_IOU", "match", "name_faces", "names_for_clusters"]
