"""Benchmark charts (facerun.bench.plot): each chart drawn from a saved H200 run in docs/bench/ (and from a run made
here), checked as a file (signature, size, every path drawn: SVG text stays text); without matplotlib, one line and
exit 1 before any benchmark runs.

Timings are never asserted (this machine is shared): only what the chart draws from the run it is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from facerun.cli import main

pytest.importorskip("matplotlib")

SAVED = Path(__file__).resolve().parent.parent / "docs" / "bench"
MODELS_RUN = SAVED / "h200-models.json"  # cpu, the GPU paths and onnxruntime on mobilefacenet and both YuNets
PEERS_RUN = SAVED / "h200-issue16-final.json"  # the GPU peers; torch-cuda's TF32 rows fail parity
EARLIER_PEERS_RUN = SAVED / "h200-issue16.json"
PHOTOS_RUN = SAVED / "h200-issue10-workers8.json"  # a `bench photos --json` run, saved before photos had a format
PNG = b"\x89PNG\r\n\x1a\n"
SMALL = "sface-arch-small"


def invoke(*args):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


def drawn(target: Path, *args) -> str:
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert f"chart written to {target}" in res.stderr
    return target.read_text(encoding="utf-8")


def rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def label(r: dict) -> str:
    return r["path"] + (f" (×{r['batch']})" if int(r["batch"]) > 1 else "")


# ------------------------------------------------------------------------------------------------ bench models


def test_models_chart_from_a_saved_run_draws_every_path_of_every_model(tmp_path):
    svg = drawn(tmp_path / "models.svg", "plot", str(MODELS_RUN), "--out", str(tmp_path / "models.svg"))
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    saved = rows(MODELS_RUN)
    for r in saved:
        assert f">{label(r)}<" in svg, label(r)  # each path's tick label, per panel
    for model in {r["model"] for r in saved}:
        assert svg.count(f">{model} ") == 1, model  # one panel per model and size
    cpu = {r["model"]: r for r in saved if r["path"] == "cpu"}
    slower = next(r for r in saved if r["speedup_vs_cpu"] and r["speedup_vs_cpu"] < 1)
    faster = next(r for r in saved if r["speedup_vs_cpu"] and r["speedup_vs_cpu"] > 1)
    assert f"{1 / slower['speedup_vs_cpu']:.2f}x slower than cpu" in svg
    assert f"{cpu[faster['model']]['median_ms'] / faster['per_face_ms']:.1f}x faster than cpu" in svg
    assert "parity ✗" not in svg and "parity fails" not in svg  # every row of that run passed


def test_models_chart_marks_parity_failures_and_names_skipped_paths(tmp_path):
    target = tmp_path / "peers.png"
    invoke("plot", str(PEERS_RUN), "--out", str(target))
    data = target.read_bytes()
    assert data.startswith(PNG) and 20_000 < len(data) < 150_000
    with Image.open(target) as im:
        assert im.format == "PNG" and im.width >= 800 and im.height > im.width  # two panels, one above the other

    svg = drawn(tmp_path / "peers.svg", "plot", str(PEERS_RUN), "--out", str(tmp_path / "peers.svg"))
    saved = rows(PEERS_RUN)
    failed = [r for r in saved if r["ok"] is False and r["per_face_ms"]]
    skipped = [r for r in saved if r["per_face_ms"] is None]
    assert failed and skipped
    assert svg.count("· parity ✗") == len(failed) and "parity fails" in svg  # the mark, and the legend's entry
    assert svg.count("skipped: ") == len(skipped)


def test_bench_models_plot_draws_the_run_it_made(tmp_path):
    target = tmp_path / "run.svg"
    svg = drawn(target, SMALL, "--paths", "cpu,cpu-batch", "--batch", "2", "--repeat", "2", "--warmup", "0",
                "--plot", str(target))
    assert f">{SMALL} 112x112 (embedder)<" in svg and ">cpu<" in svg and ">cpu-batch (×2)<" in svg


# ------------------------------------------------------------------------------------------------ bench photos


def test_photos_chart_draws_every_path_and_the_decode_floor_only_when_measured(tmp_path):
    svg = drawn(tmp_path / "photos.svg", "plot", str(PHOTOS_RUN), "--out", str(tmp_path / "photos.svg"))
    for r in rows(PHOTOS_RUN):
        assert f">{r['path']}<" in svg and f"{r['photos_per_s']:.1f}" in svg, r["path"]
    assert "decode alone" not in svg  # that run has no decode-only row

    data = json.loads(PHOTOS_RUN.read_text())
    data["rows"].append({"path": "decode", "photos": data["photos"], "photos_per_s": 240.5, "skipped": None})
    with_floor = tmp_path / "with-decode.json"
    with_floor.write_text(json.dumps(data))
    svg = drawn(tmp_path / "floor.svg", "plot", str(with_floor), "--out", str(tmp_path / "floor.svg"))
    assert "decode alone: 240.5 photos/s" in svg and ">decode<" not in svg  # a line, not a bar


def test_bench_photos_repeat_gives_median_and_spread_and_plots_it(tmp_path):
    from people_fixtures import FACES, SMALL_PHOTOS, need_real_data

    need_real_data()
    folder = tmp_path / "photos"
    folder.mkdir()
    for i, name in enumerate(SMALL_PHOTOS[:2]):
        image = Image.open(FACES / name).convert("RGB")
        image.thumbnail((160, 160))
        image.save(folder / f"photo{i}.jpg", quality=92)
    target = tmp_path / "photos.svg"
    res = invoke("photos", str(folder), "--paths", "cpu,cpu-serial", "--repeat", "3", "--plot", str(target), "--json")
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    assert result["repeat"] == 3 and result["format"] == "facerun-bench-photos/1"
    for r in result["rows"]:
        runs = r["photos_per_s_runs"]
        assert r["runs"] == len(runs) == 3 and r["spread"] == "min–max"
        assert r["photos_per_s"] == pytest.approx(sorted(runs)[1], rel=1e-3)  # the median of three
        assert r["photos_per_s_low"] == pytest.approx(min(runs), rel=1e-3)
        assert r["photos_per_s_high"] == pytest.approx(max(runs), rel=1e-3)
    assert result["rows"][1]["agree_with_cpu"]["same"] is True
    svg = target.read_text()
    for r in result["rows"]:
        assert f">{r['path']}<" in svg
    assert svg.count("min–max of 3") == len(result["rows"])  # each bar's spread, named

    res = invoke("photos", str(folder), "--paths", "cpu", "--repeat", "2")
    line = next(ln for ln in res.stdout.splitlines() if ln.split()[:1] == ["cpu"])
    assert "min–max)" in line and "2 runs per row" in res.stdout


# ------------------------------------------------------------------------------------------------ bench compare


def test_compare_of_two_identical_runs_is_within_noise_in_table_json_and_chart(tmp_path):
    copy = tmp_path / "again.json"
    copy.write_text(PEERS_RUN.read_text())
    target = tmp_path / "same.svg"
    res = invoke("compare", str(PEERS_RUN), str(copy), "--plot", str(target))
    assert res.exit_code == 0, res.output
    timed = [r for r in rows(PEERS_RUN) if r["per_face_ms"]]
    table = [ln for ln in res.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in {"yunet-2023mar",
                                                                                        "auraface-arch"}]
    assert sum("within noise (1.00x)" in ln for ln in table) == len(timed)
    assert not any("faster" in ln or "slower" in ln for ln in table)
    data = json.loads(invoke("compare", str(PEERS_RUN), str(copy), "--json").stdout)
    assert all(r["within_noise"] is True for r in data["rows"] if r["speedup"] is not None)
    svg = target.read_text()
    assert svg.count("within noise") == len(timed) + 1  # each row, and the axis label's key
    assert "faster<" not in svg and "slower<" not in svg


def test_compare_chart_shows_ratios_with_their_bands(tmp_path):
    target = tmp_path / "cmp.png"
    res = invoke("compare", str(EARLIER_PEERS_RUN), str(PEERS_RUN), "--plot", str(target))
    assert res.exit_code == 0, res.output
    assert target.read_bytes().startswith(PNG) and 20_000 < target.stat().st_size < 150_000
    svg = drawn(tmp_path / "cmp.svg", "plot", str(EARLIER_PEERS_RUN), str(PEERS_RUN), "--out",
                str(tmp_path / "cmp.svg"))
    data = json.loads(invoke("compare", str(EARLIER_PEERS_RUN), str(PEERS_RUN), "--json").stdout)
    shown = [r for r in data["rows"] if r["speedup"]]
    for r in shown:
        name = f"{r['model']} {r['size']} {r['path']}" + (f" (×{r['batch']})" if r["batch"] > 1 else "")
        assert f">{name}<" in svg, name
        assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"]
    noisy = [r for r in shown if r["within_noise"]]
    apart = [r for r in shown if not r["within_noise"]]
    assert noisy and apart  # that pair of runs has both
    assert svg.count("within noise") == len(noisy) + 1
    assert svg.count(" faster") + svg.count(" slower") >= len(apart)
    assert "parity ✗ in A and B" in svg  # torch-cuda's TF32 rows failed in both runs


# ------------------------------------------------------------------------------------------------ the edges


def test_without_matplotlib_one_line_and_exit_1_before_any_run(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    from facerun.bench import bench

    def no_run(*args, **kwargs):
        raise AssertionError("the benchmark ran although no chart could be drawn")

    monkeypatch.setattr(bench, "run", no_run)
    target = tmp_path / "chart.png"
    for args in (("plot", str(MODELS_RUN), "--out", str(target)),
                 (SMALL, "--paths", "cpu", "--plot", str(target)),
                 ("compare", str(MODELS_RUN), str(MODELS_RUN), "--plot", str(target))):
        res = invoke(*args)
        assert res.exit_code == 1, (args, res.output)
        assert res.stderr.startswith("error: charts need matplotlib") and "facerun[plot]" in res.stderr
        assert res.stderr.count("\n") == 1 and res.stdout == "", res.output
    assert not target.exists()


def test_bad_chart_targets_and_inputs_are_one_line(tmp_path):
    not_run = tmp_path / "other.json"
    not_run.write_text('{"rows": 3}')
    for args, words in (
        (("plot", str(MODELS_RUN), "--out", str(tmp_path / "chart.jpg")), "written as .png or .svg"),
        (("plot", str(MODELS_RUN), "--out", str(tmp_path / "missing" / "chart.png")), "does not exist"),
        (("plot", str(not_run), "--out", str(tmp_path / "chart.png")), "not a facerun bench result"),
        (("plot", str(MODELS_RUN), str(MODELS_RUN), str(MODELS_RUN), "--out", str(tmp_path / "c.png")),
         "one saved run, or two"),
        ((SMALL, "--paths", "cpu", "--plot", str(tmp_path / "chart.gif")), "written as .png or .svg"),
    ):
        res = invoke(*args)
        assert res.exit_code == 1, (args, res.output)
        assert res.stderr.startswith("error: ") and words in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json"]
