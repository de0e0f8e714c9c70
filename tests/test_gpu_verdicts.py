"""A model's GPU check kept for later processes (gpu/verdicts.py, FACERUN_GPU_CHECK_CACHE): what the kept findings
are filed under, how they merge, and that a later model trusts them (no check, the same faces), checks a kernel
variant they lack, and never keeps a check that failed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from people_fixtures import FACES
from shared_paths import need_photos
from test_gpu_runner import small_net_program

from facerun import counters, cpu
from facerun.face.detect import Detector
from facerun.face.images import load_photo
from facerun.gpu import verdicts
from facerun.gpu.checked import CheckedGpu
from facerun.gpu.model import GpuModel
from facerun.gpu.verdicts import Found, Verdicts, key_of

DEVICE = {"name": "GPU", "backend": "Vulkan", "type": "DiscreteGPU", "vendor": "v", "driver": "1.0",
          "trusted": True, "f16": False}
PARTS = {"precision": "f32", "check_side": 160, "masked": True, "align": 32}


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """The kept checks on, in a cache folder of this test's own."""
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    monkeypatch.setenv("FACERUN_GPU_CHECK_CACHE", "on")
    return tmp_path / verdicts.FOLDER


def test_the_key_changes_with_what_the_findings_depend_on(monkeypatch):
    base = key_of(DEVICE, "model", PARTS, environ={})
    changed = [
        key_of({**DEVICE, "driver": "1.1"}, "model", PARTS, environ={}),
        key_of({**DEVICE, "trusted": False}, "model", PARTS, environ={}),
        key_of(DEVICE, "other model", PARTS, environ={}),
        key_of(DEVICE, "model", {**PARTS, "precision": "f16"}, environ={}),
        key_of(DEVICE, "model", PARTS, environ={"FACERUN_GPU_SEPARABLE": "off"}),
        key_of(DEVICE, "model", PARTS, environ={"FACERUN_PHOTO_BUCKET": "256"}),
    ]
    assert len({base, *changed}) == len(changed) + 1
    # where files are and how photos are decoded change nothing the GPU or the CPU computes
    assert key_of(DEVICE, "model", PARTS, environ={"FACERUN_MODELS": "/m", "FACERUN_DECODERS": "processes",
                                                   "FACERUN_GPU_CHECK_CACHE": "on", "OTHER": "x"}) == base
    assert verdicts.code_fingerprint() == verdicts.code_fingerprint() and len(verdicts.code_fingerprint()) == 64
    monkeypatch.setattr(verdicts, "code_fingerprint", lambda: "another facerun")
    assert key_of(DEVICE, "model", PARTS, environ={}) != base


def test_kept_findings_merge_and_unreadable_files_count_as_none(tmp_path, monkeypatch):
    path = tmp_path / "v.json"
    v = Verdicts(path)
    assert v.load() is None
    v.keep(Found(frozenset({"a"}), frozenset({"masks_agree"})))
    v.keep(Found(frozenset({"b"}), frozenset({"image_layout"})))  # a later process's variants and first photo
    assert v.load() == Found(frozenset({"a", "b"}), frozenset({"masks_agree", "image_layout"}))
    F = verdicts.FORMAT
    for text in ("not json", json.dumps({"format": 99, "verified": ["a"], "held": []}), json.dumps({"format": F}),
                 json.dumps({"format": F, "verified": [], "held": []}), json.dumps({"format": F, "verified": ["a"]}),
                 json.dumps([1])):
        path.write_text(text)
        assert v.load() is None, text
    off = Verdicts(None)
    off.keep(Found(frozenset({"a"})))
    assert off.load() is None
    monkeypatch.setenv("FACERUN_GPU_CHECK_CACHE", "off")
    assert Verdicts.for_model(DEVICE, "model", PARTS).path is None
    monkeypatch.setenv("FACERUN_GPU_CHECK_CACHE", "on")
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    assert Verdicts.for_model(DEVICE, "model", PARTS).path.parent == tmp_path / verdicts.FOLDER


def _faces(detector, rgb):
    return [(round(float(f.score), 5), tuple(round(float(v), 3) for v in f.box)) for f in detector.detect(rgb)]


@need_photos
def test_a_later_detector_trusts_the_kept_check_and_finds_the_same_faces(gpu, kept, monkeypatch):
    from facerun.face import yunet

    blobs = []  # the CPU-made blobs the first photo's layout check makes (yunet.make_blob)
    make_blob = yunet.make_blob
    monkeypatch.setattr(yunet, "make_blob", lambda rgb: blobs.append(rgb.shape) or make_blob(rgb))
    rgb, _ = load_photo(sorted((FACES / "group").glob("*.jpg"))[0])
    rgb = np.ascontiguousarray(rgb[:, :, :3])
    before = counters.snapshot()
    first = Detector(device="gpu")
    want = _faces(first, rgb)
    paid = counters.since(before)
    assert paid.get("gpu_checks") == 1 and not paid.get("gpu_checks_kept") and want and blobs
    files = list(kept.glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    verified = set(data["verified"])
    # the seeded check's variants and masked photo, and what the first photo showed: its layout on the device
    assert first.net.gpu.verified == verified
    assert set(data["held"]) == {"masks_agree", "image_layout"}

    blobs.clear()
    before = counters.snapshot()
    later = Detector(device="gpu")
    assert _faces(later, rgb) == want
    paid = counters.since(before)
    assert not paid.get("gpu_checks") and paid.get("gpu_checks_kept") == 1 and not paid.get("gpu_layer_checks")
    assert later.net.gpu is not None and later.net.gpu.masks_agree is True
    assert not blobs  # its first photo ran once, from its bytes

    # a kernel variant the kept check lacks is checked on its layer, and kept
    tiled = sorted(k for k in verified if k.startswith("conv_tiled"))[0]
    files[0].write_text(json.dumps({"format": verdicts.FORMAT, "verified": sorted(verified - {tiled}),
                                    "held": data["held"]}))
    before = counters.snapshot()
    again = Detector(device="gpu")
    assert _faces(again, rgb) == want
    paid = counters.since(before)
    assert not paid.get("gpu_checks") and paid.get("gpu_layer_checks", 0) >= 1
    assert tiled in json.loads(files[0].read_text())["verified"]

    # other settings: another file, and a check of its own
    before = counters.snapshot()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FACERUN_GPU_SEPARABLE", "off")
        assert _faces(Detector(device="gpu"), rgb) == want
    assert counters.since(before).get("gpu_checks") == 1 and len(list(kept.glob("*.json"))) == 2


def test_a_failed_check_is_not_kept_and_a_passed_one_is_trusted(gpu, tmp_path):
    prog = small_net_program(batch=1)
    x = {"image": np.ones(prog.input_shape, np.float32)}

    def wrong_cpu(p, feeds):
        return {k: v + 1.0 for k, v in cpu.run_program(p, feeds).items()}

    path = tmp_path / "v.json"
    failed = CheckedGpu(GpuModel(dev=gpu), cpu_run=wrong_cpu, verdicts=Verdicts(path))
    assert failed.run(prog, x) is None and "disagrees" in failed.reason
    assert not path.exists()
    passed = CheckedGpu(GpuModel(dev=gpu), verdicts=Verdicts(path))
    want = passed.run(prog, x)
    assert want is not None and Verdicts(path).load().verified == passed.verified
    # the kept check is trusted: the CPU is not asked again (its wrong answer is not met)
    before = counters.snapshot()
    trusting = CheckedGpu(GpuModel(dev=gpu), cpu_run=wrong_cpu, verdicts=Verdicts(path))
    got = trusting.run(prog, x)
    assert got is not None and trusting.reason is None
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert counters.since(before).get("gpu_checks_kept") == 1


@need_photos
def test_bench_photos_counts_a_kept_check(gpu, kept, tmp_path):
    from click.testing import CliRunner

    from facerun.cli import main

    folder = tmp_path / "photos"
    folder.mkdir()
    for path in sorted((FACES / "Anthony_Hopkins").glob("*.jpg"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    args = ["--allow-software", "bench", "photos", str(folder), "--paths", "gpu"]
    first = CliRunner().invoke(main, args + ["--json"])  # a process of its own would find the same: kept on disk
    assert first.exit_code == 0, first.output
    row = json.loads(first.stdout)["rows"][0]
    assert row["gpu_whole_checks"] == 1 and row["gpu_checks_kept"] == 0 and row["faces"] > 0
    later = CliRunner().invoke(main, args)
    assert later.exit_code == 0, later.output
    assert "0 (1 kept)" in later.stdout
    listed = CliRunner().invoke(main, ["adapter", "--allow-software", "--json"])
    assert json.loads(listed.stdout)["kept_checks"] == {"folder": str(kept), "files": 1, "used": True}
    assert "models' GPU checks kept: 1 in" in CliRunner().invoke(main, ["adapter", "--allow-software"]).stdout
