"""File names and paths as users' folders have them: not UTF-8, newlines, a leading '-', very long, files that
vanish between the listing and the decode. Each ends in one clear line (or works), never "internal error"."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, SMALL_PHOTOS, YUNET, need_real_data

from facerun.cli import main
from facerun.fsnames import shown, to_sql

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names are bytes; Windows' are UTF-16")

LATIN1 = b"caf\xe9.jpg"  # 'café.jpg' as a Latin-1 system (or an old camera card) writes it: not UTF-8


def run(*args):
    return CliRunner().invoke(main, [a if isinstance(a, str) else os.fsdecode(a) for a in args])


def index(folder, db, *more):
    return run("index", folder, "--db", db, "--model", str(MOBILEFACENET), "--detector", str(YUNET), "--device",
               "cpu", *more)


def photos_with_odd_names(folder: Path) -> tuple[Path, Path]:
    """Two photos, one named in Latin-1 bytes; returns (odd, plain) as Python lists them."""
    need_real_data()
    folder.mkdir(parents=True, exist_ok=True)
    odd = os.path.join(os.fsencode(folder), LATIN1)
    with open(odd, "wb") as f:
        f.write((FACES / SMALL_PHOTOS[0]).read_bytes())
    plain = folder / "plain.jpg"
    plain.write_bytes((FACES / SMALL_PHOTOS[1]).read_bytes())
    return Path(os.fsdecode(odd)), plain


def test_a_name_that_is_not_utf8_is_indexed_once_and_found_again(tmp_path):
    odd, plain = photos_with_odd_names(tmp_path / "photos")
    db = tmp_path / "faces.db"
    first = index(tmp_path / "photos", db, "--json")
    assert first.exit_code == 0, first.output
    assert "internal error" not in first.output
    assert json.loads(first.stdout)["added"] == 2
    with sqlite3.connect(db) as conn:
        stored = {bytes(r[0]) for r in conn.execute("SELECT CAST(path AS BLOB) FROM photos")}
    assert os.fsencode(odd.resolve()) in stored  # the very bytes, not a replacement character
    again = index(tmp_path / "photos", db, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert (report["added"], report["changed"], report["unchanged"], report["photos_total"]) == (0, 0, 2, 2)


def test_odd_names_are_shown_escaped_in_search_identify_and_cluster(tmp_path):
    odd, plain = photos_with_odd_names(tmp_path / "photos")
    db = tmp_path / "faces.db"
    assert index(tmp_path / "photos", db).exit_code == 0
    escaped = shown(odd.resolve())
    assert escaped.endswith("caf\\xe9.jpg")  # the stated form: each byte that is not UTF-8 as \xNN

    r = run("search", odd, "--db", db, "--device", "cpu", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["image"] == escaped
    r = run("search", odd, "--db", db, "--device", "cpu")
    assert r.exit_code == 0 and "caf\\xe9.jpg" in r.stdout, r.output

    known = tmp_path / "known" / "anthony"
    known.mkdir(parents=True)
    (known / "a.jpg").write_bytes((FACES / SMALL_PHOTOS[0]).read_bytes())
    r = run("identify", tmp_path / "photos", "--known", tmp_path / "known", "--model", str(MOBILEFACENET),
            "--device", "cpu", "--csv")
    assert r.exit_code == 0, r.output
    rows = [line.split(",") for line in r.stdout.splitlines()[1:]]
    assert [row[1] for row in rows if row[0].endswith("caf\\xe9.jpg")] == ["anthony"]

    r = run("cluster", "--db", db, "--json")
    if r.exit_code == 1 and "scikit-learn" in r.stderr:
        pytest.skip("scikit-learn not installed")
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "caf\\\\xe9.jpg" in text and "\\udce9" not in text  # valid UTF-8 JSON, no lone surrogates
    r = run("index", tmp_path / "photos" / "nosuch", "--db", db)
    assert r.exit_code == 1 and "internal error" not in r.output


def test_odd_names_in_error_lines_are_escaped(tmp_path):
    """In a real process (stderr writes a lone surrogate as \\udcff): the error line shows the byte as \\xff."""
    import subprocess

    need_real_data()
    folder = tmp_path / "photos"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"bro\xffken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not a jpeg at all")
    (folder / "ok.jpg").write_bytes((FACES / SMALL_PHOTOS[1]).read_bytes())
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "facerun.cli", "index", str(folder), "--db", str(tmp_path / "f.db"),
                           "--model", str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu"],
                          env={**os.environ, "PYTHONPATH": str(root), "FACERUN_GPU": "off"}, capture_output=True,
                          timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.decode("utf-8").splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "bro\\xffken.jpg" in lines[0], done.stderr


def test_to_sql_keeps_utf8_names_as_text():
    assert to_sql("/a/b/photo.jpg") == "/a/b/photo.jpg"
    assert to_sql(os.fsdecode(b"/a/caf\xe9.jpg")) == b"/a/caf\xe9.jpg"


@pytest.mark.parametrize("name", ["new\nline.jpg", "-rf.jpg", "--db.jpg", "tab\there.jpg", "x" * 200 + ".jpg"])
def test_awkward_names_index_and_search(tmp_path, name):
    need_real_data()
    folder = tmp_path / "photos"
    folder.mkdir()
    photo = folder / name
    photo.write_bytes((FACES / SMALL_PHOTOS[1]).read_bytes())
    db = tmp_path / "faces.db"
    r = index(folder, db, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["added"] == 1, r.output
    r = run("search", "--db", db, "--device", "cpu", "--json", "--", photo)  # after --: a name starting with -
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["image"] == str(photo.resolve())
    assert index(folder, db, "--json").exit_code == 0


def test_a_path_too_long_for_the_filesystem(tmp_path):
    need_real_data()
    deep = tmp_path / "photos"
    deep.mkdir()
    name = "y" * 300 + ".jpg"  # past NAME_MAX (255 bytes on ext4, tmpfs, xfs)
    r = index(deep / name, tmp_path / "faces.db")
    assert r.exit_code == 1 and "internal error" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "faces.db").exists()


def test_a_photo_that_vanishes_between_listing_and_decode(tmp_path, monkeypatch):
    """The listing saw it, the decode does not: reported as unreadable (exit 1), the rest indexed; a re-run
    is clean once the file is back or gone."""
    need_real_data()
    folder = tmp_path / "photos"
    from people_fixtures import copy_photos

    photos = copy_photos(folder, SMALL_PHOTOS[:3])
    import facerun.people.index as index_module

    plan = index_module.FaceIndex._plan

    def plan_then_delete(self, listed, report):
        todo = plan(self, listed, report)
        photos[1].unlink()  # gone after the listing, before its decode
        return todo

    monkeypatch.setattr(index_module.FaceIndex, "_plan", plan_then_delete)
    db = tmp_path / "faces.db"
    r = index(folder, db, "--json")
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert report["added"] == 2 and len(report["failed"]) == 1 and "internal error" not in r.output
    assert report["failed"][0]["error"] == f"{photos[1]}: no such file"
    monkeypatch.setattr(index_module.FaceIndex, "_plan", plan)
    r = index(folder, db, "--json", "--allow-missing")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["unchanged"] == 2


def test_the_ray_engine_refuses_a_name_that_is_not_utf8_before_starting(tmp_path):
    from facerun.errors import InputError
    from facerun.face.ray_engine import dataset

    photos_with_odd_names(tmp_path / "photos")
    with pytest.raises(InputError, match=r"caf\\xe9\.jpg: a file name that is not UTF-8, which the Ray engine"):
        dataset([tmp_path / "photos"], ray=None, limits={})


def _drop_file_powers() -> None:
    """Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: root then meets file permissions as any user does, and still
    reads the interpreter's own files (root owns them)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for word in data[:1]:
        word.effective &= ~0b110  # bits 1 and 2
        word.permitted &= ~0b110
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _index_without_file_powers(folder, db, *more) -> tuple[int, str, str]:
    """`facerun index` run in a fresh interpreter that gave up root's power over file permissions first; (exit code,
    stdout, stderr). A fresh process, not a fork: a forked child of this process (BLAS, decoder and GPU threads)
    can hang on a lock some thread held at the fork."""
    import subprocess
    import textwrap

    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_faults_names import _drop_file_powers
        _drop_file_powers()
        from facerun.cli import main
        main(sys.argv[1:], prog_name="facerun")
    """)
    args = ["index", folder, "--db", db, "--model", str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu",
            *more]
    done = subprocess.run([sys.executable, "-c", child, *map(os.fspath, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    return done.returncode, done.stdout, done.stderr


def test_a_folder_without_read_permission(tmp_path):
    """As a user would meet them (root reads every folder, so the test gives up that power): an unreadable subfolder
    is skipped and said, the rest indexed; an unreadable photo is one error line."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("needs root on Linux, to give up its power over file permissions for the test (CI runs as root)")
    need_real_data()
    from people_fixtures import copy_photos

    library = tmp_path / "library"
    copy_photos(library / "open", SMALL_PHOTOS[:1])
    copy_photos(library / "closed", SMALL_PHOTOS[1:2])
    secret = library / "open" / SMALL_PHOTOS[2].replace("/", "-")
    secret.write_bytes((FACES / SMALL_PHOTOS[2]).read_bytes())
    (library / "closed").chmod(0o000)
    secret.chmod(0o000)
    try:
        code, out, err = _index_without_file_powers(library, tmp_path / "faces.db", "--json", "--allow-missing")
    finally:
        (library / "closed").chmod(0o755)
        secret.chmod(0o644)
    assert code == 1 and out, (out, err)
    assert "internal error" not in err and "Traceback" not in err, err
    report = json.loads(out)
    assert report["added"] == 1 and len(report["failed"]) == 1 and secret.name in report["failed"][0]["error"]
    assert "Permission denied" in report["failed"][0]["error"]
    assert report["skipped"]["unreadable_folders"] == 1 and "(unreadable folder)" in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {report['failed'][0]['error']}"]
