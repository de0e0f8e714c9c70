"""Whole-run A/B of the tile Winograd's products take (AuraFace replica): the planner's choice against its choice
without the Winograd rule (plan.wide_products: choose_tile alone) and against one tile forced on every Winograd
product (16 or 36 groups) or on the F(4x4) ones alone; run medians over alternating rounds.

    python benchmarks/winograd_tiles.py [BATCH ...] [--model NAME] [--tiles SPEC,...]   (default 16; needs a GPU)

--tiles replaces the built-in tiles tried with full specs (plan.Tile.parse: "128x64/8x4/k32/u8"), each forced on
the F(4x4) products alone: deeper K steps and other register blocks than plan.TILES holds, where the device's
workgroup memory takes them.

Single layers time noisily on a shared H200; whole runs side by side in one process are what to decide on. The tile
is forced by wrapping the planner's choose_tile for the Winograd products' group counts: a measuring tool, not a way
to run a model.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from ab import alternating_runs

import facerun
from facerun.errors import FacerunError
from facerun.gpu import plan
from facerun.gpu.model import GpuModel
from facerun.gpu.tune import gpu_seconds

ROUNDS = 3
RUNS = 15  # per variant and round
PLANNED = plan.choose_tile


def forcing(name: str, groups: tuple[int, ...]):
    """choose_tile with the tile `name` for products of `groups` groups (Winograd's 16 or 36 planes)."""
    tile = plan.Tile.parse(name)

    def choose(m, n, k, g, limits):
        return (tile, False) if g in groups else PLANNED(m, n, k, g, limits)
    return choose


WIDE = plan.wide_products


def compiled(model: GpuModel, prog, choose):
    """choose: a choose_tile for every product, or "choose_tile" for the plan without its Winograd rule
    (plan.wide_products)."""
    if choose is not None:  # choose_tile alone decides (a forced tile must reach every product)
        plan.wide_products = lambda products, limits: False
    if callable(choose):
        plan.choose_tile = choose
    plan.plan_conv.cache_clear()
    try:
        return model._compile(prog, None)  # uncached: each variant its own program
    finally:
        plan.choose_tile, plan.wide_products = PLANNED, WIDE
        plan.plan_conv.cache_clear()


def ab(batches: list[int], model_name: str = "auraface-arch", tiles: list[str] | None = None) -> None:
    net = facerun.load(model_name, device="cpu")
    model = GpuModel(budget_mb=16384)  # every variant's packed weights stay resident
    for batch in batches:
        prog = net.program((batch, 3, 112, 112))
        x = np.random.default_rng(0).uniform(-1, 1, prog.input_shape).astype(np.float32)
        feeds = {prog.inputs[0][0]: x}
        variants = {"planned": None, "choose_tile": "choose_tile"}
        if tiles:
            for spec in tiles:
                variants[f"f4 {spec}"] = forcing(spec, (36,))
        else:
            for name in ("128x128", "64x128", "64x64", "128x64"):
                variants[f"all {name}"] = forcing(name, (16, 36))
                variants[f"f4 {name}"] = forcing(name, (36,))
        gps = {}
        for label, choose in variants.items():
            try:
                gps[label] = compiled(model, prog, choose)
            except (FacerunError, plan.PlanError) as e:  # a tile the device or shape does not take
                print(f"b{batch} {label}: {e}", file=sys.stderr)
        ref = gps["planned"].run(feeds)
        medians = alternating_runs(gps, feeds, ROUNDS, RUNS)
        for label, gp in gps.items():
            out = gp.run(feeds)
            diff = max(float(np.abs(out[k] - ref[k]).max()) for k in ref)
            run_ms = medians[label] * 1e3
            print(f"b{batch} {label:24s} run {run_ms:7.3f} ms  gpu {gpu_seconds(gp, 10) * 1e3:7.3f} ms  "
                  f"maxdiff {diff:.1e}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batches", nargs="*", type=int, default=[16], metavar="BATCH")
    ap.add_argument("--model", default="auraface-arch", help="a replica or model with Winograd layers")
    ap.add_argument("--tiles", default="", help="tile specs to force on the F(4x4) products, comma separated")
    args = ap.parse_args(argv)
    tiles = [t for t in args.tiles.split(",") if t]
    try:
        for t in tiles:
            plan.Tile.parse(t)
    except plan.PlanError as e:
        ap.error(str(e))
    if any(b < 1 for b in args.batches):
        ap.error("a batch is at least 1")
    try:
        ab(args.batches, args.model, tiles)
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
