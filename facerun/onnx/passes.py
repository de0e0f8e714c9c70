"""Fusions over a lowered step program, run by the compiler after every node is lowered.

Each pass walks the steps in order and merges a step into the convolution or fully connected layer that made its
input, when that layer's output is read by nothing else (no other step, no view that is read, not a program output).
The merged layer then writes the later step's value, so everything downstream reads what it read before; the step
goes. Each fusion is listed in `Program.folded`.

The order in `run` keeps what can be merged the same as merging greedily in graph order: batch norms first, then
activations, then residual adds, then the activations that follow a residual add (act(conv + residual)).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .. import program as P

_ONNX_OP = {"relu": "Relu", "sigmoid": "Sigmoid", "clip": "Clip", "leaky": "LeakyRelu", "prelu": "PRelu"}


class _Steps:
    """Who makes and who reads each storage of a program while a pass merges steps."""

    def __init__(self, prog: P.Program):
        self.prog = prog
        self.producer = {s.out: s for s in prog.steps}
        self.position = {id(s): i for i, s in enumerate(prog.steps)}
        values = prog.values
        self.readers: Counter[int] = Counter([values[v].base for s in prog.steps for v in s.reads])
        self.readers.update([values[v].base for _, v in prog.outputs])
        self.gone: set[int] = set()

    def sole_producer(self, vid: int, kinds: tuple) -> P.Step | None:
        """The step of one of `kinds` that wrote vid itself (not a view of it), if nothing but one step reads vid."""
        step = self.producer.get(vid)
        if step is None or not isinstance(step, kinds) or self.readers[vid] != 1:
            return None
        return step

    def made_at(self, vid: int) -> int:
        """Position of the step that makes vid's storage (-1 for inputs and constants)."""
        step = self.producer.get(self.prog.storage(vid))
        return -1 if step is None else self.position[id(step)]

    def merge(self, step: P.Step, into: P.Step, note: str) -> None:
        """`into` takes over writing step's value; step goes."""
        del self.producer[into.out]
        into.out = step.out
        self.producer[step.out] = into
        self.gone.add(id(step))
        self.prog.folded.append(note)

    def finish(self) -> int:
        """Drop the merged steps; how many there were."""
        if self.gone:
            self.prog.steps = [s for s in self.prog.steps if id(s) not in self.gone]
        return len(self.gone)


def fold_batchnorm(prog: P.Program, memo: dict | None = None) -> int:
    """A batch norm (an Affine step) right after a convolution or a fully connected layer goes into that layer's
    weights and bias: w' = w * scale[c], b' = b * scale[c] + shift[c]. Not after a fused residual or activation,
    which the scale would then wrongly cover. `memo` (the model's, kept across compiles) gives the folded arrays of
    a pair folded before from equal arrays, so every input size's program holds the same ones."""
    memo = {} if memo is None else memo
    g = _Steps(prog)
    for st in prog.steps:
        if not isinstance(st, P.Affine):
            continue
        prev = g.sole_producer(st.x, (P.Conv, P.Gemm))
        if prev is None or prev.act is not None or getattr(prev, "residual", None) is not None:
            continue
        if st.scale.size != prev.weight.shape[0]:
            continue
        sources = (prev.weight, prev.bias, st.scale, st.shift)
        key = ("batchnorm", prev.node, st.node)
        kept = memo.get(key)
        if kept is not None and all(_same(a, b) for a, b in zip(kept[0], sources)):
            prev.weight, prev.bias = kept[1]
        else:
            prev.weight, prev.bias = _folded(*sources)
            memo[key] = (sources, (prev.weight, prev.bias))
        g.merge(st, prev, f"BatchNormalization '{st.node}' folded into {prev.op} '{prev.node}'")
    return g.finish()


def _folded(weight, bias, scale, shift) -> tuple[np.ndarray, np.ndarray]:
    scale, shift, w = scale.astype(np.float64), shift.astype(np.float64), weight.astype(np.float64)
    folded_w = (w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    b = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
    return folded_w, (b * scale + shift).astype(np.float32)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or (a.shape == b.shape and np.array_equal(a, b))


def fuse_activations(prog: P.Program) -> int:
    """An activation (a Unary step) right after a convolution or a fully connected layer without one joins that
    layer's epilogue: out = act(conv(x) + bias [+ residual])."""
    g = _Steps(prog)
    for st in prog.steps:
        if not isinstance(st, P.Unary):
            continue
        prev = g.sole_producer(st.x, (P.Conv, P.Gemm))
        if prev is None or prev.act is not None:
            continue
        shape = prog.shape(st.x)
        if st.act.kind == "prelu" and (len(shape) < 2 or st.act.slope.size != shape[1]):
            continue  # the epilogue takes one slope per channel
        prev.act = st.act
        g.merge(st, prev, f"{_ONNX_OP.get(st.act.kind, st.act.kind)} '{st.node}' fused into {prev.op} '{prev.node}'")
    return g.finish()


def fuse_residual_adds(prog: P.Program) -> int:
    """conv(x) + other joins the convolution's epilogue as its residual when `other` exists before the convolution
    runs (made by an earlier step, or an input) and has the sum's shape. Of two convolutions added together, only
    the later one can take the earlier one's output (IResNet's downsample branch)."""
    g = _Steps(prog)
    for st in prog.steps:
        if not isinstance(st, P.Binary) or st.kind != "add":
            continue
        shape = prog.shape(st.out)
        for conv_side, other in ((st.a, st.b), (st.b, st.a)):
            if prog.values[other].kind == "const":
                continue
            conv = g.sole_producer(conv_side, (P.Conv,))
            if conv is None or conv.act is not None or conv.residual is not None:
                continue
            if not prog.shape(other) == shape == prog.shape(conv_side):
                continue
            if g.made_at(other) >= g.position[id(conv)]:
                continue
            conv.residual = other
            g.merge(st, conv, f"Add '{st.node}' fused into Conv '{conv.node}' as a residual")
            break
    return g.finish()


def fold_pads(prog: P.Program) -> int:
    """Zero padding of H and W only (an explicit Pad, as TF-style exports emit for stride-2 layers) right before a
    convolution goes into the convolution's own pads."""
    g = _Steps(prog)
    for st in prog.steps:
        if not isinstance(st, P.Conv):
            continue
        pad = g.sole_producer(st.x, (P.Pad,))
        if pad is None or pad.mode != "constant" or pad.value != 0.0 or any(pad.interior) or len(pad.before) != 4:
            continue
        if any(pad.before[:2]) or any(pad.after[:2]) or min(pad.before + pad.after) < 0:
            continue
        top, left, bottom, right = st.pads
        st.pads = (top + pad.before[2], left + pad.before[3], bottom + pad.after[2], right + pad.after[3])
        st.x = pad.x
        g.gone.add(id(pad))
        prog.folded.append(f"Pad '{pad.node}' folded into Conv '{st.node}'")
    return g.finish()


def run(prog: P.Program, memo: dict | None = None) -> None:
    """Every pass, in order (lifetimes are assigned afterwards); `memo`: the model's, for fold_batchnorm.

    A pass is skipped when the program has none of the steps it merges (the who-reads-what tables it would build cost
    more than the merging, for every new input size). The second activation pass only finds activations after a
    fused residual add: after a residual pass that merged nothing it would find nothing the first did not."""
    kinds = {type(s) for s in prog.steps}  # no pass makes a step of a new type
    if P.Pad in kinds:
        fold_pads(prog)
    if P.Affine in kinds:
        fold_batchnorm(prog, memo)
    if P.Unary in kinds:
        fuse_activations(prog)
    if P.Binary in kinds and fuse_residual_adds(prog) and P.Unary in kinds:
        fuse_activations(prog)
