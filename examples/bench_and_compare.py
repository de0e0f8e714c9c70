"""Benchmark two small built-in replicas, save the result, and compare two saved results: the Python API of
`facerun bench` and `facerun bench --compare`.

    python examples/bench_and_compare.py OUT_DIR [--baseline OLD.json] [--repeat 5]

Without --baseline the benchmark runs twice and the two runs are compared, which shows the run-to-run noise of this
machine (differences inside it mean nothing). With --baseline, the new run is compared with a saved one, from
another machine or an older facerun, say.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import facerun
from facerun.bench import bench

MODELS = ["sface-arch-small", "auraface-arch-small"]  # random-weight replicas: nothing to download


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for the saved JSON results")
    ap.add_argument("--baseline", type=Path, help="a saved result (facerun bench --save) to compare against")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per row")
    ap.add_argument("--paths", default="cpu,gpu,onnxruntime", help="paths to time (see facerun bench --help)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    settings = bench.Settings(paths=tuple(args.paths.split(",")), repeat=args.repeat, warmup=1, budget=10.0)
    specs = bench.discover(MODELS)

    def run_and_save(name: str) -> Path:
        result = bench.run(specs, settings)
        path = args.out / name
        result.save(path)  # written atomically: a reader never sees half a file
        for r in result.rows:
            timing = f"{r.per_face_ms:8.2f} ms/face" if r.per_face_ms is not None else f"skipped: {r.note}"
            print(f"{name}: {r.model:20} {r.path:12} {timing}")
        return path

    first = args.baseline if args.baseline else run_and_save("run-a.json")
    second = run_and_save("run-b.json")

    a, b = bench.load_result(first), bench.load_result(second)
    print(f"\nA = {first} ({a['machine']['cpu']}), B = {second} ({b['machine']['cpu']})")
    print(f"{'model':20} {'path':12} {'A ms/face':>10} {'B ms/face':>10} {'B speed-up':>10}")
    for r in bench.compare(a, b):
        def ms(v):
            return f"{v:10.2f}" if v is not None else f"{'-':>10}"

        speed = f"{r.speedup:9.2f}x" if r.speedup is not None else f"{'-':>10}"
        print(f"{r.model:20} {r.path:12} {ms(r.a_ms)} {ms(r.b_ms)} {speed}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except facerun.FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
