"""What the lowering folds, read off a step program alone: the steps a convolution takes into itself (`fusions`: an
activation after it, a transpose of its output to NHWC), the depthwise 3x3 a 1x1 convolution makes in its pass
(`separable_pairs`), the Add a nearest resize takes (an FPN's upsample and add), the batch norm before a
convolution (`prologues`, applied by a Winograd input transform) and the 2x2 max pool before a 1x1 convolution
(`pooled_inputs`, taken as the 1x1 reads its input), and the heads one separable pass makes together (`head_groups`).
Pure functions of the program; lower.py acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import program as P
from .plan import merge_dims


@dataclass(frozen=True)
class Fusion:
    """A step folded into the kernel before it: a convolution applies `act` (a Unary's) or writes NHWC (a Copy that
    transposes its NCHW output), a resize adds `addend` (an Add's other operand), straight into the folded step's
    output."""

    step: P.Step  # the folded step: it makes no dispatch
    act: P.Activation | None = None
    nhwc: bool = False
    addend: int | None = None  # the value a resize adds as it writes


def _nhwc_transpose(prog: P.Program, conv: P.Conv, copy: P.Copy) -> bool:
    """Whether `copy` reads the whole NCHW output of `conv` as NHWC (a detector head's Transpose)."""
    b, c, oh, ow = prog.values[conv.out].shape
    if copy.offset != 0 or prog.values[copy.out].shape != (b, oh, ow, c):
        return False
    want = merge_dims((b, oh, ow, c), (c * oh * ow, ow, 1, oh * ow))
    return merge_dims(prog.values[copy.out].shape, copy.strides) == want


def _readers(prog: P.Program) -> tuple[dict[int, list[P.Step]], set[int]]:
    """The steps reading each storage (a view's reads count for its base), and the storages of the outputs."""
    values = prog.values
    readers: dict[int, list[P.Step]] = {}
    for st in prog.steps:
        for v in {values[r].base for r in st.reads}:
            readers.setdefault(v, []).append(st)
    return readers, {values[v].base for _, v in prog.outputs}


def fusions(prog: P.Program) -> dict[int, Fusion]:
    """The steps folded into the step before them, by id of that step. A convolution without a residual whose
    output only one step reads, and is no program output, takes that step when it is a Unary (elementwise, not
    PReLU: its channels may be reshaped) and the convolution has no activation of its own, or a Copy transposing its
    output to NHWC (every convolution kernel writes either layout). A nearest resize read so takes an Add of its
    output and a value of the same shape made before it (`_resize_add`)."""
    values = prog.values
    readers, outputs = _readers(prog)
    made_at = {values[st.out].base: i for i, st in enumerate(prog.steps)}
    found: dict[int, Fusion] = {}
    for i, st in enumerate(prog.steps):
        if type(st) not in (P.Conv, P.Resize) or getattr(st, "residual", None) is not None:
            continue
        storage = values[st.out].base
        rs = readers.get(storage, [])
        if storage in outputs or len(rs) != 1:
            continue
        r = rs[0]
        if type(st) is P.Resize:
            addend = _resize_add(prog, st, r, made_at, i)
            if addend is not None:
                found[id(st)] = Fusion(r, addend=addend)
            continue
        if type(r) is P.Unary and st.act is None and r.act.kind != "prelu":
            found[id(st)] = Fusion(r, act=r.act)
        elif type(r) is P.Copy and _nhwc_transpose(prog, st, r):
            found[id(st)] = Fusion(r, nhwc=True)
    return found


def separable_pairs(prog: P.Program) -> dict[int, P.Conv]:
    """The depthwise convolutions a 1x1 convolution may make in the same pass, by id of the 1x1: the 1x1 has no
    activation or residual of its own, and its output, no program output and no view, is read only by a convolution
    with one input channel per output channel. (plan.plan_separable decides from the shapes and the device whether
    the pair runs so.)"""
    values = prog.values
    readers, outputs = _readers(prog)
    found: dict[int, P.Conv] = {}
    for st in prog.steps:
        if type(st) is not P.Conv or st.residual is not None or st.act is not None or st.kernel != (1, 1):
            continue
        rs = readers.get(st.out, [])
        if values[st.out].base != st.out or st.out in outputs or len(rs) != 1:
            continue
        dw = rs[0]
        if (type(dw) is P.Conv and dw.x == st.out
                and (dw.residual is None or values[dw.residual].base != st.out) and dw.weight.shape[1] == 1
                and dw.groups == dw.weight.shape[0]):
            found[id(st)] = dw
    return found


def _resize_add(prog: P.Program, resize: P.Resize, add: P.Step, made_at: dict[int, int], at: int) -> int | None:
    """The operand `add` adds to `resize`'s output, when the resize can write the sum itself: a plain Add (no
    activation) of the output as it is (no view) and another value of the same shape, not broadcast, that exists
    before the resize runs (made by an earlier step, or an input or constant)."""
    if type(add) is not P.Binary or add.kind != "add" or getattr(add, "act", None) is not None:
        return None
    if (add.a == resize.out) == (add.b == resize.out):  # the output on neither side, or on both
        return None
    other = add.b if add.a == resize.out else add.a
    values = prog.values
    shape = values[add.out].shape
    if values[resize.out].shape != shape or values[other].shape != shape:
        return None
    return other if made_at.get(values[other].base, -1) < at else None


def prologues(prog: P.Program) -> dict[int, P.Affine]:
    """The batch norms a convolution may fold into its input, by id of that convolution: an Affine over the channels
    of an NCHW value whose output is the convolution's input (no residual's), read by nothing else and no program
    output. (The lowering folds it where the convolution runs Winograd: the input transform applies it.)"""
    values = prog.values
    readers, outputs = _readers(prog)
    made = {st.out: st for st in prog.steps if type(st) is P.Affine}
    found: dict[int, P.Affine] = {}
    for st in prog.steps:
        if type(st) is not P.Conv:
            continue
        norm = made.get(st.x)
        if norm is None or values[norm.x].kind == "const" or len(values[st.x].shape) != 4:
            continue
        storage = values[norm.out].base
        cin = values[st.x].shape[1]
        if (storage == norm.out and storage not in outputs and len(readers.get(storage, ())) == 1
                and np.size(norm.scale) == cin and np.size(norm.shift) == cin and st.residual != norm.out):
            found[id(st)] = norm
    return found


def pooled_inputs(prog: P.Program) -> dict[int, P.Pool]:
    """The 2x2 max pools a 1x1 convolution may take as it reads its input, by id of that convolution: a max pool of
    kernel and stride 2, no padding or dilation, every window whole (out = in // 2), whose output, no view and no
    program output, only that convolution reads, as its input (not its residual); the convolution of stride 1 and
    no padding, one group. (The lowering folds it where the 1x1 runs the tiled kernel or a separable pass.)"""
    values = prog.values
    readers, outputs = _readers(prog)
    found: dict[int, P.Pool] = {}
    for st in prog.steps:
        if type(st) is not P.Pool or st.kind != "max" or st.kernel != (2, 2) or st.stride != (2, 2):
            continue
        if st.pads != (0, 0, 0, 0) or st.dilation != (1, 1) or values[st.out].base != st.out or st.out in outputs:
            continue
        xs, ys = values[st.x].shape, values[st.out].shape
        if len(xs) != 4 or ys[2:] != (xs[2] // 2, xs[3] // 2):
            continue
        rs = readers.get(st.out, [])
        if len(rs) != 1:
            continue
        conv = rs[0]
        if (type(conv) is P.Conv and conv.x == st.out and conv.residual != st.out and conv.kernel == (1, 1)
                and conv.stride == (1, 1) and conv.pads == (0, 0, 0, 0) and conv.groups == 1):
            found[id(conv)] = st
    return found


@dataclass(frozen=True)
class Head:
    """One member of a head group: a 1x1 convolution, the depthwise 3x3 reading it, and the value the pair's pass
    writes (the depthwise's output, or that of the step folded into it: a sigmoid, an NHWC transpose)."""

    pw: P.Conv
    dw: P.Conv
    act: P.Activation | None  # the depthwise's own activation or the folded one
    nhwc: bool
    out: int  # the value written: a program output that nothing reads


HEADS_MAX = 4  # outputs one pass writes (the kernel's table of heads, separable.wgsl HEADS)


def head_groups(prog: P.Program) -> list[tuple[Head, ...]]:
    """A detector's heads as groups that one separable pass can make together: 1x1 convolutions reading the same
    value, each with the depthwise 3x3 that alone reads it (`separable_pairs`), whose outputs (after a folded
    sigmoid or NHWC transpose) are program outputs read by no step. Up to HEADS_MAX members a group, in program
    order; their activations all one kind (with its constants) or none, never PReLU. The pass reads the shared input
    once for every head's channels and writes each head's output where the lowering places it."""
    values = prog.values
    readers, outputs = _readers(prog)
    pairs = separable_pairs(prog)
    folded = fusions(prog)
    by_input: dict[int, list[Head]] = {}
    for st in prog.steps:
        dw = pairs.get(id(st))
        if dw is None or st.stride != (1, 1) or st.pads != (0, 0, 0, 0) or st.groups != 1 or dw.residual is not None:
            continue
        fused = folded.get(id(dw))
        if fused is not None and fused.act is None and not fused.nhwc:
            continue
        act = fused.act if fused is not None and fused.act is not None else dw.act
        last = fused.step if fused is not None else dw
        storage = values[last.out].base
        if storage not in outputs or readers.get(storage) or (act is not None and act.kind == "prelu"):
            continue
        by_input.setdefault(st.x, []).append(Head(st, dw, act, fused is not None and fused.nhwc, last.out))
    groups = []
    for heads in by_input.values():
        for at in range(0, len(heads), HEADS_MAX):
            group = tuple(heads[at : at + HEADS_MAX])
            acts = {(h.act.kind, h.act.lo, h.act.hi, h.act.alpha) for h in group if h.act is not None}
            if len(group) > 1 and len(acts) <= 1:
                groups.append(group)
    return groups
