"""Photos in, faces and embeddings out: the one loop that the index, identify and search commands stand on.

`iter_photo_faces` is written plainly here (one photo after another, faces batched across photos for the
embedder). A pipelined version (decoding on worker threads, the GPU overlapped with the CPU) can replace its body
without changing its contract, so callers rely only on what its docstring promises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ImageError, InputError
from .images import load_image


@dataclass
class PhotoFaces:
    """The faces of one photo. `error` is set (and `faces` empty) when the photo could not be read."""

    path: Path
    width: int = 0
    height: int = 0
    faces: list = field(default_factory=list)  # facerun.face.detect.Face: score, box (x, y, w, h), landmarks 5x2
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32), repr=False)  # n x d
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def iter_photo_faces(
    paths: Iterable,
    detector,
    embedder,
    batch: int = 16,
    all_faces: bool = True,
    progress: Callable[[PhotoFaces], None] | None = None,
) -> Iterator[PhotoFaces]:
    """Detect, align and embed the faces of each photo; yield one `PhotoFaces` per photo.

    Contract (kept by any faster implementation):
    - Order: exactly one result per input path, in input order, whatever runs in parallel underneath.
    - Faces: every face the detector finds (all_faces=True) or only the largest (False), best score first;
      `embeddings[i]` (float32, unit length, `embedder.dim` wide) belongs to `faces[i]`. A photo without a face
      gives an empty list and a 0 x d array; that is not an error.
    - Errors: a missing, unreadable or non-image file gives a result with `error` set to a one-line message and the
      iteration goes on. Any other failure (a model or GPU error) raises, and the results already yielded stand.
    - Memory: bounded by about `batch` aligned faces plus the photos waiting for them, never the whole list;
      decoded photos are dropped once their faces are cropped. Results are yielded once their faces are embedded,
      so a consumer may lag the detector by up to one batch of faces.
    - Batching: faces are embedded `batch` at a time across photo boundaries (one network call, one GPU submission).
    - progress(result) is called once per photo, in order, just before it is yielded.
    """
    if batch < 1:
        raise InputError(f"batch must be 1 or more, not {batch}")
    dim = embedder.dim
    waiting: list[tuple[PhotoFaces, int]] = []  # photos whose faces are not embedded yet, with their face count
    crops: list[np.ndarray] = []

    def finish() -> Iterator[PhotoFaces]:
        vectors = embedder.embed(np.stack(crops), batch=batch) if crops else np.zeros((0, dim), np.float32)
        crops.clear()
        start = 0
        for result, count in waiting:
            result.embeddings = np.ascontiguousarray(vectors[start : start + count], dtype=np.float32)
            start += count
            if progress is not None:
                progress(result)
            yield result
        waiting.clear()

    for raw in paths:
        result = PhotoFaces(path=Path(raw))
        try:
            rgb = load_image(result.path)
        except (ImageError, InputError) as e:
            result.error = str(e)
            result.embeddings = np.zeros((0, dim), np.float32)
            if waiting:  # keep the input order: results ahead of this one go first
                yield from finish()
            if progress is not None:
                progress(result)
            yield result
            continue
        result.height, result.width = int(rgb.shape[0]), int(rgb.shape[1])
        faces = detector.detect(rgb)
        if not all_faces and faces:
            faces = [max(faces, key=lambda f: float(f.box[2]) * float(f.box[3]))]
        result.faces = list(faces)
        crops.extend(embedder.align(rgb, face.landmarks) for face in result.faces)
        waiting.append((result, len(result.faces)))
        del rgb
        if len(crops) >= batch:
            yield from finish()
    if waiting:
        yield from finish()


__all__ = ["PhotoFaces", "iter_photo_faces"]
