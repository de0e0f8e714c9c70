"""Search a face index by example: the photos of the person in a query photo, ranked by cosine similarity; and a
person's photos by name.

`search_index` asks the database's vector index (facerun.people.vectors: exact below ANN_MIN faces, faiss IVF above)
for the nearest faces, then SQLite for their photos, leaving out missing photos; it widens the search until it has
`top` photos or the cosines fall below the threshold. `top_photos` / `bench_search` are the brute-force reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ImageError, InputError


@dataclass
class Match:
    """One photo found: its best-matching face."""

    image: str
    box: tuple[float, float, float, float]
    cosine: float
    face_id: int

    def to_dict(self) -> dict:
        return {"image": self.image, "box": [round(float(v), 2) for v in self.box],
                "cosine": round(float(self.cosine), 6), "face_id": int(self.face_id)}


def query_face(query, embedder, detector, bgr: bool = False):
    """(unit embedding, box) of the largest face in `query` (an image path or an array)."""
    from ..face.embed import largest
    from ..face.images import load_image

    label = str(query) if isinstance(query, (str, Path)) else "query image"
    image = load_image(query) if isinstance(query, (str, Path)) else np.asarray(query)
    if bgr and not isinstance(query, (str, Path)):
        image = image[:, :, ::-1]
    faces = largest(detector.detect(image))
    if not faces:
        raise ImageError(f"{label}: no face found")
    vector = embedder.embed(embedder.align(image, faces[0].landmarks))[0]
    return vector, tuple(float(v) for v in faces[0].box)


def top_photos(embeddings: np.ndarray, photo_ids: np.ndarray, vector: np.ndarray, top: int):
    """Indices (into the rows) of the best face of each of the `top` best photos, and their cosines."""
    if top < 1:
        raise InputError(f"--top must be 1 or more, not {top}")
    n = len(embeddings)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    cosines = _product(embeddings, np.asarray(vector, dtype=np.float32))
    k = min(n, top * 4)
    while True:
        # partition first: sorting every score of a million faces would cost more than the product itself
        part = np.argpartition(-cosines, k - 1)[:k] if k < n else np.arange(n)
        order = part[np.argsort(-cosines[part], kind="stable")]
        _, first = np.unique(photo_ids[order], return_index=True)
        best = order[np.sort(first)][:top]
        if len(best) >= top or k >= n:
            return best, cosines[best]
        k = min(n, k * 4)


def search_index(index, query, embedder=None, detector=None, top: int = 10, bgr: bool = False,
                 exclude_path: str | None = None, threshold: float | None = None) -> list[Match]:
    """The `top` photos of the index whose faces best match the largest face in `query`, at cosine `threshold` or
    more when given."""
    from ..face.detect import Detector

    embedder = embedder if embedder is not None else index.embedder()
    index.check_embedder(embedder)
    detector = detector if detector is not None else Detector(device=embedder.requested_device)
    vector, _ = query_face(query, embedder, detector, bgr=bgr)
    return search_db(index, vector, top=top, exclude_path=exclude_path, threshold=threshold)


def search_db(index, vector: np.ndarray, top: int = 10, exclude_path: str | None = None,
              threshold: float | None = None) -> list[Match]:
    """Rank the photos of a FaceIndex against one unit embedding, through its vector index."""
    if top < 1:
        raise InputError(f"--top must be 1 or more, not {top}")
    vectors = index.vectors()
    if vectors is None or len(vectors) == 0:
        return []
    k, found = min(len(vectors), 4 * top), {}
    while True:
        ids, cosines = vectors.search(np.asarray(vector, np.float32), k)
        keep = ids >= 0
        ids, cosines = ids[keep], cosines[keep]
        rows = _face_rows(index.conn, ids)
        found = {}
        for face_id, cos in zip(ids.tolist(), cosines.tolist()):
            row = rows.get(face_id)  # None: a missing photo's face
            if row is None or (threshold is not None and cos < threshold) or row[1] == exclude_path:
                continue
            if row[0] not in found:
                found[row[0]] = Match(image=row[1], box=row[2], cosine=float(cos), face_id=face_id)
        low = threshold is not None and len(cosines) and cosines[-1] < threshold
        if len(found) >= top or k >= len(vectors) or low:
            return sorted(found.values(), key=lambda m: -m.cosine)[:top]
        k = min(len(vectors), 4 * k)


def _face_rows(conn, ids) -> dict[int, tuple]:
    """face id -> (photo id, path, box) of the faces of present photos among `ids`."""
    out = {}
    ids = [int(i) for i in ids]
    for start in range(0, len(ids), 500):  # SQLite's limit on bound parameters
        chunk = ids[start : start + 500]
        for face_id, photo_id, path, *box in conn.execute(
                "SELECT f.id, f.photo_id, p.path, f.x, f.y, f.w, f.h FROM faces f JOIN photos p ON p.id = f.photo_id "
                f"WHERE f.id IN ({','.join('?' * len(chunk))}) AND p.id NOT IN (SELECT photo_id FROM missing)", chunk):
            out[face_id] = (photo_id, path, tuple(float(v) for v in box))
    return out


def person_photos(index, name: str) -> list[Match]:
    """The photos of the person `name` (a named cluster, and faces a name was recorded on), one row per face, by
    path; cosine is NaN (there is no query)."""
    from .persons import person_face_ids

    rows = _face_rows(index.conn, person_face_ids(index.conn, name))
    return sorted((Match(image=path, box=box, cosine=float("nan"), face_id=face_id)
                   for face_id, (_, path, box) in rows.items()), key=lambda m: (m.image, m.face_id))


def search_vector(stored, vector: np.ndarray, top: int = 10, exclude_path: str | None = None) -> list[Match]:
    """Rank the photos of `stored` (facerun.people.index.StoredFaces) against one unit embedding."""
    keep = np.ones(len(stored), bool)
    if exclude_path is not None:
        keep = np.array([p != exclude_path for p in stored.paths], bool)
    rows = np.flatnonzero(keep)
    best, cosines = top_photos(stored.embeddings[rows], stored.photo_ids[rows], vector, top)
    return [Match(image=stored.paths[rows[i]], box=tuple(stored.boxes[rows[i]]), cosine=float(c),
                  face_id=int(stored.ids[rows[i]])) for i, c in zip(best, cosines)]


def bench_search(sizes=(10_000, 100_000, 1_000_000), dim: int = 512, queries: int = 20, top: int = 10,
                 faces_per_photo: int = 2, seed: int = 0) -> list[dict]:
    """Query time of brute-force search over random unit vectors: {"faces", "dim", "matrix_mb", "median_ms",
    "p90_ms", "product_ms"} per size (product_ms: the matrix-vector product alone)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        matrix = _random_unit(rng, n, dim)
        photo_ids = np.arange(n, dtype=np.int64) // faces_per_photo
        probes = _random_unit(rng, queries, dim)
        top_photos(matrix, photo_ids, probes[0], top)  # warm the caches and the allocator
        full, product = [], []
        for q in probes:
            start = time.perf_counter()
            top_photos(matrix, photo_ids, q, top)
            full.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            _product(matrix, q)
            product.append((time.perf_counter() - start) * 1000)
        rows.append({"faces": n, "dim": dim, "matrix_mb": round(matrix.nbytes / 2**20, 1),
                     "median_ms": round(float(np.median(full)), 3), "p90_ms": round(float(np.percentile(full, 90)), 3),
                     "product_ms": round(float(np.median(product)), 3)})
        del matrix
    return rows


def _product(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    from .. import blas

    # one BLAS thread on a busy machine: a second thread waiting for a time slice costs more than it brings
    with blas.threads_for(matrix.size, blas.default_threads()):
        return matrix @ vector


def _random_unit(rng, n: int, dim: int) -> np.ndarray:
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 100_000):  # in slices, so a million rows never need a float64 copy
        block = rng.standard_normal((min(100_000, n - start), dim), dtype=np.float32)
        out[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


__all__ = ["Match", "bench_search", "person_photos", "query_face", "search_db", "search_index", "search_vector",
           "top_photos"]
