"""A 2x2 max pool folded into the 1x1 convolution reading it (gpu/fusion.py `pooled_inputs`; conv_tiled.wgsl and
separable.wgsl with POOLED): which pools are taken (pure, no GPU), the dispatches the lowering makes, and on the
device the folded read against the CPU, on odd sizes, in a batch, with a residual, in a separable pass and masked to
a smaller photo."""

from __future__ import annotations

import numpy as np
import pytest

from facerun import cpu
from facerun import program as P
from facerun.gpu.fusion import pooled_inputs
from facerun.gpu.lower import lower
from facerun.gpu.model import GpuModel, _no_consts
from facerun.gpu.plan import Limits

from gpu_fixtures import Builder, close, photo_in_corner

RELU = P.Activation("relu")
CONV = dict(stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), groups=1)


def _pooled(shape=(1, 8, 20, 24), cout=24, kind="max", kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0),
            conv_kernel=(1, 1), residual=False, depthwise=False, pool_read_twice=False, pool_out=False, seed=0):
    """x -> ReLU -> pool -> 1x1 (-> + residual) (-> depthwise 3x3): the program."""
    rng = np.random.default_rng(seed)
    b, c, h, w = shape
    bld = Builder()
    x = bld.input("x", shape)
    relu = bld.step(P.Unary, shape, x=x, act=RELU)
    oh, ow = (h + pads[0] + pads[2] - kernel[0]) // stride[0] + 1, (w + pads[1] + pads[3] - kernel[1]) // stride[1] + 1
    pool = bld.step(P.Pool, (b, c, oh, ow), x=relu, kind=kind, kernel=kernel, stride=stride, pads=pads)
    res = bld.input("r", (b, cout, oh, ow)) if residual else None
    k = conv_kernel[0]
    conv = dict(CONV, pads=(k // 2,) * 4)
    weight = rng.normal(size=(cout, c, *conv_kernel)).astype(np.float32)
    one = bld.step(P.Conv, (b, cout, oh, ow), x=pool, weight=weight, bias=rng.normal(size=cout).astype(np.float32),
                   act=None if depthwise else RELU, residual=res, **conv)
    outs = [one]
    if depthwise:
        outs = [bld.step(P.Conv, (b, cout, oh, ow), x=one, weight=rng.normal(size=(cout, 1, 3, 3)).astype(np.float32),
                         bias=None, act=RELU, **dict(CONV, groups=cout, pads=(1, 1, 1, 1)))]
    if pool_read_twice:
        outs.append(bld.step(P.Unary, (b, c, oh, ow), x=pool, act=RELU))
    if pool_out:
        outs.append(pool)
    return bld.program(*outs)


def test_the_pools_taken_and_the_ones_left():
    assert len(pooled_inputs(_pooled())) == 1
    assert len(pooled_inputs(_pooled((2, 8, 21, 25)))) == 1  # odd rows and columns: the last one left out, as the pool
    assert len(pooled_inputs(_pooled(depthwise=True))) == 1
    assert not pooled_inputs(_pooled(kind="avg"))
    assert not pooled_inputs(_pooled(kernel=(3, 3)))
    assert not pooled_inputs(_pooled(stride=(1, 1)))
    assert not pooled_inputs(_pooled(pads=(1, 1, 1, 1)))
    assert not pooled_inputs(_pooled(conv_kernel=(3, 3)))
    assert not pooled_inputs(_pooled(pool_read_twice=True))  # its output is needed in device memory too
    assert not pooled_inputs(_pooled(pool_out=True))


def test_the_lowering_makes_no_dispatch_for_a_folded_pool():
    for case in (dict(), dict(depthwise=True), dict(residual=True)):
        prog = _pooled(**case)
        low = lower(prog, Limits(), _no_consts)
        stems = [d.kernel.stem for d in low.dispatches]
        assert "pool" not in stems and len(stems) == 2, stems  # the ReLU, then the 1x1 (and its depthwise)
        d = low.dispatches[-1]
        pool = next(st for st in prog.steps if type(st) is P.Pool)
        assert pool.node in d.also and "POOLED" in d.kernel.key
        assert d.reads[0] == low.dispatches[0].out  # the pool's input, the ReLU's output
    # a 3x3 after the pool keeps it
    assert "pool" in [d.kernel.stem for d in lower(_pooled(conv_kernel=(3, 3)), Limits(), _no_consts).dispatches]


@pytest.mark.parametrize("case", [
    dict(),
    dict(shape=(2, 5, 37, 45), cout=10, residual=True),  # odd sizes, a batch, a residual
    dict(shape=(1, 16, 40, 40), cout=32, depthwise=True, seed=2),  # a separable pass reading the pool
    dict(shape=(2, 6, 19, 33), cout=3, depthwise=True, seed=3),  # odd, one quad part used
])
def test_the_folded_pool_agrees_with_the_cpu(gpu, case):
    prog = _pooled(**case)
    rng = np.random.default_rng(5)
    feeds = {name: rng.normal(size=prog.values[vid].shape).astype(np.float32) for name, vid in prog.inputs}
    want = cpu.run_program(prog, feeds)
    gp = GpuModel(dev=gpu).compile(prog)
    assert any("POOLED" in k for k in gp.kernel_keys) and not any(k.startswith("pool.wgsl") for k in gp.kernel_keys)
    got = gp.run(feeds)
    for name, w in want.items():
        ok, worst = close(got[name], w)
        assert ok, (name, worst)


def test_a_masked_folded_pool_gives_the_photos_own_result(gpu):
    """Masked to a 32x32 photo in a 64x64 program, a stem, a pool and a 1x1 with its depthwise give what the photo's
    own program gives."""
    from facerun.gpu import masking

    def block(size):
        rng = np.random.default_rng(1)
        bld = Builder()
        x = bld.input("input", (1, 3, size, size))
        stem = bld.step(P.Conv, (1, 8, size, size), x=x, weight=rng.normal(size=(8, 3, 3, 3)).astype(np.float32),
                        bias=np.ones(8, np.float32), act=RELU, **dict(CONV, pads=(1,) * 4))
        half = size // 2
        pool = bld.step(P.Pool, (1, 8, half, half), x=stem, kind="max", kernel=(2, 2), stride=(2, 2), pads=(0,) * 4)
        pw = bld.step(P.Conv, (1, 8, half, half), x=pool, weight=rng.normal(size=(8, 8, 1, 1)).astype(np.float32),
                      bias=np.full(8, 3.0, np.float32), act=None, **CONV)
        dw = bld.step(P.Conv, (1, 8, half, half), x=pw, weight=rng.normal(size=(8, 1, 3, 3)).astype(np.float32),
                      bias=None, act=RELU, **dict(CONV, groups=8, pads=(1,) * 4))
        return bld.program(dw)

    big, small = block(64), block(32)
    assert masking.maskable(big, 32) is None and pooled_inputs(big)
    photo, padded = photo_in_corner((32, 32), (64, 64))
    gp = GpuModel(dev=gpu).compile(big)
    assert any("POOLED" in k for k in gp.kernel_keys)
    name = big.outputs[0][0]
    masked = gp.run({"input": padded}, photo=(32, 32))[name]
    want = cpu.run_program(small, {"input": photo})[small.outputs[0][0]]
    assert close(masked[:, :, :16, :16], want)[0]
