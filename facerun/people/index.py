"""FaceIndex: every face of a photo library in one SQLite file (WAL mode), kept up to date incrementally.

The schema is plain so that users can query it with `sqlite3` (docs/library.md shows it): `photos` (one row per photo
file), `faces` (one row per face, its embedding a float32 BLOB), `clusters` (the ids and names `cluster` gives) and
`meta` (the embedder the database belongs to). Writes go in one transaction per batch of photos: a photo's row and
all its faces land together or not at all, so a killed run loses at most the batch in flight.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import fsnames
from ..errors import FacerunError, InputError, ModelError
from ..io import check_output_file
from .listing import SKIP_REASONS, Listing, list_photos
from .lock import WriterLock
from .schema import SCHEMA, SCHEMA_VERSION, check_schema
from .storage import read_only_connection, reported, storage_error
from .vector_store import Changes, bump, open_index

if TYPE_CHECKING:
    from ..face.library import LibraryOptions, LibraryStats

COMMIT_EVERY = 16  # photos per transaction: what a kill can lose
BUSY_TIMEOUT = 30.0  # seconds a write waits for a lock another program holds, then fails (storage.StorageError)
# a folder that lost more than half of its indexed photos since the last run, and at least this many, is refused
# (a drive or share not mounted, a folder renamed): nothing changes without --allow-missing
LOST_REFUSE_MIN = 3


@dataclass
class UpdateReport:
    """What one `FaceIndex.update` did, photo by photo."""

    added: int = 0
    changed: int = 0
    unchanged: int = 0
    missing: int = 0  # photos not found any more, marked missing by this run (kept, with their faces)
    back: int = 0  # missing photos found again unchanged: unmarked, faces as they were
    removed: int = 0  # missing photos deleted (prune), with `removed_faces` faces
    removed_faces: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, one-line reason)
    faces: int = 0  # faces written by this run
    seconds: float = 0.0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason): see listing.SKIP_REASONS
    links_followed: int = 0

    @property
    def indexed(self) -> int:
        return self.added + self.changed

    def to_dict(self) -> dict:
        return {"added": self.added, "changed": self.changed, "unchanged": self.unchanged, "missing": self.missing,
                "back": self.back, "removed": self.removed, "removed_faces": self.removed_faces,
                "failed": [{"image": p, "error": e} for p, e in self.failed], "faces": self.faces,
                "seconds": round(self.seconds, 3),
                "photos_per_s": round(self.indexed / self.seconds, 3) if self.seconds > 0 else None,
                "links_followed": self.links_followed, "skipped": self.skipped_counts(),
                "skipped_paths": [{"path": p, "reason": r} for p, r in self.skipped]}

    def skipped_counts(self) -> dict[str, int]:
        return {reason: sum(1 for _, r in self.skipped if r == reason) for reason in SKIP_REASONS}


@dataclass
class StoredFaces:
    """Faces read back from the index: parallel arrays, one row per face."""

    ids: np.ndarray  # int64 face ids
    photo_ids: np.ndarray
    paths: list[str]
    boxes: np.ndarray  # n x 4 float (x, y, w, h)
    embeddings: np.ndarray  # n x d float32, unit length
    clusters: np.ndarray  # int64; -1 noise, -2 not clustered, -3 unsorted (below the quality gate)
    scores: np.ndarray | None = None  # the detector's score of each face

    def __len__(self) -> int:
        return len(self.ids)


class FaceIndex:
    """A face database. `FaceIndex("faces.db")` opens (or creates) it; use it as a context manager or close it.

    index.update(["photos/"], embedder=..., detector=...) -> UpdateReport
    index.search(query_image, top=10), index.cluster(min_size=2), index.identify(...) via facerun.people
    """

    def __init__(self, path, create: bool = True, timeout: float | None = None):
        self.path = Path(path)
        timeout = BUSY_TIMEOUT if timeout is None else timeout
        self.notes: list[str] = []  # one-line notes for the command to print (a vector index rebuilt)
        self._changes: Changes | None = None  # faces added and removed by the run in progress
        self._vectors = None
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
            self.conn.text_factory = fsnames.from_sql  # a path that is not UTF-8 comes back as it was listed
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
        except sqlite3.OperationalError as e:  # locked, disk full, read-only: the file may well be a database
            # a reader of a database on a read-only file system (no -shm can be made there) reads it immutable
            self.conn = None if create else read_only_connection(self.path, timeout)
            if self.conn is None:
                raise storage_error(e, self.path, "open") from None
            with reported(self.path, "open"):
                self._check_schema()
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: not a face database ({e})") from None

    # ------------------------------------------------------------------------------------------------ basics
    def _check_schema(self) -> None:
        check_schema(self.conn, self.path)  # makes, upgrades (keeping every row) or refuses

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
        """Photos and faces present, and those of photos marked missing (left out of every result)."""
        rows = dict(((missing, (photos, faces)) for missing, photos, faces in self.conn.execute(
            "SELECT m.photo_id IS NOT NULL, COUNT(DISTINCT p.id), COUNT(f.id) FROM photos p "
            "LEFT JOIN missing m ON m.photo_id = p.id LEFT JOIN faces f ON f.photo_id = p.id GROUP BY 1")))
        present, missing = rows.get(0, (0, 0)), rows.get(1, (0, 0))
        return {"photos": present[0], "faces": present[1], "missing_photos": missing[0], "missing_faces": missing[1]}

    def missing_photos(self, roots: Iterable | None = None) -> list[dict]:
        """The photos marked missing (under `roots` when given): {"image", "missing_since", "faces", "sha256"}."""
        rows = self.conn.execute(
            "SELECT p.path, m.since, COUNT(f.id), p.sha256 FROM photos p JOIN missing m ON m.photo_id = p.id "
            "LEFT JOIN faces f ON f.photo_id = p.id GROUP BY p.id ORDER BY p.path").fetchall()
        inside = _inside([Path(r).resolve() for r in roots] if roots else None)
        return [{"image": path, "missing_since": since, "faces": faces, "sha256": sha}
                for path, since, faces, sha in rows if inside(path)]

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
                             f"another database or --embedder {stored['model']}")

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
    def update(self, sources: Iterable, embedder, detector, options: LibraryOptions | None = None,
               commit_every: int = COMMIT_EVERY, wait: float = 0.0, prune: bool = False, allow_missing: bool = False,
               progress: Callable[[str, int], None] | None = None,
               on_plan: Callable[[int, int], None] | None = None,
               stats: LibraryStats | None = None, keep_face: Callable | None = None) -> UpdateReport:
        """Bring the index up to date with the photos in `sources` (files, folders searched recursively; links
        followed as facerun.people.listing says).

        Unchanged photos (same size and mtime, or same sha256 when those differ) are skipped, changed ones
        re-indexed. Photos under a given folder that are no longer found are marked missing (kept with their faces,
        left out of results) and unmarked as they were when they come back unchanged; only prune=True deletes the
        missing photos under the given folders (nothing is deleted unasked, from the API as from the CLI).
        A folder that is empty, unreadable, or lost most of its indexed
        photos (see LOST_REFUSE_MIN) is refused with an InputError before anything changes, unless allow_missing.
        Holds the writer lock for the whole run (waits `wait` seconds for another writer, then refuses).
        on_plan(to_index, skipped) is called once the plan is made; progress(path, faces) once per photo indexed.
        options: how the photos to index become `PhotoFaces` (face.library.LibraryOptions: batch, all_faces,
        the engine; the Ray engine's come in any order), run by face.engines.run; stats: that run's LibraryStats;
        keep_face(face) -> bool: store only the faces it keeps (index --skip-small). The vector index beside the
        file is brought to the new generation at the end (facerun.people.vector_store)."""
        from ..face.engines import LibraryOptions, run
        from ..face.images import IMAGE_EXTENSIONS

        if commit_every < 1:
            raise InputError(f"photos per transaction must be 1 or more, not {commit_every}")
        start = time.perf_counter()
        sources = [Path(s) for s in sources]
        absent = [s for s in sources if not s.exists()]
        if absent:
            raise InputError(f"{absent[0]}: no such file or folder")
        report = UpdateReport()
        with WriterLock(self.path, wait=wait), self._tracking():
            self.check_embedder(embedder)
            listing = list_photos(sources, IMAGE_EXTENSIONS)
            report.skipped, report.links_followed = listing.skipped, listing.links_followed
            gone = self._gone(listing)
            if not allow_missing:
                self._refuse_lost(listing, gone, prune)  # before anything is written
            todo = self._plan(listing.photos, report)
            self._mark_missing(gone, report)
            if prune:
                report.removed, report.removed_faces = self._prune(listing.folders + listing.files)
            if on_plan is not None:
                on_plan(len(todo), report.unchanged)
            if todo:
                self.conn.execute("BEGIN IMMEDIATE")
                self._claim_model(embedder, detector)
                self.conn.execute("COMMIT")
            pending = []
            options = options if options is not None else LibraryOptions()
            for result in run(todo, detector, embedder, options, stats=stats) if todo else ():
                pending.append(result)
                if progress is not None:
                    progress(str(result.path), len(result.faces))
                if len(pending) >= commit_every:
                    self._write(pending, embedder.name, report, keep_face)
                    pending = []
            if pending:
                self._write(pending, embedder.name, report, keep_face)
        report.seconds = time.perf_counter() - start
        return report

    def prune(self, roots: Iterable | None = None, wait: float = 0.0) -> tuple[int, int]:
        """Delete the photos marked missing (under `roots` when given) and their faces: (photos, faces) deleted.
        Names stay (they are recorded against the faces' photo sha256 and box, see facerun.people.names)."""
        with WriterLock(self.path, wait=wait), self._tracking():
            return self._prune([Path(r).resolve() for r in roots] if roots else None)

    @contextlib.contextmanager
    def _tracking(self):
        """Record the faces written and removed, and bring the vector index in step once the run succeeded."""
        self._changes = Changes.start(self.conn) if "dim" in self.meta() else Changes(0, 0)
        try:
            yield
            note = self._changes.apply(self.path, self.conn)
            if note:
                self.notes.append(note)
        finally:
            self._changes, self._vectors = None, None

    def vectors(self, save: bool = True):
        """The vector index of every stored face (facerun.people.vectors.VectorIndex), checked against the database
        and rebuilt when missing, stale or unreadable (the note goes to self.notes); None while no faces were
        ever stored."""
        from .vector_store import face_count, generation

        state = (face_count(self.conn), generation(self.conn))
        if self._vectors is not None and self._vectors[0] == state:
            return self._vectors[1]
        index, note = open_index(self.path, self.conn, save=save)
        if note:
            self.notes.append(note)
        self._vectors = (state, index)
        return index

    def _gone(self, listing: Listing) -> list[tuple[int, str, bool]]:
        """(id, path, already missing) of the indexed photos under the roots that this listing did not find; those
        under a folder that could not be read are not known to be gone and are left out."""
        inside = _inside(listing.folders + listing.files)
        unreadable = _inside(listing.unreadable) if listing.unreadable else (lambda path: False)
        found = {str(p) for p in listing.photos}
        return [(photo_id, path, since is not None)
                for photo_id, path, since in self.conn.execute(
                    "SELECT p.id, p.path, m.since FROM photos p LEFT JOIN missing m ON m.photo_id = p.id")
                if path not in found and inside(path) and not unreadable(path)]

    def _refuse_lost(self, listing: Listing, gone, prune: bool) -> None:
        """Refuse a folder root that is unreadable, empty, or lost most of its photos: likely not mounted."""
        then = "deleted" if prune else "marked missing"
        present = [path for (path,) in self.conn.execute("SELECT path FROM photos WHERE id NOT IN "
                                                                 "(SELECT photo_id FROM missing)")]
        for root in listing.folders:
            inside = _inside([root])
            indexed = sum(1 for path in present if inside(path))
            held = f"{indexed} indexed photo{'' if indexed == 1 else 's'}"
            go_on = "pass --allow-missing to go on" + (f" (its {held} are then {then})" if indexed else "")
            if root in listing.unreadable_roots:
                raise InputError(f"{root}: cannot read the folder ({listing.unreadable_roots[root]}); nothing "
                                 f"changed: is the drive or share mounted? {go_on}")
            if not listing.under(root):
                raise InputError(f"{root}: holds no photos; nothing changed: is the drive or share mounted? {go_on}")
            lost = sum(1 for _, path, was_missing in gone if not was_missing and inside(path))
            if lost >= LOST_REFUSE_MIN and 2 * lost > indexed:
                raise InputError(f"{root}: {lost} of its {held} are gone since the last run; nothing changed: is "
                                 f"a drive or share not mounted, or a folder renamed? pass --allow-missing to go on "
                                 f"(those {lost} are then {then})")

    def _plan(self, listed: list[Path], report: UpdateReport) -> list[Path]:
        """The photos to (re-)index; counts the unchanged ones and refreshes their size and mtime, and unmarks
        missing photos found again with the same bytes (their faces and face ids as they were)."""
        known = {r[0]: r[1:] for r in self.conn.execute("SELECT p.path, p.id, p.size, p.mtime, p.sha256, m.since "
                                                        "FROM photos p LEFT JOIN missing m ON m.photo_id = p.id")}
        todo, touched, back = [], [], []
        for path in listed:
            row = known.get(str(path))
            if row is None:
                todo.append(path)
                continue
            photo_id, size, mtime, sha, missing_since = row
            try:
                st = path.stat()
            except OSError:
                todo.append(path)  # reported as unreadable when indexed
                continue
            if st.st_size == size and abs(st.st_mtime - mtime) < 1e-6:
                same = True
            elif st.st_size == size and _sha256(path) == sha:
                same = True  # touched or copied, same bytes
                touched.append((st.st_mtime, photo_id))
            else:
                same = False
                todo.append(path)
            if same and missing_since is not None:
                report.back += 1
                back.append((photo_id,))
            elif same:
                report.unchanged += 1
        if touched or back:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("UPDATE photos SET mtime = ? WHERE id = ?", touched)
            self.conn.executemany("DELETE FROM missing WHERE photo_id = ?", back)
            self.conn.execute("COMMIT")
        return todo

    def _mark_missing(self, gone, report: UpdateReport) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        newly = [(photo_id, now) for photo_id, _, was_missing in gone if not was_missing]
        if newly:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("INSERT OR IGNORE INTO missing(photo_id, since) VALUES (?, ?)", newly)
            self.conn.execute("COMMIT")
        report.missing = len(newly)

    def _prune(self, roots: list[Path] | None) -> tuple[int, int]:
        """Delete the missing photos (under `roots`, else all) and their faces; (photos, faces) deleted."""
        inside = _inside(roots)
        rows = self.conn.execute("SELECT p.id, p.path FROM photos p JOIN missing m ON m.photo_id = p.id")
        gone = [photo_id for photo_id, path in rows if inside(path)]
        if not gone:
            return 0, 0
        faces = 0
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(gone), 500):  # SQLite's limit on bound parameters
                chunk = gone[start : start + 500]
                marks = ",".join("?" * len(chunk))
                ids = [r[0] for r in self.conn.execute(f"SELECT id FROM faces WHERE photo_id IN ({marks})", chunk)]
                faces += len(ids)
                if self._changes is not None:
                    self._changes.remove(ids)
                # faces go with them (cascade); names stay in person_faces
                self.conn.execute(f"DELETE FROM photos WHERE id IN ({marks})", chunk)
            if faces:
                bump(self.conn)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # SQLite has rolled back already after a full disk or an I/O error
                self.conn.execute("ROLLBACK")
            raise
        return len(gone), faces

    def _write(self, results, model: str, report: UpdateReport, keep_face: Callable | None = None) -> None:
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
                key = fsnames.to_sql(r.path)  # the name's very bytes, UTF-8 or not
                old = self.conn.execute("SELECT id FROM photos WHERE path = CAST(? AS TEXT)", (key,)).fetchone()
                if old is not None:
                    if self._changes is not None:
                        self._changes.remove(r[0] for r in self.conn.execute("SELECT id FROM faces WHERE "
                                                                             "photo_id = ?", old))
                    self.conn.execute("DELETE FROM faces WHERE photo_id = ?", old)
                    self.conn.execute("UPDATE photos SET size=?, mtime=?, sha256=?, width=?, height=?, indexed_at=? "
                                      "WHERE id=?",
                                      (st.st_size, st.st_mtime, sha, r.width, r.height, now, old[0]))
                    self.conn.execute("DELETE FROM missing WHERE photo_id = ?", old)  # found again, changed
                    photo_id = old[0]
                    report.changed += 1
                else:
                    cursor = self.conn.execute(
                        "INSERT INTO photos(path, size, mtime, sha256, width, height, indexed_at) "
                        "VALUES (CAST(? AS TEXT), ?, ?, ?, ?, ?, ?)",
                        (key, st.st_size, st.st_mtime, sha, r.width, r.height, now))
                    photo_id = cursor.lastrowid
                    report.added += 1
                kept = [(face, vector) for face, vector in zip(r.faces, r.embeddings)
                        if keep_face is None or keep_face(face)]
                self.conn.executemany(
                    "INSERT INTO faces(photo_id, x, y, w, h, score, landmarks, model, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(photo_id, *(float(v) for v in face.box), float(face.score),
                      json.dumps([[round(float(x), 2), round(float(y), 2)] for x, y in face.landmarks]), model,
                      np.asarray(vector, dtype="<f4").tobytes())
                     for face, vector in kept])
                if self._changes is not None and kept:
                    self._changes.add([i for (i,) in self.conn.execute(
                        "SELECT id FROM faces WHERE photo_id = ? ORDER BY id", (photo_id,))], [v for _, v in kept])
                report.faces += len(kept)
            bump(self.conn)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # SQLite has rolled back already after a full disk or an I/O error
                self.conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------------------------------------- reads
    def faces(self, largest_per_photo: bool = False) -> StoredFaces:
        """Every stored face of the photos present (or only each photo's largest), with its embedding, in face-id
        order; the faces of photos marked missing are left out.

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
        # the faces of missing photos are kept but left out of every result
        query = ("SELECT f.id, f.photo_id, p.path, f.x, f.y, f.w, f.h, f.embedding, f.cluster, f.score "
                 "FROM faces f JOIN photos p ON p.id = f.photo_id "
                 "WHERE p.id NOT IN (SELECT photo_id FROM missing)")
        if largest_per_photo:
            query += (" AND f.id = (SELECT g.id FROM faces g WHERE g.photo_id = f.photo_id "
                      "ORDER BY g.w * g.h DESC, g.id LIMIT 1)")
        rows = self.conn.execute(query + " ORDER BY f.id").fetchall()
        dim = int(self.meta().get("dim", 0))
        if not rows:
            return StoredFaces(np.zeros(0, np.int64), np.zeros(0, np.int64), [], np.zeros((0, 4)),
                               np.zeros((0, dim), np.float32), np.zeros(0, np.int64), np.zeros(0))
        embeddings = np.frombuffer(b"".join(r[7] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return StoredFaces(
            ids=np.array([r[0] for r in rows], np.int64),
            photo_ids=np.array([r[1] for r in rows], np.int64),
            paths=[r[2] for r in rows],
            boxes=np.array([r[3:7] for r in rows], np.float64),
            embeddings=embeddings.astype(np.float32),
            clusters=np.array([-2 if r[8] is None else r[8] for r in rows], np.int64),
            scores=np.array([r[9] for r in rows], np.float64),
        )

    def photo_rows(self) -> list[dict]:
        """Every photo row, the missing ones too (`missing_since` set; None for those present)."""
        cursor = self.conn.execute("SELECT p.id, p.path, p.size, p.mtime, p.sha256, p.width, p.height, p.indexed_at, "
                                   "m.since AS missing_since FROM photos p LEFT JOIN missing m ON m.photo_id = p.id "
                                   "ORDER BY p.id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]

    # ------------------------------------------------------------------------------------- people (facade)
    def search(self, query, embedder=None, detector=None, top: int = 10, bgr: bool = False):
        """The photos of the person in `query` (an image path or array; its largest face), best cosine first."""
        from .search import search_index

        return search_index(self, query, embedder=embedder, detector=detector, top=top, bgr=bgr)

    def cluster(self, min_size: int = 2, save: bool = True, full: bool = False):
        """Group the stored faces by person: the new ones only, or all again with full=True; see
        facerun.people.cluster."""
        from .cluster import cluster_index

        return cluster_index(self, min_size=min_size, save=save, full=full)

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


def _inside(roots) -> Callable[[str], bool]:
    """path -> whether it is one of `roots` or below one (None: every path)."""
    if roots is None:
        return lambda path: True
    exact = {str(r) for r in roots}
    prefixes = tuple(str(r).rstrip(os.sep) + os.sep for r in roots)
    return lambda path: path in exact or path.startswith(prefixes)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["COMMIT_EVERY", "LOST_REFUSE_MIN", "SCHEMA", "SCHEMA_VERSION", "FaceIndex", "StoredFaces", "UpdateReport"]
