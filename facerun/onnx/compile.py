"""ONNX nodes -> a step program for one input shape: the driver.

One pass over the nodes in graph order binds every tensor name to a constant or to a program value. Each node goes
to its handler in `ops.OPS` with its inputs and attributes; the steps and views the handler makes enter the program.
A node whose inputs are all constants is folded: the steps its handler makes run at once on the CPU interpreter's
step code (`cpu.run_step`) and its outputs become constants, so shape arithmetic disappears. The fusions in
`passes.py` then run over the step list, and each value's lifetime is worked out last.

This object is also the context handlers are given (see `ops.py` for what they may call).
"""

from __future__ import annotations

from math import prod
from typing import NoReturn

import numpy as np

from .. import cpu, limits
from .. import program as P
from ..errors import InputError, ModelError
from . import passes
from .ops import OPS, params, unsupported_attribute
from .read import ImportedModel, Node
from .shapes import Operand


class _Unavailable:
    """A node output facerun does not make (MaxPool's indices, a Dropout mask): an error only if something reads it."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class Compiler:
    def __init__(self, model: ImportedModel, input_shapes: dict[str, tuple[int, ...]], batch_items: int | None = None):
        self.model = model
        self.opset = model.opset
        # batch_items=N: a file fixed at batch 1 compiled for N items: a constant Reshape whose leading 1 meets the
        # N items keeps them apart (the Net checks the result against single runs before it uses the program)
        self.batch_items = batch_items
        self.values: list[P.Value] = []
        self.steps: list[P.Step] = []
        self.folded: list[str] = []
        self.env: dict[str, Operand | _Unavailable] = {}
        self.node: Node | None = None
        self.folding = False  # the current node's inputs are all constants: its steps are evaluated, not kept
        self._tensor_limit = limits.max_tensor_bytes()
        self._scratch: dict[int, np.ndarray] = {}  # constants a folded step reads, by negative ids
        # what is worked out from the model alone, kept with it for the compiles of every later input size: the
        # initializers as operands, the nodes whose inputs and attributes passed the checks, the handlers' arrays
        self._memo = model.derived
        self.env.update(_constant_operands(model))
        self._checked = self._memo.setdefault("checked nodes", {})
        self.inputs = []
        for name, _ in model.inputs:
            shape = tuple(int(d) for d in input_shapes[name])
            vid = self._value(name, shape, "input")
            self.env[name] = Operand(name, shape, vid=vid)
            self.inputs.append((name, vid))

    # ---------------------------------------------------------------------------------------------------- main
    def compile(self) -> P.Program:
        for node in self.model.nodes:
            self._lower(node)
        outputs, exact = [], {}
        for name in self.model.outputs:
            v = self.env.get(name)
            if v is None:
                raise ModelError(f"output '{name}' is never produced")
            if isinstance(v, _Unavailable):
                raise ModelError(v.why)
            declared = self.model.output_types.get(name)
            if v.is_const and v.data.dtype.kind in "iub":
                exact[name] = v.data  # shape arithmetic: the integers themselves, not a float32 copy
            elif declared is not None and not (v.is_const and str(v.data.dtype) == declared):
                raise ModelError(f"output '{name}' is declared {declared}; facerun computes float32 tensors only")
            outputs.append((name, self._const_value(name, v.data) if v.is_const else v.vid))
        prog = P.Program(self.values, self.steps, self.inputs, outputs, self.folded, exact)
        passes.run(prog, self.model.derived)
        prog.assign_lifetimes()
        return prog

    def _lower(self, node: Node) -> None:
        handler = OPS.get(node.op)
        self.node = node
        if handler is None:
            raise ModelError(f"node '{node.name}' ({node.op}): facerun does not support this operator")
        ins = self._arguments(node)
        # folded: every input given is a constant (and one is given)
        self.folding = any(v is not None for v in ins) and all(v is None or v.data is not None for v in ins)
        try:
            result = handler(self, *ins, **node.attrs)
        except (InputError, ModelError):
            raise
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as e:
            raise InputError(f"node '{node.name}' ({node.op}): {e}") from None
        finally:
            folded, self.folding = self.folding, False
            self._scratch.clear()
        if folded and node.op != "Shape":  # a Shape always folds, whatever it reads: not worth a line
            self.folded.append(f"{node.op} '{node.name}' evaluated at compile time")
        results = result if isinstance(result, tuple) else (result,)
        for i, name in enumerate(node.outputs):
            if not name:
                continue
            r = results[i] if i < len(results) else None
            if r is not None:
                # an operand is frozen: one already of that name is kept as it is, else copied under the name
                self.env[name] = r if r.name == name else Operand(name, r.shape, r.vid, r.data)
            else:
                why = f"node '{node.name}' ({node.op}): its output {i} ('{name}') is not supported"
                self.env[name] = _Unavailable(why)

    def _arguments(self, node: Node) -> list[Operand | None]:
        """The node's inputs, checked against what its handler reads (inputs and attributes)."""
        ins = [self._operand(name) for name in node.inputs]
        while ins and ins[-1] is None:
            ins.pop()
        # which inputs are omitted ("" names) and which attributes are set is the node's own, whatever the input
        # size: a node that passed once passes again (a refused one is never kept)
        if self._checked.get(id(node)) is not node:
            self._check(node, ins)
            self._checked[id(node)] = node
        return ins

    def _check(self, node: Node, ins: list[Operand | None]) -> None:
        spec = params(node.op)
        if spec.inputs is not None and len(ins) > spec.inputs:
            self.refuse(f"{len(ins)} inputs; facerun reads {spec.inputs}")
        missing = next((i for i in range(spec.required_inputs) if i >= len(ins) or ins[i] is None), None)
        if missing is not None:
            self.refuse(f"input {missing} is missing")
        bad = unsupported_attribute(node.op, node.attrs)
        if bad is not None:
            self.refuse(f"attribute '{bad}' is not supported")
        for name in sorted(spec.required_attrs - set(node.attrs)):
            self.refuse(f"attribute '{name}' is missing")

    def _operand(self, name: str) -> Operand | None:
        if not name:
            return None
        v = self.env.get(name)
        if v is None:
            self.refuse(f"reads '{name}', which nothing produces")
        if isinstance(v, _Unavailable):
            raise ModelError(v.why)
        return v

    def _value(self, name, shape: tuple[int, ...], kind, base=None, data=None) -> int:
        """A new value; `shape` is a tuple of ints already (emit and view make it one)."""
        vid = len(self.values)
        self.values.append(P.Value(vid, name, shape, kind, vid if base is None else base, data))
        return vid

    def _const_value(self, name, arr) -> int:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        return self._value(name, tuple(int(d) for d in arr.shape), "const", data=arr)

    # ------------------------------------------------------------------------------- the context handlers use
    @property
    def name(self) -> str:
        return self.node.name

    @property
    def outputs(self) -> list[str]:
        return self.node.outputs

    def refuse(self, why: str) -> NoReturn:
        """What facerun cannot compile: a ModelError naming the node and its operator."""
        raise ModelError(f"node '{self.node.name}' ({self.node.op}): {why}")

    def bad_input(self, why: str) -> NoReturn:
        """An input shape the node cannot take: an InputError naming the node and its operator."""
        raise InputError(f"node '{self.node.name}' ({self.node.op}): {why}")

    def check_size(self, shape, itemsize: int = 4) -> None:
        """Refuse an output past the tensor size limit before anything is allocated for it."""
        if prod(shape) * itemsize > self._tensor_limit:  # the limit read once per compile, not once per node
            limits.check_tensor(shape, f"node '{self.node.name}' ({self.node.op})", itemsize)

    def note(self, text: str) -> None:
        self.folded.append(text)

    def derived(self, role: str, sources: tuple, make):
        """make()'s result for this node, kept with the model and given again while `sources` (the constant arrays
        it is made from) are the same objects: a node's weights are worked out once, not once per input size, and
        every size's program holds the same arrays. make() must read nothing else but the node's attributes."""
        hit = self.kept(role, sources)
        if hit is None:
            hit = make()
            self.keep(role, sources, hit)
        return hit

    def kept(self, role: str, sources: tuple):
        """What keep(role, sources, ...) kept for this node from the same `sources` objects, else None."""
        hit = self._memo.get((role, id(self.node)))
        if hit is not None and hit[0] is self.node and len(hit[1]) == len(sources) and all(
                a is b for a, b in zip(hit[1], sources)):
            return hit[2]
        return None

    def keep(self, role: str, sources: tuple, value) -> None:
        self._memo[(role, id(self.node))] = (self.node, sources, value)

    def const(self, t: Operand | None, what: str) -> np.ndarray | None:
        """A constant input's array (None for an omitted input); a computed one is refused."""
        if t is None:
            return None
        if not t.is_const:
            self.refuse(f"its {what} must be a constant, facerun cannot compute it")
        return t.data

    def constant(self, array) -> Operand:
        array = np.asarray(array)
        return Operand(self.outputs[0] if self.outputs else self.name, array.shape, data=array)

    def vid(self, t: Operand) -> int:
        """The value id a step reads for t: a program constant is made for a constant operand, unless the node is
        folded (then an id the folding evaluation resolves)."""
        if not t.is_const:
            return t.vid
        if self.folding:
            sid = -1 - len(self._scratch)
            self._scratch[sid] = t.data
            return sid
        return self._const_value(t.name, t.data)

    def emit(self, step: P.Step, shape, name: str | None = None) -> Operand:
        """Add a step writing a new value of `shape` (named after the node's output unless told); in a folded node,
        evaluate it on the CPU interpreter's step code instead and return the constant."""
        shape = tuple(map(int, shape))
        name = name or self.node.outputs[0]
        self.check_size(shape)
        if self.folding:
            y = np.asarray(cpu.run_step(step, [self._scratch[v] for v in step.reads], shape, threads=1))
            return Operand(name, shape, data=y if y.shape == shape else y.reshape(shape))
        vid = self._value(name, shape, "temp")
        step.out = vid
        self.steps.append(step)
        return Operand(name, shape, vid=vid)

    def view(self, t: Operand, shape, name: str | None = None) -> Operand:
        """t seen with another shape (same elements, same order): a view value, or a reshaped constant."""
        shape = tuple(map(int, shape))
        if prod(shape) != prod(t.shape):
            self.bad_input(f"cannot view {list(t.shape)} as {list(shape)}")
        name = name or self.outputs[0]
        if t.is_const:
            return Operand(name, shape, data=t.data.reshape(shape))
        return Operand(name, shape, vid=self._value(name, shape, "view", base=self.values[t.vid].base))


def _constant_operands(model: ImportedModel) -> dict[str, Operand]:
    """The model's initializers as operands: the same objects for every compile (an operand is frozen) while the
    model holds the same arrays."""
    kept = model.derived.get("constant operands")
    constants = model.constants
    if kept is None or len(kept) != len(constants) or not all(
            op.data is arr for op, arr in zip(kept.values(), constants.values())):
        kept = {name: Operand(name, tuple(np.shape(arr)), data=np.asarray(arr)) for name, arr in constants.items()}
        if all(op.data is arr for op, arr in zip(kept.values(), constants.values())):
            model.derived["constant operands"] = kept  # kept while the model holds the same arrays
    return kept


def compile_model(model: ImportedModel, input_shapes: dict[str, tuple[int, ...]],
                  batch_items: int | None = None) -> P.Program:
    return Compiler(model, input_shapes, batch_items).compile()
