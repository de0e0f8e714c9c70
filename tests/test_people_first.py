"""People as first-class, on the shared photos: incremental clustering gives new photos to their named person,
`cluster --all` keeps names, `--merge` and `--move` end to end, `search --person` lists exactly a person's photos,
`identify --known-db` names faces after a face database's people, crowd faces below the quality gate stay out of
people, one search threshold, and the vector index beside the database rebuilt (with a note, same answers) when
missing, stale or corrupt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import DATA, FACES, MOBILEFACENET, copy_db

from facerun.cli import main

FIRST = ("obama/obama.jpg", "obama/obama1.jpg", "obama/obama-1080p.jpg", "kit_harington/john1.jpeg",
         "kit_harington/john2.jpeg", "lennon/lennon-1.jpg", "lennon/lennon-2.jpg", "clapton/clapton-1.jpg",
         "clapton/clapton-2.jpg", "biden/biden.jpg", "biden/biden2.jpg")
LATER = ("obama/obama2.jpg", "obama/obama3.jpg", "kit_harington/johnsnow_test1.jpg")
CPU = ("--device", "cpu")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def place(root: Path, names) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(FACES / name, root / name)


def index(root: Path, db: Path, *extra):
    r = run("index", root, "--db", db, "--embedder", MOBILEFACENET, *CPU, *extra)
    assert r.exit_code == 0, r.output
    return r


def clusters(db: Path, *extra) -> dict:
    r = run("cluster", "--db", db, "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def cluster_with(data: dict, photo: str) -> dict:
    return next(c for c in data["clusters"] if any(f["image"].endswith(photo) for f in c["faces"]))


def photos(cluster: dict) -> set[str]:
    return {str(Path(f["image"]).relative_to(Path(f["image"]).parents[1])) for f in cluster["faces"]}


def person(db: Path, name: str) -> set[str]:
    r = run("search", "--person", name, "--db", db, "--json")
    assert r.exit_code == 0, r.output
    return {str(Path(row["image"]).relative_to(Path(row["image"]).parents[1])) for row in json.loads(r.stdout)}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """FIRST indexed, clustered, Obama and Kit named; then LATER indexed (not clustered yet)."""
    if not MOBILEFACENET.exists():
        pytest.skip("shared models not found")
    root = tmp_path_factory.mktemp("library")
    db = root / "faces.db"
    place(root / "photos", FIRST)
    index(root / "photos", db)
    first = clusters(db)
    named = {"Obama": cluster_with(first, "obama/obama.jpg")["id"],
             "Kit": cluster_with(first, "kit_harington/john1.jpeg")["id"]}
    for name, cid in named.items():
        assert run("cluster", "--db", db, "--name", cid, name).exit_code == 0
    place(root / "photos", LATER)
    added = json.loads(index(root / "photos", db, "--json").stdout)["faces"]
    return db, named, added + len(first["noise"])


def test_incremental_cluster_gives_new_photos_to_their_named_person(library, tmp_path):
    db = copy_db(library[0], tmp_path / "faces.db")
    r = run("cluster", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    # only the new faces (and last run's noise) are placed; the named clusters keep their ids
    assert f"placed {library[2]} faces;" in r.stderr and library[2] < 10
    data = json.loads(r.stdout)
    obama, kit = cluster_with(data, "obama/obama.jpg"), cluster_with(data, "kit_harington/john1.jpeg")
    assert (obama["id"], obama["name"], kit["id"], kit["name"]) == (library[1]["Obama"], "Obama",
                                                                      library[1]["Kit"], "Kit")
    assert photos(obama) == {p for p in FIRST + LATER if p.startswith("obama/")}
    assert photos(kit) == {p for p in FIRST + LATER if p.startswith("kit_harington/")}
    # search --person lists exactly the person's photos
    assert person(db, "Obama") == photos(obama)
    r = run("search", "--person", "Obama", "--db", db, "--csv")
    assert r.stdout.splitlines()[0] == "person,image,face_id,x,y,w,h" and len(r.stdout.splitlines()) == 6
    r = run("search", "--person", "Nobody", "--db", db)
    assert r.exit_code == 1 and "no person called 'Nobody'" in r.stderr and "Kit" in r.stderr

    # --all re-clusters everything from scratch and the names follow their people
    again = clusters(db, "--all")
    assert photos(cluster_with(again, "obama/obama.jpg")) == photos(obama)
    assert cluster_with(again, "obama/obama.jpg")["name"] == "Obama"
    assert cluster_with(again, "kit_harington/johnsnow_test1.jpg")["name"] == "Kit"
    assert [c["id"] for c in again["clusters"]] == list(range(1, len(again["clusters"]) + 1))


def test_merge_and_move_end_to_end(library, tmp_path):
    db = copy_db(library[0], tmp_path / "faces.db")
    data = clusters(db)
    lennon, clapton = cluster_with(data, "lennon/lennon-1.jpg"), cluster_with(data, "clapton/clapton-1.jpg")
    assert run("cluster", "--db", db, "--name", lennon["id"], "John").exit_code == 0
    # merge by id and name: the result keeps the name (A has none here, so B's)
    r = run("cluster", "--db", db, "--merge", clapton["id"], "John")
    assert r.exit_code == 0, r.output
    assert person(db, "John") == {"lennon/lennon-1.jpg", "lennon/lennon-2.jpg", "clapton/clapton-1.jpg",
                                  "clapton/clapton-2.jpg"}
    merged = cluster_with(clusters(db, "--show"), "lennon/lennon-1.jpg")
    assert merged["id"] == clapton["id"] and merged["size"] == 4
    # move one face out to a new person, by name
    face = next(f["face_id"] for f in merged["faces"] if f["image"].endswith("clapton-1.jpg"))
    r = run("cluster", "--db", db, "--move", face, "--to", "Eric")
    assert r.exit_code == 0 and "'Eric'" in r.stderr, r.output
    assert person(db, "Eric") == {"clapton/clapton-1.jpg"}
    assert "clapton/clapton-1.jpg" not in person(db, "John")
    # a later incremental run leaves hand-made people as they are
    clusters(db)
    assert person(db, "Eric") == {"clapton/clapton-1.jpg"} and len(person(db, "John")) == 3
    # errors: one line, nothing changed
    for args, message in ((("--merge", "John", "John"), "the same cluster"), (("--merge", "John", "999"), "999"),
                          (("--move", "999999", "--to", "John"), "no such face"), (("--move", face,), "--to"),
                          (("--merge", "John", "Eric", "--all"), "do not go together")):
        r = run("cluster", "--db", db, *args)
        assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, (args, r.output)
    assert person(db, "Eric") == {"clapton/clapton-1.jpg"}


def test_identify_names_faces_after_the_databases_people(library, tmp_path):
    db = copy_db(library[0], tmp_path / "faces.db")
    clusters(db)
    photo = FACES / "group" / "fr_obama_and_biden.jpg"  # not in the database
    r = run("identify", photo, "--known-db", db, "--json", *CPU, "--draw", tmp_path / "drawn")
    assert r.exit_code == 0, r.output
    names = sorted(row["name"] for row in json.loads(r.stdout))
    assert names == ["Obama", "unknown", "unknown"]  # Biden was never named; the third man is nobody here
    assert (tmp_path / "drawn" / "fr_obama_and_biden.png").stat().st_size > 10_000
    # names cleared: a database with no named people says how to name them
    for photo_name in ("obama/obama.jpg", "kit_harington/john1.jpeg"):
        cid = cluster_with(clusters(db, "--show"), photo_name)["id"]
        assert run("cluster", "--db", db, "--name", cid, "").exit_code == 0
    r = run("identify", photo, "--known-db", db, *CPU)
    assert r.exit_code == 1 and "no named people" in r.stderr and "cluster --db" in r.stderr


def test_crowd_faces_below_the_gate_go_to_unsorted(tmp_path, mobilefacenet, yunet_cpu):
    from facerun.people.index import FaceIndex

    crowd = sorted((DATA / "wider" / "images" / "0--Parade").glob("*.jpg"))[:8]
    if not crowd:
        pytest.skip("no WIDER photos")
    root = tmp_path / "photos"
    place(root, ("obama/obama.jpg", "obama/obama1.jpg", "obama/obama2.jpg"))
    (root / "crowd").mkdir()
    for p in crowd:
        shutil.copy2(p, root / "crowd" / p.name)
    db = tmp_path / "faces.db"
    with FaceIndex(db) as ix:
        ix.update([root], embedder=mobilefacenet, detector=yunet_cpu)
        stored = ix.faces()
    small = np.minimum(stored.boxes[:, 2], stored.boxes[:, 3]) < 32
    assert small.sum() >= 20  # the crowd's faces, mostly far below 32 px
    data = clusters(db)
    in_people = {f["face_id"] for c in data["clusters"] for f in c["faces"]}
    unsorted = {f["face_id"] for f in data["unsorted"]}
    assert set(stored.ids[small].tolist()) <= unsorted and not unsorted & in_people
    assert photos(cluster_with(data, "obama/obama.jpg")) == {"obama/obama.jpg", "obama/obama1.jpg",
                                                              "obama/obama2.jpg"}
    r = run("cluster", "--db", db, "--sheets", tmp_path / "sheets")
    assert r.exit_code == 0 and (tmp_path / "sheets" / "unsorted.png").is_file()
    # without the gate the same faces are grouped into people and noise: the gate is what keeps them out
    ungated = clusters(db, "--all", "--min-face", "0", "--min-score", "0")
    assert not ungated["unsorted"]
    assert set(stored.ids[small].tolist()) & {f["face_id"] for c in ungated["clusters"] for f in c["faces"]}
    # index --skip-small does not store them at all
    skipped = tmp_path / "skipped.db"
    index(root, skipped, "--skip-small")
    with FaceIndex(skipped) as ix:
        kept = ix.faces()
    assert len(kept) == len(stored) - int(((np.minimum(stored.boxes[:, 2], stored.boxes[:, 3]) < 32)
                                           | (stored.scores < 0.65)).sum())
    assert np.minimum(kept.boxes[:, 2], kept.boxes[:, 3]).min() >= 32


def test_search_has_one_threshold(faces_db, tmp_path):
    db = copy_db(faces_db, tmp_path / "faces.db")
    query = FACES / "biden" / "biden.jpg"
    r = run("search", query, "--db", db, *CPU)
    assert r.exit_code == 0, r.output
    assert "threshold 0.39 (calibrated)" in r.stderr and "below threshold" not in r.output
    rows = json.loads(run("search", query, "--db", db, *CPU, "--json").stdout)
    assert len(rows) == 4 and min(row["cosine"] for row in rows) >= 0.39
    r = run("search", query, "--db", db, *CPU, "--threshold", "0.2")
    assert "threshold 0.2 (given)" in r.stderr and "0.35" not in r.stderr and "below threshold" not in r.output
    rows = json.loads(run("search", query, "--db", db, *CPU, "--json", "--threshold", "0.2").stdout)
    assert len(rows) > 4 and min(row["cosine"] for row in rows) >= 0.2
    r = run("search", "--db", db)
    assert r.exit_code == 1 and "QUERY photo or --person" in r.stderr


def answer(db) -> list:
    r = run("search", FACES / "lennon" / "lennon-1.jpg", "--db", db, *CPU, "--json", "--threshold", "-1")
    assert r.exit_code == 0, r.output
    return [(row["image"], row["face_id"], round(row["cosine"], 4)) for row in json.loads(r.stdout)], r.stderr


def test_vector_index_missing_stale_or_corrupt_is_rebuilt_with_a_note(faces_db, tmp_path):
    db = copy_db(faces_db, tmp_path / "faces.db")  # the backup API copies the database, not the index beside it
    first, note = answer(db)
    assert "vector index missing; rebuilt from 128 faces" in note
    assert answer(db) == (first, "")  # in step now: no note
    header = Path(str(db) + ".vectors")
    # corrupt: a data file cut short
    data = next(tmp_path.glob("faces.db.vectors.*.f32.npy"))
    data.write_bytes(data.read_bytes()[:1000])
    again, note = answer(db)
    assert again == first and "vector index unreadable" in note and "rebuilt" in note
    # corrupt: a header that is not JSON
    header.write_text("{not json")
    again, note = answer(db)
    assert again == first and "unreadable (bad header" in note
    # stale: the database moved on (a photo removed behind the index's back: generation and count differ)
    kept = header.read_bytes(), {p.name: p.read_bytes() for p in tmp_path.glob("faces.db.vectors.*")}
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("DELETE FROM photos WHERE path LIKE '%lennon-2.jpg'")
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    header.write_bytes(kept[0])
    for name, blob in kept[1].items():
        (tmp_path / name).write_bytes(blob)
    again, note = answer(db)
    assert "stale (128 faces at generation" in note and "127 at" in note
    assert again[:9] == [row for row in first if not row[0].endswith("lennon-2.jpg")]


def test_killed_mid_update_sqlite_keeps_everything_and_the_index_is_rebuilt(faces_db, tmp_path, monkeypatch,
                                                                          mobilefacenet, yunet_cpu):
    from facerun.people import vector_store
    from facerun.people.index import FaceIndex

    db = copy_db(faces_db, tmp_path / "faces.db")
    before, _ = answer(db)
    root = tmp_path / "more"
    place(root, ("lennon/lennon-1.jpg",))  # a second copy of lennon-1: the best match after the query itself

    def killed(self, db_path, conn):
        raise KeyboardInterrupt  # after the faces are committed, before the index is saved

    monkeypatch.setattr(vector_store.Changes, "apply", killed)
    with FaceIndex(db) as ix, pytest.raises(KeyboardInterrupt):
        ix.update([root], embedder=mobilefacenet, detector=yunet_cpu)
    monkeypatch.undo()
    with FaceIndex(db) as ix:
        assert ix.counts()["faces"] == 129  # the photo's face is in SQLite
    after, note = answer(db)
    assert "stale (128 faces" in note and "129 at" in note
    assert after[0][2] == after[1][2] == 1.0 and {after[0][0], after[1][0]} == {
        str(FACES / "lennon" / "lennon-1.jpg"), str(root / "lennon" / "lennon-1.jpg")}
    assert after[2:] == before[1:-1]


def test_index_keeps_the_vector_index_in_step_without_a_rebuild(library, tmp_path):
    from facerun.people.vectors import header_of

    db = copy_db(library[0], tmp_path / "faces.db")
    answer(db)  # builds it
    generation = json.loads(header_of(db).read_text())["generation"]
    root = tmp_path / "photos"
    place(root, ("deepface_id01/img1.jpg", "deepface_id01/img2.jpg"))
    r = index(root, db)
    assert "vector index" not in r.stderr  # added to, not rebuilt
    head = json.loads(header_of(db).read_text())
    import sqlite3

    with sqlite3.connect(db) as conn:
        count = conn.execute("SELECT COUNT(*) FROM faces").fetchone()[0]
        gen = int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
    assert (head["count"], head["generation"]) == (count, gen) and gen > generation
    shutil.rmtree(root / "deepface_id01")
    (root / "deepface_id01").mkdir()
    place(root, ("lennon/lennon-2.jpg",))
    r = index(root, db, "--prune", "--allow-missing")
    head = json.loads(header_of(db).read_text())
    with sqlite3.connect(db) as conn:
        assert head["count"] == conn.execute("SELECT COUNT(*) FROM faces").fetchone()[0] == count - 2 + 1
    assert "vector index" not in answer(db)[1]


def test_an_index_left_beside_a_remade_database_is_not_taken_for_its_own(faces_db, tmp_path):
    from facerun.people.vectors import header_of

    db = copy_db(faces_db, tmp_path / "faces.db")
    first, _ = answer(db)
    old = {p.name: p.read_bytes() for p in tmp_path.glob("faces.db.vectors*")}
    head = json.loads(header_of(db).read_text())
    # the same count and generation, another database: the token in the header tells them apart
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = 'another' WHERE key = 'vectors_token'")
    for name, blob in old.items():
        (tmp_path / name).write_bytes(blob)
    again, note = answer(db)
    assert head["count"] == 128 and "vector index for mobilefacenet" in note and again == first


def test_bench_search_has_clustering_rows():
    r = run("bench", "search", "2000", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["clustering"]
    assert [(row["faces"], row["dim"], row["new"]) for row in rows] == [(2000, 128, 200), (2000, 512, 200)]
    for row in rows:
        assert row["full_purity"] == row["inc_purity"] == row["full_ari"] == row["inc_ari"] == row["recall10"] == 1.0
        assert row["search_p99_ms"] >= row["search_p50_ms"] > 0 and row["peak_mb"] > 50 and row["index_mb"] > 1
    text = run("bench", "search", "2000")
    assert "clustering, synthetic identities" in text.stdout and "recall@10" in text.stdout


def test_identify_through_an_approximate_index_names_as_the_exact_gallery_does():
    """A large database's gallery is searched through its IVF index first; the names and cosines must be the exact
    gallery's (a query whose near faces hold no gallery face falls back to the exact product)."""
    from facerun.people.identify import Gallery, match
    from facerun.people.scale import identities
    from facerun.people.vectors import VectorIndex, have_faiss

    if not have_faiss():
        pytest.skip("faiss not installed")
    data, person = identities(6000, 128)
    ids = np.arange(10, 6010)
    index = VectorIndex(ids, data, ann=True, ann_min=1000)
    assert index.kind == "faiss-ivf"
    named = np.flatnonzero(person < 40)[::3]  # a few faces of 40 people are the gallery
    exact = Gallery(names=[f"p{person[i]}" for i in named], images=[""] * len(named), embeddings=data[named])
    through = Gallery(names=exact.names, images=exact.images, embeddings=exact.embeddings, face_ids=ids[named],
                      index=index)
    rng = np.random.default_rng(5)
    queries = data[rng.choice(len(data), 300, replace=False)] + 0.04 * rng.standard_normal((300, 128), np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    want, got = match(exact, queries, 0.39), match(through, queries, 0.39)
    assert [n for n, _ in got] == [n for n, _ in want]
    assert np.allclose([c for _, c in got], [c for _, c in want], atol=1e-5)
    assert sum(n != "unknown" for n, _ in got) > 20 and sum(n == "unknown" for n, _ in got) > 100
