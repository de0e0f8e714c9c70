"""Put names on faces: a gallery of known people (one folder per person, or files named after them) and, for every
face of the photos asked about, the best-matching person or `unknown` below the model's threshold.

A person's score is the best cosine over that person's gallery faces (nearest neighbour), so a gallery may hold
several photos of one person from different angles. A face database is a gallery too: its people (named clusters,
facerun.people.persons) and the photos added under a known folder, their embeddings read from its vector index.
Faces below the quality gate (facerun.people.quality) are called unknown whatever they resemble.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError

UNKNOWN = "unknown"
_TRAILING_NUMBER = re.compile(r"[ _.-]*\d+$")


@dataclass
class Gallery:
    """Known faces: one row per gallery photo (its largest face)."""

    names: list[str]
    images: list[str]
    embeddings: np.ndarray  # n x d, unit length
    face_ids: np.ndarray | None = None  # the database's face ids of the rows (a gallery from a face database)
    index: object | None = None  # that database's VectorIndex, searched first when it is approximate (large)
    notes: list[str] = field(default_factory=list)  # one-line notes (the vector index rebuilt)

    @property
    def people(self) -> list[str]:
        return sorted(set(self.names))


@dataclass
class Identified:
    image: str
    box: tuple[float, float, float, float]
    name: str
    cosine: float

    def to_dict(self) -> dict:
        return {"image": self.image, "box": [round(float(v), 2) for v in self.box], "name": self.name,
                "cosine": round(float(self.cosine), 6)}


def person_name(path: Path, root: Path) -> str:
    """The person a gallery photo shows: its first folder under `root`, else its file name without a trailing
    number (alice.jpg, alice_2.jpg and alice-3.png are all 'alice')."""
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        rel = Path(Path(path).name)
    if len(rel.parts) > 1:
        return rel.parts[0]
    stem = _TRAILING_NUMBER.sub("", rel.stem)
    return stem or rel.stem


def gallery_from_dir(known_dir, embedder, detector, batch: int = 16,
                     progress: Callable | None = None) -> tuple[Gallery, list[tuple[str, str]]]:
    """Embed the largest face of every photo under `known_dir`; returns the gallery and the photos that gave
    nothing, (path, reason)."""
    from ..face.images import iter_images
    from ..face.library import iter_photo_faces

    root = _checked_dir(known_dir)
    names, images, vectors, skipped = [], [], [], []
    for result in iter_photo_faces(iter_images([root]), detector, embedder, batch=batch, all_faces=False,
                                   progress=progress):
        if result.error is not None or not result.faces:
            skipped.append((str(result.path), result.error or f"{result.path}: no face found"))
            continue
        names.append(person_name(result.path, root))
        images.append(str(result.path))
        vectors.append(result.embeddings[0])
    return _gallery(names, images, vectors, embedder.dim, root), skipped


def gallery_from_index(index, known_dir=None) -> Gallery:
    """The people of a face index: the faces of its named clusters (and faces a name was recorded on), and the
    largest face of each photo under `known_dir` (or the known folder recorded when photos were added with
    --known), named from its path there. Embeddings come from the database's vector index."""
    from .persons import named_faces

    root = known_dir or index.meta().get("known_root")
    names = named_faces(index.conn)
    if root is not None:
        inside = str(Path(root).resolve()).rstrip("/") + "/"
        stored = index.faces(largest_per_photo=True)
        for face_id, path in zip(stored.ids.tolist(), stored.paths):
            if path.startswith(inside) and face_id not in names:
                names[face_id] = person_name(Path(path), Path(root))
    if not names:
        raise InputError(f"{index.path}: no named people and no known photos (name its clusters with `facerun "
                         f"cluster --db {index.path} --name ID NAME`, or add known photos with --known DIR "
                         f"--known-db {index.path})")
    vectors = index.vectors()
    ids = np.array(sorted(names), np.int64)
    rows = vectors.rows(ids)
    ids, rows = ids[rows >= 0], rows[rows >= 0]
    paths = dict(index.conn.execute("SELECT f.id, p.path FROM faces f JOIN photos p ON p.id = f.photo_id"))
    return Gallery(names=[names[int(i)] for i in ids], images=[paths[int(i)] for i in ids],
                   embeddings=np.asarray(vectors.vectors[rows], np.float32), face_ids=ids,
                   index=vectors if vectors.kind != "exact" else None)


def build_gallery(embedder, detector, known_dir=None, known_db=None, batch: int = 16, wait: float = 0.0,
                  progress: Callable | None = None) -> tuple[Gallery, list[tuple[str, str]]]:
    """The gallery from `known_dir`, through the face index `known_db` when given: a later run then embeds only the
    photos added or changed since, and `known_db` alone reuses the gallery as it is."""
    if known_db is None:
        if known_dir is None:
            raise InputError("give the known people with --known DIR (and/or --known-db FILE)")
        return gallery_from_dir(known_dir, embedder, detector, batch=batch, progress=progress)
    from .index import FaceIndex

    with FaceIndex(known_db, create=known_dir is not None) as index:
        skipped = []
        if known_dir is not None:
            root = _checked_dir(known_dir)
            from ..face.library import LibraryOptions

            report = index.update([root], embedder=embedder, detector=detector,
                                  options=LibraryOptions(batch=batch, all_faces=False), wait=wait,
                                  progress=(lambda path, faces: progress(None)) if progress else None)
            index.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('known_root', ?)", (str(root),))
            skipped = list(report.failed)
        else:
            index.check_embedder(embedder)
        gallery = gallery_from_index(index, known_dir)
        gallery.notes.extend(index.notes)
        return gallery, skipped


def match(gallery: Gallery, vectors: np.ndarray, threshold: float) -> list[tuple[str, float]]:
    """(name, cosine) of each vector's best-matching person; `unknown` (with that cosine) below the threshold."""
    vectors = np.atleast_2d(np.asarray(vectors, np.float32))
    if len(vectors) == 0:
        return []
    if len(gallery.names) == 0:
        return [(UNKNOWN, float("nan"))] * len(vectors)
    if gallery.index is not None:
        best, top = _nearest_in_index(gallery, vectors)
        again = np.flatnonzero((best < 0) | (top < threshold))  # unknown faces get their exact best cosine
    else:
        best, top = np.zeros(len(vectors), np.int64), np.zeros(len(vectors), np.float32)
        again = np.arange(len(vectors))
    if len(again):
        cosines = vectors[again] @ gallery.embeddings.T
        best[again] = cosines.argmax(axis=1)
        top[again] = cosines[np.arange(len(again)), best[again]]
    return [(gallery.names[column] if cos >= threshold else UNKNOWN, float(cos)) for column, cos in zip(best, top)]


def _nearest_in_index(gallery: Gallery, vectors: np.ndarray, k: int = 64):
    """Gallery row and cosine of each vector's nearest gallery face among its k nearest faces of the whole database
    (the vector index's approximate search); -1 where none of those k is in the gallery."""
    found, cosines = gallery.index.search(vectors, k)
    order = np.argsort(gallery.face_ids)
    sorted_ids = gallery.face_ids[order]
    pos = np.clip(np.searchsorted(sorted_ids, found), 0, len(sorted_ids) - 1)
    hit = sorted_ids[pos] == found
    first = np.where(hit.any(1), hit.argmax(1), -1)  # results come best first
    rows = np.where(first >= 0, order[pos[np.arange(len(found)), np.maximum(first, 0)]], -1)
    return rows, np.where(first >= 0, cosines[np.arange(len(found)), np.maximum(first, 0)], -np.inf)


def identify_photos(gallery: Gallery, paths: Iterable, embedder, detector, threshold: float, batch: int = 16,
                    progress: Callable | None = None, on_error: Callable[[str], None] | None = None,
                    gate=None, on_photo: Callable | None = None) -> Iterator[Identified]:
    """One `Identified` per face of every photo, photo by photo in order; faces the gate (a
    facerun.people.quality.Gate) does not pass are unknown. on_photo(result, identified) after each photo."""
    from ..face.library import iter_photo_faces

    for result in iter_photo_faces(paths, detector, embedder, batch=batch, all_faces=True, progress=progress,
                                   keep_images=on_photo is not None, draft=on_photo is None):
        if result.error is not None:
            if on_error is not None:
                on_error(result.error)
            continue
        ok = gate.passes([f.box for f in result.faces], [f.score for f in result.faces]) if gate is not None \
            else np.ones(len(result.faces), bool)
        done = [Identified(image=str(result.path), box=tuple(float(v) for v in face.box),
                           name=name if passed else UNKNOWN, cosine=cos)
                for face, passed, (name, cos) in zip(result.faces, ok, match(gallery, result.embeddings, threshold))]
        if on_photo is not None:
            on_photo(result, done)
        yield from done


def _gallery(names, images, vectors, dim: int, root) -> Gallery:
    if not names:
        raise InputError(f"{root}: no known face found (one folder per person, or photos named after them)")
    return Gallery(names=names, images=images, embeddings=np.asarray(np.stack(vectors), np.float32).reshape(-1, dim))


def _checked_dir(known_dir) -> Path:
    root = Path(known_dir)
    if not root.is_dir():
        raise InputError(f"--known {root}: not a folder (one folder per person, or photos named after them)")
    return root.resolve()


__all__ = [
    "UNKNOWN",
    "Gallery",
    "Identified",
    "build_gallery",
    "gallery_from_dir",
    "gallery_from_index",
    "identify_photos",
    "match",
    "person_name",
]
