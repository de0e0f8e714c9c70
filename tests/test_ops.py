"""Every operator facerun compiles, on small odd-shaped one-node graphs, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from facerun.agree import compare
from facerun.bench import oracle
from facerun.net import load

from onnx_graphs import one_node, save

rng = np.random.default_rng(7)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def check(tmp_path, model, x, atol_rel=1e-5):
    path = save(model, tmp_path / "m.onnx")
    net = load(path)
    got = net.run(x)
    want = oracle.run(oracle.session(path), {"x": x})
    for name in net.output_names:
        d = compare(name, got[name], want[name])
        assert got[name].shape == want[name].shape, (name, got[name].shape, want[name].shape)
        assert d.max_abs <= atol_rel * max(1.0, d.range), f"{name}: {d}"
    return net


CONV_CASES = {
    # name: (x shape, weight shape, attrs)
    "dense3x3": ((1, 3, 11, 9), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "strided": ((1, 4, 13, 10), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 6, 9, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "depthwise_strided": ((1, 6, 10, 9), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise_mult2": ((1, 3, 9, 7), (6, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "grouped": ((1, 8, 9, 7), (6, 4, 3, 3), {"group": 2, "pads": [0, 1, 1, 0]}),
    "pointwise": ((2, 7, 5, 3), (4, 7, 1, 1), {}),
    "pointwise_strided": ((1, 7, 9, 7), (4, 7, 1, 1), {"strides": [2, 2]}),
    "5x5": ((1, 3, 11, 13), (4, 3, 5, 5), {"pads": [2, 2, 2, 2]}),
    "asymmetric": ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [0, 1, 2, 0]}),
    "dilated": ((1, 3, 11, 12), (4, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "same_upper": ((1, 3, 9, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower": ((1, 3, 9, 8), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    "valid_rect": ((1, 3, 9, 8), (4, 3, 3, 2), {"auto_pad": "VALID", "strides": [1, 2]}),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(tmp_path, case):
    xs, ws, attrs = CONV_CASES[case]
    model = one_node("Conv", xs, {"w": r(*ws), "b": r(ws[0])}, attrs)
    check(tmp_path, model, r(*xs))


def test_conv_without_bias(tmp_path):
    check(tmp_path, one_node("Conv", (1, 3, 7, 7), {"w": r(2, 3, 3, 3)}), r(1, 3, 7, 7))


def test_batchnorm_alone_is_an_affine_step(tmp_path):
    c = 5
    stats = {"s": r(c), "b": r(c), "m": r(c), "v": r(c, lo=0.5, hi=1.5)}
    model = one_node("BatchNormalization", (2, c, 3, 4), stats, {"epsilon": 1e-3})
    net = check(tmp_path, model, r(2, c, 3, 4))
    assert [s.op for s in net.program((2, c, 3, 4)).steps] == ["Affine"]


@pytest.mark.parametrize("op,attrs,inits", [
    ("Relu", {}, {}),
    ("Sigmoid", {}, {}),
    ("LeakyRelu", {"alpha": 0.2}, {}),
    ("Clip", {}, {"lo": np.float32(-0.3), "hi": np.float32(0.6)}),
    ("PRelu", {}, {"slope": r(4, 1, 1)}),
    ("PRelu", {}, {"slope": r(1, 4, 1, 1)}),
    ("PRelu", {}, {"slope": r(5)}),  # broadcasts along the last axis: not per channel
])
def test_activations(tmp_path, op, attrs, inits):
    check(tmp_path, one_node(op, (1, 4, 3, 5), inits, attrs), r(1, 4, 3, 5, lo=-3, hi=3))


def test_clip_opset9_attributes(tmp_path):
    check(tmp_path, one_node("Clip", (1, 2, 3, 3), {}, {"min": 0.0, "max": 6.0}, opset=9), r(1, 2, 3, 3, lo=-8, hi=8))


def test_clip_with_only_max(tmp_path):
    check(tmp_path, one_node("Clip", (1, 2, 3, 3), {"hi": np.float32(0.5)}, extra_inputs=(), opset=13).__class__ and
          _clip_max_only(), r(1, 2, 3, 3, lo=-2, hi=2))


def _clip_max_only():
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Clip", ["x", "", "hi"], ["y0"])
    g = helper.make_graph([node], "clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(0.5, np.float32), "hi")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("b_shape", [(1, 3, 1, 1), (1, 1, 1, 5), (), (4, 3, 2, 5), (5,), (3, 1, 5)])
def test_binary_broadcasting(tmp_path, op, b_shape):
    b = r(*b_shape, lo=0.5, hi=1.5) if b_shape else np.float32(1.25)
    check(tmp_path, one_node(op, (4, 3, 2, 5), {"b": b}), r(4, 3, 2, 5))


def test_binary_of_two_activations(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Div", ["x", "s"], ["y0"])]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)])
    check(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), r(1, 3, 4, 5))


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [0, 3, 1, 2], [1, 0, 2, 3], [3, 2, 1, 0]])
def test_transpose(tmp_path, perm):
    check(tmp_path, one_node("Transpose", (2, 3, 5, 7), {}, {"perm": perm}), r(2, 3, 5, 7))


POOL_CASES = {
    "max2x2": ("MaxPool", (1, 3, 9, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "max3x3pad": ("MaxPool", (1, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max_ceil": ("MaxPool", (1, 2, 9, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "max_ceil_pad": ("MaxPool", (1, 2, 10, 7),
                     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "avg_ceil": ("AveragePool", (1, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "avg_pad_exclude": ("AveragePool", (1, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    "avg_pad_include": ("AveragePool", (1, 3, 9, 7),
                        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "avg_asym": ("AveragePool", (1, 2, 8, 9), {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 0]}),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pools(tmp_path, case):
    op, xs, attrs = POOL_CASES[case]
    check(tmp_path, one_node(op, xs, {}, attrs), r(*xs))


def test_global_average_pool(tmp_path):
    check(tmp_path, one_node("GlobalAveragePool", (2, 5, 7, 3)), r(2, 5, 7, 3))


@pytest.mark.parametrize("attrs,scales,sizes", [
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, [1, 1, 2, 2], None),
    ({"mode": "nearest"}, [1, 1, 1.5, 2.5], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"}, None,
     [2, 3, 7, 4]),
    ({"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "ceil"}, None,
     [2, 3, 10, 11]),
])
def test_resize_nearest(tmp_path, attrs, scales, sizes):
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    ins = ["x", "roi"]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        ins.append("scales")
    else:
        ins.append("")
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        ins.append("sizes")
    node = helper.make_node("Resize", ins, ["y0"], **attrs)
    g = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 4])],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)], inits)
    check(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), r(2, 3, 5, 4))


def test_upsample_opset9(tmp_path):
    model = one_node("Upsample", (1, 2, 3, 4), {"scales": np.array([1, 1, 2, 3], np.float32)}, {"mode": "nearest"},
                     opset=9)
    check(tmp_path, model, r(1, 2, 3, 4))


@pytest.mark.parametrize("attrs,b_shape", [({"transB": 1}, (6, 5)), ({}, (5, 6)),
                                           ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (6, 5))])
def test_gemm(tmp_path, attrs, b_shape):
    check(tmp_path, one_node("Gemm", (3, 5), {"b": r(*b_shape), "c": r(6)}, attrs), r(3, 5))


def test_matmul_constant_and_batched(tmp_path):
    check(tmp_path, one_node("MatMul", (2, 3, 5), {"b": r(5, 4)}), r(2, 3, 5))
    check(tmp_path, one_node("MatMul", (2, 3, 5), {"b": r(2, 5, 4)}), r(2, 3, 5))


def test_concat(tmp_path):
    check(tmp_path, one_node("Concat", (1, 2, 3, 5), {"c": r(1, 4, 3, 5)}, {"axis": 1}), r(1, 2, 3, 5))
    check(tmp_path, one_node("Concat", (1, 2, 3, 5), {"c": r(1, 2, 3, 2)}, {"axis": -1}), r(1, 2, 3, 5))


@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (1, 11), (2, 11)])
def test_softmax(tmp_path, axis, opset):
    check(tmp_path, one_node("Softmax", (2, 3, 4, 5), {}, {"axis": axis}, opset=opset), r(2, 3, 4, 5, lo=-4, hi=4))


@pytest.mark.parametrize("op,inits,attrs,opset", [
    ("Flatten", {}, {"axis": 2}, 13),
    ("Reshape", {"s": np.array([0, -1, 5], np.int64)}, {}, 13),
    ("Squeeze", {"a": np.array([2], np.int64)}, {}, 13),
    ("Squeeze", {}, {"axes": [2]}, 11),
    ("Unsqueeze", {"a": np.array([0, 4], np.int64)}, {}, 13),
    ("Unsqueeze", {}, {"axes": [1]}, 11),
])
def test_views(tmp_path, op, inits, attrs, opset):
    net = check(tmp_path, one_node(op, (2, 3, 1, 5), inits, attrs, opset=opset), r(2, 3, 1, 5))
    assert net.program((2, 3, 1, 5)).steps == [], "a view compiles to no step"


@pytest.mark.parametrize("starts,ends,axes,steps", [([1], [3], [1], [1]), ([0, 1], [5, 100], [2, 3], [2, 2]),
                                                   ([-1], [-100], [3], [-1])])
def test_slice_on_activations(tmp_path, starts, ends, axes, steps):
    inits = {k: np.array(v, np.int64) for k, v in zip("seap", (starts, ends, axes, steps))}
    check(tmp_path, one_node("Slice", (2, 4, 5, 6), inits), r(2, 4, 5, 6))


def test_shape_arithmetic_folds_away(tmp_path):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Cast, Slice on a shape, ConstantOfShape: no step remains
    but the reshape; the result still matches onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Slice", ["shp", "one", "three"], ["cw"]),
        helper.make_node("Cast", ["cw"], ["cwf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["cwf"], ["cwi"], to=TensorProto.INT64),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("ConstantOfShape", ["cwi"], ["ones"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
        helper.make_node("Mul", ["flat", "k"], ["y0"]),
        helper.make_node("Identity", ["ones"], ["y1"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             (("zero", 0), ("ax0", [0]), ("one", [1]), ("three", [3]), ("minus1", [-1]))]
    g = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y0", "y1")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net = check(tmp_path, model, r(2, 3, 4, 5))
    prog = net.program((2, 3, 4, 5))
    assert [s.op for s in prog.steps] == ["Binary"]
    assert sum("evaluated at compile time" in f for f in prog.folded) >= 6


def test_bn_and_activation_fold_into_conv(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("PRelu", ["bn", "slope"], ["p"]),
        helper.make_node("Add", ["p", "x"], ["y0"]),
    ]
    inits = {"w": r(c, c, 3, 3), "b": r(c), "s": r(c), "bb": r(c), "m": r(c), "v": r(c, lo=0.5, hi=1.5),
             "slope": r(c, 1, 1)}
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 5])],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net = check(tmp_path, model, r(1, c, 6, 5))
    steps = net.program((1, c, 6, 5)).steps
    # conv+BN+PReLU is one step; the add after the activation cannot join (act(conv)+x != act(conv+x))
    assert [s.op for s in steps] == ["Conv", "Binary"]
    assert steps[0].act is not None and steps[0].act.kind == "prelu"


def test_residual_joins_the_convolution_that_runs_last(tmp_path):
    """conv_a, conv_b, Add(conv_a, conv_b): the add can only join conv_b, which runs after conv_a exists."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y0"]),
    ]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6])],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(r(4, 3, 3, 3), "wa"), numpy_helper.from_array(r(4, 3, 1, 1), "wb")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net = check(tmp_path, model, r(1, 3, 5, 6))
    prog = net.program((1, 3, 5, 6))
    assert [s.op for s in prog.steps] == ["Conv", "Conv"]
    assert prog.steps[1].residual == prog.steps[0].out
