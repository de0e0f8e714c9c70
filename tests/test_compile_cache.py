"""What a model keeps across input sizes (its constant operands, checked nodes, handlers' arrays, lowering caches)
changes nothing that is compiled: a program compiled after others of the model, in any order, is the program a fresh
load compiles for that size alone, value for value and step for step, and so are its GPU dispatches."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from shared_paths import MODELS

import facerun
from facerun import program as P
from facerun.gpu.lower import lower
from facerun.gpu.plan import Limits

YUNET = MODELS / "face_detection_yunet_2023mar.onnx"

needs_yunet = pytest.mark.skipif(not YUNET.exists(), reason=f"{YUNET} is not here (the shared models)")


def _array(a: np.ndarray) -> tuple:
    a = np.asarray(a)
    return ("array", a.dtype.str, a.shape, hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest())


def _item(v):
    if isinstance(v, np.ndarray):
        return _array(v)
    if isinstance(v, P.Activation):
        return ("act", v.kind, v.lo, v.hi, v.alpha, None if v.slope is None else _array(v.slope))
    if isinstance(v, (list, tuple)):
        return tuple(_item(x) for x in v)
    return v


def describe_program(prog: P.Program) -> dict:
    """Everything a runner reads from a program, arrays by content."""
    return {
        "values": [(v.id, v.name, v.shape, v.kind, v.base, None if v.data is None else _array(v.data))
                   for v in prog.values],
        "steps": [(type(s).__name__, sorted((k, _item(x)) for k, x in vars(s).items())) for s in prog.steps],
        "inputs": list(prog.inputs),
        "outputs": list(prog.outputs),
        "folded": list(prog.folded),
        "exact": {k: _array(v) for k, v in prog.exact_outputs.items()},
    }


class _Recorded:
    """A const store that names each buffer by its role and content, so dispatches compare by what they bind."""

    def __call__(self, role, data):
        return ("const", role, _array(np.asarray(data)))

    def derived(self, role, sources, extra, make):
        return ("const", role, _array(np.asarray(make())))


def describe_lowered(prog: P.Program, limits: Limits) -> dict:
    low = lower(prog, limits, _Recorded())
    return {
        "dispatches": [(d.kernel.key, d.params, [_item(r) for r in d.reads], d.out, d.groups, d.node, d.plan)
                       for d in low.dispatches],
        "slots": list(low.slots.sizes),
        "inputs": [(name, slot, v.id) for name, slot, v in low.inputs],
        "outputs": list(low.outputs),
        "staging": low.staging_bytes,
        "kernels": dict(low.kernels),
        "plans": list(low.conv_plans),
    }


def _fresh(model: str, shape) -> P.Program:
    """`shape`'s program from a model loaded anew (nothing kept from any other compile)."""
    return facerun.load(model).program(shape)


LIMITS = (Limits(), Limits(max_workgroups_per_dim=65535, max_binding=1 << 30, max_invocations=1024,
                           max_workgroup_storage=32768))


def _check_same(model: str, shapes: list, orders: list[list[int]]) -> None:
    fresh = {}
    for s in shapes:
        prog = _fresh(model, s)
        fresh[s] = (describe_program(prog), [describe_lowered(prog, lim) for lim in LIMITS])
    for order in orders:
        net = facerun.load(model)
        for i in order:
            prog = net.program(shapes[i])
            want_prog, want_low = fresh[shapes[i]]
            assert describe_program(prog) == want_prog, f"program for {shapes[i]} (order {order})"
            for lim, want in zip(LIMITS, want_low):
                assert describe_lowered(prog, lim) == want, f"dispatches for {shapes[i]} (order {order}, {lim})"
            prog.assign_lifetimes()  # idempotent: lowering twice finds the same frees
            assert describe_program(prog) == want_prog


@needs_yunet
def test_yunet_sizes_in_any_order_compile_as_from_scratch():
    shapes = [(1, 3, h, w) for h, w in ((320, 320), (640, 1024), (352, 1024), (960, 608))]
    _check_same(str(YUNET), shapes, [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2, 1]])


def test_sface_batches_in_any_order_compile_as_from_scratch():
    shapes = [(b, 3, 112, 112) for b in (1, 3, 16)]
    _check_same("sface-arch", shapes, [[0, 1, 2], [2, 0, 1]])


def test_a_program_keeps_its_own_constants_when_the_model_arrays_change():
    """The kept arrays follow the model's arrays by identity: a model whose weight is replaced compiles the new one."""
    net = facerun.load("sface-arch-small")
    first = net.program((1, 3, 112, 112))
    conv = next(s for s in first.steps if isinstance(s, P.Conv))
    model = net.model
    node = next(n for n in model.nodes if n.name == conv.node)
    name = node.inputs[1]
    model.constants[name] = model.constants[name] * np.float32(2.0)
    again = facerun.load("sface-arch-small")
    again.model.constants[name] = model.constants[name]
    want = describe_program(again.program((2, 3, 112, 112)))
    got = describe_program(net.program((2, 3, 112, 112)))
    assert got == want


def test_an_input_a_kept_layer_cannot_take_is_refused_as_from_scratch():
    """A convolution compiled before skips its weight checks, not its input's: the same error, word for word."""
    from facerun.onnx.compile import compile_model

    model = facerun.load("sface-arch-small").model
    name = model.inputs[0][0]
    compile_model(model, {name: (1, 3, 112, 112)})
    with pytest.raises(facerun.InputError) as kept:
        compile_model(model, {name: (1, 4, 112, 112)})
    with pytest.raises(facerun.InputError) as fresh:
        compile_model(facerun.load("sface-arch-small").model, {name: (1, 4, 112, 112)})
    assert str(kept.value) == str(fresh.value)
    assert "expects 3 input channels, got 4" in str(kept.value)
