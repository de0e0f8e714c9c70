"""`facerun bench`: the table and its JSON, parity marking, unavailable paths, model discovery, saved-run comparison.

Timings themselves are never asserted (this machine is shared); only that they exist, are positive and hang together.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from shared_paths import MODELS

import facerun
from facerun import cpu
from facerun import net as net_module
from facerun.bench import bench
from facerun.cli import main
from facerun.commands.bench_table import factor, faster_or_slower
from facerun.runner import CpuRunner

SMALL = "sface-arch-small"


def invoke(*args):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


def bench_json(*args):
    res = invoke(*args, "--json")
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout), res


def has_onnxruntime() -> bool:
    from facerun.bench import oracle

    return oracle.available()


# ------------------------------------------------------------------------------------- a fake GPU for injection


class PerturbingGpu:
    """Stands in for net.gpu (a runner.Runner, and CheckedGpu's conv_hook / program_reasons): computes on the CPU,
    then adds noise of `scale` x each output's spread to the paths listed in `wrong`."""

    device_name = "test device (perturbing)"
    reason = None  # why dropped, as CheckedGpu.reason

    @property
    def device(self):
        return "cpu" if self.reason else self.device_name

    def __init__(self, wrong=("gpu",), scale=0.05):
        self.wrong, self.scale = set(wrong), scale
        self.program_reasons = {}
        self.rng = np.random.default_rng(1)
        self.lose_device = False  # True: the first run drops the GPU, as a device error does

    def _spoil(self, outs):
        return {k: (v + self.scale * (float(v.std()) or 1.0) * self.rng.standard_normal(v.shape)).astype(np.float32)
                for k, v in outs.items()}

    def run(self, prog, feeds):
        if self.lose_device:
            self.reason = "device lost (test)"
            return None
        outs = cpu.run_program(prog, feeds)
        batched = prog.input_shape[0] > 1
        return self._spoil(outs) if ("gpu-batch" if batched else "gpu") in self.wrong else outs

    def run_many(self, prog, feeds_list):
        return [self.run(prog, f) for f in feeds_list]

    def run_photo(self, prog, rgb, layout, photo=None):
        return None  # photos go up as blobs: through run

    def takes_photos(self):
        return False

    def masks_photos(self):
        return False

    def prepare(self, prog):
        pass

    def stage_photo(self, rgb):
        return rgb

    def forget(self, prog):
        pass

    def conv_hook(self, prog=None):
        def hook(step, args):
            if "gpu-per-conv" not in self.wrong:
                return None
            y = cpu.run_step(step, args, prog.values[step.out].shape)
            return y * np.float32(1.0 + self.scale * 4)  # every convolution off by 20%

        return hook


@pytest.fixture
def fake_gpu(monkeypatch):
    """Every model bench loads gets a PerturbingGpu (configure `.wrong` before invoking)."""
    gpu = PerturbingGpu()
    for device in ("gpu", "auto"):
        monkeypatch.setitem(net_module.RUNNERS, device, lambda workload, required, precision: gpu)
    return gpu


# ------------------------------------------------------------------------------------------------------ tests


def test_json_rows_per_path_with_timings_and_parity():
    data, res = bench_json(SMALL, "--repeat", "3", "--warmup", "1")
    assert {"machine", "device", "rows"} <= set(data)
    m = data["machine"]
    assert m["cores"] >= 1 and m["numpy"] == np.__version__ and m["blas"]["name"]
    assert data["device"].get("name") or data["device"].get("reason")
    rows = data["rows"]
    assert [r["path"] for r in rows] == list(bench.DEFAULT_PATHS)  # an embedder gets every default path
    assert all(r["model"] == SMALL and r["size"] == "112x112" for r in rows)
    by_path = {r["path"]: r for r in rows}
    assert by_path["gpu-batch"]["batch"] == 16 and by_path["cpu"]["batch"] == 1
    c = by_path["cpu"]
    assert c["speedup_vs_cpu"] == 1.0 and c["ok"] is True
    assert 0 < c["p10_ms"] <= c["median_ms"] <= c["p90_ms"] and c["per_face_ms"] == c["median_ms"]
    for r in rows:
        if r["median_ms"] is None:
            assert r["note"], f"a skipped row must say why: {r}"
            continue
        assert r["median_ms"] > 0 and r["runs"] == 3
        assert r["per_face_ms"] == pytest.approx(r["median_ms"] / r["batch"])
        assert r["speedup_vs_cpu"] == pytest.approx(c["median_ms"] / r["per_face_ms"])
        if r["path"] != "cpu":
            assert r["ok"] is True and r["cosine_vs_cpu"] >= bench.MIN_COSINE, r
    if has_onnxruntime():
        assert by_path["onnxruntime"]["median_ms"] is not None
    else:
        assert "onnxruntime" in by_path["onnxruntime"]["note"]
    assert res.exit_code == 0


def test_gpu_rows_say_why_when_there_is_no_gpu(monkeypatch):
    def no_gpu(workload, required, precision):
        return CpuRunner(reason="no adapter: none found by this test")

    for device in ("gpu", "auto"):
        monkeypatch.setitem(net_module.RUNNERS, device, no_gpu)
    data, res = bench_json(SMALL, "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu-per-conv,gpu,gpu-batch")
    gpu_rows = [r for r in data["rows"] if r["path"].startswith("gpu")]
    assert [r["path"] for r in gpu_rows] == ["gpu-per-conv", "gpu", "gpu-batch"]
    for r in gpu_rows:
        assert r["median_ms"] is None and r["ok"] is None
        assert "no adapter: none found by this test" in r["note"]
    assert data["device"]["used"] is False
    assert res.exit_code == 0  # unavailable is not a failure

    text = invoke(SMALL, "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu").stdout
    assert "skipped [1]" in text and "[1] no GPU: no adapter: none found by this test" in text


def test_a_wrong_gpu_result_is_marked_failed(fake_gpu):
    fake_gpu.wrong = {"gpu", "gpu-per-conv"}  # gpu-batch stays right: only the spoilt rows may fail
    data, res = bench_json(SMALL, "--repeat", "1", "--warmup", "0", "--batch", "3",
                           "--paths", "cpu,gpu-per-conv,gpu,gpu-batch")
    assert res.exit_code == 1
    by_path = {r["path"]: r for r in data["rows"]}
    assert by_path["gpu"]["ok"] is False and by_path["gpu"]["cosine_vs_cpu"] < bench.MIN_COSINE
    assert by_path["gpu-per-conv"]["ok"] is False
    assert by_path["gpu-batch"]["ok"] is True and by_path["gpu-batch"]["cosine_vs_cpu"] > 0.99999
    assert data["device"]["used"] is True

    res = invoke(SMALL, "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu,gpu-batch", "--batch", "2")
    assert res.exit_code == 1
    lines = {ln.split()[2]: ln for ln in res.stdout.splitlines() if ln.split()[:1] == [SMALL]}
    assert "✗ FAIL" in lines["gpu"] and "✗ FAIL" not in lines["gpu-batch"] and "✗ FAIL" not in lines["cpu"]
    assert "parity fails on 1 row(s)" in res.stderr
    # the mark is red where colour is shown
    row = bench.Row(SMALL, "112x112", "gpu", 1, "embedder", median_ms=1.0, cosine_vs_cpu=0.9, ok=False)
    from facerun.commands.bench_models import _parity_cell

    assert _parity_cell(row).startswith("[bold red]")


def test_detector_parity_uses_max_abs_with_the_gpu_tolerance(fake_gpu):
    # a detector on the fake GPU: 5% noise fails; 1e-5 of the spread passes the GPU's 1e-3 tolerance
    fake_gpu.wrong = {"gpu"}
    data, _ = bench_json("yunet-arch", "--sizes", "64x64", "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu")
    gpu_row = data["rows"][1]
    assert gpu_row["kind"] == "detector" and gpu_row["ok"] is False and gpu_row["max_abs_vs_cpu"] > 0
    fake_gpu.scale = 1e-5
    data, res = bench_json("yunet-arch", "--sizes", "64x64", "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu")
    assert data["rows"][1]["ok"] is True and data["rows"][1]["max_abs_vs_cpu"] > 0 and res.exit_code == 0


def test_a_gpu_dropped_during_the_run_is_a_failed_row_not_a_cpu_timing(fake_gpu):
    fake_gpu.lose_device = True
    data, res = bench_json(SMALL, "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu")
    row = data["rows"][1]
    assert row["path"] == "gpu" and row["median_ms"] is None and row["ok"] is False
    assert "device lost (test)" in row["note"]
    assert res.exit_code == 1


@pytest.mark.skipif(not has_onnxruntime(), reason="onnxruntime not installed")
def test_a_wrong_onnxruntime_result_is_marked_failed(monkeypatch):
    from facerun.bench import oracle

    real_run = oracle.run
    monkeypatch.setattr(oracle, "run", lambda sess, feeds: {k: v * 1.1 + 0.5 for k, v in real_run(sess, feeds).items()})
    data, res = bench_json("yunet-arch", "--sizes", "64x64", "--repeat", "1", "--warmup", "0",
                           "--paths", "cpu,onnxruntime")
    row = data["rows"][1]
    assert row["path"] == "onnxruntime" and row["ok"] is False and row["max_abs_vs_cpu"] >= 0.5
    assert res.exit_code == 1


def test_models_folder_gives_a_row_per_model_and_path(tmp_path):
    if not (MODELS / "face_detection_yunet_2023mar.onnx").exists():
        pytest.skip(f"real models not found in {MODELS}")
    # the three models this test was written for; shared/ grows with other families
    for name in ("face_detection_yunet_2023mar.onnx", "face_detection_yunet_2022mar.onnx", "MobileFaceNet.onnx"):
        (tmp_path / name).symlink_to(MODELS / name)
    data, res = bench_json("--models", str(tmp_path), "--sizes", "160x128", "--repeat", "2", "--warmup", "0",
                           "--batch", "2", "--budget", "1")
    rows = data["rows"]
    files = sorted(p for p in tmp_path.glob("*.onnx"))
    from facerun.zoo.known import by_sha256, sha256_of

    expected = {by_sha256(sha256_of(p)).name: by_sha256(sha256_of(p)).kind for p in files}
    assert {r["model"] for r in rows} == set(expected)
    for name, kind in expected.items():
        mine = [r for r in rows if r["model"] == name]
        want = [p for p in bench.DEFAULT_PATHS if kind == "embedder" or p not in bench.BATCH_PATHS]
        assert [r["path"] for r in mine] == want, name
        assert all(r["kind"] == kind for r in mine)
        assert all(r["size"] == ("160x128" if kind == "detector" else "112x112") for r in mine)
        for r in mine:
            if r["median_ms"] is None:
                assert r["note"]
                continue
            assert r["ok"] is True, r
            if r["path"] != "cpu":
                assert r["max_abs_vs_cpu"] is not None and r["cosine_vs_cpu"] is not None
    assert res.exit_code == 0


def test_models_are_recognised_by_graph_shape_when_unknown(tmp_path):
    if not (MODELS / "MobileFaceNet.onnx").exists():
        pytest.skip(f"real models not found in {MODELS}")
    for name, kind in (("MobileFaceNet.onnx", "embedder"), ("face_detection_yunet_2023mar.onnx", "detector"),
                       ("face_detection_yunet_2022mar.onnx", "detector")):
        m = onnx.load(str(MODELS / name))
        m.doc_string = "re-saved so its sha256 is unknown"
        path = tmp_path / name
        onnx.save(m, str(path))
        (spec,) = bench.discover([str(path)])
        assert spec.label == path.stem
        assert bench.classify(facerun.load(spec.source)) == kind, name


def test_compare_two_saved_runs(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    ra = invoke(SMALL, "--paths", "cpu,cpu-batch", "--batch", "2", "--repeat", "3", "--warmup", "0", "--save", str(a))
    rb = invoke(SMALL, "--paths", "cpu", "--repeat", "3", "--warmup", "0", "--save", str(b))
    assert ra.exit_code == rb.exit_code == 0
    saved_a, saved_b = json.loads(a.read_text()), json.loads(b.read_text())
    assert [r["path"] for r in saved_a["rows"]] == ["cpu", "cpu-batch"]

    res = invoke("--compare", str(a), str(b))
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert f"A: {a}" in text and f"B: {b}" in text and "numpy" in text and "device:" in text
    want = saved_a["rows"][0]["per_face_ms"] / saved_b["rows"][0]["per_face_ms"]
    cpu_line = next(ln for ln in text.splitlines() if ln.split()[:3] == [SMALL, "112x112", "cpu"])
    res = invoke("--compare", str(a), str(b), "--json")
    data = json.loads(res.stdout)
    assert data["a"]["machine"] == saved_a["machine"]
    by_path = {r["path"]: r for r in data["rows"]}
    # B against A in words, or "within noise" where the runs' own p10-p90 spreads overlap
    a_cpu, b_cpu = saved_a["rows"][0], saved_b["rows"][0]
    overlap = a_cpu["p10_ms"] <= b_cpu["p90_ms"] and b_cpu["p10_ms"] <= a_cpu["p90_ms"]
    assert by_path["cpu"]["within_noise"] is overlap
    assert (f"within noise ({factor(want)})" if overlap else faster_or_slower(want)) in cpu_line
    assert "only in A" in next(ln for ln in text.splitlines() if "cpu-batch" in ln)
    assert by_path["cpu"]["speedup"] == pytest.approx(want)
    assert by_path["cpu-batch"]["found_in"] == "A" and by_path["cpu-batch"]["b_ms"] is None


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path):
    target = tmp_path / "missing" / "out.json"
    for args, words in (
        ((SMALL, "--save", str(target)), "does not exist"),
        ((SMALL, "--paths", "cpu,tpu"), "unknown path tpu"),
        ((SMALL, "--sizes", "640by480"), "--size must look like"),
        (("--models", str(tmp_path)), "no .onnx files"),
        (("no-such-model-anywhere",), "no-such-model-anywhere"),
        (("--compare", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")), "cannot read"),
    ):
        res = invoke(*args)
        assert res.exit_code == 1, (args, res.output)
        assert res.stderr.startswith("error: ") and words in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not target.parent.exists()
    not_bench = tmp_path / "other.json"
    not_bench.write_text('{"rows": 3}')
    res = invoke("--compare", str(not_bench), str(not_bench))
    assert res.exit_code == 1 and "not a facerun bench result" in res.stderr


def test_save_is_atomic_and_loads_back(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("previous contents")
    result = bench.BenchResult({"cpu": "x"}, {"name": None}, {}, [bench.Row("m", "1x1", "cpu", 1, "other")])

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(facerun.InputError, match="No space left"):
        result.save(target)
    assert target.read_text() == "previous contents"  # the old file is untouched, no temp file is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    monkeypatch.undo()
    result.save(target)
    assert bench.load_result(target)["rows"][0]["model"] == "m"


def test_time_runs_honours_repeat_warmup_and_budget():
    calls = []
    times, out = bench.time_runs(lambda: calls.append(1) or len(calls), repeat=5, warmup=2, budget=1e9)
    assert len(times) == 5 and len(calls) == 7 and out == 7
    calls.clear()
    times, _ = bench.time_runs(lambda: calls.append(1), repeat=50, warmup=1, budget=0.0)
    assert len(times) == bench.MIN_RUNS  # the budget is spent at once, yet three runs are timed
    times, _ = bench.time_runs(lambda: None, repeat=2, warmup=0, budget=0.0)
    assert len(times) == 2


def test_warm_up_lasts_at_least_the_given_time():
    calls = []
    start = __import__("time").perf_counter()
    times, _ = bench.time_runs(lambda: calls.append(1), repeat=3, warmup=1, budget=1e9, warmup_seconds=0.05)
    assert len(times) == 3 and len(calls) > 4
    assert __import__("time").perf_counter() - start >= 0.05


def test_warm_up_time_counts_after_the_first_run():
    # the first run of a GPU row compiles and checks the model: it must not use up the time that brings clocks up
    import time

    calls = []

    def fn():
        calls.append(time.perf_counter())
        if len(calls) == 1:
            time.sleep(0.08)

    bench.time_runs(fn, repeat=1, warmup=1, budget=1e9, warmup_seconds=0.05)
    assert calls[-2] - calls[1] >= 0.04  # warm-up runs went on for the time after the slow first one


def test_torch_rows_say_why_when_torch_cannot_run(monkeypatch):
    from facerun.bench import torch_peer

    monkeypatch.setattr(torch_peer, "unavailable", lambda: "torch finds no CUDA device")
    data, res = bench_json(SMALL, "--repeat", "1", "--warmup", "0", "--batch", "2",
                           "--paths", "cpu,torch-cuda,torch-cuda-strict,torch-cuda-batch,torch-cuda-strict-batch")
    rows = {r["path"]: r for r in data["rows"]}
    assert set(rows) == {"cpu", "torch-cuda", "torch-cuda-strict", "torch-cuda-batch", "torch-cuda-strict-batch"}
    for path in bench.TORCH_PATHS:
        assert rows[path]["median_ms"] is None and rows[path]["ok"] is None
        assert rows[path]["note"] == "torch finds no CUDA device"
    assert rows["torch-cuda-batch"]["batch"] == 2
    assert res.exit_code == 0  # unavailable is not a failure


def test_the_photo_paths_run_yunet_from_photos_bytes(gpu):
    from facerun import counters

    yunet = MODELS / "face_detection_yunet_2023mar.onnx"
    if not yunet.exists():
        pytest.skip(f"{yunet} not found (set FACERUN_MODELS)")
    before = counters.snapshot()
    data, _ = bench_json(str(yunet), "sface-arch-small", "--sizes", "96x64", "--paths",
                         "cpu,gpu-photo,gpu-photo-batch", "--batch", "3", "--repeat", "2")
    spent = counters.since(before)
    rows = {(r["model"], r["path"]): r for r in data["rows"]}
    photo = rows[("yunet-2023mar", "gpu-photo")]
    # judged against the CPU on the photo's own blob (the seeded input rounded to whole pixel values)
    assert photo["ok"] is True and photo["median_ms"] > 0 and photo["max_abs_vs_cpu"] < 1e-3
    # three photos in one submission, the first and the last judged against their own blobs' CPU outputs
    batch = rows[("yunet-2023mar", "gpu-photo-batch")]
    assert batch["batch"] == 3 and batch["ok"] is True and batch["max_abs_vs_cpu"] < 1e-3
    # as detect and a library run's batches: each photo's candidate rows read back
    assert spent.get("gpu_photo_batches", 0) > 0 and spent.get("gpu_select_batches", 0) > 0
    assert spent.get("gpu_select_photos", 0) >= 4  # gpu-photo's two rounds of warm-up and its timed runs
    assert spent.get("gpu_photo_batches_split", 0) == 0  # three photos: fewer than FACERUN_PHOTO_SPLIT
    other = next(r for (m, p), r in rows.items() if p == "gpu-photo" and m != "yunet-2023mar")
    assert other["median_ms"] is None and "YuNet" in other["note"]


def test_the_photo_batch_row_runs_batch_programs_as_a_library_run_does(gpu, monkeypatch):
    """gpu-photo-batch loads the model as a library run does (its photo layout), so with FACERUN_PHOTO_ITEMS=on its
    photos run in the bucket's batch program (one pass), judged against the CPU as before; split in two submissions
    (FACERUN_PHOTO_SPLIT=2) with their heads read back whole (FACERUN_PHOTO_SELECT=off) too."""
    from facerun import counters

    yunet = MODELS / "face_detection_yunet_2023mar.onnx"
    if not yunet.exists():
        pytest.skip(f"{yunet} not found (set FACERUN_MODELS)")
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    monkeypatch.setenv("FACERUN_PHOTO_SELECT", "off")  # the heads whole, each judged against the CPU's
    monkeypatch.setenv("FACERUN_PHOTO_SPLIT", "2")
    before = counters.snapshot()
    data, _ = bench_json(str(yunet), "--sizes", "128x128", "--paths", "gpu-photo-batch", "--batch", "3",
                         "--repeat", "2")
    row = next(r for r in data["rows"] if r["path"] == "gpu-photo-batch")
    assert row["ok"] is True and row["max_abs_vs_cpu"] < 1e-3, row
    spent = counters.since(before)
    assert spent.get("gpu_photo_item_batches", 0) > 0 and spent.get("gpu_select_batches", 0) == 0
    assert spent.get("gpu_photo_batches_split", 0) > 0  # 1 + 2 photos, the device idle before each run


def test_the_staged_photo_batch_row_uploads_through_the_staging_pool(gpu, monkeypatch):
    """gpu-photo-staged-batch copies its photos into mapped upload buffers on other threads first (as a library run's
    decoding threads do), and its batch program's outputs are still the CPU's."""
    from facerun import counters

    yunet = MODELS / "face_detection_yunet_2023mar.onnx"
    if not yunet.exists():
        pytest.skip(f"{yunet} not found (set FACERUN_MODELS)")
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    before = counters.snapshot()
    data, _ = bench_json(str(yunet), "--sizes", "128x128", "--paths", "gpu-photo-staged-batch", "--batch", "3",
                         "--repeat", "2")
    row = next(r for r in data["rows"] if r["path"] == "gpu-photo-staged-batch")
    assert row["ok"] is True and row["max_abs_vs_cpu"] < 1e-3, row
    after = counters.snapshot()
    # every timed run stages its 3 photos: at least the three runs a row never goes under
    assert after.get("gpu_photos_staged", 0) - before.get("gpu_photos_staged", 0) >= 9
    assert after.get("gpu_photo_item_batches", 0) > before.get("gpu_photo_item_batches", 0)
    # the staging threads went with the row
    import gc
    import threading
    import time

    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("facerun-bench-stage") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("facerun-bench-stage") for t in threading.enumerate())


# ------------------------------------------------------------------------------------- rows read one way only


def test_rows_say_how_many_times_faster_or_slower_than_the_cpu(capsys):
    from facerun.commands.bench_models import print_result

    saved = bench.load_result(Path(__file__).resolve().parent.parent / "docs" / "bench" / "h200-models.json")
    rows = [bench.Row(**r) for r in saved["rows"]]
    print_result(bench.BenchResult(saved["machine"], saved["device"], saved["settings"], rows, saved["created"]))
    lines = {(ln.split()[0], ln.split()[2]): ln for ln in capsys.readouterr().out.splitlines()
             if len(ln.split()) > 3 and ln.split()[0] in {r.model for r in rows}}
    slower = next(r for r in rows if r.speedup_vs_cpu and r.speedup_vs_cpu < 1)  # mobilefacenet's gpu-per-conv
    faster = next(r for r in rows if r.speedup_vs_cpu and r.speedup_vs_cpu > 2)
    assert f"{1 / slower.speedup_vs_cpu:.2f}x slower than cpu" in lines[(slower.model, slower.path)]
    assert f"{faster.speedup_vs_cpu:.1f}x faster than cpu" in lines[(faster.model, faster.path)]
    assert "reference" in lines[(slower.model, "cpu")]
    # a run saved before the tolerance was kept still names the one its path is held to
    detector_gpu = next(r for r in rows if r.kind == "detector" and r.path == "gpu")
    assert "(tolerance 1e-03 of range)" in lines[(detector_gpu.model, "gpu")]


def test_parity_shows_the_tolerance_it_held_each_row_to(fake_gpu, tmp_path):
    saved = tmp_path / "run.json"

    def gpu_row(model, size, *args):
        """The gpu row of one run: as saved, and its line of the table."""
        res = invoke(model, "--repeat", "1", "--warmup", "0", "--paths", "cpu,gpu", "--save", str(saved), *args)
        line = next(ln for ln in res.stdout.splitlines() if ln.split()[:3] == [model, size, "gpu"])
        return json.loads(saved.read_text())["rows"][1], line

    fake_gpu.wrong = {"gpu"}
    row, line = gpu_row("yunet-arch", "64x64", "--sizes", "64x64")
    assert row["tolerance"] == bench.GPU_TOLERANCE and row["min_cosine"] is None
    assert row["ok"] is False and row["scaled_diff_vs_cpu"] > row["tolerance"]
    assert f"{row['scaled_diff_vs_cpu']:.1e} > 1e-03 ✗ FAIL" in line
    fake_gpu.scale = 1e-6
    row, line = gpu_row("yunet-arch", "64x64", "--sizes", "64x64")
    assert row["ok"] is True and 0 < row["scaled_diff_vs_cpu"] <= row["tolerance"]
    assert f"ok {row['scaled_diff_vs_cpu']:.1e} ≤ 1e-03" in line

    fake_gpu.wrong = set()
    row, line = gpu_row(SMALL, "112x112")
    assert row["min_cosine"] == bench.MIN_COSINE and row["tolerance"] is None and row["scaled_diff_vs_cpu"] is None
    assert f"ok cos {row['cosine_vs_cpu']:.6f} ≥ 0.9999" in line
