"""Building one-node ONNX graphs for operator tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def one_node(op: str, x_shape, inits: dict | None = None, attrs: dict | None = None, extra_inputs=(), opset=13,
             n_outputs=1) -> onnx.ModelProto:
    """A model with input 'x' of x_shape feeding one `op` node, whose other inputs are the initializers `inits`
    (name -> array, in order) or '' for omitted ones listed in extra_inputs."""
    inits = inits or {}
    names = ["x"] + list(inits) + list(extra_inputs)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        f"{op.lower()}_test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)
