"""Photos of one bucket in one GPU submission (gpu/batch.py): each photo's outputs equal its own run's bit for bit,
two batches in flight at once read back right, and the library's detect keeps input order with a photo of another
bucket in between."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from shared_paths import DATA

from facerun import counters
from facerun.face.detect import Detector
from facerun.face.images import load_image
from facerun.face.library import iter_photo_faces, iter_photo_faces_serial

PHOTOS = sorted((DATA / "wider" / "images").rglob("*.jpg"))
# crops whose padded sizes all fall in the 384 x 512 bucket, and one (200 x 300) in the 256 x 384 one
SAME_BUCKET = [(300, 400), (350, 450), (270, 500), (384, 512)]
OTHER = (200, 300)


@pytest.fixture(scope="module")
def detector(gpu):
    if len(PHOTOS) < 7:
        pytest.skip(f"the WIDER sample not found in {DATA} (set FACERUN_DATA)")
    det = Detector("yunet-2023mar", device="gpu", max_side=512)
    det.detect(load_image(PHOTOS[1])[:120, :160])  # the model's check and the first photo's layout check
    return det


def _crops(i: int, sizes) -> list[np.ndarray]:
    rgb = load_image(PHOTOS[i])
    return [np.ascontiguousarray(rgb[:h, :w]) for h, w in sizes]


def _outputs_alone(det, rgb):
    return det.run_network(det.prepare(rgb)).outputs


def test_a_batch_equals_each_photos_own_run(detector):
    crops = _crops(0, SAME_BUCKET)
    prepared = [detector.prepare(c) for c in crops]
    assert len({p.bucket for p in prepared}) == 1 and prepared[0].bucket == (1, 3, 384, 512)
    assert len({p.shape for p in prepared}) == len(crops)  # each masked to its own size
    batched = detector.submit_networks(prepared)()
    for p, c in zip(batched, crops):
        alone = _outputs_alone(detector, c)
        assert alone.keys() == p.outputs.keys()
        for k in alone:
            assert p.outputs[k].shape == alone[k].shape
            assert np.array_equal(p.outputs[k], alone[k]), k
    photos = detector.net.runner.photos
    assert photos.batches_agree is True  # the first batch was also checked photo by photo
    gp = photos.model.compile(detector.net.program((1, 3, 384, 512)))
    assert gp.photo._batch is not None and len(gp.photo._batch.store_at) == len(crops)


def test_two_batches_in_flight(detector):
    first = [detector.prepare(c) for c in _crops(2, SAME_BUCKET[:2])]
    second = [detector.prepare(c) for c in _crops(3, SAME_BUCKET[2:])]
    want = [_outputs_alone(detector, p.image[:, :, :3].copy()) for p in first + second]
    a = detector.submit_networks(first)
    b = detector.submit_networks(second)  # submitted before the first is read
    got = b() + a()
    got = got[2:] + got[:2]
    for p, w in zip(got, want):
        for k in w:
            assert np.array_equal(p.outputs[k], w[k]), k


@pytest.fixture(scope="module")
def mixed_buckets(detector, tmp_path_factory):
    """Photos of one bucket with one of another between them, twice over (more photos than the first runs, so
    batches form), and their faces photo after photo: (paths, serial results), made once for both batch sizes."""
    crops = _crops(4, SAME_BUCKET[:2]) + _crops(5, [OTHER]) + _crops(6, SAME_BUCKET[2:])
    folder = tmp_path_factory.mktemp("mixed-buckets")
    paths = []
    for i, c in enumerate(crops):
        path = folder / f"p{i}.png"
        Image.fromarray(c).save(path)
        paths.append(path)
    paths = paths * 2
    return paths, list(iter_photo_faces_serial(paths, detector))


@pytest.mark.parametrize("batch", [8, 1])
def test_library_detect_keeps_input_order_with_another_bucket_between(detector, mixed_buckets, monkeypatch, batch):
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", str(batch))  # 1, the default: each photo on its own, as before
    paths, serial = mixed_buckets
    before = counters.snapshot().get("gpu_photo_batches", 0)
    piped = list(iter_photo_faces(paths, detector, workers=2))
    batches = counters.snapshot().get("gpu_photo_batches", 0) - before
    assert batches > 0 if batch > 1 else batches == 0  # photos of one bucket did run batched, or none did
    assert [r.path for r in piped] == paths
    for a, b in zip(serial, piped):
        assert (a.width, a.height) == (b.width, b.height)
        assert len(a.faces) == len(b.faces)
        for fa, fb in zip(a.faces, b.faces):
            assert np.array_equal(fa.box, fb.box) and fa.score == fb.score
