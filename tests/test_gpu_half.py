"""--precision f16: Winograd's transformed inputs, weights and products stored as half floats on the GPU (sums in
float32), the rest in float32; used only after the model's check against the CPU, at its own bar."""

from __future__ import annotations

import numpy as np
import pytest

import facerun
from facerun import agree
from facerun.agree import seeded_input
from facerun.errors import InputError

pytestmark = pytest.mark.gpu

MODEL = "auraface-arch-small"  # an IResNet replica: 3x3 layers at stride 1 (F(2x2) and, at batch 16, F(4x4))


def _rows_cosine(a, b):
    a, b = a.reshape(a.shape[0], -1).astype(np.float64), b.reshape(b.shape[0], -1).astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_half_floats_store_winograds_planes_and_the_embeddings_stay_the_cpus(gpu):
    if not gpu.has_f16:
        pytest.skip(f"{gpu.label} has no shader-f16")
    half, full = facerun.load(MODEL, device="gpu", precision="f16"), facerun.load(MODEL, device="gpu")
    x = np.concatenate([seeded_input(half.default_shape(1), 20 + i) for i in range(16)])
    got, f32, want = half.run_batch(x), full.run_batch(x), half.run(x, device="cpu")
    assert half.gpu.reason is None and half.gpu.tolerance is agree.GPU_F16_CHECK
    gp = half.gpu.model.compile(half.program(half.default_shape(16)))
    ref = full.gpu.model.compile(full.program(full.default_shape(16)))
    # every Winograd layer (both forms) runs the half-float kernels, and nothing else does
    forms = {d.plan.m for d in gp.dispatches if d.plan is not None and d.plan.kernel == "winograd"}
    assert forms == {2, 4}
    for d in gp.dispatches:
        if d.plan is None or d.plan.kernel != "winograd":
            assert not d.kernel.half, d.kernel.key
        elif d.kernel.entry == "input" or d.kernel.stem == "conv_tiled":  # the planes, the products
            assert d.kernel.half, d.kernel.key
        elif d.kernel.entry == "output":  # products read as f16 unless a split summed them in f32
            assert d.kernel.half == (not d.plan.gemm.partial), d.kernel.key
        else:  # a split's reduce pass
            assert not d.kernel.half, d.kernel.key
    assert {d.kernel.key for d in gp.dispatches if d.kernel.half} <= half.gpu.verified  # checked before use
    # the planes take half the bytes: the program's buffers are smaller than the f32 one's
    assert sum(gp.slots.sizes) < 0.8 * sum(ref.slots.sizes)
    for name in want:
        cos = _rows_cosine(got[name], want[name])
        assert cos.min() >= agree.MIN_COSINE_F16, (name, cos.min())
        # really rounded to half floats: further from the CPU than the f32 GPU run is
        err = np.abs(got[name] - want[name]).max()
        assert err > 10 * np.abs(f32[name] - want[name]).max()
        assert err <= agree.GPU_F16_TOLERANCE * np.ptp(want[name])


def test_the_half_float_check_still_catches_a_wrong_transform(gpu, monkeypatch):
    import facerun.gpu.lower as lower
    from facerun.gpu import memory
    from facerun.gpu.checked import Disagreement

    if not gpu.has_f16:
        pytest.skip(f"{gpu.label} has no shader-f16")
    real = memory.winograd_weights
    monkeypatch.setattr(lower, "winograd_weights", lambda w, m: real(w, m) * np.float32(1.05))  # 5% off
    x = seeded_input(facerun.load(MODEL).default_shape(1), 3)
    with pytest.raises(Disagreement, match="disagrees"):
        facerun.load(MODEL, device="gpu", precision="f16").run(x)


def test_precision_is_checked_before_loading():
    with pytest.raises(InputError, match="unknown precision 'f8'"):
        facerun.load(MODEL, device="auto", precision="f8")
    with pytest.raises(InputError, match="for the GPU"):
        facerun.load(MODEL, device="cpu", precision="f16")


def test_embed_takes_precision_for_the_gpu_only(tmp_path, gpu):
    import json

    from click.testing import CliRunner
    from people_fixtures import FACES, need_real_data

    from facerun.cli import main as cli

    need_real_data()
    photo = FACES / "group" / "openface_longoria-cooper.jpg"
    bad = CliRunner().invoke(cli, ["embed", str(photo), "--model", MODEL, "--device", "cpu", "--precision", "f16"])
    assert bad.exit_code == 1 and "for the local GPU" in bad.output and "Traceback" not in bad.output
    if not gpu.has_f16:
        pytest.skip(f"{gpu.label} has no shader-f16")
    runs = {p: CliRunner().invoke(cli, ["embed", str(photo), "--model", MODEL, "--device", "gpu", "--precision", p,
                                        "--json"]) for p in ("f32", "f16")}
    assert all(r.exit_code == 0 for r in runs.values()), {p: r.output[-400:] for p, r in runs.items()}
    half, full = (np.array(json.loads(runs[p].stdout)[0]["embedding"]) for p in ("f16", "f32"))
    assert float(half @ full) >= agree.MIN_COSINE_F16 and not np.array_equal(half, full)


def test_bench_gives_the_half_float_rows_their_own_lines(gpu):
    from facerun.bench import bench

    if not gpu.has_f16:
        pytest.skip(f"{gpu.label} has no shader-f16")
    settings = bench.Settings(paths=("cpu", "gpu", "gpu-f16", "gpu-batch-f16"), batch=2, repeat=2, budget=0.0,
                              allow_software=True)
    result = bench.run(bench.discover([MODEL]), settings)
    rows = {r.path: r for r in result.rows}
    assert set(rows) == {"cpu", "gpu", "gpu-f16", "gpu-batch-f16"}
    for path in ("gpu-f16", "gpu-batch-f16"):
        assert rows[path].ok is True and rows[path].median_ms > 0, (path, rows[path].note)
        assert agree.MIN_COSINE_F16 <= rows[path].cosine_vs_cpu < 1.0 - 1e-9  # judged, and not the f32 run
    assert rows["gpu-batch-f16"].batch == 2
