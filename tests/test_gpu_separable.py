"""A 1x1 convolution and the depthwise 3x3 reading it in one dispatch (gpu/fusion.py `separable_pairs`,
plan.plan_separable, shaders/separable.wgsl): which pairs are taken (pure, no GPU), and on the device the fused pass
against the CPU and the two-dispatch run, on awkward sizes, with the depthwise's residual, activation and NHWC
transpose, and masked to a smaller photo."""

from __future__ import annotations

import numpy as np
import pytest

from facerun import cpu
from facerun import program as P
from facerun.gpu.fusion import separable_pairs
from facerun.gpu.lower import lower
from facerun.gpu.model import GpuModel, _no_consts
from facerun.gpu.plan import ConvShape, Limits, plan_separable

from gpu_fixtures import Builder, close, photo_in_corner

RELU = P.Activation("relu")


def _pair(shape=(1, 6, 20, 24), cout=10, pw_act=None, pw_bias=True, dw_act=RELU, residual=False, nhwc=False,
          extra_reader=False, dw_stride=1, seed=0):
    """x -> 1x1 (cin -> cout) -> depthwise 3x3 pad 1 (-> + residual) (-> NHWC): the program and its fused pair."""
    rng = np.random.default_rng(seed)
    b, cin, h, w = shape
    bld = Builder()
    x = bld.input("x", shape)
    res = bld.input("r", (b, cout, h, w)) if residual else None
    pw = bld.step(P.Conv, (b, cout, h, w), x=x, weight=rng.normal(size=(cout, cin, 1, 1)).astype(np.float32),
                  bias=rng.normal(size=cout).astype(np.float32) if pw_bias else None, groups=1, stride=(1, 1),
                  dilation=(1, 1), pads=(0, 0, 0, 0), act=pw_act)
    oh, ow = -(-h // dw_stride), -(-w // dw_stride)
    dw = bld.step(P.Conv, (b, cout, oh, ow), x=pw, weight=rng.normal(size=(cout, 1, 3, 3)).astype(np.float32),
                  bias=rng.normal(size=cout).astype(np.float32), groups=cout, stride=(dw_stride, dw_stride),
                  dilation=(1, 1), pads=(1, 1, 1, 1), act=dw_act, residual=res)
    outs = [dw]
    if nhwc:
        outs = [bld.step(P.Copy, (b, oh, ow, cout), x=dw, offset=0, strides=(cout * oh * ow, ow, 1, oh * ow))]
    if extra_reader:
        outs.append(bld.step(P.Unary, (b, cout, h, w), x=pw, act=RELU))
    return bld.program(*outs)


def _shapes(prog):
    pw, dw = [st for st in prog.steps if type(st) is P.Conv]
    def shape(st):
        (b, cin, h, w), (_, cout, oh, ow) = prog.values[st.x].shape, prog.values[st.out].shape
        return ConvShape(b, cin, h, w, cout, oh, ow, st.groups, st.kernel, st.stride, st.dilation, st.pads)
    return shape(pw), shape(dw)


def test_the_pairs_taken_and_the_ones_left():
    assert len(separable_pairs(_pair())) == 1
    assert len(separable_pairs(_pair(residual=True, nhwc=True))) == 1  # the depthwise keeps its own epilogue
    assert not separable_pairs(_pair(pw_act=RELU))  # the 1x1's own activation would need a second epilogue
    assert not separable_pairs(_pair(extra_reader=True))  # its output is needed in device memory too
    # a pair of the program that plan_separable refuses: a stride, or too few threads a workgroup
    assert plan_separable(*_shapes(_pair(dw_stride=2))) is None
    assert plan_separable(*_shapes(_pair()), Limits(max_invocations=128)) is None
    assert plan_separable(*_shapes(_pair()), Limits(max_workgroup_storage=2048)) is None


def test_the_plan_covers_every_output_once():
    for shape, cout in (((2, 6, 20, 24), 10), ((1, 16, 160, 160), 32), ((1, 64, 20, 20), 1), ((3, 16, 7, 41), 4)):
        pw, dw = _shapes(_pair(shape, cout))
        plan = plan_separable(pw, dw)
        assert (plan.th + 2) * (plan.tw + 2) == 256 and (plan.th, plan.tw) in ((6, 30), (14, 14))
        assert plan.quads == (4 if cout > 8 else 2 if cout > 4 else 1)
        assert plan.tiles == -(-dw.oh // plan.th) * plan.tiles_x and plan.tiles_x * plan.tw >= dw.ow
        assert plan.blocks * 4 * plan.quads >= cout > (plan.blocks - 1) * 4 * plan.quads
        assert plan.workgroups == plan.tiles * plan.blocks * shape[0] <= plan.grid[0] * plan.grid[1]
        # the tile shape that computes the fewer bordered positions
        other = next(t for t in ((6, 30), (14, 14)) if t != (plan.th, plan.tw))
        assert plan.tiles <= -(-dw.oh // other[0]) * -(-dw.ow // other[1])
    # a 1x1 of more than one channel block fused only while small: YuNet's 16 -> 32 is, its 32 -> 32 not; one of 16
    # channels or fewer always (the heads)
    assert plan_separable(*_shapes(_pair((1, 32, 40, 40), 32))) is None
    assert plan_separable(*_shapes(_pair((1, 64, 40, 40), 16))).blocks == 1
    # a device with 16 KiB of workgroup memory takes 16 channels a workgroup, one with 8 KiB 8
    pw, dw = _shapes(_pair((1, 16, 40, 40), 32))
    assert plan_separable(pw, dw, Limits(max_workgroup_storage=16384)).quads == 4
    assert plan_separable(pw, dw, Limits(max_workgroup_storage=8192)).quads == 2


def test_lowering_makes_one_dispatch_writing_the_depthwises_output():
    for prog in (_pair(nhwc=True), _pair(residual=True)):  # the transpose folded too; the residual read
        low = lower(prog, Limits(), _no_consts)
        fused = low.dispatches
        apart = lower(prog, Limits(), _no_consts, separable=False).dispatches
        assert [d.kernel.stem for d in fused] == ["separable"] and len(apart) == 2
        (d,) = fused
        assert d.out == ("slot", low.outputs[0][2]) and d.mask == apart[-1].mask and d.also == (prog.steps[1].node,)
        assert (d.reads[3] is not None) == (apart[-1].reads[3] is not None) == (len(prog.inputs) == 2)


@pytest.mark.parametrize("case", [
    dict(),
    dict(shape=(2, 5, 37, 45), cout=10, residual=True, nhwc=True),  # ragged tiles, a block half used
    dict(shape=(1, 16, 9, 13), cout=3, pw_bias=False, dw_act=None),  # one quad, part used; tiles of 16
    dict(shape=(1, 64, 40, 40), cout=16, seed=2),  # a head of YuNet's: one block, a long input
    dict(shape=(2, 16, 33, 35), cout=32, seed=3),  # two blocks
])
def test_the_fused_pass_agrees_with_the_cpu_and_the_two_dispatches(gpu, case):
    prog = _pair(**case)
    rng = np.random.default_rng(5)
    feeds = {name: rng.normal(size=prog.values[vid].shape).astype(np.float32) for name, vid in prog.inputs}
    want = cpu.run_program(prog, feeds)
    got = {}
    for separable in (True, False):
        model = GpuModel(dev=gpu)
        model.separable = separable
        gp = model.compile(prog)
        assert any(k.startswith("separable.wgsl") for k in gp.kernel_keys) == separable
        got[separable] = gp.run(feeds)
    for name, w in want.items():
        ok, worst = close(got[True][name], w)
        assert ok, (name, worst)
        assert close(got[True][name], got[False][name])[0]


def _block(size: int) -> P.Program:
    """A 3x3 stem, then a 1x1 with a large bias and a depthwise 3x3 without one, at size x size (the same weights at
    every size)."""
    rng = np.random.default_rng(1)
    bld = Builder()
    x = bld.input("input", (1, 3, size, size))
    conv = dict(stride=(1, 1), dilation=(1, 1))
    stem = bld.step(P.Conv, (1, 8, size, size), x=x, weight=rng.normal(size=(8, 3, 3, 3)).astype(np.float32),
                    bias=np.ones(8, np.float32), groups=1, pads=(1,) * 4, act=RELU, **conv)
    pw = bld.step(P.Conv, (1, 8, size, size), x=stem, weight=rng.normal(size=(8, 8, 1, 1)).astype(np.float32),
                  bias=np.full(8, 3.0, np.float32), groups=1, pads=(0,) * 4, **conv)
    dw = bld.step(P.Conv, (1, 8, size, size), x=pw, weight=rng.normal(size=(8, 1, 3, 3)).astype(np.float32),
                  bias=None, groups=8, pads=(1,) * 4, act=RELU, **conv)
    return bld.program(dw)


def test_a_masked_fused_pass_zeroes_the_1x1_past_the_photo(gpu):
    """Masked to a 32x32 photo in a 64x64 program, the fused pass gives what the photo's own 32x32 program gives:
    its depthwise reads 0 past the photo, where the 1x1 alone would have its bias."""
    from facerun.gpu import masking

    big, small = _block(64), _block(32)
    assert masking.maskable(big, 32) is None and separable_pairs(big)
    photo, padded = photo_in_corner((32, 32), (64, 64))
    gp = GpuModel(dev=gpu).compile(big)
    assert any(k.startswith("separable.wgsl") for k in gp.kernel_keys)
    name = big.outputs[0][0]
    masked = gp.run({"input": padded}, photo=(32, 32))[name]
    want = cpu.run_program(small, {"input": photo})[small.outputs[0][0]]
    assert close(masked[:, :, :32, :32], want)[0]
    assert not masked[:, :, 32:].any() and not masked[:, :, :, 32:].any()
    # without the mask the 1x1's bias past the photo reaches the photo's last row and column
    unmasked = gp.run({"input": padded})[name][:, :, :32, :32]
    assert not close(unmasked, want)[0]


def test_a_fused_variant_not_checked_yet_is_checked_with_the_whole_program(gpu):
    """A program of the 1x1 alone would not run the fused kernel: a variant of it still unchecked is checked by the
    whole program against the CPU, not passed on a layer that never ran it."""
    import facerun

    net = facerun.load("yunet-2023mar", device="gpu")
    prog = net.program((1, 3, 96, 128))
    net.run(np.zeros(prog.input_shape, np.float32))  # the model's own check
    checked = net.gpu
    fused = {d.kernel.key for d in checked.model.compile(prog).dispatches if d.also}
    assert fused and fused <= checked.verified
    checked.verified -= fused
    ran, real = [], checked.cpu_run
    checked.cpu_run = lambda p, feeds: ran.append(len(p.steps)) or real(p, feeds)
    checked.check_variants(prog)
    assert fused <= checked.verified and len(prog.steps) in ran
