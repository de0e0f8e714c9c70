"""Clustering and search at library scale, on seeded synthetic identities (`facerun bench search`'s clustering rows).

Each size and dimension runs in a child process, so that its peak memory (VmHWM, the data included) is its own: the
faces (20 a person, unit centres plus noise 0.05 a coordinate at 128-d, seeded; at other dimensions scaled by
sqrt(128 / dim), so that the noise vector's length, hence how alike two faces of one person are (cosine about
0.75), is the same at 512-d: 0.05 a coordinate at 512-d would put two faces of a person at cosine 0.44, below any
match threshold) are grouped from scratch (grouping.group_all), put in a
VectorIndex, saved and reopened (the index beside a database), `new` more faces (half of people already seen, half
new) placed incrementally (grouping.assign_new through the index), and 200 queries (stored faces with fresh noise)
timed one by one and checked against brute force (recall@10). Purity and the adjusted Rand index of both clusterings
are against the true identities.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

PER_PERSON = 20
NOISE = 0.05


def identities(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n x dim unit float32 vectors, person of each) — made in slices, so a million rows need no float64 copy."""
    rng = np.random.default_rng(seed)
    people = max(1, n // PER_PERSON)
    centres = rng.standard_normal((people, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    person = rng.permutation(np.arange(n, dtype=np.int64) % people)
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 100_000):
        block = centres[person[s : s + 100_000]]
        block = block + NOISE * np.sqrt(128 / dim) * rng.standard_normal(block.shape, dtype=np.float32)
        out[s : s + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out, person


def purity_ari(truth: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Purity of the clustered faces and ARI (noise faces as singletons), vectorised for a million faces."""
    truth, labels = np.asarray(truth, np.int64), np.asarray(labels, np.int64)
    n = len(labels)
    single = np.where(labels < 0, labels.max(initial=0) + 1 + np.arange(n), labels)
    _, a = np.unique(single, return_inverse=True)
    _, b = np.unique(truth, return_inverse=True)
    pair, counts = np.unique(a * (b.max() + 1) + b, return_counts=True)
    best = np.zeros(a.max() + 1, np.int64)
    np.maximum.at(best, pair // (b.max() + 1), counts)
    kept = labels >= 0
    purity = float(best[np.unique(a[kept])].sum() / max(1, kept.sum())) if kept.any() else 0.0

    def pairs(x):
        x = np.asarray(x, np.float64)
        return float((x * (x - 1) / 2).sum())

    index = pairs(counts)
    rows, cols = pairs(np.bincount(a)), pairs(np.bincount(b))
    expected = rows * cols / max(1.0, n * (n - 1) / 2)
    top = (rows + cols) / 2 - expected
    return purity, float((index - expected) / top) if top else 1.0


def scale_row(n: int, dim: int, new: int, queries: int = 200, seed: int = 0) -> dict:
    """One row: faces n (+ new), dim; times in s, search in ms, sizes in MiB."""
    from .grouping import assign_new, group_all, neighbours_of
    from .vectors import GRAPH_PROBES, VectorIndex, exact_search

    data, truth = identities(n + new, dim, seed)
    t = time.perf_counter()
    full = group_all(data[:n])
    full_s = time.perf_counter() - t
    row = {"faces": n, "dim": dim, "full_s": round(full_s, 2)}
    row["full_purity"], row["full_ari"] = (round(v, 4) for v in purity_ari(truth[:n], full))
    with tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "faces.db")
        t = time.perf_counter()
        index = VectorIndex(np.arange(n + new), data)  # as the database's index holds the new faces once indexed
        index.save(generation=1, path=db)
        row["index_build_s"] = round(time.perf_counter() - t, 2)
        row["index_mb"] = round(sum(e.stat().st_size for e in os.scandir(folder)) / 2**20, 1)
        t = time.perf_counter()
        index, note = VectorIndex.open(db, n + new, 1, "", dim, lambda: None)
        row["open_s"] = round(time.perf_counter() - t, 3)
        labels = np.concatenate([full, np.full(new, -2, np.int64)])
        t = time.perf_counter()
        grown = assign_new(data, labels, neighbours=neighbours_of(index, np.arange(n + new),
                                                                  nprobe=index.probes(GRAPH_PROBES)))
        row["new"], row["incremental_s"] = new, round(time.perf_counter() - t, 2)
        row["inc_purity"], row["inc_ari"] = (round(v, 4) for v in purity_ari(truth, grown))
        rng = np.random.default_rng(seed + 1)
        probe = data[rng.choice(n + new, min(queries, n + new), replace=False)]
        probe = probe + NOISE * np.sqrt(128 / dim) * rng.standard_normal(probe.shape, dtype=np.float32)
        probe /= np.linalg.norm(probe, axis=1, keepdims=True)
        index.search(probe[0], 10)  # warm
        times, found = [], []
        for q in probe:
            t = time.perf_counter()
            found.append(index.search(q, 10)[0])
            times.append((time.perf_counter() - t) * 1000)
        want = exact_search(data, probe, 10)[0]
    row.update({"kind": index.kind, "search_p50_ms": round(float(np.median(times)), 3),
                "search_p99_ms": round(float(np.percentile(times, 99)), 3),
                "recall10": round(float(np.mean([len(set(f.tolist()) & set(w.tolist())) / 10
                                                 for f, w in zip(found, want)])), 4),
                "peak_mb": round(_peak_mb())})
    return row


def bench_scale(sizes=(10_000,), dims=(128, 512), new: int | None = None) -> list[dict]:
    """A row per (size, dim), each measured in a forked child; new: faces added incrementally (default n/10, at most
    10,000)."""
    rows = []
    for n in sizes:
        for dim in dims:
            rows.append(_in_child(scale_row, n, dim, new if new is not None else min(10_000, max(1, n // 10))))
    return rows


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _in_child(fn, *args) -> dict:
    """fn(*args) in a child process of its own (its own peak memory), started fresh ("spawn"): a forked child of a
    process whose BLAS or OpenMP threads are running can deadlock on their locks (a `bench search` in pytest did)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        try:
            return pool.apply(_row, (fn, *args))
        except Exception as e:  # a failure is a row, not a traceback
            return {"faces": args[0], "dim": args[1], "error": f"{type(e).__name__}: {e}"}


def _row(fn, *args) -> dict:
    return fn(*args)


__all__ = ["bench_scale", "identities", "purity_ari", "scale_row"]
