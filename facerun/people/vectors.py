"""A vector index beside a face database: exact below ANN_MIN faces, faiss IVF-Flat above, kept in step by
count and generation.

Files, next to `faces.db`:
- `faces.db.vectors`: a small JSON header (format, count, generation, embedder, dim, kind, the data files and their
  sizes). It is the commit point: written last, atomically, so a reader sees the old index or the new one whole.
- `faces.db.vectors.<token>.ids.npy` / `.f32.npy`: every face id and unit embedding (memory-mapped on open), always
  kept so that search stays exact and possible without faiss; `.<token>.faiss` the IVF index when there is one.
  A save writes new files under a fresh token, renames the header over the old one, then deletes the old files, so a
  kill at any point leaves a consistent index (perhaps stale, which `open` sees and rebuilds).

The database side keeps a generation number that moves with every write to `faces`; `open` compares the header's
count and generation (and embedder, dim) with the database's and rebuilds from the faces when they differ or the files
are missing or unreadable, returning a one-line note. Why faiss IVF-Flat (docs/bench/vector-index-2core.txt): on
2 shared cores it builds a million 128-d faces in 17 s where HNSW graphs took 240 s (hnswlib) to 460 s (faiss), so
a stale index is rebuilt in seconds; it answers at 3.3 ms (recall@10 0.993) at a million, removes faces, and faiss
ships binary wheels (hnswlib 0.8.0 is a source package that needs a C++ compiler; usearch was the slowest here).
HNSW answers faster (0.15 ms) and holds recall on noisy 512-d data where IVF must probe most cells (the table's
512-d rows): the reason to revisit this for 512-d embedders at a million faces. Vectors inside the probed cells are
compared exactly, so the cosines are the exact ones. faiss is optional (`pip install 'facerun[index]'`): without it
every search is brute force, with the same answers (exact ones).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import FacerunError, InputError
from ..io import write_json, write_together

FORMAT = 1
# faces: below this brute force stays exact and under ~1 ms a query (128-d, one thread), with nothing to build or
# retrain on each update; an IVF probe is faster per query at every size (0.03 ms at 10k) but costs 0.7-3 s to
# build at 10k-50k (benchmarks/vector_index.py --crossover, docs/bench/vector-index-2core.txt)
ANN_MIN = 50_000
# cells probed per query, as a share of the cells: at 1M faces (4,000 cells, 128-d synthetic identities, a stored
# face with fresh noise as the query) a 16th gave recall@10 0.976 at 1.7 ms, an 8th 0.993 at 3.3 ms, a 4th 0.997 at
# 6.2 ms against brute force (benchmarks/ivf_probes.py, docs/bench/vector-index-2core.txt): an 8th, at least 16
SEARCH_PROBES = 8
# for a k-NN graph to cluster, far fewer: a person's faces are each other's nearest by a wide margin, so missing
# some of the 10 nearest rarely cuts a person (benchmarks/grouping.py measures the groups against the truth)
GRAPH_PROBES = 128
RETRAIN_GROWTH = 4  # rebuild the cells when the index holds this many times the faces they were trained on
KINDS = ("exact", "faiss-ivf")


def have_faiss() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def exact_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cosines), each len(queries) x min(k, n), best first, of unit `queries` against unit `vectors`."""
    from .. import blas

    queries = np.atleast_2d(np.asarray(queries, np.float32))
    n = len(vectors)
    k = min(k, n)
    rows = np.empty((len(queries), k), np.int64)
    sims_out = np.empty((len(queries), k), np.float32)
    if k == 0:
        return rows, sims_out
    step = max(1, (1 << 22) // max(1, n))  # query rows per product: a block of scores stays in 16 MB (cache-sized)
    for s in range(0, len(queries), step):
        q = queries[s : s + step]
        with blas.threads_for(q.size * n, blas.default_threads()):
            sims = q @ np.asarray(vectors).T
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < n else np.broadcast_to(np.arange(n), sims.shape)
        top = np.take_along_axis(sims, part, 1)
        order = np.argsort(-top, axis=1, kind="stable")
        rows[s : s + len(q)] = np.take_along_axis(part, order, 1)
        sims_out[s : s + len(q)] = np.take_along_axis(top, order, 1)
    return rows, sims_out


class VectorIndex:
    """Face ids and their unit embeddings, searchable by cosine.

    VectorIndex.build(ids, vectors) -> in memory; VectorIndex.open(db_path, count, generation, embedder, dim,
    source) -> (index, note or None); .add(ids, vectors), .remove(ids), .search(queries, k) -> (ids, cosines),
    .save(generation) writes it beside the database."""

    def __init__(self, ids, vectors, embedder: str = "", generation: int = 0, path=None, ann: bool | None = None,
                 ann_min: int | None = None):
        self.ids = np.asarray(ids, np.int64)
        self.vectors = np.asarray(vectors, np.float32)
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.ids):
            raise InputError(f"vector index: {len(self.ids)} ids for vectors of shape {self.vectors.shape}")
        self.dim = self.vectors.shape[1]
        self.embedder = embedder
        self.generation = int(generation)
        self.path = None if path is None else Path(path)
        self.use_ann = have_faiss() if ann is None else (ann and have_faiss())
        self._ann = None  # faiss index over the same rows; ids are the face ids
        self._trained_on = 0
        self.ann_min = ANN_MIN if ann_min is None else ann_min
        self._row_of: dict[int, int] | None = None
        self._refresh_ann()

    @classmethod
    def build(cls, ids, vectors, **kwargs) -> VectorIndex:
        return cls(ids, vectors, **kwargs)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def kind(self) -> str:
        return "faiss-ivf" if self._ann is not None else "exact"

    # ------------------------------------------------------------------------------------------------ ANN
    def _refresh_ann(self, force: bool = False) -> None:
        n = len(self.ids)
        if not self.use_ann or n < self.ann_min or n < 2:
            self._ann = None
            return
        if self._ann is not None and not force and n <= RETRAIN_GROWTH * self._trained_on:
            return
        self._ann = _train_ivf(self.ids, self.vectors)
        self._trained_on = n

    # ------------------------------------------------------------------------------------------------ edits
    def add(self, ids, vectors) -> None:
        ids = np.asarray(ids, np.int64)
        vectors = np.asarray(vectors, np.float32).reshape(len(ids), self.dim)
        if len(ids) == 0:
            return
        if len(np.unique(ids)) != len(ids) or np.isin(ids, self.ids).any():
            raise InputError("vector index: a face id added twice (remove it first)")
        self.ids = np.concatenate([self.ids, ids])
        self.vectors = np.concatenate([self.vectors, vectors])
        self._row_of = None
        if self._ann is not None and len(self.ids) <= RETRAIN_GROWTH * self._trained_on:
            _threads(len(ids))
            self._ann.add_with_ids(vectors, ids)
        else:
            self._refresh_ann()

    def remove(self, ids) -> int:
        """Drop these face ids (those not held are ignored); returns how many were dropped."""
        ids = np.asarray(ids, np.int64)
        keep = ~np.isin(self.ids, ids)
        dropped = int((~keep).sum())
        if not dropped:
            return 0
        gone = self.ids[~keep]
        self.ids, self.vectors = self.ids[keep], np.asarray(self.vectors)[keep]
        self._row_of = None
        if self._ann is not None and len(self.ids) >= self.ann_min:
            import faiss

            self._ann.remove_ids(faiss.IDSelectorBatch(gone))
        else:
            self._refresh_ann()
        return dropped

    # ------------------------------------------------------------------------------------------------ reads
    def search(self, queries, k: int = 10, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(face ids, cosines) of the k nearest faces of each query, best first: 1-d results for one 1-d query,
        len(queries) x k' (k' = min(k, faces)) for a 2-d batch. nprobe: IVF cells to look in (default: an 8th of
        them, at least 16; `probes(GRAPH_PROBES)` for a clustering graph)."""
        if k < 1:
            raise InputError(f"k must be 1 or more, not {k}")
        q = np.asarray(queries, np.float32)
        single = q.ndim == 1
        q = np.atleast_2d(q)
        if q.shape[1] != self.dim:
            raise InputError(f"vector index holds {self.dim}-d vectors, the query is {q.shape[1]}-d")
        kk = min(k, len(self.ids))
        if self._ann is None:
            rows, cosines = exact_search(self.vectors, q, kk)
            found = self.ids[rows]
        else:
            self._ann.nprobe = nprobe if nprobe is not None else self.probes()
            _threads(len(q))
            cosines, found = self._ann.search(q, kk)
            found = found.astype(np.int64)
        return (found[0], cosines[0]) if single else (found, cosines)

    def probes(self, share: int = SEARCH_PROBES) -> int:
        """IVF cells probed when 1/share of them are: at least 16 (all when there are fewer)."""
        if self._ann is None:
            return 0
        cells = self._ann.nlist
        return min(cells, max(16, cells // share))

    def rows(self, ids) -> np.ndarray:
        """Row of each face id in .ids / .vectors (-1 where not held)."""
        if self._row_of is None:
            self._row_of = {int(i): r for r, i in enumerate(self.ids.tolist())}
        return np.array([self._row_of.get(int(i), -1) for i in np.asarray(ids).ravel()], np.int64).reshape(
            np.shape(ids))

    # ------------------------------------------------------------------------------------------------ files
    @classmethod
    def open(cls, db_path, expected_count: int, expected_generation: int, embedder: str, dim: int,
             source: Callable[[], tuple[np.ndarray, np.ndarray]], save: bool = True,
             ann: bool | None = None) -> tuple[VectorIndex, str | None]:
        """The index beside `db_path` if it matches the database (count, generation, embedder, dim), else one
        rebuilt from source() -> (face ids, unit embeddings) and, with save=True, saved; the note (one line, for
        the caller to print) says why it was rebuilt, None when the stored one was used."""
        header_path = header_of(db_path)
        try:
            index = cls._load(header_path, ann)
        except FileNotFoundError:
            why = "missing"
        except _Corrupt as e:
            why = f"unreadable ({e})"
        else:
            if index.embedder != embedder or index.dim != dim:
                why = f"for {index.embedder} ({index.dim}-d), not {embedder} ({dim}-d)"
            elif len(index) != expected_count or index.generation != expected_generation:
                why = (f"stale ({len(index)} faces at generation {index.generation}, the database has "
                       f"{expected_count} at {expected_generation})")
            else:
                return index, None
        ids, vectors = source()
        index = cls(ids, vectors, embedder=embedder, generation=expected_generation, path=header_path, ann=ann)
        if len(index) != expected_count:
            raise FacerunError(f"{db_path}: {len(index)} faces read, the database counts {expected_count}")
        if save:
            index.save()
        return index, f"{header_path.name}: vector index {why}; rebuilt from {len(index)} faces ({index.kind})"

    @classmethod
    def _load(cls, header_path: Path, ann: bool | None) -> VectorIndex:
        try:
            text = header_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError) as e:
            raise _Corrupt(f"cannot read the header: {e}") from None
        try:
            head = json.loads(text)
            files, sizes = head["files"], head["sizes"]
            count, dim = int(head["count"]), int(head["dim"])
            if head["format"] != FORMAT or head["kind"] not in KINDS:
                raise _Corrupt(f"format {head['format']}, kind {head['kind']}")
        except (ValueError, KeyError, TypeError) as e:
            raise _Corrupt(f"bad header: {e}") from None
        folder = header_path.parent
        for role, name in files.items():
            if name is None:
                continue
            if not _DATA_NAME.fullmatch(name) or not name.startswith(header_path.name + "."):
                raise _Corrupt(f"bad file name {name!r}")
            try:
                size = (folder / name).stat().st_size
            except OSError:
                raise _Corrupt(f"{name} is missing") from None
            if size != sizes.get(role):
                raise _Corrupt(f"{name} is {size} bytes, the header says {sizes.get(role)}")
        try:
            ids = np.load(folder / files["ids"], mmap_mode="r", allow_pickle=False)
            vectors = np.load(folder / files["vectors"], mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise _Corrupt(f"cannot read the arrays: {e}") from None
        if ids.shape != (count,) or vectors.shape != (count, dim) or vectors.dtype != np.float32:
            raise _Corrupt(f"arrays {ids.shape} / {vectors.shape}, the header says {count} x {dim}")
        index = cls.__new__(cls)
        index.ids, index.vectors = np.asarray(ids), vectors
        index.dim, index.embedder, index.generation = dim, str(head["embedder"]), int(head["generation"])
        index.path, index._row_of = header_path, None
        index.use_ann = have_faiss() if ann is None else (ann and have_faiss())
        index._ann, index._trained_on, index.ann_min = None, int(head.get("trained_on", 0)), ANN_MIN
        if index.use_ann and files.get("ann") is not None:
            import faiss

            try:
                index._ann = faiss.read_index(str(folder / files["ann"]))
            except RuntimeError as e:
                raise _Corrupt(f"cannot read {files['ann']}: {str(e).splitlines()[0]}") from None
            if index._ann.ntotal != count or index._ann.d != dim:
                raise _Corrupt(f"{files['ann']} holds {index._ann.ntotal} x {index._ann.d}")
        else:
            index._refresh_ann()  # faiss installed since, or an exact index that has grown past ANN_MIN
        return index

    def save(self, generation: int | None = None, path=None) -> Path:
        """Write the index beside its database (header last, atomically); returns the header's path."""
        if generation is not None:
            self.generation = int(generation)
        header = Path(path) if path is not None else self.path
        if header is None:
            raise InputError("vector index: no path to save to")
        header = header_of(header) if not header.name.endswith(".vectors") else header
        token = secrets.token_hex(6)
        base = f"{header.name}.{token}"
        files = {"ids": f"{base}.ids.npy", "vectors": f"{base}.f32.npy",
                 "ann": f"{base}.faiss" if self._ann is not None else None}
        from ..io import npy_writer

        targets = [(header.parent / files["ids"], npy_writer(np.ascontiguousarray(self.ids))),
                   (header.parent / files["vectors"], npy_writer(np.ascontiguousarray(self.vectors)))]
        if self._ann is not None:
            import faiss

            blob = faiss.serialize_index(self._ann)
            targets.append((header.parent / files["ann"], lambda f: f.write(blob.tobytes())))
        write_together(targets)
        sizes = {role: (header.parent / name).stat().st_size for role, name in files.items() if name}
        write_json(header, {"format": FORMAT, "count": len(self.ids), "generation": self.generation,
                            "embedder": self.embedder, "dim": self.dim, "kind": self.kind,
                            "trained_on": self._trained_on, "files": files, "sizes": sizes})
        self.path = header
        _remove_old(header, keep=set(files.values()))
        return header


class _Corrupt(Exception):
    pass


_DATA_NAME = re.compile(r".+\.vectors\.[0-9a-f]{12}\.(ids\.npy|f32\.npy|faiss)")


def header_of(db_path) -> Path:
    db_path = Path(db_path)
    return db_path if db_path.name.endswith(".vectors") else db_path.with_name(db_path.name + ".vectors")


def _remove_old(header: Path, keep: set[str]) -> None:
    """Delete data files of earlier saves (a reader that has them mapped keeps its view: unlinking is safe)."""
    for entry in os.scandir(header.parent):
        if entry.name.startswith(header.name + ".") and _DATA_NAME.fullmatch(entry.name) and entry.name not in keep:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _threads(queries: int) -> None:
    """One OpenMP thread for one query (spinning up the team costs more than it brings), the cores for a batch."""
    import faiss

    from .. import blas

    faiss.omp_set_num_threads(1 if queries < 16 else blas.default_threads())


def _train_ivf(ids: np.ndarray, vectors: np.ndarray):
    import faiss

    n, dim = vectors.shape
    cells = max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants 39 training faces a cell
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, cells, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(0)  # seeded sample: the same faces give the same cells
    sample = np.ascontiguousarray(vectors[np.sort(rng.choice(n, min(n, 40 * cells), replace=False))])
    _threads(n)
    index.train(sample)
    for s in range(0, n, 200_000):  # in slices: no full contiguous copy of a memory-mapped array
        index.add_with_ids(np.ascontiguousarray(vectors[s : s + 200_000]), np.ascontiguousarray(ids[s : s + 200_000]))
    return index


__all__ = ["ANN_MIN", "GRAPH_PROBES", "SEARCH_PROBES", "VectorIndex", "exact_search", "have_faiss", "header_of"]
