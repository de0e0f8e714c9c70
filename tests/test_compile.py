"""The ONNX front end as a whole: the op table is the supported set, folding runs the interpreter's step code, and
what facerun cannot compile is refused in one line naming the node, operator and attribute."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_ops import check, r

from facerun import cpu
from facerun.errors import ModelError
from facerun.net import load
from facerun.onnx import ops, read

from onnx_graphs import one_node, save

# the list read.py kept by hand before it was derived from the table: none of these may go missing
_HAND_KEPT = ["Conv", "BatchNormalization", "Relu", "Sigmoid", "Clip", "LeakyRelu", "PRelu", "Add", "Sub", "Mul", "Div",
              "Transpose", "MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Upsample", "Gemm", "MatMul",
              "Concat", "Softmax", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Shape", "Gather", "Slice", "Cast",
              "Constant", "ConstantOfShape", "Identity", "Dropout"]


def graph(nodes, inits=None, x_shape=(2, 3, 4, 5), outputs=("y",), opset=13):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_the_supported_set_is_the_op_table():
    assert frozenset(ops.OPS) == read.SUPPORTED
    assert set(_HAND_KEPT) <= read.SUPPORTED
    for name, handler in ops.OPS.items():
        assert handler.__name__ == name
        kinds = [p.kind for p in inspect.signature(handler).parameters.values()]
        # no **attrs catch-all: every attribute a handler takes is named, so an unknown one is refused
        assert inspect.Parameter.VAR_KEYWORD not in kinds, name
        assert next(iter(inspect.signature(handler).parameters)) == "ctx", name


def test_every_handler_takes_the_attributes_onnx_defines_for_its_operator():
    """Over every opset of the installed onnx: a handler's keyword arguments are the spec's attribute names, so a
    valid file is never refused for an attribute, and none is accepted that ONNX does not define."""
    import onnx.defs

    refused = {"Constant": {"sparse_value", "value_string", "value_strings"}}  # tensors facerun cannot hold
    spec: dict[str, set] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in ops.OPS:
            spec.setdefault(schema.name, set()).update(schema.attributes)
    assert set(spec) == set(ops.OPS)
    for name in ops.OPS:
        assert set(ops.params(name).attrs) == spec[name] - refused.get(name, set()), name


@pytest.mark.parametrize("axis", [-4, -3, -2, -1, 0, 1, 2, 3, 4])
def test_flatten_any_axis_on_computed_and_constant_tensors(tmp_path, axis):
    """onnx's test_flatten_negative_axis* shapes: y = Flatten(x) + Flatten(c), c a constant (folded)."""
    nodes = [helper.make_node("Flatten", ["x"], ["fx"], axis=axis),
             helper.make_node("Flatten", ["c"], ["fc"], axis=axis),
             helper.make_node("Add", ["fx", "fc"], ["y"])]
    net = check(tmp_path, graph(nodes, {"c": r(2, 3, 4, 5)}), r(2, 3, 4, 5))
    prog = net.program((2, 3, 4, 5))
    assert [s.op for s in prog.steps] == ["Binary"]
    assert "Flatten 'fc' evaluated at compile time" in prog.folded


def test_constant_of_shape_from_a_shape_and_with_an_integer_value(tmp_path):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["k"], value=numpy_helper.from_array(np.array([3], np.int64))),
        helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
        helper.make_node("ConstantOfShape", ["s"], ["z"]),  # no value: float zeros
        helper.make_node("Add", ["x", "kf"], ["a"]),
        helper.make_node("Sub", ["a", "z"], ["y"]),
    ]
    check(tmp_path, graph(nodes), r(2, 3, 4, 5))


def test_constant_of_shape_on_a_computed_tensor_is_a_clear_refusal(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["x"], ["k"], name="fill"), helper.make_node("Add", ["x", "k"], ["y"])]
    net = load(save(graph(nodes, x_shape=(4,)), tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=r"node 'fill' \(ConstantOfShape\): its shape must be a constant") as e:
        net.program((4,))
    assert "\n" not in str(e.value)


def test_constant_subgraphs_fold_through_the_interpreters_step_code(tmp_path, monkeypatch):
    """Transpose, Slice, Gather, Concat, integer Div (truncating toward zero: -7 / 2 = -3) and Mul, all on
    constants, evaluated by cpu.run_step at compile time; the results match onnxruntime."""
    def i64(*v):
        return np.array(v, np.int64)

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n0"], axis=0),  # 2, a scalar
        helper.make_node("Unsqueeze", ["n0", "i0"], ["n"]),  # [2]
        helper.make_node("Div", ["m7", "two"], ["q"]),  # [-3] (floor division would give -4)
        helper.make_node("Mul", ["q", "m1"], ["three"]),  # [3]
        helper.make_node("Concat", ["n", "three", "m1"], ["target"], axis=0),  # [2, 3, -1]
        helper.make_node("Reshape", ["x", "target"], ["xr"]),  # (2, 3, 20)
        helper.make_node("Transpose", ["c"], ["ct"], perm=[1, 0, 2]),  # (3, 4, 20)
        helper.make_node("Slice", ["ct", "i0", "two", "i1"], ["cs"]),  # axis 1, [0, 2): (3, 2, 20)
        helper.make_node("Gather", ["cs", "pick"], ["cg"], axis=2),  # irregular indices: runs joined by a Concat
        helper.make_node("Relu", ["cg"], ["cr"]),
        helper.make_node("Transpose", ["cr"], ["cb"], perm=[1, 0, 2]),  # (2, 3, 20)
        helper.make_node("Add", ["xr", "cb"], ["y"]),
    ]
    pick = i64(*range(10), 19, 17, 15, 11, 12, 13, 1, 1, 0, 5)
    inits = {"zero": np.array(0, np.int64), "i0": i64(0), "i1": i64(1), "two": i64(2), "m7": i64(-7), "m1": i64(-1),
             "c": r(4, 3, 20), "pick": pick}
    seen = []
    real = cpu.run_step
    monkeypatch.setattr(cpu, "run_step", lambda st, *a, **k: seen.append(st.op) or real(st, *a, **k))
    net = check(tmp_path, graph(nodes, inits), r(2, 3, 4, 5))
    prog = net.program((2, 3, 4, 5))
    assert [s.op for s in prog.steps] == ["Binary"]
    assert {"Transpose", "Slice", "Gather", "Concat", "Binary", "Unary"} <= set(seen)
    assert sum("evaluated at compile time" in f for f in prog.folded) == len(nodes) - 3  # all but Shape, Reshape, Add


@pytest.mark.parametrize("indices,axis", [
    (np.array(2, np.int64), 1), (np.array([0, 2], np.int64), 1), (np.array([3, 0, 1, 1], np.int64), -1),
    (np.array([[1, 0], [-1, 2]], np.int64), 2), (np.array([0, 1, 2], np.int64), 1), (np.array([-2], np.int64), 0),
])
def test_gather_on_a_computed_tensor(tmp_path, indices, axis):
    check(tmp_path, one_node("Gather", (2, 3, 4, 5), {"i": indices}, {"axis": axis}), r(2, 3, 4, 5))


@pytest.mark.gpu
def test_gather_on_the_gpu_matches_the_cpu(gpu, tmp_path):
    path = save(one_node("Gather", (2, 3, 4, 5), {"i": np.array([3, 0, 1, 1, 2], np.int64)}, {"axis": -1}),
                tmp_path / "g.onnx")
    net = load(path, device="gpu")
    x = r(2, 3, 4, 5)
    got, want = net.run(x), net.run_cpu(x)
    assert net.gpu is not None, net.gpu_reason
    np.testing.assert_array_equal(got["y0"], want["y0"])


def test_an_unsupported_attribute_is_refused_in_one_line(tmp_path):
    model = one_node("Conv", (1, 3, 5, 5), {"w": r(2, 3, 3, 3)}, {"pads": [1, 1, 1, 1], "flavour": 2})
    model.graph.node[0].name = "conv1"
    with pytest.raises(ModelError, match=r"node 'conv1' \(Conv\): attribute 'flavour' is not supported") as e:
        load(save(model, tmp_path / "m.onnx"))
    assert "\n" not in str(e.value)


def test_an_unsupported_attribute_value_names_node_op_and_attribute(tmp_path):
    model = one_node("Resize", (1, 2, 3, 4), {"roi": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 2], np.float32)},
                     {"mode": "cubic"})
    model.graph.node[0].name = "up"
    net = load(save(model, tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=r"node 'up' \(Resize\): mode 'cubic' is not supported") as e:
        net.program((1, 2, 3, 4))
    assert "\n" not in str(e.value)


def test_an_unread_output_facerun_does_not_make_is_no_error_but_a_read_one_is(tmp_path):
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    unread = graph([helper.make_node("MaxPool", ["x"], ["y", "idx"], **pool)])
    check(tmp_path, unread, r(2, 3, 4, 5))
    read_one = graph([helper.make_node("MaxPool", ["x"], ["p", "idx"], name="mp", **pool),
                      helper.make_node("Cast", ["idx"], ["y"], to=TensorProto.FLOAT)])
    net = load(save(read_one, tmp_path / "r.onnx"))
    with pytest.raises(ModelError, match=r"node 'mp' \(MaxPool\): its output 1 \('idx'\) is not supported"):
        net.program((2, 3, 4, 5))


@pytest.mark.parametrize("opset", [9, 13])
def test_slice_before_and_after_opset_10(tmp_path, opset):
    if opset < 10:
        model = one_node("Slice", (2, 4, 5, 6), {}, {"starts": [1, -4], "ends": [3, 100], "axes": [1, 3]}, opset=9)
    else:
        inits = {k: np.array(v, np.int64) for k, v in zip("sea", ([1, -4], [3, 100], [1, 3]))}
        model = one_node("Slice", (2, 4, 5, 6), inits)
    check(tmp_path, model, r(2, 4, 5, 6))


def test_resize_opset_10_takes_scales_second(tmp_path):
    model = one_node("Resize", (1, 2, 3, 4), {"s": np.array([1, 1, 2, 1.5], np.float32)}, {"mode": "nearest"},
                     opset=10)
    check(tmp_path, model, r(1, 2, 3, 4))


def test_a_batchnorm_whose_convolution_is_also_an_output_stays_a_step(tmp_path):
    c = 3
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"]),
             helper.make_node("BatchNormalization", ["conv", "s", "b", "m", "v"], ["y"])]
    inits = {"w": r(c, c, 1, 1), "s": r(c), "b": r(c), "m": r(c), "v": r(c, lo=0.5, hi=1.5)}
    net = check(tmp_path, graph(nodes, inits, (1, c, 4, 5), outputs=("y", "conv")), r(1, c, 4, 5))
    prog = net.program((1, c, 4, 5))
    assert [s.op for s in prog.steps] == ["Conv", "Affine"]
    assert not prog.folded


def test_the_models_doc_lists_exactly_the_supported_operators():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    section = text.split("## ONNX operators", 1)[1].split("\n#", 1)[0]
    listed = {w.strip("`") for w in section.replace(",", " ").replace(".", " ").split() if w.startswith("`")}
    named = {w for w in listed if w[:1].isupper() and w.isalnum()}  # op names (ReduceL2 too), not paths or messages
    assert named == read.SUPPORTED
