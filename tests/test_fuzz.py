"""A seeded fuzz test: random single-operator graphs and fused chains (tests/fuzz_graphs.py) against onnxruntime.

Every case must give onnxruntime's outputs on the CPU interpreter (within facerun.agree's tolerance), or be refused
with a one-line FacerunError naming one of the case's operators; a wrong answer or any other exception fails. A
subset of the cases that pass on the CPU runs again on the GPU path (lavapipe in CI), judged against the CPU. The
seed is fixed, so a failure is reproduced by its case number: `make_case(SEED, index)`.

The hostile cases (negative indices) break one of the spec's rules, or sit at its edge: facerun must refuse them,
or run them as onnxruntime does. A model onnxruntime refuses must be refused, unless onnx's reference implementation
runs it and agrees with facerun.
"""

from __future__ import annotations

import math
import re
from functools import cache

import numpy as np
import pytest
from fuzz_graphs import CHAINS, SINGLE, make_case

from facerun import agree
from facerun.errors import FacerunError

ort = pytest.importorskip("onnxruntime", reason="the fuzz test compares against onnxruntime (pip install onnxruntime)")

SEED = 14
CASES = 12 * len(SINGLE + CHAINS)
HOSTILE = 64  # cases with an attribute the spec forbids (or allows only at its edge): run as specified, or refused
GPU_EVERY = 4  # every 4th case also runs on the GPU (prime to the generator count, so every generator is met)


def _reference(case) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the operators as written
    options.log_severity_level = 3
    session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": case.x})


@cache
def _outcome(index: int, folder: str):
    """("pass", case, net, outputs) | ("refused", case, message) for one case on the CPU; a wrong answer, or running
    a model no reference runs, is an assert."""
    import onnx

    import facerun

    case = make_case(SEED, index)
    try:
        want = _reference(case)
    except Exception as e:  # onnxruntime refuses it: facerun must too, unless onnx's reference gives an answer
        want, why = None, f"facerun ran a model onnxruntime refuses ({str(e).splitlines()[0][:160]})"
    path = f"{folder}/case{index}.onnx"
    onnx.save(case.model, path)
    try:
        net = facerun.load(path)
        got = net.run({"x": case.x})
    except FacerunError as e:
        return "refused", case, str(e)
    if want is not None:
        why = _departure(got, want)
    if why is not None:
        # onnxruntime has its own bugs and gaps (a Slice with a negative step and an end of -INT_MAX keeps an
        # element): where it departs or refuses, onnx's reference implementation decides
        from onnx.reference import ReferenceEvaluator

        try:
            spec = ReferenceEvaluator(case.model).run(None, {"x": case.x})
        except Exception as e:
            raise AssertionError(f"case {index} ({case.name}): {why}; onnx's reference cannot run it either "
                                 f"({str(e)[:160]})") from None
        assert _departure(got, spec) is None, f"case {index} ({case.name}): {why}"
    return "pass", case, net, got


def _departure(got, want) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs instead of {len(want)}"
    for (name, value), reference in zip(got.items(), want):
        value, reference = np.asarray(value), np.asarray(reference)
        if reference.dtype.kind in "iu":
            if not (value.dtype.kind in "iu" and np.array_equal(value, reference)):
                return f"output '{name}' {value.tolist()} instead of {reference.tolist()}"
            continue
        diff = agree.compare(name, value, reference, agree.ONNXRUNTIME)
        if not diff.ok:
            return f"output '{name}': {diff.why()}"
    return None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


def test_every_generator_runs_and_most_cases_pass(folder):
    # the fuzz must keep its teeth: most cases run (few refusals or skips), and the GPU subset meets every generator
    assert math.gcd(GPU_EVERY, len(SINGLE + CHAINS)) == 1
    outcomes = [_outcome(i, folder)[0] for i in range(CASES)]
    assert outcomes.count("pass") >= 0.9 * CASES, {k: outcomes.count(k) for k in set(outcomes)}
    hostile = [_outcome(-i, folder)[0] for i in range(1, HOSTILE + 1)]
    assert hostile.count("refused") >= HOSTILE // 2, {k: hostile.count(k) for k in set(hostile)}


def test_gemm_with_a_c_varying_down_the_rows(folder, tmp_path):
    # found by this fuzz: a Gemm whose C is M x N (or M x 1) was refused; it is the product plus C, broadcast
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import facerun

    rng = np.random.default_rng(0)
    b, x = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    for c in (rng.standard_normal((5, 3)), rng.standard_normal((5, 1))):
        c = c.astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=0.5, beta=2.0)], "gemm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 3])],
            [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
        path = tmp_path / f"gemm{c.shape[1]}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        got = facerun.load(path).run({"x": x})["y"]
        np.testing.assert_allclose(got, 0.5 * x @ b + 2.0 * c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", [*range(CASES), *range(-1, -HOSTILE - 1, -1)])
def test_cpu(index, folder):
    outcome, case, *rest = _outcome(index, folder)
    if outcome == "refused":
        message = rest[0]
        names_op = re.search(rf"\b({'|'.join(sorted(case.ops))})\b", message)
        assert "\n" not in message and names_op, f"case {index} ({case.name}) refused without naming the op: {message}"


@pytest.mark.parametrize("index", range(0, CASES, GPU_EVERY))
def test_gpu(index, folder, gpu_model):
    outcome, case, *rest = _outcome(index, folder)
    if outcome != "pass":
        pytest.skip(f"{outcome} on the CPU")
    net, cpu_out = rest
    prog = net.program(case.x.shape)
    if not prog.steps:
        pytest.skip("no step to run (constants and views only)")
    got = gpu_model.compile(prog).run({net.input_name: case.x})
    for name, reference in cpu_out.items():
        value = prog.exact_outputs.get(name, got[name])
        diff = agree.compare(name, value, reference, agree.GPU)
        assert diff.ok, f"case {index} ({case.name}): output '{name}' on the GPU: {diff.why()}"
