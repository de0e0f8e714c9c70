"""Recall@10 and query time of facerun's VectorIndex (faiss IVF-Flat) at several probe counts.

    python benchmarks/ivf_probes.py [--n 1000000] [--dim 128] [--probes 250,500,1000] [--queries 200]

Queries are stored faces with fresh noise (0.05 a coordinate) added, as benchmarks/grouping.py asks them: harder
than vector_index.py's (a person's centre plus noise), so this is what sets vectors.SEARCH_PROBES.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vector_index import exact_top, identities  # noqa: E402


def main(argv=None) -> int:
    from facerun.people.vectors import VectorIndex

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--probes", default="250,500,1000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    data, _, _ = identities(args.n, args.dim)
    index = VectorIndex(np.arange(len(data)), data)
    rng = np.random.default_rng(3)
    probe = data[rng.choice(len(data), args.queries, replace=False)]
    probe = probe + 0.05 * rng.standard_normal(probe.shape, np.float32)
    probe /= np.linalg.norm(probe, axis=1, keepdims=True)
    truth = exact_top(data, probe)
    print(f"{args.n} faces, {args.dim}-d, {index.kind}, {index._ann.nlist if index._ann else 0} cells; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("nprobe  recall10  p50_ms  p99_ms")
    for nprobe in (int(p) for p in args.probes.split(",")):
        times, found = [], []
        for q in probe:
            t = time.perf_counter()
            found.append(index.search(q, 10, nprobe=nprobe)[0])
            times.append((time.perf_counter() - t) * 1000)
        recall = np.mean([len(set(f.tolist()) & set(w.tolist())) / 10 for f, w in zip(found, truth)])
        print(f"{nprobe:6d}  {recall:8.4f}  {np.median(times):6.3f}  {np.percentile(times, 99):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
