"""Saved benchmark results (`facerun bench --save`): reading one back, and matching two runs row by row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


def load_result(path) -> dict:
    """A saved benchmark (`--save`), checked to be one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})") from None
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


def compare(a: dict, b: dict) -> list[RatioRow]:
    """Rows of two saved runs matched by model, size, path and batch (in A's order, then B's extra rows)."""

    def key(r):
        return (r["model"], r["size"], r["path"], int(r["batch"]))

    b_rows = {key(r): r for r in b["rows"]}
    out = []
    for r in a["rows"]:
        other = b_rows.pop(key(r), None)
        am = r.get("per_face_ms")
        bm = other.get("per_face_ms") if other else None
        out.append(RatioRow(*key(r), am, bm, am / bm if am and bm else None, r.get("ok"),
                            other.get("ok") if other else None, "both" if other else "A"))
    for k, r in b_rows.items():
        out.append(RatioRow(*k, None, r.get("per_face_ms"), None, None, r.get("ok"), "B"))
    return out
