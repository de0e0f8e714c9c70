"""Pieces the commands share: model loading, --size parsing, output helpers."""

from __future__ import annotations

import json

import click
import numpy as np
from rich.console import Console

from ..errors import InputError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


def parse_size(text: str | None) -> tuple[int, int] | None:
    """'640x480' -> (640, 480) as width, height."""
    if not text:
        return None
    try:
        w, h = (int(v) for v in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise InputError(f"--size must look like 640x480 (width x height), got '{text}'") from None
    if w <= 0 or h <= 0:
        raise InputError(f"--size must be positive, got '{text}'")
    return w, h


def input_shape(net, size: tuple[int, int] | None, batch: int = 1) -> tuple[int, ...]:
    shape = list(net.default_shape(batch))
    if size is not None:
        if len(shape) != 4:
            raise InputError(f"--size applies to image inputs; {net.label} takes {len(shape)}-D input")
        shape[3], shape[2] = size
    return tuple(shape)


def sample_input(net, shape, seed: int = 0) -> np.ndarray:
    """A seeded input in the range the model expects: 0..255 pixels for detectors and in-graph-normalised models,
    roughly unit-range values for embedders that expect normalised input."""
    rng = np.random.default_rng(seed)
    lo, hi = input_range(net)
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def input_range(net) -> tuple[float, float]:
    try:
        from ..zoo.known import by_sha256

        k = by_sha256(net.sha256)
    except ImportError:
        k = None
    if k is not None and k.kind == "embedder":
        lo = min((0 - m) / s for m, s in zip(k.mean, k.std))
        hi = max((255 - m) / s for m, s in zip(k.mean, k.std))
        return lo, hi
    from ..zoo import replicas as synthetic

    r = synthetic.REPLICAS.get(net.label)
    pre = getattr(r, "preprocess", None)
    if r is not None and r.kind == "embedder" and pre is not None:
        mean, std = np.broadcast_to(pre.mean, 3), np.broadcast_to(pre.std, 3)
        return float(((0 - mean) / std).min()), float(((255 - mean) / std).max())
    return 0.0, 255.0


def print_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2))


def fmt_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f}"


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"
