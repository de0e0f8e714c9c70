"""Signals mid-index (SIGTERM from a service manager, SIGINT from Ctrl-C, SIGHUP from a closed terminal) and readers
while an index run writes: what was committed stays, the line says so, the exit status is 128 + the signal, and the
re-run completes with each photo stored once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, YUNET, need_real_data

from facerun.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAIR = {"clapton/clapton-2.jpg": 1, "group/openface_longoria-cooper.jpg": 2}  # photo -> its faces
COPIES = 40

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def library(folder: Path) -> int:
    need_real_data()
    folder.mkdir(parents=True)
    for i in range(COPIES):
        for name in PAIR:
            shutil.copyfile(FACES / name, folder / f"{i:02d}-{Path(name).name}")
    return COPIES * len(PAIR)


def stored(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT p.path, COUNT(f.id) FROM photos p LEFT JOIN faces f ON f.photo_id = p.id "
                            "GROUP BY p.id").fetchall()


def whole(rows) -> bool:
    return all(n == (1 if "clapton" in path else 2) for path, n in rows)


def _as_a_terminal_starts_it() -> None:
    """In the writer, before it runs: SIGINT, SIGTERM and SIGHUP at their defaults, as a shell in a terminal leaves
    them. A test runner started in the background (`cmd &` in a script: SIGINT ignored) or under nohup (SIGHUP
    ignored) passes those on, and Python keeps an ignored signal ignored, so the run would go on to the end."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_mid_index_keeps_the_committed_and_the_rerun_completes(tmp_path, sig):
    total = library(tmp_path / "photos")
    db = tmp_path / "faces.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FACERUN_GPU": "off"}
    command = [sys.executable, "-m", "facerun.cli", "index", str(tmp_path / "photos"), "--db", str(db), "--model",
               str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu", "--commit-every", "2"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_as_a_terminal_starts_it)
    committed, searched = 0, None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None and committed < 4:
            try:
                committed = len(stored(db))
            except sqlite3.Error:
                committed = 0  # the schema is being made
            time.sleep(0.01)
        if searched is None and committed:  # a reader while the writer writes
            searched = CliRunner().invoke(main, ["search", str(FACES / "clapton/clapton-2.jpg"), "--db", str(db),
                                                 "--device", "cpu", "--json"])
        process.send_signal(getattr(signal, sig))
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    number = getattr(signal, sig)
    assert process.returncode == 128 + number, (process.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted") and "committed so far stay" in lines[0], err
    assert (sig == "SIGINT") or f"({sig})" in lines[0]
    assert searched is not None and searched.exit_code == 0, searched.output if searched else "no search"
    assert json.loads(searched.stdout)[0]["cosine"] > 0.99
    kept = stored(db)
    assert 4 <= len(kept) < total, "the signal must land mid-run"
    assert whole(kept)

    done = subprocess.run([*command, "--json"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["unchanged"], report["added"]) == (len(kept), total - len(kept))
    after = stored(db)
    assert len(after) == total == len({path for path, _ in after}) and whole(after)


def test_an_ignored_sighup_stays_ignored(tmp_path):
    """Under nohup (SIGHUP ignored by the parent) a run goes on when the terminal closes."""
    total = library(tmp_path / "photos")
    db = tmp_path / "faces.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FACERUN_GPU": "off"}
    command = [sys.executable, "-m", "facerun.cli", "index", str(tmp_path / "photos"), "--db", str(db), "--model",
               str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu", "--commit-every", "2", "--json"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and not db.exists():
        time.sleep(0.01)
    process.send_signal(signal.SIGHUP)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert json.loads(out)["added"] == total
