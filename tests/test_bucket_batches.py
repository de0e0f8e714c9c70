"""Photos of one bucket in one GPU submission (gpu/batch.py), run in the bucket's program of N items (one pass,
each item masked to its own photo size: FACERUN_PHOTO_ITEMS=on) or once a photo (the default): each photo's outputs
equal its own run's (bit for bit once a photo), two batches in flight at once read back right, a short batch is
padded, and the library's detect keeps input order with a photo of another bucket in between."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from shared_paths import DATA

import facerun
from facerun import counters
from facerun.face.detect import Detector
from facerun.face.images import load_image
from facerun.face.library import iter_photo_faces, iter_photo_faces_serial
from facerun.gpu.batch import split
from facerun.runner import Workload

PHOTOS = sorted((DATA / "wider" / "images").rglob("*.jpg"))
# crops whose padded sizes all fall in the 384 x 512 bucket, and one (200 x 300) in the 256 x 384 one
SAME_BUCKET = [(300, 400), (350, 450), (270, 500), (384, 512)]
OTHER = (200, 300)


def test_a_photo_detectors_batch_programs_are_checked_apart_once(monkeypatch):
    """The bucket programs of N items (net.photos_program): the graph keeps its items apart is checked once a model,
    two items at the smallest bucket on the CPU, not three CPU runs at every bucket's size; off, or at batch 1, none."""
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")
    layout = Detector("yunet-2023mar", device="cpu").family.photo_layout(128)
    net = facerun.load("yunet-2023mar", workload=Workload(photo=layout))
    before = counters.snapshot()
    a = net.photos_program((1, 3, 384, 512), 2)
    b = net.photos_program((1, 3, 256, 384), 3)
    assert a.input_shape == (4, 3, 384, 512) and b.input_shape == (4, 3, 256, 384)
    assert net.photos_program((1, 3, 256, 384), 6).input_shape == (6, 3, 256, 384)  # more photos than the setting
    spent = counters.since(before)
    assert spent["separable_checks_s"] > 0 and list(net._separable) == [(1, 3, 128, 128)]
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "off")
    assert net.photos_program((1, 3, 384, 512), 2) is None
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "1")
    assert net.photos_program((1, 3, 384, 512), 1) is None


@pytest.fixture(scope="module")
def detector(gpu):
    if len(PHOTOS) < 7:
        pytest.skip(f"the WIDER sample not found in {DATA} (set FACERUN_DATA)")
    with pytest.MonkeyPatch.context() as mp:  # the heads whole, to compare by name (test_select.py: their rows)
        mp.setenv("FACERUN_PHOTO_SELECT", "off")
        det = Detector("yunet-2023mar", device="gpu", max_side=512)
    assert det.net.workload.photo.select is None
    det.detect(load_image(PHOTOS[1])[:120, :160])  # the model's check and the first photo's layout check
    return det


def _crops(i: int, sizes) -> list[np.ndarray]:
    rgb = load_image(PHOTOS[i])
    return [np.ascontiguousarray(rgb[:h, :w]) for h, w in sizes]


def _outputs_alone(det, rgb):
    return det.run_network(det.prepare(rgb)).outputs


def _same(got: np.ndarray, want: np.ndarray, items: bool) -> bool:
    """Once a photo the very bits; in a batch program within float rounding (its kernels may sum in another order)."""
    return np.allclose(got, want, rtol=1e-5, atol=1e-4) if items else np.array_equal(got, want)


def _item_batches() -> int:
    return counters.snapshot().get("gpu_photo_item_batches", 0)


def test_a_batch_goes_in_parts_only_to_an_idle_device():
    assert split(16, True, 4) == [8, 8] and split(5, True, 4) == [2, 3] and split(2, True, 2) == [1, 1]
    assert split(3, True, 4) == [3]  # too few photos
    assert split(16, False, 4) == [16]  # a batch in flight keeps the device busy
    assert split(16, True, 0) == [16] and split(1, True, 1) == [1]
    assert split(16, True, 4, 4) == [4, 4, 4, 4] and split(10, True, 4, 3) == [3, 3, 4]
    assert split(3, True, 2, 8) == [1, 1, 1]  # no part without a photo
    assert sum(split(61, True, 4, 7)) == 61 and split(16, True, 4, 1) == [16]


@pytest.mark.parametrize("items, pieces, parts, threads", [
    ("off", "0", "2", "0"), ("on", "0", "2", "0"), ("off", "4", "2", "0"), ("on", "4", "2", "0"),
    ("on", "4", "4", "0"), ("off", "4", "3", "0"), ("on", "4", "2", "2"), ("off", "0", "2", "3")])
def test_a_batch_equals_each_photos_own_run(detector, monkeypatch, items, pieces, parts, threads):
    """Whole, or split in two submissions or more (FACERUN_PHOTO_SPLIT and FACERUN_PHOTO_PARTS: the device idle,
    four photos; four parts take more than the model's two read-back buffers, so a part waits on the one before);
    the photos written by the feeding thread, or staged by upload threads first (FACERUN_UPLOAD_THREADS)."""
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", items)
    monkeypatch.setenv("FACERUN_PHOTO_SPLIT", pieces)
    monkeypatch.setenv("FACERUN_PHOTO_PARTS", parts)
    monkeypatch.setenv("FACERUN_UPLOAD_THREADS", threads)
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")  # the four crops fill the bucket's batch program
    crops = _crops(0, SAME_BUCKET)
    prepared = [detector.prepare(c) for c in crops]
    assert len({p.bucket for p in prepared}) == 1 and prepared[0].bucket == (1, 3, 384, 512)
    assert len({p.shape for p in prepared}) == len(crops)  # each masked to its own size
    before = counters.snapshot()
    batched = detector.submit_networks(prepared)()
    spent = counters.since(before)
    submissions = int(parts) if pieces == "4" else 1
    assert spent.get("gpu_photo_batches_split", 0) == (submissions > 1)
    # with upload threads every photo was staged (two or more to a part), none without
    assert spent.get("gpu_photos_staged", 0) == (len(crops) if threads != "0" else 0)
    assert spent.get("gpu_photo_item_batches", 0) == (submissions if items == "on" else 0)
    assert spent.get("gpu_photo_batches", 0) == (0 if items == "on" else submissions)
    for p, c in zip(batched, crops):
        alone = _outputs_alone(detector, c)
        assert alone.keys() == p.outputs.keys()
        for k in alone:
            assert p.outputs[k].shape == alone[k].shape
            assert _same(p.outputs[k], alone[k], items == "on"), k
    photos = detector.net.runner.photos
    if items == "on":  # the first batch was also checked photo by photo
        assert photos.items_agree is True
        batch = photos.model.compile(detector.net.batch_program((4, 3, 384, 512)))
        assert batch.photo._items_batch is not None
    else:
        assert photos.batches_agree is True
        gp = photos.model.compile(detector.net.program((1, 3, 384, 512)))
        assert gp.photo._batch is not None and len(gp.photo._batch.store_at) == len(crops)


def test_a_short_batch_is_padded_and_each_item_masked_to_its_own_photo(detector, monkeypatch):
    """Three photos of three sizes in the bucket's program of 8 items: the five items past them are zeros, and
    each photo's faces and outputs are those of its own run (a mask mixed up between items would move them)."""
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "8")
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    crops = _crops(1, SAME_BUCKET[1:])
    prepared = [detector.prepare(c) for c in crops]
    before = _item_batches()
    batched = detector.submit_networks(prepared)()
    assert _item_batches() - before == 1
    assert detector.net.batch_program((8, 3, 384, 512)).input_shape[0] == 8
    found = 0
    for p, c in zip(batched, crops):
        alone = detector.run_network(detector.prepare(c))
        for k in alone.outputs:
            assert _same(p.outputs[k], alone.outputs[k], True), k
        faces = [np.round(f.box, 3).tolist() for f in detector.faces_from(p)]
        assert faces == [np.round(f.box, 3).tolist() for f in detector.faces_from(alone)]
        found += len(faces)
    assert found > 0


def test_a_short_batch_runs_only_its_photos_workgroups(detector, monkeypatch):
    """Three photos in the bucket's program of 8 items: only the workgroups of the first three items are dispatched
    (items.py), and every output is the same bits as with the padding run too (FACERUN_PHOTO_PADDING=run)."""
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "8")
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    prepared = [detector.prepare(c) for c in _crops(4, SAME_BUCKET[:3])]
    skipped = detector.submit_networks(prepared)()
    monkeypatch.setenv("FACERUN_PHOTO_PADDING", "run")
    padded = detector.submit_networks(prepared)()
    for a, b in zip(skipped, padded):
        assert a.outputs.keys() == b.outputs.keys()
        for k in a.outputs:
            assert np.array_equal(a.outputs[k], b.outputs[k]), k
    gb = detector.net.runner.photos.model.compile(detector.net.batch_program((8, 3, 384, 512)))
    assert gb.items == 8 and gb.replay is not None

    def workgroups(steps):
        return sum(gx * gy for _, _, gx, gy in steps)

    whole, three = workgroups(gb.replay.steps_for(None)), workgroups(gb.replay.steps_for(3))
    assert 3 / 8 <= three / whole < 0.45, (three, whole)


@pytest.mark.parametrize("items", ["off", "on"])
def test_two_batches_in_flight(detector, monkeypatch, items):
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", items)
    first = [detector.prepare(c) for c in _crops(2, SAME_BUCKET[:2])]
    second = [detector.prepare(c) for c in _crops(3, SAME_BUCKET[2:])]
    want = [_outputs_alone(detector, p.image[:, :, :3].copy()) for p in first + second]
    a = detector.submit_networks(first)
    b = detector.submit_networks(second)  # submitted before the first is read
    got = b() + a()
    got = got[2:] + got[:2]
    for p, w in zip(got, want):
        for k in w:
            assert _same(p.outputs[k], w[k], items == "on"), k


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


@pytest.mark.parametrize("batch, items", [(8, "on"), (8, "off"), (1, "on")])
def test_library_detect_keeps_input_order_with_another_bucket_between(detector, mixed_buckets, monkeypatch, batch,
                                                                      items):
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", str(batch))  # 1: each photo on its own, as before
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", items)
    paths, serial = mixed_buckets
    before = counters.snapshot().get("gpu_photo_batches", 0), _item_batches()
    piped = list(iter_photo_faces(paths, detector, workers=2))
    runs, passes = counters.snapshot().get("gpu_photo_batches", 0) - before[0], _item_batches() - before[1]
    if batch == 1:
        assert runs == passes == 0  # each photo on its own
    else:  # photos of one bucket did run batched, in a batch program or once a photo
        assert (passes > 0 and runs == 0) if items == "on" else (runs > 0 and passes == 0)
    assert [r.path for r in piped] == paths
    for a, b in zip(serial, piped):
        assert (a.width, a.height) == (b.width, b.height)
        assert len(a.faces) == len(b.faces)
        for fa, fb in zip(a.faces, b.faces):
            assert np.array_equal(fa.box, fb.box) and fa.score == fb.score
