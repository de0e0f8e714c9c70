"""What the `facerun bench` subcommands print alike: tables at their natural width, milliseconds, the failure mark."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from .common import out

FAIL_MARK = "✗ FAIL"
PIPED_WIDTH = 160  # tables sent to a file or pipe are not squeezed into 80 columns


def print_table(table: Table) -> None:
    """Print a table at its natural width: squeezing it into a narrow terminal would cut numbers to '1.2…'."""
    console = out if out.is_terminal else Console(highlight=False, width=PIPED_WIDTH)
    need = console.measure(table, options=console.options.update_width(1000)).maximum
    if need > console.width:
        console = Console(highlight=False, width=need, force_terminal=out.is_terminal)
    console.print(table)


def ms(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def rate(v) -> str:
    """A TFLOP/s or GB/s figure: 3 significant digits, '—' when unknown."""
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 1000 else f"{v:.0f}"


def print_kernels(k: dict) -> None:
    """One --by-kernel breakdown (bench.roofline.by_kernel): a line naming the row, then a family per row."""
    from ..bench.roofline import percent

    head = f"{k['model']} {k['size']} {k['path']} batch {k['batch']}"
    if "error" in k:
        out.print(f"[bold]by kernel[/] {head}: {k['error']}", markup=True, highlight=False)
        return
    out.print(f"[bold]by kernel[/] {head}: {k['dispatches']} dispatches, the pass {ms(k['pass_ms'])} ms "
              f"(dispatches only) of the row's {ms(k['run_ms'])} ms median; {k['folded_steps']} steps folded into "
              f"other kernels", highlight=False)
    t = Table(header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("family", "dispatches", "ms", "share", "GFLOP", "MiB", "FLOP/byte", "TFLOP/s", "GB/s", "bound",
                "of its limit"):
        t.add_column(col, justify="left" if col in ("family", "bound") else "right")
    for f in k["families"]:
        intensity = f["flop_per_byte"]
        t.add_row(f["family"], str(f["dispatches"]), ms(f["ms"]), percent(f["share"]), f"{f['gflop']:.3g}",
                  f"{f['mib']:.3g}", "—" if intensity is None else f"{intensity:.3g}", rate(f.get("tflops")),
                  rate(f.get("gbps")), f.get("bound", "—"), percent(f.get("of_limit")))
    total = sum(f["ms"] for f in k["families"])
    t.add_row("all families", str(k["dispatches"]), ms(total), percent(total / k["pass_ms"] if k["pass_ms"] else None),
              "", "", "", "", "", "", "")
    print_table(t)


def factor(f: float) -> str:
    """A ratio as a factor, digits to suit: 1.04x, 5.0x, 120x."""
    return f"{f:.2f}x" if f < 2 else f"{f:.1f}x" if f < 100 else f"{f:.0f}x"


def faster_or_slower(ratio: float | None, than: str = "") -> str:
    """A speed ratio (above 1: faster) in words that cannot be read backwards: "5.0x faster than cpu", "2.1x slower
    than cpu". `than` empty leaves the base out (a column header names it)."""
    if ratio is None or ratio <= 0:
        return "—"
    tail = f" than {than}" if than else ""
    if ratio == 1.0:
        return f"as fast{' as ' + than if than else ''}"
    return f"{factor(ratio)} faster{tail}" if ratio > 1 else f"{factor(1 / ratio)} slower{tail}"


def tolerance_text(v: float) -> str:
    """1e-3, 2.5e-4: a named tolerance as agree.py writes it."""
    mantissa, exponent = f"{v:.1e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent):+03d}"
