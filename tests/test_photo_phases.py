"""The feeding thread's time by phase (facerun/phases.py) on real runs, and `bench photos`' decode rows (the floor)
with every row's vs_decode."""

import json

import pytest
from click.testing import CliRunner
from shared_paths import DATA, HAVE_PHOTOS, need_photos

from facerun import phases
from facerun.cli import main as cli
from facerun.face.detect import Detector
from facerun.face.engines import run
from facerun.face.images import iter_images
from facerun.face.library import LibraryOptions, LibraryStats

pytestmark = need_photos
PHOTOS = iter_images([DATA]) if HAVE_PHOTOS else []
TOLERANCE = 0.02  # of the busy time: the phases are laps of one clock, so they add up to it bar rounding


def _run(detector, photos, engine: str) -> tuple[LibraryStats, list]:
    stats = LibraryStats()
    out = list(run(photos, detector, None, LibraryOptions(engine=engine, workers=1), stats=stats))
    return stats, out


def _adds_up(clock: phases.PhaseClock, wall_s: float) -> dict:
    seconds = clock.seconds()
    assert all(v >= 0 for v in seconds.values())
    busy = clock.busy_ns
    assert 0 < busy <= wall_s * 1e9 * 1.01  # one thread's busy time, within the run's wall time
    assert abs(clock.total_ns() - busy) <= TOLERANCE * busy, (seconds, busy)
    return {k: v * 1e9 / busy for k, v in seconds.items()}  # each phase's share of the busy time


@pytest.fixture(scope="module")
def cpu_detector():
    return Detector(device="cpu")


def test_the_cpu_runs_phases_add_up_to_the_feeding_threads_busy_time(cpu_detector):
    photos = PHOTOS[:8]
    stats, out = _run(cpu_detector, photos, "threads")
    assert len(out) == len(photos)
    share = _adds_up(stats.clock, stats.wall_s)
    # pipelined on the CPU the feeding thread runs the interpreter; it decodes only what it takes back from the
    # decoding threads (a part of the decode stage), and post-processes nothing
    assert share["cpu"] > 0.5 and share["post"] == 0
    assert stats.clock.ns[phases.DECODE] <= stats.seconds["decode"] * 1e9 + 1e6
    assert all(share[k] == 0 for k in ("params", "upload", "record", "submit", "wait", "readback"))
    # the interpreter's own time is a part of the detect stage's (which also holds the Python around it)
    assert stats.clock.ns[phases.CPU] <= stats.seconds["detect"] * 1e9
    # the loop's time is its busy time and its waits (the first photo's decode, its results handed on)
    idle = stats.clock.idle_ns
    assert set(idle) == set(phases.WAITS) and idle["consumer"] > 0 and idle["decoders"] > 0
    assert 0.8 * stats.wall_s * 1e9 <= stats.clock.busy_ns + sum(idle.values()) <= 1.01 * stats.wall_s * 1e9

    stats, out = _run(cpu_detector, photos, "serial")
    share = _adds_up(stats.clock, stats.wall_s)
    assert share["decode"] > 0 and share["cpu"] > 0.3 and share["post"] > 0  # one thread does it all
    # the serial run's decode phase is its decode stage (the stage's clock is another, started elsewhere)
    assert stats.clock.ns[phases.DECODE] == pytest.approx(stats.seconds["decode"] * 1e9, rel=0.05, abs=2e6)


def test_the_gpu_runs_phases_add_up_on_lavapipe(gpu):
    detector = Detector(device="gpu")
    if detector.device == "cpu":
        pytest.skip(f"no GPU: {detector.net.gpu_reason}")
    photos = PHOTOS[:4]
    stats, _ = _run(detector, photos, "serial")  # the model's check on the first photo
    stats, out = _run(detector, photos, "threads")
    share = _adds_up(stats.clock, stats.wall_s)
    for name in ("params", "upload", "record", "submit", "wait", "readback", "cut"):
        assert share[name] > 0, name
    assert share["cpu"] == 0  # every photo ran on the device
    assert share["wait"] > share["submit"]  # lavapipe runs the network on the CPU while the thread waits


def test_bench_photos_has_the_decode_rows_vs_decode_and_the_phases(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for path in PHOTOS[:6]:
        (folder / path.name).write_bytes(path.read_bytes())
    args = ["--allow-software", "bench", "photos", str(folder), "--paths", "decode,decode-processes,cpu,cpu-serial"]
    result = CliRunner().invoke(cli, args + ["--json"])
    assert result.exit_code == 0, result.output
    rows = {r["path"]: r for r in json.loads(result.stdout)["rows"]}
    assert list(rows) == ["decode", "decode-processes", "cpu", "cpu-serial"]
    floor = max(rows["decode"]["photos_per_s"], rows["decode-processes"]["photos_per_s"])
    for row in rows.values():
        assert row["photos"] == 6 and row["vs_decode"] == pytest.approx(row["photos_per_s"] / floor, rel=1e-3, abs=1e-4)
    for name in ("decode", "decode-processes"):
        assert rows[name]["floor"] and rows[name]["faces"] == 0 and rows[name]["agree_with_cpu"] is None
    assert rows["decode-processes"]["processes"] >= 1 and rows["decode"]["workers"] >= 1
    assert rows["cpu-serial"]["agree_with_cpu"]["same"]
    for name in ("cpu", "cpu-serial"):
        s = rows[name]["seconds"]
        assert set(s["phases"]) == set(phases.PHASES)
        assert sum(s["phases"].values()) == pytest.approx(s["feeding"], rel=TOLERANCE, abs=1e-3)
        assert s["phases"]["cpu"] > 0
        assert set(s["waiting"]) == set(phases.WAITS)

    table = CliRunner().invoke(cli, args)
    assert table.exit_code == 0, table.output
    assert "vs decode" in table.stdout and "decode only" in table.stdout
    assert "cpu: feeding thread" in table.stdout and "ms a photo: " in table.stdout


def test_a_cpu_runs_decoders_run_nicer_and_a_decode_not_started_is_taken_back(cpu_detector, monkeypatch):
    import os
    import threading

    from facerun.face import decoders, library

    photos = PHOTOS[:6]
    want = [[(f.score, tuple(f.box)) for f in r.faces] for r in _run(cpu_detector, photos, "serial")[1]]
    niceness, policies = [], []
    real_decode = library._decode

    def decode(*args, **kwargs):
        niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        policies.append(os.sched_getscheduler(threading.get_native_id()))
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(library, "_decode", decode)
    stats, out = _run(cpu_detector, photos, "threads")
    assert [[(f.score, tuple(f.box)) for f in r.faces] for r in out] == want
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    nicer = min(19, base + decoders.DECODER_NICE)
    # the decoding threads' priority is lower; the photos the feeding thread took back, if any, at its own
    assert nicer in niceness and set(niceness) <= {base, nicer}

    # FACERUN_DECODER_PRIORITY=idle: the decoding threads run under SCHED_IDLE, the same faces
    monkeypatch.setenv("FACERUN_DECODER_PRIORITY", "idle")
    policies.clear()
    stats, out = _run(cpu_detector, photos, "threads")
    assert [[(f.score, tuple(f.box)) for f in r.faces] for r in out] == want
    assert os.SCHED_IDLE in policies and set(policies) <= {os.SCHED_OTHER, os.SCHED_IDLE}
    monkeypatch.delenv("FACERUN_DECODER_PRIORITY")

    # decoders that never get to run (a machine busy with other work): the feeding thread decodes every photo
    held = threading.Event()
    monkeypatch.setattr(decoders, "nicer_thread", lambda *_: held.wait(30))
    try:
        niceness.clear()
        stats, out = _run(cpu_detector, photos, "threads")
    finally:
        held.set()
    assert niceness == [base] * len(photos)
    assert [[(f.score, tuple(f.box)) for f in r.faces] for r in out] == want
    share = _adds_up(stats.clock, stats.wall_s)
    assert share["decode"] > 0
    assert stats.clock.ns[phases.DECODE] == pytest.approx(stats.seconds["decode"] * 1e9, rel=0.05, abs=2e6)
