"""Winograd F(2x2, 3x3) and F(4x4, 3x3) inside a model: the checked attach checks its kernels before trusting them,
catches a wrong transform, and a model's programs of two batches share one set of transformed weights; a batch of 16
takes both forms. (The kernels against the definition: test_gpu_kernels.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import facerun
from facerun.agree import seeded_input
from facerun.gpu import kernels as K
from facerun.gpu import memory

pytestmark = pytest.mark.gpu

MODEL = "auraface-arch-small"  # an IResNet replica: 3x3 layers at stride 1 from 16 channels, its stem from 3


def _winograd_keys(net, shape) -> set[str]:
    gp = net.gpu.model.compile(net.program(shape))
    return {d.kernel.key for d in gp.dispatches if d.plan is not None and d.plan.kernel == "winograd"}


def test_the_check_covers_winograd_and_batches_share_its_weights(gpu):
    net = facerun.load(MODEL, device="gpu")
    shape = net.default_shape(1)
    x = seeded_input(shape, 3)
    got, want = net.run(x), net.run(x, device="cpu")
    assert net.gpu.reason is None
    for name in want:
        cos = float(np.dot(got[name].ravel(), want[name].ravel())
                    / (np.linalg.norm(got[name]) * np.linalg.norm(want[name])))
        assert cos > 0.99999, name
    keys = _winograd_keys(net, shape)
    # each block's first layer has the block's batch norm folded into its input transform
    assert {K.WINOGRAD_INPUT_AFFINE.key, K.WINOGRAD_OUTPUT.key} <= keys <= net.gpu.verified
    store = net.gpu.model.weights
    resident = store.resident_bytes
    batch = np.concatenate([x, seeded_input(shape, 4)])
    out = net.run_batch(batch)
    assert out[net.output_names[0]].shape[0] == 2 and net.gpu.reason is None
    # the batch program's Winograd layers found the transformed weights batch 1 made: only small buffers are new
    assert store.resident_bytes - resident < 64 << 10


def test_a_wrong_winograd_transform_is_caught_by_the_check(gpu, monkeypatch):
    import facerun.gpu.lower as lower
    from facerun.gpu.checked import Disagreement

    real = memory.winograd_weights
    monkeypatch.setattr(lower, "winograd_weights", lambda w, m: real(w, m) * np.float32(1.01))  # 1% off
    x = seeded_input(facerun.load(MODEL).default_shape(1), 3)
    with pytest.raises(Disagreement, match="disagrees"):  # the GPU asked for: the check's error is the run's
        facerun.load(MODEL, device="gpu").run(x)
    net = facerun.load(MODEL, device="auto")
    got, want = net.run(x), net.run(x, device="cpu")
    assert net.gpu is None and "disagrees" in net.gpu_reason  # the GPU is dropped, with its reason ...
    for name in want:  # ... and the run carried on on the CPU, with the right answer
        np.testing.assert_array_equal(got[name], want[name])


def test_a_batch_of_16_takes_f4_on_its_larger_maps_checked_and_right(gpu):
    """At batch 16 the replica's 3x3 layers with 256 tiles of 4x4 and 64 input channels take F(4x4, 3x3)
    (plan.WINOGRAD4_MIN_TILES), the rest F(2x2, 3x3): the model's check covers the F(4x4) kernels too (on their
    layers of the small program) before the batch runs, and every item's embedding is the CPU's."""
    net = facerun.load(MODEL, device="gpu")
    shape = net.default_shape(16)
    x = np.concatenate([seeded_input(net.default_shape(1), 10 + i) for i in range(16)])
    got, want = net.run_batch(x), net.run(x, device="cpu")
    assert net.gpu.reason is None
    gp = net.gpu.model.compile(net.program(shape))
    forms = {d.plan.m for d in gp.dispatches if d.plan is not None and d.plan.kernel == "winograd"}
    assert forms == {2, 4}, forms
    assert {K.WINOGRAD4_INPUT_AFFINE.key, K.WINOGRAD4_OUTPUT.key} <= gp.kernel_keys <= net.gpu.verified
    for name in want:
        a, b = got[name].reshape(16, -1), want[name].reshape(16, -1)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cos.min() > 0.99999, (name, cos.min())


def test_the_check_runs_a_folded_norm_on_its_layer(gpu, monkeypatch):
    """The F(4x4) input transform with a batch norm folded in first appears in the batch-16 program: the check must
    run it on its layer with the norm in front (a layer alone, without it, would not use that kernel and would
    leave it unchecked). Here that kernel ignores the norm: the check catches it before the batch runs."""
    from facerun.gpu.checked import Disagreement

    ignores_norm = K.Kernel("winograd4.wgsl", "input", (("AFFINE", False), ("IGNORES_NORM", True)), epilogue=True)
    monkeypatch.setattr(K, "WINOGRAD4_INPUT_AFFINE", ignores_norm)
    net = facerun.load(MODEL, device="gpu")
    x = np.concatenate([seeded_input(net.default_shape(1), 10 + i) for i in range(16)])
    net.run(x[:1])  # the model's check, at batch 1 (F(2x2) only)
    with pytest.raises(Disagreement, match="disagrees"):
        net.run_batch(x)
