"""Grouping at scale on seeded synthetic identities: full re-cluster, then 10,000 new faces assigned incrementally.

    python benchmarks/grouping.py [--sizes 100000,1000000] [--dim 128] [--new 10000] [--json]

The faces are benchmarks/vector_index.py's identities (20 a person, noise 0.05). Per size: the time and peak memory
(VmHWM of a forked child, data included) of `group_all` over n faces, of `assign_new` for --new faces more (new
faces of the stored people and of new people, half each) through a faiss index over all of them, and purity / ARI
of both against the true identities. Each size runs in its own child so peaks do not carry over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vector_index import _status, identities, in_child, table  # noqa: E402


def scores(truth, labels) -> dict:
    """purity_and_ari's figures (facerun.people.cluster), vectorised: its per-cluster loop is quadratic at 1M."""
    from sklearn.metrics import adjusted_rand_score

    truth, labels = np.asarray(truth), np.asarray(labels)
    kept = labels >= 0
    pairs = np.unique(np.stack([labels[kept], truth[kept]]), axis=1, return_counts=True)
    (pl, _), counts = pairs
    best = np.zeros(pl.max(initial=0) + 1, np.int64)
    np.maximum.at(best, pl, counts)
    singletons = np.where(labels < 0, labels.max(initial=0) + 1 + np.arange(len(labels)), labels)
    return {"purity": round(float(best.sum() / max(1, kept.sum())), 4),
            "ari": round(float(adjusted_rand_score(truth, singletons)), 4), "noise": int((~kept).sum())}


def run(n: int, dim: int, new: int) -> dict:
    from facerun.people import grouping as G
    from facerun.people.vectors import GRAPH_PROBES, VectorIndex

    total = n + new
    data, truth, centres = identities(total, dim)
    # the last `new` rows arrive later; half of them are people already seen (their ids < n // 20 exist above)
    rng = np.random.default_rng(2)
    order = np.concatenate([np.arange(n), n + rng.permutation(new)])
    data, truth = data[order], truth[order]
    t = time.perf_counter()
    full = G.group_all(data[:n])
    full_s = time.perf_counter() - t
    row = {"n": n, "dim": dim, "full_s": round(full_s, 1),
           **{f"full_{k}": v for k, v in scores(truth[:n], full).items()}}
    labels = np.concatenate([full, np.full(new, -2)])
    t = time.perf_counter()
    index = VectorIndex(np.arange(total), data)  # as the database's index holds every face once they are added
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    probes = index.probes(GRAPH_PROBES)  # the graph's probe count: votes need near faces, not the exact top 10
    inc = G.assign_new(data, labels, neighbours=G.neighbours_of(index, np.arange(total), nprobe=probes))
    inc_s = time.perf_counter() - t
    row.update({"new": new, "index_build_s": round(add_s, 1), "incremental_s": round(inc_s, 1),
                **{f"inc_{k}": v for k, v in scores(truth, inc).items()}, "peak_mb": round(_status("VmHWM"))})
    row.update(search_figures(index, data, truth))
    return row


def search_figures(index, data, truth, queries: int = 300) -> dict:
    """Save, reopen (timed), and search the reopened index one query at a time against brute force."""
    import tempfile

    from facerun.people.vectors import VectorIndex, exact_search

    rng = np.random.default_rng(3)
    probe = data[rng.choice(len(data), queries, replace=False)]
    probe = probe + 0.05 * rng.standard_normal(probe.shape, np.float32)
    probe /= np.linalg.norm(probe, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as folder:
        db = os.path.join(folder, "faces.db")
        t = time.perf_counter()
        index.save(generation=1, path=db)
        save_s = time.perf_counter() - t
        t = time.perf_counter()
        opened, note = VectorIndex.open(db, len(index), 1, "", data.shape[1], lambda: None)
        open_s = time.perf_counter() - t
        assert note is None, note
        times, found = [], []
        for q in probe:
            t = time.perf_counter()
            found.append(opened.search(q, 10)[0])
            times.append((time.perf_counter() - t) * 1000)
        want = index.ids[exact_search(data, probe, 10)[0]]
        recall = np.mean([len(set(f.tolist()) & set(w.tolist())) / 10 for f, w in zip(found, want)])
        size_mb = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 2**20
    return {"kind": opened.kind, "save_s": round(save_s, 1), "open_s": round(open_s, 2),
            "search_p50_ms": round(float(np.median(times)), 3),
            "search_p99_ms": round(float(np.percentile(times, 99)), 3),
            "recall10": round(float(recall), 4), "files_mb": round(size_mb)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        row = in_child(run, n, args.dim, args.new)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at the end")
    print(table(rows, ["n", "dim", "full_s", "full_purity", "full_ari", "full_noise", "new", "index_build_s",
                       "incremental_s", "inc_purity", "inc_ari", "inc_noise", "peak_mb"]))
    print(table(rows, ["n", "dim", "kind", "save_s", "open_s", "search_p50_ms", "search_p99_ms", "recall10",
                       "files_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
