"""The GPU path as a user meets it through Net and the CLI: whole programs, batches in one submission, parity
against the CPU interpreter, and a device failure that falls back to the CPU with the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from facerun import gpu as G
from facerun.cli import main
from facerun.gpu import device as D
from facerun.gpu.runner import GpuProgram
from facerun.net import load

from conftest import real_model

pytestmark = pytest.mark.gpu


def _x(shape, seed=0, lo=-1.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)


def test_real_yunet_scores_on_the_gpu(gpu):
    net = load(real_model("face_detection_yunet_2023mar.onnx"), device="gpu")
    x = _x((1, 3, 320, 480), lo=0, hi=255)
    got, want = net.run(x), net.run_cpu(x)
    assert net.gpu is not None, net.gpu_reason
    for name in ("cls_8", "obj_8", "cls_32", "obj_32"):
        assert np.abs(got[name] - want[name]).max() <= 1e-3, name


def test_fixed_batch_file_runs_16_items_as_one_batch_program(gpu):
    """MobileFaceNet's file is fixed at batch 1, but its Reshape's leading 1 is the batch: one program, 16 items."""
    net = load(real_model("MobileFaceNet.onnx"), device="gpu")
    x = _x((16, 3, 112, 112), seed=4, lo=-2, hi=2)
    assert net.batch_program(x.shape) is not None
    batch = net.run_batch(x)[0]
    cpu = np.concatenate([net.run_cpu(x[i : i + 1])[0] for i in range(16)])
    cos = np.sum(batch * cpu, 1) / (np.linalg.norm(batch, axis=1) * np.linalg.norm(cpu, axis=1))
    assert batch.shape == (16, 128) and cos.min() >= 0.9999


def test_items_a_graph_mixes_go_in_one_submission_and_equal_single_runs(gpu, tmp_path, monkeypatch):
    from test_core_models import mixing_model

    net = load(mixing_model(tmp_path / "mix.onnx"), device="gpu")
    x = _x((16, 3, 4, 4), seed=4)
    calls = []
    real = GpuProgram.run_many
    monkeypatch.setattr(GpuProgram, "run_many", lambda self, items: calls.append(len(items)) or real(self, items))
    batch = net.run_batch(x)["y"]
    assert calls == [16], "one submission for the 16 items"
    singles = np.concatenate([net.run_cpu(x[i : i + 1])["y"] for i in range(16)])
    assert np.abs(batch - singles).max() <= 1e-5


def test_free_batch_replica_folds_the_batch_into_one_program(gpu):
    net = load("auraface-arch-small", device="gpu")
    assert net.batch_free
    x = _x((16, 3, 112, 112), seed=5)
    batch = net.run_batch(x)[0]
    singles = np.concatenate([net.run(x[i : i + 1])[0] for i in range(16)])
    np.testing.assert_allclose(batch, singles, atol=1e-4 * np.abs(singles).max())


def test_an_injected_device_failure_falls_back_to_the_cpu_with_the_reason(gpu, caplog):
    net = load("sface-arch-small", device="gpu")
    x = _x((1, 3, 112, 112), seed=6, lo=0, hi=255)
    net.run(x)  # checked and attached
    assert net.gpu is not None
    try:
        D.inject_failure("submit")
        with caplog.at_level("WARNING"):
            got = net.run(x)
        assert net.gpu is None and "injected" in net.gpu_reason
        assert any("injected" in r.getMessage() for r in caplog.records), "the reason is said once"
        np.testing.assert_allclose(got[0], net.run_cpu(x)[0], rtol=0, atol=1e-6)
    finally:
        D.inject_failure(None)
        D.clear_broken()


def test_parity_cli_on_the_gpu(gpu):
    out = CliRunner().invoke(main, ["parity", "every-op", "--device", "gpu", "--allow-software", "--steps", "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert res["ok"] and res["against"] == "cpu" and res["first_departing_step"] is None
    assert res["steps_compared"] > 20
    # the parity input is 0..255 pixels: outputs reach ~200, so judge relative to their magnitude
    assert all(o["max_rel"] <= 3e-5 for o in res["outputs"]), res["outputs"]


def test_every_operator_replica_gpu_within_1e4_of_the_cpu(gpu):
    net = load("every-op", device="gpu")
    for seed in range(3):
        x = _x((1, 4, 9, 7), seed=seed)
        got, want = net.run(x), net.run_cpu(x)
        assert net.gpu is not None, net.gpu_reason
        for name in net.output_names:
            assert np.abs(got[name] - want[name]).max() <= 1e-4, name


def test_parity_steps_on_the_gpu_names_the_step_that_departs(gpu, monkeypatch):
    """A kernel result spoiled from step 5 on: --steps must name step 5."""
    real = G.GpuModel.step_outputs

    def spoiled(self, prog, inputs):
        vals = real(self, prog, inputs)
        return vals[:5] + [v * 1.05 + 0.5 for v in vals[5:]]  # beyond any tolerance, whatever the magnitude

    monkeypatch.setattr(G.GpuModel, "step_outputs", spoiled)
    out = CliRunner().invoke(main, ["parity", "every-op", "--device", "gpu", "--steps", "--json"])
    res = json.loads(out.stdout)
    assert out.exit_code == 1 and res["first_departing_step"]["index"] == 5
