"""Adapter choice and switches: software adapters refused unless allowed, FACERUN_GPU=off, the adapter command.

Each switch is tried in a fresh process (the device is one per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from facerun.gpu import device as D

from gpu_fixtures import in_ci

PROBE = "from facerun.gpu import gpu_available; ok, why = gpu_available(); print(ok); print(why)"


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FACERUN_GPU") and k != "FACERUN_ALLOW_SOFTWARE"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def adapters_or_skip() -> list[dict]:
    rows = D.describe_adapters(allow_software=True)
    if not rows:
        if in_ci():
            pytest.fail("CI=true but wgpu finds no adapter at all")
        pytest.skip("wgpu finds no adapter")
    return rows


def test_software_adapters_are_refused_unless_allowed():
    rows = adapters_or_skip()
    if not any(D.is_software({"device": r["name"], "adapter_type": r["type"]}) for r in rows):
        pytest.skip("no software adapter here to refuse")
    only_software = all(r["type"] == "CPU" for r in rows)
    refused = run_python(PROBE)
    assert refused.returncode == 0, refused.stderr
    if only_software:
        lines = refused.stdout.splitlines()
        assert lines[0] == "False"
        assert "software adapter" in lines[1] and "FACERUN_ALLOW_SOFTWARE" in lines[1]
    accepted = run_python(PROBE, FACERUN_ALLOW_SOFTWARE="1")
    assert accepted.stdout.splitlines()[0] == "True", accepted.stdout + accepted.stderr
    # the API switch does what the env var does
    api = run_python("from facerun import gpu; gpu.allow_software(True); print(gpu.gpu_available()[0])")
    assert api.stdout.splitlines()[0] == "True"
    # and Mesa's complaint about XDG_RUNTIME_DIR is not passed on
    assert "XDG_RUNTIME_DIR" not in refused.stderr + accepted.stderr


def test_switches_turn_the_gpu_off_with_the_reason():
    off = run_python(PROBE, FACERUN_GPU="off", FACERUN_ALLOW_SOFTWARE="1")
    assert off.stdout.splitlines() == ["False", "switched off by FACERUN_GPU=off"]
    backend_off = run_python(PROBE, FACERUN_GPU_BACKEND="off", FACERUN_ALLOW_SOFTWARE="1")
    assert "FACERUN_GPU_BACKEND=off" in backend_off.stdout
    bad = run_python(PROBE, FACERUN_GPU_BACKEND="cuda")
    assert bad.stdout.splitlines()[0] == "False" and "not one of" in bad.stdout
    nomatch = run_python(PROBE, FACERUN_GPU_ADAPTER="no-such-gpu-xyz", FACERUN_ALLOW_SOFTWARE="1")
    assert nomatch.stdout.splitlines()[0] == "False" and "no-such-gpu-xyz" in nomatch.stdout


def test_skip_reasons():
    ok_limits = {k: v for k, v in D.NEEDS.items()}
    assert D.skip_reason({"device": "NVIDIA H200", "adapter_type": "DiscreteGPU"}, ok_limits, False, "") is None
    assert "software" in D.skip_reason({"device": "llvmpipe (LLVM 15)", "adapter_type": "CPU"}, ok_limits, False, "")
    assert D.skip_reason({"device": "llvmpipe (LLVM 15)", "adapter_type": "CPU"}, ok_limits, True, "") is None
    # known software renderers are recognised by name even when the driver reports another type
    swiftshader = {"device": "SwiftShader Device", "adapter_type": "Unknown"}
    assert "software" in D.skip_reason(swiftshader, ok_limits, False, "")
    small = dict(ok_limits, **{"max-compute-workgroup-storage-size": 8192, "max-storage-buffers-per-shader-stage": 4})
    why = D.skip_reason({"device": "Tiny GPU", "adapter_type": "IntegratedGPU"}, small, False, "")
    assert "workgroup storage size 8192 < 16384" in why and "storage buffers per shader stage 4 < 6" in why
    assert "does not match" in D.skip_reason({"device": "AMD Radeon"}, ok_limits, False, "nvidia")


def test_adapter_command_json_parses():
    rows = adapters_or_skip()
    env = {k: v for k, v in os.environ.items() if k != "FACERUN_ALLOW_SOFTWARE"}
    for flags in (["--json"], ["--json", "--allow-software"]):
        r = subprocess.run([sys.executable, "-m", "facerun.cli", "adapter", *flags], capture_output=True, text=True,
                           timeout=120, env=env)
        data = json.loads(r.stdout)
        # exit 3 says "no usable GPU" to scripts (a software-only machine without --allow-software)
        assert r.returncode == (0 if data["used"] else 3), r.stderr
        assert len(data["adapters"]) == len(rows)
        for a in data["adapters"]:
            assert {"name", "backend", "type", "vendor", "driver", "limits", "used", "skipped_because"} <= set(a)
            assert a["used"] == (a["skipped_because"] is None)
            assert a["limits"]["max-storage-buffer-binding-size"] > 0
        assert sum(a["used"] for a in data["adapters"]) == (1 if data["used"] else 0)
        assert data["reason"]
        if "--allow-software" in flags:
            assert data["used"] is not None and data["reason"].startswith("using")
    text = subprocess.run([sys.executable, "-m", "facerun.cli", "adapter"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FACERUN_GPU="off"))
    assert text.returncode == 3 and "switched off by FACERUN_GPU=off" in text.stdout


def test_adapter_by_number():
    rows = adapters_or_skip()
    first = run_python(PROBE, FACERUN_GPU_ADAPTER="#0", FACERUN_ALLOW_SOFTWARE="1")
    assert first.stdout.splitlines()[0] == "True", first.stdout + first.stderr
    numbered = [r for r in rows if not D.is_software({"device": r["name"], "adapter_type": r["type"]})] or rows
    assert numbered[0]["name"] in first.stdout.splitlines()[1]
    # a number past the adapters there are: no GPU, and the reason says how many there are
    past = run_python(PROBE, FACERUN_GPU_ADAPTER=f"#{len(numbered)}", FACERUN_ALLOW_SOFTWARE="1")
    assert past.stdout.splitlines()[0] == "False" and f"only {len(numbered)} adapter" in past.stdout
    bad = run_python(PROBE, FACERUN_GPU_ADAPTER="#x", FACERUN_ALLOW_SOFTWARE="1")
    assert bad.stdout.splitlines()[0] == "False" and "adapter number" in bad.stdout
    assert D.adapter_index("#3") == 3 and D.adapter_index("H200") is None
