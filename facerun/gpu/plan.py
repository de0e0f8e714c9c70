"""How each step runs on the GPU: kernel, tile, K split and workgroup grid, as pure functions of shapes and limits.

Nothing here touches wgpu, so the choices are unit-tested without a GPU. A convolution is an implicit GEMM:
out[co, n] = sum_k W[co, k] * X[k, n] per group, with M = output channels per group, N = batch * OH * OW (the batch
folded in, so a batch of 16 faces makes one large GEMM) and K = input channels per group * kh * kw.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

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
    ku: int = 1  # K steps unrolled per pass of the inner loop (1: the loop is left to the shader compiler)

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * 4

    @property
    def name(self) -> str:
        extra = (f"/k{self.bk}" if self.bk != 16 else "") + (f"/u{self.ku}" if self.ku != 1 else "")
        return f"{self.bm}x{self.bn}/{self.tm}x{self.tn}{extra}"

    @staticmethod
    def parse(spec: str) -> Tile:
        """A tile from a name in TILES ("128x64") or a full spec ("128x128/8x8/k16/u4")."""
        if spec in TILES:
            return TILES[spec]
        try:
            parts = spec.split("/")
            bm, bn = (int(v) for v in parts[0].split("x"))
            tm, tn = (int(v) for v in parts[1].split("x"))
            opts = {p[0]: int(p[1:]) for p in parts[2:]}
            tile = Tile(bm, bn, tm, tn, opts.get("k", 16), opts.get("u", 1))
        except (ValueError, IndexError):
            raise PlanError(f"not a tile: {spec}") from None
        ok = (bm % tm == 0 and bn % tn == 0 and tm % 4 == 0 and tn % 4 == 0 and tile.threads % bn == 0
              and tile.bk % (tile.threads // bn) == 0 and tile.bk % tile.ku == 0)
        if not ok:
            raise PlanError(f"tile {spec} does not fit the kernel's layout")
        return tile


# The tiles the tiled kernel is built for, in order of preference (measured: 128x64 beats 128x128 whenever both
# make enough workgroups). Every one has threads % bn == 0 (the im2col loader's layout) and at most
# 256 threads and 16 KiB of shared memory. K unrolling (ku), measured too: 4-8 for the 8-wide blocks, the whole BK
# step for the 4x4 ones.
TILES = {
    "128x64": Tile(128, 64, 8, 4, ku=8),
    "128x128": Tile(128, 128, 8, 8, ku=4),
    "64x128": Tile(64, 128, 4, 8, ku=4),
    "64x64": Tile(64, 64, 4, 4, ku=16),
    "32x128": Tile(32, 128, 4, 4, ku=16),
    "32x64": Tile(32, 64, 4, 4, ku=16),
    "16x128": Tile(16, 128, 4, 4, ku=16),
    "16x64": Tile(16, 64, 4, 4, ku=16),
    # narrow: only for N of at most NARROW_N (a 14x14 map of one image in 4x4 Winograd tiles has N = 16)
    "128x32": Tile(128, 32, 8, 4, ku=8),
    "64x32": Tile(64, 32, 4, 4, ku=16),
    "32x32": Tile(32, 32, 4, 4, ku=16),
}
NARROW_N = 48
# Below this much K a convolution with few output channels per group runs on the direct kernel (depthwise 3x3 has
# K = 9); above it the tiled kernel is faster even with most of its 16 rows unused (a 64-to-1 head: 5x).
DIRECT_MAX_K = 32
# K at which a layer with too few tiles is split rather than given smaller tiles (measured on IResNet-100's layers).
SPLIT_MIN_K = 512


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


@dataclass(frozen=True, slots=True)  # slots: made for every convolution of every new input size, a third faster
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
        same = (self.oh, self.ow) == (self.h, self.w)
        return self.kernel == (1, 1) and self.stride == (1, 1) and self.pads == (0, 0, 0, 0) and same


@dataclass(frozen=True, slots=True)
class ConvPlan:
    """Everything that decides how a convolution runs: the lowering turns it into dispatches without choosing."""

    kernel: str  # "tiled" | "direct" | "depthwise"
    tile: Tile | None
    splits: int  # K slices run side by side, summed by a second (reduce) pass when > 1
    k_chunk: int  # K per slice, a multiple of the tile's bk
    kpad: int  # K rounded up to bk: rows of the packed weights (zero padded)
    mpad: int  # M rounded up to bm: columns of the packed weights
    tiles_m: int
    tiles_n: int
    grid: tuple[int, int, int]  # the main dispatch: x, y, row
    reduce_grid: tuple[int, int, int] | None
    groups: int = 1
    pointwise: bool = False  # tiled: the im2col matrix is the input itself (no tap table)
    threads: int = 0  # direct / depthwise: threads of the main dispatch (one per output, or per four of a row)

    @property
    def partial(self) -> bool:
        """Whether the tiled pass writes partial sums for a reduce pass (split K)."""
        return self.splits > 1

    @property
    def workgroups(self) -> int:
        if self.tile is None:
            return self.grid[0] * self.grid[1]
        return self.tiles_m * self.tiles_n * self.splits * self.groups

    def describe(self) -> str:
        if self.tile is None:
            return self.kernel
        s = f"tiled {self.tile.name}"
        return s + (f" split-K {self.splits}x{self.k_chunk}" if self.splits > 1 else "")


def tile_candidates(m: int, n: int, limits: Limits) -> tuple[list[Tile], list[Tile]]:
    """The tiles worth trying for an M x N GEMM, largest first: (efficient ones: as tall as M allows or half that;
    all: any height up to that). None is wider than 64 when N is small; all fit the device's workgroups."""
    bm_max = 128 if m >= 96 else 64 if m >= 48 else 32 if m >= 24 else 16
    bn_max = 128 if n > 96 else 64 if n > NARROW_N else 32
    return _candidates(bm_max, bn_max, limits)


@cache  # planned for every convolution of every new input size: a handful of distinct answers
def _candidates(bm_max: int, bn_max: int, limits: Limits) -> tuple[tuple[Tile, ...], tuple[Tile, ...]]:
    usable = [t for t in TILES.values() if t.bn <= bn_max and (t.bn >= 64) == (bn_max >= 64) and fits(t, limits)]
    usable = usable or [t for t in TILES.values() if fits(t, limits)]
    if not usable:
        raise PlanError("the device's workgroups are too small for the convolution kernel")
    every = [t for t in usable if t.bm <= bm_max] or usable[-1:]
    big = [t for t in every if t.bm * 2 >= bm_max] or every[:1]
    return tuple(big), tuple(every)


def choose_tile(m: int, n: int, k: int, groups: int, limits: Limits) -> tuple[Tile, bool]:
    """(tile, whether K may be split). Measured (IResNet-100 at batch 16, YuNet at 640x640): the largest
    efficient tile that still makes TARGET_WORKGROUPS workgroups wins; failing that, a long K is split (on the
    largest tile), and a short one gets a smaller tile that makes enough workgroups, or the most (the small layers
    of a detector), split where its K allows."""
    big, every = tile_candidates(m, n, limits)

    def tiles(t: Tile) -> int:
        return ceil_div(m, t.bm) * ceil_div(n, t.bn) * groups

    for t in big:
        if tiles(t) >= TARGET_WORKGROUPS:
            return t, False
    if k >= SPLIT_MIN_K:  # the largest block, split
        return max(big, key=lambda t: t.bm * t.bn), True
    if k >= 2 * MIN_K_PER_SPLIT:  # some splitting is possible: the efficient tile making the most workgroups
        return max(big, key=tiles), True
    for t in every:
        if tiles(t) >= TARGET_WORKGROUPS:
            return t, False
    return max(every, key=tiles), False


def fits(tile: Tile, limits: Limits) -> bool:
    return tile.threads <= limits.max_invocations and tile.shared_bytes <= limits.max_workgroup_storage


@lru_cache(maxsize=8192)  # a pure function, asked again for every layer of every new input size
def plan_conv(s: ConvShape, limits: Limits = Limits(), force_splits: int | None = None,
              force_tile: str | None = None, force_winograd: bool | int | None = None) -> ConvPlan | WinogradPlan:
    """Kernel, tile, split and grid for one convolution. `force_splits`/`force_tile` (tests, tuning, the GPU check)
    fix the tiled kernel's; `force_winograd` True takes Winograd wherever the shape suits it (in the form
    `winograd_form` picks), 2 or 4 takes it in that form (F(2x2, 3x3) or F(4x4, 3x3)), False never, None (the
    default) where it wins, unless a tile or split is forced (those are im2col's, unless it is True too)."""
    if force_winograd is None:
        force_winograd = None if force_tile is None and force_splits is None else False
    if force_winograd is not False and winograd_suits(s) and (force_winograd or winograd_wins(s)):
        form = force_winograd if type(force_winograd) is int else winograd_form(s)
        if form not in (2, 4):
            raise PlanError(f"Winograd F({form}x{form}, 3x3) is not built (2 and 4 are)")
        try:
            return plan_winograd(s, limits, force_splits, force_tile, form)
        except PlanError:
            pass  # the transformed planes exceed a binding: im2col
    m, n, k, g = s.m, s.n, s.k, s.groups
    in_bytes = s.batch * s.cin * s.h * s.w * 4
    out_values = s.batch * s.cout * s.oh * s.ow
    if max(in_bytes, out_values * 4, s.cout * k * 4) > limits.max_binding:
        raise PlanError(f"a convolution of {max(in_bytes, out_values * 4) >> 20} MiB exceeds the device's binding size")
    # Few output channels per group and a short K (depthwise, small heads): one thread per output value.
    if m < 8 and k <= DIRECT_MAX_K and force_tile is None:
        if s.cg == 1:  # depthwise: four outputs of a row per thread
            quads = s.batch * s.cout * s.oh * ceil_div(s.ow, 4)
            return ConvPlan("depthwise", None, 1, k, k, m, 0, 0, flat_grid(quads, limits), None, g, threads=quads)
        return ConvPlan("direct", None, 1, k, k, m, 0, 0, flat_grid(out_values, limits), None, g, threads=out_values)
    if force_tile:
        tile, may_split = Tile.parse(force_tile), True
    else:
        tile, may_split = choose_tile(m, n, k, g, limits)
    if not fits(tile, limits):
        raise PlanError(f"tile {tile.name} exceeds the device's workgroup limits")
    kpad = ceil_div(k, tile.bk) * tile.bk
    mpad = ceil_div(m, tile.bm) * tile.bm
    if g * kpad * mpad * 4 > limits.max_binding:
        raise PlanError("a convolution's packed weights exceed the device's binding size")
    tiles_m, tiles_n = mpad // tile.bm, ceil_div(n, tile.bn)
    tiles = tiles_m * tiles_n * g
    if force_splits is not None:
        splits = max(1, min(force_splits, ceil_div(k, tile.bk)))
    elif tiles >= TARGET_WORKGROUPS or not may_split:
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
    return ConvPlan("tiled", tile, splits, k_chunk, kpad, mpad, tiles_m, tiles_n, main, reduce, g, s.pointwise)


# --------------------------------------------------------------------------------------------------- winograd

# Winograd on the GPU: a 3x3 convolution at stride 1 as an input transform (each (m+2)x(m+2) patch to as many values),
# (m+2)² products of M = output channels, K = input channels, N = mxm tiles (the tiled kernel's pointwise form, one
# group per transformed position) and an output transform with the epilogue. F(2x2, 3x3) (m = 2) makes 2.25x fewer
# multiplies than im2col, at the cost of writing and reading 16 transformed planes of the input (4x its size) and of
# the products (4x the output's); F(4x4, 3x3) (m = 4) makes 4x fewer, with 36 planes of 2.25x the input's size, and
# crops more at edges that are not a multiple of 4.
# Measured (`facerun tune --json` over the 3x3 stride-1 layers of the AuraFace replica and three detectors, whole
# programs confirming it; the figures: docs/bench/code-figures.md): Winograd won on every layer with 16 or more input
# channels, down to a 7x7 map of one image, and lost on a stem of 3. The rule depends on neither the batch nor the
# input size, so a model's programs share one set of transformed weights: with a batch-dependent rule, im2col's set
# (batch 1) and Winograd's (batch 16) together exceed the resident-weight budget, and large batches ran far slower.
WINOGRAD_MIN_CHANNELS = 16
# F(4x4, 3x3) where its products have at least this many tiles (N per plane) and the layer this many input channels;
# F(2x2, 3x3) elsewhere. Measured in whole runs (docs/bench/code-figures.md): on the AuraFace replica the rule is as
# fast as F(4x4) on every large map at batch 16 and faster than F(2x2) everywhere from batch 4 on, and F(4x4) on every
# map loses at one image (its products then have 16 tiles a plane, and the GEMM's columns go to waste); the
# detectors at 640x640 are even either way (F(4x4) everywhere is slower: their layers have few channels and the
# transforms cost more than the products save). A batch-dependent rule: a model's
# programs then hold both sets of transformed weights (F(4x4)'s are 36/9 of the 3x3 weights), which is why the
# resident-weight budget is 1536 MiB (memory.DEFAULT_BUDGET_MB).
WINOGRAD4_MIN_TILES = 256
WINOGRAD4_MIN_CHANNELS = 64


@dataclass(frozen=True, slots=True)
class WinogradPlan:
    """A 3x3 stride-1 convolution as Winograd F(mxm, 3x3): the transforms' grids and the products' tiled plan."""

    gemm: ConvPlan  # the (m+2)² products, as a grouped pointwise convolution (groups (m+2)², N = tiles)
    th: int  # mxm tiles per column and per row of the output
    tw: int
    tiles: int  # batch * th * tw
    input_grid: tuple[int, int, int]  # one thread per (input channel, tile)
    output_grid: tuple[int, int, int]  # one thread per (output channel, tile)
    m: int = 2  # the output tile's side: F(2x2, 3x3) or F(4x4, 3x3)
    kernel: str = "winograd"

    @property
    def planes(self) -> int:
        """Transformed positions per tile: (m+2)², the products' groups."""
        return (self.m + 2) ** 2

    @property
    def tile(self) -> Tile | None:  # what a check forces, with `splits`, to run the same products on a small layer
        return self.gemm.tile

    @property
    def splits(self) -> int:
        return self.gemm.splits

    def describe(self) -> str:
        return f"winograd F({self.m}x{self.m},3x3) + " + self.gemm.describe()


def winograd_suits(s: ConvShape) -> bool:
    """Whether the shape is one Winograd computes (not whether it is faster)."""
    return (s.kernel == (3, 3) and s.stride == (1, 1) and s.dilation == (1, 1) and s.groups == 1
            and s.oh >= 2 and s.ow >= 2)


def winograd_wins(s: ConvShape) -> bool:
    """Whether Winograd beats im2col for a shape that suits it (measured on an H200: see WINOGRAD_MIN_CHANNELS)."""
    return s.cin >= WINOGRAD_MIN_CHANNELS


def winograd_form(s: ConvShape) -> int:
    """The output tile's side a Winograd layer takes when none is forced: 4 where F(4x4, 3x3)'s products have
    WINOGRAD4_MIN_TILES tiles or more and the layer WINOGRAD4_MIN_CHANNELS input channels, else 2."""
    tiles = s.batch * ceil_div(s.oh, 4) * ceil_div(s.ow, 4)
    return 4 if tiles >= WINOGRAD4_MIN_TILES and s.cin >= WINOGRAD4_MIN_CHANNELS else 2


WINOGRAD_TILE = "128x64"
WINOGRAD_TILE_MIN_WORKGROUPS = 128  # about one per multiprocessor on the largest GPUs


def wide_products(products: ConvShape, limits: Limits) -> bool:
    """Whether Winograd's products take WINOGRAD_TILE unsplit rather than choose_tile's answer: where M is tall
    enough for its 128 rows, N wider than the narrow tiles, and the tile still makes WINOGRAD_TILE_MIN_WORKGROUPS
    workgroups over the planes. choose_tile aims at TARGET_WORKGROUPS, so it would take a smaller tile there or split
    a long K; measured in whole runs of the AuraFace replica (benchmarks/winograd_tiles.py), 128x64 on every
    product won at batch 8 in one call of two and was as fast at batch 16 (docs/bench/code-figures.md)."""
    tile = TILES[WINOGRAD_TILE]
    m, n = products.m, products.n
    if m < 96 or n <= 96 or not fits(tile, limits):
        return False
    return ceil_div(m, tile.bm) * ceil_div(n, tile.bn) * products.groups >= WINOGRAD_TILE_MIN_WORKGROUPS


def plan_winograd(s: ConvShape, limits: Limits, force_splits: int | None = None,
                  force_tile: str | None = None, m: int = 2) -> WinogradPlan:
    """The Winograd F(mxm, 3x3) plan of a shape that suits it; PlanError when its transformed planes exceed a
    binding."""
    e = (m + 2) ** 2
    th, tw = ceil_div(s.oh, m), ceil_div(s.ow, m)
    tiles = s.batch * th * tw
    products = ConvShape(batch=1, cin=e * s.cin, h=1, w=tiles, cout=e * s.cout, oh=1, ow=tiles, groups=e)
    if force_tile is None and force_splits is None and wide_products(products, limits):
        force_tile, force_splits = WINOGRAD_TILE, 1
    gemm = plan_conv(products, limits, force_splits, force_tile, False)
    if gemm.tile is None:
        raise PlanError("the Winograd products need the tiled kernel")
    return WinogradPlan(gemm, th, tw, tiles, flat_grid(s.cin * tiles, limits), flat_grid(s.cout * tiles, limits), m)


# ------------------------------------------------------------------------------ a 1x1 then a depthwise 3x3, fused

SEPARABLE_THREADS = 256  # a workgroup's tile with its one-position border: one position a thread
SEPARABLE_TILES = ((6, 30), (14, 14))  # output rows x columns whose bordered tile is 8 x 32 or 16 x 16
SEPARABLE_MAX_QUADS = 4  # channel quads (vec4) a workgroup makes: the bordered tile's 1x1 outputs for 16 channels
# Past one channel block, each block reads the 1x1's input again and its bordered tile makes 1.31x the 1x1's outputs:
# there the tiled 1x1 and the depthwise kernel apart measured faster once the 1x1 is larger than 16 -> 32 channels
# (docs/bench/h200-2026-12-06: YuNet's layers timed one by one)
SEPARABLE_MAX_PRODUCTS = 16 * 32  # input x output channels of a 1x1 fused across several channel blocks


@dataclass(frozen=True)
class SeparablePlan:
    """A 1x1 convolution and the depthwise 3x3 reading it (a MobileNet/YuNet block) as one dispatch: each workgroup
    computes the 1x1's outputs for its output tile plus a one-position border into workgroup memory, then the
    depthwise window over them, so the 1x1's output never goes to device memory."""

    th: int  # output rows and columns of a workgroup's tile ((th + 2) * (tw + 2) = SEPARABLE_THREADS)
    tw: int
    quads: int  # channel quads a workgroup makes (1, 2 or 4)
    tiles_x: int
    tiles: int  # tiles of one image and channel block
    blocks: int  # channel blocks of 4 * quads
    workgroups: int  # tiles * blocks * batch
    grid: tuple[int, int, int]
    kernel: str = "separable"
    tile: None = None  # not the tiled GEMM

    def describe(self) -> str:
        return f"1x1 + depthwise 3x3 fused, tile {self.th}x{self.tw}x{4 * self.quads}"


def plan_separable(pw: ConvShape, dw: ConvShape, limits: Limits = Limits()) -> SeparablePlan | None:
    """The fused plan of a 1x1 convolution `pw` whose output only the depthwise 3x3 `dw` reads, or None when the two
    are not such a pair (stride 1, zero padding of 1, one input channel per output), the device's workgroups
    cannot hold the tile, or the 1x1 is too large to gain (SEPARABLE_MAX_PRODUCTS). The tile: of the two shapes,
    the one that computes the fewer bordered positions over the output (8 x 32 on a tie: whole rows of 32 read and
    written together)."""
    if not pw.pointwise or pw.groups != 1 or pw.dilation != (1, 1):
        return None
    if (dw.kernel, dw.stride, dw.dilation, dw.pads) != ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)):
        return None
    if dw.cg != 1 or dw.m != 1 or dw.cin != pw.cout or (dw.batch, dw.h, dw.w) != (pw.batch, pw.oh, pw.ow):
        return None
    quads = 1 if pw.cout <= 4 else 2 if pw.cout <= 8 else SEPARABLE_MAX_QUADS
    if limits.max_invocations < SEPARABLE_THREADS:
        return None
    if pw.cout > 4 * SEPARABLE_MAX_QUADS and pw.cin * pw.cout > SEPARABLE_MAX_PRODUCTS:
        return None
    while quads > 1 and limits.max_workgroup_storage < SEPARABLE_THREADS * quads * 16:
        quads //= 2
    if limits.max_workgroup_storage < SEPARABLE_THREADS * quads * 16:
        return None

    def tiles_of(tile):
        return ceil_div(dw.oh, tile[0]) * ceil_div(dw.ow, tile[1])

    th, tw = min(SEPARABLE_TILES, key=tiles_of)
    tiles_x = ceil_div(dw.ow, tw)
    tiles = tiles_of((th, tw))
    blocks = ceil_div(pw.cout, 4 * quads)
    count = tiles * blocks * pw.batch
    try:
        g = grid(count, limits)
    except PlanError:
        return None
    return SeparablePlan(th, tw, quads, tiles_x, tiles, blocks, count, g)


# ------------------------------------------------------------------------------------------------- gemm / gemv


@dataclass(frozen=True)
class GemmPlan:
    kernel: str  # "gemv" (few rows: the weights are read once per block of rows) or "tiled" (a 1x1 convolution)
    rows_per_group: int  # gemv: rows of x each workgroup handles
    vec4: bool  # gemv: K is a multiple of 4, so rows load as vec4
    conv: ConvPlan | None
    grid: tuple[int, int, int]
    workgroups: int = 0  # gemv: one per output feature and block of rows


GEMV_ROWS = 8  # rows of x per gemv workgroup: the weights are streamed once per 8 rows


def plan_gemm(m: int, k: int, n: int, limits: Limits = Limits()) -> GemmPlan:
    """out (M, N) = x (M, K) @ W (N, K)^T. Few rows: a gemv that streams W (memory bound anyway); many: the tiled
    kernel, seeing x as a batch of M 1x1 images of K channels."""
    if max(m * k, n * k, m * n) * 4 > limits.max_binding:
        raise PlanError("a fully connected layer exceeds the device's binding size")
    if m <= 32:
        rows = min(GEMV_ROWS, m)
        count = n * ceil_div(m, rows)
        return GemmPlan("gemv", rows, k % 4 == 0, None, grid(count, limits), count)
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
