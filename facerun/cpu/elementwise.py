"""In-place elementwise kernels of the fast interpreter: activations (PReLU as maximum(x, s·x), or minimum for
slopes above 1: two passes instead of np.where's five), channels-last affine, binary, max pooling, nearest resize.
Each is built once into a closure over its arena buffers; results equal the reference's bit for bit."""

from __future__ import annotations

import numpy as np

from .. import program as P
from .padding import padder


def _slope_pick(x: np.ndarray, slope: np.ndarray, tmp: np.ndarray, pick=None):
    """x = x < 0 ? s·x : x, in place. max(x, s·x) is that for every s <= 1, min(x, s·x) for every s >= 1 (`pick`,
    when the caller knows it already)."""
    if pick is None:
        pick = _pick_for(slope)
    if pick is None:
        def run():
            np.multiply(x, slope, out=tmp)
            np.copyto(x, tmp, where=x < 0)

        return run

    def run():
        np.multiply(x, slope, out=tmp)
        pick(x, tmp, out=x)

    return run


def widen(x: np.ndarray, channels: int) -> tuple[np.ndarray, int]:
    """Channels-last x seen as rows of `reps` pixels (a view, and reps): per-channel vectors tiled `reps` times then
    broadcast over long rows, as numpy's inner loops want (16 channels a row would cost a loop call each)."""
    pixels = x.size // channels
    reps = np.gcd(pixels, max(1, 4096 // channels))
    return x.reshape(pixels // reps, reps * channels), int(reps)


def per_channel(v: np.ndarray, reps: int) -> np.ndarray:
    v = v.astype(np.float32).reshape(-1)
    return np.tile(v, reps) if v.size > 1 else v.reshape(())


def _pick_for(slope: np.ndarray):
    """np.maximum when every slope is at most 1, np.minimum when every one is at least 1, else None."""
    if np.all(slope <= 1):
        return np.maximum
    if np.all(slope >= 1):
        return np.minimum
    return None


def inplace_activation(act: P.Activation | None, x: np.ndarray, scratch, channels_last: bool, reps: int = 1,
                       tiles: dict | None = None):
    """A closure applying `act` to x in place (None for no activation); per-channel slopes on the last axis (tiled
    `reps` times: see `widen`) when channels_last, else on axis 1."""
    if act is None:
        return None
    k = act.kind
    if k == "relu":
        zero = scratch.constant(0.0, x.shape)
        return lambda: np.maximum(x, zero, out=x)
    if k == "clip" and np.float32(act.lo) <= np.float32(act.hi):
        lo, hi = scratch.constant(np.float32(act.lo), x.shape), scratch.constant(np.float32(act.hi), x.shape)

        def clip():
            np.maximum(x, lo, out=x)
            np.minimum(x, hi, out=x)

        return clip
    if k == "clip":
        lo, hi = np.float32(act.lo), np.float32(act.hi)
        return lambda: np.clip(x, lo, hi, out=x)
    if k == "sigmoid":
        def sigmoid():
            with np.errstate(over="ignore"):
                np.negative(x, out=x)
                np.exp(x, out=x)
                np.add(x, np.float32(1.0), out=x)
                np.divide(np.float32(1.0), x, out=x)

        return sigmoid
    if k in ("leaky", "prelu"):
        if k == "leaky":
            slope = np.float32(act.alpha)
            tmp = scratch.get("act", x.shape)
            return _slope_pick(x, np.asarray(slope), tmp)
        tiles = {} if tiles is None else tiles
        if "pick" not in tiles:
            tiles["pick"] = _pick_for(act.slope)
        s = act.slope.astype(np.float32).reshape(-1)
        if s.size > 1 and channels_last:
            if ("slope", reps) not in tiles:
                tiles["slope", reps] = per_channel(s, reps)
            s = tiles["slope", reps]
        elif s.size > 1:
            s = s.reshape((1, -1) + (1,) * (x.ndim - 2))
        else:
            s = s.reshape(())
        return _slope_pick(x, s, scratch.get("act", x.shape), tiles["pick"])
    if k == "exp":
        def exp():
            with np.errstate(over="ignore"):
                np.exp(x, out=x)

        return exp
    if k == "sqrt":
        def sqrt():
            with np.errstate(invalid="ignore"):
                np.sqrt(x, out=x)

        return sqrt
    if k in ("hardsigmoid", "hardswish"):
        alpha, lo = np.float32(act.alpha), np.float32(act.lo)
        gate = scratch.get("act", x.shape)

        def hard():
            np.multiply(x, alpha, out=gate)
            np.add(gate, lo, out=gate)
            np.clip(gate, 0, 1, out=gate)
            if k == "hardsigmoid":
                np.copyto(x, gate)
            else:
                np.multiply(x, gate, out=x)

        return hard
    raise ValueError(f"unknown activation {k}")


def copy_then(src: np.ndarray, out: np.ndarray, then):
    """out = src (skipped when out is src's buffer), then `then()` in place."""
    same = np.shares_memory(src, out)

    def run():
        if not same:
            np.copyto(out, src)
        if then is not None:
            then()

    return run


def unary(st: P.Unary, x: np.ndarray, out: np.ndarray, scratch):
    wide, reps = widen(out, out.shape[-1])
    return copy_then(x, out, inplace_activation(st.act, wide, scratch, channels_last=True, reps=reps))


def affine(st: P.Affine, x: np.ndarray, out: np.ndarray):
    out, reps = widen(out, out.shape[-1])
    x = x.reshape(out.shape)
    scale, shift = per_channel(st.scale, reps), per_channel(st.shift, reps)

    def run():
        np.multiply(x, scale, out=out)
        np.add(out, shift, out=out)

    return run


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def binary(st: P.Binary, a, b, out: np.ndarray):
    fn = _BINARY[st.kind]
    if st.kind == "div":
        def divide():
            with np.errstate(divide="ignore", invalid="ignore"):
                fn(a, b, out=out)

        return divide
    return lambda: fn(a, b, out=out)


def maxpool(st: P.Pool, x: np.ndarray, out: np.ndarray, scratch):
    """Max over the window taps of channels-last x, padded with -inf where the windows reach past it."""
    _, h, w, _ = x.shape
    _, oh, ow, _ = out.shape
    (kh, kw), (sh, sw), (dh, dw) = st.kernel, st.stride, st.dilation
    top, left, _, _ = st.pads
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    pads = (top, left, max(0, need_h - h - top), max(0, need_w - w - left))
    if (kh, kw) == (sh, sw) == (2, 2) and (dh, dw) == (1, 1) and not any(pads):
        return _maxpool_2x2(x, out, scratch)
    xp, pad_in = padder(x, pads, scratch, fill=-np.inf)
    taps = [xp[:, ky * dh : ky * dh + sh * (oh - 1) + 1 : sh, kx * dw : kx * dw + sw * (ow - 1) + 1 : sw]
            for ky in range(kh) for kx in range(kw)]

    def run():
        if pad_in is not None:
            pad_in()
        np.copyto(out, taps[0])
        for tap in taps[1:]:
            np.maximum(out, tap, out=out)

    return run


def _maxpool_2x2(x: np.ndarray, out: np.ndarray, scratch):
    """2x2/2 max: rows first (whole rows, numpy's long inner loops), then pixel pairs over half the data (loops of C
    elements: the costly part, so it comes second)."""
    n, oh, ow, c = out.shape
    rows = scratch.get("pool", (n, oh, x.shape[2], c))
    top, bottom = x[:, 0 : 2 * oh : 2], x[:, 1 : 2 * oh : 2]
    left, right = rows[:, :, 0 : 2 * ow : 2], rows[:, :, 1 : 2 * ow : 2]

    def run():
        np.maximum(top, bottom, out=rows)
        np.maximum(left, right, out=out)

    return run


def resize(st: P.Resize, x: np.ndarray, out: np.ndarray, scratch):
    """Nearest resize of channels-last x: rows taken, then columns."""
    n, h, w, c = x.shape
    fy, fx = len(st.src_y) // h, len(st.src_x) // w
    if (np.array_equal(st.src_y, np.repeat(np.arange(h), fy)) and np.array_equal(st.src_x, np.repeat(np.arange(w), fx))
            and fy * h == len(st.src_y) and fx * w == len(st.src_x)):  # an integer upsampling: one broadcast copy
        blocks = out.reshape(n, h, fy, w, fx, c)
        spread = x[:, :, None, :, None, :]
        return lambda: np.copyto(blocks, spread)
    rows = scratch.get("resize", (n, len(st.src_y), w, c))
    src_y, src_x = st.src_y.astype(np.intp), st.src_x.astype(np.intp)

    def run():
        np.take(x, src_y, axis=1, out=rows)
        np.take(rows, src_x, axis=2, out=out)

    return run


def global_average(x: np.ndarray, out: np.ndarray):
    """Mean over H and W of channels-last x into (N, C, 1, 1), which is the same memory in either layout."""
    flat = out.reshape(out.shape[0], out.shape[1])

    def run():
        np.mean(x, axis=(1, 2), dtype=np.float32, out=flat)

    return run
