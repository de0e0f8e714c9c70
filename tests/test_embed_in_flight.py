"""Embedding batches left running on the device: `Embedder.submit` gives `embed`'s vectors (bit for bit, the same
program), the next submission reads the last one back first, a failure at read-back gives the CPU's vectors, and the
library run's batcher submits a batch and reads it back only at the next batch (or at the end), photos in order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from people_fixtures import FACES, MOBILEFACENET, YUNET, need_real_data

from facerun.face.library import LibraryStats, PhotoFaces, _Batcher, _Photo


@pytest.fixture(scope="module")
def real_crops():
    """Aligned 112x112 crops of the faces facerun's detector finds in three group photos: 16 real faces."""
    need_real_data()
    from facerun.face.align import align_face
    from facerun.face.detect import Detector
    from facerun.face.images import load_image

    detector = Detector(str(YUNET), device="cpu")
    crops = []
    for name in ("group/deepface_selfie-many-people.jpg", "group/facenet-pytorch_multiface.jpg",
                 "group/insightface_t1.jpg"):
        rgb = load_image(FACES / name)
        crops += [align_face(rgb, face.landmarks) for face in detector.detect(rgb)]
    assert len(crops) >= 16
    return np.stack(crops[:16])



@pytest.fixture(scope="module")
def on_gpu(gpu):
    """One GPU embedder for this module's tests (its check is the dear part on a software adapter); the last test
    drops its GPU."""
    from facerun.face.embed import Embedder

    need_real_data()
    return Embedder(str(MOBILEFACENET), device="gpu")


def test_a_submitted_batch_gives_embeds_vectors(real_crops, on_gpu):
    from facerun.face.embed import Embedder

    crops = real_crops[:8]
    want = on_gpu.embed(crops)
    assert on_gpu.device != "cpu"
    assert np.array_equal(on_gpu.submit(crops)(), want)  # the same program on the same input
    first = on_gpu.submit(crops[:3])  # padded to 4
    second = on_gpu.submit(crops[3:])  # padded to 8; reads the first back before taking its read-back buffer
    got = np.concatenate([first(), second()])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    on_cpu = Embedder(str(MOBILEFACENET), device="cpu")
    assert np.array_equal(on_cpu.submit(crops)(), on_cpu.embed(crops))
    assert (on_cpu.embed(crops) * got).sum(axis=1).min() > 0.9999


def test_a_failure_at_read_back_gives_the_cpus_vectors(real_crops, on_gpu):
    from facerun.face.embed import Embedder
    from facerun.gpu import device as D

    crops = real_crops[:8]
    assert on_gpu.device != "cpu"
    try:
        D.inject_failure("readback")
        got = on_gpu.submit(crops)()
        assert on_gpu.device == "cpu" and "read" in on_gpu.net.gpu_reason
    finally:
        D.inject_failure(None)
        D.clear_broken()
    want = Embedder(str(MOBILEFACENET), device="cpu").embed(crops)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


class _Recording:
    """An embedder that records its submissions and reads: ('submit', k, faces) and ('read', k); a face's vector is
    (its crop's first byte, the batch it went in)."""

    dim = 2

    def __init__(self):
        self.log = []

    def submit(self, crops):
        k = sum(1 for e in self.log if e[0] == "submit")
        self.log.append(("submit", k, len(crops)))

        def read():
            self.log.append(("read", k))
            return np.array([[float(c[0, 0, 0]), float(k)] for c in crops], np.float32)

        return read


def _photo(index: int, faces: int) -> _Photo:
    crops = [np.full((2, 2, 3), 10 * index + j, np.uint8) for j in range(faces)]
    return _Photo(PhotoFaces(path=Path(f"p{index}.jpg"), faces=[object()] * faces), crops=crops)


def test_the_batcher_reads_a_batch_back_at_the_next_one():
    embedder = _Recording()
    batcher = _Batcher(embedder, 4, LibraryStats())
    out = []
    for index, faces in enumerate((3, 2, 0, 4, 1)):
        out += [r.path.name for r in batcher.add(_photo(index, faces))]
        if index == 1:  # a batch of 4 submitted, not read: no photo out yet
            assert embedder.log == [("submit", 0, 4)] and out == []
    assert embedder.log == [("submit", 0, 4), ("read", 0), ("submit", 1, 4)]
    assert out == ["p0.jpg"]  # p1's last face is in batch 1, still running
    results = {}
    for r in batcher.finish():
        results[r.path.name] = r
        out.append(r.path.name)
    assert embedder.log[3:] == [("read", 1), ("submit", 2, 2), ("read", 2)]
    assert out == ["p0.jpg", "p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg"]
    assert results["p2.jpg"].embeddings.shape == (0, 2)
    assert results["p3.jpg"].embeddings[:, 0].tolist() == [30, 31, 32, 33]
    assert results["p3.jpg"].embeddings[:, 1].tolist() == [1, 1, 1, 2]  # across batches 1 and 2
