"""The ONNX operators facerun compiles: one handler per operator, named after it, in one table (`OPS`).

A handler takes the compile context, the node's inputs in ONNX order (an `Operand` each, None for an omitted optional
input) and the node's attributes as keyword arguments with their ONNX names and the spec's defaults. It returns the
node's output (or a tuple of outputs): program values made through the context, or constants. Opset differences
(attributes that became inputs, Softmax before 13, Slice before 10, Resize before 11) are handled in the handler.

The same handler runs whether its inputs are computed or constant: when every input of a node is a constant, the
context evaluates the steps the handler emits right away, with the CPU interpreter's own step code (constant folding),
so a folded node and a running node cannot disagree.

The context (`compile.Compiler`) offers: `opset`, `batch_items`, `name` (the node's), `outputs` (its output names),
`const(t, what)` (a constant input's array, or a ModelError), `vid(t)` (a value id for a step to read), `emit(step,
shape)`, `view(t, shape)`, `constant(array)`, `note(text)`, `derived(role, sources, make)` (make()'s result for this
node, kept across input sizes while `sources` are the same arrays: a handler's weights, made once), `refuse(why)`
(ModelError) and `bad_input(why)` (InputError), both naming the node and its operator.

The supported set *is* this table: `read.SUPPORTED` is derived from it, and a node's attributes are checked against
its handler's keyword arguments (`params`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from math import prod

import numpy as np

from .. import program as P
from . import shapes as S

F32_MAX = float(np.finfo(np.float32).max)

OPS: dict[str, Callable] = {}


def op(fn: Callable) -> Callable:
    OPS[fn.__name__] = fn
    return fn


@dataclass(frozen=True)
class Params:
    """What a handler reads: how many inputs (None: any number), how many are required, its attributes."""

    inputs: int | None
    required_inputs: int
    attrs: frozenset[str]
    required_attrs: frozenset[str]


@cache
def params(op_type: str) -> Params:
    sig = list(inspect.signature(OPS[op_type]).parameters.values())[1:]  # past ctx
    positional = [p for p in sig if p.kind == p.POSITIONAL_OR_KEYWORD]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in sig)
    keywords = [p for p in sig if p.kind == p.KEYWORD_ONLY]
    return Params(
        None if variadic else len(positional),
        sum(p.default is p.empty for p in positional),
        frozenset(p.name for p in keywords),
        frozenset(p.name for p in keywords if p.default is p.empty),
    )


def unsupported_attribute(op_type: str, attrs) -> str | None:
    """The first attribute of a node that its handler does not take, if any."""
    known = params(op_type).attrs
    return next((a for a in attrs if a not in known), None)


def _onnx_dtype(ctx, to: int):
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        ctx.refuse(f"to={to} is not a type facerun knows")


# --------------------------------------------------------------------------------------------- convolutions


@op
def Conv(ctx, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    w_data = ctx.const(w, "weight")
    # a layer compiled before (for another input size) passed every check of its weights and attributes: only the
    # checks of the input remain, in the same order
    layer = ctx.kept("layer", (w_data, None if b is None else b.data))
    if layer is None or len(x.shape) != 4 or (b is not None and not b.is_const):
        return _conv_layer(ctx, x, w_data, b, auto_pad, dilations, group, kernel_shape, pads, strides)
    weight, bias, group, stride, dil, fixed_pads = layer
    n, c, h, wd = x.shape
    cout, cg, kh, kw = weight.shape
    if c != cg * group:
        ctx.bad_input(f"expects {cg * group} input channels, got {c}")
    pad = fixed_pads or S.pads(ctx, auto_pad, pads, (h, wd), (kh, kw), stride, dil)
    oh, ow = S.window_output(ctx, (h, wd), (kh, kw), stride, dil, pad)
    return ctx.emit(P.Conv(0, ctx.name, ctx.vid(x), weight, bias, group, stride, dil, pad), (n, cout, oh, ow))


def _conv_layer(ctx, x, w_data, b, auto_pad, dilations, group, kernel_shape, pads, strides):
    """Conv with every check, keeping what it finds about the layer (weights, groups, window) for later sizes."""
    # the model's own arrays, not copies: nothing changes a step's weights in place (the passes make new ones), and
    # the programs of every input size then hold the same arrays (program.ParameterPool)
    weight = ctx.derived("weight", (w_data,), lambda: np.ascontiguousarray(np.asarray(w_data, dtype=np.float32)))
    if weight.ndim != 4 or len(x.shape) != 4:
        ctx.refuse(f"only 2-D convolutions are supported (input {list(x.shape)}, weight {list(weight.shape)})")
    n, c, h, wd = x.shape
    cout, cg, kh, kw = weight.shape
    if kernel_shape is not None and tuple(int(k) for k in kernel_shape) != (kh, kw):
        ctx.refuse(f"kernel_shape {list(kernel_shape)} does not match its weight {list(weight.shape)}")
    group = S.groups(ctx, group, weight)
    if cout % group:
        ctx.refuse(f"its {cout} output channels do not split into group={group} groups")
    if c != cg * group:
        ctx.bad_input(f"expects {cg * group} input channels, got {c}")
    stride, dil = S.pair(ctx, strides, "strides"), S.pair(ctx, dilations, "dilations")
    pad = S.pads(ctx, auto_pad, pads, (h, wd), (kh, kw), stride, dil)
    oh, ow = S.window_output(ctx, (h, wd), (kh, kw), stride, dil, pad)
    bias = None
    if b is not None:
        b_data = ctx.const(b, "bias")
        bias = ctx.derived("bias", (b_data,), lambda: np.asarray(b_data, np.float32).reshape(-1))
    fixed_pads = None if auto_pad in ("SAME_UPPER", "SAME_LOWER") else pad  # SAME pads follow the input's size
    ctx.keep("layer", (w_data, None if b is None else b.data), (weight, bias, group, stride, dil, fixed_pads))
    return ctx.emit(P.Conv(0, ctx.name, ctx.vid(x), weight, bias, group, stride, dil, pad), (n, cout, oh, ow))


@op
def BatchNormalization(ctx, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1, training_mode=0,
                       is_test=0, consumed_inputs=None):
    if training_mode:
        ctx.refuse("training_mode 1 is not supported")
    arrays = tuple(ctx.const(t, "statistics") for t in (scale, bias, mean, var))
    stats = ctx.derived("statistics", arrays, lambda: [np.asarray(a, np.float64).reshape(-1) for a in arrays])
    channels = x.shape[1] if len(x.shape) >= 2 else 0
    if any(s.size != channels for s in stats):
        ctx.refuse(f"statistics of {[s.size for s in stats]} values for {channels} channels (spatial={spatial})")
    k, shift = ctx.derived("affine", arrays, lambda: _batchnorm_affine(stats, float(epsilon)))
    # the passes fold this into the convolution (or fully connected layer) before it when they can
    return ctx.emit(P.Affine(0, ctx.name, ctx.vid(x), k, shift), x.shape)


def _batchnorm_affine(stats: list[np.ndarray], epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """A batch norm's statistics as out = x * k + shift, float32."""
    gamma, beta, mu, v = stats
    k = gamma / np.sqrt(v + epsilon)
    return k.astype(np.float32), (beta - mu * k).astype(np.float32)


@op
def Gemm(ctx, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    if len(a.shape) != 2:
        ctx.bad_input(f"expects a 2-D input, got {list(a.shape)}")
    m, k = a.shape
    if transA:
        copy = P.Copy(0, ctx.name + ":transA", ctx.vid(a), 0, (1, k), "transpose")
        a = ctx.emit(copy, (k, m), name=ctx.name + ":At")
        m, k = k, m
    if not b.is_const:
        ctx.refuse("a computed B operand is not supported")
    b_data = b.data
    # (N, K), contiguous: made once per model, however many row counts it compiles for
    weight = ctx.derived("weight", (b_data,), lambda: _gemm_weight(b_data, transB, alpha))
    if weight.shape[1] != k:
        ctx.bad_input(f"expects {weight.shape[1]} input features, got {k}")
    nout = weight.shape[0]
    bias, cc = None, None
    if c is not None:
        c_data = ctx.const(c, "C")
        cc = ctx.derived("C", (c_data,), lambda: np.asarray(c_data, np.float32) * np.float32(beta))
        if cc.ndim > 2 or any(dc not in (1, dp) for dc, dp in zip(cc.shape[::-1], (nout, m))):
            ctx.bad_input(f"a C of shape {list(cc.shape)} does not broadcast to the {m}x{nout} product")
        if cc.size == 1 or (cc.size == nout and (cc.ndim == 1 or cc.shape[0] == 1)):  # one bias per column
            c_row = cc
            bias, cc = ctx.derived("bias", (c_data,), lambda: np.broadcast_to(c_row.reshape(-1), (nout,)).copy()), None
    if cc is None:
        return ctx.emit(P.Gemm(0, ctx.name, ctx.vid(a), weight, bias), (m, nout))
    # a C varying down the rows (M x N, M x 1) is added after the product
    product = ctx.emit(P.Gemm(0, ctx.name, ctx.vid(a), weight, None), (m, nout), name=ctx.name + ":AB")
    c_op = S.Operand(ctx.name + ":C", cc.shape, data=cc)
    return ctx.emit(P.Binary(0, ctx.name + ":C", ctx.vid(product), ctx.vid(c_op), "add"), (m, nout))


def _gemm_weight(b: np.ndarray, trans_b, alpha) -> np.ndarray:
    wb = np.asarray(b, np.float32)
    return np.ascontiguousarray((wb if trans_b else wb.T) * np.float32(alpha))


@op
def MatMul(ctx, a, b):
    if not a.is_const and b.is_const and b.data.ndim == 2:
        # a computed activation times a constant matrix: a fully connected layer over the last axis
        sa = a.shape
        k, nout = b.data.shape
        if sa[-1] != k:
            ctx.bad_input(f"expects {k} input features, got {sa[-1]}")
        x = a if len(sa) == 2 else ctx.view(a, (prod(sa[:-1]), k), name=ctx.name + ":2d")
        b_data = b.data
        weight = ctx.derived("weight", (b_data,), lambda: np.ascontiguousarray(np.asarray(b_data, np.float32).T))
        out = ctx.emit(P.Gemm(0, ctx.name, ctx.vid(x), weight, None), (prod(sa[:-1]), nout))
        return out if len(sa) == 2 else ctx.view(out, sa[:-1] + (nout,))
    shape = S.matmul_shape(ctx, a.shape, b.shape)
    return ctx.emit(P.MatMul(0, ctx.name, ctx.vid(a), ctx.vid(b)), shape)


# ---------------------------------------------------------------------------------------------- elementwise


def _unary(ctx, x, act: P.Activation):
    # the passes fuse this into the convolution (or fully connected layer) before it when they can
    return ctx.emit(P.Unary(0, ctx.name, ctx.vid(x), act), x.shape)


@op
def Relu(ctx, x, *, consumed_inputs=None):
    # one activation object per node for every input size: the parameter pool then finds it by identity
    return _unary(ctx, x, ctx.derived("act", (), lambda: P.Activation("relu")))


@op
def Sigmoid(ctx, x, *, consumed_inputs=None):
    return _unary(ctx, x, ctx.derived("act", (), lambda: P.Activation("sigmoid")))


@op
def LeakyRelu(ctx, x, *, alpha=0.01, consumed_inputs=None):
    return _unary(ctx, x, ctx.derived("act", (), lambda: P.Activation("leaky", alpha=float(alpha))))


@op
def Clip(ctx, x, min_in=None, max_in=None, *, min=None, max=None, consumed_inputs=None):
    if ctx.opset < 11:  # bounds are attributes before opset 11, inputs from then on
        lo, hi = min, max
    else:
        lo, hi = (None if t is None else float(np.asarray(ctx.const(t, what)).reshape(-1)[0])
                  for t, what in ((min_in, "min"), (max_in, "max")))
    lo = -F32_MAX if lo is None else float(lo)
    hi = F32_MAX if hi is None else float(hi)
    return _unary(ctx, x, P.Activation("clip", lo=lo, hi=hi))


@op
def PRelu(ctx, x, slope, *, consumed_inputs=None):
    shape = x.shape
    if slope.is_const:
        s = np.asarray(slope.data, np.float32)
        # per channel when the slope, broadcast against x, varies along axis 1 only
        if len(shape) >= 2 and s.size == shape[1] and s.ndim <= len(shape):
            S.broadcast(shape, s.shape)
            aligned = s.ndim >= len(shape) - 1 and s.shape[-(len(shape) - 1)] == shape[1]
            if aligned or shape[1] == 1:
                act = ctx.derived("act", (slope.data,), lambda: P.Activation("prelu", slope=s.reshape(-1).copy()))
                return _unary(ctx, x, act)
    return _binary(ctx, x, slope, "prelu")


def _binary(ctx, a, b, kind: str, axis=None, broadcast=0):
    if ctx.opset < 7 and kind != "prelu" and not broadcast and a.shape != b.shape:
        ctx.bad_input(f"shapes {list(a.shape)} and {list(b.shape)} differ and broadcast is 0 (opset {ctx.opset})")
    if broadcast and axis is not None and len(b.shape) < len(a.shape):
        # before opset 7: b lines up with a from `axis` on, not from the end
        start = S.axis(ctx, int(axis), len(a.shape))
        b = ctx.view(b, tuple(b.shape) + (1,) * (len(a.shape) - start - len(b.shape)), name=ctx.name + ":b")
    shape = S.broadcast(a.shape, b.shape)
    return ctx.emit(P.Binary(0, ctx.name, ctx.vid(a), ctx.vid(b), kind), shape)


@op
def Add(ctx, a, b, *, axis=None, broadcast=0, consumed_inputs=None):
    return _binary(ctx, a, b, "add", axis, broadcast)


@op
def Sub(ctx, a, b, *, axis=None, broadcast=0, consumed_inputs=None):
    return _binary(ctx, a, b, "sub", axis, broadcast)


@op
def Mul(ctx, a, b, *, axis=None, broadcast=0, consumed_inputs=None):
    return _binary(ctx, a, b, "mul", axis, broadcast)


@op
def Div(ctx, a, b, *, axis=None, broadcast=0, consumed_inputs=None):
    return _binary(ctx, a, b, "div", axis, broadcast)


@op
def Softmax(ctx, x, *, axis=None):
    shape = x.shape
    if ctx.opset < 13:  # the input is seen as 2-D, split at axis (default 1)
        ax = S.axis(ctx, 1 if axis is None else int(axis), len(shape))
        outer, n, inner = prod(shape[:ax]), prod(shape[ax:]), 1
    else:
        ax = S.axis(ctx, -1 if axis is None else int(axis), len(shape))
        outer, n, inner = prod(shape[:ax]), shape[ax], prod(shape[ax + 1 :])
    return ctx.emit(P.Softmax(0, ctx.name, ctx.vid(x), outer, n, inner), shape)


# -------------------------------------------------------------------------------------------------- pooling


def _pool(ctx, x, kind, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides, count_include_pad=0):
    if len(x.shape) != 4:
        ctx.refuse(f"only 2-D pooling is supported (input {list(x.shape)})")
    n, c, h, w = x.shape
    k = S.pair(ctx, kernel_shape, "kernel_shape")
    s, d = S.pair(ctx, strides, "strides"), S.pair(ctx, dilations, "dilations")
    pad = S.pads(ctx, auto_pad, pads, (h, w), k, s, d)
    if auto_pad == "NOTSET" and any(p >= k[i % 2] for i, p in enumerate(pad)):  # a window all in padding
        ctx.refuse(f"pads {list(pad)} must be smaller than the {k[0]}x{k[1]} window")
    oh, ow = S.window_output(ctx, (h, w), k, s, d, pad, bool(ceil_mode))
    return ctx.emit(P.Pool(0, ctx.name, ctx.vid(x), kind, k, s, pad, d, bool(count_include_pad)), (n, c, oh, ow))


@op
def MaxPool(ctx, x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
            strides=None):
    return _pool(ctx, x, "max", auto_pad, int(ceil_mode), dilations, kernel_shape, pads, strides)


@op
def AveragePool(ctx, x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                pads=None, strides=None):
    return _pool(ctx, x, "avg", auto_pad, int(ceil_mode), dilations, kernel_shape, pads, strides, count_include_pad)


@op
def GlobalAveragePool(ctx, x):
    shape = x.shape
    return ctx.emit(P.GlobalAvgPool(0, ctx.name, ctx.vid(x)), shape[:2] + (1,) * (len(shape) - 2))


# --------------------------------------------------------------------------------------------------- resize


def _resize(ctx, x, scales, sizes, mode, ctm, nearest_mode):
    shape = x.shape
    if mode == "bilinear":  # Upsample-1's name for it
        mode = "linear"
    if mode not in ("nearest", "linear"):
        ctx.refuse(f"mode '{mode}' is not supported (nearest and linear only)")
    if len(shape) != 4:
        ctx.refuse("only 4-D inputs are supported")
    if sizes is not None:
        out = tuple(S.ints(sizes))
        if any(o < 1 for o in out):
            ctx.refuse(f"sizes {list(out)}: every size must be 1 or more")
        sc = [o / i for o, i in zip(out, shape)] if scales is None else [float(v) for v in scales]
    else:
        sc = [float(v) for v in np.asarray(scales).reshape(-1)]
        if not all(np.isfinite(v) and v > 0 for v in sc):
            ctx.refuse(f"scales {sc}: every scale must be a finite number above 0")
        out = tuple(int(np.floor(i * s)) for i, s in zip(shape, sc))
    if len(out) != 4:
        ctx.refuse(f"{'sizes' if sizes is not None else 'scales'} of {len(out)} values for a 4-D input")
    ctx.check_size(out)
    if out[:2] != shape[:2]:
        ctx.refuse("resizing the batch or channel axis is not supported")
    if mode == "linear":
        (y0, y1, wy), (x0, x1, wx) = (S.linear_map(ctx, shape[ax], out[ax], sc[ax], ctm) for ax in (2, 3))
        return ctx.emit(P.LinearResize(0, ctx.name, ctx.vid(x), y0, y1, wy, x0, x1, wx), out)
    maps = [S.nearest_map(ctx, shape[ax], out[ax], sc[ax], ctm, nearest_mode) for ax in (2, 3)]
    return ctx.emit(P.Resize(0, ctx.name, ctx.vid(x), maps[0], maps[1]), out)


@op
def Resize(ctx, x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    # antialias, cubic_coeff_a and exclude_outside change linear and cubic resizes only; extrapolation_value
    # tf_crop_and_resize only (refused below)
    if antialias and mode == "linear":
        ctx.refuse("antialias 1 is not supported")
    if ctx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates, floor
        sc, sz = ctx.const(roi, "scales"), None
        ctm, nearest = "asymmetric", "floor"
    else:
        sc, sz = ctx.const(scales, "scales"), ctx.const(sizes, "sizes")
        ctm, nearest = coordinate_transformation_mode, nearest_mode
    if sc is not None and np.size(sc) == 0:
        sc = None
    if sz is not None and np.size(sz) == 0:
        sz = None
    if sz is None and sc is None:
        ctx.refuse("neither scales nor sizes is given")
    rank = len(x.shape)
    if axes is not None:  # scales or sizes for these axes only; the others keep their size
        full = [1.0] * rank if sz is None else list(x.shape)
        for ax, v in zip(axes, np.asarray(sc if sz is None else sz).reshape(-1)):
            full[S.axis(ctx, int(ax), rank, "axes")] = v
        sc, sz = (full, None) if sz is None else (None, full)
    resized = list(range(rank)) if axes is None else [S.axis(ctx, int(ax), rank, "axes") for ax in axes]
    if sz is not None:
        sc = None  # sizes win; each axis's scale is then its output size over its input size
    if sz is not None and keep_aspect_ratio_policy != "stretch":
        # one scale for every resized axis: the largest that fits in sizes (not_larger) or the smallest that covers
        # them (not_smaller); each size then rounds half up
        pick = {"not_larger": min, "not_smaller": max}.get(keep_aspect_ratio_policy)
        if pick is None:
            ctx.refuse(f"keep_aspect_ratio_policy '{keep_aspect_ratio_policy}' is not one ONNX defines")
        one = pick(float(sz[ax]) / x.shape[ax] for ax in resized)
        sz = [int(np.floor(one * d + 0.5)) if ax in resized else d for ax, d in enumerate(x.shape)]
        sc = [one if ax in resized else 1.0 for ax in range(rank)]
    return _resize(ctx, x, sc, sz, mode, ctm, nearest)


@op
def Upsample(ctx, x, scales_in=None, *, mode="nearest", scales=None, height_scale=None, width_scale=None):
    if scales is None and height_scale is not None:  # opset 1
        scales = [1.0, 1.0, float(height_scale), float(width_scale or 1.0)]
    if scales is None:  # an input from opset 9 on
        scales = ctx.const(scales_in, "scales")
    if scales is None:
        ctx.refuse("no scales")
    return _resize(ctx, x, scales, None, mode, "asymmetric", "floor")


# ------------------------------------------------------------------------------------------ moving data
