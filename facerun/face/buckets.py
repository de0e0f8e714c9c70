"""The library run's detect stage on the GPU: photos gathered by bucket into batches run in one submission each,
two in flight, and the reorder buffer that hands them on in input order.

The detector says which photos may share a submission (`PhotoDetector.batch_key`) and runs them
(`submit_networks`); the library hands in how a photo goes on (`post`: its post-processing future) and how one runs
alone (`detect`), so this module needs nothing above it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from .. import phases, settings
from .photo_detector import PhotoDetector


def photo_batch() -> int:
    """Photos of one GPU bucket run in one submission (gpu/batch.py; two such submissions in flight): the setting's."""
    return settings.get("FACERUN_PHOTO_BATCH")


class Slot:
    """One photo's place in the pipelined run's output order (the reorder buffer): its post-processing future once
    its network ran, which `result()` forces (its bucket's batch run now) if it has not."""

    def __init__(self, buckets: Buckets | None = None, future: Future | None = None):
        self.buckets, self.future = buckets, future

    def done(self) -> bool:
        return self.future is not None and self.future.done()

    def result(self):
        while self.future is None:
            self.buckets.force(self)
        return self.future.result()


class Buckets:
    """The detect stage's photos gathered by GPU bucket (prepared.bucket) into batches of up to `size`, each run
    in one submission (Detector.submit_networks); the newest batch is left running on the device while the one
    before is read back and handed to post-processing (`post(photo)` -> its future). Photos without a bucket run
    alone at once."""

    def __init__(self, detector: PhotoDetector, stats, post: Callable, detect: Callable, size: int | None = None):
        self.detector, self.stats, self.post, self.detect = detector, stats, post, detect
        self.size = photo_batch() if size is None else size
        # photos held while their groups fill, at most (a folder meets many buckets: more held, fuller batches)
        self.most = settings.get("FACERUN_PHOTO_HELD") or 2 * self.size
        self.groups: dict[tuple, list] = {}  # bucket -> [(photo, slot)], in input order
        self.inflight: deque = deque()  # (finish, [(photo, slot)], seconds so far)
        self.batched = False  # a batch of photos was submitted

    @property
    def batch_slack(self) -> int:
        """Photos a batch read back hands to post-processing at once (0 until a batch ran)."""
        return self.size if self.batched else 0

    @property
    def held(self) -> int:
        return sum(map(len, self.groups.values())) + sum(len(g) for _, g, _ in self.inflight)

    def add(self, photo) -> Slot:
        key = self.detector.batch_key(photo.prepared) if self.size > 1 else None
        if key is None:
            self.detect(photo)
            return Slot(future=self.post(photo))
        slot = Slot(self)
        group = self.groups.setdefault(key, [])
        group.append((photo, slot))
        if len(group) >= self.size:
            self.flush(key)
        elif self.held > self.most:  # many buckets half full: run the fullest, memory stays bounded
            self.idle()
        return slot

    def flush(self, key) -> None:
        group = self.groups.pop(key)
        self.batched = True
        start = time.perf_counter()
        with phases.recording(self.stats.clock):  # the runners' phases (phases.py)
            finish = self.detector.submit_networks([p.prepared for p, _ in group])
        self.inflight.append((finish, group, time.perf_counter() - start))
        while len(self.inflight) > 1:  # read the batch before while the device runs this one
            self.finish_oldest()

    def finish_oldest(self) -> None:
        finish, group, seconds = self.inflight.popleft()
        start = time.perf_counter()
        with phases.recording(self.stats.clock):
            finish()
        share = (seconds + time.perf_counter() - start) / len(group)
        for photo, slot in group:
            if photo.release is not None:  # the batch ran: the photos' decoder slots are free
                photo.release()
                photo.release, photo.rgb = None, None
            photo.result.detect_ms += share * 1000.0
            self.stats.add("detect", share)
            slot.future = self.post(photo)

    def idle(self) -> None:
        """Run the fullest group now (the decoders have nothing ready: the device would wait)."""
        if self.groups:
            self.flush(max(self.groups, key=lambda k: len(self.groups[k])))

    def hurry(self, slot: Slot) -> bool:
        """Whether `slot`'s photo still waits on the device; its group, if still gathering, is submitted now, without
        waiting for it (its batch is read back when the next one goes in, as any batch is): the reorder buffer wants
        it soon, and forcing it would leave the device idle while this thread read it back."""
        if slot.future is not None:
            return False
        key = self._gathering(slot)
        if key is not None:
            self.flush(key)
        return True

    def _gathering(self, slot: Slot):
        """The key of the group `slot`'s photo is gathering in, or None (it is in flight)."""
        return next((k for k, g in self.groups.items() if any(s is slot for _, s in g)), None)

    def force(self, slot: Slot) -> None:
        """Run what `slot`'s photo waits on: its batch in flight, else its group."""
        if any(s is slot for _, g, _ in self.inflight for _, s in g):
            self.finish_oldest()
            return
        self.flush(self._gathering(slot))
        if slot.future is None:
            self.finish_oldest()
