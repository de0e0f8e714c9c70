"""The docs hold to the code: docs/cli.md is every command's real --help, and every relative link in README.md and
docs/ reaches an existing file (and heading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
    made = cli_doc.made_with(current)
    if made is not None and made != cli_doc.click_version():
        pytest.skip(f"docs/cli.md was made with click {made}, this is click {cli_doc.click_version()}, whose layout "
                    "differs (test_cli_md_holds_every_command_and_subcommand still holds it)")
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


# ------------------------------------------------------------------------------ the commands the docs show

_COMMAND_DOCS = [doc for doc in DOCS if doc.name != "cli.md"]  # cli.md is --help itself (checked above)
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_SYNOPSIS = re.compile(r"[\[\]{}]|\.\.\.|\w\|\w|[A-Z]{2,}\|")  # [--opt], NAME..., auto|cpu|gpu, NAME|PATH
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # ID, NAME, DIR: the reader's value goes there
_STOPS = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "&"}


def _code_lines(text: str):
    """(line number, line) of each code line: inside fences (but Python, SQL and the like) or indented 4 spaces after
    a blank line, the code block's indent taken off and backslash-continued lines joined."""
    lines = text.splitlines()
    out, fence, indented, i = [], None, False, 0
    while i < len(lines):
        line, number = lines[i], i + 1
        stripped = line.strip()
        if fence is None and _FENCE.match(stripped):
            fence = stripped[3:].strip().lower() or "text"
            i += 1
            continue
        if fence is not None:
            if _FENCE.match(stripped):
                fence = None
            elif fence in ("text", "sh", "shell", "bash", "console"):
                out.append((number, line))
            i += 1
            continue
        if line.startswith("    ") and (indented or i == 0 or not lines[i - 1].strip()):
            indented = True
            code = line[4:]
            while code.endswith("\\") and i + 1 < len(lines):  # the shell drops a backslash and its newline
                i += 1
                code = code[:-1] + lines[i][4:]
            out.append((number, code))
        elif stripped:
            indented = False
        i += 1
    return out


def doc_commands(doc: Path) -> list[tuple[str, list[str]]]:
    """('file:line', argv after `facerun`) for every facerun command in `doc`'s code blocks: `$ facerun ...` in a
    block showing output, else any line that runs facerun (after `VAR=value` prefixes and `cmd &&`)."""
    import shlex

    found = []
    text = doc.read_text(encoding="utf-8")
    last = None  # (line number, index in found) of a command written without `$ `: a synopsis may go on below it
    for number, line in _code_lines(text):
        continued = line[:1] == " " and last is not None and last[0] == number - 1
        prompt = line.strip().startswith("$ ")
        line = line.strip()[2:] if prompt else line.strip()
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # an output line with an odd quote: not a command
            continue
        if continued and tokens[:1] != ["facerun"]:  # `facerun detect photo.jpg [--json]` / `    [--nms T] ...`
            where, argv = found[last[1]]
            found[last[1]] = (where, argv + tokens)
            last = (number, last[1])
            continue
        count = len(found)
        segment: list[str] = []
        split = []
        for token in tokens:  # `a; b` and `a && b` written without spaces before the operator
            split += [token[:-1], ";"] if token.endswith(";") and len(token) > 1 else [token]
        for token in [*split, "&&"]:
            if token in _STOPS:
                while segment and _ENV.match(segment[0]):
                    segment.pop(0)
                if segment and segment[0] == "facerun":
                    found.append((f"{doc.relative_to(ROOT)}:{number}", segment[1:]))
                segment = [] if token in ("&&", ";", "||") else ["<rest>"]
            elif segment[:1] != ["<rest>"]:
                segment.append(token)
        last = (number, len(found) - 1) if len(found) > count and not prompt else None
    return found


def _path_to(argv: list[str]):
    """The commands `argv` walks through, top group first, and what is left for the last one."""
    import click

    from facerun.cli import main
    from facerun.commands import bench

    chain, ctx, command, rest = [], None, main, list(argv)
    while True:
        ctx = click.Context(command, info_name=command.name or "facerun", parent=ctx)
        chain.append((command, ctx))
        if not isinstance(command, click.Group):
            return chain, rest
        if isinstance(command, bench.BenchGroup) and (not rest or rest[0] not in command.commands):
            rest = [bench.DEFAULT, *rest]  # a bare `facerun bench [MODEL ...]` is `bench models`, as BenchGroup says
        options = []
        while rest and rest[0].startswith("-"):  # the group's own options come before the command's name
            option = rest.pop(0)
            options.append(option)
            takes = next((p for p in command.params if option.split("=")[0] in getattr(p, "opts", ())), None)
            if takes is not None and not takes.is_flag and "=" not in option and rest:
                options.append(rest.pop(0))
        _parse(command, ctx, options, group=True)
        if not rest:
            raise click.UsageError("no command named", ctx)
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            raise click.UsageError(f"no such command {rest[0]!r}", ctx)
        command, rest = sub, rest[1:]


def _parse(command, ctx, args: list[str], group: bool = False) -> None:
    """click's own parser and types on `args`, without running a callback (they set the run's limits and model
    folder) or the command: unknown options, missing values, wrong types and choices, missing or extra arguments
    raise click's usage errors. Paths are not looked for: they name the reader's files."""
    import click

    opts, extra, _ = command.make_parser(ctx).parse_args(args=list(args))
    if extra and not group and not ctx.allow_extra_args:
        raise click.UsageError(f"unexpected extra arguments {extra}", ctx)
    unset = getattr(click.core, "UNSET", None)  # click 8.3+: what the parser leaves for a value not given
    for param in command.get_params(ctx):
        value = opts.get(param.name)
        if value is None or value is unset:
            if param.required and not group:
                raise click.MissingParameter(ctx=ctx, param=param)
            continue
        if not isinstance(param.type, click.Path):
            try:
                value = param.type_cast_value(ctx, value)
            except click.BadParameter:
                values = value if isinstance(value, (list, tuple)) else [value]
                if not all(isinstance(v, str) and _PLACEHOLDER.match(v) for v in values):
                    raise  # a real value the option refuses; `--name ID NAME` stands for the reader's own
        if param.required and param.value_is_missing(value):
            raise click.MissingParameter(ctx=ctx, param=param)


def check_command(argv: list[str]) -> None:
    """Raises click's error if `facerun ARGV` would not parse. A synopsis (`[--json]`, `NAME|PATH`, `PHOTOS...`) is
    held only to its command path and its option names, each of which must be the command's."""
    import click

    if any(_SYNOPSIS.search(token) for token in argv):
        chain = _synopsis_chain(argv)
        command, ctx = chain[-1]
        commands = [c for c, _ in chain] + list(getattr(command, "commands", {}).values())  # a group's: its commands'
        known = {opt for c in commands for p in c.params for opt in getattr(p, "opts", ())}
        for name in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", " ".join(argv)):
            if name not in known and name != "--help":
                raise click.NoSuchOption(name, ctx=ctx)
        return
    chain, rest = _path_to(argv)
    command, ctx = chain[-1]
    _parse(command, ctx, rest)


def _synopsis_chain(argv: list[str]):
    """The commands a synopsis names (`bench photos DIR [...]`: facerun, bench, bench photos), with their contexts."""
    import click

    from facerun.cli import main
    from facerun.commands import bench

    command = main
    chain = [(main, click.Context(main, info_name="facerun"))]
    for token in argv:
        word = token.strip("[]")
        if not isinstance(command, click.Group) or not word or word.startswith("-") or word.isupper():
            break
        sub = command.get_command(chain[-1][1], word)
        if sub is None and isinstance(command, bench.BenchGroup):
            sub = command.commands[bench.DEFAULT]  # `bench [MODEL ...]`
        elif sub is None and command is main:
            raise click.UsageError(f"no such command {word!r}", chain[-1][1])
        elif sub is None:
            break  # `models [list|verify|...]`: the group itself
        command = sub
        chain.append((sub, click.Context(sub, info_name=word, parent=chain[-1][1])))
    return chain


def _every_command():
    return [(where, argv) for doc in _COMMAND_DOCS for where, argv in doc_commands(doc)]


def test_every_command_in_the_docs_parses():
    """Every `facerun ...` in README.md's and docs/*.md's code blocks parses against the real CLI. Parsing runs
    nothing, so no command needs ../shared, a model file or a GPU here, and none is skipped."""
    import click

    commands = _every_command()
    assert len(commands) > 50, len(commands)  # the walk found the docs' commands at all
    problems = []
    for where, argv in commands:
        try:
            check_command(argv)
        except click.ClickException as e:
            problems.append(f"{where}: facerun {' '.join(argv)}\n    {e.format_message()}")
    assert not problems, "commands that do not parse:\n" + "\n".join(problems)


def test_the_command_check_catches_what_the_cli_refuses(tmp_path, monkeypatch):
    import click

    doc = tmp_path / "x.md"
    doc.write_text("Run:\n\n    facerun detect a.jpg --json   # faces\n"
                   "    FACERUN_JPEG=pillow facerun bench --repeat 3 \\\n        --paths cpu\n\n"
                   "```\n$ facerun compare a.jpg b.jpg\ncosine 0.7  threshold 0.39\n```\n\n"
                   "```python\nfacerun.load('x')\n```\n\n    pip install -e . && facerun models list | head\n"
                   "    facerun cluster --db f.db --name 1 a; facerun search --db f.db --person a\n\n"
                   "    facerun detect photo.jpg [--json]\n                   [--nms T]\n",
                   encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    found = doc_commands(doc)
    assert found == [("x.md:3", ["detect", "a.jpg", "--json"]),
                     ("x.md:4", ["bench", "--repeat", "3", "--paths", "cpu"]),
                     ("x.md:8", ["compare", "a.jpg", "b.jpg"]), ("x.md:16", ["models", "list"]),
                     ("x.md:17", ["cluster", "--db", "f.db", "--name", "1", "a"]),
                     ("x.md:17", ["search", "--db", "f.db", "--person", "a"]),
                     ("x.md:19", ["detect", "photo.jpg", "[--json]", "[--nms", "T]"])]
    for argv in (*(a for _, a in found), ["detect", "a.jpg", "--draw", "out.png"], ["bench", "photos", "DIR"],
                 ["--max-pixels", "4e8", "detect", "huge.png"], ["search", "--db", "f.db", "--person", "x"],
                 ["detect", "photo.jpg", "[--json]", "[--device", "auto|cpu|gpu]"]):
        check_command(argv)
    refused = [["detect", "a.jpg", "--no-such-option"], ["detect"], ["detect", "a.jpg", "--device", "tpu"],
               ["compare", "a.jpg"], ["compare", "a.jpg", "b.jpg", "c.jpg"], ["bench", "photos"],
               ["search", "q.jpg"], ["cluster", "--db", "f.db", "--min-size", "two"], ["no-such-command"],
               ["detect", "photo.jpg", "[--jsn]"], ["detect", "photo.jpg", "[--json]", "[--nsm", "T]"],
               ["index", "--db"]]
    for argv in refused:
        with pytest.raises(click.ClickException):
            check_command(argv)


def test_the_readmes_first_command_finds_the_face_in_the_photo_it_names(tmp_path):
    """The README's first line runs on a fresh clone with nothing beside it: the shipped YuNet on the photo the
    repository holds (docs/img/astronaut.jpg, public domain), one face, its drawing written."""
    import json

    from click.testing import CliRunner

    from facerun.cli import main

    first = next(line for line in (ROOT / "README.md").read_text().splitlines() if "pip install -e . &&" in line)
    command = first.split("&&", 1)[1].split("#", 1)[0].split()
    assert command[:2] == ["facerun", "detect"] and command[2] == "docs/img/astronaut.jpg"
    out = tmp_path / "faces.jpg"
    args = [str(ROOT / command[2]), "--draw", str(out), "--device", "cpu", "--json"]
    result = CliRunner().invoke(main, ["detect", *args])
    assert result.exit_code == 0, result.output
    [photo] = json.loads(result.stdout)
    assert len(photo["faces"]) == 1 and photo["faces"][0]["score"] > 0.9
    assert out.stat().st_size > 10_000


def test_the_readme_is_read_in_five_minutes():
    """The README is the pitch, the set-up, one example per job and links; the reference lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail into docs/"
