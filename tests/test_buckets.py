"""The library run's detect stage (face/buckets.py) with a detector that records what it is asked: photos gathered by
bucket, a batch submitted when full, the batch before read back while the device runs the new one, and the photo the
reorder buffer wants forced out."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from facerun.face.buckets import Buckets
from facerun.face.library import LibraryStats
from facerun.face.photo_detector import PhotoDetector


@dataclass
class _Prepared:
    bucket: int


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


def _done() -> Future:
    f = Future()
    f.set_result(None)
    return f


def _run():
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or _done(), lambda photo: None, size=2)
    slots = [buckets.add(_Photo(_Prepared(b), _Result())) for b in (1, 1, 2, 2, 3, 3)]
    return det.log, buckets, slots, posted


def test_a_submission_reads_the_batch_before_it():
    log, buckets, slots, posted = _run()
    assert log == [("submit", (1, 1)), ("submit", (2, 2)), ("read", (1, 1)), ("submit", (3, 3)), ("read", (2, 2))]
    assert len(buckets.inflight) == 1 and len(posted) == 4 and buckets.held == 2
    slots[-1].result()  # the reorder buffer wants a photo of the batch still running: it is read now
    assert log[5:] == [("read", (3, 3))] and all(s.future is not None for s in slots)


def test_many_half_full_buckets_run_the_fullest():
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or _done(), lambda photo: None, size=4)
    for b in (1, 2, 2, 3, 3, 3, 4, 4, 5):  # past twice the batch held: the fullest group (3) runs
        buckets.add(_Photo(_Prepared(b), _Result()))
    assert det.log == [("submit", (3, 3, 3))] and sorted(buckets.groups) == [1, 2, 4, 5]


def test_a_batch_of_photos_may_wait_on_post_processing_once_batches_run():
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or _done(), lambda photo: None, size=3)
    buckets.add(_Photo(_Prepared(1), _Result()))
    assert buckets.batch_slack == 0  # nothing ran in batches: photos are handed on as before
    for _ in range(2):
        buckets.add(_Photo(_Prepared(1), _Result()))
    assert det.log == [("submit", (1, 1, 1))] and buckets.batch_slack == 3


def test_more_photos_may_be_held_while_batches_fill(monkeypatch):
    monkeypatch.setenv("FACERUN_PHOTO_HELD", "12")
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or _done(), lambda photo: None, size=4)
    for b in (1, 2, 2, 3, 3, 3, 4, 4, 5, 2, 2):  # past twice the batch held, nothing runs until bucket 2 fills
        buckets.add(_Photo(_Prepared(b), _Result()))
    assert det.log == [("submit", (2, 2, 2, 2))] and buckets.held == 11  # 7 gathering, 4 in flight
    buckets.add(_Photo(_Prepared(6), _Result()))
    assert len(det.log) == 1  # twelve held
    buckets.add(_Photo(_Prepared(7), _Result()))  # thirteen: the fullest (3) runs
    assert det.log[1:] == [("submit", (3, 3, 3)), ("read", (2, 2, 2, 2))]


def test_a_photo_wanted_soon_has_its_group_submitted_without_waiting_for_it():
    det, posted = _Recording(), []
    buckets = Buckets(det, LibraryStats(), lambda photo: posted.append(photo) or _done(), lambda photo: None, size=4)
    slots = [buckets.add(_Photo(_Prepared(b), _Result())) for b in (1, 2, 2)]
    assert det.log == [] and buckets.hurry(slots[0])  # gathering: submitted now, nothing read
    assert det.log == [("submit", (1,))] and slots[0].future is None and 1 not in buckets.groups
    assert buckets.hurry(slots[0]) and len(det.log) == 1  # in flight: still waiting, not submitted again
    buckets.hurry(slots[1])  # the next batch goes in: the one before is read back
    assert det.log[1:] == [("submit", (2, 2)), ("read", (1,))] and slots[0].future is not None
    assert not buckets.hurry(slots[0]) and len(det.log) == 3  # handed on: nothing to do
