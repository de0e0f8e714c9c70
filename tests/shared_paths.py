"""Where the tests find the real models and photos: $FACERUN_MODELS (its first folder) and $FACERUN_DATA, else
../shared beside the clone. Nothing here is committed; a test that needs them skips when they are not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MODELS = Path((os.environ.get("FACERUN_MODELS") or "").split(os.pathsep)[0] or SHARED / "models")
DATA = Path(os.environ.get("FACERUN_DATA") or SHARED / "data")

HAVE_PHOTOS = (DATA / "faces").is_dir()
# for a module whose every test reads the shared photos
need_photos = pytest.mark.skipif(not HAVE_PHOTOS, reason=f"photos not found in {DATA} (set FACERUN_DATA)")
