"""The storage under a face database failing: a full disk mid-index, a read-only file system, a database from a newer
facerun, a lock another program holds past the busy timeout, a first run that fails. One line each, nothing
committed lost, no database file left by a run that stored nothing."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, SMALL_PHOTOS, YUNET, need_real_data

from facerun.cli import main

# two small photos (1 and 2 faces), copied many times: a full disk must land mid-run
PAIR = ("clapton/clapton-2.jpg", "group/openface_longoria-cooper.jpg")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def index(folder, db, *more):
    return run("index", folder, "--db", db, "--model", MOBILEFACENET, "--detector", YUNET, "--device", "cpu", *more)


def one_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    return lines[0]


def faces_per_photo(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT p.path, COUNT(f.id) FROM photos p LEFT JOIN faces f ON f.photo_id = p.id "
                                 "GROUP BY p.id"))


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (room for a few batches of the database's WAL), unmounted after the test."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root on Linux (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


def library(folder: Path, copies: int = 12) -> list[Path]:
    need_real_data()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(copies):
        for name in PAIR:
            target = folder / f"{i:02d}-{Path(name).name}"
            shutil.copyfile(FACES / name, target)
            written.append(target)
    return written


def test_a_full_disk_mid_index_keeps_the_committed_batches_and_a_rerun_finishes(tmp_path, small_disk):
    photos = library(tmp_path / "photos")
    db = small_disk / "faces.db"
    r = index(tmp_path / "photos", db, "--commit-every", "2")
    assert r.exit_code == 1, r.output
    line = one_error(r)
    assert "the disk is full" in line and "run the same command again to continue" in line, line
    stored = faces_per_photo(db)
    assert 0 < len(stored) < len(photos), "the disk must fill mid-run"
    assert f"{len(stored)} photos stored" in line
    # whole photos only: one face for clapton, two for the group photo
    assert all(n == (1 if "clapton" in path else 2) for path, n in stored.items()), stored

    remount(small_disk, "size=16m")
    r = index(tmp_path / "photos", db, "--commit-every", "2", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["unchanged"], report["added"]) == (len(stored), len(photos) - len(stored))
    after = faces_per_photo(db)
    assert len(after) == len(photos) and sum(after.values()) == 3 * len(photos) // 2


def test_a_database_on_a_read_only_file_system_is_read_and_refuses_writes_in_one_line(tmp_path, small_disk):
    remount(small_disk, "size=4m")
    library(tmp_path / "photos", copies=1)
    db = small_disk / "faces.db"
    assert index(tmp_path / "photos", db).exit_code == 0
    remount(small_disk, "ro")
    r = index(tmp_path / "photos", db)
    assert r.exit_code == 1 and "the file system is read-only" in one_error(r)
    r = run("search", FACES / PAIR[0], "--db", db, "--device", "cpu", "--json")  # readers still read it
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["image"].endswith("00-clapton-2.jpg")
    r = run("cluster", "--db", db)
    if "scikit-learn" not in r.output:
        assert r.exit_code == 1 and "the file system is read-only" in one_error(r)
    r = index(tmp_path / "photos", small_disk / "new.db")
    assert r.exit_code == 1 and "not writable" in one_error(r)


def test_a_failed_first_run_leaves_no_database(tmp_path, monkeypatch):
    need_real_data()
    db = tmp_path / "faces.db"
    r = index(tmp_path / "nosuchdir", db)
    assert r.exit_code == 1 and "no such file or folder" in one_error(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    library(tmp_path / "photos", copies=1)
    monkeypatch.setenv("FACERUN_GPU", "off")
    r = run("index", tmp_path / "photos", "--db", db, "--model", MOBILEFACENET, "--device", "gpu")
    assert r.exit_code == 3, r.output
    one_error(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
    # a database that was there, or that holds photos, is never removed by a failure
    assert index(tmp_path / "photos", db).exit_code == 0
    r = index(tmp_path / "nosuchdir", db)
    assert r.exit_code == 1 and db.is_file() and len(faces_per_photo(db)) == 2


def test_a_database_from_a_newer_facerun_is_refused_untouched(tmp_path):
    library(tmp_path / "photos", copies=1)
    db = tmp_path / "faces.db"
    assert index(tmp_path / "photos", db).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = db.read_bytes()
    for args in (("index", tmp_path / "photos", "--db", db, "--device", "cpu"), ("cluster", "--db", db),
                 ("search", FACES / PAIR[0], "--db", db, "--device", "cpu")):
        r = run(*args)
        assert r.exit_code == 1 and "99" in one_error(r), (args, r.output)
    assert db.read_bytes() == before


def test_a_lock_held_past_the_busy_timeout_is_one_line(tmp_path, monkeypatch):
    import facerun.people.index as index_module

    library(tmp_path / "photos", copies=1)
    db = tmp_path / "faces.db"
    assert index(tmp_path / "photos", db).exit_code == 0
    (tmp_path / "photos" / "new.jpg").write_bytes((FACES / SMALL_PHOTOS[0]).read_bytes())
    monkeypatch.setattr(index_module, "BUSY_TIMEOUT", 0.3)
    other = sqlite3.connect(db, isolation_level=None)  # another program (a DB browser) holding a write lock
    other.execute("BEGIN EXCLUSIVE")
    try:
        r = index(tmp_path / "photos", db)
        assert r.exit_code == 1, r.output
        assert "another program holds a lock on it past the busy timeout" in one_error(r)
        r = run("search", FACES / PAIR[0], "--db", db, "--device", "cpu", "--json")  # WAL: readers go on
        assert r.exit_code == 0, r.output
    finally:
        other.execute("ROLLBACK")
        other.close()
    r = index(tmp_path / "photos", db, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["added"] == 1, r.output
