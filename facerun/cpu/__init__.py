"""The numpy interpreter: the reference every other path is judged by.

`run_program` runs the fast interpreter (interpreter.py: channels-last, an arena per program, fused in-place
epilogues, depthwise/stem/Winograd kernels) unless asked for the reference: `reference=True`,
FACERUN_CPU_REFERENCE=1, or a step hook (`on_step`, `conv`), which sees every step's NCHW value.

This module is the reference: plain NCHW numpy, vectorised and dtype-preserving (the compiler folds integer shape
arithmetic through `run_step`): convolutions are im2col (a strided view, copied once) times the weights through BLAS,
1x1 convolutions skip the copy, depthwise convolutions add up their kernel taps over whole tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import blas, settings
from .. import program as P

# Depthwise maps up to this many pixels use the im2col + batched matmul form.
_SMALL_PLANE = 4096
# Past this many bytes of im2col columns, a convolution runs one batch item at a time to bound memory.
_COLUMN_BYTES = 256 << 20


def activate(x: np.ndarray, act: P.Activation | None, out: np.ndarray | None = None) -> np.ndarray:
    if act is None:
        return x
    k = act.kind
    if k == "relu":
        return np.maximum(x, 0, out=out if out is not None else x)
    if k == "clip":
        return np.clip(x, np.float32(act.lo), np.float32(act.hi), out=x)
    if k == "sigmoid":
        with np.errstate(over="ignore"):
            return (1.0 / (1.0 + np.exp(-x))).astype(np.float32, copy=False)
    if k == "leaky":
        return np.where(x < 0, x * np.float32(act.alpha), x).astype(np.float32, copy=False)
    if k == "prelu":
        slope = act.slope.reshape((1, -1) + (1,) * (x.ndim - 2))
        return np.where(x < 0, x * slope, x).astype(np.float32, copy=False)
    if k == "exp":
        with np.errstate(over="ignore"):
            return np.exp(x, dtype=np.float32)
    if k == "sqrt":
        with np.errstate(invalid="ignore"):
            return np.sqrt(x, dtype=np.float32)
    if k in ("hardsigmoid", "hardswish"):
        gate = np.clip(x * np.float32(act.alpha) + np.float32(act.lo), 0, 1).astype(np.float32)
        return gate if k == "hardsigmoid" else x * gate
    raise ValueError(f"unknown activation {k}")


def _pad(x: np.ndarray, pads, value=0.0) -> np.ndarray:
    top, left, bottom, right = pads
    if not (top or left or bottom or right):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _windows(x: np.ndarray, k, s, d, out_hw) -> np.ndarray:
    """A view (N, C, kh, kw, OH, OW) of the windows of a padded NCHW array."""
    n, c, _, _ = x.shape
    sn, sc, sh, sw = x.strides
    return as_strided(
        x,
        shape=(n, c, k[0], k[1], out_hw[0], out_hw[1]),
        strides=(sn, sc, sh * d[0], sw * d[1], sh * s[0], sw * s[1]),
        writeable=False,
    )


def _taps(x: np.ndarray, k, s, d, out_hw):
    """Each kernel tap's strided view of a padded NCHW array: (ky, kx, view of shape (N, C, OH, OW))."""
    oh, ow = out_hw
    for ky in range(k[0]):
        for kx in range(k[1]):
            y0, x0 = ky * d[0], kx * d[1]
            yield ky, kx, x[:, :, y0 : y0 + s[0] * (oh - 1) + 1 : s[0], x0 : x0 + s[1] * (ow - 1) + 1 : s[1]]


def _depthwise(xp: np.ndarray, w: np.ndarray, s, d, out_shape) -> np.ndarray:
    """Depthwise convolution. Small maps: the windows copied once and multiplied per channel by a batched matmul;
    large maps: a sum of kernel taps over whole tensors (the window copy would cost more than it saves)."""
    n, c, oh, ow = out_shape
    kh, kw = w.shape[2:]
    if oh * ow <= _SMALL_PLANE:
        cols = _windows(xp, (kh, kw), s, d, (oh, ow)).reshape(n, c, kh * kw, oh * ow)
        return np.matmul(w.reshape(1, c, 1, kh * kw), cols).reshape(out_shape)
    out = np.empty(out_shape, np.float32)
    tmp = np.empty(out_shape, np.float32)
    for i, (ky, kx, tap) in enumerate(_taps(xp, (kh, kw), s, d, (oh, ow))):
        wk = w[:, 0, ky, kx].reshape(1, -1, 1, 1)
        if i == 0:
            np.multiply(tap, wk, out=out)
        else:
            np.multiply(tap, wk, out=tmp)
            out += tmp
    return out


def conv2d(x: np.ndarray, st: P.Conv, out_shape, threads: int = 1) -> np.ndarray:
    n, cout, oh, ow = out_shape
    w = st.weight
    kh, kw = st.kernel
    g = st.groups
    xp = _pad(x, st.pads)
    if st.depthwise and cout == x.shape[1]:
        out = _depthwise(xp, w, st.stride, st.dilation, out_shape)
    else:
        cg = w.shape[1]
        mg = cout // g
        out = np.empty((n, cout, oh * ow), np.float32)
        pointwise = kh == kw == 1 and st.stride == (1, 1)
        per_item = n > 1 and n * cg * kh * kw * oh * ow * 4 > _COLUMN_BYTES
        items = [slice(i, i + 1) for i in range(n)] if per_item else [slice(0, n)]
        macs = mg * cg * kh * kw * oh * ow * (n if not per_item else 1)
        for gi in range(g):
            wg = w[gi * mg : (gi + 1) * mg].reshape(mg, cg * kh * kw)
            xg = xp[:, gi * cg : (gi + 1) * cg]
            for sl in items:
                if pointwise:
                    cols = xg[sl].reshape(xg[sl].shape[0], cg, oh * ow)
                elif kh == kw == 1:
                    sh, sw = st.stride
                    cols = np.ascontiguousarray(xg[sl, :, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw])
                    cols = cols.reshape(cols.shape[0], cg, oh * ow)
                else:
                    win = _windows(xg[sl], (kh, kw), st.stride, st.dilation, (oh, ow))
                    cols = win.reshape(win.shape[0], cg * kh * kw, oh * ow)
                with blas.threads_for(macs, threads):
                    np.matmul(wg, cols, out=out[sl, gi * mg : (gi + 1) * mg])
        out = out.reshape(out_shape)
    if st.bias is not None:
        out += st.bias.reshape(1, -1, 1, 1)
    return out


def pool(x: np.ndarray, st: P.Pool, out_shape) -> np.ndarray:
    _, _, h, w = x.shape
    _, _, oh, ow = out_shape
    (kh, kw), (sh, sw), (dh, dw) = st.kernel, st.stride, st.dilation
    top, left, bottom, right = st.pads
    # room for every window, ceil_mode's last one included
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    extra = (top, left, max(0, need_h - h - top), max(0, need_w - w - left))
    if st.kind == "max":
        xp = _pad(x, extra, -np.inf)
        out = None
        for _, _, tap in _taps(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow)):
            out = tap.copy() if out is None else np.maximum(out, tap, out=out)
        return out
    xp = _pad(x, extra, 0.0)
    total = _windows(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow)).sum(axis=(2, 3), dtype=np.float32)
    # divisor: valid input cells, or, with count_include_pad, the cells inside the declared padding
    ones = np.ones((1, 1, h, w), np.float32)
    if st.count_include_pad:
        ones = _pad(ones, (top, left, bottom, right), 1.0)
        ones = _pad(ones, (0, 0, max(0, need_h - ones.shape[2]), max(0, need_w - ones.shape[3])), 0.0)
    else:
        ones = _pad(ones, extra, 0.0)
    count = _windows(ones, (kh, kw), (sh, sw), (dh, dw), (oh, ow)).sum(axis=(2, 3))
    return (total / np.maximum(count, 1)).astype(np.float32)


def softmax(x: np.ndarray, st: P.Softmax) -> np.ndarray:
    v = x.reshape(st.outer, st.n, st.inner)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape).astype(np.float32)


def _integer_binary(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """Integer arithmetic in the operands' type (shape arithmetic folded at compile time); division truncates
    toward zero, as ONNX's integer Div does."""
    if kind == "add":
        return np.add(a, b)
    if kind == "sub":
        return np.subtract(a, b)
    if kind == "mul":
        return np.multiply(a, b)
    if kind == "div":
        q, r = np.divmod(a, b)
        return q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    if kind == "pow":
        return np.power(a, b)
    raise ValueError(f"integer {kind}")


def binary(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return _integer_binary(a, b, kind)
    if kind == "add":
        return np.add(a, b, dtype=np.float32)
    if kind == "sub":
        return np.subtract(a, b, dtype=np.float32)
    if kind == "mul":
        return np.multiply(a, b, dtype=np.float32)
    if kind == "div":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.divide(a, b, dtype=np.float32)
    if kind == "pow":
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return np.power(a, b, dtype=np.float32)
    if kind == "prelu":
        return np.where(a < 0, a * b, a).astype(np.float32)
    raise ValueError(kind)


def pad(x: np.ndarray, st: P.Pad) -> np.ndarray:
    """Interior padding first (spreading the elements apart), then the crops, then the outer padding."""
    fill = np.asarray(st.value, dtype=x.dtype)
    if any(st.interior):
        spread = np.full([(d - 1) * (g + 1) + 1 if d else 0 for d, g in zip(x.shape, st.interior)], fill, x.dtype)
        spread[tuple(slice(None, None, g + 1) for g in st.interior)] = x
        x = spread
    crop = tuple(slice(-min(b, 0), d + min(a, 0)) for b, a, d in zip(st.before, st.after, x.shape))
    x = x[crop]
    widths = [(max(b, 0), max(a, 0)) for b, a in zip(st.before, st.after)]
    if st.mode == "constant":
        return np.pad(x, widths, constant_values=fill)
    return np.pad(x, widths, mode=st.mode)  # reflect, edge and wrap: numpy's names are ONNX's


def reduce(x: np.ndarray, st: P.Reduce) -> np.ndarray:
    v = x.reshape(st.outer, st.n, st.inner)
    k = st.kind
    if k in ("max", "min"):
        return (v.max(axis=1) if k == "max" else v.min(axis=1)) if st.n else np.full((st.outer, st.inner), np.nan)
    if k == "mean":
        return v.mean(axis=1, dtype=np.float64).astype(np.float32)
    if k == "l1":
        v = np.abs(v)
    elif k in ("l2", "sumsquare"):
        v = np.square(v, dtype=np.float64)
    total = v.sum(axis=1, dtype=np.float64)
    return (np.sqrt(total) if k == "l2" else total).astype(x.dtype if x.dtype.kind in "iu" else np.float32)


def linear_resize(x: np.ndarray, st: P.LinearResize) -> np.ndarray:
    wy = st.wy.reshape(-1, 1)
    rows = x[:, :, st.y0] * (1 - wy) + x[:, :, st.y1] * wy
    return (rows[:, :, :, st.x0] * (1 - st.wx) + rows[:, :, :, st.x1] * st.wx).astype(np.float32)


def _conv(st: P.Conv, args, out_shape, threads):
    y = conv2d(args[0], st, out_shape, threads)
    if st.residual is not None:
        y += args[1]
    return activate(y, st.act)


def _gemm(st: P.Gemm, args, out_shape, threads):
    with blas.threads_for(st.weight.size * args[0].shape[0], threads):
        y = args[0] @ st.weight.T
    if st.bias is not None:
        y += st.bias
    return activate(y, st.act)


def _affine(st: P.Affine, args, out_shape, threads):
    shape = (1, -1) + (1,) * (args[0].ndim - 2)
    return args[0] * st.scale.reshape(shape) + st.shift.reshape(shape)


def _copy(st: P.Copy, args, out_shape, threads):
    flat = np.ascontiguousarray(args[0]).reshape(-1)
    strides = [s * flat.itemsize for s in st.strides]  # float32 when running; any type when folding
    view = as_strided(flat[st.offset :], shape=out_shape, strides=strides, writeable=False)
    return np.ascontiguousarray(view)


def _global_avg_pool(st: P.GlobalAvgPool, args, out_shape, threads):
    x = args[0]
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)


# The CPU's kernel of each step kind: (step, args in the order of its reads, output shape, threads) -> array. A new
# step kind is one entry here (and one in gpu/lower.py's LOWERINGS, gpu/masking.py's RULES, bench/torch_peer.py's OPS).
KERNELS: dict[type, Callable] = {
    P.Conv: _conv,
    P.Gemm: _gemm,
    P.MatMul: lambda st, args, out_shape, threads: np.matmul(args[0], args[1]).astype(np.float32, copy=False),
    P.Affine: _affine,
    P.Unary: lambda st, args, out_shape, threads: activate(args[0].copy(), st.act),
    P.Binary: lambda st, args, out_shape, threads: binary(args[0], args[1], st.kind),
    P.Copy: _copy,
    P.Pool: lambda st, args, out_shape, threads: pool(args[0], st, out_shape),
    P.GlobalAvgPool: _global_avg_pool,
    P.Resize: lambda st, args, out_shape, threads: np.ascontiguousarray(args[0][:, :, st.src_y][:, :, :, st.src_x]),
    P.LinearResize: lambda st, args, out_shape, threads: linear_resize(args[0], st),
    P.Pad: lambda st, args, out_shape, threads: pad(args[0], st),
    P.Reduce: lambda st, args, out_shape, threads: reduce(args[0], st).reshape(out_shape),
    P.Concat: lambda st, args, out_shape, threads: np.concatenate(args, axis=st.axis),
    P.Softmax: lambda st, args, out_shape, threads: softmax(args[0], st),
}


def run_step(st: P.Step, args: list[np.ndarray], out_shape, threads: int | None = None) -> np.ndarray:
    """One step on numpy arrays (args in the order of `st.reads`), through its kind's entry in KERNELS."""
    if threads is None:
        threads = blas.default_threads()
    kernel = KERNELS.get(type(st))
    if kernel is None:
        raise TypeError(f"no CPU kernel for {st.op}")
    return kernel(st, args, out_shape, threads)


StepHook = Callable[[P.Step, np.ndarray], None]
ConvHook = Callable[[P.Conv, list], "np.ndarray | None"]


def use_reference() -> bool:
    """FACERUN_CPU_REFERENCE=1: every run on the plain NCHW reference."""
    return settings.get("FACERUN_CPU_REFERENCE")


def run_program(
    prog: P.Program,
    inputs: dict[str, np.ndarray],
    on_step: StepHook | None = None,
    conv: ConvHook | None = None,
    reference: bool | None = None,
) -> dict[str, np.ndarray]:
    """Run `prog` on `inputs` (by input name). `on_step(step, value)` sees every step's result (parity --steps);
    `conv(step, args)` may compute a convolution elsewhere (the GPU's per-convolution mode) or return None. Either
    hook, `reference=True` or FACERUN_CPU_REFERENCE=1 runs the reference; otherwise the fast interpreter runs (the
    reference too when the inputs' shapes aren't the program's)."""
    if reference is None:
        reference = use_reference()
    if not reference and on_step is None and conv is None:
        from . import interpreter

        if interpreter.fits(prog, inputs):
            return interpreter.run_fast(prog, inputs)
    return run_reference(prog, inputs, on_step, conv)


def run_reference(
    prog: P.Program,
    inputs: dict[str, np.ndarray],
    on_step: StepHook | None = None,
    conv: ConvHook | None = None,
) -> dict[str, np.ndarray]:
    """The reference run: every step's NCHW result from `run_step` (or the `conv` hook), freed after its last use."""
    store: dict[int, np.ndarray] = {}
    threads = blas.default_threads()  # once a run: one thread while the machine is busy
    for name, vid in prog.inputs:
        store[vid] = np.ascontiguousarray(inputs[name], dtype=np.float32)
    values = prog.values

    def get(vid: int) -> np.ndarray:
        v = values[vid]
        if v.kind == "const":
            return v.data
        base = store[v.base]
        return base if base.shape == v.shape else base.reshape(v.shape)

    for st in prog.steps:
        args = [get(v) for v in st.reads]
        shape = values[st.out].shape
        y = conv(st, args) if conv is not None and isinstance(st, P.Conv) else None
        if y is None:
            y = run_step(st, args, shape, threads)
        y = np.ascontiguousarray(y, dtype=np.float32)
        if y.shape != shape:
            y = y.reshape(shape)
        store[st.out] = y
        if on_step is not None:
            on_step(st, y)
        for f in st.frees:
            store.pop(f, None)
    return {name: np.array(get(vid)) for name, vid in prog.outputs}
