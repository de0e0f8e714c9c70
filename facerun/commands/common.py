"""Pieces the commands share: the consoles (data on stdout, messages on stderr), progress bars, one-line errors and
exit codes, the --allow-software switch, --size parsing and number formats."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table

from ..errors import InputError

# exit codes: 1 is a failure the user can act on (a bad argument, an unreadable file, a parity departure)
# the exit statuses (docs/commands.md's table)
EXIT_OK = 0
EXIT_FAILED = 1  # bad input, or a check that failed
EXIT_USAGE = 2  # the command line itself is wrong
EXIT_NO_GPU = 3  # --device gpu (or the GPU itself) was asked for and no usable GPU is there
EXIT_INTERNAL = 70  # a bug: facerun itself failed (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130

out = Console(highlight=False, soft_wrap=True)  # data: tables and results
err = Console(stderr=True, highlight=False, soft_wrap=True)  # messages, progress, warnings


# ------------------------------------------------------------------------------------------ talking to the user


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying what the command kept of its work: the CLI says it instead of its per-command default."""


def error_line(message, console: Console | None = None) -> None:
    """`error: <message>` on one line of stderr (or through `console`, e.g. a live progress bar's)."""
    from ..fsnames import shown

    # a file name that is not UTF-8 shows its odd bytes as \xNN (stderr would print them as \udcNN)
    (console or err).print(f"error: {shown(str(message))}", markup=False, highlight=False, soft_wrap=True)


def fail(message, code: int = EXIT_FAILED) -> NoReturn:
    """Say what failed in one line and exit with `code`."""
    error_line(message)
    raise SystemExit(code)


def finish(ok: bool) -> NoReturn:
    """Exit 0 when everything passed, 1 when something failed (after saying what)."""
    raise SystemExit(EXIT_OK if ok else EXIT_FAILED)


def progress_bar(kind: str = "items", console: Console | None = None):
    """A transient progress bar on stderr: "items" (done of total, time left), "steps" (done of total, time spent)
    or "bytes" (size, speed, time left)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = {
        "items": (MofNCompleteColumn(), TimeRemainingColumn()),
        "steps": (MofNCompleteColumn(), TimeElapsedColumn()),
        "bytes": (DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()),
    }[kind]
    console = console or err
    return Progress(TextColumn("{task.description}"), BarColumn(), *columns, console=console, transient=True,
                    disable=not console.is_terminal)


# ------------------------------------------------------------------------------------------------- options


def _accept_software(ctx, param, value):
    if value:
        from ..gpu import allow_software

        allow_software(True)
    return value


def allow_software_option(hidden: bool = False):
    """--allow-software: accept a software GPU adapter. The global `facerun --allow-software` shows it; commands
    that had their own keep it as a hidden spelling of the same switch."""
    return click.option("--allow-software", "allow_software", is_flag=True, callback=_accept_software,
                        hidden=hidden,
                        help="Accept a software GPU adapter (llvmpipe/lavapipe, WARP, SwiftShader); "
                             "FACERUN_ALLOW_SOFTWARE=1 too.")


def accept_allow_software_after(command: click.Command) -> click.Command:
    """Give a command that can use the GPU the hidden `--allow-software` of its own, so the hint every GPU refusal
    gives (`use --allow-software`) works after the command as well as before it. A command that declares the option
    itself keeps its own."""
    if not any(param.name == "allow_software" for param in command.params):
        command.params.append(click.Option(["--allow-software", "allow_software"], is_flag=True, expose_value=False,
                                           hidden=True, callback=_accept_software))
    return command


MODELS_HELP = "Look for model files in DIR first (before $FACERUN_MODELS, the cache folder and the shipped models)."


def _use_models_dir(ctx, param, value):
    from ..zoo import find

    find.use_models_dir(value)  # None when the option is absent: every lookup of this run searches the usual path
    return value


def models_dir_option(expose: bool = False, help: str = MODELS_HELP):
    """--models DIR, the one definition every command that takes a model shares: DIR is searched first by every
    model lookup of the run (known names, file names, the default models). `expose` passes it to the command too
    (bench benchmarks every file in it; models lists it)."""
    return click.option("--models", "models_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                        default=None, metavar="DIR", callback=_use_models_dir, expose_value=expose, help=help)


# ------------------------------------------------------------------------------------------------- parsing


def parse_size(text: str | None, option: str = "--size") -> tuple[int, int] | None:
    """'640x480' -> (640, 480) as width, height; `option` names the argument in the message."""
    if not text:
        return None
    try:
        w, h = (int(v) for v in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise InputError(f"{option} must look like 640x480 (width x height), got '{text}'") from None
    if w <= 0 or h <= 0:
        raise InputError(f"{option} must be positive, got '{text}'")
    return w, h


def input_shape(net, size: tuple[int, int] | None, batch: int = 1) -> tuple[int, ...]:
    shape = list(net.default_shape(batch))
    if size is not None:
        if len(shape) != 4:
            raise InputError(f"--size applies to image inputs; {net.label} takes {len(shape)}-D input")
        shape[3], shape[2] = size
    return tuple(shape)


def off_card_size(net, size: tuple[int, int] | None) -> str | None:
    """A warning when an embedder is run at another input size than its card's: the graph may well run (a
    MobileFaceNet at 640x480 gives a 1x104448 "embedding"), but what comes out is no embedding."""
    pre = net.card.preprocess
    if size is None or net.card.kind != "embedder" or pre is None or pre.input_size is None:
        return None
    if tuple(size) == tuple(pre.input_size):
        return None
    w, h = pre.input_size
    return (f"{net.label} is an embedder of {w}x{h} faces; at {size[0]}x{size[1]} its output is no embedding, only "
            "numbers to compare")


def sample_input(net, shape, seed: int = 0):
    """A seeded input in the range the model expects (its card's: 0..255 pixels for detectors and in-graph-normalised
    models, the normalised range for embedders that expect normalised input)."""
    from ..agree import seeded_input

    return seeded_input(shape, seed, net.card.input_range)


def json_dumps(obj, **kwargs) -> str:
    """json.dumps of `finite_json(obj)`: the text every --json output prints (NaN written as null; a file name that
    is not UTF-8 with its odd bytes as \\xNN, facerun.fsnames.shown)."""
    from ..fsnames import shown_all
    from ..io import finite_json

    return json.dumps(shown_all(finite_json(obj)), allow_nan=False, **kwargs)


def print_json(obj) -> None:
    click.echo(json_dumps(obj, indent=2))


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 face', '2 faces', '0 faces': a count in the right number (`many` for an irregular plural: person, people)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def fmt_box(box) -> str:
    """x,y,w,h in whole pixels: 6,0,121,146 (a box edge at -0.3 is 0, not -0; a real -5 stays -5)."""
    return ",".join(str(int(round(float(v)))) for v in box)


def short_paths(paths) -> tuple[str, list[str]]:
    """(root, names): each path relative to the common folder of them all, so a table shows the part that tells
    photos apart (`group/a.jpg`) whole instead of cutting a long shared prefix on the right. Used by every command
    that prints photo paths in a table; --json keeps the paths as they were. Names that are not local paths (a URI)
    stay as they are, and root is '' when nothing was shortened."""
    from ..fsnames import shown

    texts = [shown(str(p)) for p in paths]  # a name that is not UTF-8 with its odd bytes as \xNN
    local = [t for t in texts if "://" not in t]
    if not local:
        return "", texts
    if all(not os.path.isabs(t) and not os.path.normpath(t).startswith(os.pardir) for t in local):
        return "", texts  # under the current folder, as the user typed them: short already
    absolute = [os.path.abspath(t) for t in local]
    root = os.path.commonpath([os.path.dirname(a) for a in absolute])
    it = iter(absolute)
    return root, [t if "://" in t else os.path.relpath(next(it), root) for t in texts]


def path_column(table: Table, names, header: str = "image") -> None:
    """The photo column of a table: never cut on the right; it gets the width of its longest name (up to 60) before
    the other columns do, and a name wider than that folds onto a second line whole."""
    longest = max((len(n) for n in names), default=len(header))
    table.add_column(header, overflow="fold", min_width=max(len(header), min(longest, 60)))


def fmt_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f}"


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"
