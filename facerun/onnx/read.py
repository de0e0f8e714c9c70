"""Reading an ONNX file into plain Python: nodes, constant tensors, inputs and outputs.

Everything that can go wrong with a file (missing, not ONNX, truncated, unsupported operators) is reported here as a
ModelError with one line, before any compiling starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelError, UnsupportedOps
from ..io import sha256_of
from .functions import inline_functions
from .ops import OPS, unsupported_attribute

# Operators the compiler handles (default ONNX domain): the op table's keys, nothing kept by hand.
SUPPORTED = frozenset(OPS)


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]  # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict


@dataclass
class ImportedModel:
    path: Path
    sha256: str
    opset: int
    nodes: list[Node]
    constants: dict[str, np.ndarray]  # initializers (and nothing else yet)
    inputs: list[tuple[str, tuple]]  # (name, declared shape with None for symbolic dims)
    outputs: list[str]
    output_types: dict = field(default_factory=dict)  # output name -> declared element type, when not float32
    producer: str = ""
    ir_version: int = 0
    extra: dict = field(default_factory=dict)
    # what the compiler derives from the constants alone (batch norms folded into weights), kept for the compiles
    # of every later input size: passes.fold_batchnorm's memo
    derived: dict = field(default_factory=dict, repr=False, compare=False)


def _attr_value(a):
    import onnx

    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return _tensor(v)
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode("utf-8", "replace") for s in v]
    return v


def _tensor(t) -> np.ndarray:
    from onnx import numpy_helper

    return np.array(numpy_helper.to_array(t))


def _defined(op: str, opset: int) -> bool:
    """Whether the default domain's opset `opset` defines operator `op` (some came later: Resize in 10)."""
    import onnx

    try:
        onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


def _elem_type(value_info) -> str | None:
    """A graph input's or output's declared element type in numpy's words ("float32", "int64"), None if unset."""
    from onnx import TensorProto, helper

    if not value_info.type.HasField("tensor_type"):
        return "a non-tensor type"
    elem = value_info.type.tensor_type.elem_type
    if elem == TensorProto.UNDEFINED:
        return None
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem).lower() if elem in TensorProto.DataType.values() else f"type {elem}"


def read_model(path) -> ImportedModel:
    """Load and check an ONNX file; every failure is a ModelError naming the file."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if not path.is_file():
        raise ModelError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise ModelError(f"{path}: empty file, not an ONNX model")
    try:
        model = onnx.load(str(path))
    except DecodeError:
        raise ModelError(f"{path}: not an ONNX model (the file does not parse; truncated or another format?)") from None
    except Exception as e:  # onnx raises a mix of types for damaged files and missing external data
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        raise ModelError(f"{path}: cannot be read as ONNX ({why})") from None
    graph = model.graph
    if not graph.node or not graph.output:
        raise ModelError(f"{path}: not an ONNX model with a graph (no nodes or no outputs; truncated or another "
                         "format?)")

    opset = 0
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            opset = o.version
    if opset == 0:
        opset = 9  # very old files may leave the default domain out
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= opset <= newest:
        raise ModelError(f"{path}: opset {opset} is not one ONNX defines (1 to {newest} with the installed onnx)")

    unsupported: dict[str, str] = {}
    nodes = []
    for i, n in enumerate(inline_functions(model)):
        name = n.name or (n.output[0] if n.output else f"node {i}")
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        if op not in SUPPORTED:
            unsupported.setdefault(op, name)
        elif not _defined(op, opset):
            raise ModelError(f"{path}: node '{name}' ({op}): ONNX opset {opset} has no {op} operator")
        try:
            attrs = {a.name: _attr_value(a) for a in n.attribute}
        except Exception as e:
            raise ModelError(f"{path}: node '{name}' has an unreadable attribute ({e})") from None
        bad = unsupported_attribute(op, attrs) if op in SUPPORTED else None
        if bad is not None:
            raise ModelError(f"{path}: node '{name}' ({op}): attribute '{bad}' is not supported")
        nodes.append(Node(op, name, list(n.input), list(n.output), attrs))
    if unsupported:
        raise UnsupportedOps(unsupported)

    try:
        constants = {t.name: _tensor(t) for t in graph.initializer}
    except Exception as e:
        why = str(e).splitlines()[0][:200]
        raise ModelError(f"{path}: a weight tensor cannot be read ({why}); truncated file?") from None

    inputs = []
    for i in graph.input:
        if i.name in constants:  # IR < 4 lists initializers as inputs too
            continue
        elem = _elem_type(i)
        if elem is not None and elem != "float32":
            raise ModelError(f"{path}: input '{i.name}' is {elem}; facerun runs models with float32 inputs only")
        dims = tuple(
            (d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None) for d in i.type.tensor_type.shape.dim
        )
        inputs.append((i.name, dims))
    if not inputs:
        raise ModelError(f"{path}: the model has no input")

    return ImportedModel(
        path=path,
        sha256=sha256_of(path),
        opset=opset,
        nodes=nodes,
        constants=constants,
        inputs=inputs,
        outputs=[o.name for o in graph.output],
        output_types={o.name: t for o in graph.output if (t := _elem_type(o)) not in (None, "float32")},
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        ir_version=model.ir_version,
    )
