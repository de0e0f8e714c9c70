"""Fixtures for the face index tests: the real models on the CPU, and the shared photos indexed once per session
(embedding them is the expensive part, so every test reads that one database or a copy of it)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from shared_paths import DATA, MODELS

FACES = DATA / "faces"
MOBILEFACENET = MODELS / "MobileFaceNet.onnx"
YUNET = MODELS / "face_detection_yunet_2023mar.onnx"

# one frame at four resolutions and a downscale of another photo: kept in the index, left out of the scores so
# that a near-copy does not count as a second photo of the person
NEAR_COPIES = ("obama/obama-240p.jpg", "obama/obama-480p.jpg", "obama/obama-720p.jpg", "obama/obama_small.jpg")

# small photos (fast to index) with one to six faces, for the tests that index copies
SMALL_PHOTOS = ("Anthony_Hopkins/Anthony_Hopkins_0001.jpg", "clapton/clapton-2.jpg", "deepface_id13/img25.jpg",
                "deepface_id01/img5.jpg", "deepface_id05/img62.jpg", "group/openface_longoria-cooper.jpg",
                "group/deepface_selfie-many-people.jpg", "group/fr_kit_with_rose.jpg")


def need_real_data() -> None:
    for path in (MOBILEFACENET, YUNET, FACES):
        if not path.exists():
            pytest.skip(f"{path} not found (set FACERUN_MODELS / FACERUN_DATA)")


@pytest.fixture(scope="session")
def mobilefacenet():
    need_real_data()
    from facerun.face.embed import Embedder

    return Embedder(str(MOBILEFACENET), device="cpu")


@pytest.fixture(scope="session")
def yunet_cpu():
    need_real_data()
    from facerun.face.detect import Detector

    return Detector(str(YUNET), device="cpu")


@pytest.fixture(scope="session")
def faces_db(tmp_path_factory, mobilefacenet, yunet_cpu) -> Path:
    """Every shared face photo indexed with MobileFaceNet (read-only for tests: copy it to change it)."""
    from facerun.people.index import FaceIndex

    path = tmp_path_factory.mktemp("faces-db") / "faces.db"
    with FaceIndex(path) as index:
        report = index.update([FACES], embedder=mobilefacenet, detector=yunet_cpu)
    assert not report.failed and report.added > 50
    return path


def copy_db(source: Path, target: Path) -> Path:
    """A consistent copy of a WAL database (the backup API, not a file copy that could miss the WAL)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return target


def copy_photos(target: Path, names=SMALL_PHOTOS, copies: int = 1) -> list[Path]:
    """Copies of shared photos under target/<identity>/..., `copies` of each (name suffixed _c1, _c2 ...)."""
    written = []
    for name in names:
        src = FACES / name
        folder = target / Path(name).parent
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(copies):
            dst = folder / (src.name if copies == 1 else f"{src.stem}_c{i}{src.suffix}")
            shutil.copy2(src, dst)
            written.append(dst)
    return written
