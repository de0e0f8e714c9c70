"""Decoding in processes into shared memory (face/decoders.py, LibraryOptions.decoders="processes"): the very
pixels and faces of the decoding threads, per-photo errors as the threads give them, and no shared memory segment
or process left behind after a run, an early close or an exception."""

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
from shared_paths import DATA, HAVE_PHOTOS, need_photos

from facerun.errors import FacerunError, ImageError
from facerun.face import library
from facerun.face.decoders import AUTO_CORES, SLOT_BYTES, DecoderProcesses, choose, fit_of, fit_of_family
from facerun.face.detect import DEFAULT_MAX_SIDE, Detector
from facerun.face.engines import run
from facerun.face.families import family_of
from facerun.face.images import iter_images, load_photo_shrunk
from facerun.face.library import LibraryOptions, LibraryStats

pytestmark = need_photos
PHOTOS = iter_images([DATA]) if HAVE_PHOTOS else []


def _segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()


def _children() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("facerun-decode")]


@pytest.fixture(scope="module")
def detector():
    return Detector(device="cpu")


@pytest.fixture
def truncated(tmp_path) -> Path:
    whole = PHOTOS[0].read_bytes()
    bad = tmp_path / "truncated.jpg"
    bad.write_bytes(whole[: len(whole) // 3])
    return bad


def test_the_processes_decode_every_shared_photo_to_the_threads_very_bytes(detector):
    fit = fit_of(detector)
    assert fit(4000, 3000) == detector.fit_size(4000, 3000) and fit(640, 480) is None
    assert fit_of_family(family_of(detector.model_path))(4000, 3000) == detector.fit_size(4000, 3000)
    before = _segments()
    with DecoderProcesses(2, fit, slots=3) as ring:
        assert ring.name.lstrip("/") not in _segments()  # unlinked once every process had it mapped
        for path in PHOTOS:
            want, want_size = load_photo_shrunk(path, detector.fit_size)
            got, size, slot = ring.decode(path)
            assert slot is not None and got.base is not None  # a view of the shared slot, no copy here
            assert size == want_size and got.shape == want.shape and np.array_equal(got, want), path
            ring.release(slot)
    assert _segments() <= before and not _children()
    assert max(DEFAULT_MAX_SIDE, 1) ** 2 * 4 == SLOT_BYTES


def test_a_photo_too_large_for_a_slot_comes_back_whole():
    # a detector that takes photos at their own size: a large photo does not fit the slots and is sent whole
    big = max(PHOTOS, key=lambda p: p.stat().st_size)
    want, _ = load_photo_shrunk(big, lambda w, h: None)
    with DecoderProcesses(1, fit_of(None), slots=1) as ring:
        got, _, slot = ring.decode(big)
        if want.nbytes > SLOT_BYTES:
            assert slot is None
        assert np.array_equal(got, want)


def test_the_processes_find_the_threads_faces_and_errors(detector, truncated, monkeypatch):
    photos = PHOTOS[:12] + [truncated, truncated.parent / "missing.jpg"] + PHOTOS[12:16]
    results, used = {}, {}
    # the third run names no decoders: FACERUN_DECODERS says processes
    for decoders in ("threads", "processes", None):
        monkeypatch.setenv("FACERUN_DECODERS", "processes" if decoders is None else "threads")
        stats = LibraryStats()
        out = list(run(photos, detector, None, LibraryOptions(workers=1, decoders=decoders, decoder_processes=2),
                       stats=stats))
        assert [r.path for r in out] == photos
        results[decoders] = [(r.error, r.width, r.height, [(f.score, tuple(f.box)) for f in r.faces]) for r in out]
        used[decoders] = stats.decoder_processes
    assert used == {"threads": 0, "processes": 2, None: 2}
    assert results["processes"] == results["threads"] == results[None]
    errors = [e for e, *_ in results["processes"] if e]
    assert len(errors) == 2 and "truncated.jpg" in errors[0] and "no such file" in errors[1]
    assert sum(len(f) for *_, f in results["processes"]) > 0
    with pytest.raises(ImageError, match="truncated.jpg"):
        load_photo_shrunk(truncated, detector.fit_size)


def test_no_segment_or_process_left_after_a_run_an_early_close_or_an_exception(detector, monkeypatch):
    before = _segments()
    options = LibraryOptions(workers=1, decoders="processes", decoder_processes=2)
    list(run(PHOTOS[:4], detector, None, options))
    assert _segments() <= before and not _children()

    results = run(PHOTOS[:20], detector, None, options)
    next(results)
    results.close()  # the consumer stops early
    assert _segments() <= before and not _children()

    real = detector.run_network
    calls = []

    def failing(prepared, error=RuntimeError):
        calls.append(1)
        if len(calls) == 3:
            raise error("the network failed")
        return real(prepared)

    monkeypatch.setattr(detector, "run_network", failing)
    with pytest.raises(RuntimeError, match="the network failed"):
        list(run(PHOTOS[:20], detector, None, options))
    assert _segments() <= before and not _children()

    calls.clear()
    monkeypatch.setattr(detector, "run_network", lambda p: failing(p, KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        list(run(PHOTOS[:20], detector, None, options))
    assert _segments() <= before and not _children()


def test_a_decoder_process_that_dies_fails_the_run(detector):
    before = _segments()
    ring = DecoderProcesses(1, fit_of(detector), slots=2)
    try:
        ring.procs[0].kill()
        ring.procs[0].join()
        with pytest.raises(FacerunError, match="decoder process ended"):
            ring.decode(PHOTOS[0])
    finally:
        ring.close()
    assert _segments() <= before and not _children()


def test_decoders_are_checked():
    with pytest.raises(Exception, match="unknown decoders"):
        LibraryOptions(decoders="fibers")
    with pytest.raises(Exception, match="1 or more"):
        LibraryOptions(decoders="processes", decoder_processes=0)
    assert os.cpu_count() and library.LibraryOptions().decoders is None  # FACERUN_DECODERS decides


@pytest.mark.parametrize("kind, drafted, device, cores, want", [
    ("threads", True, "gpu", 64, "threads"),
    ("processes", True, "cpu", 2, "processes"),
    ("processes", False, "gpu", 64, "threads"),  # photos kept whole (alignment, drawing) decode on threads
    ("auto", True, "gpu", AUTO_CORES, "processes"),
    ("auto", True, "NVIDIA H200 (Vulkan)", 16, "processes"),  # a GPU detector's device is its adapter's name
    ("auto", True, None, 64, "threads"),  # a detector that does not say where it runs
    ("auto", True, "gpu", AUTO_CORES - 1, "threads"),
    ("auto", True, "cpu", 64, "threads"),  # the interpreter needs the cores
    ("auto", False, "gpu", 64, "threads"),
])
def test_where_a_run_decodes(kind, drafted, device, cores, want):
    assert choose(kind, drafted, device, cores) == want


def test_auto_takes_processes_for_a_real_gpu_detector_on_enough_cores(gpu, detector):
    on_gpu = Detector(device="gpu")
    assert on_gpu.device not in ("cpu", "gpu")  # the adapter's name, as a library run sees it
    assert choose("auto", True, on_gpu.device, AUTO_CORES) == "processes"
    assert choose("auto", True, detector.device, AUTO_CORES) == "threads"  # the module's CPU detector


def test_a_bad_decoders_setting_is_one_line(tmp_path):
    from click.testing import CliRunner

    from facerun.cli import main

    result = CliRunner().invoke(main, ["detect", str(PHOTOS[0])], env={"FACERUN_DECODERS": "fibers"})
    assert result.exit_code != 0 and "FACERUN_DECODERS must be one of threads, processes, auto" in result.output
    assert "Traceback" not in result.output


def test_too_little_shared_memory_is_said_before_any_process_starts(monkeypatch):
    import facerun.face.decoders as decoders

    class Full:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(decoders.os, "statvfs", lambda where: Full())
    before = _segments()
    with pytest.raises(FacerunError, match="MB free; the decoder processes' photo slots need"):
        DecoderProcesses(2, fit_of(None), slots=4)
    assert _segments() <= before and not _children()
