"""onnx's own backend node tests (every case whose ops facerun supports), weights baked in as initializers.

Each case must give onnx's expected outputs on the CPU interpreter, or be refused with a FacerunError whose message
names what is refused (the node's operator, or the input and its element type). A wrong answer or any other
exception fails. The float32 cases that pass on the CPU run once more through the GPU path (on lavapipe in CI).
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import pytest
from onnx_node_cases import in_scope

from facerun.errors import FacerunError
from facerun.onnx.read import SUPPORTED

CASES = {c.name: c for c in in_scope(SUPPORTED)}


def _close(got: np.ndarray, want: np.ndarray, case) -> str | None:
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} instead of {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} instead of {want.dtype}"
    rtol, atol = max(case.rtol, 1e-4), max(case.atol, 1e-5)
    if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
        worst = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        return f"values off by up to {worst:.3g}"
    return None


@cache
def _cpu(name: str, folder: str):
    """('pass', net) or ('refused', message) for one case on the CPU interpreter; a wrong answer is an assert."""
    import onnx

    import facerun

    case = CASES[name]
    path = f"{folder}/{name}.onnx"
    onnx.save(case.model, path)
    try:
        net = facerun.load(path)
        out = net.run(next(iter(case.feeds.values())))
    except FacerunError as e:
        return "refused", str(e)
    assert len(out) == len(case.expected), f"{len(out)} outputs instead of {len(case.expected)}"
    for (out_name, got), want in zip(out.items(), case.expected):
        why = _close(got, want, case)
        assert why is None, f"{name}: output '{out_name}': {why}"
    return "pass", net


def _names_what(message: str, case) -> bool:
    ops = "|".join(sorted(case.ops))
    return bool(re.search(rf"\(({ops})\)", message) or re.search(r"input '[^']*' is \w+;|input shape", message))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("node"))


def test_cases_are_collected():
    # the installed onnx ships these; if the generator stopped yielding them, every test below would vanish
    assert len(CASES) > 150
    assert {"test_conv_with_strides_padding", "test_flatten_negative_axis1", "test_shape"} <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu(name, folder):
    outcome, detail = _cpu(name, folder)
    if outcome == "refused":
        assert "\n" not in detail and _names_what(detail, CASES[name]), detail


FLOAT32 = sorted(n for n, c in CASES.items() if next(iter(c.feeds.values())).dtype == np.float32)


@pytest.mark.parametrize("name", FLOAT32)
def test_gpu(name, folder, gpu_model):
    outcome, net = _cpu(name, folder)
    if outcome != "pass":
        pytest.skip("refused on the CPU")
    case = CASES[name]
    x = next(iter(case.feeds.values()))
    prog = net.program(x.shape)
    if not prog.steps:
        pytest.skip("folded to constants: nothing runs on the GPU")
    got = gpu_model.compile(prog).run({net.input_name: x})
    for (out_name, _), want in zip(prog.outputs, case.expected):
        value = prog.exact_outputs.get(out_name, got[out_name])
        why = _close(value, want, case)
        assert why is None, f"{name}: output '{out_name}' on the GPU: {why}"
