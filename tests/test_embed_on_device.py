"""An embedder's batches on the device: left running (`Embedder.submit` gives `embed`'s vectors, bit for bit; the
next submission reads the last one back first; a failure at read-back gives the CPU's vectors; the library run's
batcher reads a batch back only at the next one) and faces aligned there (a face's region of its photo goes up, the
device samples it into the input: within a level of the host's crop, checked on the first batch, the host's path
where the check fails or FACERUN_GPU_ALIGN is off)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from people_fixtures import FACES, MOBILEFACENET, YUNET, need_real_data

from facerun.face.library import LibraryStats, PhotoFaces, _Batcher, _Photo
from facerun.runner import FaceCut


@pytest.fixture(scope="module")
def real_crops():
    """Aligned 112x112 crops of the faces facerun's detector finds in three group photos: 16 real faces."""
    need_real_data()
    from facerun.face.align import align_face

    return np.stack([align_face(rgb, marks) for rgb, marks in _faces()])


@functools.cache
def _faces() -> list:
    """(photo, landmarks) of the first 16 faces facerun's detector finds in three group photos."""
    from facerun.face.detect import Detector
    from facerun.face.images import load_image

    detector = Detector(str(YUNET), device="cpu")
    faces = []
    for name in ("group/deepface_selfie-many-people.jpg", "group/facenet-pytorch_multiface.jpg",
                 "group/insightface_t1.jpg"):
        rgb = load_image(FACES / name)
        faces += [(rgb, face.landmarks) for face in detector.detect(rgb)]
    assert len(faces) >= 16
    return faces[:16]


@pytest.fixture(scope="module")
def real_cuts(real_crops):
    """The same 16 faces cut for aligning on the device (align.cut_face)."""
    from facerun.face.align import cut_face

    return [cut_face(rgb, marks) for rgb, marks in _faces()]



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


def test_a_real_gpu_embedder_embeds_on_a_thread_of_its_own(gpu, monkeypatch):
    """A net on the GPU names its adapter as its device (not "gpu"): the library run must still see it on the GPU
    and embed on the embedding thread (a real run of two photos). Its own embedder: the module's has its faces'
    check still to run (tested below)."""
    from facerun.face.detect import Detector
    from facerun.face.embed import Embedder
    from facerun.face.library import embed_thread, iter_photo_faces

    on_gpu = Embedder(str(MOBILEFACENET), device="gpu")
    assert not embed_thread(on_gpu)  # off unless asked for
    monkeypatch.setenv("FACERUN_EMBED_THREAD", "on")
    assert on_gpu.device != "gpu" and embed_thread(on_gpu)
    assert not embed_thread(Embedder(str(MOBILEFACENET), device="cpu"))
    paths = sorted((FACES / "group").glob("*.jpg"))[:2]
    stats = LibraryStats()
    results = list(iter_photo_faces(paths, Detector(str(YUNET), device="cpu"), on_gpu, batch=4, workers=2,
                                    stats=stats))
    assert stats.embed_thread and sum(len(r.faces) for r in results) > 0
    assert all(r.embeddings is not None and len(r.embeddings) == len(r.faces) for r in results)


def test_faces_laid_out_on_the_device_are_the_hosts_within_a_level(real_cuts, on_gpu):
    layout = on_gpu.face_layout
    gp = on_gpu.net.gpu.model.compile(on_gpu.net.program((16, 3, 112, 112)))  # compiled only: its input is made
    got, want = gp.faces.laid_out(real_cuts, layout), layout.blob(real_cuts)
    levels = np.abs(got - want) * np.asarray(layout.std, np.float32)[None, :, None, None]
    assert levels.max() <= 1.01 and np.mean(levels > 0.01) < 1e-3  # float32 samples: a rare pixel one level off
    from facerun.gpu.faces import disagreement

    assert disagreement(want, got, layout) is None
    assert "levels" in disagreement(want, got + 2.0 / 58.0, layout)


def test_faces_aligned_on_the_device_embed_as_the_hosts_crops(real_crops, real_cuts, on_gpu, monkeypatch):
    from facerun import counters

    before = counters.snapshot()
    on_device = on_gpu.submit_faces(real_cuts[:4])()
    assert counters.since(before).get("gpu_faces_checks") == 1 and on_gpu.net.gpu.faces_checked
    on_host = on_gpu.submit_faces(list(real_crops[:4]))()
    assert on_device.shape == on_host.shape == (4, on_gpu.dim)
    assert (on_device * on_host).sum(axis=1).min() > 0.9999
    before = counters.snapshot()
    on_gpu.submit_faces(real_cuts[4:7])()  # padded to 4
    assert "gpu_faces_checks" not in counters.since(before)  # checked once
    # a batch mixing cuts and crops (the GPU dropped between them) is aligned on the host
    mixed = on_gpu.submit_faces(real_cuts[:2] + list(real_crops[2:4]))()
    np.testing.assert_allclose(mixed, on_host, rtol=0, atol=1e-5)
    assert isinstance(on_gpu.cut(*_faces()[0]), FaceCut)
    monkeypatch.setenv("FACERUN_GPU_ALIGN", "off")
    assert isinstance(on_gpu.cut(*_faces()[0]), np.ndarray)  # the host's crop


def test_a_disagreeing_faces_layout_leaves_the_aligning_to_the_host(real_crops, real_cuts, on_gpu, monkeypatch):
    from facerun.gpu.faces import FacesInput

    real = FacesInput.laid_out
    monkeypatch.setattr(FacesInput, "laid_out", lambda self, cuts, layout: real(self, cuts, layout) + 0.5)
    monkeypatch.setattr(on_gpu.net.gpu, "faces_checked", False)  # as if this were the first batch of faces
    got = on_gpu.submit_faces(real_cuts[:4])()
    assert "levels" in on_gpu.net.gpu.faces_reason and on_gpu.device != "cpu"  # the network stays on the GPU
    np.testing.assert_allclose(got, on_gpu.embed(real_crops[:4]), rtol=0, atol=1e-5)


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

    def submit_faces(self, crops):
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
    out, results = [], {}
    for index, faces in enumerate((3, 2, 0, 4, 1, 3)):
        for r in batcher.add(_photo(index, faces)):
            results[r.path.name] = r
            out.append(r.path.name)
        if index == 0:  # the run's first photo: its faces a batch of their own, read back at once, and it is out
            assert embedder.log == [("submit", 0, 3), ("read", 0)] and out == ["p0.jpg"]
        if index == 2:  # then batches of 4: none full yet, no photo out since
            assert embedder.log[2:] == [] and out == ["p0.jpg"]
        if index == 3:  # a batch of 4 submitted, not read
            assert embedder.log[2:] == [("submit", 1, 4)] and out == ["p0.jpg"]
    assert embedder.log[2:] == [("submit", 1, 4), ("read", 1), ("submit", 2, 4)]
    assert out == ["p0.jpg", "p1.jpg", "p2.jpg"]  # p3's last faces are in batch 2, still running
    for r in batcher.finish():
        results[r.path.name] = r
        out.append(r.path.name)
    assert embedder.log[5:] == [("read", 2), ("submit", 3, 2), ("read", 3)]
    assert out == ["p0.jpg", "p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg", "p5.jpg"]
    assert results["p2.jpg"].embeddings.shape == (0, 2)
    assert results["p3.jpg"].embeddings[:, 0].tolist() == [30, 31, 32, 33]
    assert results["p3.jpg"].embeddings[:, 1].tolist() == [1, 1, 2, 2]  # across batches 1 and 2
    assert results["p5.jpg"].embeddings[:, 1].tolist() == [2, 3, 3]


def test_faces_pack_their_heads_then_their_bytes():
    from facerun.gpu.faces import HEAD, TAIL, pack

    first = FaceCut(np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0))
    second = FaceCut(np.full((3, 2, 3), 7, np.uint8), (0.5, 0.0, -1.0, 0.0, 0.5, -2.0))
    words = pack([first, second], 4)  # a batch of 4: two faces, two of zeros
    head = (HEAD + TAIL) * 4
    assert words[:3].tolist() == [3, 2, head] and words[HEAD : HEAD + 3].tolist() == [2, 3, head + 5]  # 18 bytes: 5
    assert not words[2 * HEAD : 4 * HEAD].any()  # no columns: all zeros
    floats = words.view(np.float32)
    assert floats[4:8].tolist() == [1, 2, 3, 4] and floats[HEAD * 4 : HEAD * 4 + 2].tolist() == [5, 6]
    assert floats[HEAD * 4 + TAIL : HEAD * 4 + 2 * TAIL].tolist() == [0.5, -2.0]
    raw = words.view(np.uint8)
    assert raw[4 * head : 4 * head + 18].tolist() == list(range(18))
    assert raw[4 * (head + 5) : 4 * (head + 5) + 18].tolist() == [7] * 18 and len(words) == head + 5 + 5
