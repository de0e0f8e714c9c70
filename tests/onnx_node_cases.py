"""onnx's own backend node tests, written out the way exported models carry weights.

onnx ships its backend test cases as Python definitions (`onnx.backend.test.case.node`); `collect_testcases` builds
each case's model and input/output data. For facerun every input but the first becomes an initializer, as in a real
exported model, and the first stays a graph input. A case is in scope when every op of its graph is one facerun
lists as supported.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass
class NodeCase:
    name: str
    model: object  # onnx.ModelProto, weights baked in
    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]
    rtol: float
    atol: float
    ops: frozenset


def _bake(case) -> NodeCase | None:
    """The case's model with every input but the first as an initializer; None when it has no data or no input."""
    from onnx import numpy_helper

    if not case.data_sets:
        return None
    inputs, outputs = case.data_sets[0]
    model = type(case.model)()
    model.CopyFrom(case.model)
    graph = model.graph
    graph_inputs = list(graph.input)
    if not graph_inputs or len(inputs) != len(graph_inputs):
        return None
    if any(not isinstance(a, np.ndarray) for a in inputs) or any(not isinstance(a, np.ndarray) for a in outputs):
        return None  # sequences and optionals
    first = graph_inputs[0]
    for vi, arr in zip(graph_inputs[1:], inputs[1:]):
        graph.initializer.append(numpy_helper.from_array(arr, vi.name))
    del graph.input[:]
    graph.input.append(first)
    ops = frozenset(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in graph.node)
    return NodeCase(case.name, model, {first.name: inputs[0]}, list(outputs), case.rtol, case.atol, ops)


@lru_cache(maxsize=1)
def all_cases() -> tuple[NodeCase, ...]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    out = []
    for c in cases:
        baked = _bake(c)
        if baked is not None:
            out.append(baked)
    return tuple(sorted(out, key=lambda c: c.name))


def in_scope(supported) -> list[NodeCase]:
    return [c for c in all_cases() if c.ops <= set(supported)]
