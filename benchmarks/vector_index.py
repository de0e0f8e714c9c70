"""Vector-search libraries compared on seeded synthetic face identities: build, query, recall, memory.

    python benchmarks/vector_index.py [--sizes 100000,1000000] [--dims 128] [--libs usearch,hnswlib,faiss-hnsw]
                                      [--queries 300] [--threads 2] [--crossover] [--json]

Identities: random unit centres, 20 faces each, a face = centre + N(0, 0.05^2) per coordinate, normalised (the data
issue 38 measured HDBSCAN on). Queries are new faces of stored identities, as a search for a person is. Every row
is measured in a forked child, so "peak MB" is what that library added above the shared data (VmHWM - VmRSS at the
child's start) and one library's allocations do not count against the next. Query times are one query at a time on
one thread (how `search` asks); "graph q/s" is batch k=16 queries on --threads threads (how a k-NN graph for
clustering is built). ef is the smallest of 16, 32, 64, ... 512 that reaches recall@10 >= 0.99 against brute force.
--crossover prints brute force (numpy, one thread) against the chosen library's query time at small sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

K = 10
EFS = (16, 32, 64, 128, 256, 512)


def identities(n: int, dim: int, per_person: int = 20, noise: float = 0.05, seed: int = 0):
    """(vectors n x dim float32 unit, labels) — in 100k slices so a million rows never need a float64 copy."""
    rng = np.random.default_rng(seed)
    people = max(1, n // per_person)
    centres = rng.standard_normal((people, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = np.arange(n, dtype=np.int64) % people
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 100_000):
        block = centres[labels[s : s + 100_000]] + noise * rng.standard_normal((min(100_000, n - s), dim), np.float32)
        out[s : s + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out, labels, centres


def exact_top(data: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    out = np.empty((len(queries), k), np.int64)
    for s in range(0, len(queries), 64):
        sims = queries[s : s + 64] @ data.T
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, part, 1), axis=1)
        out[s : s + 64] = np.take_along_axis(part, order, 1)
    return out


# ----------------------------------------------------------------------------------------------- libraries
class Usearch:
    name = "usearch"

    def build(self, data, threads):
        from usearch.index import Index

        self.index = Index(ndim=data.shape[1], metric="ip", dtype="f32", connectivity=16, expansion_add=128)
        self.index.add(np.arange(len(data), dtype=np.uint64), data, threads=threads)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def query(self, q, k):
        return np.asarray(self.index.search(q, k, threads=1).keys, np.int64)

    def batch(self, qs, k, threads):
        return self.index.search(qs, k, threads=threads).keys

    def nbytes(self):
        return self.index.memory_usage


class Hnswlib:
    name = "hnswlib"

    def build(self, data, threads):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=data.shape[1])
        self.index.init_index(max_elements=len(data), M=16, ef_construction=128, random_seed=0)
        self.index.add_items(data, np.arange(len(data)), num_threads=threads)

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def query(self, q, k):
        return self.index.knn_query(q, k, num_threads=1)[0][0].astype(np.int64)

    def batch(self, qs, k, threads):
        return self.index.knn_query(qs, k, num_threads=threads)[0]

    def nbytes(self):
        return None


class FaissHnsw:
    name = "faiss-hnsw"

    def build(self, data, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.faiss = faiss
        self.index = faiss.IndexHNSWFlat(data.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 128
        self.index.add(data)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def query(self, q, k):
        self.faiss.omp_set_num_threads(1)
        return self.index.search(q[None], k)[1][0]

    def batch(self, qs, k, threads):
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(qs, k)[1]

    def nbytes(self):
        return None


class FaissIvf:
    """IVF-Flat: a different trade (k-means cells, exact inside the probed cells); nprobe plays ef's part."""

    name = "faiss-ivf"

    def build(self, data, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.faiss = faiss
        cells = int(4 * np.sqrt(len(data)))
        quantizer = faiss.IndexFlatIP(data.shape[1])
        self.index = faiss.IndexIVFFlat(quantizer, data.shape[1], cells, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        self.index.train(data[rng.choice(len(data), min(len(data), 40 * cells), replace=False)])
        self.index.add(data)
        self.quantizer = quantizer

    def set_ef(self, ef):
        self.index.nprobe = ef

    def query(self, q, k):
        self.faiss.omp_set_num_threads(1)
        return self.index.search(q[None], k)[1][0]

    def batch(self, qs, k, threads):
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(qs, k)[1]

    def nbytes(self):
        return None


LIBS = {c.name: c for c in (Usearch, Hnswlib, FaissHnsw, FaissIvf)}


def _status(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)]))


def measure(lib_name: str, data, queries, truth, threads: int) -> dict:
    lib = LIBS[lib_name]()
    start_rss = _status("VmRSS")
    t0 = time.perf_counter()
    lib.build(data, threads)
    build_s = time.perf_counter() - t0
    row = {"lib": lib_name, "n": len(data), "dim": data.shape[1], "build_s": round(build_s, 1)}
    for ef in EFS:
        lib.set_ef(ef)
        found = np.array([lib.query(q, K) for q in queries[:100]])
        if recall(found, truth[:100]) >= 0.99 or ef == EFS[-1]:
            break
    times, found = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(lib.query(q, K))
        times.append((time.perf_counter() - t) * 1000)
    graph = np.tile(queries, (max(1, 5000 // len(queries)), 1))
    t = time.perf_counter()
    lib.batch(graph, 16, threads)
    graph_qps = len(graph) / (time.perf_counter() - t)
    nbytes = lib.nbytes()
    row.update({"ef": ef, "p50_ms": round(float(np.median(times)), 3),
                "p99_ms": round(float(np.percentile(times, 99)), 3),
                "recall10": round(recall(np.array(found), truth), 4), "graph_qps": round(graph_qps),
                "peak_mb": round(_status("VmHWM") - start_rss), "rss_mb": round(_status("VmRSS") - start_rss),
                "index_mb": None if nbytes is None else round(nbytes / 2**20)})
    return row


def in_child(fn, *args) -> dict:
    """fn(*args) in a forked child (its own peak memory); the row comes back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, send, leave without running the parent's atexit handlers
        os.close(read)
        try:
            out = json.dumps(fn(*args)).encode()
        except BaseException as e:  # a missing library or a crash is a row, not a hung parent
            out = json.dumps({"lib": args[0], "error": f"{type(e).__name__}: {e}"}).encode()
        with os.fdopen(write, "wb") as f:
            f.write(out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"lib": args[0], "error": "child died"}


def brute_ms(data, queries) -> float:
    from facerun.people.vectors import exact_search

    times = []
    for q in queries[:50]:
        t = time.perf_counter()
        exact_search(data, q, K)
        times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))


def crossover(lib_name: str, dim: int, threads: int) -> list[dict]:
    rows = []
    for n in (1_000, 2_000, 5_000, 10_000, 20_000, 50_000):
        data, _, centres = identities(n, dim, seed=n)
        queries, _, _ = identities(100, dim, seed=n + 1)
        lib = LIBS[lib_name]()
        t = time.perf_counter()
        lib.build(data, threads)
        build = time.perf_counter() - t
        lib.set_ef(64)
        times = []
        for q in queries:
            t = time.perf_counter()
            lib.query(q, K)
            times.append((time.perf_counter() - t) * 1000)
        rows.append({"n": n, "dim": dim, "brute_p50_ms": round(brute_ms(data, queries), 3),
                     "index_p50_ms": round(float(np.median(times)), 3), "index_build_s": round(build, 2)})
    return rows


def table(rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(str(r.get(c, "")).rjust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--dims", default="128")
    parser.add_argument("--libs", default="usearch,hnswlib,faiss-hnsw,faiss-ivf")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for dim in (int(d) for d in args.dims.split(",")):
        for n in (int(s) for s in args.sizes.split(",")):
            data, labels, centres = identities(n, dim)
            # new faces of stored people: the centre of a stored face's person plus fresh noise
            rng = np.random.default_rng(1)
            who = labels[rng.choice(n, args.queries, replace=False)]
            queries = centres[who] + 0.05 * rng.standard_normal((args.queries, dim), np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            truth = exact_top(data, queries)
            for lib in args.libs.split(","):
                row = in_child(measure, lib, data, queries, truth, args.threads)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            del data
    cols = ["lib", "n", "dim", "build_s", "ef", "p50_ms", "p99_ms", "recall10", "graph_qps", "peak_mb", "rss_mb",
            "index_mb"]
    out = {"rows": rows}
    if args.crossover:
        out["crossover"] = [r for d in (int(x) for x in args.dims.split(","))
                            for r in crossover(args.libs.split(",")[0], d, args.threads)]
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at the end; threads {args.threads}")
    print(table(rows, cols))
    if args.crossover:
        print("\nbrute force (numpy, one thread) against the index, one query, k=10")
        print(table(out["crossover"], ["n", "dim", "brute_p50_ms", "index_p50_ms", "index_build_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
