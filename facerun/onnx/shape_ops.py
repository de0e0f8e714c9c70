"""The shape and layout operators of the ops table (`ops.OPS`): Transpose, Slice, Gather, Concat, Reshape, Flatten,
Squeeze, Unsqueeze, Identity, Dropout, Cast, Shape, Constant and ConstantOfShape. They move values (as views or
strided copies) or make constants; none computes. Handlers follow `ops.py`'s rules: ONNX attribute names and
defaults as keyword arguments, opset differences handled here, the same code for computed and constant inputs.
"""

from __future__ import annotations

from math import prod

import numpy as np

from .. import program as P
from . import shapes as S
from .ops import _onnx_dtype, op


@op
def Transpose(ctx, x, *, perm=None):
    shape = x.shape
    rank = len(shape)
    perm = list(range(rank))[::-1] if perm is None else [S.axis(ctx, int(p), rank, "perm") for p in perm]
    if sorted(perm) != list(range(rank)):
        ctx.refuse(f"perm {perm} is not a permutation of {rank} axes")
    out_shape = tuple(shape[p] for p in perm)
    moved = [p for p in perm if shape[p] != 1]
    if moved == sorted(moved):
        return ctx.view(x, out_shape)  # only size-1 axes move: same memory order
    st = S.strides(shape)
    return ctx.emit(P.Copy(0, ctx.name, ctx.vid(x), 0, tuple(st[p] for p in perm), "transpose"), out_shape)


@op
def Slice(ctx, x, starts_in=None, ends_in=None, axes_in=None, steps_in=None, *, starts=None, ends=None, axes=None):
    if ctx.opset < 10 or starts is not None:  # attributes before opset 10, inputs from then on
        if starts is None or ends is None:
            ctx.refuse("starts or ends is missing")
        steps = [1] * len(starts)
    else:
        starts, ends = S.ints(ctx.const(starts_in, "starts")), S.ints(ctx.const(ends_in, "ends"))
        axes = None if axes_in is None else S.ints(ctx.const(axes_in, "axes"))
        steps = [1] * len(starts) if steps_in is None else S.ints(ctx.const(steps_in, "steps"))
    axes = list(range(len(starts))) if axes is None else list(axes)
    shape = x.shape
    st = S.strides(shape)
    offset, strides, out_shape = 0, list(st), list(shape)
    for s, e, ax, step in zip(starts, ends, axes, steps):
        ax = S.axis(ctx, int(ax), len(shape), "axes")
        if step == 0:
            ctx.refuse("step 0")
        r = range(*slice(int(s), int(e), int(step)).indices(shape[ax]))
        out_shape[ax] = len(r)
        offset += (r.start if len(r) else 0) * st[ax]
        strides[ax] = st[ax] * int(step)
    if out_shape == list(shape) and offset == 0 and strides == st:
        return x  # a slice that keeps everything
    return ctx.emit(P.Copy(0, ctx.name, ctx.vid(x), offset, tuple(strides), "slice"), tuple(out_shape))


@op
def Gather(ctx, x, indices, *, axis=0):
    """Constant indices along one axis: a strided copy for each arithmetic run of them, joined by a Concat."""
    idx = np.asarray(ctx.const(indices, "indices"))
    if idx.dtype.kind not in "iu":
        ctx.refuse(f"indices of type {idx.dtype} (integers only)")
    shape = x.shape
    ax = S.axis(ctx, int(axis), len(shape))
    n = shape[ax]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        ctx.bad_input(f"an index in {S.ints(idx)[:8]} is out of range for an axis of {n}")
    flat = [int(i) % n for i in idx.reshape(-1)]
    out_shape = shape[:ax] + idx.shape + shape[ax + 1 :]
    if flat == list(range(n)):
        return ctx.view(x, out_shape)  # every index in order: the same data
    st = S.strides(shape)
    runs = S.rising_runs(flat)
    parts = []
    for k, (first, step, count) in enumerate(runs):
        strides = list(st)
        strides[ax] = st[ax] * step
        name = None if len(runs) == 1 else f"{ctx.outputs[0]}:{k}"
        copy = P.Copy(0, ctx.name, ctx.vid(x), first * st[ax], tuple(strides), "gather")
        parts.append(ctx.emit(copy, shape[:ax] + (count,) + shape[ax + 1 :], name=name))
    out = parts[0]
    if len(parts) > 1:
        joined = shape[:ax] + (len(flat),) + shape[ax + 1 :]
        out = ctx.emit(P.Concat(0, ctx.name, tuple(ctx.vid(p) for p in parts), ax), joined)
    return ctx.view(out, out_shape)


@op
def Concat(ctx, *xs, axis=None):
    if axis is None:
        if ctx.opset >= 4:
            ctx.refuse("attribute 'axis' is missing")
        axis = 1
    # a 0-d constant (a folded scalar) counts as one element
    parts = [ctx.view(v, (1,)) if v.shape == () else v for v in xs if v is not None]
    if not parts:
        ctx.refuse("no inputs")
    shapes = [p.shape for p in parts]
    rank = len(shapes[0])
    ax = S.axis(ctx, int(axis), rank)
    for s in shapes:
        if len(s) != rank or any(s[d] != shapes[0][d] for d in range(rank) if d != ax):
            ctx.bad_input(f"shapes {[list(s) for s in shapes]} do not line up")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return ctx.emit(P.Concat(0, ctx.name, tuple(ctx.vid(p) for p in parts), ax), tuple(out))


# ----------------------------------------------------------------------------------- views: no data moves


@op
def Reshape(ctx, x, shape_in=None, *, allowzero=0, shape=None, consumed_inputs=None):
    if shape is None and shape_in is None:
        ctx.refuse("no target shape")
    target = S.ints(shape if shape is not None else ctx.const(shape_in, "shape"))  # an attribute before opset 5
    n = ctx.batch_items
    if not x.is_const and n and n > 1 and target and target[0] == 1 and x.shape[0] == n:
        # a file fixed at batch 1 compiled for n items: the leading 1 is the batch (the Net checks the result)
        target[0] = n
        ctx.note(f"Reshape '{ctx.name}': its leading 1 taken as the batch of {n}")
    return ctx.view(x, S.reshape_target(ctx, x.shape, target, allowzero))


@op
def Flatten(ctx, x, *, axis=1):
    shape = x.shape
    rank = len(shape)
    if not -rank <= axis <= rank:
        ctx.refuse(f"axis {axis} is out of range for a {rank}-D input")
    ax = axis + rank if axis < 0 else axis
    return ctx.view(x, (prod(shape[:ax]), prod(shape[ax:])))


@op
def Squeeze(ctx, x, axes_in=None, *, axes=None):
    shape = x.shape
    if axes is None and axes_in is not None:  # an input from opset 13 on
        axes = S.ints(ctx.const(axes_in, "axes"))
    if axes is None:
        return ctx.view(x, tuple(d for d in shape if d != 1))
    drop = {S.axis(ctx, int(ax), len(shape), "axes") for ax in axes}
    if any(shape[ax] != 1 for ax in drop):
        ctx.bad_input(f"axis of size other than 1 in {list(shape)}")
    return ctx.view(x, tuple(d for i, d in enumerate(shape) if i not in drop))


@op
def Unsqueeze(ctx, x, axes_in=None, *, axes=None):
    if axes is None and axes_in is None:
        ctx.refuse("no axes")
    if axes is None:  # an input from opset 13 on
        axes = S.ints(ctx.const(axes_in, "axes"))
    shape = list(x.shape)
    rank = len(shape) + len(axes)
    where = sorted(S.axis(ctx, int(a), rank, "axes") for a in axes)
    if len(set(where)) != len(where):
        ctx.refuse(f"axes {S.ints(axes)} name an axis twice")
    for ax in where:
        shape.insert(ax, 1)
    return ctx.view(x, tuple(shape))


@op
def Identity(ctx, x):
    return x


@op
def Dropout(ctx, x, ratio_in=None, training_mode=None, *, ratio=0.5, seed=None, is_test=0, consumed_inputs=None):
    if training_mode is not None and np.any(ctx.const(training_mode, "training_mode")):
        ctx.refuse("training_mode true is not supported")
    return x  # inference: the input unchanged (the mask output is not made)


@op
def Cast(ctx, x, *, to, saturate=1, round_mode="up"):  # saturate, round_mode: float8 targets only
    dtype = _onnx_dtype(ctx, int(to))
    if x.is_const:
        return ctx.constant(x.data.astype(dtype))
    if dtype != np.float32:
        ctx.refuse(f"casting a computed tensor to {dtype} is not supported (float32 only)")
    return x


# ---------------------------------------------------------------------------------------------- constants


@op
def Shape(ctx, x, *, start=0, end=None):
    return ctx.constant(np.array(x.shape[start:end], dtype=np.int64))


@op
def Constant(ctx, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None):
    for v, dtype in ((value_float, np.float32), (value_floats, np.float32), (value_int, np.int64),
                     (value_ints, np.int64)):
        if v is not None:
            return ctx.constant(np.array(v, dtype=dtype))
    if value is None:
        ctx.refuse("no value facerun can read")
    return ctx.constant(np.asarray(value))


@op
def ConstantOfShape(ctx, shape, *, value=None):
    dims = np.asarray(ctx.const(shape, "shape"))
    if dims.dtype.kind not in "iu" or dims.ndim > 1:
        ctx.refuse(f"its shape must be a 1-D integer tensor, got {dims.dtype} {list(dims.shape)}")
    if (dims < 0).any():
        ctx.bad_input(f"a negative dimension in {S.ints(dims)}")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if fill.size != 1:
        ctx.refuse(f"value must hold one element, it holds {fill.size}")
    ctx.check_size(S.ints(dims), fill.dtype.itemsize)
    return ctx.constant(np.full(tuple(S.ints(dims)), fill.reshape(-1)[0], dtype=fill.dtype))
