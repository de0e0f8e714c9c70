"""The library run's detect stage (face/buckets.py) with a detector that records what it is asked: photos gathered by
bucket, a batch submitted when full, and FACERUN_PHOTO_INFLIGHT batches left running while the next is gathered."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pytest

from facerun.face.buckets import Buckets
from facerun.face.library import LibraryStats
from facerun.face.photo_detector import PhotoDetector


@dataclass
class _Prepared:
    bucket: int
    shape: tuple = ()


@dataclass
class _Photo:
    prepared: _Prepared
    result: object
    release: object = None
    rgb: object = None


@dataclass
class _Result:
    detect_ms: float = 0.0


class _Recording(PhotoDetector):
    """Submissions and reads in the order they came: ('submit', buckets) and ('read', buckets)."""

    def __init__(self):
        self.log = []

    def fit_size(self, width, height):
        return None

    def prepare(self, pixels, shrunk=None, photo_size=None):
        raise NotImplementedError

    def run_network(self, prepared):
        raise NotImplementedError

    def faces_from(self, prepared):
        return []

    def batch_key(self, prepared):
        return prepared.bucket

    def submit_networks(self, prepared):
        buckets = tuple(p.bucket for p in prepared)
        self.log.append(("submit", buckets))
        return lambda: self.log.append(("read", buckets)) or prepared


def _run(monkeypatch, inflight: str):
    monkeypatch.setenv("FACERUN_PHOTO_INFLIGHT", inflight)
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or Future(), lambda photo: None, size=2)
    slots = [buckets.add(_Photo(_Prepared(b), _Result())) for b in (1, 1, 2, 2, 3, 3)]
    return det.log, buckets, slots, posted


def test_one_batch_in_flight_reads_the_one_before_at_each_submission(monkeypatch):
    log, buckets, _, posted = _run(monkeypatch, "1")
    assert log == [("submit", (1, 1)), ("submit", (2, 2)), ("read", (1, 1)), ("submit", (3, 3)), ("read", (2, 2))]
    assert len(buckets.inflight) == 1 and len(posted) == 4 and buckets.held == 2


def test_two_batches_in_flight_read_the_one_two_back(monkeypatch):
    log, buckets, slots, posted = _run(monkeypatch, "2")
    assert log == [("submit", (1, 1)), ("submit", (2, 2)), ("submit", (3, 3)), ("read", (1, 1))]
    assert len(buckets.inflight) == 2 and len(posted) == 2 and buckets.held == 4
    slots[-1].buckets.force(slots[-1])  # the reorder buffer wants a photo of the newest batch: read in order
    assert log[4:] == [("read", (2, 2))]
    assert np.array_equal([s.future is not None for s in slots], [True] * 4 + [False] * 2)


def test_the_setting_takes_one_or_two(monkeypatch):
    from facerun import settings
    from facerun.errors import InputError

    monkeypatch.setenv("FACERUN_PHOTO_INFLIGHT", "3")
    with pytest.raises(InputError, match="1 or 2"):
        settings.get("FACERUN_PHOTO_INFLIGHT")
