"""Whether two runs of a model agree: the tolerances, the comparison, and the seeded inputs they are compared on.

Used by `facerun parity` (the CPU interpreter against onnxruntime, the GPU against the CPU), the checked GPU
attachment (facerun.gpu.checked: a program runs on the GPU only after agreeing with the CPU), `facerun bench`
(each path against the CPU interpreter) and `Net.batch_program` (a batch program must give what single runs give).

A value tolerance is relative to a scale of the reference output (its range, or its largest magnitude), so logits
and 0..1 scores are judged alike; embeddings may be judged by direction (cosine) instead.
"""

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
# No tolerance is finer than this many float32 steps at the output's largest magnitude: an output of one value
# (range 0) of 193.6 may differ by one rounding of a float32 sum (1.5e-5) between two correct runtimes.
FLOAT32_STEPS = 4
# embeddings: the cosine of the two vectors at least this
MIN_COSINE = 0.9999
# --precision f16 (Winograd's planes stored as half floats, sums in float32): each stored value is rounded to 2^-11
# of itself; through the AuraFace replica's 50 layers that came to 1.9e-3 of the output's range (H200, batch 16)
GPU_F16_TOLERANCE = 1e-2
MIN_COSINE_F16 = 0.9995  # and every embedding within this cosine of the CPU's
# a 2-D output with at least this many columns is a batch of vectors, each row judged by its cosine too
ROW_VECTOR_MIN = 16

# seeds of the inputs each check runs on
TEST_SEED = 20240229  # the checked GPU attachment
SEPARABLE_SEED = 7  # Net.batch_program's check that a batch program keeps its items apart


@dataclass(frozen=True)
class Tolerance:
    """When an output agrees with its reference: max |got - want| <= rel * max(scale, floor), where the scale is the
    reference's range (max - min) or its largest magnitude; and, where set, the cosine of the whole output (or of
    each row of a batch of vectors) at least the given one. rel None: values are judged by direction only."""

    rel: float | None
    floor: float = MIN_RANGE
    scale: str = "range"  # "range" | "magnitude"
    min_cosine: float | None = None
    row_cosine: float | None = None

    def limit(self, d: Diff) -> float | None:
        if self.rel is None:
            return None
        resolution = FLOAT32_STEPS * float(np.finfo(np.float32).eps) * d.magnitude
        # one value has no range: it is judged against its size (a sum over 660 inputs, say)
        by_range = self.scale == "range" and int(np.prod(d.shape)) > 1
        return max(self.rel * max(d.range if by_range else d.magnitude, self.floor), resolution)


ONNXRUNTIME = Tolerance(TOLERANCE)  # facerun's CPU interpreter against onnxruntime
GPU = Tolerance(GPU_TOLERANCE)  # the GPU path against the CPU interpreter (parity, bench)
# the checked attachment's gate: looser on small outputs, and every embedding of a batch in the right direction
GPU_CHECK = Tolerance(GPU_TOLERANCE, floor=1.0, row_cosine=MIN_COSINE)
GPU_F16_CHECK = Tolerance(GPU_F16_TOLERANCE, floor=1.0, row_cosine=MIN_COSINE_F16)  # the gate at --precision f16
EMBEDDING = Tolerance(None, min_cosine=MIN_COSINE)  # bench: embeddings compared by direction
# a batch program against single runs, both on the CPU: only summation order may differ
BATCH_ITEMS = Tolerance(TOLERANCE, floor=1.0, scale="magnitude")


def as_tolerance(tol) -> Tolerance:
    """A Tolerance, or a bare number taken as `rel` of the reference's range."""
    return tol if isinstance(tol, Tolerance) else Tolerance(float(tol))


def tolerance_for(value_range: float, tol: float = TOLERANCE) -> float:
    """The largest max abs difference `tol` allows on an output spanning `value_range`."""
    return tol * max(value_range, MIN_RANGE)


# ----------------------------------------------------------------------------------------------- comparison


@dataclass
class Diff:
    name: str
    shape: tuple
    max_abs: float
    max_rel: float  # max_abs over the reference's largest magnitude
    cosine: float
    range: float
    tol: Tolerance | float = TOLERANCE
    magnitude: float = 0.0
    row_cosine: float | None = None  # the smallest per-row cosine, for a batch of vectors
    nonfinite: int = 0  # NaNs and infinities the reference holds (equal on the other side when it agrees)
    problem: str | None = None  # a mismatch no tolerance excuses: the shape, or where values are finite

    @property
    def tolerance(self) -> Tolerance:
        return as_tolerance(self.tol)

    @property
    def ok(self) -> bool:
        return self.why() is None

    def why(self) -> str | None:
        """What departs beyond the tolerance, in a few words, or None."""
        if self.problem is not None:
            return self.problem
        t = self.tolerance
        limit = t.limit(self)
        if limit is not None and not self.max_abs <= limit:
            return f"off by {self.max_abs:.3g} (tolerance {limit:.3g})"
        if t.min_cosine is not None and not self.cosine >= t.min_cosine:
            return f"cosine {self.cosine:.6f} < {t.min_cosine}"
        if t.row_cosine is not None and self.row_cosine is not None and not self.row_cosine >= t.row_cosine:
            return f"cosine {self.row_cosine:.6f} < {t.row_cosine}"
        return None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "nonfinite": self.nonfinite,
            "ok": self.ok,
        }


def compare(name: str, got, want, tol: Tolerance | float = TOLERANCE) -> Diff:
    """How far `got` is from the reference `want`. Non-finite values must sit at the same places; the numbers are
    taken over the finite ones."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return Diff(name, tuple(got.shape), float("inf"), float("inf"), float("nan"), 0.0, tol,
                    problem=f"shape {list(got.shape)} instead of {list(want.shape)}")
    finite = np.isfinite(want)
    # the same NaN or infinity on both sides agrees (an operator's own answer, e.g. sqrt of -1); a NaN on one side
    # only, or an infinity of the other sign, is a departure
    apart = int(np.count_nonzero(finite != np.isfinite(got)))
    if not apart and not finite.all():
        apart = int((~finite).sum()) - int(np.count_nonzero(_same_special(got[~finite], want[~finite])))
    if apart:
        return Diff(name, tuple(want.shape), float("inf"), float("inf"), float("nan"), 0.0, tol,
                    problem=f"{apart} NaN or infinite value{'s' if apart > 1 else ''} where the reference has "
                            "another value (NaN on one side only, or an infinity of the other sign)")
    a, b = got[finite], want[finite]
    max_abs = float(np.abs(a - b).max()) if b.size else 0.0
    mag = float(np.abs(b).max()) if b.size else 0.0
    rng = float(b.max() - b.min()) if b.size else 0.0
    row_cos = _row_cosine(got, want) if finite.all() else None
    return Diff(name, tuple(want.shape), max_abs, max_abs / mag if mag > 0 else max_abs, _cosine(a, b), rng, tol,
                magnitude=mag, row_cosine=row_cos, nonfinite=int((~finite).sum()))


def _same_special(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two arrays of NaNs and infinities hold the same one."""
    return (np.isnan(a) & np.isnan(b)) | (a == b)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)


def _row_cosine(got: np.ndarray, want: np.ndarray) -> float | None:
    if want.ndim != 2 or want.shape[1] < ROW_VECTOR_MIN:
        return None
    na, nb = np.linalg.norm(want, axis=1), np.linalg.norm(got, axis=1)
    both = (na > 0) & (nb > 0)
    if not both.any():
        return None
    return float(((want * got).sum(axis=1)[both] / (na[both] * nb[both])).min())


def disagreement(want: dict, got: dict, tol: Tolerance | float = GPU_CHECK) -> str | None:
    """Why the outputs `got` do not match the reference outputs `want` (both by name), or None when they agree."""
    for name, reference in want.items():
        value = got.get(name)
        if value is None:
            return f"output '{name}': shape None instead of {list(np.shape(reference))}"
        why = compare(name, value, reference, tol).why()
        if why is not None:
            return f"output '{name}': {why}"
    return None


# ------------------------------------------------------------------------------------------- seeded inputs


def _hashed_uniform(count: int, seed: int, start: int = 0) -> np.ndarray:
    """`count` float32 values uniform in [0, 1), value i the murmur3 finaliser of (seed, start + i): reproducible on
    any numpy, a few integer passes, and no numpy.random (whose import alone cost a library run's first photo
    80-130 ms: the GPU check is the first to draw an input)."""
    mixed = int(_fmix32(np.array([seed & 0xFFFFFFFF], np.uint32))[0])
    x = np.arange(start, start + count, dtype=np.uint64).astype(np.uint32)  # the index, modulo 2**32
    x *= np.uint32(0x9E3779B1)  # odd: a bijection, so neighbouring indices land far apart before the mix
    x += np.uint32(mixed)
    _fmix32(x)
    return (x >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))


def _fmix32(x: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finaliser, in place (unsigned arithmetic wraps)."""
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x85EBCA6B)
    x ^= x >> np.uint32(13)
    x *= np.uint32(0xC2B2AE35)
    x ^= x >> np.uint32(16)
    return x


def _scaled(u: np.ndarray, shape, value_range: tuple[float, float]) -> np.ndarray:
    lo, hi = value_range
    u *= np.float32(hi - lo)
    u += np.float32(lo)
    return u.reshape(tuple(int(d) for d in shape))


def seeded_input(shape, seed: int = 0, value_range: tuple[float, float] = (-1.0, 1.0)) -> np.ndarray:
    """A reproducible float32 input, uniform over `value_range` (by default like a normalised image)."""
    return _scaled(_hashed_uniform(int(np.prod(shape, dtype=np.int64)), seed), shape, value_range)


def seeded_inputs(shapes: dict, seed: int = TEST_SEED, value_range: tuple[float, float] = (-1.0, 1.0)) -> dict:
    """One seeded input per name ({name: shape}), drawn in turn from one stream (each name's values follow the
    last's)."""
    out, start = {}, 0
    for name, shape in shapes.items():
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = _scaled(_hashed_uniform(count, seed, start), shape, value_range)
        start += count
    return out


# ------------------------------------------------------------------------------------------ step by step


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


def first_departing_gpu_step(net, x: np.ndarray, tol: Tolerance | float = GPU) -> tuple[StepReport | None, int]:
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
