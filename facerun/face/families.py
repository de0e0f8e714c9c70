"""The detector families facerun knows, and telling which one a file is from its graph.

A family is recognised by what the file declares (output names, count and shapes; input size), never by its file
name, so a renamed or re-exported file still works and a file of another kind is refused with what was found:

| family      | outputs                                                      | landmarks                     |
|-------------|--------------------------------------------------------------|-------------------------------|
| YuNet       | cls/obj/bbox/kps_8..32 (2023mar) or loc, conf, iou (2022mar) | 5                             |
| SCRFD       | 6/9 (or 10/15) outputs: scores [N,1], boxes [N,4], kps [N,10] | 5 (kps models)                |
| RetinaFace  | 3 outputs [1,P,4], [1,P,2], [1,P,10]                         | 5                             |
| UltraFace   | 2 outputs [1,P,2] scores, [1,P,4] boxes                      | none                          |
| BlazeFace   | 2 outputs [1,896,16] regressors, [1,896,1] logits            | 6 (no mouth corners)          |
| YOLOv5-face | 3 raw heads [1,3,H,W,16]                                     | 5                             |
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import ModelError
from .blazeface import BlazeFace
from .family import Family, Graph
from .retinaface import RetinaFace
from .scrfd import Scrfd
from .ultraface import UltraFace
from .yolo5face import Yolo5Face
from .yunet import YuNet

FAMILIES: tuple[type[Family], ...] = (YuNet, Scrfd, RetinaFace, UltraFace, BlazeFace, Yolo5Face)


def read_graph(path) -> Graph:
    """The input and outputs a detector file declares (weights are not needed, so none are decoded)."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as e:
        raise ModelError(f"{path}: cannot be read as ONNX ({type(e).__name__})") from None
    graph = model.graph
    if any(not o.type.tensor_type.shape.dim for o in graph.output):
        # an export that left its output shapes out: ONNX's shape inference usually recovers them
        # where it cannot, the family check reports the outputs as they are
        with contextlib.suppress(onnx.shape_inference.InferenceError, ValueError, RuntimeError):
            graph = onnx.shape_inference.infer_shapes(model).graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if not inputs:
        raise ModelError(f"{path}: the model has no input")
    return Graph(path=path, input_name=inputs[0].name, input_shape=_dims(inputs[0]),
                 outputs=tuple((o.name, _dims(o)) for o in graph.output))


def _dims(value) -> tuple:
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                 for d in value.type.tensor_type.shape.dim)


def recognise(graph: Graph) -> Family:
    """The family whose outputs the graph has, set up for this graph; ModelError saying what was found if none."""
    for family in FAMILIES:
        if family.matches(graph):
            return family(graph)
    names = ", ".join(f.title for f in FAMILIES)
    raise ModelError(f"{graph.path.name} is not a face detector facerun knows ({names}): its outputs are "
                     f"{graph.describe() or 'none'}")


def family_of(path) -> Family:
    """The family of a detector file."""
    return recognise(read_graph(path))


def by_name(name: str) -> type[Family] | None:
    for family in FAMILIES:
        if family.name == name:
            return family
    return None


__all__ = ["FAMILIES", "by_name", "family_of", "read_graph", "recognise"]
