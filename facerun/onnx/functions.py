"""Model-local ONNX functions (FunctionProto, as the dynamo exporter writes `pkg.onnxscript.torch_lib` ones) expanded
into their nodes at read time, so the compiler only ever sees operators of the default domain.

A call's formal inputs and outputs become the caller's tensor names; every other name inside the body is scoped
by the call (`call/inner`), so two calls of one function never share a tensor. An attribute that refers to the
function's attribute (`ref_attr_name`) takes the caller's value, or the function's default when the caller gives
none, or is dropped (the operator's own default then holds). Bodies may call other local functions.
"""

from __future__ import annotations

from ..errors import ModelError

# Deeper nesting than this is taken for a function calling itself.
_MAX_DEPTH = 64


def _key(node_or_fn) -> tuple[str, str, str]:
    name = node_or_fn.op_type if hasattr(node_or_fn, "op_type") else node_or_fn.name
    return node_or_fn.domain, name, getattr(node_or_fn, "overload", "")


def inline_functions(model) -> list:
    """The graph's nodes with every call of a local function replaced by the function's body (NodeProtos)."""
    functions = {_key(f): f for f in model.functions}
    if not functions:
        return list(model.graph.node)
    scopes: dict[str, int] = {}
    out: list = []

    def expand(nodes, depth: int) -> None:
        for node in nodes:
            fn = functions.get(_key(node))
            if fn is None:
                out.append(node)
                continue
            if depth >= _MAX_DEPTH:
                raise ModelError(f"function '{fn.domain}.{fn.name}' calls itself (more than {_MAX_DEPTH} deep)")
            expand(_body(fn, node, _scope(node, scopes)), depth + 1)

    expand(model.graph.node, 0)
    return out


def _scope(node, scopes: dict[str, int]) -> str:
    base = node.name or (node.output[0] if node.output else node.op_type)
    n = scopes.get(base, 0)
    scopes[base] = n + 1
    return base if n == 0 else f"{base}#{n}"


def _body(fn, call, scope: str) -> list:
    """Copies of fn's nodes for one call: names bound and scoped, attribute references resolved."""
    from onnx import NodeProto

    names = {formal: (call.input[i] if i < len(call.input) else "") for i, formal in enumerate(fn.input)}
    names.update({formal: (call.output[i] if i < len(call.output) else "") for i, formal in enumerate(fn.output)})
    given = {a.name: a for a in call.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}

    def bind(name: str) -> str:
        return names.get(name, f"{scope}/{name}") if name else ""

    nodes = []
    for i, inner in enumerate(fn.node):
        node = NodeProto()
        node.CopyFrom(inner)
        node.name = f"{scope}/{inner.name or f'{inner.op_type}_{i}'}"
        node.input[:] = [bind(t) for t in inner.input]
        node.output[:] = [bind(t) for t in inner.output]
        attrs = []
        for a in inner.attribute:
            if a.ref_attr_name:
                source = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if source is None:
                    continue
                resolved = type(a)()
                resolved.CopyFrom(source)
                resolved.name = a.name
                a = resolved
            attrs.append(a)
        del node.attribute[:]
        node.attribute.extend(attrs)
        nodes.append(node)
    return nodes
