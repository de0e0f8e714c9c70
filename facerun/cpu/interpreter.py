"""The fast interpreter: the same program, run channels-last out of an arena, with fused in-place epilogues.

The program stays layout-neutral (NCHW); this module chooses each tensor's layout. Values made by convolutions,
max pooling and the elementwise steps that follow them are kept NHWC; a step without a channels-last kernel gets
NCHW arguments (converted once per tensor, where needed) and runs the reference `run_step`. Every buffer comes from
an arena allocated with the executable (once per program), every step is a closure built over its buffers, so a run
allocates only its outputs (copied: a later run never overwrites what the caller holds).
"""

from __future__ import annotations

from math import prod

import numpy as np

from .. import blas
from .. import program as P
from . import arena, conv, elementwise, lanes, separable, winograd

NCHW, NHWC = "nchw", "nhwc"
# Dense convolutions reading NCHW with at most this many input channels gather their columns straight from it.
STEM_CHANNELS = 16


class _Run:
    """What a closure reads at run time: how many lanes run at once and how many OpenBLAS threads a product outside
    the lanes gets (lanes.share)."""

    threads = 1
    blas = 1


def _nhwc_shape(shape) -> tuple[int, ...]:
    n, c, h, w = shape
    return (n, h, w, c)


class _Op:
    __slots__ = ("kind", "step", "reads", "write", "inplace", "info")

    def __init__(self, kind, step, reads, write, inplace=False, info=None):
        self.kind, self.step, self.reads, self.write, self.inplace, self.info = kind, step, reads, write, inplace, info


class Planner:
    """Chooses layouts and kernels, step by step; buffers are keyed (value id, layout)."""

    def __init__(self, prog: P.Program):
        self.prog = prog
        self.values = prog.values
        self.native: dict[int, str] = {}  # storage -> layout it is made in
        self.have: set = set()  # buffer keys that exist
        self.ops: list[_Op] = []
        self.folded: dict[int, P.Conv] = {}  # 1x1 output -> its step, made inside the depthwise step reading it
        self.pairs = _pairs(prog)
        self.readers: dict[int, int] = {}  # storage -> steps reading it
        for step in prog.steps:
            for v in dict.fromkeys(self.values[r].base for r in step.reads if self.values[r].kind != "const"):
                self.readers[v] = self.readers.get(v, 0) + 1
        self.output_bases = {self.values[vid].base for _, vid in prog.outputs}
        for name, vid in prog.inputs:
            self.native[vid] = NCHW
            self._made((vid, NCHW), _Op("input", None, [], (vid, NCHW), info=name))
        for st in prog.steps:
            self._plan(st)
        outs = [self.need(vid, NCHW) for _, vid in prog.outputs if self.values[vid].kind != "const"]
        self.ops.append(_Op("outputs", None, [k for k in outs if k is not None], None))

    # -------------------------------------------------------------------------------------------- layouts
    def _made(self, key, op):
        self.have.add(key)
        self.ops.append(op)

    def nhwc(self, vid: int) -> bool:
        """Whether `vid` can be read channels-last without a conversion."""
        v = self.values[vid]
        if v.kind == "const":
            return False
        base = self.values[v.base]
        return self.native.get(v.base) == NHWC and v.shape == base.shape

    def need(self, vid: int, layout: str):
        """The buffer key that holds `vid` in `layout`, adding a conversion when none does (None for constants)."""
        v = self.values[vid]
        if v.kind == "const":
            return None
        base = v.base
        same = v.shape == self.values[base].shape
        if layout == NCHW:
            key = (base, NCHW)
            if key not in self.have:
                self._made(key, _Op("to_nchw", None, [(base, NHWC)], key))
            return key
        key = (base if same else vid, NHWC)
        if key not in self.have:
            src = self.need(vid, NCHW)
            self._made(key, _Op("to_nhwc", None, [src], key, info=vid))
        return key

    def shape_of(self, key) -> tuple[int, ...]:
        vid, layout = key
        shape = self.values[vid].shape
        return _nhwc_shape(shape) if layout == NHWC else shape

    def _pool_after_pair(self, st: P.Pool) -> bool:
        """A 2x2 max pooling that is the only reader of the pair just planned joins it (separable.pooled)."""
        last = self.ops[-1]
        x = self.values[st.x]
        if (last.kind != "pwdw" or last.write != (st.x, NHWC) or x.base != st.x or len(last.reads) != 1
                or self.readers.get(st.x) != 1 or st.x in self.output_bases
                or not _is_halving_max_pool(st, x.shape, self.values[st.out].shape)):
            return False
        self.ops.pop()
        self.have.discard(last.write)
        self._out(st, NHWC, "pwdw_pool", last.reads, info=(last.info, last.step))
        return True

    # -------------------------------------------------------------------------------------------- steps
    def _out(self, st, layout, kind, reads, inplace=False, info=None):
        self.native[st.out] = layout
        key = (st.out, layout)
        self._made(key, _Op(kind, st, reads, key, inplace, info))

    def _plan(self, st: P.Step) -> None:
        vals = self.values
        out_shape = vals[st.out].shape
        if isinstance(st, P.Conv) and st.out in self.pairs:
            self.folded[st.out] = st  # made band by band inside its depthwise reader (separable.py)
            self.need(st.x, NHWC)
            return
        if isinstance(st, P.Conv) and st.x in self.folded:
            pw = self.folded[st.x]
            res = [] if st.residual is None else [self.need(st.residual, NHWC)]
            self._out(st, NHWC, "pwdw", [self.need(pw.x, NHWC)] + res, info=pw)
            return
        if isinstance(st, P.Conv):
            x = vals[st.x]
            cin = x.shape[1]
            cout = out_shape[1]
            res = [] if st.residual is None else [self.need(st.residual, NHWC)]
            if st.depthwise and st.groups == cin == cout:
                kind = "depthwise"
            elif st.groups != 1:
                kind = None
            elif not self.nhwc(st.x) and cin <= STEM_CHANNELS and st.kernel != (1, 1):
                self._out(st, NHWC, "stem", [self.need(st.x, NCHW)] + res)
                return
            elif winograd.suits(st, cin, out_shape):
                kind = "winograd"
            elif st.kernel == (1, 1) and not any(st.pads):
                kind = "pointwise"
            else:
                kind = "dense"
            if kind is not None:
                self._out(st, NHWC, kind, [self.need(st.x, NHWC)] + res)
                return
        elif isinstance(st, P.Pool) and self._pool_after_pair(st):
            return
        elif isinstance(st, P.Pool) and st.kind == "max" and self.nhwc(st.x):
            self._out(st, NHWC, "maxpool", [self.need(st.x, NHWC)])
            return
        elif isinstance(st, (P.Affine, P.Unary)) and self.nhwc(st.x):
            self._out(st, NHWC, st.op.lower(), [self.need(st.x, NHWC)], inplace=True)
            return
        elif (isinstance(st, P.Unary) and vals[st.x].kind != "const"
              and (st.act.slope is None or st.act.slope.size == 1)):
            # no per-channel parameter: any shape, in place (YuNet's score sigmoids)
            self._out(st, NCHW, "unary", [self.need(st.x, NCHW)], inplace=True)
            return
        elif isinstance(st, P.Binary) and st.kind in elementwise._BINARY and len(out_shape) == 4:
            operands = [vals[v] for v in (st.a, st.b)]
            scalar = [v.kind == "const" and v.size == 1 for v in operands]
            fits = [s or (self.nhwc(v.id) and v.shape == out_shape) for v, s in zip(operands, scalar)]
            if all(fits) and not all(scalar):
                reads = [None if s else self.need(v.id, NHWC) for v, s in zip(operands, scalar)]
                self._out(st, NHWC, "binary", reads, inplace=True)
                return
            # NCHW tensors and scalars (a model's input scaling): in place too, the same in either layout
            plain = [s or (v.kind != "const" and v.shape == out_shape and self.native.get(v.base) == NCHW
                           and vals[v.base].shape == v.shape) for v, s in zip(operands, scalar)]
            if all(plain) and not all(scalar):
                reads = [None if s else self.need(v.id, NCHW) for v, s in zip(operands, scalar)]
                self._out(st, NCHW, "binary", reads, inplace=True)
                return
        elif isinstance(st, P.Resize) and self.nhwc(st.x):
            self._out(st, NHWC, "resize", [self.need(st.x, NHWC)])
            return
        elif isinstance(st, P.GlobalAvgPool) and self.nhwc(st.x) and len(out_shape) == 4:
            self._out(st, NCHW, "gap", [self.need(st.x, NHWC)])  # (N, C, 1, 1): the same memory either way
            return
        elif isinstance(st, P.Copy) and self.nhwc(st.x) and _is_to_channels_last(st, vals[st.x].shape, out_shape):
            self._out(st, NCHW, "nhwc_copy", [self.need(st.x, NHWC)])
            return
        elif isinstance(st, P.Gemm) and len(vals[st.x].shape) == 2:
            x = vals[st.x]
            base = vals[x.base]
            flat = x.shape == (base.shape[0], prod(base.shape[1:]))
            last = self.ops[-1]
            if (flat and last.kind == "affine" and last.write == (x.base, NHWC) and self.readers.get(x.base) == 1
                    and x.base not in self.output_bases and self.shape_of(last.reads[0]) == self.shape_of(last.write)):
                # a batch norm between the last convolution and the fully connected layer: folded into its weights
                self.ops.pop()
                self.have.discard(last.write)
                self._out(st, NCHW, "gemm", last.reads, info=("permuted", last.step))
            elif self.native.get(x.base) == NHWC and flat:
                self._out(st, NCHW, "gemm", [self.need(x.base, NHWC)], info="permuted")
            else:
                self._out(st, NCHW, "gemm", [self.need(st.x, NCHW)])
            return
        reads = [self.need(v, NCHW) for v in st.reads]
        self._out(st, NCHW, "reference", reads)


def _is_halving_max_pool(st: P.Pool, in_shape, out_shape) -> bool:
    """2x2/2 max pooling with no padding, rounding down (what separable.pooled does)."""
    _, _, h, w = in_shape
    return (st.kind == "max" and st.kernel == st.stride == (2, 2) and st.dilation == (1, 1) and not any(st.pads)
            and tuple(out_shape[2:]) == (h // 2, w // 2) and h >= 2 and w >= 2)


def _pairs(prog: P.Program) -> set[int]:
    """The outputs of 1x1 convolutions read only by one 3x3 depthwise convolution (see separable.py)."""
    values = prog.values
    readers: dict[int, list] = {}
    for st in prog.steps:
        for v in st.reads:
            if values[v].kind != "const":
                readers.setdefault(values[v].base, []).append((st, v))
    outputs = {values[vid].base for _, vid in prog.outputs}
    makers = {st.out: st for st in prog.steps if isinstance(st, P.Conv)}
    pairs = set()
    for vid, pw in makers.items():
        got = readers.get(vid, [])
        if vid in outputs or len(got) != 1 or values[vid].base != vid:
            continue
        dw, read = got[0]
        if (isinstance(dw, P.Conv) and read == vid == dw.x and dw.residual != vid and values[pw.x].kind != "const"
                and len(values[pw.x].shape) == 4 and separable.suits(pw, dw, values[vid].shape)):
            pairs.add(vid)
    return pairs


def _is_to_channels_last(st: P.Copy, in_shape, out_shape) -> bool:
    """Whether a Copy is the NCHW -> NHWC transpose of its whole input (then its result is the NHWC buffer)."""
    if len(in_shape) != 4 or st.offset != 0:
        return False
    n, c, h, w = in_shape
    return tuple(out_shape) == (n, h, w, c) and tuple(st.strides) == (c * h * w, w, 1, h * w)


class Executable:
    """A program's ops bound to one arena: `run(inputs)` runs them."""

    def __init__(self, prog: P.Program, planner: Planner | None = None):
        # holds no reference to `prog` (only to arrays it needs): the arena drops an executable with its program
        plan = planner or Planner(prog)
        self.ctx = _Run()
        slots = self._assign(plan)
        # a pixel's worth of slack either side of every slot: the depthwise kernel's row views reach one pixel
        # before and after a tensor (those values land only in border columns it computes apart)
        slack = max([plan.shape_of(k)[-1] for k in slots.slot_of if plan.shape_of(k)] + [1])
        self.slots = [np.empty(n + 2 * slack, np.float32)[slack : slack + n] for n in slots.sizes]
        self.buffers = {key: self.slots[slot][: prod(plan.shape_of(key))].reshape(plan.shape_of(key))
                        for key, slot in slots.slot_of.items()}
        self.scratch = arena.Scratch()
        self.inputs = [(op.info, self.buffers[op.write]) for op in plan.ops if op.kind == "input"]
        self.outputs = [(name, _output_view(prog.values[vid], self.buffers)) for name, vid in prog.outputs]
        before = lanes.dealt_bands()
        bound = [(op, self._bind(op, plan, self.scratch)) for op in plan.ops]
        # a program none of whose steps deal bands to lanes (small maps: an embedder at batch 1) gives OpenBLAS all
        # the threads, as there is no lane for its spinning threads to slow down
        self.laned = lanes.dealt_bands() > before
        self.steps = [fn for _, fn in bound if fn is not None]
        self.kinds = [op.kind for op, fn in bound if fn is not None]  # for profiles: which kernel each step is
        # what the executable holds besides the program: its buffers, its scratch and its weights in their layouts
        weights = sum(op.step.weight.nbytes * (16 / 9 if op.kind == "winograd" else 1) for op in plan.ops
                      if op.kind in ("stem", "depthwise", "winograd", "pointwise", "dense", "gemm", "pwdw"))
        weights += sum(op.info.weight.nbytes for op in plan.ops if op.kind == "pwdw")
        weights += sum(pw.weight.nbytes + dw.weight.nbytes for op in plan.ops if op.kind == "pwdw_pool"
                       for pw, dw in [op.info])
        self.nbytes = int(4 * sum(slots.sizes) + 8 * slack * len(slots.sizes) + self.scratch.nbytes + weights)

    def _assign(self, plan: Planner) -> arena.SlotPlan:
        last: dict = {}
        for i, op in enumerate(plan.ops):
            for k in op.reads:
                if k is not None:
                    last[k] = i
            if op.write is not None:
                last.setdefault(op.write, i)
        kept = set(plan.ops[-1].reads)  # outputs live to the end
        slots = arena.SlotPlan()
        for i, op in enumerate(plan.ops):
            dying = [k for k in dict.fromkeys(op.reads) if k is not None and last[k] == i and k not in kept]
            if op.write is not None:
                size = prod(plan.shape_of(op.write))
                alias = next((k for k in dying if op.inplace and prod(plan.shape_of(k)) == size
                              and plan.shape_of(k) == plan.shape_of(op.write)), None)
                if alias is not None:
                    slots.share(op.write, alias)
                else:
                    slots.take(op.write, size)
            for k in dying:
                slots.release(k)
            if op.write is not None and last[op.write] == i and op.write not in kept:
                slots.release(op.write)
        return slots

    def _arg(self, plan: Planner, vid: int, key):
        """The array a step reads for value `vid` (a constant's data, or its buffer shaped as the value)."""
        v = plan.values[vid]
        if key is None:
            return v.data
        buf = self.buffers[key]
        return buf if key[1] == NHWC else buf.reshape(v.shape)

    def _bind(self, op: _Op, plan: Planner, scratch):
        kind, st = op.kind, op.step
        out = self.buffers.get(op.write) if op.write is not None else None
        if kind in ("input", "outputs"):  # inputs are copied in by `run`, outputs copied out
            return None
        if kind == "to_nchw":
            src = self.buffers[op.reads[0]]
            return lambda: np.copyto(out, src.transpose(0, 3, 1, 2))
        if kind == "to_nhwc":
            src = self.buffers[op.reads[0]].reshape(plan.values[op.info].shape)
            return lambda: np.copyto(out, src.transpose(0, 2, 3, 1))
        args = [self._arg(plan, v, k) for v, k in zip(st.reads if kind != "binary" else (st.a, st.b), op.reads)]
        ctx = self.ctx
        if kind == "pwdw_pool":
            pw, dw = op.info
            return separable.pooled(pw, dw, self.buffers[op.reads[0]], out, scratch, ctx)
        if kind == "pwdw":
            st, build = separable.pointwise_depthwise(op.info, st)
            return conv.fused(st, build, self.buffers[op.reads[0]], out, args[1] if len(args) > 1 else None,
                              scratch, ctx)
        if kind in ("stem", "depthwise", "winograd", "pointwise", "dense"):
            build = {"stem": conv.stem, "depthwise": conv.depthwise, "winograd": winograd.winograd,
                     "pointwise": conv.pointwise, "dense": conv.dense}[kind]
            return conv.fused(st, build, args[0], out, args[1] if len(args) > 1 else None, scratch, ctx)
        if kind == "maxpool":
            return elementwise.maxpool(st, args[0], out, scratch)
        if kind == "affine":
            return elementwise.affine(st, args[0], out)
        if kind == "unary":
            return elementwise.unary(st, args[0], out, scratch)
        if kind == "binary":
            return elementwise.binary(st, args[0], args[1], out)
        if kind == "resize":
            return elementwise.resize(st, args[0], out, scratch)
        if kind == "gap":
            return elementwise.global_average(args[0], out)
        if kind == "nhwc_copy":
            src = args[0].reshape(out.shape)
            return lambda: np.copyto(out, src)
        if kind == "gemm":
            return self._gemm(st, op, plan, args[0], out, scratch)
        return self._reference(st, plan, args, out)

    def _gemm(self, st: P.Gemm, op: _Op, plan: Planner, x: np.ndarray, out: np.ndarray, scratch):
        w = st.weight
        bias = None if st.bias is None else st.bias.astype(np.float32)
        if op.info is not None:  # x is the NHWC buffer of a 4-D value the model flattened as NCHW
            n, h, wd, c = x.shape
            w = w.reshape(w.shape[0], c, h, wd)
            if isinstance(op.info, tuple):  # W·(s·x + t) = (W·s)·x + W·t, the batch norm's scale and shift per channel
                affine = op.info[1]
                scale = np.broadcast_to(affine.scale.reshape(-1), (c,)).reshape(1, c, 1, 1)
                shift = np.broadcast_to(affine.shift.reshape(-1), (c,)).reshape(1, c, 1, 1)
                moved = (w.astype(np.float64) * shift).sum(axis=(1, 2, 3))
                bias = (moved if bias is None else bias + moved).astype(np.float32)
                w = (w * scale).astype(np.float32)
            w = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1))
            x = x.reshape(n, -1)
        # one row of x: (N, K) rows, which the lanes split into matrix-vector products; more: the K-major matrix
        wt = np.ascontiguousarray(w).T if x.shape[0] == 1 else conv.weights_k_major(w)
        mult = conv.product(x, wt, out, self.ctx)
        act = elementwise.inplace_activation(st.act, out, scratch, channels_last=True, reps=1)

        def run():
            mult()
            if bias is not None:
                np.add(out, bias, out=out)
            if act is not None:
                act()

        return run

    def _reference(self, st: P.Step, plan: Planner, args, out: np.ndarray):
        from . import run_step

        shape = plan.values[st.out].shape
        ctx = self.ctx

        def run():
            y = run_step(st, args, shape, ctx.threads)
            np.copyto(out, np.asarray(y, dtype=np.float32).reshape(shape))

        return run

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        before = blas.current_threads()
        total = blas.default_threads()  # all of them, or one while the machine is busy
        self.ctx.threads, self.ctx.blas = lanes.share(total) if self.laned else (1, total)
        blas.set_threads(1)
        try:
            for name, buf in self.inputs:
                np.copyto(buf, inputs[name], casting="unsafe")
            # once a run, not per band: the depthwise kernels read slack whose values reach only border columns they
            # recompute, and overflow to inf is the reference's answer too
            with np.errstate(all="ignore"):
                for fn in self.steps:
                    fn()
        finally:
            if before is not None:
                blas.set_threads(before)
        return {name: np.array(view) for name, view in self.outputs}  # copies: the next run reuses the buffers


def _output_view(v: P.Value, buffers: dict) -> np.ndarray:
    return v.data if v.kind == "const" else buffers[(v.base, NCHW)].reshape(v.shape)


def fits(prog: P.Program, inputs: dict[str, np.ndarray]) -> bool:
    """Whether `inputs` have exactly the shapes `prog` was compiled for (else the reference runs, as before)."""
    for name, vid in prog.inputs:
        a = inputs.get(name)
        if a is None or np.shape(a) != prog.values[vid].shape:
            return False
    return True


def run_fast(prog: P.Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    exe = arena.borrow(prog, Executable)
    try:
        return exe.run(inputs)
    finally:
        arena.give_back(prog, exe)
