"""The step program: what a model compiles to for one input shape.

A program is a flat list of typed steps. Every value has a resolved shape; constants carry their data; reshape-like
ops are *views* that share their base value's storage. Each step lists the storages it frees (no later step or output
reads them), so a runner can hand their buffers to later values. Runners (the numpy interpreter in `cpu/`, the WGSL
runner in `gpu/`) only ever see this module's types, never ONNX.

Layout is NCHW and float32 throughout. The batch is part of the input shape: a program compiled for [16,3,112,112]
runs sixteen faces at once.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from math import prod

import numpy as np

# The storage a program may run at. f32: every value in float32. f16 (the GPU only): Winograd's transformed inputs,
# weights and products stored as float16 (a product of two such values is exact in float32, the sums are float32),
# the rest as f32; checked against the CPU at its own bar (agree.GPU_F16_CHECK). Here, at the bottom, so loading
# (net) and the GPU side both check it without importing each other.
PRECISIONS = ("f32", "f16")

# ---------------------------------------------------------------------------------------------------------- values


@dataclass
class Value:
    """One tensor of the program. `base` is the value whose storage it uses (itself, unless it is a view)."""

    id: int
    name: str
    shape: tuple[int, ...]
    kind: str  # "input" | "const" | "temp" | "view"
    base: int
    data: np.ndarray | None = None  # for constants, float32, C-contiguous

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * 4


# ------------------------------------------------------------------------------------------------------ activations


@dataclass(frozen=True, eq=False)
class Activation:
    """An elementwise function applied in a step's epilogue (or alone, as a `Unary` step).

    kind: "relu", "sigmoid", "clip" (lo, hi), "leaky" (alpha), "prelu" (slope: one per channel, axis 1), "exp",
    "sqrt", "hardsigmoid" (max(0, min(1, alpha * x + lo))), "hardswish" (x * hardsigmoid with alpha 1/6, lo 1/2).
    """

    kind: str
    lo: float = 0.0
    hi: float = 0.0
    alpha: float = 0.0
    slope: np.ndarray | None = None

    def describe(self) -> str:
        if self.kind == "clip":
            return f"clip[{self.lo:g},{self.hi:g}]"
        if self.kind == "leaky":
            return f"leaky({self.alpha:g})"
        if self.kind == "hardsigmoid":
            return f"hardsigmoid({self.alpha:g},{self.lo:g})"
        return self.kind


# ------------------------------------------------------------------------------------------------------------ steps


@dataclass(eq=False)
class Step:
    """Common fields: `out` the value written, `node` the ONNX node it came from, `frees` the storages released
    after."""

    out: int
    node: str

    def __post_init__(self):
        self.frees: tuple[int, ...] = ()

    @property
    def op(self) -> str:
        return type(self).__name__

    @property
    def reads(self) -> tuple[int, ...]:
        """Value ids this step reads (activations and constants)."""
        raise NotImplementedError

    def macs(self, prog: Program) -> int:
        return 0


@dataclass(eq=False)
class Conv(Step):
    """out = act(conv(x, weight) + bias [+ residual]). weight: (Cout, Cin/groups, kh, kw). pads: top, left, bottom,
    right."""

    x: int
    weight: np.ndarray
    bias: np.ndarray | None
    groups: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]
    act: Activation | None = None
    residual: int | None = None

    @property
    def reads(self):
        return (self.x,) if self.residual is None else (self.x, self.residual)

    @property
    def kernel(self) -> tuple[int, int]:
        return self.weight.shape[2], self.weight.shape[3]

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.weight.shape[1] == 1

    def macs(self, prog):
        return prog.values[self.out].size * prod(self.weight.shape[1:])


@dataclass(eq=False)
class Gemm(Step):
    """out = act(x @ weight.T + bias) with x (M, K) and weight (N, K): a fully connected layer, constant weights."""

    x: int
    weight: np.ndarray
    bias: np.ndarray | None
    act: Activation | None = None

    @property
    def reads(self):
        return (self.x,)

    def macs(self, prog):
        return prog.values[self.out].size * self.weight.shape[1]


@dataclass(eq=False)
class MatMul(Step):
    """out = a @ b with numpy's matmul broadcasting; both operands are values (either may be a constant)."""

    a: int
    b: int

    @property
    def reads(self):
        return (self.a, self.b)

    def macs(self, prog):
        return prog.values[self.out].size * prog.values[self.a].shape[-1]


@dataclass(eq=False)
class Affine(Step):
    """out = x * scale[c] + shift[c] over axis 1: a batch norm that could not be folded into a convolution."""

    x: int
    scale: np.ndarray
    shift: np.ndarray

    @property
    def reads(self):
        return (self.x,)


@dataclass(eq=False)
class Unary(Step):
    """out = act(x)."""

    x: int
    act: Activation

    @property
    def reads(self):
        return (self.x,)


@dataclass(eq=False)
class Binary(Step):
    """out = a (op) b with numpy broadcasting; op is "add", "sub", "mul", "div", "pow" or "prelu" (b the slope)."""

    a: int
    b: int
    kind: str

    @property
    def reads(self):
        return (self.a, self.b)


@dataclass(eq=False)
class Copy(Step):
    """A strided gather: out[i] = x[offset + sum_d i_d * strides[d]] (element strides into x's storage).

    Transpose and Slice both compile to this; `kind` says which for display.
    """

    x: int
    offset: int
    strides: tuple[int, ...]
    kind: str = "transpose"

    @property
    def reads(self):
        return (self.x,)

    @property
    def op(self):
        return self.kind.capitalize()


@dataclass(eq=False)
class Pool(Step):
    """Max or average pooling over H and W. pads: top, left, bottom, right; ceil_mode is already in out's shape."""

    x: int
    kind: str  # "max" | "avg"
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int] = (1, 1)
    count_include_pad: bool = False

    @property
    def reads(self):
        return (self.x,)

    @property
    def op(self):
        return "MaxPool" if self.kind == "max" else "AveragePool"


@dataclass(eq=False)
class GlobalAvgPool(Step):
    x: int

    @property
    def reads(self):
        return (self.x,)


@dataclass(eq=False)
class Resize(Step):
    """Nearest-neighbour resize of H and W: out[..., y, x] = x[..., src_y[y], src_x[x]] (index maps resolved ahead)."""

    x: int
    src_y: np.ndarray  # int32, len = out H
    src_x: np.ndarray  # int32, len = out W

    @property
    def reads(self):
        return (self.x,)


@dataclass(eq=False)
class LinearResize(Step):
    """Bilinear resize of H and W: each output row (column) blends two source rows (columns), y0/y1 with weight wy
    on y1 (x0/x1, wx likewise); the maps are resolved ahead from ONNX's coordinate transformation."""

    x: int
    y0: np.ndarray  # int32, len = out H
    y1: np.ndarray
    wy: np.ndarray  # float32, len = out H
    x0: np.ndarray  # int32, len = out W
    x1: np.ndarray
    wx: np.ndarray

    @property
    def reads(self):
        return (self.x,)

    @property
    def op(self):
        return "Resize"


@dataclass(eq=False)
class Pad(Step):
    """Padding on every axis: `before`/`after` elements (negative ones crop), `interior` elements of `value` between
    neighbours (ConvTranspose's stride), mode "constant" (value), "reflect", "edge" or "wrap"."""

    x: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    mode: str = "constant"
    value: float = 0.0
    interior: tuple[int, ...] = ()

    @property
    def reads(self):
        return (self.x,)


@dataclass(eq=False)
class Reduce(Step):
    """A reduction over the middle of x's shape seen as (outer, n, inner): "sum", "mean", "max", "min", "l1", "l2" or
    "sumsquare"; out holds outer * inner values."""

    x: int
    kind: str
    outer: int
    n: int
    inner: int

    @property
    def reads(self):
        return (self.x,)

    @property
    def op(self):
        return "Reduce" + {"l1": "L1", "l2": "L2", "sumsquare": "SumSquare"}.get(self.kind, self.kind.capitalize())


@dataclass(eq=False)
class Concat(Step):
    xs: tuple[int, ...]
    axis: int

    @property
    def reads(self):
        return tuple(self.xs)


@dataclass(eq=False)
class Softmax(Step):
    """Softmax over the middle of out's shape seen as (outer, n, inner)."""

    x: int
    outer: int
    n: int
    inner: int

    @property
    def reads(self):
        return (self.x,)


# ---------------------------------------------------------------------------------------------------------- program


@dataclass
class Program:
    """A model compiled for one input shape."""

    values: list[Value]
    steps: list[Step]
    inputs: list[tuple[str, int]]  # (name, value id)
    outputs: list[tuple[str, int]]  # (name, value id)
    folded: list[str] = field(default_factory=list)  # what the compiler folded away, in words
    exact_outputs: dict = field(default_factory=dict)  # integer constant outputs by name, in their own dtype

    def shape(self, vid: int) -> tuple[int, ...]:
        return self.values[vid].shape

    def storage(self, vid: int) -> int:
        return self.values[vid].base

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.values[self.inputs[0][1]].shape

    @property
    def macs(self) -> int:
        return sum(s.macs(self) for s in self.steps)

    @property
    def parameters(self) -> int:
        """Weights the program holds (after folding): conv and gemm weights and biases, constants."""
        n = 0
        for s in self.steps:
            for name in ("weight", "bias", "scale", "shift"):
                a = getattr(s, name, None)
                if a is not None:
                    n += a.size
            act = getattr(s, "act", None)
            if act is not None and act.slope is not None:
                n += act.slope.size
        n += sum(v.size for v in self.values if v.kind == "const")
        return n

    def assign_lifetimes(self) -> None:
        """Set each step's `frees`: storages that no later step and no output reads. Inputs are freed too."""
        values = self.values
        keep = {values[v].base for _, v in self.outputs}
        last: dict[int, int] = {}
        for i, s in enumerate(self.steps):
            s.frees = ()
            for v in s.reads:
                last[values[v].base] = i
        by_step: dict[int, list[int]] = {}
        for storage, i in last.items():
            if storage in keep or values[storage].kind == "const":
                continue
            by_step.setdefault(i, []).append(storage)
        for i, frees in by_step.items():
            self.steps[i].frees = tuple(sorted(frees))

    @property
    def peak_bytes(self) -> int:
        """Most activation bytes alive at once (inputs and temporaries, not constants or weights)."""
        live = {self.storage(v) for _, v in self.inputs}
        size = sum(self.values[v].nbytes for v in live)
        peak = size
        for s in self.steps:
            if s.out not in live:
                live.add(s.out)
                size += self.values[s.out].nbytes
            peak = max(peak, size)
            for f in s.frees:
                if f in live:
                    live.discard(f)
                    size -= self.values[f].nbytes
        return peak


# ------------------------------------------------------------------------------------------- shared parameters

_PARAMETER_FIELDS = ("weight", "bias", "scale", "shift")
POOL_ENTRIES = 4096  # constants whose shape follows the input's get a key per size: past this many, not kept


class ParameterPool:
    """One model's parameter arrays, shared by the programs of all its input sizes.

    The compiler already hands out the model's own weight arrays for every size where it can (what it derives from
    the constants alone is kept with the model); the arrays it makes afresh for a size (constants whose values it
    computes, any weight made anew) come out equal for any size. `share(prog)` swaps each of a new program's
    parameter arrays (and prelu activations) for an equal one an earlier program holds (the same object, or equal
    compared in full), so the programs of a photo library's hundreds of sizes hold one copy, and the runtimes can
    keep what they derive from a weight (packed, uploaded, transformed) by the array's identity instead of hashing
    its contents again."""

    def __init__(self):
        self._arrays: dict[tuple, np.ndarray] = {}
        self._acts: dict[tuple, Activation] = {}

    def _array(self, key: tuple, a: np.ndarray) -> np.ndarray:
        key = key + (a.shape, a.dtype.str)
        kept = self._arrays.get(key)
        if kept is not None and (kept is a or np.array_equal(kept, a)):
            return kept
        if kept is not None or len(self._arrays) < POOL_ENTRIES:
            self._arrays[key] = a
        return a

    def _act(self, key: tuple, act: Activation) -> Activation:
        kept = self._acts.get(key)
        if kept is not None and (kept is act or _same_activation(kept, act)):
            return kept
        self._acts[key] = act
        return act

    def share(self, prog: Program) -> None:
        for st in prog.steps:
            names, has_act = _parameter_fields(type(st))
            if not names and not has_act:
                continue
            key = (st.node, type(st).__name__)
            for name in names:
                a = getattr(st, name)
                if isinstance(a, np.ndarray):
                    setattr(st, name, self._array(key + (name,), a))
            act = st.act if has_act else None
            if isinstance(act, Activation):
                st.act = self._act(key, act)
        for v in prog.values:
            if v.kind == "const" and v.data is not None:
                v.data = self._array(("const", v.name), v.data)


@functools.cache
def _parameter_fields(kind: type) -> tuple[tuple[str, ...], bool]:
    """The parameter fields a step type has, and whether it has an activation (looked up once per type)."""
    names = {f.name for f in dataclasses.fields(kind)}
    return tuple(n for n in _PARAMETER_FIELDS if n in names), "act" in names


def _same_activation(a: Activation, b: Activation) -> bool:
    if (a.kind, a.lo, a.hi, a.alpha) != (b.kind, b.lo, b.hi, b.alpha):
        return False
    if a.slope is None or b.slope is None:
        return a.slope is b.slope
    return a.slope.shape == b.slope.shape and np.array_equal(a.slope, b.slope)
