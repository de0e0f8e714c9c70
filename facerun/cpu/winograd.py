"""Winograd F(2x2, 3x3) for dense 3x3 convolutions at stride 1 (channels-last): 2.25x fewer multiplies than im2col.

Per block of 2x2 output tiles (sized to stay in cache): the 16 strided 4x4 input patches are gathered, transformed by
one GEMM with kron(Bᵀ, Bᵀ), multiplied by the transformed weights (16 GEMMs of tiles x Cin x Cout, batched), and
transformed back by one GEMM with kron(Aᵀ, Aᵀ); the 2x2 results are scattered to the output, cropped at odd edges.
Error against the direct sum is ~1e-6 relative per layer.
"""

from __future__ import annotations

import numpy as np

from .. import program as P
from . import lanes
from .conv import bands, dealt, product, threaded
from .padding import padder

# Bytes of transformed tiles per block (the largest of the patch, transform and product buffers).
TILE_BLOCK_BYTES = 1 << 20
# Below this many input channels, or this many 2x2 tiles, the transforms (and the weights, 16/9 as large) cost more
# than the multiplies saved: 7x7 maps of one image (16 tiles) are no faster than im2col.
MIN_CHANNELS = 16
MIN_TILES = 32

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
INPUT_TRANSFORM = np.kron(_BT, _BT).astype(np.float32)  # (16, 16): patch (i, j) -> (a, b)
OUTPUT_TRANSFORM = np.kron(_AT, _AT).astype(np.float32)  # (4, 16): (a, b) -> output (p, q)


def suits(st: P.Conv, cin: int, out_shape) -> bool:
    n, _, oh, ow = out_shape
    return (st.groups == 1 and st.kernel == (3, 3) and st.stride == (1, 1) and st.dilation == (1, 1)
            and cin >= MIN_CHANNELS and n * ((oh + 1) // 2) * ((ow + 1) // 2) >= MIN_TILES)


WEIGHT_TRANSFORM = np.kron(_G, _G).astype(np.float32)  # (16, 9): filter (i, j) -> (a, b)


def transformed_weights(weight: np.ndarray) -> np.ndarray:
    """U[(a, b), cin, cout] = (G g Gᵀ)[a, b] for each filter g = weight[cout, cin]: one GEMM with kron(G, G) over
    the filters laid out (cin, cout) (per-filter products took seconds over an IResNet-100's weights)."""
    cout, cin = weight.shape[:2]
    filters = np.ascontiguousarray(weight.transpose(1, 0, 2, 3), dtype=np.float32).reshape(cin * cout, 9)
    return np.matmul(WEIGHT_TRANSFORM, filters.T).reshape(16, cin, cout)


def winograd(st: P.Conv, x: np.ndarray, out: np.ndarray, scratch, ctx):
    n, oh, ow, cout = out.shape
    cin = x.shape[3]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    _, h, w, _ = x.shape
    top, left, bottom, right = st.pads
    # tiles read 2·t + 2 padded rows/columns: zeros past the declared padding for odd output sizes
    extra = (2 * th + 2 - (h + top + bottom), 2 * tw + 2 - (w + left + right))
    xp, pad_in = padder(x, st.pads, scratch, extra=(max(0, extra[0]), max(0, extra[1])))
    u = transformed_weights(st.weight)
    width = max(cin, cout)
    pieces = []
    macs = n * th * tw * 16 * cin * cout
    blocks = bands(n, th, tw * 16 * width * 4, TILE_BLOCK_BYTES, macs)
    dealing = dealt(len(blocks), macs, n * th * tw * 16 * width, scratch, ctx)
    for (n0, n1, t0, t1), (lane, sc, c) in zip(blocks, dealing):
        items, trows = n1 - n0, t1 - t0
        tiles = items * trows * tw
        patches = sc.get("wino_d", (4, 4, items, trows, tw, cin))
        gathers = [(patches[i, j], xp[n0:n1, 2 * t0 + i : 2 * t1 + i : 2, j : j + 2 * tw : 2])
                   for i in range(4) for j in range(4)]
        v = sc.get("wino_v", (16, tiles, cin))
        m = sc.get("wino_m", (16, tiles, cout))
        y = sc.get("wino_y", (2, 2, items, trows, tw, cout))
        scatters = []
        for p in range(2):
            for q in range(2):
                rows = min(trows, (oh - p + 1) // 2 - t0)  # output rows 2t + p that exist
                cols = (ow - q + 1) // 2
                if rows > 0 and cols > 0:
                    scatters.append((out[n0:n1, 2 * t0 + p : 2 * (t0 + rows) + p - 1 : 2, q : 2 * cols + q - 1 : 2],
                                     y[p, q, :, :rows, :cols]))
        mults = _products(patches.reshape(16, -1), v, m, y.reshape(4, -1), u, c)
        block = (gathers, mults, scatters)
        last_row = min(oh, 2 * t1)
        pieces.append((lambda block=block: _block(block),
                       lambda arr, n0=n0, n1=n1, r0=2 * t0, r1=last_row: arr[n0:n1, r0:r1], lane))
    return pad_in, pieces


def _products(d, v, m, y, u, ctx) -> list:
    """The block's three products: the input transform, the 16 (tiles x Cin) x (Cin x Cout) products and the output
    transform, each as conv.threaded runs one (the 16 split into groups when they go over the lanes)."""
    first = product(INPUT_TRANSFORM, d, v.reshape(16, -1), ctx)
    last = product(OUTPUT_TRANSFORM, m.reshape(16, -1), y, ctx)
    macs = v.shape[1] * v.shape[2] * m.shape[2] * 16
    count = 1 if ctx is lanes.ONE or macs < lanes.SPLIT_MACS else min(16, lanes.available())
    cuts = [(16 * k // count, 16 * (k + 1) // count) for k in range(count)]
    pieces = [lambda a=a, b=b: np.matmul(v[a:b], u[a:b], out=m[a:b]) for a, b in cuts] if count > 1 else None
    return [first, threaded(lambda: np.matmul(v, u, out=m), macs, ctx, pieces), last]


def _block(block):
    gathers, mults, scatters = block
    for dst, src in gathers:
        np.copyto(dst, src)
    for mult in mults:
        mult()
    for dst, src in scatters:
        np.copyto(dst, src)
