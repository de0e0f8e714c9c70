"""Photos that go away (issue 34): an empty or mostly-lost folder is refused untouched, photos not found are marked
missing and kept with their faces, `--prune` deletes them, names survive, symlinked folders are followed."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, SMALL_PHOTOS, YUNET, copy_photos

from facerun.cli import main
from facerun.people.index import FaceIndex

# two photos of one person (they cluster together), then five of others
PENNY = ("Anthony_Hopkins/Anthony_Hopkins_0001.jpg", "Anthony_Hopkins/Anthony_Hopkins_0002.jpg")
OTHERS = ("clapton/clapton-2.jpg", "deepface_id13/img25.jpg", "deepface_id01/img5.jpg", "obama/obama_small.jpg",
          "obama/obama-240p.jpg")


# the tables of schema 1 (facerun before missing photos and people)
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, mtime REAL NOT NULL,
    sha256 TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL, indexed_at TEXT NOT NULL);
CREATE TABLE faces (id INTEGER PRIMARY KEY, photo_id INTEGER NOT NULL REFERENCES photos(id) ON DELETE CASCADE,
    x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL, h REAL NOT NULL, score REAL NOT NULL, landmarks TEXT NOT NULL,
    model TEXT NOT NULL, embedding BLOB NOT NULL, cluster INTEGER);
CREATE INDEX faces_photo ON faces(photo_id);
CREATE TABLE clusters (id INTEGER PRIMARY KEY, name TEXT, size INTEGER NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""


@pytest.fixture(autouse=True)
def _models():
    for path in (MOBILEFACENET, YUNET, FACES):
        if not path.exists():
            pytest.skip(f"{path} not found (set FACERUN_MODELS / FACERUN_DATA)")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def index(lib, db, *extra):
    return run("index", lib, "--db", db, "--model", MOBILEFACENET, "--device", "cpu", *extra)


def index_json(lib, db, *extra) -> dict:
    r = index(lib, db, "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def dump(db: Path) -> dict:
    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in tables}


def faces_of(db: Path, folder: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT f.id, p.sha256, f.x, f.y, f.w, f.h FROM faces f JOIN photos p ON p.id = "
                            "f.photo_id WHERE p.path LIKE ? ORDER BY f.id", (f"%/{folder}/%",)).fetchall()


def penny_library(lib: Path) -> None:
    """lib/penny/ (two photos of one person) and five photos of others in their own folders."""
    for name in PENNY:
        (lib / "penny").mkdir(parents=True, exist_ok=True)
        shutil.copy2(FACES / name, lib / "penny" / Path(name).name)
    copy_photos(lib, OTHERS)


def cluster_named(db: Path, name: str) -> dict | None:
    r = run("cluster", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    named = [c for c in json.loads(r.stdout)["clusters"] if c["name"] == name]
    assert len(named) <= 1
    return named[0] if named else None


def test_empty_or_mostly_lost_root_is_refused_and_nothing_changes(tmp_path):
    lib, db = tmp_path / "lib", tmp_path / "faces.db"
    copy_photos(lib, SMALL_PHOTOS[:5])
    assert index_json(lib, db)["added"] == 5
    before, before_bytes = dump(db), db.read_bytes()

    lib.rename(tmp_path / "lib_unmounted")
    lib.mkdir()  # the mount point is there, the drive is not
    r = index(lib, db)
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "holds no photos" in lines[0]
    assert "--allow-missing" in lines[0] and "5 indexed photos" in lines[0]
    assert db.read_bytes() == before_bytes and dump(db) == before

    # three of the five folders gone: more than half of what was indexed under the root
    lib.rmdir()
    (tmp_path / "lib_unmounted").rename(lib)
    for name in SMALL_PHOTOS[:3]:
        shutil.move(lib / Path(name).parent, tmp_path / Path(name).parent.name)
    for extra in ((), ("--prune",)):
        r = index(lib, db, *extra)
        assert r.exit_code == 1 and "3 of its 5 indexed photos are gone" in r.stderr, r.output
        assert db.read_bytes() == before_bytes and dump(db) == before

    # told to go on, the three are marked missing, not deleted
    report = index_json(lib, db, "--allow-missing")
    assert (report["missing"], report["removed"], report["unchanged"]) == (3, 0, 2)
    assert (report["photos_total"], report["photos_missing"]) == (2, 3)
    assert len(dump(db)["photos"]) == 5 and dump(db)["faces"] == before["faces"]


def test_lost_subfolder_is_marked_missing_comes_back_and_is_pruned(tmp_path):
    lib, db = tmp_path / "lib", tmp_path / "faces.db"
    copy_photos(lib, SMALL_PHOTOS[:6])  # the sixth, in group/, holds two faces
    first = index_json(lib, db)
    assert first["added"] == 6
    group = faces_of(db, "group")
    assert len(group) == 2

    shutil.move(lib / "group", tmp_path / "group")
    report = index_json(lib, db)
    assert (report["missing"], report["removed"], report["unchanged"], report["faces"]) == (1, 0, 5, 0)
    assert (report["photos_missing"], report["faces_missing"]) == (1, 2)
    assert report["photos_total"] == 5 and report["faces_total"] == first["faces_total"] - 2
    assert faces_of(db, "group") == group  # kept, as they were
    with FaceIndex(db) as fi:  # ... but left out of what search, identify and cluster read
        assert not set(fi.faces().ids.tolist()) & {f[0] for f in group}
    listed = json.loads(run("index", "--list-missing", "--db", db, "--json").stdout)["missing"]
    assert [(Path(m["image"]).name, m["faces"]) for m in listed] == [(Path(SMALL_PHOTOS[5]).name, 2)]
    assert "1 photo missing" in index(lib, db).stdout

    # back unchanged: unmarked, nothing detected again, the same face ids
    shutil.move(tmp_path / "group", lib / "group")
    report = index_json(lib, db)
    assert (report["back"], report["missing"], report["added"], report["faces"]) == (1, 0, 0, 0)
    assert faces_of(db, "group") == group and report["photos_missing"] == 0

    # gone again and pruned: deleted, and the summary says how many
    shutil.move(lib / "group", tmp_path / "group")
    r = index(lib, db, "--prune")
    assert r.exit_code == 0, r.output
    assert "1 now missing" in r.stdout and "pruned 1 missing photo and 2 faces" in r.stdout
    assert faces_of(db, "group") == [] and len(dump(db)["photos"]) == 5
    assert json.loads(run("index", "--list-missing", "--db", db, "--json").stdout)["missing"] == []


def test_a_name_survives_missing_prune_and_reclustering(tmp_path):
    lib, db = tmp_path / "lib", tmp_path / "faces.db"
    penny_library(lib)
    assert index_json(lib, db)["added"] == 7
    r = run("cluster", "--db", db, "--json")
    penny = next(c for c in json.loads(r.stdout)["clusters"] if all("/penny/" in f["image"] for f in c["faces"]))
    assert penny["size"] == 2
    assert run("cluster", "--db", db, "--name", penny["id"], "Penny").exit_code == 0
    faces = faces_of(db, "penny")

    # missing, and clustered while missing: no cluster holds her, the name is kept
    shutil.move(lib / "penny", tmp_path / "penny")
    assert index_json(lib, db)["missing"] == 2
    assert cluster_named(db, "Penny") is None
    # back: clustering again finds her, named, with the same faces
    shutil.move(tmp_path / "penny", lib / "penny")
    assert index_json(lib, db)["back"] == 2
    named = cluster_named(db, "Penny")
    assert named is not None and sorted(f["face_id"] for f in named["faces"]) == [f[0] for f in faces]

    # an unrelated folder pruned: the name stays on her cluster
    shutil.rmtree(lib / "clapton")
    report = index_json(lib, db, "--prune")
    assert (report["removed"], report["removed_faces"]) == (1, 1)
    assert cluster_named(db, "Penny") is not None

    # her photos pruned (the person stays, with no faces), then indexed afresh: new rows, the name comes back
    shutil.move(lib / "penny", tmp_path / "penny")
    assert index_json(lib, db, "--prune")["removed"] == 2
    assert faces_of(db, "penny") == [] and [n for _, n in dump(db)["people"]] == ["Penny"]
    shutil.move(tmp_path / "penny", lib / "penny")
    assert index_json(lib, db)["added"] == 2
    named = cluster_named(db, "Penny")
    assert named is not None and all("/penny/" in f["image"] for f in named["faces"]) and named["size"] == 2


def test_linked_folders_are_indexed_and_skipped_links_counted(tmp_path):
    lib, elsewhere, db = tmp_path / "lib", tmp_path / "elsewhere", tmp_path / "faces.db"
    copy_photos(lib / "real", SMALL_PHOTOS[:2])
    copy_photos(elsewhere, SMALL_PHOTOS[2:4])
    (lib / "linked").symlink_to(elsewhere, target_is_directory=True)  # a library organised with links
    (lib / "real" / "loop").symlink_to(lib, target_is_directory=True)  # encloses itself
    (lib / "again").symlink_to(lib / "real", target_is_directory=True)  # the same photos a second way
    (lib / "dead").symlink_to(tmp_path / "unmounted")  # broken
    report = index_json(lib, db)
    assert report["added"] == 4 and report["links_followed"] == 1
    assert report["skipped"] == {"link_loops": 1, "duplicate_links": 1, "broken_links": 1, "unreadable_folders": 0}
    assert {Path(s["path"]).name: s["reason"] for s in report["skipped_paths"]} == {
        "loop": "link_loops", "again": "duplicate_links", "dead": "broken_links"}
    with sqlite3.connect(db) as conn:
        paths = sorted(p for (p,) in conn.execute("SELECT path FROM photos"))
    # each photo at the path it was found at, the real path when there are two
    assert sum(1 for p in paths if p.startswith(str(lib.resolve() / "linked") + "/")) == 2
    assert sum(1 for p in paths if p.startswith(str(lib.resolve() / "real") + "/")) == 2
    text = index(lib, db).stdout
    assert "followed 1 link; skipped 1 link loop, 1 link to a photo or folder already listed, 1 broken link" in text

    # the link removed: its photos are missing, not silently dropped
    (lib / "linked").unlink()
    report = index_json(lib, db)
    assert (report["missing"], report["removed"], report["photos_missing"]) == (2, 0, 2)


def test_a_schema_1_database_is_upgraded_keeping_rows_and_names(tmp_path):
    lib, db = tmp_path / "lib", tmp_path / "faces.db"
    penny_library(lib)
    assert index_json(lib, tmp_path / "v2.db")["added"] == 7
    with sqlite3.connect(db) as conn:  # what the previous facerun wrote, a named cluster in it
        conn.executescript(SCHEMA_1)
        conn.execute("ATTACH ? AS v2", (str(tmp_path / "v2.db"),))
        conn.executescript("INSERT INTO photos SELECT id, path, size, mtime, sha256, width, height, indexed_at "
                           "FROM v2.photos; INSERT INTO faces SELECT * FROM v2.faces; INSERT INTO meta SELECT * FROM "
                           "v2.meta WHERE key != 'schema_version'; INSERT INTO clusters VALUES (1, 'Penny', 2);"
                           "UPDATE faces SET cluster = 1 WHERE photo_id IN "
                           "(SELECT id FROM photos WHERE path LIKE '%/penny/%');")
        conn.commit()
        old = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("photos", "faces", "clusters")}
    with FaceIndex(db) as fi:
        assert fi.meta()["schema_version"] == "2" and fi.counts()["faces"] == 7
    new = dump(db)
    assert new["photos"] == old["photos"] and new["missing"] == []
    assert new["faces"] == old["faces"] and new["clusters"] == old["clusters"]
    assert [n for _, n in new["people"]] == ["Penny"] and len(new["person_faces"]) == 2
    assert cluster_named(db, "Penny")["size"] == 2
