"""Models with invalid or unsupported attributes, opsets, element types and sizes: each is refused with a one-line
FacerunError naming what is wrong, never compiled into something with another meaning, never a raw exception, and
never allowed to allocate a huge tensor first."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import facerun
from facerun.errors import FacerunError

from onnx_graphs import one_node, save

W = np.ones((2, 3, 3, 3), np.float32)


def _chain(nodes, inits, x_shape=(1, 3, 8, 8), opset=13, x_type=TensorProto.FLOAT, out="y"):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _resize_scales(scales, x=(1, 3, 8, 8)):
    return one_node("Resize", x, {"roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)},
                    {"mode": "nearest"}, opset=13)


REFUSED = {
    "negative pads": (one_node("Conv", (1, 3, 8, 8), {"w": W}, {"pads": [-1, 0, 0, 0]}), "pads"),
    "kernel 0": (one_node("MaxPool", (1, 3, 8, 8), attrs={"kernel_shape": [0, 2]}), "kernel_shape"),
    "stride 0": (one_node("AveragePool", (1, 3, 8, 8), attrs={"kernel_shape": [2, 2], "strides": [0, 1]}),
                 "strides"),
    "Slice axis 17": (one_node("Slice", (1, 3, 8, 8), {"s": np.array([0]), "e": np.array([1]),
                                                       "a": np.array([17])}), "axes 17"),
    "Concat axis 99": (_chain([helper.make_node("Concat", ["x", "x"], ["y"], axis=99)], {}), "axis 99"),
    "Gather index past the end": (one_node("Gather", (1, 3, 8, 8), {"i": np.array([5])}, {"axis": 1}), "index"),
    "Flatten axis 9": (one_node("Flatten", (1, 3, 8, 8), attrs={"axis": 9}), "axis 9"),
    "negative Resize scales": (_resize_scales([1, 1, -16, -16]), "scales"),
    "huge Resize scales": (_resize_scales([1, 1, 1e6, 1e6]), "GiB"),
    "ConstantOfShape of 10 TiB": (_chain([helper.make_node("ConstantOfShape", ["s"], ["c"]),
                                          helper.make_node("Add", ["x", "c"], ["y"])],
                                         {"s": np.array([1, 3, 100000, 10000000], np.int64)}), "TiB"),
    "opset 99": (one_node("Relu", (1, 3, 8, 8), opset=99), "opset 99"),
    "int16 input": (_chain([helper.make_node("Relu", ["x"], ["y"])], {}, x_type=TensorProto.INT16), "int16"),
    "Dropout training_mode=1": (one_node("Dropout", (1, 3, 8, 8), {"r": np.array(0.5, np.float32),
                                                                   "t": np.array(True)}), "training_mode"),
    "BatchNormalization spatial=0": (
        one_node("BatchNormalization", (1, 3, 2, 2), {k: np.ones((3, 2, 2), np.float32) for k in "sbmv"},
                 {"spatial": 0}, opset=7), "spatial"),
    "1-D Conv": (one_node("Conv", (1, 3, 8), {"w": np.ones((2, 3, 3), np.float32)}), "2-D"),
    "3-D MaxPool": (one_node("MaxPool", (1, 3, 4, 4, 4), attrs={"kernel_shape": [2, 2, 2]}), "2-D"),
    "Add without broadcast=1 in opset 6": (
        one_node("Add", (1, 3, 8, 8), {"b": np.ones(8, np.float32)}, opset=6), "broadcast is 0"),
    # found by trying the spec's rules one by one: each was run with some meaning, or crashed
    "Conv with an empty weight": (one_node("Conv", (1, 3, 8, 8), {"w": np.zeros((4, 3, 0, 3), np.float32)}),
                                  "weight [4, 3, 0, 3] is empty"),
    "Conv output channels not a multiple of group": (
        one_node("Conv", (1, 4, 8, 8), {"w": np.ones((3, 2, 3, 3), np.float32)}, {"group": 2}),
        "3 output channels do not split into group=2"),
    "Conv group 0": (one_node("Conv", (1, 4, 8, 8), {"w": np.ones((3, 2, 3, 3), np.float32)}, {"group": 0}),
                     "group=0 must be 1 or more"),
    "ConvTranspose group 0": (one_node("ConvTranspose", (1, 4, 4, 4), {"w": np.ones((4, 2, 3, 3), np.float32)},
                                       {"group": 0}), "group=0"),
    "ConvTranspose output_padding past the stride": (
        one_node("ConvTranspose", (1, 3, 4, 4), {"w": np.ones((3, 2, 3, 3), np.float32)},
                 {"strides": [1, 1], "output_padding": [2, 2]}), "output_padding [2, 2]"),
    "ConvTranspose negative pads": (
        one_node("ConvTranspose", (1, 3, 4, 4), {"w": np.ones((3, 2, 3, 3), np.float32)}, {"pads": [-1, 0, 0, 0]}),
        "negative padding"),
    "MaxPool pads as large as its window": (
        one_node("MaxPool", (1, 3, 8, 8), attrs={"kernel_shape": [2, 2], "pads": [3, 3, 3, 3]}),
        "must be smaller than the 2x2 window"),
    "Unsqueeze of one axis twice": (one_node("Unsqueeze", (2, 4), {"a": np.array([0, 0])}), "name an axis twice"),
    # found by the fuzz test's hostile cases: a raw ValueError from the interpreter each
    "Pad cropping more than the axis holds": (
        one_node("Pad", (1, 5, 4, 6), {"p": np.array([0, 0, 6, 0, 0, 0, -6, 0])}), "crop 6 of an axis of 4"),
    "edge Pad of an axis cropped to nothing": (
        one_node("Pad", (1, 3, 5, 4), {"p": np.array([0, 0, 5, 0, 0, 0, -5, 0])}, {"mode": "edge"}),
        "reach past an axis of 0 in 'edge' mode"),
    "Gemm with a C that does not broadcast": (
        one_node("Gemm", (3, 3), {"b": np.ones((3, 3), np.float32), "c": np.ones((2, 3), np.float32)}),
        "(Gemm): a C of shape [2, 3] does not broadcast"),
}
# an operator the model's opset does not define yet (Resize came in opset 10)
REFUSED["Resize in opset 9"] = (_resize_scales([1, 1, 2, 2]), "opset 9")
REFUSED["Resize in opset 9"][0].opset_import[0].version = 9


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_a_reason(case, tmp_path):
    model, words = REFUSED[case]
    path = save(model, tmp_path / "m.onnx")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.ones(dims, np.float32)
    with pytest.raises(FacerunError) as err:
        facerun.load(path).run(x)
    message = str(err.value)
    assert "\n" not in message
    assert words in message, message


def test_old_broadcast_axis_is_honoured(tmp_path):
    # before opset 7, Add(a, b, broadcast=1, axis=1) lines b up with a's axis 1, not with its last axis
    b = np.array([1.0, 2.0, 3.0], np.float32)
    model = one_node("Add", (1, 3, 2, 2), {"b": b}, {"broadcast": 1, "axis": 1}, opset=6)
    x = np.zeros((1, 3, 2, 2), np.float32)
    got = facerun.load(save(model, tmp_path / "m.onnx")).run(x)[0]
    np.testing.assert_array_equal(got, x + b.reshape(1, 3, 1, 1))


def test_constant_of_shape_feeding_a_computation(tmp_path):
    # it used to end in a raw TypeError from the compiler
    model = _chain([helper.make_node("ConstantOfShape", ["s"], ["c"],
                                     value=numpy_helper.from_array(np.array([2.0], np.float32))),
                    helper.make_node("Mul", ["x", "c"], ["y"])], {"s": np.array([1, 3, 8, 8], np.int64)})
    x = np.full((1, 3, 8, 8), 1.5, np.float32)
    np.testing.assert_array_equal(facerun.load(save(model, tmp_path / "m.onnx")).run(x)[0], x * 2)


def test_slice_with_a_negative_step_reverses(tmp_path):
    # an in-graph BGR<->RGB flip
    model = one_node("Slice", (1, 3, 2, 2), {"s": np.array([-1]), "e": np.array([-4]), "a": np.array([1]),
                                             "st": np.array([-1])})
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)
    np.testing.assert_array_equal(facerun.load(save(model, tmp_path / "m.onnx")).run(x)[0], x[:, ::-1])


def test_onnxruntime_refusing_a_file_is_one_line(tmp_path):
    pytest.importorskip("onnxruntime")
    from facerun.bench import oracle

    # facerun refuses this at load; onnxruntime, asked directly (parity, bench), refuses it too, in one line
    path = save(one_node("Conv", (1, 3, 8, 8), {"w": W}, {"pads": [-1, 0, 0, 0]}), tmp_path / "m.onnx")
    with pytest.raises(FacerunError) as err:
        oracle.run(oracle.session(path), {"x": np.ones((1, 3, 8, 8), np.float32)})
    assert "\n" not in str(err.value) and "onnxruntime" in str(err.value)
