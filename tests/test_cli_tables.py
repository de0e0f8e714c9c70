"""The tables a user reads at 80 columns, on the shared photos: file names whole (relative to the inputs' common
folder, one rule for search, identify, embed and cluster), boxes in whole pixels without -0, counts in the right
number."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, YUNET, need_real_data

from facerun.cli import main
from facerun.commands import common

WIDTH = 80


@pytest.fixture(autouse=True)
def _narrow(monkeypatch):
    """An 80-column terminal for the tables, whatever the terminal running the tests is."""
    need_real_data()
    monkeypatch.setattr(common.out, "_width", WIDTH)
    monkeypatch.setattr(common.err, "_width", WIDTH)


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    return result


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("│")]


def assert_whole(names, text: str) -> None:
    """Every name sits whole on one line of the table, and no cell was cut short."""
    lines = table_lines(text)
    assert lines and all(len(line) <= WIDTH for line in lines)
    for name in names:
        assert any(name in line for line in lines), f"{name} not shown whole in:\n{text}"
    assert "…" not in text


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    """The group photos and Obama's indexed with MobileFaceNet (on the CPU)."""
    need_real_data()
    from facerun.face.detect import Detector
    from facerun.face.embed import Embedder
    from facerun.people.index import FaceIndex

    path = tmp_path_factory.mktemp("tables") / "faces.db"
    with FaceIndex(path) as index:
        index.update([FACES / "group", FACES / "obama"], embedder=Embedder(str(MOBILEFACENET), device="cpu"),
                     detector=Detector(str(YUNET), device="cpu"))
    return path


def test_search_names_photos_relative_to_their_common_folder_and_whole(small_db):
    result = run("search", FACES / "obama" / "obama.jpg", "--db", small_db, "--device", "cpu", "--top", "12")
    found = json.loads(run("search", FACES / "obama" / "obama.jpg", "--db", small_db, "--device", "cpu", "--top", "12",
                           "--json").stdout)
    assert len(found) == 12 and {m["image"].split("/")[-2] for m in found} == {"group", "obama"}
    assert f"under {FACES}" in result.stdout
    names = [str(Path(m["image"]).relative_to(FACES)) for m in found]
    assert_whole(names, result.stdout)
    assert str(FACES) not in "\n".join(table_lines(result.stdout))  # the shared prefix is said once, above


def test_identify_and_embed_show_each_photo_name_whole(tmp_path):
    known = tmp_path / "known"
    for person, photo in (("obama", "obama/obama.jpg"), ("biden", "biden/biden.jpg")):
        (known / person).mkdir(parents=True)
        shutil.copy(FACES / photo, known / person)
    photos = [FACES / "group" / "fr_obama_and_biden.jpg", FACES / "group" / "facenet-pytorch_multiface.jpg",
              FACES / "obama" / "obama-480p.jpg"]
    identified = run("identify", *photos, "--known", known, "--device", "cpu")
    rows = table_lines(identified.stdout)
    assert_whole(["group/fr_obama_and_biden.jpg", "group/facenet-pytorch_multiface.jpg", "obama/obama-480p.jpg"],
                 identified.stdout)
    assert any("group/fr_obama_and_biden.jpg" in r and "obama" in r.split("│")[2] for r in rows)
    embedded = run("embed", *photos, "--device", "cpu", "--all-faces")
    assert_whole(["group/fr_obama_and_biden.jpg", "group/facenet-pytorch_multiface.jpg", "obama/obama-480p.jpg"],
                 embedded.stdout)
    assert embedded.stdout.startswith(f"{len(table_lines(embedded.stdout.split('summary')[0]))} faces under {FACES}")


def test_cluster_names_photos_by_the_same_rule(small_db, tmp_path):
    pytest.importorskip("sklearn")
    from people_fixtures import copy_db

    db = copy_db(small_db, tmp_path / "faces.db")
    result = run("cluster", "--db", db)
    assert f"photos under {FACES}" in result.stdout.splitlines()[0]
    assert re.search(r"\bobama/obama-\d+p\.jpg", result.stdout)


def test_boxes_print_in_whole_pixels_without_minus_zero(tmp_path):
    from PIL import Image

    # one row more at the top moves this face's top edge to y = -0.4: printed as 0, never -0
    rgb = np.asarray(Image.open(FACES / "Tom_Hanks" / "Tom_Hanks_54745.png").convert("RGB"))
    photo = tmp_path / "tom-padded.png"
    Image.fromarray(np.concatenate([rgb[:1], rgb], axis=0)).save(photo)
    box = json.loads(run("embed", photo, "--device", "cpu", "--json").stdout)[0]["box"]
    assert -0.5 < box[1] < 0, box  # the case under test: an edge a hair above the photo
    shown = ",".join(str(int(round(v))) for v in box)
    assert "-0" not in shown
    result = run("embed", photo, "--device", "cpu")
    assert shown in result.stdout
    assert not re.search(r"(^|[ ,│])-0([ ,│]|$)", result.stdout)
    assert common.fmt_box((6.2, -0.3, 121.0, 145.6)) == "6,0,121,146"
    assert common.fmt_box((-5.4, 0, 1, 2)) == "-5,0,1,2"  # a real negative edge stays


def test_counts_are_in_the_right_number(tmp_path):
    known = tmp_path / "known"
    (known / "obama").mkdir(parents=True)
    shutil.copy(FACES / "obama" / "obama.jpg", known / "obama")
    one = run("identify", FACES / "obama" / "obama-480p.jpg", "--known", known, "--device", "cpu")
    assert "1 known person (1 face), 1 face in 1 photo," in one.stderr
    embedded = run("embed", FACES / "obama" / "obama-480p.jpg", "--device", "cpu")
    assert embedded.stdout.startswith("1 face under ")
    assert [common.plural(n, "photo") for n in (0, 1, 2, 1234)] == ["0 photos", "1 photo", "2 photos",
                                                                    "1,234 photos"]
    assert common.plural(1, "person", "people") == "1 person" and common.plural(3, "person", "people") == "3 people"


def test_models_list_never_wraps_a_model_name():
    from facerun.zoo.known import KNOWN

    lines = table_lines(run("models", "list").stdout)
    for model in KNOWN:
        assert any(line.startswith(f"│ {model.name} ") for line in lines), model.name


def test_short_paths_keeps_uris_and_what_was_typed_relative_to_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert common.short_paths(["a/x.jpg", "a/b/y.jpg"]) == ("", ["a/x.jpg", "a/b/y.jpg"])
    root, names = common.short_paths([tmp_path / "p" / "a" / "x.jpg", tmp_path / "p" / "b" / "y.jpg",
                                      "s3://bucket/z.jpg"])
    assert root == str(tmp_path / "p") and names == ["a/x.jpg", "b/y.jpg", "s3://bucket/z.jpg"]
    assert common.short_paths([tmp_path / "one.jpg"]) == (str(tmp_path), ["one.jpg"])
