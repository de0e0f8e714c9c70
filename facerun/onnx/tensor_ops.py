"""More operators of the ops table (`ops.OPS`): the ones face exporters emit beyond convolutions and activations.

Exp, Sqrt, HardSigmoid, HardSwish (elementwise), Pow, Sum, Pad, the reductions and LpNormalization (embedder L2-norm
tails), Split and ConvTranspose. Handlers follow `ops.py`'s rules: ONNX attribute names and defaults as keyword
arguments, opset differences handled here, the same code for computed and constant inputs.
"""

from __future__ import annotations

from math import prod

import numpy as np

from .. import program as P
from . import shapes as S
from .ops import _binary, _unary, op

# ---------------------------------------------------------------------------------------------- elementwise


@op
def Exp(ctx, x, *, consumed_inputs=None):
    return _unary(ctx, x, P.Activation("exp"))


@op
def Sqrt(ctx, x, *, consumed_inputs=None):
    return _unary(ctx, x, P.Activation("sqrt"))


@op
def HardSigmoid(ctx, x, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    return _unary(ctx, x, P.Activation("hardsigmoid", alpha=float(alpha), lo=float(beta)))


@op
def HardSwish(ctx, x):
    return _unary(ctx, x, P.Activation("hardswish", alpha=1 / 6, lo=0.5))


@op
def Pow(ctx, x, y, *, axis=None, broadcast=0):
    return _binary(ctx, x, y, "pow", axis, broadcast)


@op
def Sum(ctx, *xs, consumed_inputs=None):
    parts = [v for v in xs if v is not None]
    if not parts:
        ctx.refuse("no inputs")
    total = parts[0]
    for k, v in enumerate(parts[1:], 1):
        shape = S.broadcast(total.shape, v.shape)
        name = ctx.outputs[0] if k == len(parts) - 1 else f"{ctx.outputs[0]}:{k}"
        total = ctx.emit(P.Binary(0, ctx.name, ctx.vid(total), ctx.vid(v), "add"), shape, name=name)
    return total


# -------------------------------------------------------------------------------------------------- padding


@op
def Pad(ctx, x, pads_in=None, constant_value=None, axes_in=None, *, mode="constant", pads=None, value=0.0,
        paddings=None):
    rank = len(x.shape)
    if ctx.opset < 11:  # pads and value are attributes before opset 11 (`paddings` in Pad-1), inputs from then on
        widths = pads if pads is not None else paddings
        fill, axes = float(value), None
    else:
        widths = ctx.const(pads_in, "pads")
        given = np.asarray(ctx.const(constant_value, "constant_value") if constant_value is not None else [])
        fill = float(given.reshape(-1)[0]) if given.size else 0.0
        axes = None if axes_in is None else S.ints(ctx.const(axes_in, "axes"))
    if widths is None:
        ctx.refuse("no pads")
    widths = S.ints(widths)
    axes = list(range(rank)) if axes is None else [S.axis(ctx, a, rank, "axes") for a in axes]
    if len(widths) != 2 * len(axes):
        ctx.refuse(f"{len(widths)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for k, ax in enumerate(axes):
        before[ax], after[ax] = widths[k], widths[k + len(axes)]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.refuse(f"mode '{mode}' is not supported")
    out = tuple(d + b + a for d, b, a in zip(x.shape, before, after))
    if any(d < 0 for d in out):
        ctx.bad_input(f"pads {widths} crop more than {list(x.shape)} holds")
    for d, b, a in zip(x.shape, before, after):
        if -min(b, 0) - min(a, 0) > d:  # facerun crops the input, then pads: a crop must fit the input itself
            ctx.refuse(f"pads {widths} crop {-min(b, 0) - min(a, 0)} of an axis of {d}, more than it holds before "
                       "padding")
        left = d + min(b, 0) + min(a, 0)  # what the crops leave for the padding to reflect or extend
        if mode == "reflect" and max(b, a) > left - 1 or mode != "constant" and (b > 0 or a > 0) and left == 0:
            ctx.bad_input(f"pads {widths} reach past an axis of {left} in '{mode}' mode")
    if not any(before) and not any(after):
        return x
    return ctx.emit(P.Pad(0, ctx.name, ctx.vid(x), tuple(before), tuple(after), mode, fill), out)


# ----------------------------------------------------------------------------------------------- reductions


def _reduce(ctx, x, kind, axes, axes_in, keepdims, noop_with_empty_axes, name=None):
    shape = x.shape
    rank = len(shape)
    if axes is None and axes_in is not None:  # an input from opset 13 (ReduceSum) or 18 (the others) on
        axes = S.ints(ctx.const(axes_in, "axes"))
    if not axes:
        if noop_with_empty_axes:
            return x
        axes = range(rank)
    reduced = sorted({S.axis(ctx, int(a), rank, "axes") for a in axes})
    kept = [d for d in range(rank) if d not in reduced]
    out_shape = tuple(1 if d in reduced else shape[d] for d in range(rank)) if keepdims else \
        tuple(shape[d] for d in kept)
    # axes of size 1 go either side freely: the reduced axes must form one run among the others
    moving = [d for d in range(rank) if shape[d] != 1]
    runs = [d for d in moving if d in reduced]
    first = moving.index(runs[0]) if runs else 0
    if runs == moving[first:first + len(runs)]:
        outer = prod(shape[d] for d in moving[:first])
        inner = prod(shape[d] for d in moving[first + len(runs):])
    else:  # the reduced axes moved last by a transposing copy first
        st = S.strides(shape)
        perm = kept + reduced
        moved = tuple(shape[p] for p in perm)
        step = P.Copy(0, ctx.name, ctx.vid(x), 0, tuple(st[p] for p in perm), "transpose")
        x = ctx.emit(step, moved, name=f"{ctx.outputs[0]}:moved")
        outer, inner = prod(shape[d] for d in kept), 1
    n = prod(shape[d] for d in reduced)
    return ctx.emit(P.Reduce(0, ctx.name, ctx.vid(x), kind, outer, n, inner), out_shape, name=name)


def _reduction(kind: str, name: str):
    def handler(ctx, x, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        return _reduce(ctx, x, kind, axes, axes_in, int(keepdims), int(noop_with_empty_axes))

    handler.__name__ = handler.__qualname__ = name
    return op(handler)


for _kind, _name in (("sum", "ReduceSum"), ("mean", "ReduceMean"), ("max", "ReduceMax"), ("min", "ReduceMin"),
                     ("l1", "ReduceL1"), ("l2", "ReduceL2"), ("sumsquare", "ReduceSumSquare")):
    _reduction(_kind, _name)


@op
def LpNormalization(ctx, x, *, axis=-1, p=2):
    if int(p) not in (1, 2):
        ctx.refuse(f"p={p} (1 or 2 only)")
    norm = _reduce(ctx, x, "l2" if int(p) == 2 else "l1", [axis], None, 1, 0, name=f"{ctx.outputs[0]}:norm")
    # a zero vector stays zero (ONNX's reference gives 0, not 0/0): the norm is kept at least the smallest normal
    # float32, which no non-zero norm is below
    tiny = P.Activation("clip", lo=float(np.finfo(np.float32).tiny), hi=float(np.finfo(np.float32).max))
    norm = ctx.emit(P.Unary(0, f"{ctx.name}:nonzero", ctx.vid(norm), tiny), norm.shape, name=f"{ctx.outputs[0]}:nz")
    return ctx.emit(P.Binary(0, ctx.name, ctx.vid(x), ctx.vid(norm), "div"), x.shape)


# -------------------------------------------------------------------------------------------- moving data


@op
def Split(ctx, x, split_in=None, *, axis=0, split=None, num_outputs=None):
    shape = x.shape
    ax = S.axis(ctx, int(axis), len(shape))
    n = shape[ax]
    count = len(ctx.outputs)
    if split is None and split_in is not None:  # an input from opset 13 on
        split = S.ints(ctx.const(split_in, "split"))
    if split is None:
        if num_outputs is not None:
            count = int(num_outputs)
        part = -(-n // count)  # the last part smaller when n does not divide (opset 18)
        split = [min(part, n - k * part) for k in range(count)]
    split = S.ints(split)
    if sum(split) != n or any(s < 0 for s in split):
        ctx.bad_input(f"split {split} does not add up to the axis of {n}")
    if len(split) != count:
        ctx.refuse(f"{len(split)} parts for {count} outputs")
    if count == 1:
        return x
    st = S.strides(shape)
    outs, at = [], 0
    for k, size in enumerate(split):
        copy = P.Copy(0, ctx.name, ctx.vid(x), at * st[ax], tuple(st), "slice")
        outs.append(ctx.emit(copy, shape[:ax] + (size,) + shape[ax + 1:], name=ctx.outputs[k] or None))
        at += size
    return tuple(outs)


# ------------------------------------------------------------------------------------------ ConvTranspose


@op
def ConvTranspose(ctx, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                  output_padding=None, output_shape=None, pads=None, strides=None):
    """A convolution over the input spread apart by the stride (zeros between), padded by dilation * (k - 1) less
    the declared pads, with the kernel flipped and its in/out channels swapped."""
    weight = np.asarray(ctx.const(w, "weight"), dtype=np.float32)
    if weight.ndim != 4 or len(x.shape) != 4:
        ctx.refuse(f"only 2-D transposed convolutions are supported (input {list(x.shape)}, weight "
                   f"{list(weight.shape)})")
    n, c, h, wd = x.shape
    cin, cog, kh, kw = weight.shape
    g = S.groups(ctx, group, weight)
    if c != cin or cin % g:
        ctx.bad_input(f"expects {cin} input channels in {g} groups, got {c}")
    if kernel_shape is not None and tuple(int(k) for k in kernel_shape) != (kh, kw):
        ctx.refuse(f"kernel_shape {list(kernel_shape)} does not match its weight {list(weight.shape)}")
    s, d = S.pair(ctx, strides, "strides"), S.pair(ctx, dilations, "dilations")
    extra = (0, 0) if output_padding is None else tuple(S.ints(output_padding))
    if len(extra) != 2 or any(not 0 <= e < max(st, dd) for e, st, dd in zip(extra, s, d)):
        ctx.refuse(f"output_padding {list(extra)} must be 0 or more and below the stride (or dilation) {list(s)}")
    span = [(k - 1) * dd + 1 for k, dd in zip((kh, kw), d)]
    full = [st * (i - 1) + e + sp for st, i, e, sp in zip(s, (h, wd), extra, span)]  # the output before pads
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        want = S.ints(output_shape)[-2:] if output_shape is not None else [i * st for i, st in zip((h, wd), s)]
        total = [f - o for f, o in zip(full, want)]
        if any(t < 0 for t in total):
            ctx.bad_input(f"output_shape {want} is larger than the {full} a stride of {list(s)} makes")
        # the spec's split of the total padding: the odd one at the end for SAME_UPPER, at the start otherwise
        upper = auto_pad == "SAME_UPPER"
        start = [t // 2 if upper else t - t // 2 for t in total]
        pad = (start[0], start[1], total[0] - start[0], total[1] - start[1])
    elif auto_pad in ("NOTSET", "VALID"):
        pad = (0, 0, 0, 0) if auto_pad == "VALID" or pads is None else tuple(S.ints(pads))
        if len(pad) != 4:
            ctx.refuse(f"pads {list(pad)} (4 values for 2-D)")
        if any(p < 0 for p in pad):
            ctx.refuse(f"pads {list(pad)}: negative padding is not valid")
    else:
        ctx.refuse(f"auto_pad '{auto_pad}' is not supported")
    oh, ow = full[0] - pad[0] - pad[2], full[1] - pad[1] - pad[3]
    if oh <= 0 or ow <= 0:
        ctx.bad_input(f"pads {list(pad)} leave no output")
    before = (span[0] - 1 - pad[0], span[1] - 1 - pad[1])
    after = (span[0] - 1 - pad[2] + extra[0], span[1] - 1 - pad[3] + extra[1])
    # (Cin, Cout/g, kh, kw) -> (Cout, Cin/g, kh, kw), flipped
    flipped = weight.reshape(g, cin // g, cog, kh, kw).transpose(0, 2, 1, 3, 4).reshape(g * cog, cin // g, kh, kw)
    flipped = np.ascontiguousarray(flipped[:, :, ::-1, ::-1])
    bias = None if b is None else np.asarray(ctx.const(b, "bias"), np.float32).reshape(-1).copy()
    src, conv_pads = x, (0, 0, 0, 0)
    if s == (1, 1) and min(before + after) >= 0:
        conv_pads = (before[0], before[1], after[0], after[1])  # no spreading: the convolution pads itself
    else:
        spread = ((h - 1) * s[0] + 1 + before[0] + after[0], (wd - 1) * s[1] + 1 + before[1] + after[1])
        step = P.Pad(0, ctx.name, ctx.vid(x), (0, 0) + before, (0, 0) + after, "constant", 0.0,
                     (0, 0, s[0] - 1, s[1] - 1))
        src = ctx.emit(step, (n, c) + spread, name=f"{ctx.outputs[0]}:spread")
    step = P.Conv(0, ctx.name, ctx.vid(src), flipped, bias, g, (1, 1), d, conv_pads)
    return ctx.emit(step, (n, cog * g, oh, ow))
