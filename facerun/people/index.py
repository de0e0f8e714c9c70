"""FaceIndex: every face of a photo library in one SQLite file (WAL mode), kept up to date incrementally.

The schema is plain so that users can query it with `sqlite3` (the README shows it): `photos` (one row per photo
file), `faces` (one row per face, its embedding a float32 BLOB), `clusters` (the ids and names `cluster` gives) and
`meta` (the embedder the database belongs to). Writes go in one transaction per batch of photos: a photo's row and
all its faces land together or not at all, so a killed run loses at most the batch in flight.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..errors import FacerunError, InputError, ModelError
from ..io import check_output_file
from .lock import WriterLock

SCHEMA_VERSION = 1
COMMIT_EVERY = 16  # photos per transaction: what a kill can lose

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS photos (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,          -- absolute path
    size INTEGER NOT NULL,              -- bytes
    mtime REAL NOT NULL,                -- seconds since the epoch
    sha256 TEXT NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    indexed_at TEXT NOT NULL            -- ISO 8601, UTC
);
CREATE TABLE IF NOT EXISTS faces (
    id INTEGER PRIMARY KEY,
    photo_id INTEGER NOT NULL REFERENCES photos(id) ON DELETE CASCADE,
    x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL, h REAL NOT NULL,   -- box in photo pixels, top-left + size
    score REAL NOT NULL,
    landmarks TEXT NOT NULL,            -- JSON [[x, y] x 5]: right eye, left eye, nose, right and left mouth corner
    model TEXT NOT NULL,
    embedding BLOB NOT NULL,            -- float32 little-endian, unit length
    cluster INTEGER                     -- clusters.id; -1 noise; NULL not clustered yet
);
CREATE INDEX IF NOT EXISTS faces_photo ON faces(photo_id);
CREATE TABLE IF NOT EXISTS clusters (id INTEGER PRIMARY KEY, name TEXT, size INTEGER NOT NULL);
"""


@dataclass
class UpdateReport:
    """What one `FaceIndex.update` did, photo by photo."""

    added: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, one-line reason)
    faces: int = 0  # faces written by this run
    seconds: float = 0.0

    @property
    def indexed(self) -> int:
        return self.added + self.changed

    def to_dict(self) -> dict:
        return {"added": self.added, "changed": self.changed, "unchanged": self.unchanged, "removed": self.removed,
                "failed": [{"image": p, "error": e} for p, e in self.failed], "faces": self.faces,
                "seconds": round(self.seconds, 3),
                "photos_per_s": round(self.indexed / self.seconds, 3) if self.seconds > 0 else None}


@dataclass
class StoredFaces:
    """Faces read back from the index: parallel arrays, one row per face."""

    ids: np.ndarray  # int64 face ids
    photo_ids: np.ndarray
    paths: list[str]
    boxes: np.ndarray  # n x 4 float (x, y, w, h)
    embeddings: np.ndarray  # n x d float32, unit length
    clusters: np.ndarray  # int64; -1 noise, -2 not clustered

    def __len__(self) -> int:
        return len(self.ids)


class FaceIndex:
    """A face database. `FaceIndex("faces.db")` opens (or creates) it; use it as a context manager or close it.

    index.update(["photos/"], embedder=..., detector=...) -> UpdateReport
    index.search(query_image, top=10), index.cluster(min_size=2), index.identify(...) via facerun.people
    """

    def __init__(self, path, create: bool = True, timeout: float = 30.0):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise InputError(f"{self.path}: no such face database (make one with `facerun index PHOTOS --db "
                             f"{self.path}`)")
        if self.path.is_dir():
            raise InputError(f"{self.path}: is a folder, not a face database")
        if not self.path.parent.is_dir():
            raise InputError(f"{self.path}: folder {self.path.parent} does not exist")
        if create and not self.path.exists():  # sqlite would only say "unable to open database file"
            check_output_file(self.path, "face database")
        try:
            # isolation_level=None: transactions are begun and ended here, explicitly
            self.conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: not a face database ({e})") from None

    # ------------------------------------------------------------------------------------------------ basics
    def _check_schema(self) -> None:
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "photos" not in tables:
            raise InputError(f"{self.path}: an SQLite file, but not a facerun face database")
        if not tables:
            self.conn.executescript("BEGIN;" + SCHEMA + "COMMIT;")
            self._set_meta({"schema_version": str(SCHEMA_VERSION)})
        version = self.meta().get("schema_version")
        if version != str(SCHEMA_VERSION):
            raise InputError(f"{self.path}: face database schema {version}, this facerun reads {SCHEMA_VERSION}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def _set_meta(self, values: dict[str, str]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items())

    @property
    def model(self) -> str | None:
        """The embedder the stored faces come from (None while the database is empty)."""
        return self.meta().get("model")

    def counts(self) -> dict[str, int]:
        one = self.conn.execute
        return {"photos": one("SELECT COUNT(*) FROM photos").fetchone()[0],
                "faces": one("SELECT COUNT(*) FROM faces").fetchone()[0]}

    # ------------------------------------------------------------------------------------------------ models
    def check_embedder(self, embedder) -> None:
        """Refuse an embedder other than the one the stored faces come from: their vectors are not comparable."""
        stored = self.meta()
        sha = getattr(embedder.net, "sha256", None)
        if "model" not in stored:
            return
        if stored.get("model_sha256") != sha or int(stored.get("dim", -1)) != embedder.dim:
            raise ModelError(f"{self.path} holds {stored['model']} embeddings ({stored.get('dim')}-d); this run uses "
                             f"{embedder.name} ({embedder.dim}-d): embeddings of two models cannot be mixed, use "
                             f"another database or --model {stored['model']}")

    def stored_model(self) -> str | None:
        """The model argument that reopens this database's embedder: its file path when that still exists."""
        from ..zoo import replicas

        stored = self.meta()
        name, path = stored.get("model"), stored.get("model_path")
        if name and replicas.is_replica(name):
            return name  # a replica's file is only known by its name (random weights: no sha256 in the table)
        if path and Path(path).is_file():
            return path
        return name

    def _claim_model(self, embedder, detector) -> None:
        if "model" in self.meta():
            return
        self._set_meta({"model": embedder.name, "model_sha256": getattr(embedder.net, "sha256", ""),
                        "model_path": str(Path(embedder.path).resolve()), "dim": str(embedder.dim),
                        "detector": Path(getattr(detector, "model_path", "") or "").name})

    # ------------------------------------------------------------------------------------------------ update
    def update(self, sources: Iterable, embedder, detector, batch: int = 16, all_faces: bool = True,
               commit_every: int = COMMIT_EVERY, wait: float = 0.0, prune: bool = True,
               progress: Callable[[str, int], None] | None = None,
               on_plan: Callable[[int, int], None] | None = None,
               photo_faces: Callable | None = None) -> UpdateReport:
        """Bring the index up to date with the photos in `sources` (files, folders searched recursively).

        Unchanged photos (same size and mtime, or same sha256 when those differ) are skipped, changed ones
        re-indexed, and photos under a given folder that are gone from disk dropped (prune=False keeps them).
        Holds the writer lock for the whole run (waits `wait` seconds for another writer, then refuses).
        on_plan(to_index, skipped) is called once the plan is made; progress(path, faces) once per photo indexed.
        photo_faces: the run that turns the photos to index into `PhotoFaces` (default `iter_photo_faces`; the Ray
        engine's gives them in any order), called as photo_faces(paths, detector, embedder, batch=, all_faces=)."""
        from ..face.images import iter_images
        from ..face.library import iter_photo_faces

        if commit_every < 1:
            raise InputError(f"photos per transaction must be 1 or more, not {commit_every}")
        start = time.perf_counter()
        sources = [Path(s) for s in sources]
        missing = [s for s in sources if not s.exists()]
        if missing:
            raise InputError(f"{missing[0]}: no such file or folder")
        report = UpdateReport()
        with WriterLock(self.path, wait=wait):
            self.check_embedder(embedder)
            listed = [p.resolve() for p in iter_images(sources)]
            todo = self._plan(listed, report)
            if prune:
                report.removed = self._prune(sources, {str(p) for p in listed})
            if on_plan is not None:
                on_plan(len(todo), report.unchanged)
            if todo:
                self.conn.execute("BEGIN IMMEDIATE")
                self._claim_model(embedder, detector)
                self.conn.execute("COMMIT")
            pending = []
            run = photo_faces or iter_photo_faces
            for result in run(todo, detector, embedder, batch=batch, all_faces=all_faces) if todo else ():
                pending.append(result)
                if progress is not None:
                    progress(str(result.path), len(result.faces))
                if len(pending) >= commit_every:
                    self._write(pending, embedder.name, report)
                    pending = []
            if pending:
                self._write(pending, embedder.name, report)
        report.seconds = time.perf_counter() - start
        return report

    def _plan(self, listed: list[Path], report: UpdateReport) -> list[Path]:
        """The photos to (re-)index; counts the unchanged ones and refreshes their size and mtime."""
        known = {r[0]: r[1:] for r in self.conn.execute("SELECT path, id, size, mtime, sha256 FROM photos")}
        todo, touched = [], []
        for path in listed:
            row = known.get(str(path))
            if row is None:
                todo.append(path)
                continue
            photo_id, size, mtime, sha = row
            try:
                st = path.stat()
            except OSError:
                todo.append(path)  # reported as unreadable when indexed
                continue
            if st.st_size == size and abs(st.st_mtime - mtime) < 1e-6:
                report.unchanged += 1
            elif st.st_size == size and _sha256(path) == sha:
                report.unchanged += 1  # touched or copied, same bytes
                touched.append((st.st_mtime, photo_id))
            else:
                todo.append(path)
        if touched:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("UPDATE photos SET mtime = ? WHERE id = ?", touched)
            self.conn.execute("COMMIT")
        return todo

    def _prune(self, sources: list[Path], listed: set[str]) -> int:
        """Drop the photos under the given folders (or given by name) that are no longer on disk."""
        roots = [str(s.resolve()) for s in sources]
        gone = []
        for photo_id, path in self.conn.execute("SELECT id, path FROM photos"):
            if path in listed:
                continue
            inside = any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)
            if inside and not Path(path).exists():
                gone.append((photo_id,))
        if gone:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("DELETE FROM photos WHERE id = ?", gone)  # faces go with them (cascade)
            self.conn.execute("COMMIT")
        return len(gone)

    def _write(self, results, model: str, report: UpdateReport) -> None:
        """One transaction: each photo's row and all its faces replace whatever the index held for that path."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = []
        for r in results:
            if r.error is not None:
                report.failed.append((str(r.path), r.error))
                continue
            try:
                st = r.path.stat()
                sha = _sha256(r.path)
            except OSError as e:
                report.failed.append((str(r.path), f"{r.path}: cannot read ({e.strerror or e})"))
                continue
            rows.append((r, st, sha))
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for r, st, sha in rows:
                old = self.conn.execute("SELECT id FROM photos WHERE path = ?", (str(r.path),)).fetchone()
                if old is not None:
                    self.conn.execute("DELETE FROM faces WHERE photo_id = ?", old)
                    self.conn.execute("UPDATE photos SET size=?, mtime=?, sha256=?, width=?, height=?, indexed_at=? "
                                      "WHERE id=?", (st.st_size, st.st_mtime, sha, r.width, r.height, now, old[0]))
                    photo_id = old[0]
                    report.changed += 1
                else:
                    cursor = self.conn.execute(
                        "INSERT INTO photos(path, size, mtime, sha256, width, height, indexed_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (str(r.path), st.st_size, st.st_mtime, sha, r.width, r.height, now))
                    photo_id = cursor.lastrowid
                    report.added += 1
                self.conn.executemany(
                    "INSERT INTO faces(photo_id, x, y, w, h, score, landmarks, model, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(photo_id, *(float(v) for v in face.box), float(face.score),
                      json.dumps([[round(float(x), 2), round(float(y), 2)] for x, y in face.landmarks]), model,
                      np.asarray(vector, dtype="<f4").tobytes())
                     for face, vector in zip(r.faces, r.embeddings)])
                report.faces += len(r.faces)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------------------------------------- reads
    def faces(self, largest_per_photo: bool = False) -> StoredFaces:
        """Every stored face (or only each photo's largest), with its embedding, in face-id order.

        Reading the blobs is the slow part of a search (seconds for 100k faces), so the result is kept until the
        database changes: `data_version` moves when another connection commits, `total_changes` on our own."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        key = (largest_per_photo, version, self.conn.total_changes)
        cached = getattr(self, "_faces_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        stored = self._read_faces(largest_per_photo)
        self._faces_cache = (key, stored)
        return stored

    def _read_faces(self, largest_per_photo: bool) -> StoredFaces:
        query = ("SELECT f.id, f.photo_id, p.path, f.x, f.y, f.w, f.h, f.embedding, f.cluster "
                 "FROM faces f JOIN photos p ON p.id = f.photo_id")
        if largest_per_photo:
            query += (" WHERE f.id = (SELECT g.id FROM faces g WHERE g.photo_id = f.photo_id "
                      "ORDER BY g.w * g.h DESC, g.id LIMIT 1)")
        rows = self.conn.execute(query + " ORDER BY f.id").fetchall()
        dim = int(self.meta().get("dim", 0))
        if not rows:
            return StoredFaces(np.zeros(0, np.int64), np.zeros(0, np.int64), [], np.zeros((0, 4)),
                               np.zeros((0, dim), np.float32), np.zeros(0, np.int64))
        embeddings = np.frombuffer(b"".join(r[7] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return StoredFaces(
            ids=np.array([r[0] for r in rows], np.int64),
            photo_ids=np.array([r[1] for r in rows], np.int64),
            paths=[r[2] for r in rows],
            boxes=np.array([r[3:7] for r in rows], np.float64),
            embeddings=embeddings.astype(np.float32),
            clusters=np.array([-2 if r[8] is None else r[8] for r in rows], np.int64),
        )

    def photo_rows(self) -> list[dict]:
        cursor = self.conn.execute("SELECT id, path, size, mtime, sha256, width, height, indexed_at FROM photos "
                                   "ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]

    # ------------------------------------------------------------------------------------- people (facade)
    def search(self, query, embedder=None, detector=None, top: int = 10, bgr: bool = False):
        """The photos of the person in `query` (an image path or array; its largest face), best cosine first."""
        from .search import search_index

        return search_index(self, query, embedder=embedder, detector=detector, top=top, bgr=bgr)

    def cluster(self, min_size: int = 2, save: bool = True):
        """Group the stored faces by person (scikit-learn's HDBSCAN); see facerun.people.cluster."""
        from .cluster import cluster_index

        return cluster_index(self, min_size=min_size, save=save)

    def name_cluster(self, cluster_id: int, name: str | None) -> None:
        """Give a cluster a name (None clears it); kept across later `cluster` runs that find the same person."""
        from .cluster import name_cluster

        name_cluster(self, cluster_id, name)

    def embedder(self, device: str = "auto"):
        """The database's own embedder, loaded again from its file or name."""
        from ..face.embed import Embedder

        model = self.stored_model()
        if model is None:
            raise FacerunError(f"{self.path} holds no faces yet; index photos first")
        return Embedder(model=model, device=device)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["COMMIT_EVERY", "SCHEMA", "FaceIndex", "StoredFaces", "UpdateReport"]
