"""The operators face exporters emit beyond convolutions (Exp, Pad, reductions, Split, ConvTranspose, linear
Resize, ...), each on a small odd-shaped graph against onnxruntime: on the CPU interpreter, and through the WGSL
kernels on the GPU path (the `gpu` fixture: skipped without an adapter, a failure under CI)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from facerun.agree import compare
from facerun.bench import oracle
from facerun.net import load

from onnx_graphs import one_node, save

rng = np.random.default_rng(15)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def model_of(nodes, inits=None, x_shape=(2, 3, 5, 4), outputs=("y0",), opset=13, functions=(), extra_opsets=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(g, opset_imports=opsets, ir_version=8, functions=list(functions))


@pytest.fixture(params=["cpu", "gpu"])
def device(request):
    if request.param == "gpu":
        return request.getfixturevalue("gpu_model")
    return None


def check(tmp_path, model, x, gpu_model=None, tol=1e-5):
    """Run on the CPU interpreter (or, with a GpuModel, on the GPU) and compare with onnxruntime."""
    path = save(model, tmp_path / "m.onnx")
    net = load(path)
    if gpu_model is None:
        got = net.run(x)
    else:
        prog = net.program(x.shape)
        got = gpu_model.run(prog, x)
        tol = max(tol, 1e-4)
    want = oracle.run(oracle.session(path), {"x": x})
    for name in net.output_names:
        assert got[name].shape == want[name].shape, (name, got[name].shape, want[name].shape)
        d = compare(name, got[name], want[name])
        assert d.max_abs <= tol * max(1.0, d.range), f"{name}: {d}"
    return net


# ---------------------------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("op,attrs", [("Exp", {}), ("Sqrt", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3,
                                      "beta": 0.4}), ("HardSwish", {})])
def test_elementwise(tmp_path, device, op, attrs):
    x = r(2, 3, 5, 7, lo=0.0 if op == "Sqrt" else -4, hi=4)
    check(tmp_path, one_node(op, x.shape, {}, attrs, opset=14), x, device)


def test_exp_after_a_convolution_joins_its_epilogue(tmp_path, device):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Exp", ["c"], ["y0"])]
    net = check(tmp_path, model_of(nodes, {"w": r(4, 3, 3, 3, lo=-0.3, hi=0.3)}), r(2, 3, 5, 4), device)
    steps = net.program((2, 3, 5, 4)).steps
    assert [s.op for s in steps] == ["Conv"] and steps[0].act.kind == "exp"


@pytest.mark.parametrize("exponent", [np.float32(2.0), np.float32(3.0), np.float32(0.5), r(1, 3, 1, 1, lo=1, hi=3)])
def test_pow(tmp_path, device, exponent):
    x = r(2, 3, 5, 4, lo=0.1 if np.any(exponent % 1) else -2, hi=2)
    check(tmp_path, one_node("Pow", x.shape, {"e": exponent}), x, device)


def test_sum_of_three_with_broadcasting(tmp_path, device):
    check(tmp_path, one_node("Sum", (2, 3, 5, 4), {"a": r(1, 3, 1, 1), "b": r(4)}), r(2, 3, 5, 4), device)


def test_div_and_sqrt_of_computed_tensors_l2_tail(tmp_path, device):
    """An embedder's hand-written L2 norm: x / sqrt(ReduceSum(x * x)), every operand computed."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "ax"], ["s"], keepdims=1),
             helper.make_node("Sqrt", ["s"], ["n"]), helper.make_node("Div", ["x", "n"], ["y0"])]
    check(tmp_path, model_of(nodes, {"ax": np.array([1], np.int64)}, x_shape=(3, 37)), r(3, 37), device)


# -------------------------------------------------------------------------------------------------- padding

PAD_CASES = {
    # name: (mode, pads over NCHW, opset)
    "channels": ("constant", [0, 2, 0, 0, 0, 3, 0, 0], 11),
    "asymmetric_spatial": ("constant", [0, 0, 1, 0, 0, 0, 2, 3], 13),
    "crop": ("constant", [0, 0, -1, 1, 0, 0, 0, -2], 13),
    "reflect": ("reflect", [0, 0, 2, 1, 0, 0, 1, 3], 13),
    "edge": ("edge", [0, 1, 2, 0, 0, 0, 1, 3], 13),
    "wrap": ("wrap", [0, 0, 2, 1, 0, 0, 1, 3], 19),
}


@pytest.mark.parametrize("case", sorted(PAD_CASES))
def test_pad_input_form(tmp_path, device, case):
    mode, pads, opset = PAD_CASES[case]
    inits = {"p": np.array(pads, np.int64), "v": np.float32(0.75)}
    check(tmp_path, one_node("Pad", (2, 3, 5, 4), inits, {"mode": mode}, opset=opset), r(2, 3, 5, 4), device)


def test_pad_attribute_form_opset10(tmp_path, device):
    """BlazeFace's form: pads and value as attributes (opset < 11)."""
    model = one_node("Pad", (1, 3, 5, 4), {}, {"mode": "constant", "pads": [0, 0, 1, 1, 0, 0, 2, 2], "value": -1.5},
                     opset=10)
    check(tmp_path, model, r(1, 3, 5, 4), device)


def test_pad_with_axes_opset18(tmp_path, device):
    inits = {"p": np.array([1, 2, 0, 3], np.int64), "v": np.float32(0.0), "a": np.array([1, -1], np.int64)}
    check(tmp_path, one_node("Pad", (2, 3, 5, 4), inits, {"mode": "constant"}, opset=18), r(2, 3, 5, 4), device)


# ----------------------------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceL2", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([2, 3], 0), ([1, 3], 1), ([-1], 0), (None, 1)])
def test_reductions(tmp_path, device, op, axes, keepdims):
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    check(tmp_path, one_node(op, (2, 3, 5, 4), {}, attrs, opset=11), r(2, 3, 5, 4), device)


def test_reduce_axes_as_an_input_opset18(tmp_path, device):
    check(tmp_path, one_node("ReduceMean", (2, 3, 5, 4), {"a": np.array([2, 3], np.int64)}, {"keepdims": 1}, opset=18),
          r(2, 3, 5, 4), device)


@pytest.mark.parametrize("p,axis", [(2, 1), (2, -1), (1, 1)])
def test_lp_normalization(tmp_path, device, p, axis):
    check(tmp_path, one_node("LpNormalization", (4, 33), {}, {"p": p, "axis": axis}), r(4, 33), device)


# -------------------------------------------------------------------------------------------- moving data


@pytest.mark.parametrize("opset,attrs,inits,outs", [
    (11, {"axis": 1, "split": [1, 2]}, {}, 2),
    (13, {"axis": -1}, {"s": np.array([1, 3], np.int64)}, 2),
    (13, {"axis": 2}, {}, 5),
    (18, {"axis": 2, "num_outputs": 2}, {}, 2),
])
def test_split(tmp_path, device, opset, attrs, inits, outs):
    check(tmp_path, one_node("Split", (2, 3, 5, 4), inits, attrs, opset=opset, n_outputs=outs), r(2, 3, 5, 4), device)


@pytest.mark.parametrize("indices,axis", [(np.array(2, np.int64), 1), (np.array([3, 0, 0, -1], np.int64), 3),
                                          (np.array([[1, 0], [2, 2]], np.int64), 2)])
def test_gather_on_a_computed_tensor(tmp_path, device, indices, axis):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Gather", ["a", "i"], ["y0"], axis=axis)]
    check(tmp_path, model_of(nodes, {"i": indices}, x_shape=(2, 3, 5, 4)), r(2, 3, 5, 4), device)


CONVT_CASES = {
    # name: (x shape, weight shape, attrs)
    "stride2": ((1, 4, 5, 4), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "stride2_k2": ((2, 3, 4, 5), (3, 2, 2, 2), {"strides": [2, 2]}),
    "stride1_pad": ((1, 3, 6, 5), (3, 4, 3, 3), {"pads": [1, 0, 1, 2]}),
    "grouped": ((1, 4, 5, 4), (4, 2, 3, 3), {"group": 2, "strides": [2, 1], "pads": [0, 1, 1, 1]}),
    "depthwise_up": ((1, 3, 4, 4), (3, 1, 4, 4), {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dilated": ((1, 2, 5, 5), (2, 3, 3, 3), {"dilations": [2, 2], "strides": [2, 2]}),
    "output_shape": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 10]}),
    "same_upper": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
}


@pytest.mark.parametrize("case", sorted(CONVT_CASES))
def test_conv_transpose(tmp_path, device, case):
    xs, ws, attrs = CONVT_CASES[case]
    model = one_node("ConvTranspose", xs, {"w": r(*ws), "b": r(ws[1] * attrs.get("group", 1))}, attrs)
    check(tmp_path, model, r(*xs), device)


# ---------------------------------------------------------------------------------------------- linear resize


@pytest.mark.parametrize("ctm,scales,sizes", [
    ("half_pixel", [1, 1, 2, 2], None),
    ("pytorch_half_pixel", None, [2, 3, 1, 7]),
    ("align_corners", None, [2, 3, 9, 11]),
    ("asymmetric", [1, 1, 1.5, 0.5], None),
    ("half_pixel", None, [2, 3, 3, 3]),
    ("half_pixel_symmetric", [1, 1, 1.7, 2.3], None),
])
def test_resize_linear(tmp_path, device, ctm, scales, sizes):
    inits = {"roi": np.zeros(0, np.float32)}
    ins = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins.append("scales")
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        ins += ["", "sizes"]
    node = helper.make_node("Resize", ins, ["y0"], mode="linear", coordinate_transformation_mode=ctm)
    check(tmp_path, model_of([node], inits, x_shape=(2, 3, 5, 4), opset=19 if "symmetric" in ctm else 13),
          r(2, 3, 5, 4), device)


def test_upsample_bilinear_opset9(tmp_path, device):
    model = one_node("Upsample", (1, 2, 3, 4), {"s": np.array([1, 1, 2, 2], np.float32)}, {"mode": "linear"}, opset=9)
    check(tmp_path, model, r(1, 2, 3, 4), device)


# ------------------------------------------------------------------------------------------- the real exports


@pytest.mark.parametrize("name", ["ultraface_RFB-320.onnx", "blazeface_front128.onnx"])
def test_real_exports_match_onnxruntime(device, name):
    """UltraFace (Exp) and BlazeFace (Pad, opset 10's attribute form) on facerun's own path, both devices."""
    from conftest import real_model

    path = real_model(name)
    net = load(path)
    x = np.random.default_rng(3).uniform(-1, 1, net.default_shape()).astype(np.float32)
    got = net.run(x) if device is None else device.run(net.program(x.shape), x)
    want = oracle.run(oracle.session(path), {net.input_name: x})
    for out in net.output_names:
        d = compare(out, got[out], want[out])
        assert d.max_abs <= 1e-4 * max(1.0, d.range), f"{out}: {d}"


# -------------------------------------------------------------------------------------- model-local functions

TORCH_LIB = "pkg.onnxscript.torch_lib"


def _ref(name: str, refers_to: str):
    """A node attribute `name` that takes the enclosing function's attribute `refers_to`."""
    from onnx import AttributeProto

    a = AttributeProto()
    a.name, a.ref_attr_name, a.type = name, refers_to, AttributeProto.FLOAT
    return a


def _functions():
    """aten_leaky_relu(X; negative_slope=0.01) and aten_block(X; slope) = leaky(leaky(X * k, slope), slope) + X, with
    k a Constant inside the body: nesting, attribute references with and without a default, scoped inner names."""
    inner = helper.make_node("LeakyRelu", ["self"], ["result"])
    inner.attribute.append(_ref("alpha", "negative_slope"))
    leaky = helper.make_function(TORCH_LIB, "aten_leaky_relu", ["self"], ["result"], [inner],
                                 [helper.make_opsetid("", 18)], attributes=[])
    leaky.attribute_proto.append(helper.make_attribute("negative_slope", 0.01))
    body = [
        helper.make_node("Constant", [], ["k"], value_float=1.5),
        helper.make_node("Mul", ["X", "k"], ["scaled"]),
        helper.make_node("aten_leaky_relu", ["scaled"], ["act"], domain=TORCH_LIB),
        helper.make_node("aten_leaky_relu", ["act"], ["act2"], domain=TORCH_LIB),
        helper.make_node("Add", ["act2", "X"], ["Y"]),
    ]
    for node in body[2:4]:
        node.attribute.append(_ref("negative_slope", "slope"))
    block = helper.make_function(TORCH_LIB, "aten_block", ["X"], ["Y"], body,
                                 [helper.make_opsetid("", 18), helper.make_opsetid(TORCH_LIB, 1)], attributes=["slope"])
    return [leaky, block]


def test_local_functions_are_inlined(tmp_path, device):
    nodes = [helper.make_node("aten_block", ["x"], ["b1"], domain=TORCH_LIB, slope=0.3),
             helper.make_node("aten_block", ["b1"], ["b2"], domain=TORCH_LIB),  # slope unset: the inner default
             helper.make_node("aten_leaky_relu", ["b2"], ["y0"], domain=TORCH_LIB, negative_slope=0.5)]
    model = model_of(nodes, opset=18, functions=_functions(), extra_opsets=[(TORCH_LIB, 1)])
    net = check(tmp_path, model, r(2, 3, 5, 4, lo=-3, hi=3), device)
    alphas = sorted(round(s.act.alpha, 6) for s in net.program((2, 3, 5, 4)).steps if s.op == "Unary")
    assert alphas == [0.01, 0.01, 0.3, 0.3, 0.5]


def test_a_function_calling_itself_is_refused_in_one_line(tmp_path):
    from facerun.errors import ModelError

    loop = helper.make_function(TORCH_LIB, "again", ["X"], ["Y"],
                                [helper.make_node("again", ["X"], ["Y"], domain=TORCH_LIB)],
                                [helper.make_opsetid("", 18)],
                                attributes=[])
    model = model_of([helper.make_node("again", ["x"], ["y0"], domain=TORCH_LIB)], opset=18, functions=[loop],
                     extra_opsets=[(TORCH_LIB, 1)])
    with pytest.raises(ModelError, match="calls itself"):
        load(save(model, tmp_path / "m.onnx"))


def test_zero_spatial_padding_goes_into_the_next_convolution(tmp_path, device):
    nodes = [helper.make_node("Pad", ["x", "p"], ["padded"]),
             helper.make_node("Conv", ["padded", "w"], ["y0"], strides=[2, 2], group=3)]
    inits = {"p": np.array([0, 0, 0, 1, 0, 0, 2, 2], np.int64), "w": r(3, 1, 3, 3)}
    net = check(tmp_path, model_of(nodes, inits, x_shape=(1, 3, 9, 8)), r(1, 3, 9, 8), device)
    steps = net.program((1, 3, 9, 8)).steps
    assert [s.op for s in steps] == ["Conv"] and steps[0].pads == (0, 1, 2, 2)
