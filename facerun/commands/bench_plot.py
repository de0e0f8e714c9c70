"""`facerun bench plot SAVED.json [B.json] --out FILE.png|.svg`: a saved run's chart, or two runs' compared."""

from __future__ import annotations

from pathlib import Path

import click

from ..bench import saved
from ..errors import InputError
from .common import err


@click.command("plot", short_help="Chart a saved run, or two saved runs compared.")
@click.argument("files", nargs=-1, required=True, metavar="SAVED.json [B.json]", type=click.Path(path_type=Path))
@click.option("--out", "-o", "target", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE.png|.svg", help="The file to write: the chart (its suffix picks the format).")
def command(files, target):
    """Draw the chart of a saved run without running it again: a `bench models --save` file gives the models chart
    (ms per face per path, p10–p90, parity failures marked), a `bench photos --json` file the photos/s chart, and
    two `bench models` files the comparison's chart (B against A with the runs' noise bands), as `--plot` on `bench
    models`, `bench photos` and `bench compare` draw them. Needs matplotlib (pip install 'facerun[plot]')."""
    from ..bench import plot

    if len(files) > 2:
        raise InputError(f"bench plot takes one saved run, or two to compare, not {len(files)}")
    plot.check_target(target, "--out")
    if len(files) == 2:
        a, b = (saved.load_result(f) for f in files)
        fig = plot.compare_figure([r.__dict__ for r in saved.compare(a, b)], files[0].name, files[1].name)
    else:
        kind, data = saved.load_any(files[0])
        fig = plot.models_figure(data) if kind == "models" else plot.photos_figure(data)
    written(plot.save(fig, target))


def written(path: Path) -> None:
    err.print(f"chart written to {path}", markup=False)
