"""`facerun tune`: the kernel timing command, on a small replica (lavapipe is slow: one pass per timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from facerun import program as P
from facerun.cli import main
from facerun.net import load


def test_tune_help_names_its_options():
    out = CliRunner().invoke(main, ["tune", "--help"])
    assert out.exit_code == 0, out.output
    for option in ("--size", "--batch", "--repeat", "--all-tiles", "--tiles", "--no-convs", "--json"):
        assert option in out.output
    assert "tune" in CliRunner().invoke(main, ["--help"]).output


def test_the_module_alias_is_the_command():
    done = subprocess.run([sys.executable, "-m", "facerun.gpu.tune", "--help"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert "Usage: facerun tune" in done.stdout


def test_a_bad_shape_is_one_line():
    out = CliRunner().invoke(main, ["tune", "every-op", "--shape", "1,x,3"])
    assert out.exit_code == 1 and out.output.startswith("error: --shape")


@pytest.mark.gpu
def test_tune_times_every_distinct_convolution_and_the_program(gpu):
    net = load("every-op")
    prog = net.program(net.default_shape(1))
    convs = [st for st in prog.steps if isinstance(st, P.Conv)]
    out = CliRunner().invoke(main, ["tune", "every-op", "--repeat", "1", "--tiles", "32x64", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["model"] == "every-op" and report["shape"] == list(prog.input_shape)
    assert sum(row["count"] for row in report["convs"]) == len(convs)
    both_ways = 0
    for row in report["convs"]:
        labels = [v["variant"] for v in row["variants"]]
        ways = [v for v in labels if "winograd" in v or v == "im2col"]  # a 3x3 at stride 1 is timed every way
        assert [v for v in labels if v not in ways] == ["planned", "tile 32x64", "planned, no split"]
        assert ways in ([], ["im2col", "winograd F(2x2)", "winograd F(4x4)", "winograd F(2x2) tile 32x64",
                             "winograd F(2x2), no split", "winograd F(4x4) tile 32x64", "winograd F(4x4), no split"])
        for v in row["variants"]:
            assert "error" in v or (v["us"] >= 0 and v["plan"])
        forced = row["variants"][labels.index("tile 32x64")]
        assert "error" in forced or forced["plan"].startswith("tiled 32x64")
        if ways:
            both_ways += 1
            im2col, winograd, winograd4 = row["variants"][1:4]
            assert im2col["plan"].startswith("tiled") and winograd["plan"].startswith("winograd F(2x2,3x3)")
            assert winograd4["plan"].startswith("winograd F(4x4,3x3)")
            for form in (2, 4):
                tiled = row["variants"][labels.index(f"winograd F({form}x{form}) tile 32x64")]
                assert tiled["plan"].startswith(f"winograd F({form}x{form},3x3) + tiled 32x64")
    assert both_ways, "every-op has a 3x3 convolution at stride 1"
    p = report["program"]
    assert p["dispatches"] == sum(p["kernels"].values()) >= len(prog.steps)
    assert p["run_ms_min"] <= p["run_ms_median"] and p["gpu_ms"] >= 0 and p["encode_ms"] > 0
    text = CliRunner().invoke(main, ["tune", "every-op", "--repeat", "1", "--no-convs"])
    assert text.exit_code == 0, text.output
    assert "program:" in text.output and "dispatches" in text.output


class _Jittery:
    """A program whose submissions cost a fixed 0.5 ms, +- up to 0.3 ms of jitter, plus 0.2 ms a pass."""

    def __init__(self, seed: int = 0):
        import random

        self.rng = random.Random(seed)
        self.passes: list[int] = []

    def time_passes(self, repeat: int) -> float:
        self.passes.append(repeat)
        return 5e-4 + self.rng.uniform(-3e-4, 3e-4) + 2e-4 * repeat


def test_device_time_sizes_its_passes_past_the_jitter():
    from facerun.gpu import tune

    for seed in range(5):
        gp = _Jittery(seed)
        # 4 passes alone would be 0.8 ms against 0.6 ms of jitter; sized to 30 ms of passes it is within a few percent
        assert tune.device_seconds(gp) == pytest.approx(2e-4, rel=0.05)
        assert max(gp.passes) - 2 >= 0.5 * tune.DEVICE_TARGET_S / 2e-4  # sized from a jittered estimate
    # a long program is timed with few passes: 4 (a pass of 10 ms), or 3 against 1 (one of 50 ms)
    for per_pass, most in ((0.01, 6), (0.05, 3)):
        slow = _Jittery()
        slow.time_passes = lambda repeat, slow=slow, per_pass=per_pass: (slow.passes.append(repeat)
                                                                         or 5e-4 + per_pass * repeat)
        assert tune.device_seconds(slow) == pytest.approx(per_pass)
        assert max(slow.passes) == most
