"""Each WGSL kernel against a plain numpy definition, through hand-built one-step programs (small shapes: lavapipe
is slow)."""

from __future__ import annotations

import numpy as np
import pytest

from facerun import program as P
from facerun.gpu.plan import TILES

from gpu_fixtures import Builder, close  # the gpu and gpu_model fixtures come from conftest

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(7)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def act_ref(v, act):
    if act is None:
        return v
    if act.kind == "relu":
        return np.maximum(v, 0)
    if act.kind == "sigmoid":
        return 1 / (1 + np.exp(-v))
    if act.kind == "clip":
        return np.clip(v, act.lo, act.hi)
    if act.kind == "leaky":
        return np.where(v < 0, v * act.alpha, v)
    if act.kind == "prelu":
        s = np.asarray(act.slope, np.float64).reshape((1, -1) + (1,) * (v.ndim - 2))
        return np.where(v < 0, v * s, v)
    raise ValueError(act.kind)


# ------------------------------------------------------------------------------------------------ convolution


def conv_reference(x, w, bias, stride, pads, groups, dilation=(1, 1)):
    """The definition: out[n, co, y, x] = bias[co] + sum over the group's channels and the window, in float64."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    top, left, bottom, right = pads
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    m = cout // groups
    out = np.zeros((n, cout, oh, ow))
    for g in range(groups):
        xg = xp[:, g * cg : (g + 1) * cg]
        wg = w[g * m : (g + 1) * m].astype(np.float64)
        for ky in range(kh):
            for kx in range(kw):
                patch = xg[:, :, ky * dh : ky * dh + sh * (oh - 1) + 1 : sh, kx * dw : kx * dw + sw * (ow - 1) + 1 : sw]
                out[:, g * m : (g + 1) * m] += np.einsum("nchw,oc->nohw", patch, wg[:, :, ky, kx])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


CONV_CASES = {
    # name: (batch, cin, h, w, cout, k, stride, pads, groups, dilation)
    "dense 3x3": (1, 16, 12, 10, 32, 3, 1, (1, 1, 1, 1), 1, 1),
    "strided 3x3 from rgb": (1, 3, 17, 15, 16, 3, 2, (1, 1, 1, 1), 1, 1),
    "depthwise": (1, 24, 13, 11, 24, 3, 1, (1, 1, 1, 1), 24, 1),
    "depthwise strided": (2, 16, 14, 9, 16, 3, 2, (1, 1, 1, 1), 16, 1),
    "grouped": (1, 16, 9, 9, 32, 3, 1, (1, 1, 1, 1), 4, 1),
    "pointwise batch 2": (2, 48, 10, 10, 40, 1, 1, (0, 0, 0, 0), 1, 1),
    "1x1 strided": (1, 32, 9, 9, 64, 1, 2, (0, 0, 0, 0), 1, 1),
    "5x5 asymmetric pads odd size": (1, 8, 11, 9, 20, 5, 1, (2, 1, 2, 0), 1, 1),
    "few output channels, long K": (1, 32, 8, 7, 2, 3, 1, (1, 1, 1, 1), 1, 1),
    "few output channels, short K (direct)": (1, 3, 10, 9, 2, 3, 1, (1, 1, 1, 1), 1, 1),
    "grouped, 2 channels per group (direct)": (1, 6, 7, 9, 4, 3, 2, (1, 0, 1, 1), 2, 1),
    "depthwise, channel multiplier 2": (1, 8, 9, 10, 16, 3, 1, (1, 1, 1, 1), 8, 1),
    "depthwise dilated, asymmetric pads": (2, 4, 12, 13, 4, 3, 1, (2, 1, 0, 2), 4, 2),
    "dilated": (1, 8, 12, 12, 16, 3, 1, (2, 2, 2, 2), 1, 2),
    "wide 128x128 tile": (1, 24, 12, 12, 130, 3, 1, (1, 1, 1, 1), 1, 1),
    "batch 3, no padding": (3, 12, 8, 8, 24, 3, 1, (0, 0, 0, 0), 1, 1),
    "split-K natural (4x4x256)": (1, 256, 4, 4, 128, 3, 1, (1, 1, 1, 1), 1, 1),
}


def conv_step(case, act=None, residual=False, bias=True):
    b, cin, h, w, cout, k, s, pads, groups, d = case
    bld = Builder()
    x = bld.input("x", (b, cin, h, w))
    weight = randn(cout, cin // groups, k, k, scale=1 / np.sqrt(cin // groups * k * k))
    bvec = randn(cout) if bias else None
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    res = bld.input("res", (b, cout, oh, ow)) if residual else None
    y = bld.step(P.Conv, (b, cout, oh, ow), x=x, weight=weight, bias=bvec, groups=groups, stride=(s, s),
                 dilation=(d, d), pads=pads, act=act, residual=res)
    feeds = {"x": randn(b, cin, h, w)}
    if residual:
        feeds["res"] = randn(b, cout, oh, ow)
    want = conv_reference(feeds["x"], weight, bvec, (s, s), pads, groups, (d, d))
    if residual:
        want = want + feeds["res"]
    return bld.program(y), feeds, act_ref(want, act)


# 3x3 at stride 1 from 16 input channels or more: the plan takes Winograd F(2x2, 3x3), unless its products would not
# run on the tiled kernel ("few output channels, long K": 2 x 32 products are the direct kernel's)
WINOGRAD_CASES = {"dense 3x3", "wide 128x128 tile", "split-K natural (4x4x256)"}
IM2COL = {"force_winograd": False}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_convolution_matches_the_definition(gpu_model, name):
    prog, feeds, want = conv_step(CONV_CASES[name])
    gp = gpu_model.compile(prog)
    kernel = gp.conv_plans[0][1].split()[0]
    expected = ("direct" if "(direct)" in name else "depthwise" if "depthwise" in name
                else "winograd" if name in WINOGRAD_CASES else "tiled")
    assert kernel == expected, gp.conv_plans
    got = gp.run(feeds)[prog.outputs[0][0]]
    ok, worst = close(got, want)
    assert ok, f"{name} ({gp.conv_plans[0][1]}): off by {worst}"


@pytest.mark.parametrize("name", sorted(WINOGRAD_CASES))
def test_the_same_convolutions_by_im2col(gpu_model, name):
    prog, feeds, want = conv_step(CONV_CASES[name])
    gp = gpu_model.compile(prog, force=IM2COL)
    assert gp.conv_plans[0][1].startswith("tiled"), gp.conv_plans
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, f"{name} ({gp.conv_plans[0][1]}): off by {worst}"


WINOGRAD_SHAPES = {
    # (batch, cin, h, w, cout, 3, 1, pads, 1, 1): odd output sizes crop the last tiles' second row or column
    "odd sizes, batch 2, asymmetric pads": (2, 20, 9, 11, 36, 3, 1, (1, 0, 2, 1), 1, 1),
    "no padding, batch 3": (3, 12, 8, 7, 24, 3, 1, (0, 0, 0, 0), 1, 1),
    "one tile of 2x2": (1, 8, 4, 4, 8, 3, 1, (0, 0, 0, 0), 1, 1),
    "one tile of 4x4, cropped to 3x5": (1, 8, 5, 7, 8, 3, 1, (0, 0, 0, 0), 1, 1),
    "more padding than the window": (1, 16, 5, 6, 16, 3, 1, (2, 3, 2, 1), 1, 1),
    "long K, few output channels": (1, 96, 6, 6, 3, 3, 1, (1, 1, 1, 1), 1, 1),
}


@pytest.mark.parametrize("force", [{}, {"force_splits": 3}, {"force_tile": "64x64"}], ids=["planned", "split", "tile"])
@pytest.mark.parametrize("name", list(WINOGRAD_SHAPES))
@pytest.mark.parametrize("form", [2, 4], ids=["F2", "F4"])
def test_winograd_matches_the_definition(gpu_model, name, force, form):
    """Forced onto any 3x3 stride-1 shape (the plan takes it only from 16 input channels), in either form, with a
    residual and PReLU in the output transform's epilogue, its products on a forced split or tile."""
    case = WINOGRAD_SHAPES[name]
    act = P.Activation("prelu", slope=randn(case[4], scale=0.3))
    prog, feeds, want = conv_step(case, act=act, residual=True)
    gp = gpu_model.compile(prog, force={"force_winograd": form, **force})
    plan = gp.conv_plans[0][1]
    stem = "winograd" if form == 2 else "winograd4"
    assert plan.startswith(f"winograd F({form}x{form},3x3) + tiled") and gp.kernels[stem] == 2, plan
    if "force_splits" in force and case[1] >= 48:  # K = input channels: three splits from 48
        assert "split-K" in plan and gp.kernels["conv_direct"] == 1  # the products' reduce pass
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, f"{name} ({plan}): off by {worst}"


def test_winograd_writes_a_fused_nhwc_transpose(gpu_model):
    """A head's NHWC Transpose folded into a Winograd convolution: the output transform writes that layout."""
    bld = Builder()
    x = bld.input("x", (1, 16, 7, 9))
    weight = randn(12, 16, 3, 3, scale=0.1)
    y = bld.step(P.Conv, (1, 12, 7, 9), x=x, weight=weight, bias=randn(12), groups=1, stride=(1, 1),
                 dilation=(1, 1), pads=(1, 1, 1, 1))
    z = bld.step(P.Copy, (1, 7, 9, 12), x=y, strides=(12 * 63, 9, 1, 63), offset=0)
    prog = bld.program(z)
    gp = gpu_model.compile(prog)
    assert gp.conv_plans[0][1].startswith("winograd") and "copy" not in gp.kernels, (gp.conv_plans, gp.kernels)
    feeds = {"x": randn(1, 16, 7, 9)}
    want = conv_reference(feeds["x"], weight, prog.steps[0].bias, (1, 1), (1, 1, 1, 1), 1).transpose(0, 2, 3, 1)
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, worst


@pytest.mark.parametrize("form", [2, 4], ids=["F2", "F4"])
def test_a_batch_norm_folded_into_winograd_leaves_the_padding_zero(gpu_model, form):
    """A batch norm before a Winograd convolution (IResNet's block opening) is applied by the input transform: the
    norm makes no dispatch, the padding stays zero (the norm comes before it; a shift applied to the padding would
    show at every border), and the norm's input outlives it until the convolution reads it, though the value made in
    between (the Unary, as large as it) could take its slot."""
    bld = Builder()
    shape = (2, 16, 7, 9)
    x = bld.input("x", shape)
    z = bld.input("z", shape)
    scale, shift = randn(16), randn(16, scale=2.0) + 3.0  # shifts far from zero
    normed = bld.step(P.Affine, shape, x=x, scale=scale, shift=shift)
    between = bld.step(P.Unary, shape, x=z, act=P.Activation("relu"))
    weight = randn(16, 16, 3, 3, scale=0.1)
    y = bld.step(P.Conv, (2, 16, 7, 9), x=normed, weight=weight, bias=randn(16), groups=1, stride=(1, 1),
                 dilation=(1, 1), pads=(1, 1, 1, 1))
    out = bld.step(P.Binary, shape, a=y, b=between, kind="add")
    prog = bld.program(out)
    gp = gpu_model.compile(prog, force={"force_winograd": form})
    stem = "winograd" if form == 2 else "winograd4"
    assert "batch norm folded in" in gp.conv_plans[0][1] and gp.kernels[stem] == 2, gp.conv_plans
    assert gp.kernels["unary"] == 1, gp.kernels  # the relu alone: the norm has no dispatch
    feeds = {"x": randn(*shape), "z": randn(*shape)}
    n = feeds["x"] * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    want = conv_reference(n, weight, prog.steps[2].bias, (1, 1), (1, 1, 1, 1), 1) + np.maximum(feeds["z"], 0)
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, f"F({form}x{form}): off by {worst}"


def test_natural_and_forced_split_k(gpu_model):
    prog, feeds, want = conv_step(CONV_CASES["split-K natural (4x4x256)"])
    natural = gpu_model.compile(prog, force=IM2COL)
    assert "split-K" in natural.conv_plans[0][1] and natural.kernels.get("conv_direct") == 1  # the reduce pass
    prog, feeds, want = conv_step(CONV_CASES["dense 3x3"], act=P.Activation("relu"))
    forced = gpu_model.compile(prog, force={"force_splits": 3})
    assert "split-K 3x" in forced.conv_plans[0][1]
    ok, worst = close(forced.run(feeds)[prog.outputs[0][0]], want)
    assert ok, worst


@pytest.mark.parametrize("tile", list(TILES) + ["128x128/8x8/k32/u4", "64x64/4x4/k8/u8"])
def test_every_tile_variant(gpu_model, tile):
    prog, feeds, want = conv_step((2, 20, 9, 11, 36, 3, 1, (1, 1, 1, 1), 1, 1), act=P.Activation("leaky", alpha=0.1))
    gp = gpu_model.compile(prog, force={"force_tile": tile})
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, f"tile {tile}: off by {worst}"


@pytest.mark.parametrize("kind", ["tiled", "winograd", "depthwise", "direct", "split"])
def test_fused_prelu_and_residual(gpu_model, kind):
    case = {"tiled": (2, 16, 7, 9, 24, 3, 1, (1, 1, 1, 1), 1, 1),
            "winograd": (2, 16, 7, 9, 24, 3, 1, (1, 1, 1, 1), 1, 1),
            "depthwise": (1, 12, 8, 8, 12, 3, 1, (1, 1, 1, 1), 12, 1),
            "direct": (1, 6, 8, 6, 4, 3, 1, (1, 1, 1, 1), 2, 1),
            "split": (1, 64, 5, 5, 32, 3, 1, (1, 1, 1, 1), 1, 1)}[kind]
    act = P.Activation("prelu", slope=randn(case[4], scale=0.3))
    prog, feeds, want = conv_step(case, act=act, residual=True)
    force = {"split": {"force_splits": 4}, "tiled": IM2COL}.get(kind)
    gp = gpu_model.compile(prog, force=force)
    plan = gp.conv_plans[0][1]
    assert plan.startswith(kind) or (kind == "split" and "split-K" in plan), plan
    ok, worst = close(gp.run(feeds)[prog.outputs[0][0]], want)
    assert ok, f"{kind}: off by {worst}"


@pytest.mark.parametrize("act", [P.Activation("sigmoid"), P.Activation("clip", lo=-0.5, hi=0.25), None])
def test_conv_epilogue_activations_without_bias(gpu_model, act):
    prog, feeds, want = conv_step((1, 8, 6, 6, 16, 3, 1, (1, 1, 1, 1), 1, 1), act=act, bias=False)
    ok, worst = close(gpu_model.compile(prog).run(feeds)[prog.outputs[0][0]], want)
    assert ok, worst


# ---------------------------------------------------------------------------------------------- other steps


def run_one(gpu_model, bld: Builder, out: int, feeds: dict) -> np.ndarray:
    prog = bld.program(out)
    return gpu_model.compile(prog).run(feeds)[prog.outputs[0][0]]


@pytest.mark.parametrize("act", [P.Activation("relu"), P.Activation("sigmoid"), P.Activation("clip", lo=0.0, hi=6.0),
                                 P.Activation("leaky", alpha=0.2),
                                 P.Activation("prelu", slope=np.linspace(-1, 1, 6, dtype=np.float32))])
def test_unary(gpu_model, act):
    b = Builder()
    x = b.input("x", (2, 6, 5, 7))
    y = b.step(P.Unary, (2, 6, 5, 7), x=x, act=act)
    data = randn(2, 6, 5, 7, scale=4)
    ok, worst = close(run_one(gpu_model, b, y, {"x": data}), act_ref(data.astype(np.float64), act))
    assert ok, worst


def test_affine(gpu_model):
    b = Builder()
    x = b.input("x", (2, 5, 3, 4))
    scale, shift = randn(5), randn(5)
    y = b.step(P.Affine, (2, 5, 3, 4), x=x, scale=scale, shift=shift)
    data = randn(2, 5, 3, 4)
    want = data * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    ok, worst = close(run_one(gpu_model, b, y, {"x": data}), want)
    assert ok, worst


@pytest.mark.parametrize("kind,bshape", [("add", (1, 6, 1, 1)), ("sub", (5, 7)), ("mul", (1,)), ("div", (2, 6, 5, 7)),
                                         ("prelu", (6, 1, 1)), ("add", (2, 1, 5, 1))])
def test_binary_broadcasting(gpu_model, kind, bshape):
    b = Builder()
    a = b.input("a", (2, 6, 5, 7))
    bv = b.input("b", bshape)
    y = b.step(P.Binary, (2, 6, 5, 7), a=a, b=bv, kind=kind)
    da, db = randn(2, 6, 5, 7), randn(*bshape)
    if kind == "div":
        db = np.where(np.abs(db) < 0.1, 1.0, db).astype(np.float32)
    want = {"add": da + db, "sub": da - db, "mul": da * db, "div": da / db,
            "prelu": np.where(da < 0, da * db, da)}[kind]
    ok, worst = close(run_one(gpu_model, b, y, {"a": da, "b": db}), want.astype(np.float64))
    assert ok, worst


def test_binary_with_a_constant_operand(gpu_model):
    b = Builder()
    a = b.input("a", (1, 4, 3, 3))
    c = b.const("c", randn(4, 1, 1))
    y = b.step(P.Binary, (1, 4, 3, 3), a=c, b=a, kind="sub")
    da = randn(1, 4, 3, 3)
    ok, worst = close(run_one(gpu_model, b, y, {"a": da}), (b.values[c].data - da).astype(np.float64))
    assert ok, worst


def test_transpose_and_slice_copies(gpu_model):
    b = Builder()
    x = b.input("x", (2, 3, 4, 5))
    # NCHW -> NHWC: out[n, h, w, c] = x[n, c, h, w]
    t = b.step(P.Copy, (2, 4, 5, 3), x=x, offset=0, strides=(60, 5, 1, 20), kind="transpose")
    # x[:, 1:, ::2, 1:4]
    s = b.step(P.Copy, (2, 2, 2, 3), x=x, offset=20 + 1, strides=(60, 20, 10, 1), kind="slice")
    prog = b.program(t, s)
    data = randn(2, 3, 4, 5)
    out = gpu_model.compile(prog).run({"x": data})
    assert np.array_equal(out[prog.outputs[0][0]], data.transpose(0, 2, 3, 1))
    assert np.array_equal(out[prog.outputs[1][0]], data[:, 1:, ::2, 1:4])


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_concat(gpu_model, axis):
    b = Builder()
    shapes = [(2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5)]
    shapes[1] = tuple(d * 2 if i == axis else d for i, d in enumerate(shapes[1]))
    xs = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    y = b.step(P.Concat, tuple(out_shape), xs=tuple(xs), axis=axis)
    feeds = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}
    got = run_one(gpu_model, b, y, feeds)
    assert np.array_equal(got, np.concatenate([feeds[f"x{i}"] for i in range(3)], axis=axis))


def pool_reference(x, kind, k, s, pads, out_hw, include_pad=False):
    n, c, h, w = x.shape
    out = np.zeros((n, c) + out_hw)
    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            y0, x0 = oy * s[0] - pads[0], ox * s[1] - pads[1]
            ys = [y for y in range(y0, y0 + k[0]) if 0 <= y < h]
            xs = [xx for xx in range(x0, x0 + k[1]) if 0 <= xx < w]
            win = x[:, :, ys][:, :, :, xs]
            if kind == "max":
                out[:, :, oy, ox] = win.max(axis=(2, 3))
            else:
                if include_pad:
                    cnt = sum(1 for y in range(y0, y0 + k[0]) if -pads[0] <= y < h + pads[2]) * \
                        sum(1 for xx in range(x0, x0 + k[1]) if -pads[1] <= xx < w + pads[3])
                else:
                    cnt = len(ys) * len(xs)
                out[:, :, oy, ox] = win.sum(axis=(2, 3)) / cnt
    return out


@pytest.mark.parametrize("kind,k,s,pads,out_hw,include", [
    ("max", (2, 2), (2, 2), (0, 0, 0, 0), (4, 3), False),
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), (4, 4), False),
    ("max", (3, 3), (2, 2), (0, 0, 0, 0), (4, 3), False),  # ceil mode: the last window hangs over
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), (8, 7), False),
    ("avg", (3, 3), (2, 2), (1, 1, 1, 1), (4, 4), True),
])
def test_pools(gpu_model, kind, k, s, pads, out_hw, include):
    b = Builder()
    x = b.input("x", (2, 3, 8, 7))
    y = b.step(P.Pool, (2, 3) + out_hw, x=x, kind=kind, kernel=k, stride=s, pads=pads, count_include_pad=include)
    data = randn(2, 3, 8, 7)
    want = pool_reference(data.astype(np.float64), kind, k, s, pads, out_hw, include)
    ok, worst = close(run_one(gpu_model, b, y, {"x": data}), want)
    assert ok, worst


def test_global_average_pool(gpu_model):
    b = Builder()
    x = b.input("x", (3, 5, 9, 11))
    y = b.step(P.GlobalAvgPool, (3, 5, 1, 1), x=x)
    data = randn(3, 5, 9, 11)
    ok, worst = close(run_one(gpu_model, b, y, {"x": data}), data.astype(np.float64).mean(axis=(2, 3), keepdims=True))
    assert ok, worst


def test_nearest_resize(gpu_model):
    b = Builder()
    x = b.input("x", (1, 3, 4, 5))
    sy = np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32)
    sx = np.array([4, 3, 2, 1, 0, 0, 2], np.int32)
    y = b.step(P.Resize, (1, 3, 8, 7), x=x, src_y=sy, src_x=sx)
    data = randn(1, 3, 4, 5)
    assert np.array_equal(run_one(gpu_model, b, y, {"x": data}), data[:, :, sy][:, :, :, sx])


@pytest.mark.parametrize("m,k,n,act", [(3, 64, 10, P.Activation("relu")), (2, 30, 7, None),
                                       (1, 512, 33, P.Activation("prelu", slope=None)),
                                       (40, 24, 20, P.Activation("sigmoid"))])
def test_gemm(gpu_model, m, k, n, act):
    if act is not None and act.kind == "prelu":
        act = P.Activation("prelu", slope=randn(n, scale=0.5))
    b = Builder()
    x = b.input("x", (m, k))
    w, bias = randn(n, k, scale=0.2), randn(n)
    y = b.step(P.Gemm, (m, n), x=x, weight=w, bias=bias, act=act)
    data = randn(m, k)
    want = act_ref(data.astype(np.float64) @ w.T.astype(np.float64) + bias, act)
    prog = b.program(y)
    gp = gpu_model.compile(prog)
    assert ("gemv" in gp.kernels) == (m <= 32)
    ok, worst = close(gp.run({"x": data})[prog.outputs[0][0]], want)
    assert ok, worst


@pytest.mark.parametrize("ashape,bshape", [((2, 3, 5, 4), (4, 6)), ((3, 4), (2, 4, 2)), ((5,), (5, 3)),
                                           ((2, 1, 3, 4), (1, 2, 4, 2))])
def test_matmul(gpu_model, ashape, bshape):
    b = Builder()
    a = b.input("a", ashape)
    bb = b.input("b", bshape)
    da, db = randn(*ashape), randn(*bshape)
    want = np.matmul(da.astype(np.float64), db.astype(np.float64))
    y = b.step(P.MatMul, want.shape, a=a, b=bb)
    ok, worst = close(run_one(gpu_model, b, y, {"a": da, "b": db}), want)
    assert ok, worst


@pytest.mark.parametrize("outer,n,inner", [(2, 5, 3), (6, 17, 1), (1, 2, 40)])
def test_softmax(gpu_model, outer, n, inner):
    b = Builder()
    x = b.input("x", (outer, n, inner))
    y = b.step(P.Softmax, (outer, n, inner), x=x, outer=outer, n=n, inner=inner)
    data = randn(outer, n, inner, scale=5)
    e = np.exp(data - data.max(axis=1, keepdims=True))
    ok, worst = close(run_one(gpu_model, b, y, {"x": data}), e / e.sum(axis=1, keepdims=True), rel=1e-5)
    assert ok, worst
