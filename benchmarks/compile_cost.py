"""What a new input size costs to compile, in milliseconds (median over the sizes), for a photo library's models.

    python benchmarks/compile_cost.py [MODEL...] [--gpu] [--repeat 3] [--no-gc]

(1) program: `Net.program(shape)`, the ONNX graph compiled to a step program for a size it has not seen.
(2) lower: `facerun.gpu.lower.lower`, that program turned into GPU dispatches (no device needed; constants not made).
With --gpu, (2b) gpu: `GpuModel.compile`, the whole GPU form on the first adapter found (lowering, weights through
the model's store, bind groups), after the model's pipelines exist.

MODEL is an .onnx file or a replica name; the default is YuNet 2023mar (FACERUN_MODELS) and sface-arch. A detector
runs at width 1024 and heights 320..1248 in steps of 32 (30 sizes); an embedder at batches 1..24. The largest size
is compiled first and left out (the model's one-off work: batch norms folded, parameter pool filled, the GPU's
buffers grown), and with --gpu the pipelines of every size are made before (a library run makes them ahead, on a
side thread). Times are the compiling thread's CPU time; each sweep loads the model afresh, and the best of
--repeat sweeps' medians is shown. --no-gc turns the garbage collector off while timing: steadier figures on a busy
machine, without the collections a long run would share out over its compiles.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from pathlib import Path

import facerun
from facerun.gpu.lower import lower
from facerun.gpu.model import _no_consts
from facerun.gpu.plan import Limits, plan_conv

YUNET = "face_detection_yunet_2023mar.onnx"


def default_models() -> list[str]:
    folder = os.environ.get("FACERUN_MODELS", "")
    yunet = Path(folder) / YUNET if folder else None
    return ([str(yunet)] if yunet is not None and yunet.exists() else ["yunet-arch"]) + ["sface-arch"]


def sizes_of(net) -> list[tuple[int, ...]]:
    """The new sizes a library run meets: heights for a detector (each photo at its own size), batches otherwise."""
    if net.card.kind == "detector":
        return [(1, 3, h, 1024) for h in range(320, 1280, 32)]
    return [net.default_shape(batch) for batch in range(1, 25)]


def ms(fn, *args) -> tuple[float, object]:
    """(the milliseconds of CPU this thread spent on fn(*args), its result): steady on a busy machine, unlike the
    wall clock; compiling is pure Python on one thread, so the two agree on an idle one."""
    t = time.thread_time()
    out = fn(*args)
    return (time.thread_time() - t) * 1e3, out


def measure(model: str, gpu: bool, repeat: int) -> dict:
    sweeps = [sweep(model, gpu) for _ in range(max(1, repeat))]
    best = dict(sweeps[0])
    for key in ("program", "lower", "gpu"):
        if key in best:
            best[key] = min(s[key] for s in sweeps)
    return best


def sweep(model: str, gpu: bool) -> dict:
    """One pass over the sizes on a model loaded afresh: medians."""
    net = facerun.load(model)
    limits = Limits()
    sizes = sizes_of(net)
    warm = net.program(sizes[-1])  # the largest: the GPU's buffers then fit every other size
    lower(warm, limits, _no_consts)
    gm = None
    if gpu:
        from facerun.gpu.model import GpuModel

        gm = GpuModel()
        gm.compile(warm)
        # the pipelines of every size, made ahead as a library run does (on a side thread, outside the GIL)
        ahead = facerun.load(model)  # a load of its own: the timed net compiles each size for the first time
        planned = [d.kernel for shape in sizes for d in gm.planned(ahead.program(shape))]
        gm.dev.pipelines(planned)
        plan_conv.cache_clear()  # planning them ahead must not plan the timed sizes' layers
    program, lowered, compiled = [], [], []
    for shape in sizes[:-1]:
        t, prog = ms(net.program, shape)
        program.append(t)
        lowered.append(ms(lower, prog, limits, _no_consts)[0])
        if gm is not None:
            compiled.append(ms(gm.compile, prog)[0])
    row = dict(model=Path(model).stem if model.endswith(".onnx") else model, sizes=len(sizes) - 1,
               steps=len(warm.steps), program=statistics.median(program), lower=statistics.median(lowered))
    if compiled:
        row["gpu"] = statistics.median(compiled)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--gpu", action="store_true", help="also time GpuModel.compile on the first adapter")
    ap.add_argument("--repeat", type=int, default=3, help="sweeps over the sizes; the best median is shown")
    ap.add_argument("--no-gc", action="store_true", help="the garbage collector off while timing")
    args = ap.parse_args()
    if args.no_gc:
        gc.disable()
    rows = [measure(m, args.gpu, args.repeat) for m in args.models or default_models()]
    head = f"{'model':32} {'sizes':>5} {'steps':>5} {'(1) program':>12} {'(2) lower':>10}"
    print(head + (f" {'(2b) gpu':>9}" if args.gpu else ""))
    for r in rows:
        line = f"{r['model']:32} {r['sizes']:5d} {r['steps']:5d} {r['program']:9.2f} ms {r['lower']:7.2f} ms"
        print(line + (f" {r['gpu']:6.2f} ms" if "gpu" in r else ""))


if __name__ == "__main__":
    main()
