"""The vector index beside a face database: the same answers as brute force, kept in step, rebuilt when its files
are stale, missing or corrupt, and saved so that a reader never sees half of a save."""

from __future__ import annotations

import json

import numpy as np
import pytest

from facerun.people import vectors as V
from facerun.people.vectors import VectorIndex, exact_search, header_of

faiss_only = pytest.mark.skipif(not V.have_faiss(), reason="faiss-cpu not installed (pip install 'facerun[index]')")


def unit(rng, n, dim=32):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def people(n, dim=32, per=20, seed=0):
    """n faces of n // per seeded identities (centre + noise), and fresh queries of the same people."""
    rng = np.random.default_rng(seed)
    centres = unit(rng, n // per, dim)
    faces = centres[np.arange(n) % len(centres)] + 0.3 / np.sqrt(dim) * rng.standard_normal((n, dim))
    queries = centres[rng.integers(0, len(centres), 50)] + 0.3 / np.sqrt(dim) * rng.standard_normal((50, dim))
    norm = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return norm(faces), norm(queries)


def brute(ids, vectors, queries, k):
    sims = queries @ vectors.T
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(sims, order, 1)


def test_exact_search_is_the_sorted_product():
    rng = np.random.default_rng(1)
    data, queries = unit(rng, 500), unit(rng, 7)
    rows, cosines = exact_search(data, queries, 10)
    want_rows, want = brute(np.arange(500), data, queries, 10)
    assert np.array_equal(rows, want_rows) and np.allclose(cosines, want, atol=1e-6)
    rows, _ = exact_search(data[:4], queries, 10)  # fewer faces than k: all of them, best first
    assert rows.shape == (7, 4)


@pytest.mark.parametrize("ann", [False, pytest.param(True, marks=faiss_only)])
def test_add_search_remove_agree_with_brute_force(monkeypatch, ann):
    monkeypatch.setattr(V, "ANN_MIN", 1000)  # the IVF index from 1,000 faces, so a small test exercises it
    data, queries = people(3000)
    ids = np.arange(3000, dtype=np.int64) * 7 + 5  # face ids are not rows
    index = VectorIndex(ids[:2000], data[:2000], ann=ann)
    index.add(ids[2000:], data[2000:])
    assert index.kind == ("faiss-ivf" if ann else "exact")
    found, cosines = index.search(queries, 10)
    want, want_cos = brute(ids, data, queries, 10)
    overlap = np.mean([len(set(f) & set(w)) / 10 for f, w in zip(found, want)])
    assert overlap >= (0.99 if ann else 1.0)
    assert np.allclose(np.sort(cosines, 1), np.sort(want_cos, 1), atol=1e-4) if not ann else overlap >= 0.99
    gone = ids[::3]
    assert index.remove(gone) == len(gone)
    assert index.remove(gone) == 0
    found, _ = index.search(queries, 10)
    keep = ~np.isin(ids, gone)
    want, _ = brute(ids[keep], data[keep], queries, 10)
    assert not np.isin(found, gone).any()
    assert np.mean([len(set(f) & set(w)) / 10 for f, w in zip(found, want)]) >= (0.99 if ann else 1.0)
    one_ids, one_cos = index.search(queries[0], 3)  # one query: 1-d answers
    assert one_ids.shape == (3,) and one_cos[0] >= one_cos[2]


def test_a_face_added_twice_is_refused():
    index = VectorIndex(np.arange(3), unit(np.random.default_rng(0), 3), ann=False)
    with pytest.raises(Exception, match="added twice"):
        index.add([2], unit(np.random.default_rng(1), 1))


@faiss_only
def test_without_faiss_the_top_k_is_the_same(monkeypatch):
    """The IVF index and brute force (what runs without faiss) name the same nearest faces on identity data."""
    monkeypatch.setattr(V, "ANN_MIN", 500)
    data, queries = people(2000, seed=3)
    with_faiss = VectorIndex(np.arange(2000), data)
    monkeypatch.setattr(V, "have_faiss", lambda: False)
    without = VectorIndex(np.arange(2000), data)
    assert with_faiss.kind == "faiss-ivf" and without.kind == "exact"
    a, _ = with_faiss.search(queries, 5)
    b, _ = without.search(queries, 5)
    assert np.mean([len(set(x) & set(y)) / 5 for x, y in zip(a, b)]) >= 0.99


def open_index(db, ids, data, generation, monkeypatch=None):
    return VectorIndex.open(db, len(ids), generation, "mobilefacenet", data.shape[1], lambda: (ids, data))


@pytest.mark.parametrize("ann", [False, pytest.param(True, marks=faiss_only)])
def test_open_uses_a_fresh_index_and_rebuilds_a_missing_or_stale_one(tmp_path, monkeypatch, ann):
    monkeypatch.setattr(V, "ANN_MIN", 500 if ann else 10**9)
    db = tmp_path / "faces.db"
    data, queries = people(1000, seed=4)
    ids = np.arange(1000, dtype=np.int64)
    index, note = open_index(db, ids, data, 1)
    assert "missing" in note and "rebuilt from 1000 faces" in note and "\n" not in note
    assert header_of(db).is_file() and index.kind == ("faiss-ivf" if ann else "exact")
    again, note = open_index(db, ids, data, 1)
    assert note is None and len(again) == 1000 and again.kind == index.kind
    assert np.array_equal(again.search(queries, 5)[0], index.search(queries, 5)[0])

    # the database moved on (a face added, generation 2) while the index did not: rebuilt, and right
    more = np.concatenate([data, queries[:1]])
    fresh, note = open_index(db, np.arange(1001), more, 2)
    assert "stale" in note and len(fresh) == 1001
    assert fresh.search(queries[0], 1)[0][0] == 1000
    # same count, new generation (a face replaced): stale too, never silently the old vectors
    changed = more.copy()
    changed[1000] = queries[1]
    fresh, note = open_index(db, np.arange(1001), changed, 3)
    assert "stale" in note and fresh.search(queries[1], 1)[0][0] == 1000
    _, note = open_index(db, np.arange(1001), changed, 3)
    assert note is None
    _, note = VectorIndex.open(db, 1001, 3, "sface", 32, lambda: (np.arange(1001), changed))
    assert "for mobilefacenet (32-d), not sface" in note


@pytest.mark.parametrize("damage", ["header-garbage", "header-truncated", "vectors-truncated", "vectors-missing",
                                    "ann-garbage"])
def test_a_corrupt_index_is_rebuilt_with_a_note(tmp_path, monkeypatch, damage):
    ann = damage == "ann-garbage"
    if ann and not V.have_faiss():
        pytest.skip("faiss-cpu not installed")
    monkeypatch.setattr(V, "ANN_MIN", 500 if ann else 10**9)
    db = tmp_path / "faces.db"
    data, queries = people(1000, seed=5)
    ids = np.arange(1000, dtype=np.int64)
    open_index(db, ids, data, 7)
    header = header_of(db)
    files = json.loads(header.read_text())["files"]
    if damage == "header-garbage":
        header.write_bytes(b"\x00\xff not json")
    elif damage == "header-truncated":
        header.write_text(header.read_text()[:40])
    elif damage == "vectors-truncated":
        path = tmp_path / files["vectors"]
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "vectors-missing":
        (tmp_path / files["vectors"]).unlink()
    else:  # same size, wrong bytes: the header's sizes pass, faiss refuses it
        path = tmp_path / files["ann"]
        path.write_bytes(b"\x13" * path.stat().st_size)
    index, note = open_index(db, ids, data, 7)
    assert note is not None and "unreadable" in note and "rebuilt" in note and "\n" not in note
    want, _ = brute(ids, data, queries, 5)
    found, _ = index.search(queries, 5)
    assert np.mean([len(set(f) & set(w)) / 5 for f, w in zip(found, want)]) >= 0.99
    _, note = open_index(db, ids, data, 7)
    assert note is None  # the rebuilt one was saved


def test_a_save_is_atomic_and_leaves_only_its_own_files(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "ANN_MIN", 10**9)
    db = tmp_path / "faces.db"
    data, _ = people(200, seed=6)
    index = VectorIndex(np.arange(200), data, embedder="mobilefacenet", generation=1)
    index.save(path=db)
    first = sorted(p.name for p in tmp_path.iterdir())
    assert first[0] == "faces.db.vectors" and len(first) == 3
    # a save that fails half-way (the disk fills while writing the vectors) leaves the old index whole
    from facerun import io

    real = io.npy_writer
    calls = []

    def failing(array):
        calls.append(1)
        if len(calls) == 2:
            def write(handle):
                handle.write(b"partial")
                raise OSError(28, "No space left on device")
            return write
        return real(array)

    monkeypatch.setattr(io, "npy_writer", failing)
    index.add([500], data[:1])
    with pytest.raises(Exception, match="No space left"):
        index.save(generation=2)
    monkeypatch.setattr(io, "npy_writer", real)
    assert sorted(p.name for p in tmp_path.iterdir()) == first  # no temporary, no new file, the old header
    reopened, note = VectorIndex.open(db, 200, 1, "mobilefacenet", 32, lambda: pytest.fail("rebuilt"))
    assert note is None and len(reopened) == 200
    index.save(generation=2)  # the next save replaces the files and removes the old ones
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 3 and not set(names[1:]) & set(first[1:])
    reopened, note = VectorIndex.open(db, 201, 2, "mobilefacenet", 32, lambda: pytest.fail("rebuilt"))
    assert note is None and 500 in reopened.ids


@faiss_only
def test_an_index_saved_with_faiss_opens_without_it_and_answers_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "ANN_MIN", 500)
    db = tmp_path / "faces.db"
    data, queries = people(1000, seed=7)
    ids = np.arange(1000, dtype=np.int64)
    saved, _ = open_index(db, ids, data, 1)
    assert saved.kind == "faiss-ivf"
    monkeypatch.setattr(V, "have_faiss", lambda: False)
    plain, note = open_index(db, ids, data, 1)
    assert note is None and plain.kind == "exact"  # the stored vectors, searched by brute force
    a, _ = saved.search(queries, 5)
    b, _ = plain.search(queries, 5)
    assert np.mean([len(set(x) & set(y)) / 5 for x, y in zip(a, b)]) >= 0.99
