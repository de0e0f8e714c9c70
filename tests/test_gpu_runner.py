"""Whole programs on the GPU: hand-built and real models against the CPU interpreter, buffer reuse, the weight budget,
the per-convolution mode, the checked attachment and its fallback on an injected device failure."""

from __future__ import annotations

import dataclasses
import logging
import threading

import numpy as np
import pytest

import facerun
from facerun import cpu
from facerun import program as P
from facerun.errors import GpuError
from facerun.gpu import CheckedGpu, DoesNotFit, GpuModel, disagreement
from facerun.gpu import device as D
from facerun.gpu.checked import test_inputs as check_inputs
from facerun.gpu.plan import Limits

from gpu_fixtures import Builder, close  # the gpu and gpu_model fixtures come from conftest

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(11)


def small_net_program(batch: int = 2) -> P.Program:
    """conv(relu) -> depthwise(clip) -> conv + residual (prelu) -> max pool -> transpose/concat -> gap -> gemm."""
    b = Builder()
    x = b.input("image", (batch, 3, 16, 12))
    w1 = (RNG.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    c1 = b.step(P.Conv, (batch, 16, 8, 6), x=x, weight=w1, bias=RNG.standard_normal(16).astype(np.float32), groups=1,
                stride=(2, 2), dilation=(1, 1), pads=(1, 1, 1, 1), act=P.Activation("relu"))
    w2 = (RNG.standard_normal((16, 1, 3, 3)) * 0.3).astype(np.float32)
    c2 = b.step(P.Conv, (batch, 16, 8, 6), x=c1, weight=w2, bias=None, groups=16, stride=(1, 1), dilation=(1, 1),
                pads=(1, 1, 1, 1), act=P.Activation("clip", lo=0.0, hi=6.0))
    w3 = (RNG.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32)
    c3 = b.step(P.Conv, (batch, 16, 8, 6), x=c2, weight=w3, bias=None, groups=1, stride=(1, 1), dilation=(1, 1),
                pads=(0, 0, 0, 0), act=P.Activation("prelu", slope=np.full(16, 0.25, np.float32)), residual=c1)
    pooled = b.step(P.Pool, (batch, 16, 4, 3), x=c3, kind="max", kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0))
    nhwc = b.step(P.Copy, (batch, 4, 3, 16), x=pooled, offset=0, strides=(192, 3, 1, 12), kind="transpose")
    both = b.step(P.Concat, (batch, 4, 3, 32), xs=(nhwc, nhwc), axis=3)
    gap = b.step(P.GlobalAvgPool, (batch, 16, 1, 1), x=c3)
    flat = b.view(gap, (batch, 16))
    fc = b.step(P.Gemm, (batch, 10), x=flat, weight=(RNG.standard_normal((10, 16)) * 0.2).astype(np.float32),
                bias=np.zeros(10, np.float32), act=None)
    return b.program(fc, both)


def test_hand_built_program_end_to_end(gpu_model):
    prog = small_net_program()
    x = RNG.standard_normal(prog.input_shape).astype(np.float32)
    want = cpu.run_program(prog, {"image": x})
    gp = gpu_model.compile(prog)
    got = gp.run({"image": x})
    assert disagreement(want, got) is None
    for name in want:
        ok, worst = close(got[name], want[name].astype(np.float64))
        assert ok, (name, worst)
    # buffers are reused by lifetime: fewer slots than values made
    assert len(gp.slots.sizes) < len(prog.steps)
    # a re-run writes the new input (not the old result)
    x2 = RNG.standard_normal(prog.input_shape).astype(np.float32)
    again = gp.run({"image": x2})
    assert disagreement(cpu.run_program(prog, {"image": x2}), again) is None
    assert not np.allclose(again[prog.outputs[0][0]], got[prog.outputs[0][0]])


def test_weights_past_the_budget_are_uploaded_per_run(gpu):
    prog = small_net_program(batch=1)
    x = RNG.standard_normal(prog.input_shape).astype(np.float32)
    want = cpu.run_program(prog, {"image": x})
    model = GpuModel(budget_mb=0, dev=gpu)
    got = model.run(prog, x)
    assert model.resident_bytes == 0
    assert disagreement(want, got) is None
    assert disagreement(want, model.run(prog, x)) is None
    resident = GpuModel(dev=gpu)
    resident.run(prog, x)
    assert resident.resident_bytes > sum(s.weight.nbytes for s in prog.steps if isinstance(s, P.Conv))


def test_per_convolution_mode_and_step_outputs(gpu_model):
    prog = small_net_program()
    x = RNG.standard_normal(prog.input_shape).astype(np.float32)
    want = cpu.run_program(prog, {"image": x})
    assert disagreement(want, gpu_model.run_per_conv(prog, {"image": x})) is None
    assert disagreement(want, gpu_model.run_per_conv(prog, {"image": x})) is None
    convs = [id(st) for st in prog.steps if isinstance(st, P.Conv)]
    assert sum(key[0] in convs for key in gpu_model._convs) == len(convs)  # each compiled once
    # the checked attachment's hook, as Net.run_per_conv uses it
    hook = CheckedGpu(gpu_model).conv_hook(prog)
    assert disagreement(want, cpu.run_program(prog, {"image": x}, conv=hook)) is None
    steps = gpu_model.step_outputs(prog, x)
    seen = []
    cpu.run_program(prog, {"image": x}, on_step=lambda st, y: seen.append(y))
    assert len(steps) == len(seen) == len(prog.steps)
    for got, ref in zip(steps, seen):
        assert close(got, ref.astype(np.float64))[0]
    # the program's own lifetimes are untouched
    assert any(st.frees for st in prog.steps)


def test_a_program_beyond_the_device_limits_runs_on_the_cpu(gpu):
    tiny = dataclasses.replace(gpu, limits=Limits(max_binding=4096))
    prog = small_net_program()
    with pytest.raises(DoesNotFit, match="binding"):
        GpuModel(dev=tiny).run(prog, np.zeros(prog.input_shape, np.float32))
    checked = CheckedGpu(GpuModel(dev=tiny))
    assert checked.run(prog, {"image": np.zeros(prog.input_shape, np.float32)}) is None
    assert checked.reason is None and "binding" in next(iter(checked.program_reasons.values()))


@pytest.mark.parametrize("name,shape", [("every-op", None), ("yunet-arch", (1, 3, 96, 128)),
                                        ("sface-arch-small", (2, 3, 112, 112)),
                                        ("auraface-arch-small", (2, 3, 112, 112))])
def test_replicas_agree_with_the_cpu(gpu_model, name, shape):
    net = facerun.load(name)
    prog = net.program(shape or net.default_shape(1))
    feeds = check_inputs(prog, seed=3)
    want = cpu.run_program(prog, feeds)
    got = gpu_model.run(prog, feeds)
    assert disagreement(want, got) is None


@pytest.mark.parametrize("file,shape", [("face_detection_yunet_2023mar.onnx", (1, 3, 160, 224)),
                                        ("face_detection_yunet_2022mar.onnx", (1, 3, 96, 128)),
                                        ("MobileFaceNet.onnx", (2, 3, 112, 112))])
def test_real_models_agree_with_the_cpu(gpu_model, models_dir, file, shape):
    net = facerun.load(str(models_dir / file))
    prog = net.program(shape)
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 255 if "yunet" in file else 1, shape).astype(np.float32)
    want = cpu.run_program(prog, {net.input_name: x})
    got = gpu_model.run(prog, {net.input_name: x})
    assert disagreement(want, got) is None


def test_checked_attach_uses_the_gpu_and_falls_back_on_a_device_failure(gpu, caplog):
    net = facerun.load("every-op", device="auto")
    assert net.gpu is not None and net.runner is net.gpu
    x = check_inputs(net.program(net.default_shape(1)), seed=9)[net.input_name]
    want = net.run_cpu(x)
    first = net.run(x)
    assert net.gpu is not None and net.device != "cpu"
    assert all(close(first[k], want[k].astype(np.float64))[0] for k in want)
    try:
        D.inject_failure("submit")
        with caplog.at_level(logging.WARNING, logger="facerun.gpu"):
            after = net.run(x)
            net.run(x)
        assert net.gpu is None and net.device == "cpu"
        assert "injected failure" in net.gpu_reason
        # said once, and the answer is the CPU's
        assert sum("GPU dropped" in r.message for r in caplog.records) == 1
        assert all(np.array_equal(after[k], want[k]) for k in want)
        assert D.broken_reason() is not None
        with pytest.raises(GpuError, match="not used any more"):
            D.get_device()
    finally:
        D.inject_failure(None)
        D.clear_broken()
    assert D.get_device() is gpu


def test_env_injection_fails_the_next_submission_once(gpu, monkeypatch):
    prog = small_net_program(batch=1)
    model = GpuModel(dev=gpu)
    checked = CheckedGpu(model)
    x = {"image": RNG.standard_normal(prog.input_shape).astype(np.float32)}
    assert checked.run(prog, x) is not None
    monkeypatch.setattr(D, "_env_injection_used", False)
    monkeypatch.setenv("FACERUN_GPU_INJECT_FAILURE", "readback")
    try:
        assert checked.run(prog, x) is None
        assert "read-back" in checked.reason
    finally:
        D.clear_broken()
    assert model.run(prog, x) is not None  # consumed: the next submission works


def test_a_disagreeing_gpu_is_not_used(gpu):
    prog = small_net_program(batch=1)

    def wrong_cpu(p, feeds):
        out = cpu.run_program(p, feeds)
        return {k: v + 1.0 for k, v in out.items()}

    checked = CheckedGpu(GpuModel(dev=gpu), cpu_run=wrong_cpu)
    assert checked.run(prog, {"image": np.ones(prog.input_shape, np.float32)}) is None
    assert "disagrees" in checked.reason
    strict = CheckedGpu(GpuModel(dev=gpu), cpu_run=wrong_cpu, strict=True)
    with pytest.raises(GpuError, match="disagrees"):
        strict.run(prog, {"image": np.ones(prog.input_shape, np.float32)})


def test_concurrent_runs_share_a_model(gpu_model):
    prog = small_net_program(batch=1)
    xs = [RNG.standard_normal(prog.input_shape).astype(np.float32) for _ in range(4)]
    wants = [cpu.run_program(prog, {"image": x}) for x in xs]
    results = [None] * 4

    def work(i):
        results[i] = gpu_model.run(prog, {"image": xs[i]})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for want, got in zip(wants, results):
        assert disagreement(want, got) is None


def test_arena_headroom_stops_at_the_largest_binding():
    """A slot buffer grows with headroom, but never past what a bind group can bind whole (a value near the device's
    largest binding used to grow past it, and the program's bind groups then failed to make)."""
    from facerun.gpu.arena import Arena

    class Buffer:
        def __init__(self, size):
            self.size = size

    class Device:
        limits = Limits(max_binding=1 << 20)

        class device:
            @staticmethod
            def create_buffer(label, size, usage):
                return Buffer(size)

    arena = Arena(Device())
    arena.fit([900 << 10], 256, 16)
    arena.fit([1000 << 10], 256, 16)  # 1.25x headroom would be 1.2 MiB
    assert arena.buffers[0].size == 1 << 20
    arena.fit([600 << 10, 800 << 10], 256, 16)  # a new slot, and room in the grown one
    assert [b.size for b in arena.buffers] == [1 << 20, 800 << 10]
