"""Photos in a larger program: which programs may run a smaller photo exactly, and the mask sizes of a run.

A photo library meets a program per input size, and a new size costs planning, parameters and bind groups on the
thread that feeds the GPU, and the commands recorded ahead for the last photo. Rounding photos up to a coarser
bucket lets many sizes share one program; to keep each photo's results those of its own program, a run masks every
convolution's output past the photo's rows and columns to 0 (epilogue.wgsl `finish`), so the next layer reads zeros
there, as its own program's zero padding would give. `maskable` says whether a program stays exact that way, from
its steps alone (no device): every value a spatial step reads must be exact on the photo's region and zero past it,
and every value's region must be the one the photo's own program has, for every photo size the bucket takes.
"""

from __future__ import annotations

import numpy as np

from .. import program as P

ZERO, EXACT, FLAT = "zero past the photo", "exact on the photo", "flattened"


def maskable(prog: P.Program, align: int) -> str | None:
    """None when `prog` (one 1 x C x H x W input) runs any photo of a multiple of `align` rows and columns up to H x W
    exactly under the mask; otherwise why not. The outputs are then exact on the photo's region: 4-D ones on their
    top-left rows and columns, flattened ones (a head's Reshape) on the positions of that region, which the caller
    picks out (the model family knows its outputs' layout)."""
    values = prog.values
    if len(prog.inputs) != 1 or len(prog.input_shape) != 4:
        return "the program does not take one image"
    _, _, height, width = prog.input_shape
    if height % align or width % align:
        return f"its input {height}x{width} is not a multiple of {align}"
    state: dict[int, str] = {prog.inputs[0][1]: ZERO}

    def of(vid: int) -> str | None:
        v = values[vid]
        if v.kind == "const":
            return "const"
        if vid in state:
            return state[vid]
        base = state.get(v.base)
        if base is None:
            return None
        return base if v.shape == values[v.base].shape else FLAT  # a reshape: positions no longer rows and columns

    def rows_cols(vid: int) -> tuple[int, int] | None:
        """The factor by which a 4-D value is smaller than the input, when a whole one dividing `align`."""
        shape = values[vid].shape
        if len(shape) != 4 or height % shape[2] or width % shape[3]:
            return None
        fy, fx = height // shape[2], width // shape[3]
        return (fy, fx) if align % fy == 0 and align % fx == 0 else None

    for st in prog.steps:
        reads = [of(r) for r in st.reads]
        if any(r is None for r in reads):
            return f"{st.op} '{st.node}' reads a value made before the program's steps"
        spatial_in = [r for r in reads if r in (ZERO, EXACT)]
        why, out = _step(st, reads, spatial_in, values, rows_cols, height, width, align)
        if why is not None:
            return f"{st.op} '{st.node}': {why}"
        state[st.out] = out
    return None


class _Ctx:
    """What a step's rule reads besides the step: its reads' states, the values and the program's input size."""

    def __init__(self, reads, spatial_in, values, rows_cols, height, width, align):
        self.reads, self.spatial_in, self.values, self.rows_cols = reads, spatial_in, values, rows_cols
        self.height, self.width, self.align = height, width, align


# steps that may read flattened values and constants alone (elementwise, or moving values without their positions)
FLAT_KINDS = frozenset({P.Unary, P.Copy, P.Binary, P.Affine, P.Concat})


def _step(st, reads, spatial_in, values, rows_cols, height, width, align) -> tuple[str | None, str]:
    """(why the step breaks exactness or None, the state of its output)."""
    if all(r in ("const", FLAT) for r in reads):
        if type(st) in FLAT_KINDS:
            return None, FLAT if FLAT in reads else "const"
        return "a flattened value read by a step that is not elementwise", FLAT
    if FLAT in reads:
        return "mixes a flattened value with rows and columns", FLAT
    rule = RULES.get(type(st))
    if rule is None:
        return f"{st.op} over rows and columns is not masked", EXACT
    return rule(st, _Ctx(reads, spatial_in, values, rows_cols, height, width, align))


def _conv(st: P.Conv, c: _Ctx):
    kh, kw = st.weight.shape[2:]
    if (kh > 1 or kw > 1 or any(st.pads)) and c.reads[0] != ZERO:
        return "its input is not zero past the photo", ZERO
    if st.residual is not None and c.reads[-1] not in (ZERO, EXACT):
        return "its residual is not exact", ZERO
    if c.rows_cols(st.out) is None:
        return "its output is not the input's size over a factor of the photo alignment", ZERO
    if not _conv_sizes_agree(st, c.values, c.height, c.width, c.align):
        return "a smaller photo's own program would have other output rows", ZERO
    return None, ZERO  # its output is masked


def _pool(st: P.Pool, c: _Ctx):
    if tuple(st.kernel) != tuple(st.stride) or any(st.pads) or tuple(st.dilation) != (1, 1):
        return "a pool whose windows overlap or are padded", EXACT
    if c.rows_cols(st.out) is None or c.rows_cols(st.x) is None:  # whole windows within every photo size
        return "its output is not the input's size over a factor of the photo alignment", EXACT
    return None, c.reads[0]  # whole windows: past the photo it pools only what is past it


def _resize(st: P.Resize, c: _Ctx):
    oh, ow = c.values[st.out].shape[2:]
    ih, iw = c.values[st.x].shape[2:]
    if oh % ih or ow % iw or c.rows_cols(st.out) is None:
        return "not a whole-number upscale", EXACT
    ry, rx = oh // ih, ow // iw
    if not (np.array_equal(st.src_y, np.arange(oh) // ry) and np.array_equal(st.src_x, np.arange(ow) // rx)):
        return "not a nearest upscale by repetition", EXACT
    return None, c.reads[0]


def _binary(st: P.Binary, c: _Ctx):
    a, b = c.values[st.a].shape, c.values[st.b].shape
    if "const" in c.reads:
        const = c.values[st.a if c.reads[0] == "const" else st.b].shape
        if len(const) >= 2 and const[-1] * const[-2] > 1:
            return "a constant with rows and columns of its own (the photo's own program would have others)", EXACT
        return None, EXACT  # a constant past the photo is no longer zero
    if a != b:
        return "broadcasts one image over another", EXACT
    zero = c.reads == [ZERO, ZERO] and st.kind in ("add", "sub", "mul") and _keeps_zero(getattr(st, "act", None))
    return None, ZERO if zero else EXACT


def _concat(st: P.Concat, c: _Ctx):
    if st.axis != 1 or len(c.spatial_in) != len(c.reads):
        return "joins along rows or columns", EXACT
    return None, ZERO if all(r == ZERO for r in c.reads) else EXACT


# Each step kind's rule under the mask: (step, context) -> (why it breaks exactness or None, its output's state).
# A kind without an entry is not masked (the program then runs photos in programs of their own size).
RULES = {
    P.Conv: _conv,
    P.Pool: _pool,
    P.Resize: _resize,
    P.Binary: _binary,
    P.Unary: lambda st, c: (None, ZERO if c.reads[0] == ZERO and _keeps_zero(st.act) else EXACT),
    P.Affine: lambda st, c: (None, EXACT),
    P.Copy: lambda st, c: (None, FLAT),  # a transpose or slice: rows and columns moved
    P.Concat: _concat,
}


def _keeps_zero(act: P.Activation | None) -> bool:
    return act is None or act.kind in ("relu", "prelu", "leaky") or (act.kind == "clip" and act.lo <= 0 <= act.hi)


def _conv_sizes_agree(st: P.Conv, values, height: int, width: int, align: int) -> bool:
    """Whether, for every photo height (and width) a multiple of `align` up to the input's, the convolution's own
    output size is the masked region's (the input's rows over the same factor)."""
    _, _, ih, iw = values[st.x].shape
    _, _, oh, ow = values[st.out].shape
    kh, kw = st.weight.shape[2:]
    top, left, bottom, right = st.pads
    sh, sw = st.stride
    dh, dw = st.dilation
    for full, i, o, k, s, d, before, after in ((height, ih, oh, kh, sh, dh, top, bottom),
                                                (width, iw, ow, kw, sw, dw, left, right)):
        for photo in range(align, full + 1, align):
            photo_in = photo * i // full
            own = (photo_in + before + after - d * (k - 1) - 1) // s + 1
            if own != photo * o // full:
                return False
    return True


def mask_sizes(masks, input_hw: tuple[int, int], photo_hw: tuple[int, int]) -> list[tuple[int, int]]:
    """The (rows, columns) each masked output keeps for a photo of `photo_hw` in a program of `input_hw`: `masks` the
    (rows, columns) of each output."""
    (h, w), (ph, pw) = input_hw, photo_hw
    return [(oh * ph // h, ow * pw // w) for oh, ow in masks]
