"""`facerun bench compare A.json B.json`: two saved `bench models` runs side by side, and B's speed-up."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from ..bench import saved
from .bench_table import FAIL_MARK, ms, print_table
from .common import out, print_json


@click.command("compare", short_help="Two saved `bench models` runs side by side.")
@click.argument("path_a", metavar="A.json", type=click.Path(path_type=Path))
@click.argument("path_b", metavar="B.json", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON: {a, b, rows}.")
def command(path_a, path_b, as_json):
    """Compare two results saved by `facerun bench models --save`: per-face times side by side and B's speed-up.

    Rows are matched by model, size, path and batch, in A's order, then B's rows A lacks. B speed-up is A's ms per
    face over B's (above 1: B is faster; green from 1.05x, red up to 0.95x). A row whose parity failed in either
    run, a row found in one run only and a row skipped in either say so. Each run's machine and device are printed
    above the table. `--json`: {"a": {"file", "created", "machine", "device"}, "b": {...}, "rows": [{"model",
    "size", "path", "batch", "a_ms", "b_ms", "speedup", "a_ok", "b_ok", "found_in"}]}.

    The old spelling `facerun bench --compare A.json B.json` runs this too."""
    compare(path_a, path_b, as_json)


def compare(path_a: Path, path_b: Path, as_json: bool) -> None:
    from ..bench.machine import describe_device, describe_machine

    a, b = saved.load_result(path_a), saved.load_result(path_b)
    rows = saved.compare(a, b)
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
    for col in ("model", "size", "path", "batch", "A ms/face", "B ms/face", "B speed-up", ""):
        t.add_column(col, justify="left" if col in ("model", "size", "path", "") else "right")
    for r in rows:
        flag = ""
        if r.a_ok is False or r.b_ok is False:
            flag = f"[red]parity {'A' if r.a_ok is False else ''}{'B' if r.b_ok is False else ''} {FAIL_MARK}[/]"
        elif r.found_in != "both":
            flag = f"only in {r.found_in}"
        elif r.a_ms is None or r.b_ms is None:
            flag = "skipped in " + ("both" if r.a_ms is None and r.b_ms is None else "A" if r.a_ms is None else "B")
        speed = "—"
        if r.speedup is not None:
            colour = "green" if r.speedup >= 1.05 else "red" if r.speedup <= 0.95 else ""
            speed = f"[{colour}]{r.speedup:.2f}x[/]" if colour else f"{r.speedup:.2f}x"
        t.add_row(r.model, r.size, r.path, str(r.batch), ms(r.a_ms), ms(r.b_ms), speed, flag)
    print_table(t)
    out.print("B speed-up = A ms/face ÷ B ms/face (above 1: B is faster)")
