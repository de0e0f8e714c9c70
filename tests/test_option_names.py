"""One option name, one meaning: every visible option of every command and subcommand is held to the table in
facerun/commands/options.py; the old spellings still fill the same parameters, hidden from --help; --csv prints
the rows the tables show."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from people_fixtures import FACES

from facerun.cli import main
from facerun.commands.options import OPTIONS


def walk(command: click.Command, ctx: click.Context):
    """(context, command) for the group and every command under it, through the group's lazy loading."""
    yield ctx, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{ctx.command_path} lists {name} but cannot load it"
            yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))


def visible_options(command: click.Command, ctx: click.Context):
    """(name, option) for each option --help shows: the name is its first long spelling that is not an old one."""
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:  # click 8.5 renamed it
            continue
        old = getattr(param, "old_names", ())
        yield next(o for o in param.opts if o not in old and o.startswith("--")), param


def problems(command: click.Command, info_name: str = "facerun") -> list[str]:
    """What departs from the table anywhere under `command`, one line each."""
    found = []
    for ctx, cmd in walk(command, click.Context(command, info_name=info_name)):
        for name, param in visible_options(cmd, ctx):
            where = f"{ctx.command_path} {name}"
            meaning = OPTIONS.get(name)
            if meaning is None:
                found.append(f"{where}: not in facerun/commands/options.py's OPTIONS")
                continue
            if not (param.help or "").startswith(meaning.help):
                found.append(f"{where}: its help does not open with the table's {meaning.help!r}: {param.help!r}")
            if param.is_flag != meaning.flag:
                found.append(f"{where}: {'a switch' if param.is_flag else 'takes a value'}, the table says "
                             f"{'a switch' if meaning.flag else 'a value'}")
            if meaning.metavar and not meaning.flag and param.metavar != meaning.metavar:
                found.append(f"{where}: metavar {param.metavar!r}, the table's is {meaning.metavar!r}")
    return found


def test_every_visible_option_is_held_to_the_table():
    assert problems(main) == []


def test_every_table_name_is_used():
    used = {name for ctx, cmd in walk(main, click.Context(main, info_name="facerun"))
            for name, _ in visible_options(cmd, ctx)}
    assert sorted(set(OPTIONS) - used) == []


def test_a_name_outside_the_table_or_another_meaning_fails():
    @click.command("made-up")
    @click.option("--frobnicate", is_flag=True, help="Frobnicate.")
    @click.option("--json", "as_json", is_flag=True, help="Write a report file.")
    @click.option("--size", help="Photos per page.")
    def made_up(frobnicate, as_json, size):
        pass

    found = problems(made_up, "made-up")
    assert len(found) == 4, found
    assert found[0].startswith("made-up --frobnicate: not in")
    assert found[1].startswith("made-up --json: its help does not open with the table's 'Print JSON'")
    assert found[2].startswith("made-up --size: its help does not open")
    assert found[3] == "made-up --size: metavar None, the table's is 'WxH'"


def test_model_names_are_detector_and_embedder_everywhere():
    """--detector wherever a detector is chosen, --embedder wherever an embedder is, --model nowhere visible."""
    seen = {}
    for ctx, cmd in walk(main, click.Context(main, info_name="facerun")):
        for name, _ in visible_options(cmd, ctx):
            seen.setdefault(name, []).append(ctx.command_path)
    assert "--model" not in seen and "--input-size" not in seen and "--shape" not in seen
    assert set(seen["--detector"]) == {f"facerun {c}" for c in ("detect", "evaluate", "embed", "index", "identify",
                                                                 "compare", "search", "bench photos")}
    assert set(seen["--embedder"]) == {f"facerun {c}" for c in ("embed", "index", "identify", "compare",
                                                                 "bench photos")}
    assert set(seen["--actors"]) == {"facerun embed", "facerun index"}
    assert set(seen["--workers"]) == {"facerun bench photos"}
    assert set(seen["--sizes"]) == {"facerun bench models"}
    assert {"facerun detect", "facerun embed", "facerun search", "facerun cluster",
            "facerun identify"} <= set(seen["--csv"])


def _help_texts():
    root = click.Context(main, info_name="facerun", terminal_width=100, max_content_width=100)
    for ctx, cmd in walk(main, root):
        yield ctx.command_path, cmd.get_help(ctx)


OLD = ("--model", "--input-size", "--shape", "--embed", "--gpus-per-worker")


def test_help_shows_only_the_new_names():
    for path, text in _help_texts():
        for old in OLD:
            assert not re.search(re.escape(old) + r"(?![\w-])", text), f"{path} --help names {old}"
        if path != "facerun bench photos":  # there --workers is decoding threads, its one meaning
            assert not re.search(r"--workers(?![\w-])", text), f"{path} --help names --workers"


def _params(path: list[str], args: list[str]) -> dict:
    """The parameters `facerun PATH ARGS` would run with, parsed by the real commands (nothing runs)."""
    ctx = click.Context(main, info_name="facerun")
    command: click.Command = main
    for name in path:
        command = command.get_command(ctx, name)
        ctx = click.Context(command, info_name=name, parent=ctx)
    return command.make_context(path[-1], list(args), parent=ctx.parent).params


@pytest.mark.parametrize("path, base, old, new", [
    (["detect"], ["x.jpg"], ["--model", "scrfd-500m"], ["--detector", "scrfd-500m"]),
    (["detect"], ["x.jpg"], ["--input-size", "320x320"], ["--size", "320x320"]),
    (["evaluate"], ["--gt", "g", "--images", "i"], ["--model", "m"], ["--detector", "m"]),
    (["embed"], ["x.jpg"], ["--model", "sface-2021dec", "--input-size", "112x112"],
     ["--embedder", "sface-2021dec", "--size", "112x112"]),
    (["embed"], ["x.jpg"], ["--workers", "3", "--gpus-per-worker", "0.5"],
     ["--actors", "3", "--gpus-per-actor", "0.5"]),
    (["index"], ["p", "--db", "f.db"], ["--model", "m", "--workers", "2"], ["--embedder", "m", "--actors", "2"]),
    (["identify"], ["p", "--known", "k"], ["--model", "m"], ["--embedder", "m"]),
    (["compare"], ["a", "b"], ["--model", "m"], ["--embedder", "m"]),
    (["bench", "photos"], ["d"], ["--model", "yunet-2022mar", "--embed", "mobilefacenet"],
     ["--detector", "yunet-2022mar", "--embedder", "mobilefacenet"]),
])
def test_an_old_spelling_fills_the_same_parameter(path, base, old, new):
    got = _params(path, base + old)
    assert got == _params(path, base + new)
    assert got != _params(path, base)  # and it did fill something


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_old_spellings_still_run(tmp_path):
    # an old --model on embed reaches the embedder: a detector there is refused, naming the new spelling
    result = run("embed", str(FACES / "Anthony_Hopkins" / "Anthony_Hopkins_0001.jpg"), "--model", "yunet-2023mar",
                 "--device", "cpu")
    assert result.exit_code == 1 and "not an embedder" in result.output and "--embedder" in result.output
    # Ray's old --workers on the local engine is refused as what it now is
    result = run("embed", "x.jpg", "--workers", "2")
    assert result.exit_code == 1 and "--actors" in result.output and "--engine ray" in result.output
    # --input-size is parsed as --size, and said as --size
    result = run("detect", str(FACES / "Anthony_Hopkins"), "--input-size", "12x", "--device", "cpu")
    assert result.exit_code == 1 and "--size must look like 640x480" in result.output
    # tune's --shape is the whole shape: it does not go with --size or --batch
    result = run("tune", "every-op", "--shape", "1,3,8,8", "--batch", "2")
    assert result.exit_code == 1 and "--shape is the old spelling of --size and --batch" in result.output


def need_faces():
    if not (FACES / "Anthony_Hopkins").is_dir():
        pytest.skip(f"{FACES} not found")


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_detect_csv_is_the_json_faces():
    need_faces()
    photos = [str(FACES / "group" / "openface_longoria-cooper.jpg"), str(FACES / "Anthony_Hopkins")]
    as_json = json.loads(run("detect", *photos, "--device", "cpu", "--json").stdout)
    result = run("detect", *photos, "--device", "cpu", "--csv")
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)
    expect = [(r["image"], i, face) for r in as_json for i, face in enumerate(r["faces"], 1)]
    assert len(rows) == len(expect) >= 3
    for row, (image, i, face) in zip(rows, expect):
        assert row["image"] == image and int(row["face"]) == i
        assert float(row["score"]) == pytest.approx(face["score"], abs=1e-4)
        assert [float(row[k]) for k in "xywh"] == pytest.approx(face["box"], abs=0.01)
    assert run("detect", *photos, "--json", "--csv").exit_code == 1


def test_embed_search_cluster_csv(tmp_path):
    need_faces()
    pytest.importorskip("sklearn")
    photos = tmp_path / "photos"
    for rel in ("Anthony_Hopkins/Anthony_Hopkins_0001.jpg", "Anthony_Hopkins/Anthony_Hopkins_0002.jpg",
                "group/openface_longoria-cooper.jpg"):
        (photos / Path(rel).parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(FACES / rel, photos / rel)
    result = run("embed", str(photos), "--device", "cpu", "--all-faces", "--csv")
    assert result.exit_code == 0, result.output
    embedded = csv_rows(result.stdout)
    assert len(embedded) >= 4 and {r["face"] for r in embedded} >= {"1", "2"}
    as_json = json.loads(run("embed", str(photos), "--device", "cpu", "--all-faces", "--json").stdout)
    assert [(r["image"], [float(r[k]) for k in "xywh"]) for r in embedded] == \
        [(r["image"], pytest.approx(r["box"], abs=0.01)) for r in as_json]

    db = str(tmp_path / "faces.db")
    assert run("index", str(photos), "--db", db, "--device", "cpu").exit_code == 0
    query = str(photos / "Anthony_Hopkins" / "Anthony_Hopkins_0002.jpg")
    result = run("search", query, "--db", db, "--device", "cpu", "--csv")
    assert result.exit_code == 0, result.output
    found = csv_rows(result.stdout)
    matches = json.loads(run("search", query, "--db", db, "--device", "cpu", "--json").stdout)
    assert [(r["image"], int(r["face_id"]), float(r["cosine"])) for r in found] == \
        [(m["image"], m["face_id"], pytest.approx(m["cosine"], abs=1e-6)) for m in matches]
    assert [int(r["rank"]) for r in found] == list(range(1, len(found) + 1))

    assert run("cluster", "--db", db).exit_code == 0
    result = run("cluster", "--db", db, "--show", "--csv")
    assert result.exit_code == 0, result.output
    clustered = csv_rows(result.stdout)
    stored = json.loads(run("cluster", "--db", db, "--show", "--json").stdout)
    expect = [(str(c["id"]), f["face_id"]) for c in stored["clusters"] for f in c["faces"]] + \
        [("0", f["face_id"]) for f in stored["noise"]]
    assert [(r["cluster"], int(r["face_id"])) for r in clustered] == expect
    assert len(clustered) == len(embedded)
