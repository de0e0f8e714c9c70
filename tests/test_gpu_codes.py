"""The op codes come from one table (facerun/gpu/kernels.py), injected into every WGSL module as constants: the
sources spell no code, every code is used, and every kind in the table runs on the GPU as the CPU interpreter runs
it (small shapes: lavapipe is slow)."""

from __future__ import annotations

import re
from importlib import resources

import numpy as np
import pytest

from facerun import cpu
from facerun import program as P
from facerun.gpu import kernels as K
from facerun.gpu.lower import lower
from facerun.gpu.plan import TILES, Limits, PlanError

from gpu_fixtures import Builder, close

SOURCES = {p.name: p.read_text(encoding="utf-8") for p in resources.files("facerun.shaders").iterdir()
           if p.name.endswith(".wgsl")}
RNG = np.random.default_rng(3)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def example(kind: str | None, channels: int) -> P.Activation | None:
    """An activation of each kind in the table (a kind added to the table without one here fails the tests)."""
    return {None: None, "relu": P.Activation("relu"), "sigmoid": P.Activation("sigmoid"),
            "clip": P.Activation("clip", lo=-0.3, hi=0.4), "leaky": P.Activation("leaky", alpha=0.1),
            "prelu": P.Activation("prelu", slope=np.linspace(-0.5, 0.5, channels, dtype=np.float32)),
            "exp": P.Activation("exp"), "sqrt": P.Activation("sqrt"),
            "hardsigmoid": P.Activation("hardsigmoid", alpha=0.2, lo=0.5),
            "hardswish": P.Activation("hardswish", alpha=1 / 6, lo=0.5)}[kind]


def agrees(got: np.ndarray, want: np.ndarray) -> tuple[bool, float]:
    """`close`, where both sides must be NaN at the same places (sqrt and pow of negative values)."""
    nan = np.isnan(want)
    if not np.array_equal(nan, np.isnan(got)):
        return False, float("nan")
    return close(np.where(nan, 0, got), np.where(nan, 0, want).astype(np.float64))


def test_the_wgsl_spells_no_op_code():
    literal = re.compile(r"\b(?:act|op|kind)\s*[!=]=\s*\d+u?\b|\bcase\s+\d+u?\b")
    for name, text in SOURCES.items():
        found = literal.search(text)
        assert found is None, f"{name}: {found.group(0)}"


def test_every_code_is_a_generated_constant_some_kernel_uses():
    consts = K.constants()
    every = "\n".join(SOURCES.values())
    for prefix, table in K.CODE_TABLES.items():
        assert sorted(table.values()) == list(range(len(table))), prefix
        for kind, code in table.items():
            name = K.code_name(prefix, kind)
            assert f"const {name}: u32 = {code}u;" in consts
            assert re.search(rf"\b{name}\b", every), f"{name} is used by no kernel"
    kernels = (K.UNARY, K.BINARY, K.POOL, K.DIRECT_CONV, K.gemv(8, True), K.tiled_conv(TILES["64x64"], False, True))
    for kernel in kernels:
        code = kernel.code()
        assert code.startswith(consts)
        assert not re.search(r"^\s*#", code, re.M), f"{kernel.key}: a directive was left in"


def test_a_kind_outside_the_table_is_refused_at_lowering():
    b = Builder()
    x = b.input("x", (1, 2, 3, 3))
    y = b.step(P.Binary, (1, 2, 3, 3), a=x, b=x, kind="hypot")
    with pytest.raises(PlanError, match="hypot"):
        lower(b.program(y), Limits(), lambda role, data: data)
    with pytest.raises(ValueError, match="tanh"):
        K.act_params(P.Activation("tanh"), 2, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(K.ACT_CODES))
def test_every_activation_code_runs_as_on_the_cpu(gpu_model, kind):
    """Each activation alone, and fused into a tiled and a depthwise convolution and a gemv."""
    b = Builder()
    x = b.input("x", (1, 8, 6, 5))
    v = b.input("v", (3, 16))
    act = example(kind, 8)
    outs = [b.step(P.Conv, (1, 8, 6, 5), x=x, weight=randn(8, 8, 3, 3, scale=0.3), bias=randn(8), groups=1,
                   stride=(1, 1), dilation=(1, 1), pads=(1, 1, 1, 1), act=act),
            b.step(P.Conv, (1, 8, 6, 5), x=x, weight=randn(8, 1, 3, 3), bias=None, groups=8, stride=(1, 1),
                   dilation=(1, 1), pads=(1, 1, 1, 1), act=act),
            b.step(P.Gemm, (3, 8), x=v, weight=randn(8, 16, scale=0.3), bias=randn(8), act=act)]
    if act is not None:
        outs.append(b.step(P.Unary, (1, 8, 6, 5), x=x, act=act))
    prog = b.program(*outs)
    feeds = {"x": randn(1, 8, 6, 5, scale=2), "v": randn(3, 16, scale=2)}
    gp = gpu_model.compile(prog)
    assert [plan.split()[0] for _, plan in gp.conv_plans] == ["tiled", "depthwise", "gemv"]
    want, got = cpu.run_program(prog, feeds), gp.run(feeds)
    for name in want:
        ok, worst = agrees(got[name], want[name])
        assert ok, f"{kind}, {name}: off by {worst}"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(K.BINARY_CODES))
def test_every_binary_code_runs_as_on_the_cpu(gpu_model, kind):
    b = Builder()
    a = b.input("a", (2, 6, 5, 7))
    c = b.input("b", (1, 6, 1, 1))
    y = b.step(P.Binary, (2, 6, 5, 7), a=a, b=c, kind=kind)
    prog = b.program(y)
    feeds = {"a": randn(2, 6, 5, 7), "b": randn(1, 6, 1, 1) + 2.0}
    if kind == "pow":  # integer exponents of negative bases are defined, the others NaN
        feeds["b"] = np.array([2, 3, -1, 0.5, 1.5, 0], np.float32).reshape(1, 6, 1, 1)
    ok, worst = agrees(gpu_model.compile(prog).run(feeds)[prog.outputs[0][0]],
                       cpu.run_program(prog, feeds)[prog.outputs[0][0]])
    assert ok, f"{kind}: off by {worst}"


@pytest.mark.gpu
def test_every_pool_code_runs_as_on_the_cpu(gpu_model):
    b = Builder()
    x = b.input("x", (1, 3, 7, 6))
    outs = [b.step(P.Pool, (1, 3, 4, 3), x=x, kind=kind, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1))
            for kind in K.POOL_CODES]
    prog = b.program(*outs)
    feeds = {"x": randn(1, 3, 7, 6)}
    want, got = cpu.run_program(prog, feeds), gpu_model.compile(prog).run(feeds)
    for name in want:
        ok, worst = close(got[name], want[name].astype(np.float64))
        assert ok, f"{name}: off by {worst}"
