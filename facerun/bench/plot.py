"""Charts of benchmark results: `--plot FILE.png|.svg` on `bench models`, `bench photos` and `bench compare`, and
`facerun bench plot SAVED.json` for a run saved earlier. Every chart is drawn from the JSON a run gives (`--json`,
`--save`), so a saved run charts exactly as the run itself would have.

matplotlib is the optional extra facerun[plot]: imported here only, and only once a chart is asked for (the check
runs before any benchmark, so a missing matplotlib costs no run). Figures are made without pyplot (no global state,
no display needed) and written whole or not at all (facerun.io.write_bytes).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from ..errors import InputError
from ..io import check_output_file, write_bytes

FORMATS = {".png": "png", ".svg": "svg"}
INSTALL = "pip install 'facerun[plot]'"
WIDE = 10.0  # a value axis spanning more than this factor is drawn on a log scale
PNG_DPI = 100  # with the sizes below, a chart of 20 rows stays well under 150 KB

# one colour per kind of path: facerun's CPU, facerun's GPU, and each peer
COLOURS = (("torch", "#2ca02c"), ("onnxruntime-webgpu", "#9467bd"), ("onnxruntime", "#ff7f0e"),
           ("opencv", "#ff7f0e"), ("gpu", "#1f77b4"), ("cpu", "#7f7f7f"))
FAIL = "#d62728"
FASTER, SLOWER, NOISE = "#2ca02c", "#d62728", "#9a9a9a"


def _clip(text: str, room: int = 100) -> str:
    return text if len(text) <= room else text[:room - 1].rstrip() + "…"


def _colour(path: str) -> str:
    return next((c for prefix, c in COLOURS if path.startswith(prefix)), "#444444")


# ------------------------------------------------------------------------------------------------ the edges


def check_target(path, option: str = "--plot") -> Path:
    """Before any work: the chart's file can be written, its suffix names a format, and matplotlib is there."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"{option} {path}: a chart is written as .png or .svg, not '{path.suffix or 'no suffix'}'")
    check_output_file(path, option)
    _figure_class()
    return path


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError(f"charts need matplotlib, which is not installed ({INSTALL})") from None
    return Figure


def save(fig, path) -> Path:
    """Write `fig` to `path` in the format its suffix names; SVG text stays text (searchable, small)."""
    import matplotlib

    path = Path(path)
    fmt = FORMATS[path.suffix.lower()]
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "facerun"}):
        fig.savefig(buf, format=fmt, dpi=PNG_DPI, bbox_inches="tight",
                    metadata={"Date": None} if fmt == "svg" else {"Software": None})
    return write_bytes(path, buf.getvalue(), error=InputError)


def chart_kind(data: dict) -> str:
    """"models" or "photos": which run a saved JSON holds."""
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        if "machine" in data:
            return "models"
        if "photos_dir" in data:
            return "photos"
    raise InputError("not a saved facerun bench run (bench models --save, or bench photos --json)")


# ------------------------------------------------------------------------------------------------ bench models


def _groups(rows: list[dict]) -> list[tuple[tuple, list[dict]]]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["size"]), []).append(r)
    return list(groups.items())


def _spread(r: dict) -> tuple[float, float, float]:
    """(median, p10, p90) per face."""
    batch = max(1, int(r.get("batch") or 1))
    per = r["per_face_ms"]
    lo, hi = r.get("p10_ms"), r.get("p90_ms")
    return per, (lo / batch if lo else per), (hi / batch if hi else per)


def _label(r: dict) -> str:
    return r["path"] + (f" (×{r['batch']})" if int(r.get("batch") or 1) > 1 else "")


def _log_if_wide(ax, axis: str, low: float, high: float) -> None:
    if low > 0 and high / low > WIDE:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _speed_words(ratio: float | None) -> str:
    if not ratio:
        return ""
    if abs(ratio - 1.0) < 1e-9:
        return "reference"
    f = ratio if ratio > 1 else 1 / ratio
    num = f"{f:.2f}" if f < 2 else f"{f:.1f}" if f < 100 else f"{f:.0f}"
    return f"{num}x {'faster' if ratio > 1 else 'slower'} than cpu"


def models_figure(data: dict):
    """The `bench models` table as a chart: a panel per model and size, a line per path from p10 to p90 of its ms
    per face with a dot at the median, its speed against the CPU beside it; parity failures red with a cross,
    skipped paths named. A panel whose times span more than WIDE is on a log scale."""
    Figure = _figure_class()
    groups = _groups(data["rows"])
    if not groups:
        raise InputError("the run has no rows to chart")
    heights = [max(2, len(rows)) * 0.36 + 0.9 for _, rows in groups]
    fig = Figure(figsize=(9.0, sum(heights) + 0.6), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, ((model, size), rows) in zip(axes, groups):
        timed = [r for r in rows if r.get("per_face_ms")]
        lows = [_spread(r)[1] for r in timed] or [1.0]
        highs = [_spread(r)[2] for r in timed] or [1.0]
        _log_if_wide(ax, "x", min(lows), max(highs))
        # room right of the slowest row for its label: about as wide again as the data on a log scale
        right = max(highs) * ((max(highs) / min(lows)) ** 0.4 * 2.5 if ax.get_xscale() == "log" else 1.7)
        left = min(lows) / 2 if ax.get_xscale() == "log" else 0
        ax.set_xlim(left, right)
        for y, r in enumerate(rows):
            if not r.get("per_face_ms"):
                why = "failed" if r.get("ok") is False else "skipped"
                ax.text(0.01, y, f"{why}: {_clip(r.get('note') or '')}", transform=ax.get_yaxis_transform(),
                        va="center", fontsize=7.5, color=FAIL if why == "failed" else "#777777", style="italic")
                continue
            med, lo, hi = _spread(r)
            failed = r.get("ok") is False
            colour = FAIL if failed else _colour(r["path"])
            ax.plot([lo, hi], [y, y], color=colour, lw=3, alpha=0.45, solid_capstyle="butt")
            ax.plot([med], [y], marker="X" if failed else "o", ms=8 if failed else 6, color=colour)
            note = f"{med:.3g} ms"
            words = _speed_words(r.get("speedup_vs_cpu"))
            if words:
                note += f" · {words}"
            if failed:
                note += " · parity ✗"
            ax.text(hi, y, "  " + note, va="center", fontsize=7.5, color=FAIL if failed else "#333333")
        ax.set_yticks(range(len(rows)), [_label(r) for r in rows], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        kind = rows[0].get("kind") or ""
        ax.set_title(f"{model} {size}" + (f" ({kind})" if kind else ""), fontsize=9.5, loc="left")
        ax.set_xlabel("ms per face (dot: median; bar: p10–p90; left is faster)", fontsize=8)
        if ax.get_xscale() == "log":
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1-2-5: never one lone tick
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=7.5)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(_run_title(data), fontsize=9, x=0.01, ha="left")
    _legend(fig, [r["path"] for r in data["rows"]], any(r.get("ok") is False for r in data["rows"]))
    return fig


KINDS = (("cpu", "facerun CPU"), ("gpu", "facerun GPU"), ("onnxruntime", "onnxruntime CPU"),
         ("onnxruntime-webgpu", "onnxruntime WebGPU"), ("torch", "torch CUDA"))


def _legend(fig, paths: list[str], failures: bool) -> None:
    """What the colours mean, for the kinds of path drawn (and the parity cross where a row failed)."""
    from matplotlib.lines import Line2D

    kinds = []
    for prefix, name in KINDS:
        colour = _colour(prefix)
        if any(_colour(p) == colour for p in paths) and all(c != colour for c, _ in kinds):
            kinds.append((colour, name))
    handles = [Line2D([], [], color=c, marker="o", lw=3, alpha=0.8, label=name) for c, name in kinds]
    if failures:
        handles.append(Line2D([], [], color=FAIL, marker="X", ms=8, lw=0, label="parity fails"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)


def _run_title(data: dict) -> str:
    device = (data.get("device") or {}).get("name") or "no GPU"
    cores = (data.get("machine") or {}).get("cores")
    when = (data.get("created") or "")[:10]
    return f"facerun bench models · {device}" + (f" · {cores} cores" if cores else "") + (f" · {when}" if when else "")


# ------------------------------------------------------------------------------------------------ bench photos


def photos_figure(data: dict):
    """`bench photos` as a chart: photos/s per path (bars; the runs' spread as a line where it ran more than once),
    and the decode floor as a line when the run has a decode-only row."""
    Figure = _figure_class()
    rows = [r for r in data["rows"] if not r["path"].startswith("decode")]
    floor = next((r for r in data["rows"] if r["path"].startswith("decode") and r.get("photos_per_s")), None)
    if not rows:
        raise InputError("the run has no rows to chart")
    fig = Figure(figsize=(8.0, len(rows) * 0.42 + 1.4), layout="constrained")
    ax = fig.subplots()
    rates = [r.get("photos_per_s") or 0.0 for r in rows]
    top = max(rates + [floor["photos_per_s"] if floor else 0.0]) or 1.0
    for y, r in enumerate(rows):
        rate = r.get("photos_per_s")
        if not rate or (r.get("skipped") and not r.get("photos")):
            ax.text(top * 0.01, y, f"skipped: {_clip(r.get('skipped') or '')}", va="center", fontsize=7.5,
                    color="#777777", style="italic")
            continue
        embed = r["path"].endswith("+embed")
        ax.barh(y, rate, color=_colour(r["path"]), alpha=0.55 if embed else 0.9, hatch="//" if embed else None,
                edgecolor="white")
        lo, hi = r.get("photos_per_s_low"), r.get("photos_per_s_high")
        if r.get("runs", 1) > 1 and lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color="#222222", lw=1.5)
        spread = f" ({lo:.1f}–{hi:.1f}, {r['spread']} of {r['runs']})" if r.get("runs", 1) > 1 and lo else ""
        ax.text(max(rate, hi or 0), y, f"  {rate:.1f}{spread}", va="center", fontsize=8)
    if floor is not None:
        ax.axvline(floor["photos_per_s"], color=FAIL, ls="--", lw=1)
        ax.text(floor["photos_per_s"], -0.6, f" decode alone: {floor['photos_per_s']:.1f} photos/s", color=FAIL,
                fontsize=7.5, va="bottom")
    ax.set_xlim(0, top * 1.35)
    ax.set_yticks(range(len(rows)), [r["path"] for r in rows], fontsize=8.5)
    ax.set_ylim(len(rows) - 0.5, -0.5 - (0.6 if floor is not None else 0))
    ax.set_xlabel("photos per second (higher is faster; hatched: detect + embed)", fontsize=8.5)
    ax.grid(axis="x", alpha=0.3)
    what = data.get("detector") or "?"
    if data.get("embedder"):
        what += f" + {data['embedder']}"
    ax.set_title(f"facerun bench photos · {data.get('photos', '?')} photos · {what} · "
                 f"{data.get('workers', '?')} decoding threads", fontsize=9.5, loc="left")
    return fig


# ------------------------------------------------------------------------------------------------ bench compare


def compare_figure(rows: list[dict], name_a: str, name_b: str):
    """`bench compare` as a chart: per row, B against A (A's ms/face over B's, right of 1: B faster) with the band
    the two runs' p10–p90 spreads allow; grey where the spreads overlap (within noise), parity failures marked."""
    Figure = _figure_class()
    shown = [r for r in rows if r.get("speedup")]
    if not shown:
        raise InputError("the two runs have no timed row in common to chart")
    fig = Figure(figsize=(9.0, len(shown) * 0.36 + 1.5), layout="constrained")
    ax = fig.subplots()
    ax.set_xscale("log", base=2)
    lows = [r.get("speedup_low") or r["speedup"] for r in shown]
    highs = [r.get("speedup_high") or r["speedup"] for r in shown]
    reach = max(2 ** 0.5, max(highs), 1 / min(lows))
    ax.set_xlim(1 / (reach * 1.2), reach * 3.5)
    ax.axvline(1.0, color="#333333", lw=0.8)
    for y, r in enumerate(shown):
        s, lo, hi = r["speedup"], r.get("speedup_low") or r["speedup"], r.get("speedup_high") or r["speedup"]
        failed = r.get("a_ok") is False or r.get("b_ok") is False
        colour = NOISE if r.get("within_noise") else FASTER if s > 1 else SLOWER
        ax.plot([lo, hi], [y, y], color=colour, lw=5, alpha=0.35, solid_capstyle="butt")
        ax.plot([s], [y], marker="X" if failed else "o", ms=8 if failed else 6, color=FAIL if failed else colour)
        f = s if s > 1 else 1 / s
        words = "within noise" if r.get("within_noise") else \
            f"{f:.2f}x {'faster' if s > 1 else 'slower'}" if f < 2 else f"{f:.1f}x {'faster' if s > 1 else 'slower'}"
        if failed:
            which = [name for name, ok in (("A", r.get("a_ok")), ("B", r.get("b_ok"))) if ok is False]
            words += f" · parity ✗ in {' and '.join(which)}"
        ax.text(max(hi, s), y, "  " + words, va="center", fontsize=7.5, color=FAIL if failed else "#333333")
    labels = [f"{r['model']} {r['size']} {r['path']}" + (f" (×{r['batch']})" if int(r["batch"]) > 1 else "")
              for r in shown]
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(_factor_formatter())
    ax.set_xlabel("B against A: A's ms/face ÷ B's (right of 1: B faster; band: from the runs' p10–p90; grey: "
                  "within noise)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7.5)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"facerun bench compare · A: {name_a} · B: {name_b}", fontsize=9.5, loc="left")
    return fig


def _factor_formatter():
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _pos):
        if v <= 0:
            return ""
        return f"{v:g}x" if v >= 1 else f"1/{1 / v:g}x" if math.isclose(1 / v, round(1 / v)) else f"{v:.2g}x"

    return FuncFormatter(fmt)
