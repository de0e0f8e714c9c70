"""A 1x1 convolution and the 3x3 depthwise convolution that reads it, band by band (x and out channels-last).

The 1x1 product's rows are made a band at a time into a small buffer (with its epilogue), the depthwise einsum
reads them there while they are in cache, and the 1x1 result never reaches memory: two of the four passes over a
large tensor go. The buffer rolls: a band's last two rows of 1x1 output are the next band's first two (no product is
made twice). Its rows wrap into one pixel of slack either side, as in conv._depthwise_in_place; the two border
columns are recomputed from their two in-image taps (one einsum for both).

A 1x1 bias with no activation after it moves past the depthwise step, which saves a pass: dw(y + b) = dw(y) + b·Σw
inside, and the rows outside the image hold -b instead of 0 so that the border pixels, which see fewer taps, get the
same sum; the border columns' fix subtracts b times the weights of the column of taps it leaves out.

Bands may be dealt out to lanes (lanes.py): each lane rolls its own buffer, and a lane's first band makes the 1x1 row
above it too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import program as P
from . import lanes
from .conv import einsum, epilogue, product, strided, weights_k_major

# Bytes of depthwise output per band. Measured on YuNet 640x480 (one thread, 512 KB L2): 768 KB beat 192-384 KB
# bands (each band costs ~10 numpy calls) and whole tensors (the 1x1 rows leave the cache).
BAND_BYTES = 768 << 10


def suits(pw: P.Conv, dw: P.Conv, shape) -> bool:
    """Whether 1x1 `pw` (its output (N, C, H, W) = `shape`) and 3x3 depthwise `dw` over it fuse."""
    _, c, h, w = shape
    return (pw.groups == 1 and pw.kernel == (1, 1) and pw.stride == (1, 1) and not any(pw.pads)
            and pw.residual is None and dw.groups == c and dw.weight.shape[:2] == (c, 1)  # one channel: dense too
            and dw.kernel == (3, 3) and dw.stride == (1, 1) and dw.dilation == (1, 1) and dw.pads == (1, 1, 1, 1)
            and w >= 2)


def _move_bias(pw: P.Conv, dw: P.Conv):
    """(pw, dw, shift): a bias-only 1x1's bias moved into the depthwise step's (see above), or the steps as they are
    and None."""
    if pw.act is not None or pw.bias is None:
        return pw, dw, None
    shift = pw.bias.astype(np.float32)
    moved = shift * dw.weight.reshape(-1, 9).sum(axis=1, dtype=np.float32)
    dw = dataclasses.replace(dw, bias=moved if dw.bias is None else dw.bias + moved)
    return dataclasses.replace(pw, bias=None), dw, shift


def pointwise_depthwise(pw: P.Conv, dw: P.Conv):
    """(the depthwise step whose epilogue conv.fused applies, a kernel builder for it) for depthwise `dw` over
    `pw`'s output, the builder reading `pw`'s input."""
    pw, dw, shift = _move_bias(pw, dw)

    def build(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
        pieces = _build(pw, st, shift, x, out.shape, lambda i, r0, r1, lane: out[i, r0:r1], scratch, ctx)
        return None, [(fn, lambda arr, i=i, r0=r0, r1=r1: arr[i, r0:r1], lane) for fn, i, r0, r1, lane in pieces]

    return dw, build


def pooled(pw: P.Conv, dw: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    """The pair, then 2x2/2 max pooling (`out`: its NHWC result) of each band of depthwise output as soon as it is
    made: the depthwise output lives in a band-sized buffer, never in memory."""
    pw, dw, shift = _move_bias(pw, dw)
    n, h, w, _ = x.shape
    c = dw.weight.shape[0]
    oh, ow = out.shape[1:3]
    limit = max(2, BAND_BYTES // (w * c * 4)) // 2 * 2  # bands of whole row pairs

    def band(i, r0, r1, lane):
        return scratch.lane(lane).get("dwband", (min(h, limit), w, c))[: r1 - r0]

    pieces = _build(pw, dw, shift, x, (n, h, w, c), band, scratch, ctx, limit)
    # bias and a non-decreasing activation commute with the max (fl(a + b) is monotonic in a): after pooling they
    # touch a quarter of the values
    late = dw.act is None or dw.act.kind == "relu"
    tiles: dict = {}
    by_lane: dict[int, list] = {}
    for fn, i, r0, r1, lane in pieces:
        made = band(i, r0, r1, lane)
        pairs = (r1 - r0) // 2 if r1 < h else oh - r0 // 2  # an odd last row is not pooled
        rows = scratch.lane(lane).get("pwdw_pool", (pairs, w, c))
        dst = out[i, r0 // 2 : r0 // 2 + pairs]
        pool = (rows, made[0 : 2 * pairs : 2], made[1 : 2 * pairs : 2], rows[:, 0 : 2 * ow : 2],
                rows[:, 1 : 2 * ow : 2], dst)
        tail = epilogue(dw, dst if late else made, None, scratch.lane(lane), tiles)
        by_lane.setdefault(lane, []).append((fn, None if late else tail, pool, tail if late else None))

    def lane_run(steps):
        def run():
            for fn, early, (rows, top, bottom, left, right, dst), after in steps:
                fn()
                if early is not None:
                    early()
                np.maximum(top, bottom, out=rows)
                np.maximum(left, right, out=dst)
                if after is not None:
                    after()

        return run

    return lanes.runner([lane_run(steps) for _, steps in sorted(by_lane.items())], ctx)


def _build(pw: P.Conv, st: P.Conv, shift, x: np.ndarray, shape, target, scratch, ctx, limit: int | None = None):
    """[(piece, image, first row, end row, lane)]: each piece makes depthwise rows [r0, r1) of image i into
    target(i, r0, r1, lane), before any epilogue of the depthwise step."""
    n, h, w, c = shape
    cin = x.shape[3]
    row = w * c
    wk = weights_k_major(pw.weight.reshape(c, cin))
    wts = np.ascontiguousarray(st.weight.reshape(c, 3, 3).transpose(1, 2, 0))  # (3, 3, C)
    tiled = np.ascontiguousarray(np.broadcast_to(wts[:, :, None, :], (3, 3, w, c)).reshape(3, 3, row))
    sides = np.ascontiguousarray(np.stack([wts[:, 1:], wts[:, :2]]))  # (2, 3, 2, C): left, right border columns
    outside = np.zeros(row, np.float32) if shift is None else np.tile(-shift, w)
    # what the left and right border columns leave out of the moved bias: -shift·Σ of a column of taps
    fixup = None if shift is None else np.stack([-shift * wts[:, 0].sum(0), -shift * wts[:, 2].sum(0)])
    rows = max(1, min(h, limit or BAND_BYTES // (row * 4)))
    macs = n * h * w * cin * c
    work = macs + 9 * n * h * row
    values = n * h * row
    per_image = -(-lanes.count(work, n * h // 2, values) // n)  # lanes an image's bands are dealt to
    rows = lanes.balanced(h, rows, per_image, 2 if limit else 1)  # pooled bands hold whole row pairs
    blocks = [(i, r0) for i in range(n) for r0 in range(0, h, rows)]
    count = lanes.count(work, len(blocks), values)
    owners = lanes.deal(len(blocks), count)
    run_ctx = ctx if count == 1 else lanes.ONE
    tiles: dict = {}
    pieces = []
    for j, ((i, r0), lane) in enumerate(zip(blocks, owners)):
        flat = scratch.lane(lane).get("pwdw", ((rows + 2) * row + 2 * c,))
        mid = flat[c : c + (rows + 2) * row].reshape(rows + 2, w, c)  # mid[m]: 1x1 output row r0 - 1 + m
        r1 = min(h, r0 + rows)
        r = r1 - r0
        first = r0 == 0
        fresh = first or owners[j - 1] != lane  # a lane's first band: nothing rolls over from a band before
        m0 = 1 if first else 0 if fresh else 2  # mid rows made here: 1x1 rows r0 - 1 + m0 .. min(r1, h - 1)
        a0, a1 = r0 - 1 + m0, min(r1 + 1, h)
        m1 = m0 + a1 - a0
        new = mid[m0:m1]
        make = product(x[i, a0:a1].reshape(-1, cin), wk, new.reshape(-1, c), run_ctx)
        tail = epilogue(pw, new, None, scratch.lane(lane), tiles)
        band = target(i, r0, r1, lane)
        main = (strided(flat, 0, (3, 3, r, row), (row * 4, c * 4, row * 4, 4)), tiled, band.reshape(r, row))
        edge = strided(flat, c, (2, 3, 2, r, c), ((w - 2) * c * 4, row * 4, c * 4, row * 4, 4))
        edge_out = as_strided(band, (2, r, c), ((w - 1) * c * 4, row * 4, 4))  # columns 0 and W-1
        blank = ([mid[0]] if first else []) + ([mid[r + 1]] if r1 == h else [])
        keep = None if fresh else (mid[0:2], mid[rows : rows + 2])
        fix = None if fixup is None else (edge_out, fixup[:, None, :])

        def piece(make=make, tail=tail, main=main, edge=edge, edge_out=edge_out, blank=blank, keep=keep, fix=fix):
            if keep is not None:
                np.copyto(*keep)  # the last band's last two 1x1 rows: this band's first two
            make()
            if tail is not None:
                tail()
            for b in blank:
                np.copyto(b.reshape(-1), outside)
            einsum("ijrk,ijk->rk", *main[:2], out=main[2])  # what lies in the slack reaches only the borders
            einsum("sijrk,sijk->srk", edge, sides, out=edge_out)
            if fix is not None:
                np.add(*fix, out=fix[0])

        pieces.append((piece, i, r0, r1, lane))
    return pieces
