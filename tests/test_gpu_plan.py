"""The GPU plans (kernel, tile, split, grid) and parameter layouts: pure functions, no GPU needed."""

from __future__ import annotations

from importlib import resources

import pytest

from facerun.gpu import kernels as K
from facerun.gpu import pace
from facerun.gpu.memory import SlotPlanner, pack_conv_weights
from facerun.gpu.plan import (
    TARGET_WORKGROUPS,
    TILES,
    ConvShape,
    Limits,
    PlanError,
    WinogradPlan,
    broadcast_strides,
    choose_tile,
    grid,
    merge_dims,
    plan_conv,
    plan_gemm,
)

BIG = Limits(max_workgroups_per_dim=65535, max_binding=2 << 30, max_invocations=1024, max_workgroup_storage=49152)


def conv(batch, cin, hw, cout, k=3, s=1, groups=1, pad=None):
    pad = k // 2 if pad is None else pad
    o = (hw + 2 * pad - k) // s + 1
    return ConvShape(batch, cin, hw, hw, cout, o, o, groups, (k, k), (s, s), (1, 1), (pad,) * 4)


def test_depthwise_and_tiny_convolutions_use_the_direct_kernel():
    assert plan_conv(conv(1, 64, 80, 64, groups=64)).kernel == "depthwise"
    assert plan_conv(conv(1, 64, 80, 128, groups=64)).kernel == "depthwise"  # a channel multiplier of 2
    assert plan_conv(conv(1, 1, 80, 1)).kernel == "depthwise"  # one input channel, K = 9
    assert plan_conv(conv(1, 3, 80, 2)).kernel == "direct"  # a tiny head, K = 27
    # a 64-to-1 head has a long K: the tiled kernel, 16 rows of which only one is used, is faster (measured)
    assert plan_conv(conv(1, 64, 80, 1, k=1)).kernel == "tiled"
    assert plan_conv(conv(1, 64, 40, 8, k=1)).kernel == "tiled"


# IResNet-100 at batch 16: (input channels, size, output channels, stride) -> the tile measured best on an H200
IRESNET_B16 = {
    (64, 56, 128, 1): ("128x64", 1),
    (64, 56, 64, 1): ("64x128", 1),
    (128, 28, 128, 1): ("64x64", 1),
    (128, 28, 256, 1): ("128x64", 1),
    (256, 14, 256, 1): ("128x128", 5),
    (256, 14, 512, 1): ("64x64", 1),
    (512, 7, 512, 1): ("128x128", 9),
}


@pytest.mark.parametrize("layer", list(IRESNET_B16))
def test_iresnet_layers_get_the_measured_tiles(layer):
    cin, hw, cout, s = layer
    p = plan_conv(conv(16, cin, hw, cout, s=s), BIG, force_winograd=False)  # the layers' im2col plans
    tile, splits = IRESNET_B16[layer]
    assert (p.tile, p.splits) == (TILES[tile], splits)
    assert p.workgroups >= TARGET_WORKGROUPS // 2


def test_long_k_with_few_tiles_is_split_into_enough_workgroups():
    # 7x7x512 at batch 1: a handful of tiles; K = 4608 is cut so the GPU gets a few hundred workgroups
    p = plan_conv(conv(1, 512, 7, 512), BIG, force_winograd=False)
    assert p.splits > 1
    assert p.k_chunk % p.tile.bk == 0 and p.k_chunk >= 128
    assert (p.splits - 1) * p.k_chunk < p.kpad <= p.splits * p.k_chunk
    assert p.workgroups >= TARGET_WORKGROUPS // 2
    assert p.reduce_grid is not None


def test_short_k_with_few_tiles_takes_small_tiles_instead_of_a_split():
    # YuNet's late 64-channel 1x1 layers (K = 64): the most workgroups, no reduce pass
    for hw in (20, 40, 80):
        p = plan_conv(conv(1, 64, hw, 64, k=1), BIG)
        assert p.splits == 1 and p.tile.bm == 16
    # a 1x1 downsample with K = 256 may still be cut in two
    assert plan_conv(conv(16, 256, 14, 512, k=1, s=2), BIG).splits == 2


def test_forced_splits_and_tiles_are_honoured_within_k():
    p = plan_conv(conv(1, 64, 6, 64), force_splits=3)
    assert p.splits == 3 and p.k_chunk * 3 >= 64 * 9
    q = plan_conv(conv(1, 8, 6, 16, k=1), force_splits=50)  # K = 8: one BK step at most
    assert q.splits == 1
    assert plan_conv(conv(1, 3, 9, 2), force_tile="32x64").tile == TILES["32x64"]
    assert plan_conv(conv(1, 8, 9, 16), BIG, force_tile="128x128/8x8/k32/u8").tile.name == "128x128/8x8/k32/u8"
    with pytest.raises(PlanError):
        plan_conv(conv(1, 8, 9, 16), force_tile="128x128/8x8/u3")  # ku must divide bk


def test_plans_are_a_function_of_shape_and_limits():
    s = conv(4, 128, 28, 128)
    assert plan_conv(s, BIG) == plan_conv(s, BIG)
    # the batch is folded into N: a larger batch makes more tiles and needs less (or no) splitting
    assert plan_conv(conv(1, 256, 14, 256, k=1), BIG).splits > plan_conv(conv(16, 256, 14, 256, k=1), BIG).splits
    assert plan_conv(conv(64, 256, 14, 256, k=1), BIG).splits == 1


def test_tiles_respect_device_limits():
    small = Limits(max_invocations=128, max_workgroup_storage=8192)
    t, _ = choose_tile(512, 4096, 1152, 1, small)
    assert t.threads <= 128 and t.shared_bytes <= 8192
    with pytest.raises(PlanError):
        choose_tile(512, 4096, 1152, 1, Limits(max_invocations=32, max_workgroup_storage=1024))
    for tile in TILES.values():
        assert tile.threads % tile.bn == 0 and tile.tm % 4 == 0 and tile.tn % 4 == 0
        assert tile.threads <= 256 and tile.shared_bytes <= 16384


def test_bindings_beyond_the_device_are_refused():
    tiny = Limits(max_binding=1 << 20)
    with pytest.raises(PlanError, match="binding"):
        plan_conv(conv(1, 64, 128, 64), tiny)  # 4 MiB of input
    with pytest.raises(PlanError):
        plan_gemm(1, 25088, 512, tiny)  # 51 MB of weights


def test_grids_fold_into_two_dimensions():
    lim = Limits(max_workgroups_per_dim=100)
    assert grid(50, lim) == (50, 1, 50)
    x, y, row = grid(1234, lim)
    assert x <= 100 and y <= 100 and x * y >= 1234 and row == x
    with pytest.raises(PlanError):
        grid(100 * 100 + 1, lim)
    # a convolution whose tiles exceed one dimension folds too
    p = plan_conv(conv(1, 16, 512, 16), Limits(max_workgroups_per_dim=300), force_winograd=False)
    assert p.grid[0] <= 300 and p.grid[0] * p.grid[1] >= p.workgroups


def test_gemm_uses_gemv_for_few_rows_and_tiles_for_many():
    g = plan_gemm(16, 25088, 512)
    assert g.kernel == "gemv" and g.vec4 and g.rows_per_group == 8
    assert g.grid[0] * g.grid[1] >= 512 * 2
    assert not plan_gemm(2, 30, 10).vec4
    t = plan_gemm(256, 512, 512)
    assert t.kernel == "tiled" and t.conv.tile is not None


def test_broadcast_strides_and_merged_dimensions():
    assert broadcast_strides((2, 3, 4, 5), (3, 1, 1)) == (0, 1, 0, 0)
    assert broadcast_strides((2, 3, 4, 5), (5,)) == (0, 0, 0, 1)
    with pytest.raises(PlanError):
        broadcast_strides((2, 3), (4,))
    # a contiguous copy merges into one dimension; an NCHW->NHWC transpose keeps the channel axis apart
    assert merge_dims((2, 3, 4, 5), (60, 20, 5, 1), (60, 20, 5, 1)) == ((120,), ((1,), (1,)))
    # (1, 8, 6, 6) read as (1, 6, 6, 8): H and W merge, C stays apart
    shape, (src, dst) = merge_dims((1, 6, 6, 8), (288, 6, 1, 36), (288, 48, 8, 1))
    assert shape == (36, 8) and src == (1, 36) and dst == (8, 1)


def test_conv_weights_pack_k_major_and_zero_padded():
    import numpy as np

    w = np.arange(4 * 3 * 2 * 2, dtype=np.float32).reshape(4, 3, 2, 2)
    packed = pack_conv_weights(w, groups=2, kpad=16, mpad=8)  # per group: m = 2, K = 3 * 2 * 2 = 12
    assert packed.shape == (2, 16, 8)
    assert packed[1, 5, 1] == w[3].reshape(-1)[5]
    assert packed[0, 11, 0] == w[0].reshape(-1)[11]
    assert packed[:, 12:].sum() == 0 and packed[:, :, 2:].sum() == 0


def test_buffer_slots_are_reused_by_lifetime():
    s = SlotPlanner()
    a, b = s.take(1000), s.take(4000)
    s.give(a)
    c = s.take(800)  # fits the freed 1000-byte slot
    assert c == a
    s.give(b)
    d = s.take(9000)  # grows the largest free slot instead of adding one
    assert d == b and s.sizes[b] >= 9000 and len(s.sizes) == 2


def test_every_kernel_params_struct_parses():
    names = [p.name for p in resources.files("facerun.shaders").iterdir() if p.name.endswith(".wgsl")]
    assert {"conv_tiled.wgsl", "conv_direct.wgsl", "gemv.wgsl", "binary.wgsl"} <= set(names)
    kernels = [K.UNARY, K.BINARY, K.COPY, K.POOL, K.GLOBAL_AVG, K.RESIZE, K.SOFTMAX, K.MATMUL, K.DIRECT_CONV,
               K.SPLIT_REDUCE, K.gemv(8, True), K.gemv(1, False)]
    kernels += [K.tiled_conv(t, pw, part) for t in TILES.values() for pw in (False, True) for part in (False, True)]
    for k in kernels:
        layout = k.params()
        assert layout.size <= K.UNIFORM_SLOT
        assert "$" not in k.code()
    b = K.BINARY.params()
    off = {f.name: f.offset for f in b.fields}
    assert off["shape"] % 16 == 0 and off["sa"] == off["shape"] + 32
    with pytest.raises(KeyError):
        K.SOFTMAX.params().pack(count=1, row=1, n=2)  # inner missing


def test_pace_rest_keeps_the_share():
    assert pace.rest_after(0.1, 1.0) == 0.0
    assert pace.rest_after(0.1, 0.5) == pytest.approx(0.1)
    assert pace.rest_after(0.1, 0.25) == pytest.approx(0.3)
    assert pace.rest_after(10.0, 0.1) == pace.MAX_REST
    pace.set_pace(2, 0.01)
    assert pace.get_pace() == (2, pace.MIN_SHARE)
    pace.set_pace(None, None)
    assert pace.get_pace() == (None, 1.0)


# ------------------------------------------------------------------------------------------------- winograd


def test_winograd_takes_3x3_stride_1_convolutions_from_16_input_channels():
    for shape in (conv(16, 64, 56, 64), conv(1, 512, 7, 512), conv(1, 16, 80, 16), conv(1, 64, 80, 2),
                  conv(1, 256, 14, 256, pad=0)):
        p = plan_conv(shape, BIG)
        assert isinstance(p, WinogradPlan), shape
        assert p.tiles == shape.batch * -(-shape.oh // p.m) * -(-shape.ow // p.m)
        assert p.describe().startswith(f"winograd F({p.m}x{p.m},3x3) + tiled")
    stem = plan_conv(conv(16, 3, 112, 64), BIG)  # 3 input channels: the transforms cost more than they save
    strided = plan_conv(conv(16, 64, 112, 64, s=2), BIG)
    five = plan_conv(conv(1, 64, 40, 64, k=5), BIG)
    grouped = plan_conv(conv(1, 64, 40, 64, groups=4), BIG)
    dilated = plan_conv(ConvShape(1, 64, 40, 40, 64, 40, 40, 1, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)), BIG)
    depthwise = plan_conv(conv(1, 64, 40, 64, groups=64), BIG)
    assert [p.kernel for p in (stem, strided, five, grouped, dilated, depthwise)] == ["tiled"] * 5 + ["depthwise"]


def test_winograd_products_are_a_16_group_pointwise_gemm():
    s = conv(4, 128, 28, 256)  # 196 tiles of 4x4: F(2x2, 3x3)
    p = plan_conv(s, BIG)
    assert p.m == 2
    g = p.gemm
    assert g.kernel == "tiled" and g.pointwise and g.groups == 16
    assert g.mpad % g.tile.bm == 0 and g.mpad >= 256 and g.kpad >= 128  # M = output channels, K = input channels
    assert g.tiles_n == -(-p.tiles // g.tile.bn)
    assert p.input_grid[0] * p.input_grid[1] * 256 >= 128 * p.tiles  # a thread per (channel, tile)
    assert p.output_grid[0] * p.output_grid[1] * 256 >= 256 * p.tiles
    # the same layer at any batch takes Winograd (F(4x4, 3x3) from 256 tiles of 4x4: batch 8 here)
    forms = [plan_conv(conv(b, 128, 28, 256), BIG) for b in (1, 2, 4, 8, 16)]
    assert all(isinstance(p, WinogradPlan) for p in forms) and [p.m for p in forms] == [2, 2, 2, 4, 4]


def test_winograd_f4_from_256_tiles_and_64_input_channels():
    """The rule measured on the H200 (plan.WINOGRAD4_MIN_TILES): F(4x4, 3x3) where its products have 256 tiles a plane
    and the layer 64 input channels or more, F(2x2, 3x3) elsewhere; a batch of 16 of IResNet-100's 7x7 maps stays on
    F(2x2) (64 tiles), its 14x14 ones take F(4x4) (256)."""
    from facerun.gpu.plan import WINOGRAD4_MIN_CHANNELS, WINOGRAD4_MIN_TILES

    assert (WINOGRAD4_MIN_TILES, WINOGRAD4_MIN_CHANNELS) == (256, 64)
    assert plan_conv(conv(16, 256, 14, 256), BIG).m == 4
    assert plan_conv(conv(16, 512, 7, 512), BIG).m == 2
    assert plan_conv(conv(1, 256, 14, 256), BIG).m == 2
    assert plan_conv(conv(1, 64, 64, 64), BIG).m == 4  # 16 x 16 tiles
    assert plan_conv(conv(1, 32, 64, 64), BIG).m == 2  # too few input channels


def test_winograd_forcing():
    s = conv(1, 64, 14, 64)
    assert plan_conv(s, BIG, force_winograd=False).kernel == "tiled"
    assert plan_conv(s, BIG, force_tile="32x64").kernel == "tiled"  # a forced tile is im2col's ...
    p = plan_conv(s, BIG, force_tile="32x64", force_splits=2, force_winograd=True)  # ... unless Winograd is forced
    assert p.kernel == "winograd" and p.tile == TILES["32x64"] and p.splits == 2 and p.gemm.partial
    assert plan_conv(conv(1, 8, 14, 8), BIG).kernel == "tiled"
    assert plan_conv(conv(1, 8, 14, 8), BIG, force_winograd=True).kernel == "winograd"
    assert plan_conv(conv(1, 8, 14, 8, s=2), BIG, force_winograd=True).kernel == "tiled"  # only where it applies


def test_winograd_f4_makes_36_planes_of_4x4_tiles():
    s = conv(16, 256, 14, 256)
    p = plan_conv(s, BIG, force_winograd=4)
    assert isinstance(p, WinogradPlan) and p.m == 4 and p.planes == 36
    assert (p.th, p.tw) == (4, 4) and p.tiles == 16 * 4 * 4  # 14 = 3 whole tiles and one cropped to 2
    assert p.gemm.groups == 36 and p.gemm.pointwise and p.gemm.tiles_n == -(-p.tiles // p.gemm.tile.bn)
    assert p.describe().startswith("winograd F(4x4,3x3) + tiled")
    assert plan_conv(s, BIG, force_winograd=2).m == 2 and plan_conv(s, BIG, force_winograd=2).planes == 16
    with pytest.raises(PlanError, match="F\\(3x3, 3x3\\) is not built"):
        plan_conv(s, BIG, force_winograd=3)


def test_winograd_falls_back_to_im2col_when_its_planes_exceed_a_binding():
    # 64 channels at 112x112, batch 16: F(4x4)'s 36 input planes are 116 MB, F(2x2)'s 16 are 205 MB (the input 51 MB)
    s = conv(16, 64, 112, 64)
    assert plan_conv(s, BIG).kernel == "winograd" and plan_conv(s, BIG).m == 4
    p = plan_conv(s, Limits(max_binding=64 << 20))
    assert p.kernel == "tiled" and p.tile is not None


def test_narrow_tiles_only_for_short_n():
    """N of at most NARROW_N (a 14x14 map of one image in F(4x4) tiles: 16; a 7x7 map: 49 is past it) takes a tile
    32 columns wide, so three quarters of a 64-wide tile are not spent on nothing; longer N never does."""
    from facerun.gpu.plan import NARROW_N

    assert NARROW_N == 48
    short = plan_conv(conv(1, 256, 14, 256), BIG, force_winograd=4)  # products: N = 16 per plane
    assert short.gemm.tile.bn == 32, short.describe()
    im2col = plan_conv(conv(1, 512, 6, 512), BIG, force_winograd=False)  # N = 36
    assert im2col.tile.bn == 32, im2col.describe()
    for shape in (conv(1, 512, 7, 512), conv(16, 256, 14, 256), conv(1, 64, 80, 64)):  # N = 49, 3136, 6400
        for form in (False, 2, 4):
            p = plan_conv(shape, BIG, force_winograd=form)
            tile = p.gemm.tile if isinstance(p, WinogradPlan) else p.tile
            n = p.tiles if isinstance(p, WinogradPlan) else shape.n
            assert tile.bn >= 64 or n <= NARROW_N, (shape, form, p.describe())


def test_winograd_products_take_128x64_unsplit_where_it_makes_128_workgroups():
    """plan.wide_products: IResNet's 7x7 maps at batch 8 (N = 128 tiles, M = 512) were a 128x128 tile split 4 ways
    (64 workgroups short of TARGET_WORKGROUPS); 128x64 unsplit makes 128 and won on the H200. Where 128x64 makes
    fewer (batch 4: 64), choose_tile's split stays; an M under 96 or an N of narrow tiles never takes it."""
    from facerun.gpu.plan import WINOGRAD_TILE, WINOGRAD_TILE_MIN_WORKGROUPS, wide_products

    assert (WINOGRAD_TILE, WINOGRAD_TILE_MIN_WORKGROUPS) == ("128x64", 128)
    b8 = plan_conv(conv(8, 512, 7, 512), BIG)
    assert b8.m == 2 and b8.gemm.tile == TILES["128x64"] and b8.gemm.splits == 1
    products = ConvShape(1, 16 * 512, 1, 128, 16 * 512, 1, 128, 16)
    assert choose_tile(512, 128, 512, 16, BIG) == (TILES["128x128"], True)  # what the rule overrides
    assert wide_products(products, BIG)
    b4 = plan_conv(conv(4, 512, 7, 512), BIG)  # N = 64: 4 x 1 x 16 workgroups
    assert b4.gemm.tile == TILES["128x64"] and b4.gemm.splits > 1
    assert not wide_products(ConvShape(1, 16 * 512, 1, 64, 16 * 512, 1, 64, 16), BIG)
    assert not wide_products(ConvShape(1, 36 * 64, 1, 3136, 36 * 64, 1, 3136, 36), BIG)  # M = 64
    assert not wide_products(ConvShape(1, 16 * 512, 1, 16, 16 * 512, 1, 16, 16), BIG)  # N = 16: narrow tiles
    forced = plan_conv(conv(8, 512, 7, 512), BIG, force_tile="64x64", force_winograd=True)  # a forced tile wins
    assert forced.gemm.tile == TILES["64x64"]
