"""Comparing two ways of running a model: facerun's CPU interpreter against onnxruntime, or the GPU path against the
CPU interpreter. Tolerance is relative to each output's range, so logits and 0..1 scores are judged alike."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A value agrees when max |a - b| <= TOLERANCE * max(range of the reference, MIN_RANGE)
TOLERANCE = 1e-4
# the GPU against the CPU interpreter: float32 sums in another order (tiles, split-K)
GPU_TOLERANCE = 1e-3
# Outputs that barely vary (a sigmoid saturated over a random input spans 2e-4) are judged as if they spanned this
# much, so float32 rounding (1e-7 of values near 1) is not taken for a departure.
MIN_RANGE = 0.01


@dataclass
class Diff:
    name: str
    shape: tuple
    max_abs: float
    max_rel: float  # max_abs over the reference's largest magnitude
    cosine: float
    range: float
    tol: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return self.max_abs <= tolerance_for(self.range, self.tol)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "ok": self.ok,
        }


def tolerance_for(value_range: float, tol: float = TOLERANCE) -> float:
    return tol * max(value_range, MIN_RANGE)


def compare(name: str, got: np.ndarray, want: np.ndarray, tol: float = TOLERANCE) -> Diff:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return Diff(name, tuple(got.shape), float("inf"), float("inf"), float("nan"), 0.0, tol)
    d = np.abs(got - want)
    max_abs = float(d.max()) if d.size else 0.0
    mag = float(np.abs(want).max()) if want.size else 0.0
    rng = float(want.max() - want.min()) if want.size else 0.0
    a, b = got.reshape(-1), want.reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = float(a @ b / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return Diff(name, tuple(want.shape), max_abs, max_abs / mag if mag > 0 else max_abs, cosine, rng, tol)


@dataclass
class StepReport:
    index: int
    op: str
    node: str
    value: str
    diff: Diff


def first_departing_step(net, x: np.ndarray, reference_steps) -> tuple[StepReport | None, int]:
    """Run the CPU interpreter step by step and compare each step's value with `reference_steps(names) -> dict`;
    return the first step beyond tolerance (or None) and how many steps were compared."""
    prog = net.program(x.shape)
    names = [prog.values[s.out].name for s in prog.steps]
    ref = reference_steps(names)
    seen: list[tuple[int, object, np.ndarray]] = []

    def hook(st, y):
        seen.append((len(seen), st, y))

    net.run_cpu(x, on_step=hook)
    compared = 0
    for i, st, y in seen:
        name = prog.values[st.out].name
        if name not in ref:
            continue
        compared += 1
        d = compare(name, y, ref[name])
        if not d.ok:
            return StepReport(i, st.op, st.node, name, d), compared
    return None, compared


def first_departing_gpu_step(net, x: np.ndarray, tol: float = GPU_TOLERANCE) -> tuple[StepReport | None, int]:
    """Every step's value on the GPU (one run that keeps them all) against the CPU interpreter's; the first step
    beyond tolerance, or None, and how many steps were compared."""
    prog = net.program(x.shape)
    gpu_values = net.gpu.step_outputs(prog, {net.input_name: x})
    cpu_values: list[np.ndarray] = []
    net.run_cpu(x, on_step=lambda st, y: cpu_values.append(y))
    for i, (st, want, got) in enumerate(zip(prog.steps, cpu_values, gpu_values)):
        d = compare(prog.values[st.out].name, got, want, tol)
        if not d.ok:
            return StepReport(i, st.op, st.node, d.name, d), i + 1
    return None, len(prog.steps)
