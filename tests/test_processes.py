"""The library run over several processes (facerun.face.processes, `detect --processes`): the in-process run's
results, in input order, bad files as results; a failing process is one error of the same class; stopping early
ends every process."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from people_fixtures import YUNET, copy_photos, need_real_data

from facerun.cli import main as cli
from facerun.errors import GpuError
from facerun.face.detect import Detector
from facerun.face.engines import run
from facerun.face.library import LibraryOptions, iter_photo_faces
from facerun.face.processes import iter_photo_faces_in_processes

NAMES = ("group/fr_obama_and_biden.jpg", "obama/obama3.jpg", "group/openface_longoria-cooper.jpg",
         "Anthony_Hopkins/Anthony_Hopkins_0001.jpg", "clapton/clapton-2.jpg")


@pytest.fixture(autouse=True)
def one_blas_thread(monkeypatch):
    """One BLAS thread here and in every spawned process: facerun picks the count from the load average, and 1 and 2
    threads round a box's or an embedding's last bits differently, so runs in two processes could differ."""
    monkeypatch.setenv("FACERUN_CPU_THREADS", "1")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    need_real_data()
    folder = tmp_path_factory.mktemp("photos")
    paths = copy_photos(folder, NAMES)
    bad = folder / "zz" / "broken.jpg"
    bad.parent.mkdir()
    bad.write_bytes(b"not a jpeg")
    return paths[:2] + [bad] + paths[2:]


def _faces(result):
    return [(f.score, f.box, f.landmarks.tolist()) for f in result.faces]


def test_processes_give_the_in_process_results_in_order(photos):
    options = {"model": str(YUNET), "device": "cpu", "max_side": 640}
    want = list(iter_photo_faces(photos, Detector(**options)))
    got = list(iter_photo_faces_in_processes(photos, options, processes=2, workers=1))
    assert [r.path for r in got] == [r.path for r in want] == photos
    assert [r.error for r in got] == [r.error for r in want] and got[2].error and "broken.jpg" in got[2].error
    assert sum(len(r.faces) for r in got) >= 5
    for a, b in zip(got, want):
        assert (a.width, a.height, a.input_size) == (b.width, b.height, b.input_size)
        assert _faces(a) == _faces(b)
    assert {r.device for r in got if r.ok} == {"cpu"}


def test_a_failing_process_raises_its_error_class_and_the_cli_exits_with_its_status(photos, monkeypatch):
    from facerun.face.processes import start_ahead

    start_ahead(2, "gpu")  # the fork server started before the setting below: its processes still take this run's
    monkeypatch.setenv("FACERUN_GPU", "off")  # the processes see the environment: none finds a GPU
    with pytest.raises(GpuError, match="FACERUN_GPU"):
        list(iter_photo_faces_in_processes(photos, {"model": str(YUNET), "device": "gpu"}, processes=2))
    result = CliRunner().invoke(cli, ["detect", str(photos[0].parent), "--device", "gpu", "--processes", "2",
                                      "--json"])
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr.strip().startswith("error:") and "FACERUN_GPU" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_closing_the_run_early_ends_every_process(photos):
    run = iter_photo_faces_in_processes(photos, {"model": str(YUNET), "device": "cpu"}, processes=2, workers=1)
    first = next(run)
    assert first.path == photos[0]
    run.close()
    assert multiprocessing.active_children() == []


def test_detect_over_processes_on_the_gpu_prints_the_in_process_json(photos, gpu):
    folder = str(photos[0].parents[1])
    args = ["--allow-software", "detect", folder, "--model", str(YUNET), "--device", "gpu", "--max-side", "480",
            "--json"]
    one = CliRunner().invoke(cli, args)
    two = CliRunner().invoke(cli, args + ["--processes", "2"])
    assert one.exit_code == two.exit_code == 1  # the broken file
    rows_one, rows_two = json.loads(one.stdout), json.loads(two.stdout)
    assert [r["image"] for r in rows_two] == [r["image"] for r in rows_one] and len(rows_two) == len(photos) - 1
    for a, b in zip(rows_one, rows_two):
        assert b["device"] == a["device"] != "cpu"
        assert {k: v for k, v in a.items() if k != "ms"} == {k: v for k, v in b.items() if k != "ms"}


def test_closing_early_with_thousands_of_paths_queued_lets_the_process_exit(photos, tmp_path):
    # the paths not yet taken sit in the queue's pipe; the parent must not wait at exit to hand them over
    script = tmp_path / "early.py"
    script.write_text(
        "from facerun.face.processes import iter_photo_faces_in_processes\n"
        "if __name__ == '__main__':  # spawned processes import this script again\n"
        f"    paths = [{str(photos[0])!r}] * 5000\n"
        f"    run = iter_photo_faces_in_processes(paths, {{'model': {str(YUNET)!r}, 'device': 'cpu'}}, processes=2,"
        " workers=1)\n"
        "    print(len(next(run).faces))\n"
        "    run.close()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 1


def test_each_process_embeds_its_own_faces_the_in_process_embeddings(photos, monkeypatch):
    import numpy as np
    from people_fixtures import MOBILEFACENET

    from facerun.face.embed import Embedder

    embedder = Embedder(str(MOBILEFACENET), device="cpu")
    options = {"model": str(YUNET), "device": "cpu", "for_alignment": True}
    want = list(iter_photo_faces(photos, Detector(**options), embedder, batch=3))

    def not_here(*args, **kwargs):
        raise AssertionError("the faces were embedded in the parent")

    monkeypatch.setattr(embedder, "submit_faces", not_here)
    monkeypatch.setenv("FACERUN_PARENT_RUNS", "off")  # every photo in a process
    got = list(iter_photo_faces_in_processes(photos, options, processes=2, workers=1, embedder=embedder, batch=3))
    assert [r.path for r in got] == photos and sum(len(r.faces) for r in got) > len(photos)
    for a, b in zip(got, want):
        assert _faces(a) == _faces(b) and a.error == b.error
        assert a.embeddings.shape == (len(a.faces), embedder.dim)
        # other batch mates than in one process: the CPU's sums round their last bits differently
        assert np.allclose(a.embeddings, b.embeddings, atol=1e-5)
        assert np.allclose(np.linalg.norm(a.embeddings, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("mode", ["until-ready", "always"])
def test_the_parent_runs_photos_while_its_processes_start(photos, monkeypatch, mode):
    import numpy as np
    from people_fixtures import MOBILEFACENET

    from facerun.face.embed import Embedder
    from facerun.face.library import LibraryStats

    monkeypatch.setenv("FACERUN_PARENT_RUNS", mode)
    embedder = Embedder(str(MOBILEFACENET), device="cpu")
    options = {"model": str(YUNET), "device": "cpu", "for_alignment": True}
    want = list(iter_photo_faces(photos, Detector(**options), embedder, batch=3))
    stats = LibraryStats()
    got = list(iter_photo_faces_in_processes(photos, options, processes=2, workers=1, embedder=embedder, batch=3,
                                             stats=stats))
    # a spawned process imports facerun and loads its models before it takes a photo: this one has them already
    assert 1 <= stats.counted["photos_here"] <= len(photos)
    assert [r.path for r in got] == photos
    for a, b in zip(got, want):
        assert _faces(a) == _faces(b) and a.error == b.error
        assert np.allclose(a.embeddings, b.embeddings, atol=1e-5)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_the_parent_runs_photos_on_the_detector_it_was_given(photos, monkeypatch, device):
    from facerun.face import detect
    from facerun.face.library import LibraryStats

    monkeypatch.setenv("FACERUN_PARENT_RUNS", "always")
    monkeypatch.setenv("FACERUN_GPU", "off")  # "auto" is the CPU here too: the detector given is where it runs
    options = {"model": str(YUNET), "device": device, "max_side": 640}
    loaded = Detector(**options)
    want = list(iter_photo_faces(photos, loaded))

    class NotAgain(Detector):
        def __init__(self, *args, **kwargs):
            raise AssertionError("the parent made a detector of its own")

    monkeypatch.setattr(detect, "Detector", NotAgain)  # the processes import their own: this one is the parent's
    stats = LibraryStats()
    got = list(run(photos, loaded, None, LibraryOptions(engine="processes", processes=2, workers=1,
                                                          detector_args=options), stats=stats))
    assert stats.counted["photos_here"] >= 1
    assert [_faces(a) for a in got] == [_faces(b) for b in want]


class _OwnEmbedder:
    """An embedder of the caller's own, which cannot say how it is made: it stays in the parent."""

    def __init__(self, embedder):
        self.inner = embedder
        self.dim, self.input_size = embedder.dim, embedder.input_size

    def submit_faces(self, faces):
        return self.inner.submit_faces(faces)


def test_an_embedder_that_cannot_be_made_again_embeds_the_crops_in_the_parent(photos):
    import numpy as np
    from people_fixtures import MOBILEFACENET

    from facerun.face.embed import Embedder

    embedder = Embedder(str(MOBILEFACENET), device="cpu")
    options = {"model": str(YUNET), "device": "cpu", "for_alignment": True}
    want = list(iter_photo_faces(photos, Detector(**options), embedder, batch=3))
    got = list(iter_photo_faces_in_processes(photos, options, processes=2, workers=1,
                                             embedder=_OwnEmbedder(embedder), batch=3))
    for a, b in zip(got, want):  # the very batches of one process: the same bits
        assert _faces(a) == _faces(b) and np.array_equal(a.embeddings, b.embeddings)


def test_an_embedder_says_how_to_make_it_again():
    from facerun.face.embed import Embedder

    embedder = Embedder("mobilefacenet", device="cpu", mean=[127.5] * 3, threshold=0.4)  # the one facerun ships
    again = Embedder(**embedder.arguments())
    assert again.path == embedder.path and again.preprocessing == embedder.preprocessing
    assert (again.threshold, again.requested_device, again.precision) == (0.4, "cpu", "f32")


def test_index_over_processes_writes_the_in_process_database(photos, tmp_path):
    import numpy as np
    from people_fixtures import MOBILEFACENET

    folder = str(photos[0].parents[1])
    common = ["--model", str(MOBILEFACENET), "--device", "cpu", "--json"]
    one = CliRunner().invoke(cli, ["index", folder, "--db", str(tmp_path / "one.db"), *common])
    two = CliRunner().invoke(cli, ["index", folder, "--db", str(tmp_path / "two.db"), *common, "--processes", "2"])
    assert one.exit_code == two.exit_code == 1  # the broken file
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert (a["added"], a["faces"], a["faces_total"]) == (b["added"], b["faces"], b["faces_total"]) and a["faces"] > 5
    assert (a["processes"], b["processes"]) == (1, 2)  # the default, auto, is one process on the CPU
    from facerun.people.index import FaceIndex

    with FaceIndex(tmp_path / "one.db") as x, FaceIndex(tmp_path / "two.db") as y:
        fx, fy = x.faces(), y.faces()
    assert fx.paths == fy.paths and np_equal(fx.boxes, fy.boxes)
    assert np.allclose(fx.embeddings, fy.embeddings, atol=1e-5)  # embedded in the processes: other batch mates
    refused = CliRunner().invoke(cli, ["index", folder, "--db", str(tmp_path / "r.db"), "--engine", "ray",
                                       "--processes", "2"])
    assert refused.exit_code != 0 and "--processes applies to --engine local" in refused.stderr


def np_equal(a, b) -> bool:
    import numpy as np

    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def test_a_slow_consumer_holds_the_processes_back_and_still_gets_every_photo_in_order(photos, monkeypatch):
    import time

    from facerun.face import processes

    monkeypatch.setattr(processes, "RESULTS_PER_PROCESS", 1)  # one result in flight a process: they must wait
    options = {"model": str(YUNET), "device": "cpu", "max_side": 320}
    got = []
    for result in iter_photo_faces_in_processes(photos * 2, options, processes=2, workers=1):
        time.sleep(0.2)
        got.append(result.path)
    assert got == photos * 2


def test_bench_photos_has_a_processes_row_that_finds_the_cpu_rows_faces(photos):
    folder = str(photos[0].parents[1])
    result = CliRunner().invoke(cli, ["bench", "--photos", folder, "--paths", "cpu,cpu-processes", "--processes", "2",
                                      "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["path"]: r for r in json.loads(result.stdout)["rows"]}
    row = rows["cpu-processes"]
    assert row["processes"] == 2 and row["photos"] == rows["cpu"]["photos"] == len(photos)
    assert row["agree_with_cpu"]["same"] and row["faces"] == rows["cpu"]["faces"] > 5
    assert row["programs_compiled"] >= row["distinct_sizes"] > 1  # counted in the processes, summed here
    assert row["first_photo_ms"] > 0 and "start-up" in row["bottleneck"]


def test_a_process_adopts_exactly_its_parents_settings(monkeypatch):
    from facerun import settings

    monkeypatch.setenv("FACERUN_POST_THREADS", "3")
    monkeypatch.delenv("FACERUN_PHOTO_BATCH", raising=False)
    monkeypatch.setenv("UNRELATED_VARIABLE", "kept")
    taken = settings.environment()
    assert taken["FACERUN_POST_THREADS"] == "3" and "UNRELATED_VARIABLE" not in taken
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")  # as a fork server's older environment might have it
    monkeypatch.setenv("FACERUN_POST_THREADS", "2")
    settings.adopt(taken)
    assert settings.get("FACERUN_POST_THREADS") == 3 and "FACERUN_PHOTO_BATCH" not in os.environ
    assert os.environ["UNRELATED_VARIABLE"] == "kept"


@pytest.mark.parametrize("photos_, cores, on_gpu, want", [
    (4120, 16, True, 4), (4120, 12, True, 3), (4120, 64, True, 4),  # one a 4 cores, at most 4
    (4120, 8, True, 1),  # too few cores to decode for several
    (1999, 16, True, 1),  # too few photos to pay for their start
    (100000, 16, False, 1),  # the CPU: processes lost to one there
])
def test_auto_runs_processes_only_where_they_measured_faster(photos_, cores, on_gpu, want):
    from facerun.face.processes import auto_count

    assert auto_count(photos_, cores, on_gpu, least_photos=2000) == want


def test_auto_shares_out_over_processes_on_a_gpu_with_the_same_faces(photos, gpu, monkeypatch):
    from facerun.face import processes
    from facerun.face.library import LibraryStats

    monkeypatch.setattr(processes, "available_cores", lambda: 12)  # this machine's 2 would never share out
    monkeypatch.setenv("FACERUN_PROCESSES_FROM", "2")
    options = {"model": str(YUNET), "device": "gpu", "max_side": 480}
    loaded = Detector(**options)
    assert loaded.device != "cpu"
    want = list(iter_photo_faces(photos[:2], loaded))
    shared, alone, on_cpu = LibraryStats(), LibraryStats(), LibraryStats()
    auto = LibraryOptions(engine="auto", workers=1, detector_args=options)
    got = list(run(photos[:2], loaded, None, auto, stats=shared))
    assert shared.processes == 2 and len(shared.process_starts) >= 1  # min(12 // 4, 2 photos)
    assert [_faces(a) for a in got] == [_faces(b) for b in want]
    assert [r.path for r in run(photos[:1], loaded, None, auto, stats=alone)] == photos[:1]
    assert alone.processes == 1 and alone.process_starts == []  # one photo: under FACERUN_PROCESSES_FROM
    cpu = Detector(**{**options, "device": "cpu"})
    list(run(photos[:2], cpu, None, LibraryOptions(engine="auto", workers=1, detector_args={**options,
                                                                                            "device": "cpu"}),
             stats=on_cpu))
    assert on_cpu.processes == 1 and on_cpu.process_starts == []
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("given, ok", [("auto", True), ("AUTO", True), ("3", True), ("0", False), ("many", False),
                                       ("-1", False)])
def test_processes_takes_a_count_or_auto(given, ok, tmp_path):
    from facerun.commands.types import AUTO, ProcessCount

    if ok:
        assert ProcessCount().convert(given, None, None) in (AUTO, 3)
    result = CliRunner().invoke(cli, ["detect", str(tmp_path / "none.jpg"), "--processes", given])
    assert result.exit_code == (1 if ok else 2)  # valid: then the missing photo; invalid: a usage error
    assert ("is not a count" in result.stderr) != ok
