"""Whole programs on the GPU: one command encoder, one compute pass, one submission and one read-back per run.

`GpuModel` is one loaded model's GPU side. The first run of a program compiles it (`GpuProgram`): every step becomes
one or two dispatches with their parameters in one uniform buffer, the activation values are given buffers by
lifetime (a freed value's buffer is reused by a later one: best fit, growing a smaller free buffer before adding
one; views alias their base), and the bind groups are made once. A re-run writes the inputs, records a fresh encoder
from the cached bind groups (cheap), submits and reads all outputs back through one staging buffer.

Weights and constants stay on the device per model while they fit its byte budget (default 768 MiB,
FACERUN_GPU_BUDGET_MB); past it, they are uploaded for each run. A step beyond the device's limits (binding size,
grid) raises GpuError at compile time, so the caller runs the program on the CPU instead, with the reason.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from math import prod

import numpy as np

from .. import program as P
from ..errors import GpuError
from . import device as D
from . import kernels as K
from . import pace
from .plan import (
    ConvShape,
    Limits,
    PlanError,
    broadcast_strides,
    contiguous_strides,
    flat_grid,
    grid,
    merge_dims,
    padded,
    plan_conv,
    plan_gemm,
)

DEFAULT_BUDGET_MB = 768
NEG_INF_BITS = 0xFF800000


def budget_bytes(budget_mb: float | None = None) -> int:
    """The resident-weight budget: the argument, else FACERUN_GPU_BUDGET_MB, else 768 MiB."""
    if budget_mb is None:
        env = os.environ.get("FACERUN_GPU_BUDGET_MB", "").strip()
        try:
            budget_mb = float(env) if env else DEFAULT_BUDGET_MB
        except ValueError:
            raise GpuError(f"FACERUN_GPU_BUDGET_MB={env} is not a number") from None
    return max(0, int(budget_mb * (1 << 20)))


class DoesNotFit(GpuError):
    """A program beyond this device's limits (a binding, a grid): it runs on the CPU; other programs may not."""


def _wgpu():
    import wgpu

    return wgpu


def _raw_pass_calls():
    """wgpu-native's compute-pass calls without wgpu-py's per-call error capture (which costs more than the call): a
    program of 250 dispatches encodes in a third of the time. Errors made while encoding a pass are reported by the
    device at finish/submit, where the runner watches for them. None if this wgpu build lacks them."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        return (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                lib.wgpuComputePassEncoderDispatchWorkgroups, ffi.NULL)
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------------- weights


def _aligned(a: np.ndarray) -> np.ndarray:
    """float32/uint32 data padded to a multiple of 16 bytes (vec4 bindings need it) and never empty."""
    a = np.ascontiguousarray(a).reshape(-1)
    pad = (-a.size) % 4 or (4 if a.size == 0 else 0)
    if pad:
        a = np.concatenate([a, np.zeros(pad, a.dtype)])
    return a


@dataclass
class Transient:
    """Data uploaded for each run (past the residency budget)."""

    data: np.ndarray


class WeightStore:
    """A model's weights and constants on the device, keyed by content, under a byte budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self.resident_bytes = 0
        self._buffers: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def get(self, dev: D.Device, role: str, data: np.ndarray):
        """A device buffer holding `data` (kept while the budget lasts), or a `Transient` to upload per run."""
        data = _aligned(data)
        key = (role, data.dtype.str, data.size, hashlib.blake2b(data.view(np.uint8), digest_size=16).digest())
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None:
                return buf
            if self.resident_bytes + data.nbytes > self.budget:
                return Transient(data)
            buf = dev.device.create_buffer_with_data(label=role, data=data, usage=_wgpu().BufferUsage.STORAGE)
            self._buffers[key] = buf
            self.resident_bytes += data.nbytes
            return buf


def pack_conv_weights(weight: np.ndarray, groups: int, kpad: int, mpad: int) -> np.ndarray:
    """OIHW weights as the tiled kernel reads them: per group, K-major [kpad][mpad], zero padded."""
    cout = weight.shape[0]
    m = cout // groups
    k = weight[0].size
    w = weight.reshape(groups, m, k).transpose(0, 2, 1)  # (g, K, M)
    out = np.zeros((groups, kpad, mpad), np.float32)
    out[:, :k, :m] = w
    return out


def im2col_taps(s: ConvShape) -> np.ndarray:
    """Per k = (ci, ky, kx) of a group: (ci * H * W, ky * dh, kx * dw, 0) as int32, for the tiled kernel's gather."""
    kh, kw = s.kernel
    ci, ky, kx = np.meshgrid(np.arange(s.cg), np.arange(kh), np.arange(kw), indexing="ij")
    t = np.zeros((s.k, 4), np.int32)
    t[:, 0] = (ci * s.h * s.w).reshape(-1)
    t[:, 1] = (ky * s.dilation[0]).reshape(-1)
    t[:, 2] = (kx * s.dilation[1]).reshape(-1)
    return t


def epilogue_data(cout: int, bias: np.ndarray | None, act: P.Activation | None) -> tuple[np.ndarray, int]:
    """The epilogue buffer: bias (zeros when none) then the prelu slopes; and where the slopes start."""
    parts = [np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)]
    slope_at = 0
    if act is not None and act.kind == "prelu":
        slope_at = cout
        parts.append(_slopes(act, cout))
    return np.concatenate(parts), slope_at


def _slopes(act: P.Activation, channels: int) -> np.ndarray:
    s = np.asarray(act.slope, np.float32).reshape(-1)
    if s.size == 1:
        return np.full(channels, s[0], np.float32)
    if s.size != channels:
        raise PlanError(f"a prelu with {s.size} slopes over {channels} channels")
    return s


def _channels(shape) -> tuple[int, int]:
    """(channels, values per channel) of an NCHW-like shape, for per-channel coefficients."""
    if len(shape) < 2:
        return 1, 1
    return shape[1], prod(shape[2:])


# ------------------------------------------------------------------------------------------- buffer planning


class SlotPlanner:
    """Assigns activation buffers by lifetime at compile time: a freed slot is reused by a later value (the smallest
    free one that fits; else the largest free one, grown; else a new one)."""

    def __init__(self):
        self.sizes: list[int] = []
        self.free: list[int] = []

    def take(self, nbytes: int) -> int:
        nbytes = max(16, -(-nbytes // 16) * 16)
        fits = [s for s in self.free if self.sizes[s] >= nbytes]
        if fits:
            slot = min(fits, key=lambda s: self.sizes[s])
        elif self.free:
            slot = max(self.free, key=lambda s: self.sizes[s])
            self.sizes[slot] = nbytes
        else:
            self.sizes.append(nbytes)
            return len(self.sizes) - 1
        self.free.remove(slot)
        return slot

    def give(self, slot: int) -> None:
        if slot not in self.free:
            self.free.append(slot)

    @property
    def total(self) -> int:
        return sum(self.sizes)


@dataclass
class Dispatch:
    kernel: K.Kernel
    params: bytes
    reads: list  # bindings 1-4 and 6: ("slot", i) | a buffer | Transient | None
    out: tuple  # ("slot", i)
    groups: tuple[int, int]


# --------------------------------------------------------------------------------------------------- compile


class GpuProgram:
    """A program compiled for the device: dispatches, buffers and bind groups, ready to run again and again."""

    def __init__(self, dev: D.Device, prog: P.Program, weights: WeightStore, force: dict | None = None):
        self.dev = dev
        self.force = force or {}  # tests and tuning: plan_conv's force_splits / force_tile for every convolution
        self.prog = prog
        self.weights = weights
        self.limits: Limits = dev.limits
        self.slots = SlotPlanner()
        self.slot_of: dict[int, int] = {}  # storage -> slot
        self.dispatches: list[Dispatch] = []
        self.kernels: dict[str, int] = {}  # kernel kind -> dispatches (for descriptions)
        self.conv_plans: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._compile()
        self._build()

    # ---- values
    def _check_size(self, vid: int) -> None:
        v = self.prog.values[vid]
        if v.nbytes > self.limits.max_binding:
            raise PlanError(f"value '{v.name}' ({v.nbytes >> 20} MiB) exceeds the device's largest binding "
                            f"({self.limits.max_binding >> 20} MiB)")

    def _read(self, vid: int):
        v = self.prog.values[vid]
        if v.kind == "const":
            return self.weights.get(self.dev, f"const {v.name}", v.data)
        storage = self.prog.storage(vid)
        if storage not in self.slot_of:
            raise PlanError(f"step reads '{v.name}' before it is made")
        return ("slot", self.slot_of[storage])

    def _const_buf(self, role: str, data) -> object:
        return self.weights.get(self.dev, role, np.asarray(data))

    def _add(self, kernel: K.Kernel, values: dict, reads: list, out, groups) -> None:
        params = kernel.params().pack(**values)
        reads = list(reads) + [None] * (len(K.READ_BINDINGS) - len(reads))
        self.dispatches.append(Dispatch(kernel, params, reads, out, (groups[0], groups[1])))
        name = kernel.file.split(".")[0]
        self.kernels[name] = self.kernels.get(name, 0) + 1

    def _compile(self) -> None:
        prog = self.prog
        for _, vid in prog.inputs:
            self._check_size(vid)
            self.slot_of[prog.storage(vid)] = self.slots.take(prog.values[vid].nbytes)
        for step in prog.steps:
            out = prog.storage(step.out)
            self._check_size(step.out)
            if out not in self.slot_of:
                self.slot_of[out] = self.slots.take(prog.values[out].nbytes)
            try:
                self._step(step, ("slot", self.slot_of[out]))
            except PlanError as e:
                raise PlanError(f"{step.op} '{step.node}': {e}") from None
            for f in step.frees:
                if f in self.slot_of:
                    self.slots.give(self.slot_of[f])
        keep = {prog.storage(v) for _, v in prog.outputs}
        self.outputs = []
        offset = 0
        for name, vid in prog.outputs:
            v = prog.values[vid]
            if v.kind == "const":
                self.outputs.append((name, vid, None, 0))
                continue
            storage = prog.storage(vid)
            if storage not in keep or storage not in self.slot_of:
                raise PlanError(f"output '{name}' was never made")
            self.outputs.append((name, vid, self.slot_of[storage], offset))
            offset += v.nbytes
        self.staging_bytes = max(16, offset)

    # ---- steps
    def _step(self, st: P.Step, out) -> None:
        values = self.prog.values
        shape = values[st.out].shape
        total = prod(shape)
        if isinstance(st, P.Conv):
            self._conv(st, out)
        elif isinstance(st, P.Gemm):
            self._gemm(st, out)
        elif isinstance(st, (P.Unary, P.Affine)):
            channels, plane = _channels(shape)
            coef = []
            affine = isinstance(st, P.Affine)
            if affine:
                coef += [np.asarray(st.scale, np.float32).reshape(-1), np.asarray(st.shift, np.float32).reshape(-1)]
                if coef[0].size != channels or coef[1].size != channels:
                    raise PlanError("an affine step's scale/shift do not match its channels")
            slope_at = sum(c.size for c in coef)
            act = getattr(st, "act", None)
            if act is not None and act.kind == "prelu":
                coef.append(_slopes(act, channels))
            reads = [self._read(st.x)]
            reads.append(self._const_buf("coef", np.concatenate(coef)) if coef else None)
            gx, gy, row = flat_grid(total, self.limits)
            p = dict(total=total, row=row, plane=max(plane, 1), channels=max(channels, 1), affine=int(affine))
            p.update(K.act_params(act, channels, slope_at))
            self._add(K.UNARY, p, reads, out, (gx, gy))
        elif isinstance(st, P.Binary):
            self._binary(st, shape, out)
        elif isinstance(st, P.Copy):
            src = values[st.x]
            if st.offset + sum((d - 1) * s for d, s in zip(shape, st.strides)) >= src.size:
                raise PlanError("a copy reads past its input")
            self._copy(self._read(st.x), shape, st.strides, st.offset, contiguous_strides(shape), 0, out)
        elif isinstance(st, P.Concat):
            axis = st.axis % len(shape)
            dst = contiguous_strides(shape)
            at = 0
            for x in st.xs:
                xs = values[x].shape
                self._copy(self._read(x), xs, contiguous_strides(xs), 0, dst, at * dst[axis], out)
                at += xs[axis]
        elif isinstance(st, P.Pool):
            n, c, h, w = values[st.x].shape
            _, _, oh, ow = shape
            gx, gy, row = flat_grid(total, self.limits)
            t, l, b, r = st.pads
            p = dict(total=total, row=row, is_avg=int(st.kind == "avg"), include_pad=int(st.count_include_pad), h=h, w=w, oh=oh, ow=ow,
                     kh=st.kernel[0], kw=st.kernel[1], sh=st.stride[0], sw=st.stride[1], dh=st.dilation[0], dw=st.dilation[1],
                     pt=t, pl=l, pb=b, pr=r, empty=NEG_INF_BITS)
            self._add(K.POOL, p, [self._read(st.x)], out, (gx, gy))
        elif isinstance(st, P.GlobalAvgPool):
            xs = values[st.x].shape
            planes, plane = prod(xs[:2]), prod(xs[2:])
            gx, gy, row = grid(planes, self.limits)
            self._add(K.GLOBAL_AVG, dict(planes=planes, plane=max(plane, 1), row=row), [self._read(st.x)], out, (gx, gy))
        elif isinstance(st, P.Resize):
            xs = values[st.x].shape
            maps = np.concatenate([np.asarray(st.src_y, np.int64), np.asarray(st.src_x, np.int64)])
            if maps.size and (maps.min() < 0 or st.src_y.max() >= xs[-2] or st.src_x.max() >= xs[-1]):
                raise PlanError("a resize index map points outside its input")
            gx, gy, row = flat_grid(total, self.limits)
            p = dict(total=total, row=row, h=xs[-2], w=xs[-1], oh=shape[-2], ow=shape[-1])
            self._add(K.RESIZE, p, [self._read(st.x), self._const_buf("resize maps", maps.astype(np.uint32))], out, (gx, gy))
        elif isinstance(st, P.Softmax):
            count = st.outer * st.inner
            gx, gy, row = flat_grid(count, self.limits)
            self._add(K.SOFTMAX, dict(count=count, row=row, n=st.n, inner=st.inner), [self._read(st.x)], out, (gx, gy))
        elif isinstance(st, P.MatMul):
            self._matmul(st, shape, out)
        else:
            raise PlanError(f"no GPU kernel for {st.op}")

    def _copy(self, src_ref, shape, src_strides, src0, dst_strides, dst0, out) -> None:
        dims, (ss, ds) = merge_dims(shape, src_strides, dst_strides)
        total = prod(shape)
        gx, gy, row = flat_grid(total, self.limits)
        p = dict(total=total, row=row, src0=src0, dst0=dst0, shape=padded(dims, 1) + [1, 1], src=padded(ss, 0) + [0, 0],
                 dst=padded(ds, 0) + [0, 0])
        self._add(K.COPY, p, [src_ref], out, (gx, gy))

    def _binary(self, st: P.Binary, shape, out) -> None:
        values = self.prog.values
        ops = {"add": 0, "sub": 1, "mul": 2, "div": 3, "prelu": 4}
        if st.kind not in ops:
            raise PlanError(f"binary '{st.kind}'")
        sa = broadcast_strides(shape, values[st.a].shape)
        sb = broadcast_strides(shape, values[st.b].shape)
        dims, (ma, mb, _) = merge_dims(shape, sa, sb, contiguous_strides(shape))
        total = prod(shape)
        channels, plane = _channels(shape)
        coef = None
        act = getattr(st, "act", None)  # a Binary may carry a fused activation
        if act is not None and act.kind == "prelu":
            coef = self._const_buf("coef", _slopes(act, channels))
        if len(dims) > 6:
            raise PlanError(f"a {len(dims)}-D broadcast")
        gx, gy, row = flat_grid(total, self.limits)
        p = dict(total=total, row=row, plane=max(plane, 1), channels=max(channels, 1), op=ops[st.kind],
                 shape=padded(dims, 1) + [1, 1], sa=padded(ma, 0) + [0, 0], sb=padded(mb, 0) + [0, 0])
        p.update(K.act_params(act, channels, 0))
        self._add(K.BINARY, p, [self._read(st.a), self._read(st.b), coef], out, (gx, gy))

    def _matmul(self, st: P.MatMul, shape, out) -> None:
        values = self.prog.values
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
        gx, gy, row = flat_grid(total, self.limits)
        p = dict(total=total, row=row, m=m, n=n, k=k, a_row=k, a_k=1, b_k=n, b_col=1,
                 batch=padded(batch, 1, 4), sa=padded(ba, 0, 4), sb=padded(bb, 0, 4))
        self._add(K.MATMUL, p, [self._read(st.a), self._read(st.b)], out, (gx, gy))

    def _gemm(self, st: P.Gemm, out) -> None:
        m, k = self.prog.values[st.x].shape
        n = st.weight.shape[0]
        plan = plan_gemm(m, k, n, self.limits)
        epi, slope_at = epilogue_data(n, st.bias, st.act)
        if plan.kernel == "gemv":
            p = dict(has_bias=int(st.bias is not None), has_res=0, m=m, n=n, kl=k // 4 if plan.vec4 else k,
                     count=n * -(-m // plan.rows_per_group), row=plan.grid[2])
            p.update(K.act_params(st.act, n, slope_at))
            reads = [self._read(st.x), self._const_buf("gemm weights", st.weight), self._const_buf("epilogue", epi)]
            self._add(K.gemv(plan.rows_per_group, plan.vec4), p, reads, out, plan.grid[:2])
            self.conv_plans.append((st.node, f"gemv rows {plan.rows_per_group}"))
            return
        shape = ConvShape(batch=m, cin=k, h=1, w=1, cout=n, oh=1, ow=1)
        weight = st.weight.reshape(n, k, 1, 1)
        self._conv_dispatch(st.node, shape, plan.conv, weight, st.bias, st.act, self._read(st.x), None, out)

    def _conv(self, st: P.Conv, out) -> None:
        values = self.prog.values
        b, cin, h, w = values[st.x].shape
        _, cout, oh, ow = values[st.out].shape
        shape = ConvShape(b, cin, h, w, cout, oh, ow, st.groups, st.kernel, st.stride, st.dilation, st.pads)
        plan = plan_conv(shape, self.limits, **self.force)
        res = self._read(st.residual) if st.residual is not None else None
        self._conv_dispatch(st.node, shape, plan, st.weight, st.bias, st.act, self._read(st.x), res, out)

    def _conv_dispatch(self, node, s: ConvShape, plan, weight, bias, act, x_ref, res_ref, out) -> None:
        epi, slope_at = epilogue_data(s.cout, bias, act)
        total = s.batch * s.cout * s.oh * s.ow
        epilogue = dict(has_bias=int(bias is not None), has_res=int(res_ref is not None))
        epilogue.update(K.act_params(act, s.cout, slope_at))
        epi_buf = self._const_buf("epilogue", epi)
        self.conv_plans.append((node, plan.describe()))
        common = dict(cin=s.cin, cg=s.cg, cout=s.cout, h=s.h, w=s.w, kh=s.kernel[0], kw=s.kernel[1], sh=s.stride[0],
                      sw=s.stride[1], dh=s.dilation[0], dw=s.dilation[1], pt=s.pads[0], pl=s.pads[1])
        if plan.tile is None:  # direct or depthwise: the weights as the model has them
            quads = s.batch * s.cout * s.oh * -(-s.ow // 4)
            p = dict(epilogue, total=total, row=plan.grid[2], m=s.m, oh=s.oh, ow=s.ow, splits=1, quads=quads, **common)
            reads = [x_ref, self._const_buf("conv weights", weight), epi_buf, res_ref]
            kernel = K.DEPTHWISE_CONV if plan.kernel == "depthwise" else K.DIRECT_CONV
            self._add(kernel, p, reads, out, plan.grid[:2])
            return
        packed = pack_conv_weights(np.asarray(weight, np.float32), s.groups, plan.kpad, plan.mpad)
        wbuf = self._const_buf("packed conv weights", packed)
        partial = plan.splits > 1
        p = dict(epilogue, m=s.m, n=s.n, k=s.k, kpad=plan.kpad, mpad4=plan.mpad // 4, ohw=s.oh * s.ow, ow=s.ow,
                 k_chunk=plan.k_chunk, splits=plan.splits, tiles_m=plan.tiles_m, tiles_n=plan.tiles_n,
                 count=plan.tiles_m * plan.tiles_n * plan.splits * s.groups, row=plan.grid[2], total=total, **common)
        kernel = K.tiled_conv(plan.tile, s.pointwise, partial)
        taps = None if s.pointwise else self._const_buf("im2col taps", im2col_taps(s))
        if not partial:
            self._add(kernel, p, [x_ref, wbuf, epi_buf, res_ref, taps], out, plan.grid[:2])
            return
        # split K: partial sums into a scratch slot, then the ordered reduce applies the epilogue
        scratch = self.slots.take(plan.splits * total * 4)
        self._add(kernel, p, [x_ref, wbuf, epi_buf, None, taps], ("slot", scratch), plan.grid[:2])
        rx, ry, rrow = plan.reduce_grid
        rp = dict(epilogue, total=total, row=rrow, m=s.m, oh=s.oh, ow=s.ow, splits=plan.splits, quads=0, **common)
        self._add(K.SPLIT_REDUCE, rp, [("slot", scratch), None, epi_buf, res_ref], out, (rx, ry))
        self.slots.give(scratch)

    # ---- device objects
    def _build(self) -> None:
        wgpu = _wgpu()
        dev = self.dev.device
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.buffers = [dev.create_buffer(label=f"facerun value {i}", size=size, usage=usage)
                        for i, size in enumerate(self.slots.sizes)]
        self.inputs = [(name, self.buffers[self.slot_of[self.prog.storage(vid)]], self.prog.values[vid])
                       for name, vid in self.prog.inputs]
        slot = K.UNIFORM_SLOT
        blob = bytearray(max(1, len(self.dispatches)) * slot)
        for i, d in enumerate(self.dispatches):
            blob[i * slot : i * slot + len(d.params)] = d.params
        self.uniform = dev.create_buffer_with_data(label="facerun params", data=bytes(blob), usage=wgpu.BufferUsage.UNIFORM)
        self.staging = dev.create_buffer(label="facerun read-back", size=-(-self.staging_bytes // 16) * 16,
                                         usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self.recorded = []  # (pipeline, bind group or None, groups, dispatch index)
        for i, d in enumerate(self.dispatches):
            pipe = self.dev.pipeline(d.kernel)
            transient = any(isinstance(r, Transient) for r in d.reads)
            self.recorded.append((pipe, None if transient else self._bind_group(i, d, {}), d.groups, i))
        self._ready = None  # the next run's command buffer, recorded while the GPU ran the last one
        self.raw = _raw_pass_calls()
        if any(bg is None for _, bg, _, _ in self.recorded):
            self.raw = None  # per-run bind groups: the plain path
        # the native handles, for the raw path (the Python objects above keep them alive)
        self.handles = [(pipe._internal, bg._internal, gx, gy) for pipe, bg, (gx, gy), _ in self.recorded] if self.raw else []
        self.device_bytes = sum(self.slots.sizes) + len(blob) + self.staging_bytes

    def _resolve(self, ref, uploads: dict):
        if ref is None:
            return self.dev.dummy
        if isinstance(ref, tuple) and ref[0] == "slot":
            return self.buffers[ref[1]]
        if isinstance(ref, Transient):
            buf = uploads.get(id(ref))
            if buf is None:
                buf = self.dev.device.create_buffer_with_data(label="facerun weights (per run)", data=ref.data,
                                                              usage=_wgpu().BufferUsage.STORAGE)
                uploads[id(ref)] = buf
            return buf
        return ref

    def _bind_group(self, i: int, d: Dispatch, uploads: dict):
        entries = [{"binding": 0, "resource": {"buffer": self.uniform, "offset": i * K.UNIFORM_SLOT, "size": K.UNIFORM_SLOT}}]
        for b, ref in zip(K.READ_BINDINGS, d.reads):
            buf = self._resolve(ref, uploads)
            entries.append({"binding": b, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        out = self._resolve(d.out, uploads)
        entries.append({"binding": 5, "resource": {"buffer": out, "offset": 0, "size": out.size}})
        return self.dev.device.create_bind_group(layout=self.dev.layout, entries=entries)

    # ---- run
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = []
        for name, buf, v in self.inputs:
            if name not in inputs:
                raise GpuError(f"input '{name}' is missing")
            a = np.ascontiguousarray(inputs[name], dtype=np.float32)
            if a.shape != v.shape:
                raise GpuError(f"input '{name}' has shape {list(a.shape)}, the program takes {list(v.shape)}")
            arrays.append((buf, a))
        with self.lock, pace.turn():
            flat = self._submit(arrays)
        out = {}
        for name, vid, slot, offset in self.outputs:
            v = self.prog.values[vid]
            if slot is None:
                out[name] = np.array(v.data, np.float32).reshape(v.shape)
            else:
                out[name] = flat[offset // 4 : offset // 4 + v.size].reshape(v.shape).copy()
        return out

    def run_many(self, items: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several independent inputs through this program in ONE submission: for each item, its inputs copied into
        the input slots, the whole pass, its outputs copied to its own part of one staging buffer. (For files fixed
        at batch 1, whose batch cannot be folded into the kernels.)"""
        wgpu = _wgpu()
        dev = self.dev
        blob = []
        for item in items:
            for name, _, v in self.inputs:
                if name not in item:
                    raise GpuError(f"input '{name}' is missing")
                a = np.ascontiguousarray(item[name], dtype=np.float32)
                if a.shape != v.shape:
                    raise GpuError(f"input '{name}' has shape {list(a.shape)}, the program takes {list(v.shape)}")
                blob.append(a.reshape(-1))
        every_input = np.concatenate(blob)
        per_item = -(-self.staging_bytes // 256) * 256  # copy offsets must be 4-aligned; keep items apart
        with self.lock, pace.turn():
            if D.broken_reason():
                raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
            seen = D.errors_seen()[0]
            try:
                src = dev.device.create_buffer_with_data(label="facerun batch inputs", data=every_input,
                                                         usage=wgpu.BufferUsage.COPY_SRC)
                staging = dev.device.create_buffer(label="facerun batch read-back", size=per_item * len(items),
                                                   usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
                enc = dev.device.create_command_encoder(label="facerun batch")
                at = 0
                for i in range(len(items)):
                    for _, buf, v in self.inputs:
                        enc.copy_buffer_to_buffer(src, at, buf, 0, v.nbytes)
                        at += v.nbytes
                    cp = enc.begin_compute_pass(label="facerun")
                    self._encode(cp)
                    cp.end()
                    for _, vid, slot, offset in self.outputs:
                        if slot is not None:
                            enc.copy_buffer_to_buffer(self.buffers[slot], 0, staging, i * per_item + offset,
                                                      self.prog.values[vid].nbytes)
                if D.take_injected("submit"):
                    raise RuntimeError("injected failure at submit (FACERUN_GPU_INJECT_FAILURE)")
                dev.queue.submit([enc.finish()])
                staging.map_sync(wgpu.MapMode.READ)
                try:
                    flat = np.frombuffer(staging.read_mapped(copy=True), np.float32)
                finally:
                    staging.unmap()
                if D.errors_seen()[0] != seen:
                    raise RuntimeError(D.errors_seen()[1])
            except GpuError:
                raise
            except Exception as e:
                self._ready = None
                why = f"the GPU failed running a batch: {_short(e)}"
                D.mark_broken(why)
                raise GpuError(why) from None
        results = []
        for i in range(len(items)):
            out = {}
            base = i * per_item // 4
            for name, vid, slot, offset in self.outputs:
                v = self.prog.values[vid]
                if slot is None:
                    out[name] = np.array(v.data, np.float32).reshape(v.shape)
                else:
                    out[name] = flat[base + offset // 4 : base + offset // 4 + v.size].reshape(v.shape).copy()
            results.append(out)
        return results

    def _commands(self):
        """The run's command buffer: every dispatch in one compute pass, then the outputs copied to the staging
        buffer."""
        enc = self.dev.device.create_command_encoder(label="facerun program")
        cp = enc.begin_compute_pass(label="facerun")
        self._encode(cp)
        cp.end()
        for _, vid, slot, offset in self.outputs:
            if slot is not None:
                enc.copy_buffer_to_buffer(self.buffers[slot], 0, self.staging, offset, self.prog.values[vid].nbytes)
        return enc.finish()

    def _encode(self, cp) -> None:
        """Record every dispatch into the compute pass `cp`."""
        if self.raw:
            set_pipeline, set_bind_group, dispatch, null = self.raw
            h = cp._internal
            last = None
            for pipe, bg, gx, gy in self.handles:
                if pipe != last:
                    set_pipeline(h, pipe)
                    last = pipe
                set_bind_group(h, 0, bg, 0, null)
                dispatch(h, gx, gy, 1)
            return
        uploads: dict = {}
        last = None
        for pipe, bg, (gx, gy), i in self.recorded:
            if bg is None:
                bg = self._bind_group(i, self.dispatches[i], uploads)
            if pipe is not last:
                cp.set_pipeline(pipe)
                last = pipe
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(gx, gy, 1)

    def _submit(self, arrays) -> np.ndarray:
        dev = self.dev
        if D.broken_reason():
            raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
        try:
            for buf, a in arrays:
                dev.queue.write_buffer(buf, 0, a)
            commands, self._ready = self._ready, None
            if commands is None:
                commands = self._commands()
        except Exception as e:
            raise GpuError(f"recording the GPU work failed: {_short(e)}") from None
        seen = D.errors_seen()[0]
        try:
            if D.take_injected("submit"):
                raise RuntimeError("injected failure at submit (FACERUN_GPU_INJECT_FAILURE)")
            dev.queue.submit([commands])
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
            if self.raw:
                # record the next run while the GPU works on this one (a re-run then only writes inputs and submits)
                self._ready = self._commands()
            if D.take_injected("readback"):
                raise RuntimeError("injected failure at read-back (FACERUN_GPU_INJECT_FAILURE)")
            self.staging.map_sync(_wgpu().MapMode.READ)
            try:
                data = np.frombuffer(self.staging.read_mapped(copy=True), np.float32)
            finally:
                self.staging.unmap()
            if D.errors_seen()[0] != seen:
                raise RuntimeError(D.errors_seen()[1])
        except Exception as e:
            self._ready = None
            why = f"the GPU failed running the program: {_short(e)}"
            D.mark_broken(why)
            raise GpuError(why) from None
        return data


def _short(e: BaseException) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


# -------------------------------------------------------------------------------------------------- the model


class GpuModel:
    """One loaded model's GPU side: its weights on the device and its compiled programs (one per input shape).

    run(prog, inputs) -> outputs by name; raises GpuError (the caller then uses the CPU). `conv_hook` is the
    per-convolution mode's hook for `cpu.run_program(prog, inputs, conv=model.conv_hook)`.
    """

    def __init__(self, budget_mb: float | None = None, dev: D.Device | None = None):
        self.dev = dev or D.get_device()
        self.weights = WeightStore(budget_bytes(budget_mb))
        self._programs: dict[int, tuple[P.Program, GpuProgram]] = {}
        self._convs: dict[tuple, tuple[P.Conv, GpuProgram]] = {}
        self._lock = threading.Lock()

    @property
    def device_name(self) -> str:
        return self.dev.label

    @property
    def resident_bytes(self) -> int:
        return self.weights.resident_bytes

    def compile(self, prog: P.Program, force: dict | None = None) -> GpuProgram:
        """The compiled form of `prog` (cached); GpuError when it cannot run on this device. `force` (tests, tuning)
        overrides every convolution's plan (force_splits, force_tile) and bypasses the cache."""
        if force:
            return self._compile(prog, force)
        with self._lock:
            hit = self._programs.get(id(prog))
            if hit is not None and hit[0] is prog:
                return hit[1]
            gp = self._compile(prog)
            self._programs[id(prog)] = (prog, gp)
            return gp

    def _compile(self, prog: P.Program, force: dict | None = None) -> GpuProgram:
        try:
            return GpuProgram(self.dev, prog, self.weights, force)
        except PlanError as e:
            raise DoesNotFit(f"this program does not fit the GPU: {e}") from None
        except GpuError:
            raise
        except Exception as e:  # wgpu validation/out-of-memory errors, shader compile errors
            raise GpuError(f"preparing the program for the GPU failed: {_short(e)}") from None

    def run(self, prog: P.Program, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        return self.compile(prog).run(inputs)

    def run_many(self, prog: P.Program, items: list) -> list[dict[str, np.ndarray]]:
        """Several inputs of the same shape through `prog`, in one submission."""
        return self.compile(prog).run_many(items)

    def step_outputs(self, prog: P.Program, inputs) -> list[np.ndarray]:
        """The output of every step of `prog`, in step order, from one GPU run that keeps them all (parity)."""
        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        names = [(f"step {i}", st.out) for i, st in enumerate(prog.steps)]
        every = P.Program(prog.values, prog.steps, prog.inputs, names)
        saved = [st.frees for st in prog.steps]  # the steps are shared with `prog`: restore their lifetimes
        try:
            every.assign_lifetimes()
            gp = self._compile(every)
        finally:
            for st, f in zip(prog.steps, saved):
                st.frees = f
        out = gp.run(inputs)
        return [out[name] for name, _ in names]

    # ---- per-convolution mode
    def conv_hook(self, step: P.Step, args: list) -> np.ndarray | None:
        """cpu.run_program's `conv` hook: this convolution on the GPU (uploaded, run and read back alone), or None."""
        if not isinstance(step, P.Conv):
            return None
        x = np.ascontiguousarray(args[0], np.float32)
        res = np.ascontiguousarray(args[1], np.float32) if len(args) > 1 else None
        key = (id(step), x.shape)
        with self._lock:
            hit = self._convs.get(key)
            if hit is None or hit[0] is not step:
                one = one_conv_program(step, x.shape)
                hit = (step, self._compile(one))
                self._convs[key] = hit
        feeds = {"x": x} if res is None else {"x": x, "residual": res}
        return hit[1].run(feeds)["y"]

    def run_per_conv(self, prog: P.Program, inputs) -> dict[str, np.ndarray]:
        """The program on the CPU interpreter with each convolution on the GPU alone (for comparison)."""
        from .. import cpu

        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        return cpu.run_program(prog, inputs, conv=self.conv_hook)


def conv_output_shape(step: P.Conv, xshape) -> tuple[int, int, int, int]:
    n, _, h, w = xshape
    kh, kw = step.kernel
    t, l, b, r = step.pads
    oh = (h + t + b - step.dilation[0] * (kh - 1) - 1) // step.stride[0] + 1
    ow = (w + l + r - step.dilation[1] * (kw - 1) - 1) // step.stride[1] + 1
    return n, step.weight.shape[0], oh, ow


def one_conv_program(step: P.Conv, xshape) -> P.Program:
    """A program of one convolution (inputs "x" and, with a residual, "residual"; output "y")."""
    oshape = conv_output_shape(step, xshape)
    values = [P.Value(0, "x", tuple(xshape), "input", 0)]
    inputs = [("x", 0)]
    res = None
    if step.residual is not None:
        values.append(P.Value(1, "residual", oshape, "input", 1))
        inputs.append(("residual", 1))
        res = 1
    out = len(values)
    values.append(P.Value(out, "y", oshape, "temp", out))
    conv = P.Conv(out, step.node, 0, step.weight, step.bias, step.groups, step.stride, step.dilation, step.pads, step.act, res)
    prog = P.Program(values, [conv], inputs, [("y", out)])
    prog.assign_lifetimes()
    return prog
