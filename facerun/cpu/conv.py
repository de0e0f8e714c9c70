"""Channels-last convolution kernels of the fast interpreter, each built once per program into a closure over its
arena buffers (x and out NHWC unless said otherwise):

- pointwise 1x1: one GEMM, (N·H·W, Cin) x (Cin, Cout), straight into the output;
- dense k x k: im2col from a zero-ringed copy, in bands of rows that stay in cache, times the weights;
- the stem (a dense convolution reading the NCHW input): the columns gathered tap by tap (C·kh·kw strided copies)
  straight from the NCHW input, one GEMM writing channels-last;
- depthwise: one einsum per band of ~256 KB of output rows over a strided (kh, kw, rows, W·C) view of the
  zero-ringed input (stride 1), or (kh, kw, rows, W, C) at other strides.

A bias, a residual and the activation follow in place (`epilogue`). A kernel's bands may be dealt out to lanes
(lanes.py) that threads make at once: each piece then names its lane, and uses that lane's scratch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import blas
from .. import program as P
from . import lanes
from .elementwise import inplace_activation, per_channel, widen
from .padding import padder, refill

try:  # einsum's C entry point: np.einsum's Python wrapper costs ~2.5 us a call (a YuNet run makes ~150)
    from numpy._core.multiarray import c_einsum as einsum
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import c_einsum as einsum
    except ImportError:
        einsum = np.einsum

# Bytes of im2col columns per band, and of output rows per depthwise band: small enough to stay in cache.
COLUMN_BAND_BYTES = 2 << 20
DEPTHWISE_BAND_BYTES = 256 << 10
STEM_BAND_BYTES = 512 << 10


def strided(base: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """A read-only view into contiguous `base`, starting `offset` elements in: np.ndarray's constructor, a tenth of
    as_strided's cost (a YuNet program builds about a thousand of these), and bounds-checked against `base`."""
    view = np.ndarray(shape, np.float32, buffer=base, offset=offset * 4, strides=strides)
    view.flags.writeable = False
    return view


def bands(items: int, rows: int, row_bytes: int, budget: int, macs: int = 0) -> list[tuple[int, int, int, int]]:
    """(n0, n1, r0, r1) blocks covering items x rows, about `budget` bytes each: whole items grouped when one fits,
    else bands of rows of one item. With `macs` (the step's work) their count suits the lanes it will have (bands
    of at least lanes.MIN_BAND_VALUES values of the working buffer)."""
    per_item = rows * row_bytes
    values = items * per_item // 4
    if per_item <= budget:
        step = max(1, budget // max(per_item, 1))
        step = lanes.balanced(items, step, lanes.count(macs, -(-items // step), values) if macs else 1)
        return [(n, min(n + step, items), 0, rows) for n in range(0, items, step)]
    step = max(1, budget // max(row_bytes, 1))
    if items == 1 and macs:
        step = lanes.balanced(rows, step, lanes.count(macs, -(-rows // step), values))
    return [(n, n + 1, r, min(r + step, rows)) for n in range(items) for r in range(0, rows, step)]


def epilogue(st: P.Conv, out: np.ndarray, residual: np.ndarray | None, scratch, tiles: dict | None = None):
    """out += bias; out += residual; out = act(out), all in place over channels-last `out` (None: nothing to do).
    `tiles` keeps the per-channel vectors tiled for one row length, for the next band."""
    out, reps = widen(out, out.shape[-1])
    tiles = {} if tiles is None else tiles
    residual = None if residual is None else residual.reshape(out.shape)
    if st.bias is not None and ("bias", reps) not in tiles:
        tiles["bias", reps] = per_channel(st.bias, reps)
    bias = None if st.bias is None else tiles["bias", reps]
    act = inplace_activation(st.act, out, scratch, channels_last=True, reps=reps, tiles=tiles)
    if bias is None and residual is None and act is None:
        return None

    def run():
        if bias is not None:
            np.add(out, bias, out=out)
        if residual is not None:
            np.add(out, residual, out=out)
        if act is not None:
            act()

    return run


def fused(st: P.Conv, kernel, x, out, residual, scratch, ctx):
    """The convolution `kernel` builds, its epilogue applied to each band of output right after the band is made
    (while it is still in cache). A kernel that adds the bias itself says so with a third result, True. Pieces are
    (piece, output band selector) or (piece, selector, lane): a lane's pieces run in order, lanes at once."""
    prologue, pieces, *biased = kernel(st, x, out, scratch, ctx)
    if biased and biased[0]:
        st = dataclasses.replace(st, bias=None)
    tiles: dict = {}
    by_lane: dict[int, list] = {}
    for fn, pick, *lane in pieces:
        k = lane[0] if lane else 0
        tail = epilogue(st, pick(out), None if residual is None else pick(residual), scratch.lane(k), tiles)
        by_lane.setdefault(k, []).extend((fn, tail))
    body = lanes.runner([lanes.sequence(fns) for _, fns in sorted(by_lane.items())], ctx)
    if prologue is None:
        return body

    def run():
        prologue()
        body()

    return run


def dealt(bands: int, macs: int, values: int, scratch, ctx) -> list[tuple[int, object, object]]:
    """(lane, its scratch, its run context) for each of `bands` bands of a step of `macs` multiply-adds (over
    `values` values of output or working buffer: see lanes.count)."""
    n = lanes.count(macs, bands, values)
    return [(k, scratch.lane(k), ctx if n == 1 else lanes.ONE) for k in lanes.deal(bands, n)]


def threaded(call, macs: int, ctx, pieces: list | None = None):
    """`call` (one matrix product) on the OpenBLAS threads this run leaves the lanes (ctx.blas), one when small or
    inside a lane (ctx is lanes.ONE). With `pieces` (the same product in parts), those go over the lanes instead when
    the run leaves OpenBLAS no thread of its own."""
    small = macs < blas.SMALL_MACS

    def whole():
        blas.set_threads(1 if small or ctx is lanes.ONE else ctx.blas)
        call()

    if not pieces:
        return whole
    split = lanes.runner(pieces, ctx, bands=False)

    def run():
        if ctx.blas > 1:
            whole()
        else:
            blas.set_threads(1)
            split()

    return run


def weights_k_major(w: np.ndarray) -> np.ndarray:
    """A (Cout, K) weight matrix as the contiguous (K, Cout) matrix a product `x @ w` takes. OpenBLAS packs that
    layout faster than the transposed view of (Cout, K): single-thread on an AVX-512 Xeon, 1.3-2x faster at 16-200
    rows (1x1 convolutions on 7x7 and 14x14 maps, a batch of 16 through a fully connected layer) and within noise
    from 784 rows up. Most shapes give the same bits; OpenBLAS's small-matrix kernels round differently (MobileFaceNet
    moved by 4e-7 of its largest output)."""
    return np.ascontiguousarray(w.T)


def product(a: np.ndarray, b: np.ndarray, out: np.ndarray, ctx):
    """out = a @ b as `threaded` runs it, split by output columns over the lanes when it is large."""
    m, n = out.shape
    macs = m * a.shape[1] * n
    parts = 1 if ctx is lanes.ONE else lanes.parts(macs, n, m)
    pieces = None
    if parts > 1:
        bounds = [(n * k // parts, n * (k + 1) // parts) for k in range(parts)]
        if m == 1 and b.T.flags.c_contiguous:  # one row: matrix-vector products over rows of the weights (numpy's
            w, x, y = b.T, a[0], out[0]  # one-row matmul on a column block kept the GIL: no gain in two threads)
            pieces = [lambda c0=c0, c1=c1: np.dot(w[c0:c1], x, out=y[c0:c1]) for c0, c1 in bounds]
        else:
            pieces = [lambda c0=c0, c1=c1: np.matmul(a, b[:, c0:c1], out=out[:, c0:c1]) for c0, c1 in bounds]
    return threaded(lambda: np.matmul(a, b, out=out), macs, ctx, pieces)


def _row_bands(a: np.ndarray, wk: np.ndarray, out2: np.ndarray, scratch, ctx):
    """a @ wk in bands of rows of the (M, Cout) output, each with its selector of the NHWC output band."""
    m, cout = out2.shape
    rows = max(256, DEPTHWISE_BAND_BYTES // (cout * 4)) // 256 * 256  # whole pixel runs: see elementwise.widen
    macs = m * a.shape[1] * cout
    starts = range(0, m, rows)
    pieces = []
    for m0, (lane, _, c) in zip(starts, dealt(len(starts), macs, m * cout, scratch, ctx)):
        m1 = min(m, m0 + rows)
        pieces.append((product(a[m0:m1], wk, out2[m0:m1], c),
                       lambda arr, m0=m0, m1=m1: arr.reshape(-1, arr.shape[-1])[m0:m1], lane))
    return pieces


def pointwise(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    """1x1 at stride s (no padding): strided inputs gathered first."""
    n, oh, ow, cout = out.shape
    cin = x.shape[3]
    wk = weights_k_major(st.weight.reshape(cout, cin))
    sh, sw = st.stride
    if (sh, sw) == (1, 1):
        return None, _row_bands(x.reshape(-1, cin), wk, out.reshape(-1, cout), scratch, ctx)
    cols = scratch.get("cols", (n, oh, ow, cin))
    src = x[:, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw]
    return (lambda: np.copyto(cols, src)), _row_bands(cols.reshape(-1, cin), wk, out.reshape(-1, cout), scratch, ctx)


def _windows(xp: np.ndarray, kernel, stride, dilation, out_hw) -> np.ndarray:
    """(N, OH, OW, kh, kw, C) windows of a padded NHWC array."""
    sn, sh, sw, sc = xp.strides
    return as_strided(xp, shape=(xp.shape[0], out_hw[0], out_hw[1], kernel[0], kernel[1], xp.shape[3]),
                      strides=(sn, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1], sc),
                      writeable=False)


def dense(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    """Any dense (one group) convolution on channels-last x: windows copied band by band, one GEMM per band."""
    n, oh, ow, cout = out.shape
    cin = x.shape[3]
    kh, kw = st.kernel
    k = kh * kw * cin
    wk = np.ascontiguousarray(st.weight.transpose(2, 3, 1, 0).reshape(k, cout))
    xp, pad_in = padder(x, st.pads, scratch)
    win = _windows(xp, st.kernel, st.stride, st.dilation, (oh, ow))
    pieces = []
    macs = n * oh * ow * k * cout
    blocks = bands(n, oh, ow * k * 4, COLUMN_BAND_BYTES, macs)
    for (n0, n1, r0, r1), (lane, sc, c) in zip(blocks, dealt(len(blocks), macs, n * oh * ow * k, scratch, ctx)):
        cols = sc.get("cols", (n1 - n0, r1 - r0, ow, kh, kw, cin))
        src = win[n0:n1, r0:r1]
        mult = product(cols.reshape(-1, k), wk, out[n0:n1, r0:r1].reshape(-1, cout), c)

        def band(cols=cols, src=src, mult=mult):
            np.copyto(cols, src)
            mult()

        pieces.append((band, lambda arr, n0=n0, n1=n1, r0=r0, r1=r1: arr[n0:n1, r0:r1], lane))
    return pad_in, pieces


def _column_phases(x: np.ndarray, pads, scratch):
    """(planes, fill function) for a stride-2 convolution over NCHW x: the zero-padded input split by column parity,
    planes[p, n, c, row, j] = padded[n, c, row, 2j + p], so that each tap's stride-2 columns are contiguous (the
    gathers from them run at copy speed, not one element at a time)."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    hp, wp = h + top + bottom, w + left + right
    planes = scratch.get("phases", (2, n, c, hp, (wp + 1) // 2))
    copies, ring = [], []
    for p in (0, 1):
        first = (p - left) % 2  # x's first column in this plane
        j0, count = (first + left) // 2, len(range(first, w, 2))
        plane = planes[p]
        copies.append((plane[:, :, top : top + h, j0 : j0 + count], x[:, :, :, first::2]))
        ring += [plane[:, :, :top], plane[:, :, top + h :], plane[:, :, top : top + h, :j0],
                 plane[:, :, top : top + h, j0 + count :]]
    return planes, refill(ring, copies)


def stem(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    """A dense convolution reading NCHW x (the network's input, few channels): per band of output rows, columns
    (C·kh·kw, pixels) gathered straight from the NCHW input (at stride 2, from its two column phases), then one GEMM
    writing channels-last; bands keep the columns in cache (8 MB of them for a 640x480 input,
    gathered whole, cost twice the GEMM)."""
    n, oh, ow, cout = out.shape
    cin = x.shape[1]
    kh, kw = st.kernel
    (sh, sw), (dh, dw) = st.stride, st.dilation
    k = cin * kh * kw
    wk = np.ascontiguousarray(st.weight.reshape(cout, k).T)
    biased = st.bias is not None  # the bias as one more row of weights, times a row of ones: no pass of its own
    if biased:
        wk = np.concatenate([wk, st.bias.astype(np.float32).reshape(1, cout)])
    phased = sw == 2 and dw == 1
    if phased:
        planes, pad_in = _column_phases(x, st.pads, scratch)
    else:
        xp, pad_in = padder(x, st.pads, scratch, role="padc", nchw=True)

    def taps(cols, n0, n1, r0, r1):
        """(destination, source) copies filling a band's columns: one strided copy for every tap at once (at stride
        2, one per column phase), where a copy per (channel, tap) held the GIL 27 times a band."""
        shape = (n1 - n0, r1 - r0, ow)
        if phased:
            ps = planes.strides
            start = n0 * ps[1] + sh * r0 * ps[3]
            return [(cols[:, :, p::2], strided(planes, (p * ps[0] + start) // 4, (cin, kh, (kw - p + 1) // 2, *shape),
                                               (ps[2], dh * ps[3], 4, ps[1], sh * ps[3], 4)))
                    for p in range(min(2, kw))]
        xs = xp.strides
        view = strided(xp, (n0 * xs[0] + sh * r0 * xs[2]) // 4, (cin, kh, kw, *shape),
                       (xs[1], dh * xs[2], dw * xs[3], xs[0], sh * xs[2], sw * xs[3]))
        return [(cols, view)]

    macs = n * oh * ow * k * cout
    pieces = []
    blocks = bands(n, oh, ow * k * 4, STEM_BAND_BYTES, macs)
    for (n0, n1, r0, r1), (lane, sc, c) in zip(blocks, dealt(len(blocks), macs, n * oh * ow * k, scratch, ctx)):
        rows = sc.get("cols", (k + biased, (n1 - n0) * (r1 - r0) * ow))
        cols = rows[:k].reshape(cin, kh, kw, n1 - n0, r1 - r0, ow)
        copies = taps(cols, n0, n1, r0, r1)
        mult = product(rows.T, wk, out[n0:n1, r0:r1].reshape(-1, cout), c)
        ones = rows[k] if biased else None

        def band(copies=copies, mult=mult, ones=ones):
            for dst, src in copies:
                np.copyto(dst, src)
            if ones is not None:
                ones.fill(1.0)  # scratch: other steps write here too
            mult()

        pieces.append((band, lambda arr, n0=n0, n1=n1, r0=r0, r1=r1: arr[n0:n1, r0:r1], lane))
    return pad_in, pieces, biased


def _owner_span(x: np.ndarray, reach: int):
    """(the 1-D array x's memory lies in, x's offset in it) when at least `reach` elements of it lie before and after
    x (the arena's slack), else None."""
    owner = x
    while owner.base is not None:
        owner = owner.base
    if not (isinstance(owner, np.ndarray) and owner.ndim == 1 and owner.dtype == np.float32 and x.flags.c_contiguous):
        return None
    lo = (x.ctypes.data - owner.ctypes.data) // 4
    if lo < reach or owner.size - lo - x.size < reach:
        return None
    return owner, lo


def _depthwise_in_place(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch):
    """3x3, stride 1, one pixel of zero padding, read straight from x with no padded copy: each output row band is
    one einsum over a (3, 3, rows, W·C) view of x whose taps at the row ends wrap into the neighbouring rows (or the
    arena's slack); the two border columns are then recomputed from small zero-ringed copies of x's outer two columns,
    and the top and bottom rows use only the taps inside. None when x has no slack around it or is too small."""
    n, h, w, c = x.shape
    span = _owner_span(x, c)
    if span is None or h < 2 or w < 2:
        return None
    flat, base = span
    row = w * c
    wts = np.ascontiguousarray(st.weight.reshape(c, 3, 3).transpose(1, 2, 0))  # (3, 3, C)
    tiled = np.ascontiguousarray(np.broadcast_to(wts[:, :, None, :], (3, 3, w, c)).reshape(3, 3, row))
    edges = scratch.get("edges", (2, n, h + 2, 3, c))  # left: columns (pad, 0, 1); right: (W-2, W-1, pad)
    fills = [edges[:, :, 0], edges[:, :, h + 1], edges[0, :, :, 0], edges[1, :, :, 2]]
    copies = [(edges[0, :, 1 : h + 1, 1:3], x[:, :, 0:2]), (edges[1, :, 1 : h + 1, 0:2], x[:, :, w - 2 : w])]
    es = edges.strides
    rows = max(1, DEPTHWISE_BAND_BYTES // (row * 4))
    if n == 1:
        rows = lanes.balanced(h, rows, lanes.count(9 * h * row, -(-h // rows), h * row))
    inner = [(0, 1, 1)] + [(r0, min(r0 + rows, h - 1), 0) for r0 in range(1, h - 1, rows)] + [(h - 1, h, 0)]
    blocks = [(i, r0, r1, first_tap) for i in range(n) for r0, r1, first_tap in inner]
    owners = lanes.deal(len(blocks), lanes.count(9 * n * h * row, len(blocks), n * h * row))
    pieces = []
    for (i, r0, r1, first_tap), lane in zip(blocks, owners):
        img = base + i * h * row
        last_tap = 3 if r1 < h else 2  # the bottom row has no row below
        taps = last_tap - first_tap
        start = img + (r0 - 1 + first_tap) * row - c
        view = strided(flat, start, (taps, 3, r1 - r0, row), (row * 4, c * 4, row * 4, 4))
        main = (view, tiled[first_tap:last_tap], out[i, r0:r1].reshape(r1 - r0, row))
        fixes = []
        for side, col in ((0, 0), (1, w - 1)):
            ev = strided(edges, (side * es[0] + i * es[1] + (r0 + first_tap) * es[2]) // 4, (taps, 3, r1 - r0, c),
                         (es[2], es[3], es[2], es[4]))
            fixes.append((ev, wts[first_tap:last_tap], out[i, r0:r1, col]))

        def piece(main=main, fixes=fixes):
            einsum("ijrk,ijk->rk", *main[:2], out=main[2])  # what lies in the slack reaches only the borders
            for ev, wk, dst in fixes:
                einsum("ijrk,ijk->rk", ev, wk, out=dst)

        pieces.append((piece, lambda arr, i=i, r0=r0, r1=r1: arr[i, r0:r1], lane))
    return refill(fills, copies), pieces


def _depthwise_stride2(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch):
    """3x3 at stride 2: the zero-padded input split by column parity (planes[p][n, row, j] = padded[n, row, 2j + p]),
    so each tap's output row is a contiguous run of W·C: one einsum over the even-column taps (kx = 0, 2: plane 0 at
    j and j + 1), one over the odd (kx = 1: plane 1), added; per band of output rows. The generic kernel's inner loop
    runs over one pixel's C channels."""
    n, oh, ow, c = out.shape
    _, h, w, _ = x.shape
    top, left, _, _ = st.pads
    hp, wd = 2 * oh + 1, ow + 1  # rows 2r + ky and plane columns q + kx // 2 of every output
    planes = scratch.get("phases", (2, n, hp, wd, c))
    ring, copies = [], []
    for p in (0, 1):
        first = (p - left) % 2  # x's first column in plane p
        j0 = (first + left) // 2
        count = max(0, min(len(range(first, w, 2)), wd - j0))
        inside = max(0, min(h, hp - top))  # x's rows that some output reads
        plane = planes[p]
        if inside and count:
            copies.append((plane[:, top : top + inside, j0 : j0 + count],
                           x[:, :inside, first : first + 2 * count - 1 : 2]))
        ring += [plane[:, :top], plane[:, top + inside :], plane[:, top : top + inside, :j0],
                 plane[:, top : top + inside, j0 + count :]]
    wts = st.weight.reshape(c, 3, 3).transpose(1, 2, 0)  # (3, 3, C)
    even = np.ascontiguousarray(np.broadcast_to(wts[:, 0::2, None, :], (3, 2, ow, c)).reshape(3, 2, ow * c))
    odd = np.ascontiguousarray(np.broadcast_to(wts[:, 1, None, :], (3, ow, c)).reshape(3, ow * c))
    ps = planes.strides
    rows = max(1, DEPTHWISE_BAND_BYTES // (ow * c * 4))
    if n == 1:
        rows = lanes.balanced(oh, rows, lanes.count(9 * oh * ow * c, -(-oh // rows), oh * ow * c))
    blocks = [(i, r0) for i in range(n) for r0 in range(0, oh, rows)]
    owners = lanes.deal(len(blocks), lanes.count(9 * n * oh * ow * c, len(blocks), n * oh * ow * c))
    pieces = []
    for (i, r0), lane in zip(blocks, owners):
        r = min(rows, oh - r0)
        dst = out[i, r0 : r0 + r].reshape(r, ow * c)
        tmp = scratch.lane(lane).get("dw_odd", (r, ow * c))
        start = i * ps[1] + 2 * r0 * ps[2]
        a = strided(planes, start // 4, (3, 2, r, ow * c), (ps[2], ps[3], 2 * ps[2], 4))
        b = strided(planes, (ps[0] + start) // 4, (3, r, ow * c), (ps[2], 2 * ps[2], 4))

        def piece(a=a, b=b, dst=dst, tmp=tmp):
            einsum("ijrk,ijk->rk", a, even, out=dst)
            einsum("irk,ik->rk", b, odd, out=tmp)
            np.add(dst, tmp, out=dst)

        pieces.append((piece, lambda arr, i=i, r0=r0, r=r: arr[i, r0 : r0 + r], lane))
    return refill(ring, copies), pieces


def depthwise(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    """One group per channel (Cout = Cin): per band of output rows, one einsum over the kernel taps."""
    n, oh, ow, c = out.shape
    kh, kw = st.kernel
    (sh, sw), (dh, dw) = st.stride, st.dilation
    if (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1) and st.pads == (1, 1, 1, 1):
        direct = _depthwise_in_place(st, x, out, scratch)
        if direct is not None:
            return direct
    if (kh, kw, sh, sw, dh, dw) == (3, 3, 2, 2, 1, 1):
        return _depthwise_stride2(st, x, out, scratch)
    xp, pad_in = padder(x, st.pads, scratch)
    rs, cs = xp.strides[1], xp.strides[2]
    w = np.ascontiguousarray(st.weight.reshape(c, kh, kw).transpose(1, 2, 0))  # (kh, kw, C)
    merged = sw == 1
    if merged:  # (W, C) of a row is one axis: the weights tiled along it
        w = np.ascontiguousarray(np.broadcast_to(w[:, :, None, :], (kh, kw, ow, c)).reshape(kh, kw, ow * c))
    rows = max(1, DEPTHWISE_BAND_BYTES // (ow * c * 4))
    if n == 1:
        rows = lanes.balanced(oh, rows, lanes.count(kh * kw * oh * ow * c, -(-oh // rows), oh * ow * c))
    blocks = [(i, r0) for i in range(n) for r0 in range(0, oh, rows)]
    owners = lanes.deal(len(blocks), lanes.count(kh * kw * n * oh * ow * c, len(blocks), n * oh * ow * c))
    pieces = []
    for (i, r0), lane in zip(blocks, owners):
        r = min(rows, oh - r0)
        start = (i * xp.strides[0] + r0 * sh * rs) // 4
        if merged:
            view = strided(xp, start, (kh, kw, r, ow * c), (dh * rs, dw * cs, sh * rs, 4))
            spec, dst = "ijrk,ijk->rk", out[i, r0 : r0 + r].reshape(r, ow * c)
        else:
            view = strided(xp, start, (kh, kw, r, ow, c), (dh * rs, dw * cs, sh * rs, sw * cs, 4))
            spec, dst = "ijrwc,ijc->rwc", out[i, r0 : r0 + r]
        pieces.append((lambda spec=spec, view=view, dst=dst: einsum(spec, view, w, out=dst),
                       lambda arr, i=i, r0=r0, r=r: arr[i, r0 : r0 + r], lane))
    return pad_in, pieces
