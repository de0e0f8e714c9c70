"""Saved benchmark results (`facerun bench --save`, `bench photos --json`): reading one back, and matching two runs
row by row within their own spread."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


def _read(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})") from None


def load_any(path) -> tuple[str, dict]:
    """("models", a saved `bench models` run) or ("photos", a `bench photos --json` run), checked to be one."""
    path = Path(path)
    data = _read(path)
    if isinstance(data, dict) and "photos_dir" in data and "machine" not in data:
        rows = data.get("rows")
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "path" in r for r in rows):
            raise InputError(f"{path}: a bench photos result whose rows lack their path")
        return "photos", data
    return "models", load_result(path, data)


def load_result(path, data=None) -> dict:
    """A saved benchmark (`--save`), checked to be one."""
    path = Path(path)
    if data is None:
        data = _read(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or "machine" not in data:
        raise InputError(f"{path}: not a facerun bench result (no machine and rows; save one with --save)")
    for r in data["rows"]:
        if not isinstance(r, dict) or not {"model", "size", "path", "batch"} <= set(r):
            raise InputError(f"{path}: a row lacks model/size/path/batch: {str(r)[:80]}")
    return data


@dataclass
class RatioRow:
    model: str
    size: str
    path: str
    batch: int
    a_ms: float | None  # per face
    b_ms: float | None
    speedup: float | None  # a_ms / b_ms: above 1, B is faster
    a_ok: bool | None
    b_ok: bool | None
    found_in: str = "both"  # "both", "A" or "B"
    # each run's own spread, per face: its p10 and p90 over the timed runs
    a_p10_ms: float | None = None
    a_p90_ms: float | None = None
    b_p10_ms: float | None = None
    b_p90_ms: float | None = None
    # the speed-up's band from those spreads (A's p10 over B's p90 to A's p90 over B's p10)
    speedup_low: float | None = None
    speedup_high: float | None = None
    within_noise: bool | None = None  # the two spreads overlap: the difference is no larger than the runs' own


def _spread(r: dict | None) -> tuple[float | None, float | None]:
    """(p10, p90) per face of a saved row; a row without them spreads over its median alone."""
    if not r or not r.get("per_face_ms"):
        return None, None
    batch = max(1, int(r.get("batch") or 1))
    lo = r.get("p10_ms")
    hi = r.get("p90_ms")
    per = r["per_face_ms"]
    return (lo / batch if lo else per), (hi / batch if hi else per)


def ratio_row(key: tuple, a: dict | None, b: dict | None) -> RatioRow:
    am = a.get("per_face_ms") if a else None
    bm = b.get("per_face_ms") if b else None
    row = RatioRow(*key, am, bm, am / bm if am and bm else None, a.get("ok") if a else None,
                   b.get("ok") if b else None, "both" if a and b else "A" if a else "B")
    row.a_p10_ms, row.a_p90_ms = _spread(a)
    row.b_p10_ms, row.b_p90_ms = _spread(b)
    if row.speedup is not None:
        row.speedup_low = row.a_p10_ms / row.b_p90_ms
        row.speedup_high = row.a_p90_ms / row.b_p10_ms
        row.within_noise = row.a_p10_ms <= row.b_p90_ms and row.b_p10_ms <= row.a_p90_ms
    return row


def compare(a: dict, b: dict) -> list[RatioRow]:
    """Rows of two saved runs matched by model, size, path and batch (in A's order, then B's extra rows)."""

    def key(r):
        return (r["model"], r["size"], r["path"], int(r["batch"]))

    b_rows = {key(r): r for r in b["rows"]}
    out = [ratio_row(key(r), r, b_rows.pop(key(r), None)) for r in a["rows"]]
    out += [ratio_row(k, None, r) for k, r in b_rows.items()]
    return out
