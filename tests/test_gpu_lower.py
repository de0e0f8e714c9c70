"""Lowering (program steps -> dispatches) takes every kernel choice from plan.py's pure functions. No GPU needed:
the weights go to a stand-in store."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest

import facerun
from facerun import program as P
from facerun.gpu import kernels as K
from facerun.gpu.fusion import head_groups, pooled_inputs, separable_pairs
from facerun.gpu.lower import conv_shape as lower_shape
from facerun.gpu.lower import lower, prologues
from facerun.gpu.plan import ConvShape, Limits, PlanError, Tile, plan_conv, plan_gemm, plan_separable

BIG = Limits(max_workgroups_per_dim=65535, max_binding=2 << 30, max_invocations=1024, max_workgroup_storage=49152)
SMALL = Limits(max_workgroups_per_dim=300, max_binding=64 << 20, max_invocations=128, max_workgroup_storage=8192)
CASES = [("yunet-arch", (1, 3, 96, 128), Limits()), ("yunet-arch", (1, 3, 64, 96), SMALL),
         ("sface-arch-small", (2, 3, 112, 112), Limits()), ("auraface-arch-small", (16, 3, 112, 112), BIG),
         ("every-op", None, SMALL)]


def keep_data(role, data):
    return data


def by_node(low) -> dict[str, list]:
    found = defaultdict(list)
    for d in low.dispatches:
        found[d.node].append(d)
    return found


def assert_runs_plan(dispatches: list, want, pointwise: bool, norm: bool = False, pooled: bool = False) -> None:
    """The dispatches of one convolution are exactly what `want` (plan_conv's answer) says; `norm`: a batch norm is
    folded into its Winograd input transform; `pooled`: a 2x2 max pool into its reads."""
    if want.kernel == "winograd":  # input transform, the products (the tiled pointwise kernel), output transform
        first, *products, last = dispatches
        forms = {(2, False): (K.WINOGRAD_INPUT, K.WINOGRAD_OUTPUT), (4, False): (K.WINOGRAD4_INPUT, K.WINOGRAD4_OUTPUT),
                 (2, True): (K.WINOGRAD_INPUT_AFFINE, K.WINOGRAD_OUTPUT),
                 (4, True): (K.WINOGRAD4_INPUT_AFFINE, K.WINOGRAD4_OUTPUT)}
        assert (first.kernel, last.kernel) == forms[want.m, norm] == K.winograd_transforms(want, affine=norm)
        assert (first.reads[1] is not None) == norm  # the norm's scales and shifts
        assert first.groups == want.input_grid[:2] and last.groups == want.output_grid[:2]
        assert first.plan is last.plan is want and all(d.plan is want for d in products)
        products[0] = dataclasses.replace(products[0], plan=want.gemm)
        assert_runs_plan(products, want.gemm, True)
        return
    main, *rest = dispatches
    assert main.plan == want
    assert main.groups == want.grid[:2]
    if want.kernel == "tiled":
        subst = dict(main.kernel.subst)
        t = want.tile
        assert main.kernel.file == "conv_tiled.wgsl"
        got = tuple(subst[k] for k in ("BM", "BN", "TM", "TN", "BK", "KU"))
        assert got == (t.bm, t.bn, t.tm, t.tn, t.bk, t.ku)
        assert subst["POINTWISE"] == pointwise and subst["PARTIAL"] == (want.splits > 1)
        assert subst.get("POOLED", False) == pooled
    else:
        assert not pooled
        assert (main.kernel.file, main.kernel.entry) == ("conv_direct.wgsl", want.kernel)
    if want.splits > 1:
        assert len(rest) == 1 and rest[0].kernel == K.SPLIT_REDUCE and rest[0].groups == want.reduce_grid[:2]
    else:
        assert rest == []


@pytest.mark.parametrize("separable", [True, False])
@pytest.mark.parametrize("name,shape,limits", CASES)
def test_every_convolution_runs_the_plan_of_its_shape(name, shape, limits, separable):
    net = facerun.load(name)
    prog = net.program(shape or net.default_shape(1))
    low = lower(prog, limits, keep_data, separable=separable)
    found = by_node(low)
    norms = prologues(prog)
    pools = pooled_inputs(prog)  # by 1x1: folded where that 1x1 runs tiled or in a separable pass
    kinds = set()
    # a 1x1 and the depthwise 3x3 reading it: one dispatch of the fused kernel under the 1x1's node, none for the other
    fused_into = {}
    # a head group: one dispatch of the heads kernel under its first 1x1's node, on the plan of all its channels
    for group in head_groups(prog) if separable else ():
        alone = [plan_separable(lower_shape(prog, h.pw), lower_shape(prog, h.dw), limits) for h in group]
        cout = sum(h.pw.weight.shape[0] for h in group)
        whole = plan_separable(dataclasses.replace(lower_shape(prog, group[0].pw), cout=cout),
                               dataclasses.replace(lower_shape(prog, group[0].dw), cin=cout, cout=cout, groups=cout),
                               limits)
        if None in alone or whole is None:
            continue
        (d,) = found[group[0].pw.node]
        assert d.kernel == K.separable(whole.quads, heads=True) and d.plan == whole and d.groups == whole.grid[:2]
        for h in group:
            assert (h is group[0] or found[h.pw.node] == []) and found[h.dw.node] == []
            fused_into[id(h.pw)] = fused_into[id(h.dw)] = True
        kinds.add("heads")
    for pw_id, dw in (separable_pairs(prog) if separable else {}).items():
        if pw_id in fused_into:
            continue
        pw = next(st for st in prog.steps if id(st) == pw_id)
        want = plan_separable(lower_shape(prog, pw), lower_shape(prog, dw), limits)
        if want is not None:
            (d,) = found[pw.node]
            assert d.kernel == K.separable(want.quads, id(pw) in pools) and d.plan == want
            assert d.groups == want.grid[:2] and found[dw.node] == []
            if id(pw) in pools:
                assert found[pools[id(pw)].node] == []
                kinds.add("pooled")
            fused_into[id(pw)] = fused_into[id(dw)] = True
            kinds.add("separable")
    for st in prog.steps:
        if id(st) in fused_into:
            continue
        if isinstance(st, P.Conv):
            (b, cin, h, w), (_, cout, oh, ow) = prog.values[st.x].shape, prog.values[st.out].shape
            s = ConvShape(b, cin, h, w, cout, oh, ow, st.groups, st.kernel, st.stride, st.dilation, st.pads)
            want = plan_conv(s, limits)
            folded = id(st) in norms and want.kernel == "winograd"
            pooled = id(st) in pools and want.kernel == "tiled" and s.pointwise
            assert_runs_plan(found[st.node], want, s.pointwise, folded, pooled)
            if id(st) in pools:  # a folded pool makes no dispatch of its own
                assert len(found[pools[id(st)].node]) == (0 if pooled else 1)
                kinds.add("pooled" if pooled else "pool")
            if id(st) in norms:  # a folded norm makes no dispatch of its own; one in front of another plan does
                assert len(found[norms[id(st)].node]) == (0 if folded else 1)
                kinds.add("folded norm" if folded else "norm")
            kinds.add(want.kernel + (" split" if want.splits > 1 else ""))
        elif isinstance(st, P.Gemm):
            (m, k), n = prog.values[st.x].shape, st.weight.shape[0]
            want = plan_gemm(m, k, n, limits)
            if want.kernel == "gemv":
                (d,) = found[st.node]
                assert d.plan == want and d.kernel == K.gemv(want.rows_per_group, want.vec4)
                assert d.groups == want.grid[:2]
            else:
                assert_runs_plan(found[st.node], want.conv, True)
    assert kinds, "the model has convolutions"
    if name == "yunet-arch":  # some of its 1x1s run with their depthwise 3x3 (not on SMALL: too few threads)
        fused = separable and limits is not SMALL
        assert {"tiled", "depthwise"} <= kinds and ("separable" in kinds) == fused and ("heads" in kinds) == fused
    if name == "auraface-arch-small":  # its 3x3 layers, its stem and strided ones not; each block's first norm folded
        assert {"winograd", "tiled", "folded norm"} <= kinds


def test_forced_tiles_and_splits_reach_every_tiled_convolution():
    net = facerun.load("sface-arch-small")
    prog = net.program((2, 3, 112, 112))
    for force in ({"force_tile": "32x64"}, {"force_splits": 2}, {"force_tile": "64x64/4x4/k8/u8"}):
        found = by_node(lower(prog, Limits(), keep_data, force))
        for st in prog.steps:
            if isinstance(st, P.Conv):
                (b, cin, h, w), (_, cout, oh, ow) = prog.values[st.x].shape, prog.values[st.out].shape
                s = ConvShape(b, cin, h, w, cout, oh, ow, st.groups, st.kernel, st.stride, st.dilation, st.pads)
                want = plan_conv(s, Limits(), **force)
                assert_runs_plan(found[st.node], want, s.pointwise)
                if "force_tile" in force:  # a forced tile takes the depthwise layers too
                    assert want.kernel == "tiled" and want.tile == Tile.parse(force["force_tile"])


def test_lowering_uses_the_programs_shapes_and_slots():
    net = facerun.load("every-op")
    prog = net.program(net.default_shape(1))
    low = lower(prog, Limits(), keep_data)
    assert [name for name, _, _ in low.inputs] == [name for name, _ in prog.inputs]
    assert [name for name, *_ in low.outputs] == [name for name, _ in prog.outputs]
    # every dispatch writes a slot that exists, and reads only slots, constants (here: their data) or nothing
    for d in low.dispatches:
        assert d.out[0] == "slot" and d.out[1] < len(low.slots.sizes)
        assert len(d.reads) == len(K.READ_BINDINGS)
    assert sum(low.kernels.values()) == len(low.dispatches)
    assert len(low.slots.sizes) < len(prog.steps)  # reused by lifetime


def test_a_value_beyond_the_binding_limit_is_refused_at_lowering():
    net = facerun.load("yunet-arch")
    prog = net.program((1, 3, 96, 128))
    with pytest.raises(PlanError, match="binding"):
        lower(prog, Limits(max_binding=4096), keep_data)
