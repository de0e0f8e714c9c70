"""How each step runs on the GPU: kernel, tile, K split and workgroup grid, as pure functions of shapes and limits.

Nothing here touches wgpu, so the choices are unit-tested without a GPU. A convolution is an implicit GEMM:
out[co, n] = sum_k W[co, k] * X[k, n] per group, with M = output channels per group, N = batch * OH * OW (the batch
folded in, so a batch of 16 faces makes one large GEMM) and K = input channels per group * kh * kw.
"""

from __future__ import annotations

from dataclasses import dataclass

# Threads of the one-thread-per-value kernels (elementwise, copy, pools, direct convolution, reduce).
FLAT = 256
# Fewest workgroups a convolution should make to keep a large GPU busy; below it the K range is split.
TARGET_WORKGROUPS = 264  # about two per multiprocessor on the largest GPUs (132 SMs on an H100/H200)
# A split must keep at least this many K steps, or the reduce pass costs more than it saves.
MIN_K_PER_SPLIT = 128
# Most dimensions an indexed kernel (copy, broadcasting binary, matmul batch) takes, after merging.
MAX_DIMS = 6


class PlanError(Exception):
    """A step this device cannot run (a binding or grid beyond its limits): the program falls back to the CPU."""


@dataclass(frozen=True)
class Limits:
    """The device limits the plans depend on."""

    max_workgroups_per_dim: int = 65535
    max_binding: int = 128 << 20  # bytes, min(max storage buffer binding size, max buffer size)
    max_invocations: int = 256
    max_workgroup_storage: int = 16384


@dataclass(frozen=True)
class Tile:
    """A workgroup's output tile: bm output channels x bn output positions, each thread a tm x tn register block,
    K in steps of bk. tm and tn are multiples of 4 (vec4 registers)."""

    bm: int
    bn: int
    tm: int
    tn: int
    bk: int = 16

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * 4

    @property
    def name(self) -> str:
        return f"{self.bm}x{self.bn}/{self.tm}x{self.tn}"


# The tiles the tiled kernel is built for, largest first. Every one has threads % bn == 0 (the im2col loader's
# layout) and at most 256 threads.
TILES = {
    "128x128": Tile(128, 128, 8, 8),
    "128x64": Tile(128, 64, 8, 4),
    "64x128": Tile(64, 128, 4, 8),
    "64x64": Tile(64, 64, 4, 4),
    "32x128": Tile(32, 128, 4, 4),
    "32x64": Tile(32, 64, 4, 4),
    "16x128": Tile(16, 128, 4, 4),
    "16x64": Tile(16, 64, 4, 4),
}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def grid(count: int, limits: Limits) -> tuple[int, int, int]:
    """Fold `count` workgroups into an (x, y) grid within the per-dimension limit; returns (x, y, row) where the
    kernel reads its linear index as y * row + x and skips indices >= count."""
    count = max(1, count)
    most = limits.max_workgroups_per_dim
    row = min(count, most)
    rows = ceil_div(count, row)
    if rows > most:
        raise PlanError(f"{count} workgroups exceed the device's grid ({most} x {most})")
    return row, rows, row


def flat_grid(values: int, limits: Limits, per_group: int = FLAT) -> tuple[int, int, int]:
    """The grid of a one-thread-per-value kernel over `values` values."""
    return grid(ceil_div(max(1, values), per_group), limits)


# ------------------------------------------------------------------------------------------------ convolutions


@dataclass(frozen=True)
class ConvShape:
    batch: int
    cin: int
    h: int
    w: int
    cout: int
    oh: int
    ow: int
    groups: int = 1
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right

    @property
    def m(self) -> int:
        return self.cout // self.groups

    @property
    def cg(self) -> int:
        return self.cin // self.groups

    @property
    def n(self) -> int:
        return self.batch * self.oh * self.ow

    @property
    def k(self) -> int:
        return self.cg * self.kernel[0] * self.kernel[1]

    @property
    def pointwise(self) -> bool:
        """A 1x1 convolution reading every input position once: its im2col matrix is the input itself."""
        return self.kernel == (1, 1) and self.stride == (1, 1) and self.pads == (0, 0, 0, 0) and (self.oh, self.ow) == (self.h, self.w)


@dataclass(frozen=True)
class ConvPlan:
    kernel: str  # "tiled" | "direct"
    tile: Tile | None
    splits: int  # K slices run side by side, summed by a second (reduce) pass when > 1
    k_chunk: int  # K per slice, a multiple of the tile's bk
    kpad: int  # K rounded up to bk: rows of the packed weights (zero padded)
    mpad: int  # M rounded up to bm: columns of the packed weights
    tiles_m: int
    tiles_n: int
    grid: tuple[int, int, int]  # the main dispatch: x, y, row
    reduce_grid: tuple[int, int, int] | None

    @property
    def workgroups(self) -> int:
        if self.tile is None:
            return self.grid[0] * self.grid[1]
        return self.tiles_m * self.tiles_n * self.splits

    def describe(self) -> str:
        if self.kernel == "direct":
            return "direct"
        s = f"tiled {self.tile.name}"
        return s + (f" split-K {self.splits}x{self.k_chunk}" if self.splits > 1 else "")


def choose_tile(m: int, n: int, limits: Limits) -> Tile:
    """The tile for an M x N GEMM: as large as M allows (less padding waste), narrower in N when N is small."""
    if m >= 96:
        bm = 128
    elif m >= 48:
        bm = 64
    elif m >= 24:
        bm = 32
    else:
        bm = 16
    bn = 128 if n > 96 else 64
    tile = TILES[f"{bm}x{bn}"]
    if fits(tile, limits):
        return tile
    # a device with fewer than 256 invocations or less than 16 KiB of workgroup memory gets the largest tile it takes
    for t in TILES.values():
        if fits(t, limits):
            return t
    raise PlanError("the device's workgroups are too small for the convolution kernel")


def fits(tile: Tile, limits: Limits) -> bool:
    return tile.threads <= limits.max_invocations and tile.shared_bytes <= limits.max_workgroup_storage


def plan_conv(s: ConvShape, limits: Limits = Limits(), force_splits: int | None = None, force_tile: str | None = None) -> ConvPlan:
    """Kernel, tile, split and grid for one convolution. `force_splits`/`force_tile` are for tests and tuning."""
    m, n, k, g = s.m, s.n, s.k, s.groups
    in_bytes = s.batch * s.cin * s.h * s.w * 4
    out_values = s.batch * s.cout * s.oh * s.ow
    if max(in_bytes, out_values * 4, s.cout * k * 4) > limits.max_binding:
        raise PlanError(f"a convolution of {max(in_bytes, out_values * 4) >> 20} MiB exceeds the device's binding size")
    # Few output channels per group (depthwise, or a 1-4 channel head): one thread per output value, looping over K.
    if m < 8 and force_tile is None:
        return ConvPlan("direct", None, 1, k, k, m, 0, 0, flat_grid(out_values, limits), None)
    tile = TILES[force_tile] if force_tile else choose_tile(m, n, limits)
    kpad = ceil_div(k, tile.bk) * tile.bk
    mpad = ceil_div(m, tile.bm) * tile.bm
    if g * kpad * mpad * 4 > limits.max_binding:
        raise PlanError("a convolution's packed weights exceed the device's binding size")
    tiles_m, tiles_n = mpad // tile.bm, ceil_div(n, tile.bn)
    tiles = tiles_m * tiles_n * g
    if force_splits is not None:
        splits = max(1, min(force_splits, ceil_div(k, tile.bk)))
    elif tiles >= TARGET_WORKGROUPS:
        splits = 1
    else:
        splits = max(1, min(TARGET_WORKGROUPS // tiles, k // MIN_K_PER_SPLIT))
    # each slice must fit the partial-sums buffer
    while splits > 1 and splits * out_values * 4 > limits.max_binding:
        splits -= 1
    k_chunk = ceil_div(ceil_div(k, splits), tile.bk) * tile.bk
    splits = ceil_div(k, k_chunk)
    main = grid(tiles * splits, limits)
    reduce = flat_grid(out_values, limits) if splits > 1 else None
    return ConvPlan("tiled", tile, splits, k_chunk, kpad, mpad, tiles_m, tiles_n, main, reduce)


# ------------------------------------------------------------------------------------------------- gemm / gemv


@dataclass(frozen=True)
class GemmPlan:
    kernel: str  # "gemv" (few rows: the weights are read once per block of rows) or "tiled" (a 1x1 convolution)
    rows_per_group: int  # gemv: rows of x each workgroup handles
    vec4: bool  # gemv: K is a multiple of 4, so rows load as vec4
    conv: ConvPlan | None
    grid: tuple[int, int, int]


GEMV_ROWS = 8  # rows of x per gemv workgroup: the weights are streamed once per 8 rows
GEMV_THREADS = 128


def plan_gemm(m: int, k: int, n: int, limits: Limits = Limits()) -> GemmPlan:
    """out (M, N) = x (M, K) @ W (N, K)^T. Few rows: a gemv that streams W (memory bound anyway); many: the tiled
    kernel, seeing x as a batch of M 1x1 images of K channels."""
    if max(m * k, n * k, m * n) * 4 > limits.max_binding:
        raise PlanError("a fully connected layer exceeds the device's binding size")
    if m <= 32:
        blocks = ceil_div(m, GEMV_ROWS)
        return GemmPlan("gemv", GEMV_ROWS, k % 4 == 0, None, grid(n * blocks, limits))
    conv = plan_conv(ConvShape(batch=m, cin=k, h=1, w=1, cout=n, oh=1, ow=1), limits)
    return GemmPlan("tiled", 0, False, conv, conv.grid)


# ------------------------------------------------------------------------------------------- indexed kernels


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def broadcast_strides(out_shape, shape) -> tuple[int, ...]:
    """Element strides of an operand of `shape` read at every index of `out_shape` (numpy broadcasting: 0 where the
    operand's dimension is 1 or missing)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    own = contiguous_strides(shape)
    out = []
    for o, d, st in zip(out_shape, shape, own):
        if d == o:
            out.append(st if d != 1 else 0)
        elif d == 1:
            out.append(0)
        else:
            raise PlanError(f"shapes {tuple(shape)} and {tuple(out_shape)} do not broadcast")
    return tuple(out)


def merge_dims(shape, *strides) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dimensions and merge neighbours that are contiguous for every operand, so most indexed steps
    become 1-3 dimensional. Returns (shape, strides per operand)."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for d, st in dims:
        if merged:
            pd, pst = merged[-1]
            if all(p == q * d for p, q in zip(pst, st)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    if not merged:
        merged = [(1, [0] * len(strides))]
    return tuple(d for d, _ in merged), tuple(tuple(st[i] for _, st in merged) for i in range(len(strides)))


def padded(dims, fill: int, n: int = MAX_DIMS) -> list[int]:
    """`dims` left-padded to n entries (leading dimensions of size 1 / stride 0)."""
    dims = list(dims)
    if len(dims) > n:
        raise PlanError(f"a {len(dims)}-dimensional index exceeds the kernels' {n}")
    return [fill] * (n - len(dims)) + dims
