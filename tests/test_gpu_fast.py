"""What makes a GPU run cheaper without changing its answer: trusted (unchecked) shader modules, a detector head's
Sigmoid and Transpose folded into their convolutions, buffers and recorded commands reused between runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import facerun
from facerun import counters
from facerun import program as P
from facerun.gpu import device as D
from facerun.gpu import kernels as K
from facerun.gpu.fusion import pooled_inputs, separable_pairs
from facerun.gpu.lower import fusions, lower
from facerun.gpu.model import GpuModel
from facerun.gpu.plan import Limits

from gpu_fixtures import Builder, close


def keep_data(role, data):
    return data


def yunet_program(models_dir, shape=(1, 3, 96, 128)):
    net = facerun.load(str(models_dir / "face_detection_yunet_2023mar.onnx"), device="cpu")
    return net, net.program(shape)


def seeded(shape, lo=0.0, hi=255.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


# ------------------------------------------------------------------------------------------- trusted modules


def test_the_tests_run_the_checked_build(gpu):
    assert D.checked_build() and not gpu.trusted


def test_trusted_modules_give_the_checked_builds_outputs(gpu, models_dir):
    if D.trusted_module(gpu.device, "probe", K.COPY.code()) is None:
        pytest.skip("this wgpu build has no wgpuDeviceCreateShaderModuleTrusted")
    net, prog = yunet_program(models_dir)
    sface = facerun.load("sface-arch-small", device="cpu")
    programs = [(prog, seeded(prog.input_shape)), (sface.program((2, 3, 112, 112)), seeded((2, 3, 112, 112), -1, 1))]
    checked = GpuModel(dev=dataclasses.replace(gpu, trusted=False, _pipelines={}))
    trusted = GpuModel(dev=dataclasses.replace(gpu, trusted=True, _pipelines={}))
    before = counters.snapshot().get("trusted_modules", 0)
    for p, x in programs:
        want = checked.run(p, x)
        got = trusted.run(p, x)
        assert list(got) == list(want)
        for name in want:
            assert np.array_equal(got[name], want[name]), name  # the same code, without the bounds clamps
    made = counters.snapshot().get("trusted_modules", 0) - before
    kinds = {d.kernel.key for p, _ in programs for d in trusted.compile(p).dispatches if d.kernel.trusted}
    assert made == len(kinds) > 0  # every trusted kind compiled as a trusted module, once


def test_only_kernels_with_guarded_indexing_are_marked_trusted():
    trusted = {k.file for k in (K.UNARY, K.BINARY, K.COPY, K.POOL, K.GLOBAL_AVG, K.DIRECT_CONV, K.DEPTHWISE_CONV,
                                K.SPLIT_REDUCE, K.gemv(8, True)) if k.trusted}
    assert trusted == {"unary.wgsl", "binary.wgsl", "copy.wgsl", "pool.wgsl", "gavg.wgsl", "conv_direct.wgsl",
                       "gemv.wgsl"}
    assert not any(k.trusted for k in (K.RESIZE, K.LINEAR_RESIZE, K.PAD, K.REDUCE, K.SOFTMAX, K.MATMUL))


# ------------------------------------------------------------------------------------------------- fusions


def test_yunet_heads_fold_their_sigmoids_and_transposes(models_dir):
    _, prog = yunet_program(models_dir)
    unary = [s for s in prog.steps if type(s) is P.Unary]
    copies = [s for s in prog.steps if type(s) is P.Copy]
    assert len(unary) == 6 and len(copies) == 6  # the heads: 6 Sigmoids, 6 NCHW -> NHWC Transposes
    adds = [s for s in prog.steps if type(s) is P.Binary]
    assert len(adds) == 2  # the FPN's upsample-and-adds: each folded into its resize (test_gpu_resize_add.py)
    found = fusions(prog)
    assert sorted(id(f.step) for f in found.values()) == sorted(id(s) for s in unary + copies + adds)
    assert all(f.nhwc == (type(f.step) is P.Copy) for f in found.values())
    assert all((f.addend is not None) == (type(f.step) is P.Binary) for f in found.values())
    low = lower(prog, Limits(), keep_data)
    assert "unary" not in low.kernels and "copy" not in low.kernels and "binary" not in low.kernels
    # a depthwise 3x3 made in its 1x1's pass (test_gpu_separable.py) has no dispatch of its own
    fused = sum(d.kernel.stem == "separable" for d in low.dispatches)
    # 15 of its 26 pairs so: three alone, and its twelve heads' pairs four to a pass, a pass a stride
    # (test_gpu_heads.py)
    heads = sum(d.kernel == K.separable(4, heads=True) for d in low.dispatches)
    assert len(separable_pairs(prog)) == 26 and fused == 6 and heads == 3
    # and its four 2x2 max pools are read by the 1x1s after them (test_gpu_pooled.py)
    assert len(pooled_inputs(prog)) == 4 and "pool" not in low.kernels
    assert len(low.dispatches) == (len(prog.steps) - 14 - 15 - 3 * 3 - 4
                                   + sum(d.kernel == K.SPLIT_REDUCE for d in low.dispatches))


def test_folded_heads_give_the_cpu_answer(gpu_model, models_dir):
    net, prog = yunet_program(models_dir, (1, 3, 160, 128))
    x = seeded(prog.input_shape)
    want = net.run_cpu(x)
    got = gpu_model.run(prog, x)
    for name in net.output_names:
        ok, worst = close(got[name], want[name], 1e-4)
        assert ok, (name, worst)


def conv_then(b: Builder, then: str, act=None, also_output=False):
    x = b.input("x", (1, 8, 6, 5))
    w = np.random.default_rng(1).normal(size=(4, 8, 3, 3)).astype(np.float32)
    c = b.step(P.Conv, (1, 4, 6, 5), x=x, weight=w, bias=None, groups=1, stride=(1, 1), dilation=(1, 1),
               pads=(1, 1, 1, 1), act=act)
    if then == "sigmoid":
        y = b.step(P.Unary, (1, 4, 6, 5), x=c, act=P.Activation("sigmoid"))
    elif then == "prelu":
        y = b.step(P.Unary, (1, 4, 6, 5), x=c, act=P.Activation("prelu", slope=np.full(4, 0.1, np.float32)))
    else:
        y = b.step(P.Copy, (1, 6, 5, 4), x=c, offset=0, strides=(120, 5, 1, 30))
    return b.program(y, c) if also_output else b.program(y)


@pytest.mark.parametrize("then, act, also_output, folds", [
    ("sigmoid", None, False, True), ("nhwc", None, False, True), ("nhwc", P.Activation("relu"), False, True),
    ("sigmoid", P.Activation("relu"), False, False),  # the convolution has an activation of its own
    ("prelu", None, False, False),  # per channel: a reshape between would change which slope applies
    ("sigmoid", None, True, False), ("nhwc", None, True, False),  # the convolution's output is wanted too
])
def test_what_folds_into_a_convolution(gpu_model, then, act, also_output, folds):
    prog = conv_then(Builder(), then, act, also_output)
    assert bool(fusions(prog)) == folds
    from facerun import cpu

    x = seeded((1, 8, 6, 5), -1, 1)
    want = cpu.run_program(prog, {"x": x})
    got = gpu_model.run(prog, x)
    for name in want:
        ok, worst = close(got[name], want[name])
        assert ok, (name, worst)


# ------------------------------------------------------------------------------------ reuse between runs


def test_repeated_runs_reuse_their_buffers_and_give_the_same_outputs(gpu_model, models_dir):
    net, prog = yunet_program(models_dir)
    gp = gpu_model.compile(prog)
    staging = gp.staging
    x = {prog.inputs[0][0]: seeded(prog.input_shape)}
    first = gp.run(x)
    again = [gp.run(x) for _ in range(3)]
    assert gp.staging is staging
    for out in again:
        assert all(np.array_equal(out[n], first[n]) for n in first)
    assert not np.shares_memory(again[0][net.output_names[0]], again[1][net.output_names[0]])  # own copies

    items = [{prog.inputs[0][0]: seeded(prog.input_shape, seed=s)} for s in (1, 2, 3)]
    batch1 = gp.run_many(items)
    kept = gp._batch
    batch2 = gp.run_many(items)
    assert gp._batch is kept  # the same input and read-back buffers
    for a, b, item in zip(batch1, batch2, items):
        single = gp.run(item)
        for n in a:
            assert np.array_equal(a[n], b[n]) and np.array_equal(a[n], single[n])
