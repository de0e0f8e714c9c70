"""A detector's heads in one pass (gpu/fusion.py `head_groups`; separable.wgsl with HEADS): which heads are grouped
(pure, no GPU), the one dispatch and the one slot the lowering makes for a group, and on the device each head's
output against the CPU: several layouts and activations, biases or none, a batch, more channels than one block, and
masked to a smaller photo."""

from __future__ import annotations

import numpy as np
import pytest

from facerun import cpu
from facerun import program as P
from facerun.gpu.fusion import head_groups
from facerun.gpu.lower import HEAD_ALIGN, lower
from facerun.gpu.model import GpuModel, _no_consts
from facerun.gpu.plan import Limits

from gpu_fixtures import Builder, close, photo_in_corner

SIGMOID, RELU = P.Activation("sigmoid"), P.Activation("relu")
CONV = dict(stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), groups=1)
YUNET = ((1, "sigmoid", False), (4, None, True), (1, "sigmoid", False), (10, None, True))  # cls, bbox, obj, kps


def _heads(shape=(1, 16, 12, 20), heads=YUNET, bias=True, stem=False, read_again=None, residual=None, seed=0,
           second_input=None):
    """input (-> 3x3 stem) -> ReLU -> per head (width, activation, NHWC): 1x1 -> depthwise 3x3 (-> the activation,
    through a flattening view for one channel) (-> NHWC transpose). read_again: a head whose output a ReLU reads
    too; residual: a head whose depthwise adds the input; second_input: a head reading another value."""
    rng = np.random.default_rng(seed)
    b, c, h, w = shape
    bld = Builder()
    x = bld.input("input", (b, 3, h, w) if stem else shape)
    if stem:
        x = bld.step(P.Conv, shape, x=x, weight=rng.normal(size=(c, 3, 3, 3)).astype(np.float32),
                     bias=np.ones(c, np.float32), act=None, **dict(CONV, pads=(1,) * 4))
    x = bld.step(P.Unary, shape, x=x, act=RELU)
    other = bld.step(P.Unary, shape, x=x, act=SIGMOID) if second_input is not None else None
    outs = []
    for k, (width, act, nhwc) in enumerate(heads):
        def maybe(size):
            return rng.normal(size=size).astype(np.float32) if bias else None

        src = other if k == second_input else x
        pw = bld.step(P.Conv, (b, width, h, w), x=src, weight=rng.normal(size=(width, c, 1, 1)).astype(np.float32),
                      bias=maybe(width), act=None, **CONV)
        dw = bld.step(P.Conv, (b, width, h, w), x=pw, weight=rng.normal(size=(width, 1, 3, 3)).astype(np.float32),
                      bias=maybe(width), act=None, residual=pw if k == residual else None,
                      **dict(CONV, groups=width, pads=(1,) * 4))
        last = dw
        if act is not None:
            a = P.Activation(act, slope=np.full(width, 0.1, np.float32) if act == "prelu" else None)
            if width == 1:
                last = bld.step(P.Unary, (b, h * w, 1), x=bld.view(dw, (b, h * w, 1)), act=a)
            else:
                last = bld.step(P.Unary, (b, width, h, w), x=dw, act=a)
        if nhwc:
            last = bld.step(P.Copy, (b, h, w, width), x=last, offset=0, strides=(width * h * w, w, 1, h * w))
        outs.append(last)
        if k == read_again:
            outs.append(bld.step(P.Unary, bld.values[last].shape, x=last, act=RELU))
    return bld.program(*outs)


def _members(prog) -> list[list[str]]:
    return [[h.pw.node for h in group] for group in head_groups(prog)]


def test_the_heads_grouped_and_the_ones_left():
    groups = head_groups(_heads())
    assert len(groups) == 1 and [h.pw.weight.shape[0] for h in groups[0]] == [1, 4, 1, 10]
    assert [h.nhwc for h in groups[0]] == [False, True, False, True]
    assert [None if h.act is None else h.act.kind for h in groups[0]] == ["sigmoid", None, "sigmoid", None]
    five = _heads(heads=YUNET + ((2, None, False),))
    assert [len(g) for g in head_groups(five)] == [4]  # four to a pass; the fifth alone makes no group
    assert [len(g) for g in head_groups(_heads(read_again=1))] == [3]  # an output another step reads stays apart
    assert [len(g) for g in head_groups(_heads(residual=2))] == [3]
    assert [len(g) for g in head_groups(_heads(second_input=0))] == [3]  # a head reading another value
    mixed = _heads(heads=((1, "sigmoid", False), (4, "relu", False)))
    assert not head_groups(mixed)  # one activation kind (besides none) a group
    prelu = _heads(heads=((2, "prelu", False), (4, None, True), (1, "sigmoid", False)))
    assert [len(g) for g in head_groups(prelu)] == [2]  # per-channel slopes stay in a pass of their own
    assert not head_groups(_heads(heads=((4, None, True),)))


def test_a_group_is_one_dispatch_writing_one_slot():
    prog = _heads()
    low = lower(prog, Limits(), _no_consts)
    assert [d.kernel.stem for d in low.dispatches] == ["unary", "separable"]
    d = low.dispatches[1]
    assert dict(d.kernel.subst).get("HEADS") and d.plan.blocks == 1 and d.plan.quads == 4  # 16 channels, 4 quads
    assert len(d.also) == 7  # the other three 1x1s and the four depthwise 3x3s
    slots = {o.slot for o in low.outputs}
    assert slots == {d.out[1]}
    spans = sorted((o.at, o.at + prog.values[o.vid].nbytes) for o in low.outputs)
    assert all(at % HEAD_ALIGN == 0 for at, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert spans[-1][1] <= low.slots.sizes[d.out[1]]
    # without separable passes every pair is two dispatches, every output a slot of its own
    apart = lower(prog, Limits(), _no_consts, separable=False)
    assert len(apart.dispatches) == 1 + 2 * 4 and all(o.at == 0 for o in apart.outputs)


@pytest.mark.parametrize("case", [
    dict(),
    dict(shape=(2, 16, 13, 21), bias=False, seed=1),  # a batch, odd sizes, no biases
    dict(shape=(1, 8, 9, 30), heads=((3, None, True), (5, "sigmoid", False)), seed=2),  # two quads' worth
    dict(shape=(1, 16, 10, 10), heads=((8, None, True), (8, "sigmoid", False), (2, None, True)), seed=3),  # 2 blocks
])
def test_a_head_group_agrees_with_the_cpu(gpu, case):
    prog = _heads(**case)
    assert head_groups(prog)
    x = np.random.default_rng(5).normal(size=prog.input_shape).astype(np.float32)
    want = cpu.run_program(prog, {"input": x})
    gp = GpuModel(dev=gpu).compile(prog)
    assert sum("HEADS" in k for k in gp.kernel_keys) == 1
    got = gp.run({"input": x})
    for name, w in want.items():
        ok, worst = close(got[name], w)
        assert ok, (name, worst)


def test_a_masked_head_group_gives_the_photos_own_heads(gpu):
    """Masked to a 32x32 photo in a 64x64 program, a stem and a head group give on the photo's region what the
    photo's own program gives, and 0 past it."""
    from facerun.gpu import masking

    heads = ((2, "sigmoid", False), (4, None, True), (10, None, True))
    big, small = _heads((1, 8, 64, 64), heads, stem=True), _heads((1, 8, 32, 32), heads, stem=True)
    assert masking.maskable(big, 32) is None and head_groups(big)
    photo, padded = photo_in_corner((32, 32), (64, 64))
    gp = GpuModel(dev=gpu).compile(big)
    assert any("HEADS" in k for k in gp.kernel_keys)
    masked = gp.run({"input": padded}, photo=(32, 32))
    want = cpu.run_program(small, {"input": photo})
    (nchw, *nhwc), (nchw_want, *nhwc_want) = masked.values(), want.values()
    assert close(nchw[:, :, :32, :32], nchw_want)[0] and not nchw[:, :, 32:].any() and not nchw[..., 32:].any()
    for got, w in zip(nhwc, nhwc_want):
        assert close(got[:, :32, :32], w)[0] and not got[:, 32:].any() and not got[:, :, 32:].any()
