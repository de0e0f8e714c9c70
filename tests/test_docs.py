"""The docs hold to the code: docs/cli.md is every command's real --help, and every relative link in README.md and
docs/ reaches an existing file (and heading)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title"), ![img](..)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")  # [name]: target
_HTML = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"", re.I)
_ANCHOR_TAG = re.compile(r"<a\s[^>]*?(?:id|name)=\"([^\"]+)\"", re.I)


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks, inline code spans blanked (a `[x](y)` there is no link)."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "``", line)


def _slug(heading: str) -> str:
    """The anchor GitHub makes of a heading: markup dropped, lower case, punctuation gone, spaces to dashes."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[`*_]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(_ANCHOR_TAG.findall(line))
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = _slug(heading.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")  # GitHub numbers repeated headings
    return found


def broken_links(doc: Path) -> list[str]:
    """'file:line: target (why)' for every relative link of `doc` that leads nowhere."""
    problems = []
    for number, line in _prose_lines(doc.read_text(encoding="utf-8")):
        targets = _LINK.findall(line) + _HTML.findall(line)
        reference = _REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...: not checked here
                continue
            file_part, _, anchor = target.partition("#")
            where = (doc.parent / file_part).resolve() if file_part else doc
            if not where.exists():
                problems.append(f"{doc.relative_to(ROOT)}:{number}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                problems.append(f"{doc.relative_to(ROOT)}:{number}: {target} (no heading #{anchor} in "
                                f"{where.relative_to(ROOT)})")
    return problems


def test_cli_md_is_every_commands_current_help():
    from facerun.commands import cli_doc

    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") if (ROOT / "docs" / "cli.md").exists() else ""
    assert current == cli_doc.render(), f"docs/cli.md is out of date: run `{cli_doc.REGENERATE}`"


def test_cli_md_holds_every_command_and_subcommand():
    from click.testing import CliRunner

    from facerun.cli import COMMANDS, main
    from facerun.commands import cli_doc

    text = cli_doc.render()
    for name in COMMANDS:
        assert f"\n## facerun {name}\n" in text, name
    # groups are walked into: each subcommand has its own section, with the help its --help prints
    runner = CliRunner()

    def help_of(*args):
        result = runner.invoke(main, [*args, "--help"], prog_name="facerun", terminal_width=cli_doc.WIDTH)
        assert result.exit_code == 0, args
        return result.output

    for group in ("models", "bench"):
        commands = help_of(group).split("Commands:\n", 1)[1].split("\n\n", 1)[0]
        subcommands = [line.split()[0] for line in commands.splitlines() if line.startswith("  ")]
        assert subcommands, group
        for sub in subcommands:
            assert f"\n## facerun {group} {sub}\n" in text, (group, sub)
    for args in (["models", "fetch"], ["search"], []):  # the very text `--help` prints, at cli_doc's width
        assert f"```text\n{help_of(*args).rstrip()}\n```" in text, args


def test_every_relative_link_in_the_docs_leads_somewhere():
    problems = [p for doc in DOCS for p in broken_links(doc)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "gpu.md").write_text("# The GPU path\n\n## Limits (per adapter)\n\n## Limits (per adapter)\n")
    doc = tmp_path / "README.md"
    doc.write_text("See [gpu](docs/gpu.md#limits-per-adapter), [again](docs/gpu.md#limits-per-adapter-1),\n"
                   "[top](#usage), [gone](docs/ray.md), [no heading](docs/gpu.md#speed) and "
                   "[web](https://example.com/x.md).\n\n```sh\n[not a link](nowhere.md)\n```\n\n## Usage\n"
                   "`[code](nowhere.md)` <img src=\"docs/chart.png\">\n[ref]: docs/gpu.md#the-gpu-path\n")
    assert broken_links(doc) == ["README.md:2: docs/ray.md (no such file)",
                                 "README.md:2: docs/gpu.md#speed (no heading #speed in docs/gpu.md)",
                                 "README.md:9: docs/chart.png (no such file)"]
