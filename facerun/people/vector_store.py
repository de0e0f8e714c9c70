"""The face database's vector index kept in step with its `faces` table.

The database side is a generation number in `meta`, moved by every transaction that writes or removes faces
(`bump`). The index beside the file (facerun.people.vectors) holds every face row, those of photos marked missing
too (readers leave them out, as they do in SQLite), so marking a photo missing or back changes nothing here.

A run that changes faces records what it added and removed (`Changes`) and, once done, applies that to the index it
found if that index was at the run's starting generation, else rebuilds the index from the database; either way it
saves the index at the final generation. A run killed before that leaves the old header: the next open finds it
stale and rebuilds it, with a one-line note. SQLite is the truth; the index is never trusted past a mismatch.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np

GENERATION = "generation"  # meta key
TOKEN = "vectors_token"  # meta key: this database's, in its index's header


def generation(conn) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION,)).fetchone()
    return int(row[0]) if row else 0


def bump(conn) -> None:
    """Move the generation on, inside the caller's transaction (with its face writes, so they land together); the
    first bump also gives the database a random token, so that an index left beside a deleted and remade database
    of the same face count and generation is not taken for its own."""
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (TOKEN, secrets.token_hex(8)))
    conn.execute("INSERT INTO meta(key, value) VALUES (?, '1') ON CONFLICT(key) DO UPDATE SET "
                 "value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)", (GENERATION,))


def face_count(conn) -> int:
    return conn.execute("SELECT COUNT(*) FROM faces").fetchone()[0]


def embedder_key(meta: dict) -> str:
    """What the index records as its embedder: the name, the file's sha256 (two files may share a name) and the
    database's token."""
    return f"{meta.get('model', '')}:{meta.get('model_sha256', '')[:16]}:{meta.get(TOKEN, '')}"


def read_all(conn, dim: int):
    """() -> (face ids, embeddings) of every face row, for a rebuild."""
    def source():
        ids, blobs = [], []
        for face_id, blob in conn.execute("SELECT id, embedding FROM faces ORDER BY id"):
            ids.append(face_id)
            blobs.append(blob)
        vectors = np.frombuffer(b"".join(blobs), "<f4").reshape(len(ids), dim) if ids else np.zeros((0, dim))
        return np.array(ids, np.int64), np.asarray(vectors, np.float32)

    return source


class _Stale(Exception):
    pass


def _refuse():
    raise _Stale


def open_index(db_path, conn, save: bool = True, quiet_if_new: bool = False):
    """(VectorIndex, note or None) for the database as it is now; None, None while it holds no embedder yet."""
    from .vectors import VectorIndex, header_of

    meta = dict(conn.execute("SELECT key, value FROM meta"))
    if "dim" not in meta:
        return None, None
    dim, key = int(meta["dim"]), embedder_key(meta)
    new = quiet_if_new and not header_of(db_path).exists()
    index, note = VectorIndex.open(db_path, face_count(conn), generation(conn), key, dim, read_all(conn, dim),
                                   save=False)
    if note is not None and save:
        try:
            index.save()
        except OSError as e:  # a read-only folder: answers stay right, the index is rebuilt again next time
            note += f" (not saved: {e.strerror or e})"
    return index, (None if new else note)


@dataclass
class Changes:
    """Faces one run added and removed, and the database's state when it started."""

    count: int
    generation: int
    removed: set[int] = field(default_factory=set)  # ids held when the run started, removed since
    added: dict[int, np.ndarray] = field(default_factory=dict)  # ids written by this run and still there

    @classmethod
    def start(cls, conn) -> Changes:
        return cls(face_count(conn), generation(conn))

    def remove(self, ids) -> None:
        for face_id in map(int, ids):
            if self.added.pop(face_id, None) is None:  # SQLite reuses the largest id once it is deleted
                self.removed.add(face_id)

    def add(self, ids, vectors) -> None:
        for face_id, vector in zip(map(int, ids), vectors):
            self.added[face_id] = np.asarray(vector, np.float32)

    def apply(self, db_path, conn) -> str | None:
        """Bring the index beside db_path to the database's generation now: the run's changes applied to the index
        that was at the starting generation, else a rebuild. Returns the note of a rebuild (None when in step)."""
        from .vectors import VectorIndex

        now = generation(conn)
        if now == self.generation:
            return None  # this run changed no faces
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        dim, key = int(meta["dim"]), embedder_key(meta)
        try:
            index, _ = VectorIndex.open(db_path, self.count, self.generation, key, dim, _refuse, save=False)
        except _Stale:
            return open_index(db_path, conn, quiet_if_new=self.generation == 0)[1]
        index.remove(sorted(self.removed))
        if self.added:
            index.add(list(self.added), np.stack(list(self.added.values())))
        if len(index) != face_count(conn):  # another writer got in between: trust SQLite
            return open_index(db_path, conn)[1]
        try:
            index.save(generation=now)
        except OSError as e:
            return f"{db_path}.vectors: vector index not saved ({e.strerror or e}); rebuilt on the next open"
        return None


__all__ = ["GENERATION", "Changes", "bump", "embedder_key", "face_count", "generation", "open_index"]
