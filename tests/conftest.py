"""Shared fixtures. Real models and photos come from ../shared (or $FACERUN_MODELS / $FACERUN_DATA); they are never
committed into the project."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from people_fixtures import faces_db, mobilefacenet, yunet_cpu  # noqa: F401  (the shared photos indexed once)
from shared_paths import DATA, MODELS

from gpu_fixtures import gpu, gpu_model  # noqa: F401  (shared GPU fixtures: skip without an adapter, fail under CI)

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # the tests run the bounds-checked build of every kernel (test_gpu_trusted compares the trusted one with it)
    os.environ.setdefault("FACERUN_GPU_CHECKED", "1")
    # every test's models check the GPU anew (tests/test_gpu_verdicts.py turns the kept checks on): a test that
    # makes the GPU or the CPU answer wrong must meet the check, whatever an earlier test kept
    os.environ.setdefault("FACERUN_GPU_CHECK_CACHE", "off")


# facerun itself reads FACERUN_MODELS; point it at the shared models for every test
os.environ.setdefault("FACERUN_MODELS", str(MODELS))


@pytest.fixture(scope="session", autouse=True)
def hermetic_cache(tmp_path_factory):
    """facerun's cache (fetched models, replicas) in a folder of this test session, never the user's: a replica is
    written once per run (auraface-arch takes 260 MB), and a test changing the cache cannot touch ~/.cache."""
    folder = tmp_path_factory.mktemp("facerun-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FACERUN_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not (MODELS / "face_detection_yunet_2023mar.onnx").exists():
        pytest.skip(f"real models not found in {MODELS} (set FACERUN_MODELS)")
    return MODELS


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "faces").is_dir():
        pytest.skip(f"photos not found in {DATA} (set FACERUN_DATA)")
    return DATA


def real_model(name: str) -> Path:
    p = MODELS / name
    if not p.exists():
        pytest.skip(f"{name} not found in {MODELS}")
    return p
