"""Put names on faces: a gallery of known people (one folder per person, or files named after them) and, for every
face of the photos asked about, the best-matching person or `unknown` below the model's threshold.

A person's score is the best cosine over that person's gallery faces (nearest neighbour), so a gallery may hold
several photos of one person from different angles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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
    """The largest face of each photo in a face index, named from its path under `known_dir` (or under the folder
    recorded when the index was built as a gallery)."""
    root = known_dir or index.meta().get("known_root")
    if root is None:
        raise InputError(f"{index.path}: not a gallery of known people (build it with `facerun identify --known DIR "
                         f"--known-db {index.path}`)")
    stored = index.faces(largest_per_photo=True)
    names = [person_name(Path(p), Path(root)) for p in stored.paths]
    return _gallery(names, list(stored.paths), list(stored.embeddings), stored.embeddings.shape[1], root)


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
        return gallery_from_index(index, known_dir), skipped


def match(gallery: Gallery, vectors: np.ndarray, threshold: float) -> list[tuple[str, float]]:
    """(name, cosine) of each vector's best-matching person; `unknown` (with that cosine) below the threshold."""
    vectors = np.atleast_2d(np.asarray(vectors, np.float32))
    if len(vectors) == 0:
        return []
    if len(gallery.names) == 0:
        return [(UNKNOWN, float("nan"))] * len(vectors)
    cosines = vectors @ gallery.embeddings.T
    best = cosines.argmax(axis=1)
    out = []
    for row, column in enumerate(best):
        cos = float(cosines[row, column])
        out.append((gallery.names[column] if cos >= threshold else UNKNOWN, cos))
    return out


def identify_photos(gallery: Gallery, paths: Iterable, embedder, detector, threshold: float, batch: int = 16,
                    progress: Callable | None = None, on_error: Callable[[str], None] | None = None
                    ) -> Iterator[Identified]:
    """One `Identified` per face of every photo, photo by photo in order."""
    from ..face.library import iter_photo_faces

    for result in iter_photo_faces(paths, detector, embedder, batch=batch, all_faces=True, progress=progress):
        if result.error is not None:
            if on_error is not None:
                on_error(result.error)
            continue
        for face, (name, cos) in zip(result.faces, match(gallery, result.embeddings, threshold)):
            yield Identified(image=str(result.path), box=tuple(float(v) for v in face.box), name=name, cosine=cos)


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
