"""`facerun tune MODEL`: time the GPU kernels of a model's program, per convolution and as a whole (a developer's
tool for choosing tiles and splits)."""

from __future__ import annotations

import click

from ..errors import InputError
from .common import input_shape, models_dir_option, parse_size, print_json
from .options import batch_option, json_option, size_option


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """'16,3,112,112' -> (16, 3, 112, 112)."""
    if not text:
        return None
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise InputError(f"--shape must look like 16,3,112,112, got '{text}'") from None
    if not shape or min(shape) <= 0:
        raise InputError(f"--shape must be positive, got '{text}'")
    return shape


@click.command("tune")
@click.argument("model")
@models_dir_option()
@size_option(detail="an image model's, e.g. 640x480 (default: the file's own size).")
@batch_option(1, "the batch dimension of the input.", type=click.IntRange(1, 4096))
@click.option("--shape", hidden=True)  # the old spelling: the whole input shape, e.g. 16,3,112,112
@click.option("--repeat", default=20, show_default=True, type=click.IntRange(1, 10000),
              help="Timed runs: passes per timed submission.")
@click.option("--all-tiles", is_flag=True, help="Time every tile of the plan's table too (and the plan without split).")
@click.option("--tiles", default="", help="Tile specs to time too, comma-separated (e.g. 128x128/8x8/u4).")
@click.option("--no-convs", is_flag=True, help="Only the whole program.")
@click.option("--winograd", type=click.Choice(["auto", "on", "off", "f2", "f4"]), default="auto", show_default=True,
              help="The whole program's 3x3 stride-1 convolutions: Winograd where the plan finds it faster, wherever "
                   "it applies, never, or wherever it applies in the form F(2x2, 3x3) (f2) or F(4x4, 3x3) (f4).")
@json_option("instead of lines: the report.")
def command(model, size, batch, shape, repeat, all_tiles, tiles, no_convs, winograd, as_json):
    """Time MODEL's program on the GPU: for each distinct convolution the planned kernel's time and rate, a 3x3 at
    stride 1 every way (im2col, Winograd F(2x2, 3x3) and F(4x4, 3x3)), and with --all-tiles or --tiles those of
    other tiles (for a 3x3 at stride 1, also as the tile of Winograd's products in either form); then the whole
    program's GPU time, run time and encoding time. Single layers are noisy on a busy GPU: decide on whole programs
    (--no-convs, --winograd).

    Needs a GPU adapter (a software one with --allow-software)."""
    from ..gpu import tune as T
    from ..gpu.plan import TILES, PlanError, Tile
    from ..net import load

    for spec in (t for t in tiles.split(",") if t):  # before any work: a typo is one line, not a row per layer
        try:
            Tile.parse(spec)
        except PlanError as e:
            raise InputError(f"--tiles: {e}") from None
    if shape and (size or batch != 1):
        raise InputError("--shape is the old spelling of --size and --batch: give one or the other")
    net = load(model)
    shape = parse_shape(shape) or input_shape(net, parse_size(size), batch)
    prog = net.program(shape)
    extra = (list(TILES) if all_tiles else []) + [t for t in tiles.split(",") if t]
    force = {"on": {"force_winograd": True}, "off": {"force_winograd": False}, "f2": {"force_winograd": 2},
             "f4": {"force_winograd": 4}}.get(winograd)
    report = {"model": net.label, **T.tune(prog, repeat, extra, convs=not no_convs, force=force)}
    if as_json:
        print_json(report)
        return
    click.echo(f"{report['device']}  {report['model']} {report['shape']}  {report['gmacs']:.2f} GMAC")
    for row in report.get("convs", []):
        click.echo(f"  {row['node'][:28]:28s} x{row['count']:<3d} in {row['input']} w {row['weight']} g{row['groups']} "
                  f"s{row['stride'][0]}")
        for v in row["variants"]:
            if "error" in v:
                click.echo(f"      {v['variant']:20s} -- {v['error'][:80]}")
            else:
                rate = (v["tflops"] or 0) * 1e3
                click.echo(f"      {v['variant'][:26]:26s} {v['plan']:40s} {v['us']:9.1f} us  {rate:8.1f} GFLOP/s")
    p = report["program"]
    click.echo(f"  program: {p['dispatches']} dispatches, GPU {p['gpu_ms']:.3f} ms "
               f"({p['tflops_gpu'] or 0:.2f} TFLOP/s), run median {p['run_ms_median']:.3f} ms "
               f"(min {p['run_ms_min']:.3f}), encode {p['encode_ms']:.3f} ms")
