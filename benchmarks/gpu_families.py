"""Where a program's GPU time goes, by kernel family (tune.family_of: direct, depthwise, tiled, Winograd, gemv,
elementwise ...): the whole pass timed with each family left out, and each family alone.

    python benchmarks/gpu_families.py MODEL [--shape 16,3,112,112] [--repeat 10] [--rounds 7] [--each]

MODEL is an .onnx file, a known model's name or a replica name (auraface-arch, ...). The timings are of passes over
the dispatches only (no upload, no read-back; facerun.gpu.tune.subset_seconds: the fixed cost of a submission taken
out), medians over --rounds measurements of --repeat passes each. A pass
with families left out computes nothing meaningful; only its time is of use. Families overlap a little on the GPU,
so "without" and "only" need not add up to "all". `--each` also times every dispatch alone, in program order (node,
kernel, plan, workgroups, ms): where a family's time goes layer by layer.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys

import numpy as np

import facerun
from facerun.gpu import tune


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--shape", default=None, help="input shape, e.g. 16,3,112,112 (default: the model's, batch 1)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--each", action="store_true", help="also time every dispatch alone")
    args = ap.parse_args(argv)
    net = facerun.load(args.model, device="gpu")
    shape = tuple(int(v) for v in args.shape.split(",")) if args.shape else tuple(net.default_shape())
    prog = net.program(shape) if shape[0] == 1 or net.batch_free else net.batch_program(shape)
    if prog is None:
        print(f"{args.model}: no batch program for {shape}", file=sys.stderr)
        return 1
    gpu = net.gpu
    if gpu is None or gpu.run(prog, {prog.inputs[0][0]: np.zeros(shape, np.float32)}) is None:
        print(f"{args.model}: not on the GPU ({net.gpu_reason or 'this program runs on the CPU'})", file=sys.stderr)
        return 1
    gp = gpu.model.compile(prog)
    families = [tune.family_of(d) for d in gp.dispatches]  # the families `bench models --by-kernel` shows

    def timed(keep) -> float:
        return statistics.median(tune.subset_seconds(gp, [keep(f) for f in families], args.repeat) * 1000
                                 for _ in range(args.rounds))

    print(f"{args.model} {'x'.join(map(str, shape))} on {gpu.device_name}: {len(families)} dispatches")
    whole = timed(lambda f: True)
    print(f"{'family':28s} {'dispatches':>10s} {'without':>9s} {'only':>9s}")
    for family, count in collections.Counter(families).most_common():
        without = timed(lambda f, family=family: f != family)
        only = timed(lambda f, family=family: f == family)
        print(f"{family:28s} {count:10d} {without:8.2f}  {only:8.2f}")
    print(f"{'all':28s} {len(families):10d} {whole:8.2f}  (again: {timed(lambda f: True):.2f}) ms")
    if args.each:
        total = 0.0
        print(f"{'#':>3s} {'node':14s} {'kernel':12s} {'plan':44s} {'workgroups':>10s} {'ms':>8s}")
        for i, d in enumerate(gp.dispatches):
            ms = statistics.median(tune.subset_seconds(gp, [j == i for j in range(len(families))], args.repeat)
                                   * 1000 for _ in range(args.rounds))
            total += ms
            plan = d.plan.describe() if d.plan is not None and hasattr(d.plan, "describe") else ""
            print(f"{i:3d} {d.node:14s} {d.kernel.stem:12s} {plan:44s} {d.groups[0] * d.groups[1]:10d} {ms:8.3f}")
        print(f"{'':3s} {'sum':14s} {'':12s} {'':44s} {'':10s} {total:8.3f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except facerun.FacerunError as e:  # a bad model, no usable GPU ...: one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
