"""docs/cli.md, made from the click commands themselves: every command's and subcommand's `--help`, as the command
line prints it at a fixed width. `python -m facerun.commands.cli_doc` rewrites the file; `--check` only says whether
it is current (tests/test_docs.py does the same). Click's own layout differs a little between its releases (8.5
writes `[COMMAND]` where 8.4 wrote `COMMAND`), so the file names the click it was made with."""

from __future__ import annotations

import sys
from pathlib import Path

import click

WIDTH = 100  # the help is wrapped at this width whatever the terminal, so the file does not depend on who made it
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
REGENERATE = "python -m facerun.commands.cli_doc"


def _walk(command: click.Command, ctx: click.Context):
    """(context, command) for `command` and every command under it, depth first, subcommands in listed order."""
    yield ctx, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def _anchor(path: str) -> str:
    """The anchor GitHub gives a heading `path` (lower case, spaces to dashes)."""
    return path.lower().replace(" ", "-")


def click_version() -> str:
    from importlib.metadata import version

    return version("click")


def made_with(text: str) -> str | None:
    """The click version a docs/cli.md text names, or None."""
    marker = "(click "
    start = text.find(marker)
    return text[start + len(marker): text.index(")", start)] if start >= 0 else None


def render() -> str:
    """The whole text of docs/cli.md."""
    from ..cli import main

    root = click.Context(main, info_name="facerun", terminal_width=WIDTH, max_content_width=WIDTH,
                         **main.context_settings)
    sections = [(ctx.command_path, command.get_help(ctx)) for ctx, command in _walk(main, root)]
    lines = [
        "# Command-line reference",
        "",
        "Every command's `--help`, as `facerun` prints it. Generated from the click commands (click "
        f"{click_version()}) by",
        f"`{REGENERATE}`: do not edit it by hand (tests/test_docs.py fails when it is out of date).",
        "",
    ]
    lines += [f"- [`{path}`](#{_anchor(path)})" for path, _ in sections]
    for path, text in sections:
        lines += ["", f"## {path}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        print(f"usage: {REGENERATE} [--check]\n\n{__doc__}")
        return 0
    text = render()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
