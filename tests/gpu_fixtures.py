"""GPU test fixtures and helpers (import these from conftest or a test module).

`gpu` gives the facerun device, or skips with the reason when no adapter is usable, except under CI=true, where a
missing adapter FAILS: the WGSL path must never go untested silently. Software adapters (lavapipe) count only with
FACERUN_ALLOW_SOFTWARE=1, which CI sets.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from facerun import program as P


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def gpu():
    from facerun import gpu as G

    ok, why = G.gpu_available()
    if not ok:
        if in_ci():
            pytest.fail(f"CI=true but no usable GPU adapter (the WGSL path would go untested): {why}", pytrace=False)
        pytest.skip(why)
    return G.get_device()


@pytest.fixture(scope="session")
def gpu_model(gpu):
    """A GpuModel shared by a test session (weights resident)."""
    from facerun.gpu import GpuModel

    return GpuModel(dev=gpu)


class Builder:
    """Builds small step programs by hand: inputs, constants, steps, views."""

    def __init__(self):
        self.values: list[P.Value] = []
        self.steps: list[P.Step] = []
        self.inputs: list[tuple[str, int]] = []

    def _value(self, name, shape, kind, base=None, data=None) -> int:
        vid = len(self.values)
        self.values.append(P.Value(vid, name, tuple(shape), kind, vid if base is None else base, data))
        return vid

    def input(self, name: str, shape) -> int:
        vid = self._value(name, shape, "input")
        self.inputs.append((name, vid))
        return vid

    def const(self, name: str, data) -> int:
        data = np.ascontiguousarray(data, dtype=np.float32)
        return self._value(name, data.shape, "const", data=data)

    def view(self, src: int, shape) -> int:
        return self._value(f"view{len(self.values)}", shape, "view", base=self.values[src].base)

    def step(self, cls, shape, **fields) -> int:
        vid = self._value(f"{cls.__name__.lower()}{len(self.values)}", shape, "temp")
        self.steps.append(cls(out=vid, node=f"n{len(self.steps)}", **fields))
        return vid

    def program(self, *outputs: int) -> P.Program:
        prog = P.Program(self.values, self.steps, self.inputs, [(self.values[v].name, v) for v in outputs])
        prog.assign_lifetimes()
        return prog


def photo_in_corner(photo_hw: tuple[int, int], input_hw: tuple[int, int], seed: int = 2):
    """A seeded 1 x 3 photo of `photo_hw` and a program input of `input_hw` holding it at its top left, zero past it
    (what a masked run of a smaller photo in a larger program reads)."""
    photo = np.random.default_rng(seed).normal(size=(1, 3, *photo_hw)).astype(np.float32)
    padded = np.zeros((1, 3, *input_hw), np.float32)
    padded[:, :, : photo_hw[0], : photo_hw[1]] = photo
    return photo, padded


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> tuple[bool, float]:
    """Whether got matches want within rel * max(1, max |want|); and the worst difference."""
    assert got.shape == want.shape, (got.shape, want.shape)
    worst = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
    return worst <= rel * max(1.0, float(np.abs(want).max()) if want.size else 1.0), worst
