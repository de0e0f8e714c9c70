"""`--engine ray`: the Ray Data run on a local Ray instance (two CPUs) over real photos must give the single-process
run's faces, boxes and embeddings, keep an unreadable photo as an error row, and merge into the face index as a
plain `index` run does. One Ray instance serves the whole module (starting one takes seconds)."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import MOBILEFACENET, YUNET, copy_photos, need_real_data

from facerun.cli import main
from facerun.errors import FacerunError

# a handful of small photos: one to several faces each
PHOTOS = ("Anthony_Hopkins/Anthony_Hopkins_0001.jpg", "clapton/clapton-2.jpg", "deepface_id13/img25.jpg",
          "group/openface_longoria-cooper.jpg")
MODELS = ("--model", str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'facerun[ray]')")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'facerun[ray]')")
    need_real_data()
    started = not ray.is_initialized()
    if started:
        # one GPU resource to lend: an actor given "GPU 0" must pick adapter #0 itself (here lavapipe)
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def photos(tmp_path_factory, ray_instance):
    """The photos, and a JPEG cut in half beside them."""
    folder = tmp_path_factory.mktemp("ray-photos")
    written = copy_photos(folder, PHOTOS)
    broken = folder / "broken.jpg"
    data = written[0].read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    return folder, broken


def read_parquet(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_ray_embeddings_equal_the_single_process_run(tmp_path, photos):
    folder, broken = photos
    local = run("embed", folder, *MODELS, "--all-faces", "--out", tmp_path / "local.jsonl")
    assert local.exit_code == 1 and "broken.jpg" in local.output  # the cut photo fails the local run too
    ray_out = tmp_path / "faces.parquet"
    result = run("embed", folder, *MODELS, "--all-faces", "--engine", "ray", "--out", ray_out, "--json")
    assert result.exit_code == 1, result.output  # the unreadable photo: reported, the rest written
    summary = json.loads(result.stdout)
    assert summary["complete"] and summary["photos"] == len(PHOTOS) + 1 and summary["devices"] == ["cpu"]

    expected = {}
    for line in (tmp_path / "local.jsonl").read_text().splitlines():
        face = json.loads(line)
        expected.setdefault(face["image"], []).append(face)
    rows = read_parquet(ray_out)
    errors = [r for r in rows if r["error"] is not None]
    assert [r["image"] for r in errors] == [str(broken)] and errors[0]["faces"] == 0 and errors[0]["box"] is None
    assert "cannot read image" in errors[0]["error"]
    got = {}
    for row in rows:
        if row["face"] is not None:
            got.setdefault(row["image"], []).append(row)
    assert set(got) == set(expected) and len(got) == len(PHOTOS)
    for image, faces in expected.items():
        mine = sorted(got[image], key=lambda r: r["face"])
        assert len(mine) == len(faces) == mine[0]["faces"], image
        for want, have in zip(faces, mine):
            assert np.allclose(have["box"], want["box"], atol=0.01), image
            assert abs(have["score"] - want["score"]) < 1e-3
            a, b = np.asarray(want["embedding"]), np.asarray(have["embedding"], np.float32)
            assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) >= 0.9999, image
            assert have["model"] == "mobilefacenet" and len(have["landmarks"]) == 5
    marker = json.loads((ray_out / "_facerun.json").read_text())
    assert marker["complete"] and marker["rows"] == len(rows)
    assert not ray_out.with_name(ray_out.name + ".incomplete").exists()

    # the same folder as a URI: read by Ray's reader as bytes, decoded from memory, the same rows
    uri_out = tmp_path / "uri.parquet"
    by_uri = run("embed", folder.as_uri(), *MODELS, "--all-faces", "--engine", "ray", "--out", uri_out)
    assert by_uri.exit_code == 1 and "broken.jpg" in by_uri.output

    def keyed(table):
        return {(r["image"], r["face"]): r for r in table}

    again, first = keyed(read_parquet(uri_out)), keyed(rows)
    assert set(again) == set(first)
    for key, row in again.items():
        assert row["error"] == first[key]["error"] and row["box"] == first[key]["box"]
        if row["embedding"] is not None:
            assert np.allclose(row["embedding"], first[key]["embedding"], atol=1e-6)


def test_index_on_ray_merges_like_a_plain_index_run(tmp_path, photos):
    folder, broken = photos
    plain, on_ray = tmp_path / "plain.db", tmp_path / "ray.db"
    first = run("index", folder, "--db", plain, *MODELS, "--json")
    second = run("index", folder, "--db", on_ray, *MODELS, "--engine", "ray", "--json")
    assert first.exit_code == second.exit_code == 1  # the cut photo, in both
    report = json.loads(second.stdout)
    assert report["added"] == len(PHOTOS) and [f["image"] for f in report["failed"]] == [str(broken)]
    assert report["engine"] == "ray" and report["faces"] == json.loads(first.stdout)["faces"]

    def contents(db):
        with sqlite3.connect(db) as conn:
            photos = conn.execute("SELECT path, size, sha256, width, height FROM photos ORDER BY path").fetchall()
            faces = conn.execute("SELECT p.path, f.x, f.y, f.w, f.h, f.score, f.landmarks, f.model, f.embedding "
                                 "FROM faces f JOIN photos p ON p.id = f.photo_id ORDER BY p.path, f.score DESC"
                                 ).fetchall()
        return photos, faces

    photos_a, faces_a = contents(plain)
    photos_b, faces_b = contents(on_ray)
    assert photos_a == photos_b
    assert len(faces_a) == len(faces_b) > len(PHOTOS)
    for a, b in zip(faces_a, faces_b):
        assert a[0] == b[0] and a[7] == b[7]
        assert np.allclose(a[1:6], b[1:6], atol=0.01)
        assert np.allclose(json.loads(a[6]), json.loads(b[6]), atol=0.02)
        va, vb = np.frombuffer(a[8], "<f4"), np.frombuffer(b[8], "<f4")
        assert float(va @ vb) >= 0.9999
    # a second Ray run finds nothing to do, as a plain one would
    again = run("index", folder, "--db", on_ray, *MODELS, "--engine", "ray", "--json")
    assert json.loads(again.stdout)["unchanged"] == len(PHOTOS) and json.loads(again.stdout)["faces"] == 0


def test_an_incomplete_folder_is_marked_and_a_complete_one_replaces_the_last(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'facerun[ray]')")
    from facerun.face.face_rows import MARKER, ParquetFolder, check_parquet_out, rows_table

    out = tmp_path / "x.parquet"
    row = {"image": "a.jpg", "width": 0, "height": 0, "faces": 0, "face": None, "box": None, "score": None,
           "landmarks": None, "model": "m", "embedding": None, "error": "a.jpg: no such file", "device": "cpu"}
    folder = ParquetFolder(out)
    folder.write(rows_table([row]))
    left = folder.abandon("interrupted", {})
    assert left.name == "x.parquet.incomplete" and not out.exists()
    assert json.loads((left / MARKER).read_text())["complete"] is False
    for photos in (1, 2):  # the second run replaces the first's folder, and the stale .incomplete goes
        folder = ParquetFolder(out)
        for _ in range(photos):
            folder.write(rows_table([row]))
        assert folder.finish({}) == out
        assert json.loads((out / MARKER).read_text())["photos"] == photos
    assert not left.exists()
    (tmp_path / "mine.parquet").write_text("someone's file")
    with pytest.raises(FacerunError, match="not a folder facerun wrote"):
        check_parquet_out(tmp_path / "mine.parquet")


def test_decoded_batches_without_errors_are_photos():
    from facerun.face.ray_engine import decoded_photos

    pixels = np.arange(2 * 3 * 3, dtype=np.uint8)
    # a batch whose photos all decoded may carry its error column as floats (NaN): those are not errors
    for errors in (np.array([np.nan, np.nan]), np.array(["", ""], object), np.array([None, None], object)):
        batch = {"image": np.array(["a.jpg", "b.jpg"], object), "pixels": np.array([pixels.tobytes()] * 2, object),
                 "height": np.array([2, 2]), "width": np.array([3, 3]), "error": errors}
        photos = list(decoded_photos(batch))
        assert [(p[0], p[2]) for p in photos] == [("a.jpg", None), ("b.jpg", None)]
        assert photos[0][1].shape == (2, 3, 3) and photos[0][1].tobytes() == pixels.tobytes()
    batch["error"] = np.array(["", "b.jpg: not an image"], object)
    assert [p[2] for p in decoded_photos(batch)] == [None, "b.jpg: not an image"]


def test_actors_number_their_gpu_and_keep_a_given_adapter():
    from facerun.face.ray_engine import adapter_for_gpus

    assert adapter_for_gpus([], {}) == (None, "")
    assert adapter_for_gpus([3], {}) == ("#3", "Ray GPU 3")
    assert adapter_for_gpus(["1"], {})[0] == "#1"
    kept, note = adapter_for_gpus([0], {"FACERUN_GPU_ADAPTER": "H200"})
    assert kept is None and "as set" in note
    assert adapter_for_gpus(["GPU-5f3c"], {})[0] is None


def test_without_ray_one_line_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if it were not installed
    result = run("embed", tmp_path, "--engine", "ray", "--out", tmp_path / "x.parquet")
    assert result.exit_code == 1 and "pip install 'facerun[ray]'" in result.output
    assert "Traceback" not in result.output
    wrong = run("embed", tmp_path, "--ray-address", "auto")
    assert wrong.exit_code == 1 and "--ray-address applies to --engine ray" in wrong.output


def test_the_runs_size_limit_reaches_the_decoding_tasks(tmp_path, photos):
    folder, _ = photos
    out = tmp_path / "limited.parquet"
    result = run("--max-pixels", "1000", "embed", folder, *MODELS, "--engine", "ray", "--out", out, "--json")
    assert result.exit_code == 1
    rows = read_parquet(out)
    assert len(rows) == len(PHOTOS) + 1 and all(r["error"] for r in rows)
    # the header says the size: the cut photo is refused for its size too, before its pixels are read
    assert sum("past the limit" in r["error"] and "--max-pixels" in r["error"] for r in rows) == len(PHOTOS) + 1


def test_an_actor_that_dies_is_restarted_and_its_photos_run_again(tmp_path, photos):
    from facerun.face.face_rows import PhotoCollector
    from facerun.face.ray_engine import RaySettings, run_tables

    folder, broken = photos
    marker = tmp_path / "died"
    models = {"model": str(MOBILEFACENET), "detector": str(YUNET), "device": "cpu", "die_once": str(marker)}
    collector = PhotoCollector()
    results = [photo for table in run_tables([folder], RaySettings(models=models)) for photo in collector.add(table)]
    assert marker.exists()  # an actor did die
    assert sorted(p.path.name for p in results) == sorted([broken.name, *(name.split("/")[1] for name in PHOTOS)])
    assert sum(len(p.faces) for p in results) > len(PHOTOS) and not collector.partial


@pytest.mark.gpu
def test_an_actor_given_a_gpu_uses_that_adapter(tmp_path, photos, gpu):
    folder, _ = photos
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.jpg").write_bytes((folder / PHOTOS[0]).read_bytes())  # one small photo: lavapipe is slow
    out = tmp_path / "gpu.parquet"
    result = run("embed", one, "--model", MOBILEFACENET, "--detector", YUNET, "--device", "gpu", "--engine", "ray",
                 "--gpus-per-worker", "1", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    devices = json.loads(result.stdout)["devices"]
    assert devices == [f"{gpu.label}; Ray GPU 0"]
    assert [r["faces"] for r in read_parquet(out)] == [1]
