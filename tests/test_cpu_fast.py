"""The fast CPU interpreter (channels-last, arena, fused kernels) against the plain NCHW reference."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from facerun import blas, cpu
from facerun import program as P
from facerun.cpu import arena, conv, elementwise, interpreter, separable, winograd
from facerun.net import load
from facerun.zoo.replicas import replica_path

from conftest import real_model

RNG = np.random.default_rng(13)


def _conv(cin, cout, k=3, stride=1, pads=(1, 1, 1, 1), groups=1, dilation=1, act=None, bias=True):
    w = RNG.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32) if bias else None
    return P.Conv(out=1, node="conv", x=0, weight=w, bias=b, groups=groups, stride=(stride, stride),
                  dilation=(dilation, dilation), pads=pads, act=act)


def _out_shape(st, x_shape):
    n, _, h, w = x_shape
    top, left, bottom, right = st.pads
    (kh, kw), (sh, sw), (dh, dw) = st.kernel, st.stride, st.dilation
    return (n, st.weight.shape[0], (h + top + bottom - dh * (kh - 1) - 1) // sh + 1,
            (w + left + right - dw * (kw - 1) - 1) // sw + 1)


def _fast(build, st, x_nchw, residual=None):
    """One kernel built twice (measure the scratch, then bind), run, its epilogue applied, back to NCHW."""
    out_shape = _out_shape(st, x_nchw.shape)
    x = x_nchw if build is conv.stem else np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    out = np.full(_nhwc(out_shape), np.nan, np.float32)
    res = None if residual is None else np.ascontiguousarray(residual.transpose(0, 2, 3, 1))
    ctx = interpreter._Run()
    conv.fused(st, build, x, out, res, arena.Scratch(), ctx)()
    return out.transpose(0, 3, 1, 2)


def _nhwc(shape):
    n, c, h, w = shape
    return (n, h, w, c)


def _reference(st, x, residual=None):
    args = [x] if residual is None else [x, residual]
    st.residual = None if residual is None else 2
    y = cpu.run_step(st, args, _out_shape(st, x.shape))
    st.residual = None
    return y


def _close(got, want):
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("n,cin,cout,h,w,pads", [
    (1, 16, 24, 7, 9, (1, 1, 1, 1)),  # odd height and width: the last tiles cropped
    (2, 20, 16, 5, 5, (1, 1, 1, 1)),
    (1, 16, 8, 11, 6, (0, 1, 2, 0)),  # uneven padding
    (3, 32, 32, 4, 13, (1, 1, 1, 1)),
])
def test_winograd_equals_the_direct_sum_on_odd_shapes(n, cin, cout, h, w, pads):
    st = _conv(cin, cout, pads=pads, act=P.Activation("relu"))
    x = RNG.standard_normal((n, cin, h, w)).astype(np.float32)
    _close(_fast(winograd.winograd, st, x), _reference(st, x))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pads,h,w", [((1, 1, 1, 1), 9, 14), ((0, 1, 1, 0), 8, 7), ((2, 2, 2, 2), 5, 5),
                                      ((0, 0, 0, 0), 6, 9)])
def test_depthwise_equals_the_reference(stride, pads, h, w):
    c = 24
    slope = RNG.uniform(-0.5, 2.0, c).astype(np.float32)
    st = _conv(c, c, stride=stride, pads=pads, groups=c, act=P.Activation("prelu", slope=slope))
    x = RNG.standard_normal((2, c, h, w)).astype(np.float32)
    _close(_fast(conv.depthwise, st, x), _reference(st, x))


@pytest.mark.parametrize("n,h,w", [(2, 9, 14), (1, 2, 2), (3, 5, 3), (1, 40, 7)])
def test_depthwise_read_in_place_ignores_what_lies_around_the_tensor(n, h, w):
    """The copy-free 3x3 kernel reads one pixel past each row end (the arena's slack, or the next image): NaNs
    placed there must not reach the result."""
    c = 8
    st = _conv(c, c, groups=c, act=P.Activation("relu"))
    x_nchw = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    room = np.full(n * h * w * c + 2 * c, np.nan, np.float32)
    x = room[c : c + n * h * w * c].reshape(n, h, w, c)
    x[...] = x_nchw.transpose(0, 2, 3, 1)
    out = np.full((n, h, w, c), np.nan, np.float32)
    assert conv._depthwise_in_place(st, x, out, arena.Scratch()) is not None
    conv.fused(st, conv.depthwise, x, out, None, arena.Scratch(), interpreter._Run())()
    _close(out.transpose(0, 3, 1, 2), _reference(st, x_nchw))


def test_depthwise_7x7_without_padding_is_a_global_depthwise():
    st = _conv(32, 32, k=7, pads=(0, 0, 0, 0), groups=32, bias=False)
    x = RNG.standard_normal((3, 32, 7, 7)).astype(np.float32)
    _close(_fast(conv.depthwise, st, x), _reference(st, x))


@pytest.mark.parametrize("n,cin,c,h,w,band_rows,pw_act,bias", [
    (1, 5, 8, 9, 7, 4, None, True),  # bands of 4, 4 and 1 rows; the 1x1 bias moved past the depthwise
    (2, 16, 24, 1, 2, 1, None, True),  # one row, two columns, two images
    (1, 8, 16, 6, 5, 1, P.Activation("prelu", slope=RNG.uniform(-0.5, 2.0, 16).astype(np.float32)), True),
    (3, 12, 4, 5, 3, 100, None, False),  # one band a whole image, no biases
    (1, 6, 6, 11, 9, 3, P.Activation("relu"), True),
    (2, 7, 1, 6, 5, 2, None, True),  # one output channel: a dense 3x3 convolution is a depthwise one (YuNet's heads)
])
def test_a_1x1_then_a_depthwise_band_by_band_equals_the_two_steps(monkeypatch, n, cin, c, h, w, band_rows, pw_act,
                                                                   bias):
    """The fused pair (separable.py) against the reference's 1x1 then 3x3 depthwise, with NaN in its scratch (the row
    views wrap into its slack) and a residual on some."""
    monkeypatch.setattr(separable, "BAND_BYTES", band_rows * w * c * 4)
    pw = _conv(cin, c, k=1, pads=(0, 0, 0, 0), act=pw_act, bias=bias)
    dw = _conv(c, c, groups=c, act=P.Activation("prelu", slope=RNG.uniform(-0.5, 2.0, c).astype(np.float32)),
               bias=bias)
    assert separable.suits(pw, dw, (n, c, h, w))
    x = RNG.standard_normal((n, cin, h, w)).astype(np.float32)
    mid = _reference(pw, x)
    res = RNG.standard_normal(mid.shape).astype(np.float32) if n == 2 else None
    want = _reference(dw, mid, res)
    scratch = arena.Scratch()
    scratch.get("pwdw", (10 * n * h * w * c + 64,)).fill(np.nan)
    out = np.full((n, h, w, c), np.nan, np.float32)
    step, build = separable.pointwise_depthwise(pw, dw)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    residual = None if res is None else np.ascontiguousarray(res.transpose(0, 2, 3, 1))
    conv.fused(step, build, nhwc, out, residual, scratch, interpreter._Run())()
    _close(out.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("act", [P.Activation("relu"),
                                 P.Activation("prelu", slope=np.linspace(-1, 2, 8, dtype=np.float32))])
@pytest.mark.parametrize("n,h,w,band_rows", [(2, 9, 7, 2), (1, 8, 6, 4), (1, 5, 5, 100), (3, 3, 2, 2)])
def test_a_pair_then_its_max_pooling_band_by_band_equals_the_three_steps(monkeypatch, n, h, w, band_rows, act):
    """separable.pooled (odd heights and widths: the last row and column are not pooled) against the reference; a ReLU
    and the bias come after the pooling, a PReLU (not monotonic) before."""
    c = 8
    monkeypatch.setattr(separable, "BAND_BYTES", band_rows * w * c * 4)
    pw = _conv(6, c, k=1, pads=(0, 0, 0, 0))
    dw = _conv(c, c, groups=c, act=act)
    pool = P.Pool(out=2, node="pool", x=1, kind="max", kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0))
    x = RNG.standard_normal((n, 6, h, w)).astype(np.float32)
    mid = _reference(dw, _reference(pw, x))
    want = cpu.run_step(pool, [mid], (n, c, h // 2, w // 2))
    out = np.full((n, h // 2, w // 2, c), np.nan, np.float32)
    scratch = arena.Scratch()
    scratch.get("dwband", (n * h * w * c,)).fill(np.nan)
    separable.pooled(pw, dw, np.ascontiguousarray(x.transpose(0, 2, 3, 1)), out, scratch, interpreter._Run())()
    _close(out.transpose(0, 3, 1, 2), want)


def test_only_a_1x1_read_by_nothing_but_its_depthwise_is_fused():
    """YuNet's 26 1x1 -> depthwise pairs fuse (6 of them one-channel 3x3 convolutions: depthwise too); one whose 1x1
    output is also a program output does not (and the run still equals the reference); SFace's 1x1s before stride-2
    depthwise layers do not."""
    net = load(str(real_model("face_detection_yunet_2023mar.onnx")))
    prog = net.program((1, 3, 64, 96))
    pairs = interpreter._pairs(prog)
    assert len(pairs) == 26
    assert interpreter.Executable(prog).kinds.count("pwdw_pool") == 2  # the two pools whose input nothing else reads
    shown = min(pairs)
    prog2 = dataclasses.replace(prog, outputs=prog.outputs + [("mid", shown)])
    assert interpreter._pairs(prog2) == pairs - {shown}
    feeds = {net.input_name: RNG.uniform(0, 255, (1, 3, 64, 96)).astype(np.float32)}
    seen = {}
    want = cpu.run_program(prog, feeds, on_step=lambda st, y: seen.update({st.out: y.copy()}) if st.out == shown else 0)
    want["mid"] = seen[shown]
    got = cpu.run_program(prog2, feeds)
    assert set(got) == set(want)
    for k in want:
        _close(got[k], want[k])
    sface = load(str(replica_path("sface-arch-small")))
    kinds = interpreter.Executable(sface.program((1, 3, 112, 112))).kinds
    assert "pwdw" in kinds and "depthwise" in kinds
    assert kinds[:2] == ["binary", "binary"] and "reference" not in kinds  # its input scaling in place, NCHW


@pytest.mark.parametrize("stride,dilation,pads", [(1, 1, (1, 1, 1, 1)), (2, 1, (1, 0, 1, 1)), (1, 2, (2, 2, 2, 2)),
                                                  (2, 1, (0, 0, 0, 0))])
def test_dense_im2col_and_the_stem_equal_the_reference(stride, dilation, pads):
    for cin, build in ((3, conv.stem), (3, conv.dense), (12, conv.dense)):
        st = _conv(cin, 10, stride=stride, dilation=dilation, pads=pads, act=P.Activation("clip", lo=-1, hi=1))
        x = RNG.standard_normal((2, cin, 11, 9)).astype(np.float32)
        _close(_fast(build, st, x), _reference(st, x))


def test_pointwise_with_a_residual_and_a_stride():
    for stride in (1, 2):
        st = _conv(16, 16, k=1, stride=stride, pads=(0, 0, 0, 0), act=P.Activation("sigmoid"))
        x = RNG.standard_normal((2, 16, 9, 7)).astype(np.float32)
        res = RNG.standard_normal(_out_shape(st, x.shape)).astype(np.float32)
        _close(_fast(conv.pointwise, st, x, res), _reference(st, x, res))


@pytest.mark.parametrize("act", [
    P.Activation("prelu", slope=np.array([0.25, -0.5, 1.0, 0.0], np.float32)),  # all <= 1: maximum
    P.Activation("prelu", slope=np.array([1.5, 2.0, 1.0, 3.0], np.float32)),  # all >= 1: minimum
    P.Activation("prelu", slope=np.array([0.5, 2.0, -1.0, 1.5], np.float32)),  # mixed
    P.Activation("leaky", alpha=0.1), P.Activation("leaky", alpha=4.0), P.Activation("relu"),
    P.Activation("sigmoid"), P.Activation("hardswish", alpha=1 / 6, lo=0.5), P.Activation("clip", lo=0, hi=6),
])
def test_in_place_activations_are_the_reference_bit_for_bit(act):
    x = (RNG.standard_normal((2, 4, 5, 3)) * 4).astype(np.float32)
    x[0, 0, 0, 0] = 0.0
    want = cpu.activate(x.copy(), act)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    elementwise.inplace_activation(act, nhwc, arena.Scratch(), channels_last=True)()
    np.testing.assert_array_equal(nhwc.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("src_y,src_x", [
    ([0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1]),  # integer factors 2 and 3: one broadcast copy
    ([0, 1, 1, 2, 2, 2], [0, 0, 1]),  # anything else: rows taken, then columns
])
def test_nearest_resize_equals_the_reference(src_y, src_x):
    st = P.Resize(out=1, node="resize", x=0, src_y=np.array(src_y, np.int32), src_x=np.array(src_x, np.int32))
    x = RNG.standard_normal((2, 5, 3, 2)).astype(np.float32)
    want = cpu.run_step(st, [x], (2, 5, len(src_y), len(src_x)))
    out = np.full((2, len(src_y), len(src_x), 5), np.nan, np.float32)
    elementwise.resize(st, np.ascontiguousarray(x.transpose(0, 2, 3, 1)), out, arena.Scratch())()
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want)


# --------------------------------------------------------------------------------------------- whole programs


def _whole(net, shape, seed=0, scale=1.0):
    prog = net.program(shape) if shape[0] == 1 or net.batch_free else net.batch_program(shape)
    x = (np.random.default_rng(seed).uniform(0, 1, shape) * scale).astype(np.float32)
    feeds = {net.input_name: x}
    return prog, feeds


@pytest.mark.parametrize("name,shape", [
    ("sface-arch-small", (2, 3, 112, 112)), ("auraface-arch-small", (1, 3, 112, 112)),
    ("yunet-arch", (1, 3, 96, 128)), ("every-op", (1, 4, 9, 7)),
])
def test_channels_last_equals_nchw_over_a_whole_replica(name, shape):
    net = load(str(replica_path(name)))
    prog, feeds = _whole(net, shape)
    want = cpu.run_program(prog, feeds, reference=True)
    got = cpu.run_program(prog, feeds)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == np.float32
        _close(got[k], want[k])


@pytest.mark.parametrize("name", ["sface-arch-small", "auraface-arch-small"])
def test_the_batch_norm_before_the_fully_connected_layer_folds_into_its_weights(name):
    net = load(str(replica_path(name)))
    prog, feeds = _whole(net, (2, 3, 112, 112))
    plan = interpreter.Planner(prog)
    gemm = next(op for op in plan.ops if op.kind == "gemm")
    assert isinstance(gemm.info, tuple) and isinstance(gemm.info[1], P.Affine)
    assert sum(isinstance(st, P.Affine) for st in prog.steps) == [op.kind for op in plan.ops].count("affine") + 1
    want = cpu.run_program(prog, feeds, reference=True)
    got = cpu.run_program(prog, feeds)
    for k in want:
        _close(got[k], want[k])


def test_channels_last_equals_nchw_on_yunet_at_an_odd_size():
    net = load(str(real_model("face_detection_yunet_2023mar.onnx")))
    prog, feeds = _whole(net, (1, 3, 96, 160), scale=255)
    kinds = interpreter.Executable(prog).kinds
    assert {"stem", "pwdw", "pwdw_pool", "maxpool", "resize", "unary"} <= set(kinds) and "reference" not in kinds
    want = cpu.run_program(prog, feeds, reference=True)
    got = cpu.run_program(prog, feeds)
    for k in want:
        _close(got[k], want[k])


def test_the_environment_switch_runs_the_reference(monkeypatch):
    net = load(str(replica_path("sface-arch-small")))
    prog, feeds = _whole(net, (1, 3, 112, 112))
    fast_runs = []
    real = interpreter.run_fast
    monkeypatch.setattr(interpreter, "run_fast", lambda *a: fast_runs.append(1) or real(*a))
    monkeypatch.setenv("FACERUN_CPU_REFERENCE", "1")
    want = cpu.run_program(prog, feeds)["fc1"]
    assert fast_runs == []
    cpu.run_program(prog, feeds, on_step=lambda st, y: None)  # a step hook sees NCHW values: the reference
    monkeypatch.delenv("FACERUN_CPU_REFERENCE")
    assert fast_runs == []
    _close(cpu.run_program(prog, feeds)["fc1"], want)
    assert fast_runs == [1]


# ---------------------------------------------------------------------------------------------------- the arena


def test_the_arena_is_reused_and_outputs_stay_the_callers():
    net = load(str(replica_path("auraface-arch-small")))
    prog, feeds = _whole(net, (2, 3, 112, 112))
    first = cpu.run_program(prog, feeds)
    kept = arena.kept_bytes()
    exe = arena._kept[id(prog)][1][0]
    buffers = [b.ctypes.data for b in exe.slots]
    held = {k: v.copy() for k, v in first.items()}
    again = cpu.run_program(prog, feeds)
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])  # two runs, one result
    other = cpu.run_program(prog, {net.input_name: feeds[net.input_name][::-1].copy()})
    assert not np.array_equal(other[next(iter(other))], first[next(iter(first))])
    for k in first:
        np.testing.assert_array_equal(first[k], held[k])  # a later run left the caller's arrays alone
        assert not np.shares_memory(first[k], other[k])
    assert arena.kept_bytes() == kept  # no growth
    assert arena._kept[id(prog)][1] == [exe] and [b.ctypes.data for b in exe.slots] == buffers


def test_concurrent_runs_of_one_program_get_their_own_arenas():
    net = load(str(replica_path("sface-arch-small")))
    prog, _ = _whole(net, (1, 3, 112, 112))
    xs = [np.random.default_rng(i).uniform(0, 1, (1, 3, 112, 112)).astype(np.float32) for i in range(4)]
    want = [cpu.run_program(prog, {net.input_name: x}, reference=True)["fc1"] for x in xs]
    got: dict[int, np.ndarray] = {}

    def work(i):
        for _ in range(3):
            got[i] = cpu.run_program(prog, {net.input_name: xs[i]})["fc1"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        _close(got[i], want[i])


def test_an_executable_goes_with_its_program():
    import gc

    net = load(str(replica_path("sface-arch-small")))
    prog = net.program((3, 3, 112, 112))
    cpu.run_program(prog, {net.input_name: np.zeros(prog.input_shape, np.float32)})
    key = id(prog)
    assert key in arena._kept
    net._programs.pop((3, 3, 112, 112))
    del prog
    gc.collect()
    assert key not in arena._kept  # nothing of the executable kept the program alive


def test_executables_leave_under_the_budget(monkeypatch):
    monkeypatch.setenv("FACERUN_CPU_ARENA_MB", "1")
    net = load(str(replica_path("sface-arch-small")))
    progs = [net.program((1, 3, 112, 112)), net.program((2, 3, 112, 112))]
    for prog in progs:
        cpu.run_program(prog, {net.input_name: np.zeros(prog.input_shape, np.float32)})
    assert id(progs[1]) in arena._kept and id(progs[0]) not in arena._kept


# ------------------------------------------------------------------------------------------------ BLAS threads


def test_a_small_product_does_not_leave_openblas_on_one_thread():
    if blas.current_threads() is None:
        pytest.skip("numpy's OpenBLAS can't be reached here")
    getter = blas.openblas_symbol("get_num_threads")
    blas.set_threads(2)
    with blas.threads_for(10, 2):
        assert getter() == 1
    assert getter() == 2 == blas.current_threads()
    with blas.threads_for(blas.SMALL_MACS * 4, 2):
        assert getter() == 2
    # and a whole run gives back the count it found
    net = load(str(replica_path("sface-arch-small")))
    prog, feeds = _whole(net, (1, 3, 112, 112))
    cpu.run_program(prog, feeds)
    assert getter() == 2
