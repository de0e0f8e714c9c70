"""Program steps -> GPU dispatches, without touching the device.

Each step becomes one or two dispatches: a kernel, its packed parameters, the buffers it reads and the slot it
writes. Activation values get slots by lifetime as the steps are walked (views alias their base's slot); weights and
constants go through `const(role, data)`, which the runner points at the model's WeightStore (tests pass a stand-in,
so lowering runs without a GPU). Every choice of kernel variant, tile, K split and grid is made by plan.py's pure
functions; this module only turns a plan into parameters. A step beyond the device's limits raises PlanError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from typing import NamedTuple

import numpy as np

from .. import program as P
from . import kernels as K
from .fusion import HEADS_MAX, Fusion, Head, fusions, head_groups, pooled_inputs, prologues, separable_pairs
from .items import item_count
from .memory import (
    SlotPlanner,
    channel_slopes,
    channels_of,
    epilogue_data,
    im2col_taps,
    pack_conv_weights,
    pack_depthwise_quads,
    pack_separable,
    winograd_weights,
)
from .plan import (
    ConvPlan,
    ConvShape,
    GemmPlan,
    Limits,
    PlanError,
    SeparablePlan,
    WinogradPlan,
    broadcast_strides,
    contiguous_strides,
    flat_grid,
    grid,
    merge_dims,
    padded,
    plan_conv,
    plan_gemm,
    plan_separable,
)

HEAD_ALIGN = 256  # byte alignment of the outputs a head group's pass writes into one slot (storage offsets)
NO_HEADS = [0] * (6 * 4)  # the head table of a separable pass of one 1x1 (separable.wgsl HEADS)
NEG_INF_BITS = 0xFF800000  # the pool kernel's empty-window value (-inf cannot be a WGSL constant)
# one-thread-per-value kernels whose thread i makes output value i (row-major): a batch's items in order
_BY_OUTPUT_VALUE = (K.UNARY, K.BINARY, K.COPY, K.POOL, K.RESIZE, K.LINEAR_RESIZE, K.PAD)

ConstStore = Callable[[str, np.ndarray], object]


@dataclass
class Dispatch:
    kernel: K.Kernel
    params: bytes
    reads: list  # in K.READ_BINDINGS order: ("slot", i) | a buffer | Transient | None
    out: tuple  # ("slot", i)
    groups: tuple[int, int]
    node: str = ""
    plan: ConvPlan | GemmPlan | SeparablePlan | None = None  # convolutions and fully connected layers: their plan
    # a convolution's output writer: (rows, columns) its mask fields cover, and a batch item's output elements
    mask: tuple[int, int, int] | None = None
    also: tuple[str, ...] = ()  # the nodes of steps folded into this dispatch that do work of their own (a depthwise)
    # a batch program's dispatch whose workgroups take the items in order: (inner, units), items.py
    per_item: tuple[int, int] | None = None


class Placed(NamedTuple):
    """A program output: its name, value, slot (None: a constant), byte offset in the staging buffer, and byte offset
    in its slot (0 but for a head group's outputs, which share one slot)."""

    name: str
    vid: int
    slot: int | None
    offset: int
    at: int = 0


@dataclass
class Lowered:
    """A program as dispatches, with its slot sizes and where its inputs and outputs live."""

    dispatches: list[Dispatch]
    slots: SlotPlanner
    inputs: list[tuple[str, int, P.Value]]  # (name, slot, value)
    outputs: list[Placed]
    staging_bytes: int
    kernels: dict[str, int] = field(default_factory=dict)  # kernel source -> dispatches (for descriptions)
    conv_plans: list[tuple[str, str]] = field(default_factory=list)  # (node, plan in words)
    items: int = 0  # a batch program's items where a batch of fewer may dispatch less (items.py), else 0


def conv_shape(prog: P.Program, st: P.Conv) -> ConvShape:
    """A convolution's GEMM shape from the program's own value shapes."""
    b, cin, h, w = prog.values[st.x].shape
    _, cout, oh, ow = prog.values[st.out].shape
    return ConvShape(b, cin, h, w, cout, oh, ow, st.groups, st.kernel, st.stride, st.dilation, st.pads)


def lower(prog: P.Program, limits: Limits, const: ConstStore, force: dict | None = None,
          half: bool = False, separable: bool = True) -> Lowered:
    """The dispatches of `prog` on a device with `limits`. `force` (tests, tuning) is passed to every convolution's
    plan_conv (force_splits, force_tile). half (--precision f16): Winograd's transformed inputs, weights and (unsplit)
    products are stored as f16, the products summed in f32; every other value stays f32. separable: a 1x1
    convolution and the depthwise 3x3 reading it run as one dispatch where plan_separable takes them (never with a
    plan forced)."""
    return _Lowering(prog, limits, const, force or {}, half, separable).run()


class _Lowering:
    def __init__(self, prog: P.Program, limits: Limits, const: ConstStore, force: dict, half: bool = False,
                 separable: bool = True):
        self.prog = prog
        self.half = half
        self.limits = limits
        self.const = const
        # const.derived(role, sources, extra, make): the buffer of make()'s data, kept by the identity of `sources`
        # (the parameter arrays it is made from: shared by every size's program) and `extra`, so a model's later
        # programs neither pack nor hash their weights again; a plain callable (tests) gets make()'s data each time
        self._derived = getattr(const, "derived", None)
        self.force = force
        self.slots = SlotPlanner()
        self.slot_of: dict[int, int] = {}  # storage -> slot
        self.out = Lowered([], self.slots, [], [], 16)
        self.node = ""
        self.items = self.out.items = item_count(prog)  # N where a batch of fewer may dispatch less (items.py)
        self.fused = fusions(prog)
        # batch norms folded into the Winograd input transform of the convolution after them: norm id -> that conv
        self.prologue: dict[int, P.Conv] = {}
        self.norm_of: dict[int, P.Affine] = {}  # conv id -> its folded norm
        convs = {id(st): st for st in prog.steps if type(st) is P.Conv}
        for conv_id, norm in prologues(prog).items():
            conv = convs[conv_id]
            if isinstance(plan_conv(conv_shape(prog, conv), limits, **force), WinogradPlan):
                self.prologue[id(norm)] = conv
                self.norm_of[conv_id] = norm
        self._deferred: dict[int, tuple] = {}  # conv id -> its folded norm's frees (the conv reads the norm's input)
        # 1x1 convolutions making the depthwise 3x3 after them in their pass: 1x1 id -> (the depthwise, the plan);
        # the depthwise is folded like an activation (no dispatch, its output in the 1x1's slot)
        self.separable: dict[int, tuple[P.Conv, SeparablePlan]] = {}
        if separable and not force:
            for pw_id, dw in separable_pairs(prog).items():
                plan = plan_separable(conv_shape(prog, convs[pw_id]), conv_shape(prog, dw), limits)
                if plan is not None:
                    self.separable[pw_id] = (dw, plan)
                    self.fused[pw_id] = Fusion(dw)
        # 2x2 max pools a 1x1 takes as it reads its input (tiled kernel or separable pass): pool id -> the 1x1, and
        # 1x1 id -> the pool; like a folded norm, the pool makes no dispatch and no slot
        self.pool_before: dict[int, P.Conv] = {}
        self.pool_of: dict[int, P.Pool] = {}
        for conv_id, pool in pooled_inputs(prog).items():
            conv = convs[conv_id]
            plan = plan_conv(conv_shape(prog, conv), limits, **force)
            if conv_id in self.separable or (isinstance(plan, ConvPlan) and plan.tile is not None and plan.pointwise):
                self.pool_before[id(pool)] = conv
                self.pool_of[conv_id] = pool
        # heads made in one separable pass: first 1x1 id -> (the group, its plan); the group's other steps make no
        # dispatch; each head's output at its byte offset in the group's slot (at_of)
        self.heads: dict[int, tuple[tuple[Head, ...], SeparablePlan]] = {}
        self.in_heads: set[int] = set()
        self.at_of: dict[int, int] = {}  # storage -> byte offset in its slot (a head group's outputs)
        for group in head_groups(prog) if self.separable else ():
            plan = self._heads_plan(group)
            if plan is not None:
                self.heads[id(group[0].pw)] = (group, plan)
                for h in group:
                    self.in_heads.update(id(st) for st in (h.pw, h.dw, *self._folded_after(h.dw)))
                self.in_heads.discard(id(group[0].pw))

    def run(self) -> Lowered:
        prog, out = self.prog, self.out
        for name, vid in prog.inputs:
            self._check_size(vid)
            slot = self.slots.take(prog.values[vid].nbytes)
            self.slot_of[prog.storage(vid)] = slot
            out.inputs.append((name, slot, prog.values[vid]))
        folded = {id(f.step): f for f in self.fused.values()}
        lent: set[int] = set()  # storages writing into a folded step's output slot: freed with that output
        for step in prog.steps:
            if id(step) in self.in_heads:  # made by the head group's pass, at its first 1x1
                self._free(step, lent)
                continue
            if id(step) in self.heads:
                self.node = step.node
                self._heads(*self.heads[id(step)])
                self._free(step, lent)
                continue
            if id(step) in self.prologue:  # no dispatch, no slot: its input lives on until the convolution reads it
                self._deferred[id(self.prologue[id(step)])] = tuple(step.frees)
                continue
            if id(step) in self.pool_before:  # the same for a pool the 1x1 after it takes
                self._deferred[id(self.pool_before[id(step)])] = tuple(step.frees)
                continue
            storage = prog.storage(step.out)
            self._check_size(step.out)
            if storage not in self.slot_of:
                self.slot_of[storage] = self.slots.take(prog.values[storage].nbytes)
            fusion = self.fused.get(id(step))
            if fusion is not None:  # the folded step's output takes this slot: the convolution writes it
                self.slot_of[prog.storage(fusion.step.out)] = self.slot_of[storage]
                lent.add(storage)
            self.node = step.node
            if id(step) in folded:
                self._free(step, lent)
                continue
            try:
                handler = _handler(type(step))
                if handler is None:
                    raise PlanError(f"no GPU kernel for {step.op}")
                handler(self, step, ("slot", self.slot_of[storage]))
            except PlanError as e:
                raise PlanError(f"{step.op} '{step.node}': {e}") from None
            self._free(step, lent)
        self._place_outputs()
        return out

    def _free(self, step: P.Step, lent: set[int]) -> None:
        for f in (*step.frees, *self._deferred.pop(id(step), ())):
            if f in self.slot_of and f not in lent:
                self.slots.give(self.slot_of[f])

    def _place_outputs(self) -> None:
        prog = self.prog
        offset = 0
        for name, vid in prog.outputs:
            v = prog.values[vid]
            if v.kind == "const":
                self.out.outputs.append(Placed(name, vid, None, 0))
                continue
            storage = prog.storage(vid)
            if storage not in self.slot_of:
                raise PlanError(f"output '{name}' was never made")
            self.out.outputs.append(Placed(name, vid, self.slot_of[storage], offset, self.at_of.get(storage, 0)))
            offset += v.nbytes
        self.out.staging_bytes = max(16, offset)

    # ---- values
    def _check_size(self, vid: int) -> None:
        v = self.prog.values[vid]
        if v.nbytes > self.limits.max_binding:
            raise PlanError(f"value '{v.name}' ({v.nbytes >> 20} MiB) exceeds the device's largest binding "
                            f"({self.limits.max_binding >> 20} MiB)")

    def _read(self, vid: int):
        v = self.prog.values[vid]
        if v.kind == "const":
            return self._const_of(f"const {v.name}", (v.data,), (), lambda: v.data)
        storage = self.prog.storage(vid)
        if storage not in self.slot_of:
            raise PlanError(f"step reads '{v.name}' before it is made")
        return ("slot", self.slot_of[storage])

    def _const(self, role: str, data) -> object:
        return self.const(role, np.asarray(data))

    def _const_of(self, role: str, sources: tuple, extra: tuple, make) -> object:
        """The buffer of make()'s data, derived from the arrays (or activations) `sources` and the values `extra`
        alone."""
        if self._derived is None:
            return self._const(role, make())
        return self._derived(role, sources, extra, lambda: np.asarray(make()))

    def _add(self, kernel: K.Kernel, values: dict, reads: list, out, groups, plan=None, mask=None,
             also: tuple[str, ...] = (), per_item: tuple[int, int] | None = None) -> None:
        """mask: (oh, ow, position stride, channels) of a convolution's output that this dispatch writes through
        `finish`: its mask fields describe that layout, so a run may mask the output past a photo's rows and columns
        (each batch item's own, masking.item_params). also: the
        nodes of other steps whose work this dispatch does (Dispatch.also). per_item: (inner, units) where the
        dispatch's workgroups take a batch program's items in order (items.py; kept only where the program keeps its
        items apart)."""
        if mask is not None:
            oh, ow, stride, channels = mask
            values = dict(values, mask_p=stride, mask_ohw=oh * ow, mask_ow=ow)
            mask = (oh, ow, channels * oh * ow)
        params = kernel.layout.pack_dict(values)
        reads = list(reads) + [None] * (len(K.READ_BINDINGS) - len(reads))
        self.out.dispatches.append(Dispatch(kernel, params, reads, out, (groups[0], groups[1]), self.node, plan,
                                            mask, also, per_item if self.items else None))
        kernels = self.out.kernels
        kernels[kernel.stem] = kernels.get(kernel.stem, 0) + 1

    def _flat(self, kernel: K.Kernel, count: int, values: dict, reads: list, out) -> None:
        """A one-thread-per-value kernel over `count` values."""
        gx, gy, row = flat_grid(count, self.limits)
        # a thread per output value in order: a batch's items in order where that is the step's output
        per_item = (1, gx * gy) if kernel in _BY_OUTPUT_VALUE else None
        self._add(kernel, dict(values, row=row), reads, out, (gx, gy), per_item=per_item)

    # ---- steps
    def _elementwise(self, st: P.Unary | P.Affine, out) -> None:
        shape = self.prog.values[st.out].shape
        channels, plane = channels_of(shape)
        coef = []
        affine = isinstance(st, P.Affine)
        if affine:
            coef += _scale_shift(st)
            if coef[0].size != channels or coef[1].size != channels:
                raise PlanError("an affine step's scale/shift do not match its channels")
        slope_at = sum(c.size for c in coef)
        act = getattr(st, "act", None)
        if act is not None and act.kind == "prelu":
            coef.append(channel_slopes(act, channels))
        sources = (st.scale, st.shift, act) if affine else (act,)
        reads = [self._read(st.x), self._const_of("coef", sources, (channels,), lambda: np.concatenate(coef)) if coef
                 else None]
        total = prod(shape)
        p = dict(total=total, plane=max(plane, 1), channels=max(channels, 1), affine=int(affine))
        p.update(K.act_params(act, channels, slope_at))
        self._flat(K.UNARY, total, p, reads, out)

    def _binary(self, st: P.Binary, out) -> None:
        values = self.prog.values
        shape = values[st.out].shape
        if st.kind not in K.BINARY_CODES:
            raise PlanError(f"binary '{st.kind}'")
        sa = broadcast_strides(shape, values[st.a].shape)
        sb = broadcast_strides(shape, values[st.b].shape)
        dims, (ma, mb, _) = merge_dims(shape, sa, sb, contiguous_strides(shape))
        channels, plane = channels_of(shape)
        coef = None
        act = getattr(st, "act", None)  # a Binary may carry a fused activation
        if act is not None and act.kind == "prelu":
            coef = self._const_of("coef", (act,), (channels,), lambda: channel_slopes(act, channels))
        total = prod(shape)
        p = dict(total=total, plane=max(plane, 1), channels=max(channels, 1), op=K.BINARY_CODES[st.kind],
                 shape=padded(dims, 1) + [1, 1], sa=padded(ma, 0) + [0, 0], sb=padded(mb, 0) + [0, 0])
        p.update(K.act_params(act, channels, 0))
        self._flat(K.BINARY, total, p, [self._read(st.a), self._read(st.b), coef], out)

    def _copy(self, src_ref, shape, src_strides, src0, dst_strides, dst0, out) -> None:
        dims, (ss, ds) = merge_dims(shape, src_strides, dst_strides)
        total = prod(shape)
        # a negative stride (a Slice with a negative step) goes in as its u32 two's complement: the kernel's u32
        # index arithmetic wraps, so the sum lands on the right element (the bounds are checked in _strided)
        src = [s % (1 << 32) for s in padded(ss, 0)]
        p = dict(total=total, src0=src0, dst0=dst0, shape=padded(dims, 1) + [1, 1], src=src + [0, 0],
                 dst=padded(ds, 0) + [0, 0])
        self._flat(K.COPY, total, p, [src_ref], out)

    def _strided(self, st: P.Copy, out) -> None:
        shape = self.prog.values[st.out].shape
        lowest = st.offset + sum((d - 1) * s for d, s in zip(shape, st.strides) if s < 0)
        highest = st.offset + sum((d - 1) * s for d, s in zip(shape, st.strides) if s > 0)
        if lowest < 0 or highest >= self.prog.values[st.x].size:
            raise PlanError("a copy reads past its input")
        self._copy(self._read(st.x), shape, st.strides, st.offset, contiguous_strides(shape), 0, out)

    def _concat(self, st: P.Concat, out) -> None:
        values = self.prog.values
        shape = values[st.out].shape
        axis = st.axis % len(shape)
        dst = contiguous_strides(shape)
        at = 0
        for x in st.xs:
            xs = values[x].shape
            self._copy(self._read(x), xs, contiguous_strides(xs), 0, dst, at * dst[axis], out)
            at += xs[axis]

    def _pool(self, st: P.Pool, out) -> None:
        _, _, h, w = self.prog.values[st.x].shape
        shape = self.prog.values[st.out].shape
        _, _, oh, ow = shape
        top, left, bottom, right = st.pads
        total = prod(shape)
        if st.kind not in K.POOL_CODES:
            raise PlanError(f"pool '{st.kind}'")
        p = dict(total=total, kind=K.POOL_CODES[st.kind], include_pad=int(st.count_include_pad), h=h, w=w, oh=oh,
                 ow=ow, kh=st.kernel[0], kw=st.kernel[1], sh=st.stride[0], sw=st.stride[1], dh=st.dilation[0],
                 dw=st.dilation[1], pt=top, pl=left, pb=bottom, pr=right, empty=NEG_INF_BITS)
        self._flat(K.POOL, total, p, [self._read(st.x)], out)

    def _global_avg(self, st: P.GlobalAvgPool, out) -> None:
        xs = self.prog.values[st.x].shape
        planes, plane = prod(xs[:2]), prod(xs[2:])
        gx, gy, row = grid(planes, self.limits)  # one workgroup per plane
        self._add(K.GLOBAL_AVG, dict(planes=planes, plane=max(plane, 1), row=row), [self._read(st.x)], out, (gx, gy))

    def _resize(self, st: P.Resize, out) -> None:
        xs = self.prog.values[st.x].shape
        shape = self.prog.values[st.out].shape
        maps = np.concatenate([np.asarray(st.src_y, np.int64), np.asarray(st.src_x, np.int64)])
        if maps.size and (maps.min() < 0 or st.src_y.max() >= xs[-2] or st.src_x.max() >= xs[-1]):
            raise PlanError("a resize index map points outside its input")
        total = prod(shape)
        fused = self.fused.get(id(st))  # the Add after it, folded in: its other operand added as it is written
        addend = self._read(fused.addend) if fused is not None and fused.addend is not None else None
        p = dict(total=total, h=xs[-2], w=xs[-1], oh=shape[-2], ow=shape[-1], add=int(addend is not None))
        reads = [self._read(st.x), self._const("resize maps", maps.astype(np.uint32)), addend]
        self._flat(K.RESIZE, total, p, reads, out)

    def _linear_resize(self, st: P.LinearResize, out) -> None:
        xs = self.prog.values[st.x].shape
        shape = self.prog.values[st.out].shape
        maps = np.concatenate([np.asarray(m, np.int64) for m in (st.y0, st.y1, st.x0, st.x1)])
        if maps.size and (maps.min() < 0 or max(st.y0.max(), st.y1.max()) >= xs[-2]
                          or max(st.x0.max(), st.x1.max()) >= xs[-1]):
            raise PlanError("a resize index map points outside its input")
        weights = np.concatenate([np.asarray(st.wy, np.float32), np.asarray(st.wx, np.float32)])
        total = prod(shape)
        p = dict(total=total, h=xs[-2], w=xs[-1], oh=shape[-2], ow=shape[-1])
        reads = [self._read(st.x), self._const("resize maps", maps.astype(np.uint32)),
                 self._const("resize weights", weights)]
        self._flat(K.LINEAR_RESIZE, total, p, reads, out)

    def _pad(self, st: P.Pad, out) -> None:
        xs = self.prog.values[st.x].shape
        shape = self.prog.values[st.out].shape
        rank = len(shape)
        if rank > 6:
            raise PlanError("a pad of more than 6 dimensions")
        if st.mode not in K.PAD_CODES:
            raise PlanError(f"pad mode '{st.mode}'")
        step = [g + 1 for g in st.interior] if st.interior else [1] * rank
        dims = [(d - 1) * g + 1 if d else 0 for d, g in zip(xs, step)]
        lead = 6 - rank  # padded in front: size-1 axes with nothing before
        p = dict(total=prod(shape), mode=K.PAD_CODES[st.mode], value=float(st.value),
                 shape=[1] * lead + list(shape) + [1, 1], dims=[1] * lead + dims + [1, 1],
                 before=[0] * lead + list(st.before) + [0, 0], step=[1] * lead + step + [1, 1],
                 src=[0] * lead + list(contiguous_strides(xs)) + [0, 0])
        self._flat(K.PAD, prod(shape), p, [self._read(st.x)], out)

    def _reduce(self, st: P.Reduce, out) -> None:
        if st.kind not in K.REDUCE_CODES:
            raise PlanError(f"reduction '{st.kind}'")
        if st.n == 0:
            raise PlanError("a reduction over no values")
        count = st.outer * st.inner
        p = dict(count=count, n=st.n, inner=st.inner, kind=K.REDUCE_CODES[st.kind])
        self._flat(K.REDUCE, count, p, [self._read(st.x)], out)

    def _softmax(self, st: P.Softmax, out) -> None:
        count = st.outer * st.inner
        self._flat(K.SOFTMAX, count, dict(count=count, n=st.n, inner=st.inner), [self._read(st.x)], out)

    def _matmul(self, st: P.MatMul, out) -> None:
        values = self.prog.values
        shape = values[st.out].shape
        sa, sb = values[st.a].shape, values[st.b].shape
        a2 = (1,) + sa if len(sa) == 1 else sa
        b2 = sb + (1,) if len(sb) == 1 else sb
        m, k = a2[-2], a2[-1]
        n = b2[-1]
        if b2[-2] != k:
            raise PlanError("matmul shapes do not line up")
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        if len(batch) > 4:
            raise PlanError("a matmul with more than 4 batch dimensions")
        ba = broadcast_strides(batch, tuple(a2[:-2])) if batch else ()
        bb = broadcast_strides(batch, tuple(b2[:-2])) if batch else ()
        ba = tuple(s * m * k for s in ba)
        bb = tuple(s * k * n for s in bb)
        total = prod(shape)
        p = dict(total=total, m=m, n=n, k=k, a_row=k, a_k=1, b_k=n, b_col=1,
                 batch=padded(batch, 1, 4), sa=padded(ba, 0, 4), sb=padded(bb, 0, 4))
        self._flat(K.MATMUL, total, p, [self._read(st.a), self._read(st.b)], out)

    def _gemm(self, st: P.Gemm, out) -> None:
        m, k = self.prog.values[st.x].shape
        n = st.weight.shape[0]
        plan = plan_gemm(m, k, n, self.limits)
        if plan.kernel == "tiled":  # a batch of m 1x1 images of k channels
            shape = ConvShape(batch=m, cin=k, h=1, w=1, cout=n, oh=1, ow=1)
            self._conv_dispatch(shape, plan.conv, st.weight.reshape(n, k, 1, 1), st.bias, st.act, self._read(st.x),
                                None, out, source=st.weight)
            return
        p = _epilogue_fields(st.act, st.bias, None, n)
        p.update(m=m, n=n, kl=k // 4 if plan.vec4 else k, count=plan.workgroups, row=plan.grid[2])
        reads = [self._read(st.x), self._const_of("gemm weights", (st.weight,), (), lambda: st.weight),
                 self._epilogue(st.bias, st.act, n)]
        self._add(K.gemm_kernel(plan), p, reads, out, plan.grid[:2], plan)
        self.out.conv_plans.append((st.node, f"gemv rows {plan.rows_per_group}"))

    def _conv(self, st: P.Conv, out) -> None:
        if id(st) in self.separable:
            self._separable(st, out)
            return
        shape = conv_shape(self.prog, st)
        plan = plan_conv(shape, self.limits, **self.force)
        res = self._read(st.residual) if st.residual is not None else None
        fused = self.fused.get(id(st))
        act = fused.act if fused is not None and fused.act is not None else st.act
        nhwc = fused is not None and fused.nhwc
        if isinstance(plan, WinogradPlan):
            norm = self.norm_of.get(id(st))
            x_ref = self._read(st.x if norm is None else norm.x)
            self._winograd(shape, plan, st.weight, st.bias, act, x_ref, res, out, nhwc, norm)
            return
        pool = self.pool_of.get(id(st))
        if pool is not None:  # the tiled 1x1 reads the pool's input, taking each 2x2 window's largest value
            self.out.conv_plans.append((pool.node, f"in {st.node}'s reads"))
            _, _, h, w = self.prog.values[pool.x].shape
            self._conv_dispatch(dataclasses.replace(shape, h=h, w=w), plan, st.weight, st.bias, act,
                                self._read(pool.x), res, out, nhwc, also=(pool.node,))
            return
        self._conv_dispatch(shape, plan, st.weight, st.bias, act, self._read(st.x), res, out, nhwc)

    def _separable(self, pw: P.Conv, out) -> None:
        """A 1x1 convolution and the depthwise 3x3 reading it (with the depthwise's own folded activation or NHWC
        transpose) in one dispatch of separable.wgsl, writing the depthwise's output."""
        dw, plan = self.separable[id(pw)]
        s = conv_shape(self.prog, dw)
        fused = self.fused.get(id(dw))
        act = fused.act if fused is not None and fused.act is not None else dw.act
        nhwc = fused is not None and fused.nhwc
        pool = self.pool_of.get(id(pw))  # a 2x2 max pool the 1x1 takes as it reads its input
        x = pw.x if pool is None else pool.x
        _, cin, xh, xw = self.prog.values[x].shape
        layout = _out_strides(s.cout, s.oh * s.ow, nhwc)
        p = _epilogue_fields(act, dw.bias, dw.residual, s.cout)
        p.update(layout, count=plan.workgroups, row=plan.grid[2], cin=cin, cout=s.cout, h=s.oh, w=s.ow, xw=xw,
                 xhw=xh * xw, th=plan.th,
                 tw=plan.tw, tiles_x=plan.tiles_x, tiles=plan.tiles, blocks=plan.blocks,
                 pw_bias=0 if pw.bias is None else plan.blocks * plan.quads * cin, heads=NO_HEADS)
        pw_buf = self._const_of("separable 1x1 weights", (pw.weight, pw.bias), (plan.blocks, plan.quads),
                                lambda: pack_separable(pw.weight, pw.bias, plan.blocks, plan.quads))
        dw_buf = self._const_of("separable depthwise weights", (dw.weight,), (plan.blocks, plan.quads),
                                lambda: pack_depthwise_quads(dw.weight, plan.blocks, plan.quads))
        res = self._read(dw.residual) if dw.residual is not None else None
        reads = [self._read(x), pw_buf, self._epilogue(dw.bias, act, s.cout), res, dw_buf]
        if pool is not None:
            self.out.conv_plans.append((pool.node, f"in {pw.node}'s reads"))
        self.out.conv_plans.append((pw.node, plan.describe()))
        self.out.conv_plans.append((dw.node, f"in {pw.node}'s pass"))
        self._add(K.separable(plan.quads, pool is not None), p, reads, out, plan.grid[:2], plan,
                  (s.oh, s.ow, layout["out_p"], s.cout),
                  also=(dw.node,) if pool is None else (pool.node, dw.node),
                  per_item=(plan.tiles * plan.blocks, s.batch))

    def _folded_after(self, dw: P.Conv) -> tuple[P.Step, ...]:
        """The step folded into a depthwise's output (a sigmoid, an NHWC transpose), if any."""
        fused = self.fused.get(id(dw))
        return () if fused is None else (fused.step,)

    def _heads_plan(self, group: tuple[Head, ...]) -> SeparablePlan | None:
        """The separable plan of a head group's pass (its 1x1s' output channels in one), or None where a member does
        not run as a separable pass alone or the whole does not fit one."""
        if any(id(h.pw) not in self.separable or id(h.pw) in self.pool_of for h in group):
            return None
        cout = sum(h.pw.weight.shape[0] for h in group)
        pw = dataclasses.replace(conv_shape(self.prog, group[0].pw), cout=cout)
        dw = dataclasses.replace(conv_shape(self.prog, group[0].dw), cin=cout, cout=cout, groups=cout)
        return plan_separable(pw, dw, self.limits)

    def _heads(self, group: tuple[Head, ...], plan: SeparablePlan) -> None:
        """A head group in one dispatch of separable.wgsl (HEADS): the 1x1s' weights stacked into one of all their
        channels, the shared input read once, and each head's channels written to its own output with its own
        layout and activation. The outputs share one slot, each at a HEAD_ALIGN-aligned byte offset."""
        prog, values = self.prog, self.prog.values
        s = conv_shape(prog, group[0].dw)
        ohw = s.oh * s.ow
        widths = [h.pw.weight.shape[0] for h in group]
        cout = sum(widths)
        ats, size = [], 0
        for h in group:
            ats.append(size)
            size += -(-values[h.out].nbytes // HEAD_ALIGN) * HEAD_ALIGN
        slot = self.slots.take(size)
        for h, at in zip(group, ats):
            storage = prog.storage(h.out)
            self.slot_of[storage] = slot
            self.at_of[storage] = at
        def row(per_head, past=0):  # one vec4 of the Params' head table: a value a head, `past` for the slots left
            per_head = list(per_head)
            return per_head + [past] * (HEADS_MAX - len(per_head))

        strides = [_out_strides(c, ohw, h.nhwc) for h, c in zip(group, widths)]
        table = (row((sum(widths[:k]) for k in range(len(group))), past=0xFFFFFFFF) + row(at // 4 for at in ats)
                 + row(t["out_b"] for t in strides) + row(t["out_c"] for t in strides)
                 + row(t["out_p"] for t in strides) + row(K.ACT_CODES[h.act and h.act.kind] for h in group))
        act = next((h.act for h in group if h.act is not None), None)
        pws, dws = [h.pw for h in group], [h.dw for h in group]
        has_bias = any(d.bias is not None for d in dws)
        p = _epilogue_fields(act, True if has_bias else None, None, cout)
        _, cin, xh, xw = values[group[0].pw.x].shape
        p.update(_out_strides(cout, ohw, False), count=plan.workgroups, row=plan.grid[2], cin=cin, cout=cout,
                 h=s.oh, w=s.ow, xw=xw, xhw=xh * xw, th=plan.th, tw=plan.tw, tiles_x=plan.tiles_x, tiles=plan.tiles,
                 blocks=plan.blocks, heads=table,
                 pw_bias=plan.blocks * plan.quads * cin if any(w.bias is not None for w in pws) else 0)

        def stacked(arrays, shape_of):
            return np.concatenate([np.zeros(shape_of(c), np.float32) if a is None else np.asarray(a, np.float32)
                                   for a, c in zip(arrays, widths)])

        sources = tuple(a for w in pws for a in (w.weight, w.bias))
        pw_buf = self._const_of("head group 1x1 weights", sources, (plan.blocks, plan.quads),
                                lambda: pack_separable(stacked([w.weight for w in pws], None),
                                                       stacked([w.bias for w in pws], lambda c: (c,)),
                                                       plan.blocks, plan.quads))
        dw_buf = self._const_of("head group depthwise weights", tuple(d.weight for d in dws),
                                (plan.blocks, plan.quads),
                                lambda: pack_depthwise_quads(stacked([d.weight for d in dws], None), plan.blocks,
                                                             plan.quads))
        epi_buf = self._const_of("head group epilogue", tuple(d.bias for d in dws), (cout,),
                                 lambda: stacked([d.bias for d in dws], lambda c: (c,)))
        for h in group:
            self.out.conv_plans.append((h.pw.node, f"{plan.describe()}, {len(group)} heads in one pass"))
            self.out.conv_plans.append((h.dw.node, f"in {group[0].pw.node}'s pass"))
        also = tuple(st.node for h in group for st in (h.pw, h.dw) if st is not group[0].pw)
        self._add(K.separable(plan.quads, heads=True), p, [self._read(group[0].pw.x), pw_buf, epi_buf, None, dw_buf],
                  ("slot", slot), plan.grid[:2], plan, (s.oh, s.ow, 1, cout), also=also,
                  per_item=(plan.tiles * plan.blocks, s.batch))

    def _epilogue(self, bias, act, cout: int):
        """The buffer of a convolution's bias and PReLU slopes."""
        return self._const_of("epilogue", (bias, act), (cout,), lambda: epilogue_data(cout, bias, act)[0])

    def _winograd(self, s: ConvShape, plan: WinogradPlan, weight, bias, act, x_ref, res_ref, out, nhwc,
                  norm: P.Affine | None = None) -> None:
        """The input transform into (m+2)² planes, their products (the tiled pointwise kernel, one group each, on the
        transformed weights) and the output transform with the epilogue; each dispatch carries the whole plan, so a
        check forcing it runs all three. `norm`: a batch norm folded into the input transform (x_ref is its input)."""
        self.out.conv_plans.append((self.node, plan.describe() + (", batch norm folded in" if norm else "")))
        cout, t, e = s.cout, plan.tiles, plan.planes
        half = self.half
        g = plan.gemm
        # the products are f16 too where one pass writes them (a split's partial sums and its reduce stay f32)
        half_products = half and not g.partial  # at f16 the products are stored as f16 too, unless split
        into, back = K.winograd_transforms(plan, affine=norm is not None, half=half, half_products=half_products)
        coef = None
        if norm is not None:
            coef = self._const_of("coef", (norm.scale, norm.shift), (s.cin,),
                                  lambda: np.concatenate(_scale_shift(norm)))
        p = _epilogue_fields(act, bias, res_ref, cout)
        p.update(_out_strides(cout, s.oh * s.ow, nhwc), cin=s.cin, cout=cout, h=s.h, w=s.w, oh=s.oh, ow=s.ow,
                 pt=s.pads[0], pl=s.pads[1], th=plan.th, tw=plan.tw, tiles=t)
        epi_buf = self._epilogue(bias, act, cout)
        planes = self.slots.take(e * s.cin * t * (2 if half else 4))
        gx, gy, row = plan.input_grid
        self._add(into, dict(p, count=s.cin * t, row=row), [x_ref, coef], ("slot", planes), (gx, gy), plan)
        products = self.slots.take(e * cout * t * (2 if half_products else 4))
        stored = np.float16 if half else np.float32
        wbuf = self._const_of(f"winograd {plan.m} weights" + (" f16" if half else ""), (weight,), (g.kpad, g.mpad),
                              lambda: pack_conv_weights(winograd_weights(weight, plan.m), e, g.kpad,
                                                        g.mpad).astype(stored))
        gemm = ConvShape(batch=1, cin=e * s.cin, h=1, w=t, cout=e * cout, oh=1, ow=t, groups=e)
        self._conv_dispatch(gemm, g, None, None, None, ("slot", planes), None, ("slot", products), wbuf=wbuf,
                            owner=plan, half=half, half_out=half_products, final=False)
        self.slots.give(planes)
        gx, gy, row = plan.output_grid
        self._add(back, dict(p, count=cout * t, row=row), [("slot", products), None, epi_buf, res_ref],
                  out, (gx, gy), plan, mask=(s.oh, s.ow, cout if nhwc else 1, cout))
        self.slots.give(products)

    def _conv_dispatch(self, s: ConvShape, plan: ConvPlan, weight, bias, act, x_ref, res_ref, out,
                       nhwc: bool = False, source=None, wbuf=None, owner=None, half: bool = False,
                       half_out: bool = False, final: bool = True, also: tuple[str, ...] = ()) -> None:
        """`source`: the array `weight` is a view of (the identity its derived buffers are kept by). `wbuf`: the
        packed weights when the caller made them (Winograd's products); `owner`: the plan the dispatches carry when
        this convolution is part of another's (Winograd's), which then also names it in `conv_plans`. final: `out`
        is a convolution's output (not Winograd's products), which a run may mask. also: a 2x2 max pool's node the
        tiled 1x1 takes as it reads (`s` then has the pool's input rows and columns)."""
        source = weight if source is None else source
        owner = owner or plan
        cout, oh, ow = s.cout, s.oh, s.ow
        ohw = oh * ow
        total = s.batch * cout * ohw
        nchw = _out_strides(cout, ohw, False)
        layout = _out_strides(cout, ohw, nhwc)
        epi_buf = self._epilogue(bias, act, cout)
        if owner is plan:
            self.out.conv_plans.append((self.node, plan.describe()))
        kernel = K.conv_kernel(plan, half, half_out, pooled=bool(also))
        # the fields every convolution kernel takes, built in one dict (this runs for every layer of every new size)
        (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.stride, s.dilation
        common = _epilogue_fields(act, bias, res_ref, cout)
        common.update(cin=s.cin, cg=s.cin // s.groups, cout=cout, h=s.h, w=s.w, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh,
                      dw=dw, pt=s.pads[0], pl=s.pads[1], total=total, row=plan.grid[2], m=cout // s.groups, ow=ow)
        mask = (oh, ow, layout["out_p"], cout) if final else None
        if plan.tile is None:  # direct or depthwise: the weights as the model has them
            p = common
            p.update(layout, oh=oh, splits=1, quads=plan.threads if plan.kernel == "depthwise" else 0)
            reads = [x_ref, self._const_of("conv weights", (source,), (), lambda: weight), epi_buf, res_ref]
            gx, gy = plan.grid[:2]  # a thread per output value (or four of a row), the batch item slowest
            self._add(kernel, p, reads, out, (gx, gy), plan, mask, per_item=(1, gx * gy))
            return
        if wbuf is None:
            wbuf = self._const_of("packed conv weights", (source,), (s.groups, plan.kpad, plan.mpad),
                                  lambda: pack_conv_weights(np.asarray(weight, np.float32), s.groups, plan.kpad,
                                                            plan.mpad))
        p = dict(common, n=s.batch * ohw, k=s.k, kpad=plan.kpad, mpad4=plan.mpad // 4, ohw=ohw, k_chunk=plan.k_chunk,
                 splits=plan.splits, tiles_m=plan.tiles_m, tiles_n=plan.tiles_n, count=plan.workgroups)
        # split K: the partial sums stay NCHW, the reduce pass writes the layout
        taps = None if plan.pointwise else self._const_of("im2col taps", (), (s.cg, s.kernel, s.dilation),
                                                          lambda: im2col_taps(s))
        if not plan.partial:
            p.update(layout)
            # output-channel tiles fastest, then column tiles over batch x positions: the items in order
            per_item = (plan.tiles_m, plan.tiles_n) if final and plan.splits == 1 and s.groups == 1 else None
            self._add(kernel, p, [x_ref, wbuf, epi_buf, res_ref, taps], out, plan.grid[:2], owner, mask, also,
                      per_item=per_item)
            return
        # split K: partial sums into a scratch slot, then the ordered reduce applies the epilogue
        scratch = self.slots.take(plan.splits * total * 4)
        p.update(nchw)
        self._add(kernel, p, [x_ref, wbuf, epi_buf, None, taps], ("slot", scratch), plan.grid[:2], owner, None, also)
        rx, ry, rrow = plan.reduce_grid
        rp = dict(common, row=rrow, oh=oh, splits=plan.splits, quads=0)
        rp.update(layout)
        self._add(K.SPLIT_REDUCE, rp, [("slot", scratch), None, epi_buf, res_ref], out, (rx, ry), owner, mask)
        self.slots.give(scratch)


def _scale_shift(norm: P.Affine) -> list[np.ndarray]:
    """An affine step's scales and shifts, flat float32: the front of its coefficient buffer."""
    return [np.asarray(norm.scale, np.float32).reshape(-1), np.asarray(norm.shift, np.float32).reshape(-1)]


def _epilogue_fields(act, bias, res_ref, cout: int) -> dict:
    """The Params fields of a convolution's epilogue (epilogue.wgsl `finish`): its flags and activation."""
    p = K.act_params(act, cout, cout if act is not None and act.kind == "prelu" else 0)
    p.update(has_bias=int(bias is not None), has_res=int(res_ref is not None), vh=0, vw=0, mask_p=0, mask_ohw=0,
             mask_ow=0, mask_items=0)
    return p


def _out_strides(cout: int, ohw: int, nhwc: bool) -> dict:
    """Element strides of batch, channel and position in a convolution's output: NCHW, or NHWC (a folded
    transpose)."""
    return dict(out_b=ohw * cout, out_c=1, out_p=cout) if nhwc else dict(out_b=cout * ohw, out_c=ohw, out_p=1)


def _handler(kind: type):
    """The lowering of a step type (its own, else its nearest base's), found once per type."""
    found = _BY_TYPE.get(kind)
    if found is None:
        found = next((LOWERINGS[c] for c in kind.__mro__ if c in LOWERINGS), None)
        if found is not None:
            _BY_TYPE[kind] = found
    return found


# Each step kind's lowering (a method of _Lowering). A new step kind is one entry here (and in cpu.KERNELS,
# bench/torch_peer.py's OPS, and gpu/masking.py's RULES where it may run masked), with its kernel in kernels.py.
LOWERINGS = {
    P.Conv: _Lowering._conv,
    P.Gemm: _Lowering._gemm,
    P.Unary: _Lowering._elementwise,
    P.Affine: _Lowering._elementwise,
    P.Binary: _Lowering._binary,
    P.Copy: _Lowering._strided,
    P.Concat: _Lowering._concat,
    P.Pool: _Lowering._pool,
    P.GlobalAvgPool: _Lowering._global_avg,
    P.Resize: _Lowering._resize,
    P.LinearResize: _Lowering._linear_resize,
    P.Pad: _Lowering._pad,
    P.Reduce: _Lowering._reduce,
    P.Softmax: _Lowering._softmax,
    P.MatMul: _Lowering._matmul,
}
_BY_TYPE: dict[type, Callable] = {}
