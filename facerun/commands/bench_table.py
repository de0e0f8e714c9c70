"""What the `facerun bench` subcommands print alike: tables at their natural width, milliseconds, the failure mark."""

from __future__ import annotations

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
