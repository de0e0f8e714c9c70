"""The benchmark's roofline: the FLOP and bytes counted from a step program (by hand on one 3x3 convolution), the
fractions of the peaks, the device probe (positive finite figures on the adapter there is, cached per adapter and
read back without probing again), and `bench models --roofline --by-kernel` (families whose times add up to the
pass, the peaks named in the table's header and in the JSON's device.peaks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from facerun import counters
from facerun import program as P
from facerun.bench import bench, roofline
from facerun.cli import main

from gpu_fixtures import Builder


def one_conv() -> P.Program:
    """A 3x3 convolution, 3 -> 4 channels on 8x8, padded to keep the size, with a bias."""
    b = Builder()
    x = b.input("x", (1, 3, 8, 8))
    rng = np.random.default_rng(0)
    y = b.step(P.Conv, (1, 4, 8, 8), x=x, weight=rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
               bias=np.zeros(4, np.float32), groups=1, stride=(1, 1), dilation=(1, 1), pads=(1, 1, 1, 1))
    return b.program(y)


class _Net:
    """What run_bytes asks of a Net: its program of a shape, and whether the program takes batches."""

    def __init__(self, prog, batch_free):
        self.prog, self.batch_free = prog, batch_free

    def program(self, shape):
        assert tuple(shape) == self.prog.input_shape
        return self.prog


def test_one_convolution_is_counted_as_by_hand():
    prog = one_conv()
    # every output value: 3 x 3 x 3 multiply-accumulates
    assert prog.macs == 4 * 8 * 8 * 27
    act, params = roofline.program_bytes(prog)
    assert act == (3 * 64 + 4 * 64) * 4  # the input read once, the output written once
    assert params == (4 * 27 + 4) * 4  # the weights and the bias, read once
    batch_free, fixed = _Net(prog, True), _Net(prog, False)
    assert roofline.run_bytes(batch_free, prog.input_shape, 1) == act + params
    assert roofline.run_bytes(batch_free, prog.input_shape, 16) == 16 * act + params  # weights once a batch
    assert roofline.run_bytes(fixed, prog.input_shape, 16) == 16 * (act + params)  # item by item


def test_a_constant_operand_counts_as_a_parameter_and_a_view_moves_nothing():
    b = Builder()
    x = b.input("x", (1, 2, 4, 4))
    c = b.const("c", np.ones((1, 2, 1, 1)))
    v = b.view(x, (1, 2, 16))
    y = b.step(P.Binary, (1, 2, 16), a=v, b=b.view(c, (1, 2, 1)), kind="add")
    prog = b.program(y)
    assert roofline.program_bytes(prog) == (2 * 32 * 4, 2 * 4)  # x's 32 values read, 32 written; c's 2 values
    z = b.step(P.Binary, (1, 2, 4, 4), a=x, b=c, kind="mul")
    prog = b.program(z)
    assert roofline.step_bytes(prog, prog.steps[-1]) == (2 * 32 * 4, 2 * 4)


def test_fractions_of_the_peaks():
    peaks = {"fma_tflops": 10.0, "bandwidth_gbps": 1000.0}
    gpu = bench.Row("m", "8x8", "gpu-batch", 4, "embedder", median_ms=2.0, macs=10**9, bytes_per_run=10**8)
    cpu = bench.Row("m", "8x8", "cpu", 1, "embedder", median_ms=2.0, macs=10**9, bytes_per_run=10**8)
    skipped = bench.Row("m", "8x8", "gpu", 1, "embedder", macs=10**9, bytes_per_run=10**8)
    roofline.annotate([gpu, cpu, skipped], peaks)
    assert gpu.tflops == pytest.approx(4.0) and gpu.of_fma_peak == pytest.approx(0.4)  # 2 x 1e9 x 4 in 2 ms
    assert gpu.gbps == pytest.approx(50.0) and gpu.of_bandwidth_peak == pytest.approx(0.05)
    assert cpu.tflops == pytest.approx(1.0) and cpu.of_fma_peak is None and cpu.of_bandwidth_peak is None
    assert skipped.tflops is None and skipped.of_fma_peak is None
    assert roofline.roofline_cell(gpu) == "40% fma · 5.0% bw" and roofline.roofline_cell(cpu) == "—"
    # the ridge is 10 FLOP per byte: past it the work is bound by arithmetic, before it by memory
    assert roofline.bound(1e12, 1e9, peaks) == "compute" and roofline.limit_seconds(1e12, 1e9, peaks) == 0.1
    assert roofline.bound(1e9, 1e9, peaks) == "memory" and roofline.limit_seconds(1e9, 1e9, peaks) == 0.001


def test_the_probe_measures_once_per_adapter_and_reads_the_cache_after(gpu, tmp_path, monkeypatch):
    from facerun.gpu import probe

    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    adapter = {"name": gpu.name, "driver": "test driver", "backend": gpu.backend}
    before = counters.snapshot()
    first = probe.peaks(gpu, adapter)
    ran = counters.since(before)
    assert ran.get("device_probes") == 1 and ran.get("device_probe_dispatches", 0) > 0
    for v in (first.fma_tflops, first.bandwidth_gbps, first.ridge):
        assert math.isfinite(v) and v > 0
    assert (first.f16_tflops is not None) == gpu.has_f16
    if gpu.has_f16:
        assert math.isfinite(first.f16_tflops) and first.f16_tflops > 0
    saved = json.loads((tmp_path / probe.CACHE_FILE).read_text())
    assert list(saved["adapters"]) == [probe.adapter_key(adapter)]

    before = counters.snapshot()
    again = probe.peaks(gpu, adapter)
    assert "device_probes" not in counters.since(before) and "device_probe_dispatches" not in counters.since(before)
    assert again.to_json() == first.to_json()
    # another adapter (another driver) is probed for itself; --reprobe measures again
    other = dict(adapter, driver="another driver")
    before = counters.snapshot()
    probe.peaks(gpu, other)
    probe.peaks(gpu, adapter, reprobe=True)
    assert counters.since(before).get("device_probes") == 2
    assert len(json.loads((tmp_path / probe.CACHE_FILE).read_text())["adapters"]) == 2


def test_a_damaged_cache_is_probed_again(gpu, tmp_path, monkeypatch):
    from facerun.gpu import probe

    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    (tmp_path / probe.CACHE_FILE).write_text("{not json")
    before = counters.snapshot()
    peaks = probe.peaks(gpu, {"name": gpu.name, "driver": "d", "backend": gpu.backend})
    assert counters.since(before).get("device_probes") == 1 and peaks.fma_tflops > 0
    assert json.loads((tmp_path / probe.CACHE_FILE).read_text())["format"] == probe.FORMAT


def _bench(*args):
    return CliRunner().invoke(main, ["bench", "models", "yunet-2023mar", "--sizes", "160x128", "--paths", "cpu,gpu",
                                     "--repeat", "2", "--warmup", "1", *args], catch_exceptions=False)


def test_bench_by_kernel_shares_add_up_and_the_peaks_head_the_table(gpu, models_dir):
    res = _bench("--by-kernel", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    peaks = data["device"]["peaks"]
    assert peaks["fma_tflops"] > 0 and peaks["bandwidth_gbps"] > 0 and peaks["adapter"]["name"] == gpu.name
    rows = {r["path"]: r for r in data["rows"]}
    cpu_row, gpu_row = rows["cpu"], rows["gpu"]
    assert gpu_row["ok"] is True and gpu_row["bytes_per_run"] == cpu_row["bytes_per_run"] > 0
    assert gpu_row["tflops"] == pytest.approx(2 * gpu_row["macs"] / gpu_row["median_ms"] / 1e9)
    assert gpu_row["of_fma_peak"] == pytest.approx(gpu_row["tflops"] / peaks["fma_tflops"])
    assert gpu_row["of_bandwidth_peak"] == pytest.approx(gpu_row["gbps"] / peaks["bandwidth_gbps"])
    assert cpu_row["tflops"] > 0 and cpu_row["of_fma_peak"] is None  # no CPU peak
    # the program alone on the device: no more than the whole run (which also uploads and reads back), and the time
    # at the peaks over it
    assert 0 < gpu_row["device_ms"] <= 1.5 * gpu_row["median_ms"] and cpu_row["device_ms"] is None
    limit_s = max(2 * gpu_row["macs"] / (peaks["fma_tflops"] * 1e12),
                  gpu_row["bytes_per_run"] / (peaks["bandwidth_gbps"] * 1e9))
    assert gpu_row["device_of_limit"] == pytest.approx(limit_s / (gpu_row["device_ms"] / 1e3))
    [k] = data["kernels"]
    assert (k["path"], k["batch"]) == ("gpu", 1)
    families = {f["family"]: f for f in k["families"]}
    assert {"separable", "tiled im2col"} <= set(families)  # its 1x1s with their depthwise 3x3s; its stem
    assert sum(f["dispatches"] for f in families.values()) == k["dispatches"]
    # each family timed alone: together they take about the whole pass (dispatches run one after another); timed on
    # a shared machine, so only a gross miscount (a family twice, or one missing) is held against it
    assert 0.5 <= sum(f["share"] for f in families.values()) <= 2.0
    for f in families.values():
        assert f["bound"] in ("compute", "memory") and 0 < f["of_limit"] < 1.5
    # the convolutions' FLOP are the program's, all of them
    assert sum(f["gflop"] for f in families.values()) * 1e9 == pytest.approx(2 * gpu_row["macs"])

    text = _bench("--roofline")
    assert text.exit_code == 0, text.output
    head = next(ln for ln in text.stdout.splitlines() if ln.startswith("device peaks"))
    assert f"fma {peaks['fma_tflops']:.3g} TFLOP/s" in head  # the cached figures: not probed again
    assert f"copy bandwidth {peaks['bandwidth_gbps']:.4g} GB/s" in head
    assert "TFLOP/s" in text.stdout and " fma · " in text.stdout and "device ms" in text.stdout
    assert " of limit)" in text.stdout
    assert not [ln for ln in _bench().stdout.splitlines() if " fma · " in ln]  # the columns only when asked
