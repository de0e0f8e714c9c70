"""facerun.io: atomic writes leave the old file or the whole new one and never a temporary; output-path checks."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from facerun import io
from facerun.errors import FacerunError, ImageError, InputError


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_each_kind_of_file_is_written_whole(tmp_path):
    io.write_bytes(tmp_path / "a.bin", b"\x00\x01")
    io.write_text(tmp_path / "a.txt", "héllo\n")
    io.write_json(tmp_path / "a.json", {"x": [1, 2]})
    io.write_npy(tmp_path / "a.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": [1, 2]}
    assert (tmp_path / "a.json").read_text().endswith("}\n")
    assert np.load(tmp_path / "a.npy").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert _names(tmp_path) == ["a.bin", "a.json", "a.npy", "a.txt"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~mask  # as a plain open would make it


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    target.write_text("old")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", full_disk)
    with pytest.raises(InputError, match=f"cannot write {target}: No space left on device"):
        io.write_json(target, {"x": 1}, error=InputError)
    assert target.read_text() == "old" and _names(tmp_path) == ["result.json"]


def test_files_written_together_are_renamed_only_when_all_are_written(tmp_path):
    first, second = tmp_path / "v.npy", tmp_path / "v.jsonl"
    first.write_bytes(b"old vectors")

    def broken(handle):
        handle.write(b"half")
        raise OSError(5, "Input/output error")

    with pytest.raises(FacerunError, match="cannot write .*v.jsonl: Input/output error"):
        io.write_together([(first, io.npy_writer(np.zeros(3))), (second, broken)])
    assert first.read_bytes() == b"old vectors" and _names(tmp_path) == ["v.npy"]

    # an interrupt is not turned into an error, and still leaves nothing behind
    def interrupted(handle):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        io.write_together([(first, io.jsonl_writer([{"a": 1}])), (second, interrupted)])
    assert first.read_bytes() == b"old vectors" and _names(tmp_path) == ["v.npy"]

    written = io.write_together([(first, io.npy_writer(np.ones(2))), (second, io.jsonl_writer([{"a": 1}, {"b": 2}]))])
    assert written == [first, second] and np.load(first).tolist() == [1.0, 1.0]
    assert [json.loads(line) for line in second.read_text().splitlines()] == [{"a": 1}, {"b": 2}]


def test_a_write_into_a_missing_folder_is_one_error(tmp_path):
    with pytest.raises(ImageError, match="cannot write .*No such file"):
        io.write_bytes(tmp_path / "missing" / "x.png", b"png", error=ImageError)
    assert _names(tmp_path) == []


def test_output_file_checks(tmp_path):
    assert io.check_output_file(tmp_path / "out.json", "--save") == tmp_path / "out.json"
    with pytest.raises(InputError, match=r"^--save .*: is a folder$"):
        io.check_output_file(tmp_path, "--save")
    with pytest.raises(InputError, match=r"^--out .*x.npy: folder .*missing does not exist$"):
        io.check_output_file(tmp_path / "missing" / "x.npy", "--out")
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="does not exist"):
        io.check_output_file(tmp_path / "file" / "x.npy", "--out")  # a file where the folder should be


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permissions do not bind root (or non-POSIX)")
def test_an_unwritable_folder_is_refused_before_any_work(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(InputError, match="is not writable"):
            io.check_output_file(locked / "x.json", "--save")
        with pytest.raises(InputError, match="not writable"):
            io.check_output_folder(locked, "--draw")
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no file can be created")
def test_a_folder_the_permission_bits_call_writable_is_still_tried(tmp_path):
    # as root every folder looks writable; /proc still refuses a new file, so the check must try one
    with pytest.raises(InputError, match=r"--out /proc/x.npy: cannot create a file in /proc"):
        io.check_output_file("/proc/x.npy", "--out")
    with pytest.raises(InputError, match="cannot create a file in /proc"):
        io.check_output_folder("/proc", "--draw")
    io.check_output_file(tmp_path / "x.npy", "--out")
    assert _names(tmp_path) == []  # the probe leaves nothing


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_outputs_into_an_unwritable_place_fail_before_the_work(tmp_path):
    from click.testing import CliRunner

    from facerun.cli import main

    for args in (["embed", "nothing.jpg", "--out", "/proc/x.npy"], ["bench", "every-op", "--save", "/proc/b.json"],
                 ["index", "nothing.jpg", "--db", "/proc/faces.db"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and "cannot create a file in /proc" in result.stderr, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1


def test_output_folder_checks(tmp_path):
    nested = tmp_path / "a" / "b"
    assert io.check_output_folder(nested, "--draw") == nested and nested.is_dir()
    (tmp_path / "plain").write_text("")
    with pytest.raises(InputError, match="is a file, not a folder"):
        io.check_output_folder(tmp_path / "plain", "--draw")
    with pytest.raises(InputError, match="no such folder"):
        io.check_output_folder(tmp_path / "absent", "--dest", create=False)
    assert not (tmp_path / "absent").exists()


def test_sha256_is_remembered_until_the_file_changes(tmp_path):
    import hashlib

    path = tmp_path / "m.onnx"
    path.write_bytes(b"a" * 100)
    assert io.sha256_of(path) == hashlib.sha256(b"a" * 100).hexdigest()
    path.write_bytes(b"b" * 100)
    io.forget_sha256(path)  # rewritten within one mtime tick: told explicitly
    assert io.sha256_of(path) == hashlib.sha256(b"b" * 100).hexdigest()


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_write_removes_the_temporaries_a_killed_write_of_it_left(tmp_path):
    import time

    old = time.time() - 2 * io.STALE_AFTER
    dead = tmp_path / f".x.npy.{_dead_pid()}.abc_12.part"  # its process is gone
    aged = tmp_path / f".x.npy.{os.getppid()}.def34.part"  # a live process's, but two days old
    aged.write_bytes(b"half")
    os.utime(aged, (old, old))
    live = tmp_path / f".x.npy.{os.getppid()}.ghi56.part"  # a live process's and fresh: it may be writing
    other = tmp_path / f".y.npy.{_dead_pid()}.jkl78.part"  # another target's: not this write's business
    alike = tmp_path / ".x.npy.part"  # not facerun's temporary name
    for p in (dead, live, other, alike):
        p.write_bytes(b"half")
    io.write_npy(tmp_path / "x.npy", np.zeros(3, np.float32))
    assert _names(tmp_path) == sorted([live.name, other.name, alike.name, "x.npy"])
    assert io.remove_stale_temporaries(tmp_path, every_target=True) == 1 and not other.exists()
    # temporaries carry the writer's pid, so the next run can tell them from a live write
    seen = []
    io.atomic_write(tmp_path / "z.bin", lambda f: seen.extend(p.name for p in tmp_path.glob(".z.bin.*.part")))
    assert len(seen) == 1 and seen[0].startswith(f".z.bin.{os.getpid()}.")
