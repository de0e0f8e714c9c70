"""Time the GPU kernels of a model, to choose tiles and splits by measurement (a developer's tool).

    python -m facerun.gpu.tune MODEL [--shape 16,3,112,112] [--repeat 20] [--all-tiles] [--json]

For each distinct convolution of the model's program: the planned kernel's time and rate, and with --all-tiles the
time of every other tile (and of the planned tile without its K split). Then the whole program: its GPU time
(dispatches only, repeated in one submission) and a full run (input upload, dispatches, read-back) as `run` does it.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from .. import program as P
from .plan import TILES
from .runner import GpuModel, GpuProgram, one_conv_program


def gpu_seconds(gp: GpuProgram, repeat: int) -> float:
    """Seconds of device time for one pass over the program's dispatches (repeated in one submission, the
    submission overhead taken out by the difference between two repeat counts)."""

    import wgpu

    def timed(n: int) -> float:
        dev = gp.dev
        enc = dev.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for _ in range(n):
            gp._encode(cp)
        cp.end()
        # wait through a read-back of 16 bytes (wgpu-py 0.32's on_submitted_work_done is broken)
        enc.copy_buffer_to_buffer(gp.buffers[0], 0, gp.staging, 0, 16)
        commands = enc.finish()
        t = time.perf_counter()
        dev.queue.submit([commands])
        gp.staging.map_sync(wgpu.MapMode.READ)
        elapsed = time.perf_counter() - t
        gp.staging.unmap()
        return elapsed

    timed(1)  # warm up (pipelines, clocks)
    few = min(timed(2) for _ in range(3))
    many = min(timed(2 + repeat) for _ in range(3))
    return max(0.0, (many - few) / repeat)


def conv_rows(model: GpuModel, prog: P.Program, repeat: int, tiles: list[str]) -> list[dict]:
    seen = {}
    for st in prog.steps:
        if not isinstance(st, P.Conv):
            continue
        xshape = prog.values[st.x].shape
        key = (xshape, st.weight.shape, st.groups, st.stride, st.pads, st.dilation)
        if key in seen:
            seen[key]["count"] += 1
            continue
        one = one_conv_program(P.Conv(st.out, st.node, st.x, st.weight, st.bias, st.groups, st.stride, st.dilation,
                                      st.pads, st.act, None), xshape)
        macs = one.macs
        variants = [("planned", None)]
        variants += [(f"tile {name}", {"force_tile": name}) for name in tiles]
        if tiles:
            variants.append(("planned, no split", {"force_splits": 1}))
        row = {"node": st.node, "input": list(xshape), "weight": list(st.weight.shape), "groups": st.groups,
               "stride": list(st.stride), "macs": macs, "count": 1, "variants": []}
        for label, force in variants:
            try:
                gp = model.compile(one, force)
            except Exception as e:  # a variant the shape does not take
                row["variants"].append({"variant": label, "error": str(e)})
                continue
            t = gpu_seconds(gp, repeat)
            row["variants"].append({"variant": label, "plan": gp.conv_plans[0][1], "us": t * 1e6,
                                    "tflops": 2 * macs / t / 1e12 if t > 0 else None})
        seen[key] = row
    return list(seen.values())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--shape", help="input shape, e.g. 16,3,112,112 (default: the model's, batch 1)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--all-tiles", action="store_true", help="time every tile of the plan's table too")
    ap.add_argument("--tiles", default="", help="tile specs to time too, comma-separated (e.g. 128x128/8x8/u4)")
    ap.add_argument("--no-convs", action="store_true", help="only the whole program")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import facerun

    net = facerun.load(args.model)
    shape = tuple(int(v) for v in args.shape.split(",")) if args.shape else net.default_shape(1)
    prog = net.program(shape)
    model = GpuModel()
    report = {"device": model.device_name, "model": args.model, "shape": list(shape), "gmacs": prog.macs / 1e9}
    if not args.no_convs:
        tiles = (list(TILES) if args.all_tiles else []) + [t for t in args.tiles.split(",") if t]
        report["convs"] = conv_rows(model, prog, args.repeat, tiles)
    gp = model.compile(prog)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    feeds = {prog.inputs[0][0]: x}
    gp.run(feeds)
    gpu_t = gpu_seconds(gp, max(3, args.repeat // 4))
    runs = []
    for _ in range(max(5, args.repeat)):
        t = time.perf_counter()
        gp.run(feeds)
        runs.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(10):
        enc = model.dev.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        gp._encode(cp)
        cp.end()
        enc.finish()
    encode = (time.perf_counter() - t) / 10
    report["program"] = {"dispatches": len(gp.dispatches), "kernels": gp.kernels, "gpu_ms": gpu_t * 1e3,
                         "run_ms_median": float(np.median(runs)) * 1e3, "run_ms_min": min(runs) * 1e3,
                         "encode_ms": encode * 1e3, "tflops_gpu": 2 * prog.macs / gpu_t / 1e12 if gpu_t > 0 else None,
                         "device_mib": gp.device_bytes / (1 << 20), "weights_mib": model.resident_bytes / (1 << 20)}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['device']}  {args.model} {list(shape)}  {report['gmacs']:.2f} GMAC")
    for row in report.get("convs", []):
        print(f"  {row['node'][:28]:28s} x{row['count']:<3d} in {row['input']} w {row['weight']} g{row['groups']} s{row['stride'][0]}")
        for v in row["variants"]:
            if "error" in v:
                print(f"      {v['variant']:20s} -- {v['error'][:80]}")
            else:
                print(f"      {v['variant'][:26]:26s} {v['plan']:40s} {v['us']:9.1f} us  {(v['tflops'] or 0) * 1e3:8.1f} GFLOP/s")
    p = report["program"]
    print(f"  program: {p['dispatches']} dispatches, GPU {p['gpu_ms']:.3f} ms ({p['tflops_gpu'] or 0:.2f} TFLOP/s), "
          f"run median {p['run_ms_median']:.3f} ms (min {p['run_ms_min']:.3f}), encode {p['encode_ms']:.3f} ms")


if __name__ == "__main__":
    main()
