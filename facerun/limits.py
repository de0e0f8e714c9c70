"""Size limits checked before anything is allocated, so a small file cannot ask for gigabytes.

FACERUN_MAX_TENSOR_MB bounds one tensor a model compiles to (an activation, a folded constant: 4096 MiB by default);
FACERUN_MAX_PIXELS bounds a decoded image (100 megapixels by default). Both are read when checked.
"""

from __future__ import annotations

import math
import os
from math import prod

from .errors import InputError

DEFAULT_MAX_TENSOR_MB = 4096
DEFAULT_MAX_PIXELS = 100_000_000


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def positive_number(text: str, what: str) -> float:
    """A finite number > 0 from a flag or variable; anything else (nan, inf, -1, words) an InputError."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{what}={text} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what}={text}: a finite number above 0 is needed")
    return value


def _env_limit(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    return positive_number(text, name) if text else default


def max_tensor_bytes() -> int:
    return int(_env_limit("FACERUN_MAX_TENSOR_MB", DEFAULT_MAX_TENSOR_MB) * (1 << 20))


def check_tensor(shape, what: str, itemsize: int = 4) -> None:
    """Refuse a tensor of `shape` past the tensor limit, before it is made (the size and the limit in the message)."""
    size = prod(int(d) for d in shape) * itemsize
    limit = max_tensor_bytes()
    if size > limit:
        dims = "x".join(str(int(d)) for d in shape)
        raise InputError(f"{what}: a {dims} tensor takes {human_bytes(size)}, past the limit of "
                         f"{human_bytes(limit)} for one tensor (FACERUN_MAX_TENSOR_MB)")


def max_pixels() -> int:
    return int(_env_limit("FACERUN_MAX_PIXELS", DEFAULT_MAX_PIXELS))


def check_pixels(width: int, height: int, what: str) -> None:
    limit = max_pixels()
    if width * height > limit:
        raise InputError(f"{what}: {width}x{height} is {width * height / 1e6:.0f} megapixels, past the limit of "
                         f"{limit / 1e6:g} (FACERUN_MAX_PIXELS; about {human_bytes(width * height * 3 * 4)} to hold)")
