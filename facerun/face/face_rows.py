"""Faces as table rows (pyarrow), and a Parquet folder written whole or left clearly marked incomplete.

One row per face; a photo without a face is one row with `faces` 0 and no box, and a photo that could not be read
is one row with `error` set, so every photo given appears in the output at least once. Columns:
image, width, height, faces (faces in the photo), face (this face's number in it), box (x, y, w, h), score,
landmarks (5 x [x, y]), model, embedding (float32, unit length), error, device (what the actor ran on, and why).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import FacerunError, InputError

MARKER = "_facerun.json"  # inside the folder: what wrote it, the counts, and whether it is complete
PART_ROWS = 1_000_000  # rows per part file
COLUMNS = ("image", "width", "height", "faces", "face", "box", "score", "landmarks", "model", "embedding", "error",
           "device")


def schema():
    import pyarrow as pa

    return pa.schema([
        ("image", pa.string()), ("width", pa.int32()), ("height", pa.int32()), ("faces", pa.int32()),
        ("face", pa.int32()), ("box", pa.list_(pa.float64(), 4)), ("score", pa.float32()),
        ("landmarks", pa.list_(pa.list_(pa.float32(), 2))), ("model", pa.string()),
        ("embedding", pa.list_(pa.float32())), ("error", pa.string()), ("device", pa.string()),
    ])


def photo_rows(photo, image: str, model: str, device: str) -> list[dict]:
    """The rows of one `PhotoFaces`: one per face, or one saying why there is none."""
    base = {"image": image, "width": photo.width, "height": photo.height, "faces": len(photo.faces),
            "model": model, "device": device, "error": photo.error}
    if not photo.faces:
        return [{**base, "face": None, "box": None, "score": None, "landmarks": None, "embedding": None}]
    rows = []
    for number, (face, vector) in enumerate(zip(photo.faces, photo.embeddings)):
        rows.append({**base, "face": number, "box": [float(v) for v in face.box], "score": float(face.score),
                     "landmarks": np.asarray(face.landmarks, np.float32).tolist(),
                     "embedding": np.asarray(vector, np.float32)})
    return rows


def rows_table(rows: list[dict]):
    import pyarrow as pa

    columns = {name: [row[name] for row in rows] for name in COLUMNS}
    return pa.Table.from_pydict(columns, schema=schema())


def table_photos(table) -> int:
    """How many photos a table's rows finish: each photo has exactly one row with face 0 or no face number."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.fill_null(pc.equal(table.column("face"), 0), True)).as_py() or 0)


class PhotoCollector:
    """Rows back into `PhotoFaces`, a photo once all its rows are in (a photo's rows may arrive split)."""

    def __init__(self):
        self.partial: dict[str, list[dict]] = {}

    def add(self, table):
        from .faces import Face
        from .library import PhotoFaces

        for row in table.to_pylist():
            rows = self.partial.setdefault(row["image"], [])
            rows.append(row)
            if len(rows) < max(1, row["faces"]):
                continue
            del self.partial[row["image"]]
            rows.sort(key=lambda r: r["face"] or 0)
            first = rows[0]
            faces = [Face(score=r["score"], box=tuple(r["box"]), landmarks=np.asarray(r["landmarks"], np.float32))
                     for r in rows if r["face"] is not None]
            vectors = [np.asarray(r["embedding"], np.float32) for r in rows if r["face"] is not None]
            dim = len(vectors[0]) if vectors else 0
            yield PhotoFaces(path=Path(first["image"]), width=first["width"] or 0, height=first["height"] or 0,
                             faces=faces, embeddings=np.stack(vectors) if vectors else np.zeros((0, dim), np.float32),
                             error=first["error"])


# ------------------------------------------------------------------------------------------------ the folder


def check_parquet_out(path: Path) -> None:
    """Before any work: --out names a .parquet folder that is new, or one this writer made (it gets replaced)."""
    if path.suffix.lower() != ".parquet":
        raise InputError(f"--out {path}: the Ray engine writes a Parquet folder, name it x.parquet")
    from ..io import check_output_folder

    if not path.parent.is_dir():
        raise InputError(f"--out {path}: folder {path.parent} does not exist")
    if path.exists() and not (path.is_dir() and (path / MARKER).is_file()):
        raise InputError(f"--out {path} exists and is not a folder facerun wrote; move it or choose another name")
    check_output_folder(path.parent, f"--out {path.name}: the folder", create=False)  # writable, tried for real


class ParquetFolder:
    """Part files written under `<out>.incomplete` as rows arrive; `finish` renames the folder to `<out>` (replacing
    an earlier run's), `abandon` leaves it under the .incomplete name with a marker saying so and why."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.temp = self.out.with_name(self.out.name + ".incomplete")
        try:
            if self.temp.exists():  # an earlier run that died: its rows are not this run's
                shutil.rmtree(self.temp)
            self.temp.mkdir()
        except OSError as e:
            raise FacerunError(f"cannot make {self.temp}: {e.strerror or e}") from None
        self.writer = None
        self.parts = 0
        self.rows_in_part = 0
        self.counts = {"photos": 0, "rows": 0}

    def write(self, table) -> None:
        try:
            self._write(table)
        except OSError as e:  # a full disk or a vanished mount, after the work began
            raise FacerunError(f"cannot write {self.temp}: {e.strerror or e}") from None

    def _write(self, table) -> None:
        import pyarrow.parquet as pq

        if self.writer is None or self.rows_in_part >= PART_ROWS:
            self._close_part()
            self.writer = pq.ParquetWriter(self.temp / f"part-{self.parts:05d}.parquet", schema())
            self.parts += 1
        self.writer.write_table(table.cast(schema()))
        self.rows_in_part += table.num_rows
        self.counts["rows"] += table.num_rows
        self.counts["photos"] += table_photos(table)

    def _close_part(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.rows_in_part = 0

    def _mark(self, summary: dict) -> None:
        text = json.dumps({"writer": "facerun", "columns": list(COLUMNS), **self.counts, **summary}, indent=2)
        (self.temp / MARKER).write_text(text + "\n")

    def finish(self, summary: dict) -> Path:
        self._close_part()
        self._mark({"complete": True, **summary})
        old = self.out.with_name(self.out.name + ".old")
        if self.out.exists():
            if old.exists():
                shutil.rmtree(old)
            os.replace(self.out, old)
        os.replace(self.temp, self.out)
        if old.exists():
            shutil.rmtree(old)
        return self.out

    def abandon(self, why: str, summary: dict) -> Path:
        self._close_part()
        self._mark({"complete": False, "why": why, **summary})
        return self.temp


__all__ = ["COLUMNS", "MARKER", "ParquetFolder", "PhotoCollector", "check_parquet_out", "photo_rows", "rows_table",
           "schema"]
