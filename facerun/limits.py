"""Size limits checked before anything is allocated, so a small file cannot ask for gigabytes.

FACERUN_MAX_TENSOR_MB bounds one tensor a model compiles to (an activation, a folded constant: 4096 MiB by default);
FACERUN_MAX_PIXELS bounds a decoded image (100 megapixels by default). Both are read when checked; `set_limit` (the
command line's --max-tensor-mb and --max-pixels) overrides them.
"""

from __future__ import annotations

from math import prod

from . import settings
from .errors import InputError
from .settings import positive_number

DEFAULT_MAX_TENSOR_MB = int(settings.default("FACERUN_MAX_TENSOR_MB"))
DEFAULT_MAX_PIXELS = int(settings.default("FACERUN_MAX_PIXELS"))


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


# the command line's flags for this run, by the variable they stand for
_FLAGS = {"FACERUN_MAX_TENSOR_MB": "--max-tensor-mb", "FACERUN_MAX_PIXELS": "--max-pixels"}
_overrides: dict[str, float] = {}


def set_limit(name: str, value: float | None) -> None:
    """Use `value` for the limit `name` (FACERUN_MAX_TENSOR_MB or FACERUN_MAX_PIXELS) instead of the environment's;
    None goes back to the environment."""
    if name not in _FLAGS:
        raise ValueError(f"no limit named {name}")
    if value is None:
        _overrides.pop(name, None)
    else:
        _overrides[name] = positive_number(str(value), _FLAGS[name])


def _env_limit(name: str) -> float:
    if name in _overrides:
        return _overrides[name]
    return settings.get(name)


def _names(name: str) -> str:
    return f"{_FLAGS[name]} or {name}"


def max_tensor_bytes() -> int:
    return int(_env_limit("FACERUN_MAX_TENSOR_MB") * (1 << 20))


def check_tensor(shape, what: str, itemsize: int = 4) -> None:
    """Refuse a tensor of `shape` past the tensor limit, before it is made (the size and the limit in the message)."""
    size = prod(int(d) for d in shape) * itemsize
    limit = max_tensor_bytes()
    if size > limit:
        dims = "x".join(str(int(d)) for d in shape)
        raise InputError(f"{what}: a {dims} tensor takes {human_bytes(size)}, past the limit of "
                         f"{human_bytes(limit)} for one tensor ({_names('FACERUN_MAX_TENSOR_MB')})")


def max_pixels() -> int:
    return int(_env_limit("FACERUN_MAX_PIXELS"))


def check_pixels(width: int, height: int, what: str) -> None:
    limit = max_pixels()
    if width * height > limit:
        raise InputError(f"{what}: {width}x{height} is {width * height / 1e6:.3g} megapixels, past the limit of "
                         f"{limit / 1e6:g} ({_names('FACERUN_MAX_PIXELS')}; about "
                         f"{human_bytes(width * height * 3 * 4)} to hold)")
