"""facerun/settings.py: the one reader of FACERUN_* variables, and docs/environment.md's table made from it."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from facerun import settings
from facerun.errors import GpuError, InputError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "facerun"


def _table_in(text: str) -> str:
    start, end = text.index(settings.BEGIN) + len(settings.BEGIN), text.index(settings.END)
    return text[start:end].strip("\n") + "\n"


def test_the_docs_table_is_the_modules():
    doc = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert _table_in(doc) == settings.markdown(), (
        "docs/environment.md's table differs from facerun/settings.py: run "
        "`python -m facerun.settings --markdown docs/environment.md`")
    assert settings.BEGIN not in (ROOT / "README.md").read_text(encoding="utf-8")  # one table, in one place


def test_every_variable_facerun_names_is_in_the_table():
    named = set()
    for path in PACKAGE.rglob("*"):
        if path.suffix in (".py", ".md", ".wgsl"):
            named |= set(re.findall(r"FACERUN_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    table = {s.name for s in settings.SETTINGS}
    assert named - table == set(), "named in facerun/ but not in settings.SETTINGS"
    assert table - named == set(), "in the table but never used"
    assert len(table) == len(settings.SETTINGS)


def _environment_reads(path: Path) -> list[str]:
    """Where a module touches os.environ / os.getenv / os.putenv (or imports them by name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"{path.relative_to(ROOT)}:{node.lineno} from os import {a.name}" for a in node.names
                      if a.name in ("environ", "getenv", "putenv")]
    return found


def test_only_settings_touches_the_environment():
    reads = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "settings.py" or path.parent != PACKAGE
             for hit in _environment_reads(path)]
    assert reads == []


def test_values_are_read_when_asked(monkeypatch):
    from facerun import limits
    from facerun.cpu import arena, lanes
    from facerun.gpu import device, memory

    monkeypatch.delenv("FACERUN_MAX_PIXELS", raising=False)
    assert limits.max_pixels() == 100_000_000
    monkeypatch.setenv("FACERUN_MAX_PIXELS", " 2000 ")
    assert limits.max_pixels() == 2000
    monkeypatch.setenv("FACERUN_CPU_THREADS", "3")
    assert lanes.threads() == 3
    monkeypatch.setenv("FACERUN_CPU_ARENA_MB", "7")
    assert arena._budget() == 7 << 20
    monkeypatch.setenv("FACERUN_GPU_BUDGET_MB", "0.5")
    assert memory.budget_bytes() == 1 << 19
    monkeypatch.setenv("FACERUN_GPU", "Off")
    assert device.switched_off() == "switched off by FACERUN_GPU=off"
    monkeypatch.setenv("FACERUN_GPU", "1")
    monkeypatch.setenv("FACERUN_GPU_BACKEND", " OFF")
    assert device.switched_off() == "switched off by FACERUN_GPU_BACKEND=off"


@pytest.mark.parametrize("name, text, error, message", [
    ("FACERUN_MAX_PIXELS", "lots", InputError, "FACERUN_MAX_PIXELS=lots is not a number"),
    ("FACERUN_MAX_TENSOR_MB", "-1", InputError, "FACERUN_MAX_TENSOR_MB=-1: a finite number above 0 is needed"),
    ("FACERUN_GPU_BUDGET_MB", "nan", GpuError, "FACERUN_GPU_BUDGET_MB=nan: a finite number of MiB, 0 or more"),
    ("FACERUN_GPU_BUDGET_MB", "big", GpuError, "FACERUN_GPU_BUDGET_MB=big is not a number"),
    ("FACERUN_PROGRAM_BUDGET_MB", "x", InputError, "FACERUN_PROGRAM_BUDGET_MB=x is not a number of MiB"),
    ("FACERUN_PHOTO_BUCKET", "48", InputError, "FACERUN_PHOTO_BUCKET must be a positive multiple of 32, not '48'"),
])
def test_a_bad_value_is_one_line_naming_it(monkeypatch, name, text, error, message):
    monkeypatch.setenv(name, text)
    with pytest.raises(error) as caught:
        settings.get(name)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name, text", [("FACERUN_PHOTO_SPLIT", "half"), ("FACERUN_UPLOAD_PIECE_MB", "abc"),
                                        ("FACERUN_GPU_BUDGET_MB", "nan"), ("FACERUN_PHOTO_PARTS", "9")])
def test_a_command_refuses_a_bad_setting_before_any_work(tmp_path, name, text):
    """Checked at the command's start (settings.check_environment): one error line naming it, exit 1, nothing
    written; not a GPU dropped half-way through a run."""
    out = tmp_path / "faces.jpg"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACERUN_")}
    done = subprocess.run([sys.executable, "-m", "facerun.cli", "detect", "docs/img/astronaut.jpg", "--draw",
                           str(out)], env={**env, name: text}, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 1 and not out.exists(), done.stderr
    assert done.stderr.startswith(f"error: {name}") and text in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert settings.check_environment({name: "1"}) is None  # a good value passes


def test_ignored_values_fall_back_to_the_default(monkeypatch):
    # as before the table: a thread count or arena size that is not a whole number is ignored, not an error
    for name, text in [("FACERUN_CPU_THREADS", "0"), ("FACERUN_CPU_THREADS", "two"), ("FACERUN_CPU_ARENA_MB", "1.5")]:
        monkeypatch.setenv(name, text)
        assert settings.get(name) == settings.default(name)
    monkeypatch.setenv("FACERUN_CPU_REFERENCE", "0")
    assert settings.get("FACERUN_CPU_REFERENCE") is False
    monkeypatch.setenv("FACERUN_CPU_REFERENCE", "yes")
    assert settings.get("FACERUN_CPU_REFERENCE") is True


def test_the_photo_bucket_multiple_is_yunets_padding():
    from facerun.face import yunet

    assert settings.PHOTO_BUCKET_MULTIPLE == yunet.PAD_DIVISOR


def test_pass_on_takes_only_the_tables_names(monkeypatch):
    # set first, so monkeypatch remembers the variable's own state (a delenv of an unset variable records nothing,
    # and the later delenv would then bring back pass_on's "#2" for every test after this one)
    monkeypatch.setenv("FACERUN_GPU_ADAPTER", "")
    monkeypatch.delenv("FACERUN_GPU_ADAPTER")
    settings.pass_on({"FACERUN_GPU_ADAPTER": "#2"})
    assert settings.get("FACERUN_GPU_ADAPTER") == "#2"
    monkeypatch.delenv("FACERUN_GPU_ADAPTER")
    with pytest.raises(ValueError, match="FACERUN_GPU_ADAPTR"):
        settings.pass_on({"FACERUN_GPU_ADAPTR": "#2"})


def _module(*args, cwd):
    return subprocess.run([sys.executable, "-m", "facerun.settings", *args], capture_output=True, text=True, cwd=cwd)


def test_the_command_rewrites_the_table_between_its_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\nbefore\n\n{settings.BEGIN}\n| stale |\n{settings.END}\n\nafter\n", encoding="utf-8")
    result = _module("--markdown", str(doc), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = doc.read_text(encoding="utf-8")
    assert "stale" not in text and text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert _table_in(text) == settings.markdown()
    printed = _module("--markdown", cwd=tmp_path)
    assert printed.stdout == settings.markdown()


def test_a_file_without_markers_is_one_error_line_and_left_alone(tmp_path):
    doc = tmp_path / "plain.md"
    doc.write_text("no table here\n", encoding="utf-8")
    result = _module("--markdown", str(doc), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert doc.read_text(encoding="utf-8") == "no table here\n"


def test_tests_never_touch_the_users_cache(tmp_path_factory):
    # tests/conftest.py's hermetic_cache: every test of this session writes its cache under the session's folder
    assert settings.cache_root().is_relative_to(tmp_path_factory.getbasetemp())
    assert settings.cache_root() != settings.cache_root(env={"HOME": str(Path.home())})
