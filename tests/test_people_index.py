"""The face index as a store: incremental re-runs, kill -9 in the middle, a second writer, one model per database;
and the loop under it (iter_photo_faces) and BGR input."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, SMALL_PHOTOS, YUNET, copy_db, copy_photos

from facerun.cli import main
from facerun.errors import ModelError
from facerun.face.images import load_image
from facerun.face.library import iter_photo_faces
from facerun.people.index import FaceIndex
from facerun.people.lock import DatabaseBusy, WriterLock

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def faces_by_sha(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT p.sha256, COUNT(f.id) FROM photos p LEFT JOIN faces f ON f.photo_id = p.id "
                                 "GROUP BY p.id"))


def test_incremental_runs_skip_reindex_and_drop(tmp_path, faces_db, mobilefacenet, yunet_cpu):
    photos = copy_photos(tmp_path / "photos", SMALL_PHOTOS[:5])
    db = tmp_path / "faces.db"
    with FaceIndex(db) as index:
        first = index.update([tmp_path / "photos"], embedder=mobilefacenet, detector=yunet_cpu)
        assert (first.added, first.changed, first.unchanged, first.removed) == (5, 0, 0, 0)
        again = index.update([tmp_path / "photos"], embedder=mobilefacenet, detector=yunet_cpu)
        assert (again.added, again.changed, again.unchanged, again.removed, again.faces) == (0, 0, 5, 0, 0)

        os.utime(photos[0], ns=(time.time_ns(), time.time_ns() + 10**9))  # touched: same bytes, new mtime
        photos[1].write_bytes((FACES / SMALL_PHOTOS[6]).read_bytes())  # changed: another photo (six faces)
        photos[2].unlink()  # deleted
        third = index.update([tmp_path / "photos"], embedder=mobilefacenet, detector=yunet_cpu)
        # the deleted photo is only marked missing (nothing is deleted unasked): out of the counts, its faces kept
        assert (third.added, third.changed, third.unchanged, third.removed) == (0, 1, 3, 0)
        assert index.counts()["photos"] == 4 and len(index.missing_photos()) == 1
        removed_photos, removed_faces = index.prune([tmp_path / "photos"])
        assert removed_photos == 1 and removed_faces >= 1 and not index.missing_photos()
        assert index.counts()["photos"] == 4
        fourth = index.update([tmp_path / "photos"], embedder=mobilefacenet, detector=yunet_cpu)
        assert (fourth.changed, fourth.unchanged) == (0, 4)  # the touched photo's new mtime was stored
    # every photo holds what indexing the original shared photos gave: the changed one its six faces, once
    reference = faces_by_sha(faces_db)
    now = faces_by_sha(db)
    assert now == {sha: reference[sha] for sha in now} and max(now.values()) == 6


def test_index_command_reports_counts_and_fails_on_unreadable(tmp_path):
    if not MOBILEFACENET.exists():
        pytest.skip("MobileFaceNet not found")
    copy_photos(tmp_path / "photos", SMALL_PHOTOS[:2])
    (tmp_path / "photos" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    db = tmp_path / "faces.db"
    r = run("index", tmp_path / "photos", "--db", db, "--model", MOBILEFACENET, "--device", "cpu", "--json")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert (report["added"], report["unchanged"], len(report["failed"])) == (2, 0, 1)
    assert report["failed"][0]["image"].endswith("broken.jpg") and "broken.jpg" in r.stderr
    assert report["model"] == "mobilefacenet" and report["photos_total"] == 2
    (tmp_path / "photos" / "broken.jpg").unlink()
    # the model comes from the database now; the text summary says what happened
    r = run("index", tmp_path / "photos", "--db", db, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "0 added, 0 changed, 2 unchanged, 0 removed, 0 unreadable" in r.stdout


def test_kill_9_mid_run_loses_only_the_batch_in_flight(tmp_path, faces_db):
    """A SIGKILLed indexer leaves whole photos only (each with all its faces, none twice); a re-run completes."""
    photos = copy_photos(tmp_path / "photos", SMALL_PHOTOS, copies=4)
    db = tmp_path / "faces.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FACERUN_GPU": "off"}
    command = [sys.executable, "-m", "facerun.cli", "index", str(tmp_path / "photos"), "--db", str(db), "--model",
               str(MOBILEFACENET), "--detector", str(YUNET), "--device", "cpu", "--commit-every", "3"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    committed = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if db.exists():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                        committed = conn.execute("SELECT COUNT(*) FROM photos").fetchone()[0]
                except sqlite3.OperationalError:
                    committed = 0  # the schema is being made
            if committed >= 3:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()
    reference = faces_by_sha(faces_db)
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM photos").fetchone()[0]
        assert 3 <= stored < len(photos), "the kill must land mid-run"
        duplicates = conn.execute("SELECT COUNT(*) FROM (SELECT photo_id, x, y, w, h FROM faces GROUP BY "
                                  "photo_id, x, y, w, h HAVING COUNT(*) > 1)").fetchone()[0]
        assert duplicates == 0
    assert all(count == reference[sha] for sha, count in faces_by_sha(db).items())  # no photo half-indexed

    done = subprocess.run([*command, "--json"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["unchanged"] == stored and report["added"] == len(photos) - stored
    with sqlite3.connect(db) as conn:
        per_photo = conn.execute("SELECT p.sha256, COUNT(f.id) FROM photos p LEFT JOIN faces f ON f.photo_id = p.id "
                                 "GROUP BY p.id").fetchall()
    assert len(per_photo) == len(photos) and all(count == reference[sha] for sha, count in per_photo)


def test_a_second_writer_is_refused_or_waits(tmp_path, faces_db):
    if not MOBILEFACENET.exists():
        pytest.skip("MobileFaceNet not found")
    copy_photos(tmp_path / "photos", SMALL_PHOTOS[:1])
    db = tmp_path / "faces.db"
    assert run("index", tmp_path / "photos", "--db", db, "--device", "cpu", "--model", MOBILEFACENET).exit_code == 0
    holder = WriterLock(db)
    holder.acquire()
    try:
        r = run("index", tmp_path / "photos", "--db", db, "--device", "cpu")
        assert r.exit_code == 1
        assert r.stderr.strip() == (f"error: {db} is being written by another process (pid {os.getpid()}); wait "
                                    "for it or pass --wait SECONDS")
        with pytest.raises(DatabaseBusy):
            WriterLock(db, wait=0.3).acquire()
        threading.Timer(0.5, holder.release).start()
        r = run("index", tmp_path / "photos", "--db", db, "--device", "cpu", "--wait", "30")
        assert r.exit_code == 0, r.output
        assert "1 unchanged" in r.stdout
    finally:
        holder.release()


def test_one_embedder_per_database(tmp_path, faces_db):
    db = copy_db(faces_db, tmp_path / "faces.db")
    r = run("index", FACES / "obama", "--db", db, "--model", "sface-arch-small", "--device", "cpu")
    assert r.exit_code == 1
    assert "holds mobilefacenet embeddings (128-d)" in r.stderr and "cannot be mixed" in r.stderr
    from facerun.face.embed import Embedder

    with FaceIndex(db) as index, pytest.raises(ModelError, match="cannot be mixed"):
        index.check_embedder(Embedder("sface-arch-small", device="cpu"))


def test_not_a_face_database(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    r = run("cluster", "--db", other)
    assert r.exit_code == 1 and "not a facerun face database" in r.stderr
    (tmp_path / "text.db").write_text("hello, not sqlite at all" * 100)
    r = run("cluster", "--db", tmp_path / "text.db")
    assert r.exit_code == 1 and "not a face database" in r.stderr and "Traceback" not in r.output


# ------------------------------------------------------------------------------------------ iter_photo_faces


def test_iter_photo_faces_keeps_order_reports_errors_and_matches_the_index(tmp_path, faces_db, mobilefacenet,
                                                                           yunet_cpu):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    paths = [FACES / SMALL_PHOTOS[6], broken, tmp_path / "missing.jpg", FACES / SMALL_PHOTOS[0],
             FACES / SMALL_PHOTOS[5]]
    seen = []
    results = list(iter_photo_faces(paths, yunet_cpu, mobilefacenet, batch=4, progress=lambda r: seen.append(r.path)))
    assert [r.path for r in results] == paths == seen
    assert [r.ok for r in results] == [True, False, False, True, True]
    assert "not an image" in results[1].error and "no such file" in results[2].error
    assert results[1].embeddings.shape == (0, 128)
    assert [len(r.faces) for r in results] == [6, 0, 0, 1, 2]  # six faces: one batch of 4 spans two photos
    with FaceIndex(faces_db) as index:
        stored = index.faces()
    for r in (results[0], results[3], results[4]):
        rows = [i for i, p in enumerate(stored.paths) if p == str(r.path.resolve())]  # the index keeps real paths
        assert np.allclose(stored.boxes[rows], [f.box for f in r.faces], atol=1e-3)
        assert np.allclose(np.sum(stored.embeddings[rows] * r.embeddings, axis=1), 1.0, atol=1e-5)
    largest = next(iter_photo_faces(paths[:1], yunet_cpu, mobilefacenet, all_faces=False))
    assert len(largest.faces) == 1 and largest.embeddings.shape == (1, 128)


def test_bgr_arrays_when_told(mobilefacenet, yunet_cpu):
    rgb = load_image(FACES / SMALL_PHOTOS[0])
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    faces = yunet_cpu.detect(rgb)
    assert [f.box for f in yunet_cpu.detect(bgr, bgr=True)] == [f.box for f in faces]
    crop_rgb = mobilefacenet.align(rgb, faces[0].landmarks)
    crop_from_bgr = mobilefacenet.align(bgr, faces[0].landmarks, bgr=True)
    assert np.array_equal(crop_rgb, crop_from_bgr)
    expected = mobilefacenet.embed(crop_rgb)
    assert np.allclose(mobilefacenet.embed(crop_rgb[:, :, ::-1], bgr=True), expected, atol=1e-6)
    records = mobilefacenet.embed_images([bgr], detector=yunet_cpu, bgr=True)
    assert np.allclose(records[0].embedding, expected[0], atol=1e-5)
    # and the colours do matter: BGR taken as RGB gives another vector
    assert float(mobilefacenet.embed(crop_rgb[:, :, ::-1])[0] @ expected[0]) < 0.999


def test_a_replica_database_reopens_its_model_by_name(tmp_path, yunet_cpu):
    from facerun.face.embed import Embedder

    db = tmp_path / "replica.db"
    with FaceIndex(db) as index:
        report = index.update([FACES / "lennon"], embedder=Embedder("sface-arch-small", device="cpu"),
                              detector=yunet_cpu)
        assert report.added == 2 and index.stored_model() == "sface-arch-small"
    r = run("search", FACES / "lennon" / "lennon-1.jpg", "--db", db, "--device", "cpu", "--json")
    assert r.exit_code == 0, r.output
    assert Path(json.loads(r.stdout)[0]["image"]).name == "lennon-1.jpg"


def test_stored_faces_are_read_again_only_after_a_change(tmp_path, faces_db):
    db = copy_db(faces_db, tmp_path / "faces.db")
    with FaceIndex(db) as index:
        first = index.faces()
        assert index.faces() is first
        with sqlite3.connect(db) as other:  # another connection deletes a photo: its faces go too (cascade)
            other.execute("PRAGMA foreign_keys=ON")
            other.execute("DELETE FROM photos WHERE path LIKE '%/group/insightface_t1.jpg'")
        second = index.faces()
        assert len(second) == len(first) - 6
        index.conn.execute("DELETE FROM faces WHERE id = ?", (int(second.ids[0]),))  # and a change of our own
        assert len(index.faces()) == len(second) - 1
