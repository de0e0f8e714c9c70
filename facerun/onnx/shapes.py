"""What the op handlers work with: the operands they are given, and the shape and index rules of ONNX they share.

Plain functions of shapes and attributes. Those that can refuse take the compile context, so the one-line error
names the node and its operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Operand:
    """A tensor a node reads: a program value (`vid`) or a constant (`data`), with its shape either way."""

    name: str
    shape: tuple[int, ...]
    vid: int | None = None
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None


def strides(shape) -> list[int]:
    """Element strides of a C-contiguous array."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def broadcast(a: tuple, b: tuple) -> tuple:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise InputError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def ints(v) -> list[int]:
    return [int(d) for d in np.asarray(v).reshape(-1)]


def axis(ctx, ax: int, rank: int, what="axis") -> int:
    """A possibly negative axis of a rank-`rank` tensor, as a non-negative one."""
    if not -rank <= ax < rank:
        ctx.refuse(f"{what} {ax} is out of range for a {rank}-D input")
    return ax % rank


def pair(ctx, v, what: str) -> tuple[int, int]:
    """strides, dilations, kernel_shape of a 2-D window (1, 1 when absent)."""
    if v is None:
        return (1, 1)
    if len(v) != 2:
        ctx.refuse(f"{what} {list(v)}: only 2-D windows are supported")
    if any(int(d) < 1 for d in v):
        ctx.refuse(f"{what} {list(v)}: every value must be 1 or more")
    return int(v[0]), int(v[1])


def groups(ctx, group, weight: np.ndarray) -> int:
    """A convolution's group count, checked with its weight (which must hold something)."""
    if weight.size == 0:
        ctx.refuse(f"its weight {list(weight.shape)} is empty")
    group = int(group)
    if group < 1:
        ctx.refuse(f"group={group} must be 1 or more")
    return group


def pads(ctx, auto_pad, explicit, hw, k, s, d) -> tuple[int, int, int, int]:
    """A 2-D window's padding, top, left, bottom, right, from auto_pad or the pads attribute."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        both = []
        for i in range(2):
            out = -(-hw[i] // s[i])
            total = max(0, (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - hw[i])
            small, big = total // 2, total - total // 2
            both.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return (both[0][0], both[1][0], both[0][1], both[1][1])
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad != "NOTSET":
        ctx.refuse(f"auto_pad '{auto_pad}' is not supported")
    p = [0, 0, 0, 0] if explicit is None else [int(v) for v in explicit]
    if len(p) != 4:
        ctx.refuse(f"pads {p}: only 2-D windows are supported")
    if any(v < 0 for v in p):
        ctx.refuse(f"pads {p}: negative padding is not valid")
    return (p[0], p[1], p[2], p[3])


def window_output(ctx, hw, k, s, d, pad, ceil_mode=False) -> tuple[int, int]:
    """Output height and width of a convolution or pooling window sliding over hw."""
    dims = []
    for i in range(2):
        size, kk, ss, dd, p0, p1 = hw[i], k[i], s[i], d[i], pad[i], pad[i + 2]
        span = size + p0 + p1 - dd * (kk - 1) - 1
        out = (ceil(span / ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (out - 1) * ss >= size + p0:
            out -= 1  # the last window would start in the end padding
        if out <= 0:
            ctx.bad_input(f"input {hw[0]}x{hw[1]} is too small for its {k[0]}x{k[1]} window")
        dims.append(out)
    return dims[0], dims[1]


def matmul_shape(ctx, sa: tuple, sb: tuple) -> tuple:
    """numpy's matmul shape rule (a 1-D operand gets a dimension added, then removed)."""
    a = (1,) + sa if len(sa) == 1 else sa
    b = sb + (1,) if len(sb) == 1 else sb
    try:
        if not sa or not sb or a[-1] != b[-2]:
            raise ValueError
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        ctx.bad_input(f"shapes {list(sa)} and {list(sb)} do not multiply")
    return tuple(batch) + ((a[-2],) if len(sa) > 1 else ()) + ((b[-1],) if len(sb) > 1 else ())


def reshape_target(ctx, shape, target: list[int], allowzero) -> tuple:
    """Reshape's output shape: 0 copies the input's dimension (unless allowzero), one -1 takes what is left."""
    out = [shape[i] if d == 0 and not allowzero and i < len(shape) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        ctx.bad_input("a reshape with two -1 dimensions")
    if -1 in out:
        known = prod(d for d in out if d != -1)
        if known == 0 or prod(shape) % known:
            ctx.bad_input(f"cannot reshape {list(shape)} to {target}")
        out[out.index(-1)] = prod(shape) // known
    if prod(out) != prod(shape) or any(d < 0 for d in out):
        ctx.bad_input(f"cannot reshape {list(shape)} to {target}")
    return tuple(out)


def source_coords(ctx, n_in: int, n_out: int, scale: float, ctm: str) -> np.ndarray:
    """The source coordinate of each output index of a resize along one axis, as ONNX's Resize defines it."""
    i = np.arange(n_out, dtype=np.float64)
    if ctm == "asymmetric":
        return i / scale
    if ctm == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":  # centred on the input when out is not exactly n_in * scale
        adjustment = n_out / (n_in * scale)
        return n_in / 2 * (1 - adjustment) + (i + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(i)
    if ctm == "align_corners":
        if abs(n_in * scale - n_out) > 1e-6 * max(1, n_out):
            # ONNX's reference divides by the fractional size n_in * scale here, onnxruntime by the whole one
            ctx.refuse(f"coordinate_transformation_mode 'align_corners' with a scale ({scale:g}) that does not give "
                       f"a whole output size ({n_in} x {scale:g}); give the sizes instead")
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(i)
    if ctm == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    ctx.refuse(f"coordinate_transformation_mode '{ctm}' is not supported")


def linear_map(ctx, n_in: int, n_out: int, scale: float, ctm: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index of a linear resize along one axis: the two source indices and the second's weight
    (coordinates clamped to the input, as onnxruntime does)."""
    x = np.clip(source_coords(ctx, n_in, n_out, scale, ctm), 0, n_in - 1)
    lo = np.floor(x)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo.astype(np.int32), hi.astype(np.int32), (x - lo).astype(np.float32)


def nearest_map(ctx, n_in: int, n_out: int, scale: float, ctm: str, mode: str) -> np.ndarray:
    """Source index for each output index of a nearest resize, as ONNX's Resize defines it."""
    x = source_coords(ctx, n_in, n_out, scale, ctm)
    if mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    elif mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif mode == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    else:
        ctx.refuse(f"nearest_mode '{mode}' is not supported")
    return np.clip(idx, 0, n_in - 1).astype(np.int32)


def rising_runs(idx: list[int]) -> list[tuple[int, int, int]]:
    """Indices cut into rising arithmetic runs, (first, step, count) each: one strided copy per run. Rising only,
    because the GPU's copy kernel takes unsigned strides."""
    runs: list[tuple[int, int, int]] = []
    i = 0
    while i < len(idx):
        step = idx[i + 1] - idx[i] if i + 1 < len(idx) else 1
        if step <= 0:
            step = 1
        j = i + 1
        while j < len(idx) and idx[j] - idx[j - 1] == step:
            j += 1
        runs.append((idx[i], step, j - i))
        i = j
    return runs
