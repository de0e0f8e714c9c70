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
