"""What a new user meets at the edges of the command line: the software-adapter switch where the hint puts it,
Ctrl-C saying what was kept, a warning for an embedder run off its size, --draw saying where it wrote, the help
naming the shipped defaults, and OpenCV's own log kept out of the output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, need_real_data

from facerun.cli import COMMANDS, main
from facerun.gpu import device as gpu_device

PHOTO = FACES / "obama" / "obama.jpg"


@pytest.fixture
def software_switch():
    """--allow-software sets a process-wide switch: put it back as it was."""
    saved = gpu_device._allow_software
    yield
    gpu_device._allow_software = saved
    gpu_device._failure = None


def test_allow_software_is_accepted_after_every_command_that_can_use_the_gpu(software_switch):
    from facerun.cli import GPU_COMMANDS

    assert set(COMMANDS) - {"cluster", "models", "inspect"} == GPU_COMMANDS  # these never touch the GPU
    runner = CliRunner()
    for name in sorted(GPU_COMMANDS):
        result = runner.invoke(main, [name, "--allow-software", "--help"])
        assert result.exit_code == 0, (name, result.output)
        options = result.output.split("Options:", 1)[1]
        assert "--allow-software" not in options, name  # hidden there: the top-level --help shows it
    assert "--allow-software" in runner.invoke(main, ["--help"]).output
    need_real_data()
    gpu_device._allow_software = False
    ran = runner.invoke(main, ["detect", str(PHOTO), "--device", "cpu", "--allow-software", "--json"])
    assert ran.exit_code == 0, ran.output
    assert gpu_device.software_allowed()  # the switch took effect, as `facerun --allow-software detect` does
    assert len(json.loads(ran.stdout)[0]["faces"]) == 1


def test_ctrl_c_says_what_a_command_kept(tmp_path, monkeypatch):
    need_real_data()
    from facerun.people import index as people_index
    from facerun.people import search as people_search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(people_index.FaceIndex, "update", interrupted)
    db = tmp_path / "faces.db"
    result = CliRunner().invoke(main, ["index", str(FACES / "obama"), "--db", str(db), "--device", "cpu"])
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == (
        "interrupted: the photos committed so far stay in the database; the same command again carries on from there")
    monkeypatch.undo()

    made = CliRunner().invoke(main, ["index", str(FACES / "obama" / "obama-240p.jpg"), "--db", str(db),
                                     "--device", "cpu"])
    assert made.exit_code == 0, made.output
    monkeypatch.setattr(people_search, "search_index", interrupted)
    result = CliRunner().invoke(main, ["search", str(PHOTO), "--db", str(db), "--device", "cpu"])
    assert result.exit_code == 130 and result.stderr.strip().splitlines()[-1] == "interrupted: nothing was written"


def test_parity_warns_when_an_embedder_runs_at_another_size_than_its_own():
    pytest.importorskip("onnxruntime")
    need_real_data()
    off = CliRunner().invoke(main, ["parity", "mobilefacenet", "--size", "160x128", "--json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.stdout)["outputs"][0]["shape"] != [1, 128]  # what comes out is no embedding
    assert off.stderr.splitlines()[0] == ("warning: mobilefacenet is an embedder of 112x112 faces; at 160x128 its "
                                          "output is no embedding, only numbers to compare")
    own = CliRunner().invoke(main, ["parity", "mobilefacenet", "--size", "112x112", "--json"])
    assert own.exit_code == 0 and own.stderr == ""
    detector = CliRunner().invoke(main, ["parity", "yunet-2023mar", "--size", "160x96", "--json"])
    assert detector.exit_code == 0 and "warning" not in detector.stderr  # a detector takes any size


def test_draw_says_where_it_wrote(tmp_path):
    need_real_data()
    one = tmp_path / "obama-drawn.png"
    result = CliRunner().invoke(main, ["detect", str(PHOTO), "--device", "cpu", "--draw", str(one), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"wrote the drawing to {one}"] and one.is_file()
    folder = tmp_path / "drawn"
    photos = [str(FACES / "obama" / "obama-240p.jpg"), str(FACES / "group" / "fr_two_people.jpg")]
    result = CliRunner().invoke(main, ["detect", *photos, "--device", "cpu", "--draw", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == f"wrote 2 drawings into {folder}/"
    assert sorted(p.name for p in folder.iterdir()) == ["fr_two_people.png", "obama-240p.png"]


def test_options_that_had_no_help_have_it_and_the_help_names_the_shipped_defaults():
    runner = CliRunner()
    for command, option, says in (("search", "--device", "Where the networks run: the query's face is detected"),
                                  ("parity", "--batch", "Inputs per network call: the batch")):
        text = runner.invoke(main, [command, "--help"], terminal_width=100).output
        line = next(line for line in text.splitlines() if line.strip().startswith(option))
        assert says in line, line
    top = runner.invoke(main, ["--help"], terminal_width=100).output
    assert "(YuNet, SFace, AuraFace)" not in top and "MobileFaceNet" in top and "YuNet" in top


def test_opencv_keeps_its_warnings_out_of_the_output():
    pytest.importorskip("cv2")
    need_real_data()
    # OpenCV writes its log straight to file descriptor 2, past Python: only a separate process shows it
    code = ("from pathlib import Path\nfrom facerun.bench.photo_rows import opencv_row\n"
            f"row = opencv_row([Path({str(PHOTO)!r})], None)\nprint(row.faces, row.skipped)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "None"]
    assert "WARN" not in done.stderr and "setPreferableTarget" not in done.stderr, done.stderr
