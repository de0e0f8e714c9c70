"""`facerun bench compare A.json B.json`: two saved `bench models` runs side by side, B against A beside their noise."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from ..bench import saved
from .bench_plot import written
from .bench_table import FAIL_MARK, factor, faster_or_slower, ms, print_table
from .common import out, print_json
from .options import json_option


@click.command("compare", short_help="Two saved `bench models` runs side by side.")
@click.argument("path_a", metavar="A.json", type=click.Path(path_type=Path))
@click.argument("path_b", metavar="B.json", type=click.Path(path_type=Path))
@json_option("instead of tables: {a, b, rows}.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.png|.svg",
              help="Also draw the ratios with their noise bands as a chart (needs facerun[plot]).")
def command(path_a, path_b, as_json, plot_file):
    """Compare two results saved by `facerun bench models --save`: per-face times side by side and B's speed-up.

    Rows are matched by model, size, path and batch, in A's order, then B's rows A lacks. Each run's ms per face
    is shown with its own spread (p10–p90 of its timed runs); "B against A" says how many times faster or slower B
    is (A's ms per face over B's), or "within noise" where the two spreads overlap. A row whose parity failed in
    either run, a row found in one run only and a row skipped in either say so. Each run's machine and device are
    printed above the table. `--json`: {"a": {"file", "created", "machine", "device"}, "b": {...}, "rows":
    [{"model", "size", "path", "batch", "a_ms", "b_ms", "speedup" (a_ms / b_ms: above 1, B is faster), "a_ok",
    "b_ok", "found_in", "a_p10_ms", "a_p90_ms", "b_p10_ms", "b_p90_ms", "speedup_low", "speedup_high",
    "within_noise"}]}. --plot FILE.png|.svg draws the ratios with their noise bands (needs facerun[plot]).

    The old spelling `facerun bench --compare A.json B.json` runs this too."""
    compare(path_a, path_b, as_json, plot_file)


def compare(path_a: Path, path_b: Path, as_json: bool, plot_file: Path | None = None) -> None:
    from ..bench.machine import describe_device, describe_machine

    if plot_file is not None:
        from ..bench import plot

        plot.check_target(plot_file)
    a, b = saved.load_result(path_a), saved.load_result(path_b)
    rows = saved.compare(a, b)
    if plot_file is not None:
        fig = plot.compare_figure([r.__dict__ for r in rows], Path(path_a).name, Path(path_b).name)
        written(plot.save(fig, plot_file))
    if as_json:
        print_json({
            "a": {"file": str(path_a), "created": a.get("created"), "machine": a["machine"], "device": a.get("device")},
            "b": {"file": str(path_b), "created": b.get("created"), "machine": b["machine"], "device": b.get("device")},
            "rows": [r.__dict__ for r in rows],
        })
        return
    for tag, path, data in (("A", path_a, a), ("B", path_b, b)):
        m = data["machine"]
        out.print(f"[bold]{tag}[/]: {path} ({data.get('created', '?')}, facerun {m.get('facerun', '?')})")
        out.print(f"   machine: {describe_machine(m)}")
        out.print(f"   device: {describe_device(data.get('device') or {})}")
    t = Table(header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("model", "size", "path", "batch", "A ms/face (p10–p90)", "B ms/face (p10–p90)", "B against A", ""):
        t.add_column(col, justify="left" if col in ("model", "size", "path", "") else "right")
    for r in rows:
        flag = ""
        if r.a_ok is False or r.b_ok is False:
            flag = f"[red]parity {'A' if r.a_ok is False else ''}{'B' if r.b_ok is False else ''} {FAIL_MARK}[/]"
        elif r.found_in != "both":
            flag = f"only in {r.found_in}"
        elif r.a_ms is None or r.b_ms is None:
            flag = "skipped in " + ("both" if r.a_ms is None and r.b_ms is None else "A" if r.a_ms is None else "B")
        t.add_row(r.model, r.size, r.path, str(r.batch), _spread(r.a_ms, r.a_p10_ms, r.a_p90_ms),
                  _spread(r.b_ms, r.b_p10_ms, r.b_p90_ms), speed_cell(r), flag)
    print_table(t)
    out.print("B against A: A's ms/face over B's, as B faster or slower; within noise where the two runs' p10–p90 "
              "spreads overlap (the difference is no larger than each run's own)", markup=False)


def speed_cell(r: saved.RatioRow) -> str:
    if r.speedup is None:
        return "—"
    if r.within_noise:
        return f"[dim]within noise ({factor(r.speedup)})[/]"
    colour = "green" if r.speedup > 1 else "red"
    return f"[{colour}]{faster_or_slower(r.speedup)}[/]"


def _spread(median, lo, hi) -> str:
    if median is None:
        return "—"
    return f"{ms(median)} ({ms(lo)}–{ms(hi)})"
