"""Random ONNX graphs for the fuzz test: single operators with random attributes and the fused chains exporters
make (Conv+BN+activation, residual adds, pads into convolutions, heads that reshape and transpose).

Each generator takes a numpy Generator and returns a `Case` (model and input). Everything is drawn from the
generator, so a case is reproduced by its seed alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT_MAX = 2**63 - 1


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    x: np.ndarray
    ops: set[str] = field(default_factory=set)


class Graph:
    """A graph under construction: input 'x', nodes, initializers; `case()` finishes it."""

    def __init__(self, rng: np.random.Generator, x_shape, opset: int = 14):
        self.rng, self.x_shape, self.opset = rng, tuple(int(d) for d in x_shape), opset
        self.nodes: list = []
        self.inits: list = []

    def const(self, array, dtype=np.float32) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def weights(self, *shape, scale: float = 0.5) -> str:
        return self.const(self.rng.standard_normal(shape) * scale)

    def node(self, op: str, inputs, n_out: int = 1, **attrs):
        outs = [f"{op.lower()}{len(self.nodes)}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=f"{op}_{len(self.nodes)}", **attrs))
        return outs[0] if n_out == 1 else outs

    def case(self, name: str, outputs, x_scale: float = 1.0, positive: bool = False, valid: bool = True) -> Case:
        """The finished case; a `valid` one is checked by onnx's strict shape inference (a generator's mistake)."""
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.x_shape))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)
        if valid:  # the outputs get the types and shapes inferred
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            model.graph.ClearField("output")
            model.graph.output.extend(inferred.graph.output)
        x = self.rng.standard_normal(self.x_shape) * x_scale
        if positive:
            x = np.abs(x) + 0.1
        return Case(name, model, x.astype(np.float32), {n.op_type for n in self.nodes})


# ------------------------------------------------------------------------------------------------- helpers


def _image(rng, n_max=2, c_max=6, side=(3, 12)) -> list[int]:
    return [int(rng.integers(1, n_max + 1)), int(rng.integers(1, c_max + 1)),
            int(rng.integers(side[0], side[1] + 1)), int(rng.integers(side[0], side[1] + 1))]


def _broadcastable(rng, shape) -> list[int]:
    """A shape that broadcasts to `shape`: leading dims dropped, some dims set to 1."""
    keep = int(rng.integers(0, len(shape) + 1))
    tail = list(shape[len(shape) - keep:])
    return [1 if rng.random() < 0.4 else d for d in tail]


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _conv_attrs(rng, h: int, w: int, k_max: int = 5) -> dict:
    """Conv attributes giving an output of at least 1x1 on an h x w input."""
    while True:
        k = [int(rng.integers(1, k_max + 1)), int(rng.integers(1, k_max + 1))]
        dil = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        strides = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        pads = [int(rng.integers(0, 3)) for _ in range(4)]
        if all(size + pads[i] + pads[i + 2] - dil[i] * (k[i] - 1) - 1 >= 0 for i, size in enumerate((h, w))):
            break
    attrs = {"kernel_shape": k, "strides": strides, "dilations": dil}
    if rng.random() < 0.2:
        attrs["auto_pad"] = _pick(rng, ["SAME_UPPER", "SAME_LOWER", "VALID"])
        if attrs["auto_pad"] != "VALID":
            attrs["dilations"] = [1, 1]  # SAME with dilation is ambiguous between runtimes
    else:
        attrs["pads"] = pads
    return attrs


def _same_conv(g: Graph, x: str, c_in: int, c_out: int, k: int = 3, stride: int = 1, group: int = 1,
               bias: bool = True) -> str:
    inputs = [x, g.weights(c_out, c_in // group, k, k)]
    if bias:
        inputs.append(g.weights(c_out))
    return g.node("Conv", inputs, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=group)


def _activation(g: Graph, x: str, c: int) -> str:
    rng = g.rng
    kind = _pick(rng, ["Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish"])
    if kind == "Clip":
        return g.node("Clip", [x, g.const(0.0), g.const(6.0)])
    if kind == "LeakyRelu":
        return g.node("LeakyRelu", [x], alpha=float(rng.uniform(0.01, 0.3)))
    if kind == "PRelu":
        return g.node("PRelu", [x, g.const(rng.uniform(0, 0.5, (c, 1, 1)))])
    if kind == "HardSigmoid":
        return g.node("HardSigmoid", [x], alpha=float(rng.uniform(0.1, 0.3)), beta=float(rng.uniform(0.3, 0.7)))
    return g.node(kind, [x])


def _batchnorm(g: Graph, x: str, c: int) -> str:
    rng = g.rng
    return g.node("BatchNormalization", [x, g.const(rng.uniform(0.5, 1.5, c)), g.weights(c), g.weights(c),
                                         g.const(rng.uniform(0.5, 2.0, c))], epsilon=float(rng.uniform(1e-5, 1e-2)))


# ---------------------------------------------------------------------------------------------- single ops


def conv(rng) -> Case:
    n, c, h, w = _image(rng)
    group = _pick(rng, [d for d in range(1, c + 1) if c % d == 0])
    c_out = group * int(rng.integers(1, 4))
    if rng.random() < 0.3:  # depthwise
        group, c_out = c, c
    g = Graph(rng, (n, c, h, w), opset=_pick(rng, [11, 13]))
    attrs = _conv_attrs(rng, h, w)
    inputs = ["x", g.weights(c_out, c // group, *attrs["kernel_shape"])]
    if rng.random() < 0.7:
        inputs.append(g.weights(c_out))
    return g.case("conv", g.node("Conv", inputs, group=group, **attrs))


def conv_transpose(rng) -> Case:
    n, c, h, w = _image(rng, side=(2, 7))
    group = _pick(rng, [d for d in range(1, c + 1) if c % d == 0])
    c_out = group * int(rng.integers(1, 3))
    k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    attrs = {"kernel_shape": k, "strides": strides, "group": group,
             "pads": [int(rng.integers(0, min(k[i % 2], 2))) for i in range(4)]}
    if rng.random() < 0.4:
        attrs["output_padding"] = [int(rng.integers(0, s)) for s in strides]
    if rng.random() < 0.3:
        attrs["dilations"] = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    g = Graph(rng, (n, c, h, w))
    inputs = ["x", g.weights(c, c_out // group, *k)]
    if rng.random() < 0.5:
        inputs.append(g.weights(c_out))
    return g.case("conv_transpose", g.node("ConvTranspose", inputs, **attrs))


def batchnorm(rng) -> Case:
    shape = _image(rng)
    g = Graph(rng, shape, opset=_pick(rng, [9, 13, 15]))
    return g.case("batchnorm", _batchnorm(g, "x", shape[1]))


def unary(rng) -> Case:
    shape = _image(rng) if rng.random() < 0.7 else [int(rng.integers(1, 5)), int(rng.integers(1, 20))]
    g = Graph(rng, shape)
    kind = _pick(rng, ["Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Exp", "Sqrt", "Clip",
                       "Identity", "Dropout", "Softmax", "Cast"])
    if kind == "LeakyRelu":
        y = g.node(kind, ["x"], alpha=float(rng.uniform(0, 1)))
    elif kind == "HardSigmoid":
        y = g.node(kind, ["x"], alpha=float(rng.uniform(0.05, 0.5)), beta=float(rng.uniform(0, 1)))
    elif kind == "Clip":
        lo, hi = sorted(rng.uniform(-1, 1, 2))
        y = g.node(kind, ["x", g.const(lo) if rng.random() < 0.8 else "", g.const(hi) if rng.random() < 0.8 else ""])
    elif kind == "Softmax":
        g.opset = _pick(rng, [11, 13])
        y = g.node(kind, ["x"], axis=int(rng.integers(-len(shape), len(shape))))
    elif kind == "Cast":
        y = g.node(kind, ["x"], to=TensorProto.FLOAT)
    else:
        y = g.node(kind, ["x"])
    return g.case(f"unary_{kind.lower()}", y, x_scale=2.0)


def prelu(rng) -> Case:
    n, c, h, w = _image(rng)
    g = Graph(rng, (n, c, h, w))
    slope_shape = _pick(rng, [(c, 1, 1), (1,), (c, h, w), (1, 1, w)])
    return g.case("prelu", g.node("PRelu", ["x", g.const(rng.uniform(-0.5, 0.5, slope_shape))]))


def binary(rng) -> Case:
    shape = _image(rng) if rng.random() < 0.8 else [int(rng.integers(1, 6)), int(rng.integers(1, 9))]
    g = Graph(rng, shape)
    kind = _pick(rng, ["Add", "Sub", "Mul", "Div", "Pow", "Sum"])
    other = _broadcastable(rng, shape)
    if kind == "Div":
        b = g.const(rng.choice([-1, 1], other) * rng.uniform(0.5, 2.0, other))
    elif kind == "Pow":
        b = g.const(rng.choice([2.0, 3.0, 0.5, -1.0, 1.0], other))
    else:
        b = g.weights(*other)
    if kind == "Sum":
        y = g.node(kind, ["x", b, g.weights(*_broadcastable(rng, shape))])
    elif kind in ("Sub", "Add", "Mul") and rng.random() < 0.3:
        y = g.node(kind, [b, "x"])  # the constant first: operand order matters for Sub
    else:
        y = g.node(kind, ["x", b])
    return g.case(f"binary_{kind.lower()}", y, positive=kind == "Pow" and rng.random() < 0.5)


def pool(rng) -> Case:
    n, c, h, w = _image(rng)
    kind = _pick(rng, ["MaxPool", "AveragePool", "GlobalAveragePool"])
    g = Graph(rng, (n, c, h, w), opset=_pick(rng, [11, 13, 19]) if kind == "AveragePool" else 13)
    if kind == "GlobalAveragePool":
        return g.case("global_average_pool", g.node(kind, ["x"]))
    k = [int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1))]
    attrs = {"kernel_shape": k, "strides": [int(rng.integers(1, 4)), int(rng.integers(1, 4))],
             "pads": [int(rng.integers(0, k[i % 2])) for i in range(4)], "ceil_mode": int(rng.integers(0, 2))}
    if kind == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    elif rng.random() < 0.3:
        attrs["dilations"] = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    eff = [attrs.get("dilations", [1, 1])[i] * (k[i] - 1) + 1 for i in range(2)]
    if any(size + attrs["pads"][i] + attrs["pads"][i + 2] < eff[i] for i, size in enumerate((h, w))):
        attrs["pads"] = [0, 0, 0, 0]
        attrs.pop("dilations", None)
    return g.case(kind.lower(), g.node(kind, ["x"], **attrs))


def concat(rng) -> Case:
    shape = _image(rng)
    g = Graph(rng, shape)
    axis = int(rng.integers(-4, 4))
    other = list(shape)
    other[axis] = int(rng.integers(1, 4))
    inputs = ["x", g.weights(*other)] if rng.random() < 0.6 else ["x", "x"]
    if rng.random() < 0.5:
        inputs.reverse()
    return g.case("concat", g.node("Concat", inputs, axis=axis))


def reshape(rng) -> Case:
    shape = _image(rng)
    total = int(np.prod(shape))
    dims, left = [], total
    for _ in range(int(rng.integers(1, 4))):
        d = _pick(rng, [f for f in range(1, left + 1) if left % f == 0])
        dims.append(d)
        left //= d
    dims.append(left)
    target = list(dims)
    target[int(rng.integers(len(target)))] = -1
    if target[0] == shape[0] and rng.random() < 0.5:
        target[0] = 0  # 0 copies the input's dimension
    g = Graph(rng, shape)
    return g.case("reshape", g.node("Reshape", ["x", g.const(target, np.int64)]))


def transpose(rng) -> Case:
    rank = int(rng.integers(2, 5))
    shape = _image(rng)[:rank] if rank < 4 else _image(rng)
    g = Graph(rng, shape)
    attrs = {"perm": [int(p) for p in rng.permutation(rank)]} if rng.random() < 0.9 else {}
    return g.case("transpose", g.node("Transpose", ["x"], **attrs))


def flatten_squeeze(rng) -> Case:
    shape = _image(rng)
    kind = _pick(rng, ["Flatten", "Squeeze", "Unsqueeze"])
    if kind == "Flatten":
        g = Graph(rng, shape)
        return g.case("flatten", g.node(kind, ["x"], axis=int(rng.integers(-4, 5))))
    if kind == "Squeeze":
        shape[int(rng.integers(0, 4))] = 1
        g = Graph(rng, shape, opset=_pick(rng, [11, 13]))
        ones = [i for i, d in enumerate(shape) if d == 1]
        axes = [int(a) - (4 if rng.random() < 0.5 else 0) for a in ones]
        if g.opset >= 13:
            return g.case("squeeze", g.node(kind, ["x", g.const(axes, np.int64)]))
        return g.case("squeeze", g.node(kind, ["x"], axes=axes))
    g = Graph(rng, shape, opset=_pick(rng, [11, 13]))
    axes = sorted({int(rng.integers(-5, 5)) % 5 for _ in range(int(rng.integers(1, 3)))})
    if g.opset >= 13:
        return g.case("unsqueeze", g.node(kind, ["x", g.const(axes, np.int64)]))
    return g.case("unsqueeze", g.node(kind, ["x"], axes=axes))


def slice_(rng) -> Case:
    shape = _image(rng)
    g = Graph(rng, shape)
    axes = sorted(rng.choice(4, int(rng.integers(1, 5)), replace=False).tolist())
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a]
        step = int(_pick(rng, [1, 1, 2, 3, -1, -2]))
        start = int(rng.integers(-d - 1, d + 2))
        end = _pick(rng, [int(rng.integers(-d - 1, d + 2)), INT_MAX, -INT_MAX])
        starts.append(start)
        ends.append(end)
        steps.append(step)
    named = [a - 4 if rng.random() < 0.3 else a for a in axes]
    inputs = ["x", g.const(starts, np.int64), g.const(ends, np.int64), g.const(named, np.int64),
              g.const(steps, np.int64)]
    return g.case("slice", g.node("Slice", inputs))


def resize(rng) -> Case:
    n, c, h, w = _image(rng, side=(2, 8))
    mode = _pick(rng, ["nearest", "linear"])
    g = Graph(rng, (n, c, h, w), opset=_pick(rng, [11, 13, 18]))
    attrs = {"mode": mode}
    coords = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"]
    attrs["coordinate_transformation_mode"] = _pick(rng, coords + (["half_pixel_symmetric"] if g.opset >= 18 else []))
    if mode == "nearest":
        attrs["nearest_mode"] = _pick(rng, ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    roi = g.const([], np.float32)
    if rng.random() < 0.5:
        scales = [1.0, 1.0, float(_pick(rng, [0.5, 1.0, 1.5, 2.0, 3.0])), float(_pick(rng, [0.5, 1.0, 2.0, 2.5]))]
        y = g.node("Resize", ["x", roi, g.const(scales)], **attrs)
    else:
        sizes = [n, c, int(rng.integers(1, 2 * h + 1)), int(rng.integers(1, 2 * w + 1))]
        no_scales = g.const([], np.float32) if g.opset == 11 else ""  # opset 11 wants an empty tensor there
        y = g.node("Resize", ["x", roi, no_scales, g.const(sizes, np.int64)], **attrs)
    return g.case(f"resize_{mode}", y)


def gemm_matmul(rng) -> Case:
    if rng.random() < 0.5:
        m, k, n = (int(v) for v in rng.integers(1, 12, 3))
        g = Graph(rng, (m, k))
        attrs = {"alpha": float(rng.uniform(0.5, 2.0)), "beta": float(rng.uniform(0.5, 2.0))}
        trans_b = int(rng.integers(0, 2))
        if trans_b:
            attrs["transB"] = 1
        inputs = ["x", g.weights(*((n, k) if trans_b else (k, n)))]
        if rng.random() < 0.8:
            inputs.append(g.weights(*_pick(rng, [(n,), (1, n), (1,), (m, n)])))
        return g.case("gemm", g.node("Gemm", inputs, **attrs))
    lead = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    m, k, n = (int(v) for v in rng.integers(1, 10, 3))
    g = Graph(rng, (*lead, m, k))
    b_shape = (k, n) if rng.random() < 0.7 or not lead else (*lead[-1:], k, n)
    return g.case("matmul", g.node("MatMul", ["x", g.weights(*b_shape)]))


def reduce(rng) -> Case:
    shape = _image(rng)
    kind = _pick(rng, ["ReduceMean", "ReduceL2", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1",
                       "ReduceSumSquare"])
    g = Graph(rng, shape, opset=_pick(rng, [13, 18]))
    axes = sorted(int(a) for a in rng.choice(4, int(rng.integers(1, 5)), replace=False))
    axes = [a - 4 if rng.random() < 0.3 else a for a in axes]
    keepdims = int(rng.integers(0, 2))
    if g.opset >= 18 or kind == "ReduceSum":
        return g.case(kind.lower(), g.node(kind, ["x", g.const(axes, np.int64)], keepdims=keepdims))
    return g.case(kind.lower(), g.node(kind, ["x"], axes=axes, keepdims=keepdims))


def split(rng) -> Case:
    shape = _image(rng, side=(4, 10))
    axis = int(rng.integers(-4, 4))
    d = shape[axis]
    shape[axis] = d = max(d, 2)
    g = Graph(rng, shape)
    cut = int(rng.integers(1, d))
    return g.case("split", g.node("Split", ["x", g.const([cut, d - cut], np.int64)], n_out=2, axis=axis))


def pad(rng) -> Case:
    n, c, h, w = _image(rng, side=(3, 8))
    mode = _pick(rng, ["constant", "reflect", "edge"])
    g = Graph(rng, (n, c, h, w))
    pads = [0, int(rng.integers(0, 2)), int(rng.integers(0, h)), int(rng.integers(0, w)),
            0, int(rng.integers(0, 2)), int(rng.integers(0, h)), int(rng.integers(0, w))]
    if mode != "constant":
        pads[1] = pads[5] = 0
    inputs = ["x", g.const(pads, np.int64)]
    if mode == "constant" and rng.random() < 0.5:
        inputs.append(g.const(float(rng.uniform(-1, 1))))
    return g.case(f"pad_{mode}", g.node("Pad", inputs, mode=mode))


def lp_gather(rng) -> Case:
    shape = _image(rng)
    g = Graph(rng, shape)
    if rng.random() < 0.5:
        return g.case("lp_normalization", g.node("LpNormalization", ["x"], axis=int(rng.integers(-4, 4)),
                                                 p=int(_pick(rng, [1, 2]))))
    axis = int(rng.integers(-4, 4))
    d = shape[axis]
    indices = rng.integers(-d, d, _pick(rng, [(), (1,), (3,), (2, 2)]))
    return g.case("gather", g.node("Gather", ["x", g.const(indices, np.int64)], axis=axis))


# ---------------------------------------------------------------------------------------------- fused chains


def chain_conv_bn_act(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 10))
    c_out = int(rng.integers(1, 7))
    g = Graph(rng, (n, c, h, w))
    y = _same_conv(g, "x", c, c_out, k=_pick(rng, [1, 3]), stride=_pick(rng, [1, 2]), bias=rng.random() < 0.5)
    return g.case("conv_bn_act", _activation(g, _batchnorm(g, y, c_out), c_out))


def chain_residual(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 10))
    g = Graph(rng, (n, c, h, w))
    y = _same_conv(g, "x", c, c, k=_pick(rng, [1, 3]))
    if rng.random() < 0.5:
        y = _batchnorm(g, y, c)
    y = g.node("Add", [y, "x"] if rng.random() < 0.5 else ["x", y])
    return g.case("conv_add_relu", g.node("Relu", [y]) if rng.random() < 0.7 else _activation(g, y, c))


def chain_mobilenet(rng) -> Case:
    n, c, h, w = _image(rng, side=(6, 12))
    mid, c_out = int(rng.integers(2, 8)), int(rng.integers(1, 8))
    g = Graph(rng, (n, c, h, w))
    y = _activation(g, _same_conv(g, "x", c, mid, k=3, stride=2), mid)
    y = _activation(g, _batchnorm(g, _same_conv(g, y, mid, mid, k=3, group=mid, bias=False), mid), mid)
    return g.case("mobilenet_block", _same_conv(g, y, mid, c_out, k=1))


def chain_pad_conv(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 10))
    g = Graph(rng, (n, c, h, w))
    p = [int(v) for v in rng.integers(0, 3, 4)]
    y = g.node("Pad", ["x", g.const([0, 0, p[0], p[1], 0, 0, p[2], p[3]], np.int64)], mode="constant")
    c_out = int(rng.integers(1, 6))
    y = g.node("Conv", [y, g.weights(c_out, c, 3, 3), g.weights(c_out)], kernel_shape=[3, 3],
               strides=[_pick(rng, [1, 2])] * 2)
    return g.case("pad_conv", _activation(g, y, c_out))


def chain_scale_shift(rng) -> Case:
    n, c, h, w = _image(rng, side=(3, 9))
    c_out = int(rng.integers(1, 6))
    g = Graph(rng, (n, c, h, w))
    y = _same_conv(g, "x", c, c_out, k=3)
    y = g.node("Mul", [y, g.const(rng.uniform(0.5, 1.5, (1, c_out, 1, 1)))])
    y = g.node("Add", [y, g.weights(1, c_out, 1, 1)])
    return g.case("conv_mul_add", _activation(g, y, c_out))


def chain_head(rng) -> Case:
    n, c, h, w = _image(rng, side=(2, 8))
    feat, classes = int(rng.integers(2, 10)), int(rng.integers(2, 6))
    g = Graph(rng, (n, c, h, w))
    y = g.node("GlobalAveragePool", ["x"]) if rng.random() < 0.5 else g.node("MaxPool", ["x"], kernel_shape=[h, w])
    y = g.node("Flatten", [y], axis=1)
    y = g.node("Relu", [g.node("Gemm", [y, g.weights(feat, c), g.weights(feat)], transB=1)])
    y = g.node("Gemm", [y, g.weights(feat, classes), g.weights(classes)])
    return g.case("pool_gemm_softmax", g.node("Softmax", [y], axis=1) if rng.random() < 0.6 else y)


def chain_fpn(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 10))
    h, w = h - h % 2, w - w % 2
    c1, c2 = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    g = Graph(rng, (n, c, h, w))
    coarse = g.node("Relu", [_same_conv(g, "x", c, c1, k=3, stride=2)])
    up = g.node("Resize", [coarse, "", g.const([1.0, 1.0, 2.0, 2.0])], mode="nearest")
    fine = g.node("Relu", [_same_conv(g, "x", c, c2, k=3)])
    y = g.node("Concat", [up, fine] if rng.random() < 0.5 else [fine, up], axis=1)
    return g.case("conv_resize_concat", _same_conv(g, y, c1 + c2, int(rng.integers(1, 4)), k=1))


def chain_yunet_head(rng) -> Case:
    n, c, h, w = _image(rng, n_max=1, side=(2, 8))
    k = int(rng.integers(1, 4))
    g = Graph(rng, (n, c, h, w))
    y = _same_conv(g, "x", c, 2 * k, k=1)
    y = g.node("Transpose", [y], perm=[0, 2, 3, 1])
    y = g.node("Reshape", [y, g.const([n, -1, 2], np.int64)])
    kind = _pick(rng, ["Softmax", "Sigmoid"])
    y = g.node("Softmax", [y], axis=-1) if kind == "Softmax" else g.node("Sigmoid", [y])
    return g.case("transpose_reshape_softmax", y)


def chain_matmul_bias(rng) -> Case:
    m, k, n = (int(v) for v in rng.integers(1, 12, 3))
    g = Graph(rng, (int(rng.integers(1, 3)), m, k))
    y = g.node("Add", [g.node("MatMul", ["x", g.weights(k, n)]), g.weights(n)])
    return g.case("matmul_add_relu", g.node("Relu", [y]))


def chain_dynamic_reshape(rng) -> Case:
    n, c, h, w = _image(rng)
    g = Graph(rng, (n, c, h, w))
    shape = g.node("Shape", ["x"])
    batch = g.node("Unsqueeze", [g.node("Gather", [shape, g.const(0, np.int64)], axis=0), g.const([0], np.int64)])
    target = g.node("Concat", [batch, g.const([-1], np.int64)], axis=0)
    y = g.node("Reshape", ["x", target])
    if rng.random() < 0.5:
        ones = g.node("ConstantOfShape", [g.node("Shape", [y])],
                      value=numpy_helper.from_array(np.array([float(rng.uniform(-1, 1))], np.float32)))
        y = g.node("Add", [y, ones])
    return g.case("shape_gather_concat_reshape", y)


def chain_silu(rng) -> Case:
    n, c, h, w = _image(rng, side=(3, 9))
    c_out = int(rng.integers(1, 6))
    g = Graph(rng, (n, c, h, w))
    y = _same_conv(g, "x", c, c_out, k=3)
    return g.case("conv_sigmoid_mul", g.node("Mul", [y, g.node("Sigmoid", [y])]))


def chain_pool_conv_bn(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 12))
    c_out = int(rng.integers(1, 6))
    g = Graph(rng, (n, c, h, w))
    y = g.node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=int(rng.integers(0, 2)))
    return g.case("maxpool_conv_bn", _batchnorm(g, _same_conv(g, y, c, c_out, k=3, bias=False), c_out))


def chain_iresnet(rng) -> Case:
    n, c, h, w = _image(rng, side=(4, 9))
    g = Graph(rng, (n, c, h, w))
    y = _batchnorm(g, "x", c)
    y = g.node("PRelu", [_same_conv(g, y, c, c, k=3, bias=False), g.const(rng.uniform(0, 0.5, (c, 1, 1)))])
    y = _batchnorm(g, _same_conv(g, y, c, c, k=3, bias=False), c)
    return g.case("bn_conv_prelu_conv_bn_add", g.node("Add", [y, "x"]))


def chain_deconv_bn_relu(rng) -> Case:
    n, c, h, w = _image(rng, side=(2, 6))
    c_out = int(rng.integers(1, 5))
    g = Graph(rng, (n, c, h, w))
    y = g.node("ConvTranspose", ["x", g.weights(c, c_out, 2, 2)], kernel_shape=[2, 2], strides=[2, 2])
    return g.case("deconv_bn_relu", g.node("Relu", [_batchnorm(g, y, c_out)]))


def chain_wide_conv(rng) -> Case:
    """Channel counts and sizes large enough for the GPU's tiled and split-K convolution kernels."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(8, 40))
    h, w = (int(v) for v in rng.integers(6, 21, 2))
    c_out = int(rng.integers(8, 96))
    g = Graph(rng, (n, c, h, w))
    k, stride = int(_pick(rng, [1, 3])), int(_pick(rng, [1, 2]))
    y = _same_conv(g, "x", c, c_out, k=k, stride=stride, bias=rng.random() < 0.5)
    if rng.random() < 0.5:
        y = _batchnorm(g, y, c_out)
    if stride == 1 and c_out == c or rng.random() < 0.3:
        y = g.node("Add", [y, _same_conv(g, "x", c, c_out, k=1, stride=stride)])
    return g.case("wide_conv", _activation(g, y, c_out), x_scale=0.5)


def hostile(rng) -> Case:
    """One operator with one attribute or constant the spec does not allow (or allows only at its edge): a case
    facerun must refuse, or run with the meaning onnxruntime (or onnx's reference) gives it."""
    n, c, h, w = _image(rng, side=(4, 8))
    g = Graph(rng, (n, c, h, w))
    kind = int(rng.integers(0, 16))
    if kind == 0:  # pads: negative, or as large as the window
        k = int(rng.integers(1, 4))
        y = g.node(_pick(rng, ["MaxPool", "AveragePool"]), ["x"], kernel_shape=[k, k],
                   pads=[int(rng.integers(-2, k + 3)) for _ in range(4)])
    elif kind == 1:  # kernel, stride or dilation below 1
        attrs = {"kernel_shape": [int(rng.integers(-1, 3)), 2], "strides": [int(rng.integers(-1, 3)), 1],
                 "dilations": [1, int(rng.integers(-1, 3))]}
        y = g.node("MaxPool", ["x"], **attrs)
    elif kind == 2:  # group that does not divide, or is 0
        y = g.node("Conv", ["x", g.weights(int(rng.integers(1, 7)), max(1, c // 2), 3, 3)],
                   group=int(rng.integers(0, 4)))
    elif kind == 3:  # an empty weight
        y = g.node("Conv", ["x", g.const(np.zeros((2, c, int(rng.integers(0, 2)), 0)))])
    elif kind == 4:  # output_padding at or past the stride
        s = int(rng.integers(1, 3))
        y = g.node("ConvTranspose", ["x", g.weights(c, 2, 3, 3)], strides=[s, s],
                   output_padding=[int(rng.integers(-1, s + 2))] * 2)
    elif kind == 5:  # an axis out of range
        op = _pick(rng, ["Softmax", "Flatten", "Concat", "LpNormalization", "Gather", "Split"])
        axis = int(_pick(rng, [-9, -5, 4, 5, 17, 99, -1, 3]))
        inputs = {"Concat": ["x", "x"], "Gather": ["x", g.const([0], np.int64)],
                  "Split": ["x", g.const([1, 1], np.int64)]}.get(op, ["x"])
        y = g.node(op, inputs, n_out=2 if op == "Split" else 1, axis=axis)
        y = y[0] if op == "Split" else y
    elif kind == 6:  # a permutation that is not one
        y = g.node("Transpose", ["x"], perm=[int(v) for v in rng.integers(-1, 5, 4)])
    elif kind == 7:  # Reshape targets that cannot be
        y = g.node("Reshape", ["x", g.const(_pick(rng, [[-1, -1], [0, 0, 0, 0, 0], [7, -1, 3], [-2, 4]]), np.int64)])
    elif kind == 8:  # Gather indices past the axis
        y = g.node("Gather", ["x", g.const([int(rng.integers(-2 * c, 2 * c + 1))], np.int64)], axis=1)
    elif kind == 9:  # Resize scales or sizes that are 0, negative or not finite
        scales = [1.0, 1.0, float(_pick(rng, [0.0, -2.0, float("inf"), float("nan"), 2.0])), 2.0]
        y = g.node("Resize", ["x", g.const([], np.float32), g.const(scales)], mode="nearest")
    elif kind == 10:  # Squeeze or Unsqueeze axes that are wrong
        if rng.random() < 0.5:
            y = g.node("Squeeze", ["x", g.const([int(rng.integers(-4, 4))], np.int64)])
        else:
            y = g.node("Unsqueeze", ["x", g.const(_pick(rng, [[0, 0], [9], [-6], [1, -4]]), np.int64)])
    elif kind == 11:  # split sizes that do not add up
        y = g.node("Split", ["x", g.const([1, c + 1], np.int64)], n_out=2, axis=1)[0]
    elif kind == 12:  # Slice steps of 0, axes repeated or out of range
        axes = _pick(rng, [[1, 1], [9], [-5], [2]])
        y = g.node("Slice", ["x", g.const([0] * len(axes), np.int64), g.const([2] * len(axes), np.int64),
                             g.const(axes, np.int64), g.const([_pick(rng, [0, 1])] * len(axes), np.int64)])
    elif kind == 13:  # reductions over axes out of range or repeated
        y = g.node("ReduceMean", ["x"], axes=_pick(rng, [[1, 1], [4], [-5], [0, -4]]), keepdims=1)
    elif kind == 14:  # Pad that reaches past the input in reflect mode, or removes more than there is
        big = int(rng.integers(h, h + 3))
        y = g.node("Pad", ["x", g.const([0, 0, big, 0, 0, 0, -big if rng.random() < 0.5 else 0, 0], np.int64)],
                   mode=_pick(rng, ["reflect", "constant", "edge"]))
    else:  # a Gemm whose operands do not multiply, or a C that does not broadcast
        g = Graph(rng, (int(rng.integers(1, 5)), int(rng.integers(1, 5))))
        m, k = g.x_shape
        y = g.node("Gemm", ["x", g.weights(k + int(rng.integers(0, 2)), 3),
                            g.weights(_pick(rng, [2, 4, m + 1]), 3)])
    return g.case("hostile", y, valid=False)


SINGLE = [conv, conv_transpose, batchnorm, unary, prelu, binary, pool, concat, reshape, transpose, flatten_squeeze,
          slice_, resize, gemm_matmul, reduce, split, pad, lp_gather]
CHAINS = [chain_conv_bn_act, chain_residual, chain_mobilenet, chain_pad_conv, chain_scale_shift, chain_head,
          chain_fpn, chain_yunet_head, chain_matmul_bias, chain_dynamic_reshape, chain_silu, chain_pool_conv_bn,
          chain_iresnet, chain_deconv_bn_relu, chain_wide_conv]


def make_case(seed: int, index: int) -> Case:
    """Case `index` of the fuzz run `seed`: the single ops first, then the chains, round robin; negative indices
    are the hostile cases."""
    rng = np.random.default_rng([seed, abs(index), index < 0])
    if index < 0:
        return hostile(rng)
    generators = SINGLE + CHAINS
    return generators[index % len(generators)](rng)
