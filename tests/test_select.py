"""A photo's candidate rows of YuNet's heads, chosen on the device (gpu/select.py) instead of every head read back:
the host's choice decodes to decode_2023's very rows (a row exactly at the threshold included), and on the GPU the
rows give each photo the faces the heads give, alone, in a batch, past the rows the device holds, and in a library
run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image
from shared_paths import DATA

import facerun
from facerun import counters
from facerun.face import yunet
from facerun.face.detect import Detector
from facerun.face.images import load_image
from facerun.face.library import iter_photo_faces
from facerun.runner import Selected, Workload, select_rows

PHOTOS = sorted((DATA / "wider" / "images").rglob("*.jpg"))
SIZES = [(300, 400), (350, 450), (384, 512)]  # padded, all in the 384 x 512 bucket (the last its whole input)


def _need_photos():
    if len(PHOTOS) < 6:
        pytest.skip(f"the WIDER sample not found in {DATA} (set FACERUN_DATA)")


def _faces(det, prepared) -> list:
    return [(f.box, f.score, f.landmarks.tobytes()) for f in det.faces_from(prepared)]


@pytest.fixture(scope="module")
def cpu_outputs():
    """Three WIDER photos' heads on the CPU, with their padded sizes."""
    _need_photos()
    det = Detector("yunet-2023mar", device="cpu", max_side=640)
    out = []
    for path in PHOTOS[:3]:
        p = det.run_network(det.prepare(load_image(path)))
        out.append((p.outputs, (p.frame.input_height, p.frame.input_width)))
    return out


def test_rows_chosen_on_the_host_decode_to_decode_2023s_rows(cpu_outputs):
    found = 0
    for outputs, (h, w) in cpu_outputs:
        for score in (0.6, 0.8):
            chosen = select_rows(outputs, yunet.select_2023(score), (h, w))
            assert chosen.rows.shape[1] == 17 and np.all(np.diff(chosen.keys.astype(np.int64)) > 0)  # grid order
            want = yunet.decode_2023(outputs, h, w, score)
            assert np.array_equal(yunet.decode_2023_selected(chosen, score), want)
            found += len(want)
    assert found > 0


def test_a_row_exactly_at_the_threshold_is_chosen(cpu_outputs):
    """The device compares the scores' product with a floor a hair under the threshold squared: a position whose
    score (a square root, rounded) is exactly the threshold is among the rows."""
    outputs, (h, w) = cpu_outputs[0]
    cls = np.asarray(outputs["cls_8"], np.float32).ravel()
    obj = np.asarray(outputs["obj_8"], np.float32).ravel()
    score = np.sqrt(np.clip(cls, 0, 1) * np.clip(obj, 0, 1))
    threshold = float(np.sort(score)[-3])  # a real score, kept by `>=`
    chosen = select_rows(outputs, yunet.select_2023(threshold), (h, w))
    want = yunet.decode_2023(outputs, h, w, threshold)
    assert np.float32(threshold) in want[:, yunet.SCORE_COLUMN]
    assert np.array_equal(yunet.decode_2023_selected(chosen, threshold), want)


def test_thresholds_under_half_read_the_heads_whole():
    family = Detector("yunet-2023mar", device="cpu").family
    assert family.photo_layout(128, 0.6).select == yunet.select_2023(0.6)
    assert family.photo_layout(128, 0.3).select is None and family.photo_layout(128).select is None


# ------------------------------------------------------------------------------------------------ on the GPU


@pytest.fixture(scope="module")
def detectors(gpu):
    """YuNet on the GPU choosing rows (the default) and reading the heads whole, each past its checks."""
    _need_photos()
    on = Detector("yunet-2023mar", device="gpu", max_side=512)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FACERUN_PHOTO_SELECT", "off")
        off = Detector("yunet-2023mar", device="gpu", max_side=512)
    assert on.net.workload.photo.select is not None and off.net.workload.photo.select is None
    for det in (on, off):
        det.detect(load_image(PHOTOS[1])[:120, :160])  # the model's check and the first photo's layout check
    on.detect(_crops(1, [(200, 300)])[0])  # the first photo choosing rows: checked against the host's choice
    assert on.net.runner.photos.select_agree is True
    return on, off


def _crops(i: int, sizes=SIZES) -> list[np.ndarray]:
    """The top-left corners of photo i shrunk to 512 columns (where the sample's crowds are)."""
    image = Image.open(PHOTOS[i]).convert("RGB")
    rgb = np.asarray(image.resize((512, round(image.height * 512 / image.width))))
    return [np.ascontiguousarray(rgb[:h, :w]) for h, w in sizes]


def test_a_photos_rows_give_the_faces_of_its_heads(detectors):
    on, off = detectors
    found = 0
    for crop in _crops(0):
        got = on.run_network(on.prepare(crop))
        want = off.run_network(off.prepare(crop))
        assert isinstance(got.outputs, Selected) and not isinstance(want.outputs, Selected)
        assert got.outputs.photo_hw == got.shape[2:]
        assert _faces(on, got) == _faces(off, want)
        found += len(_faces(off, want))
    assert found > 0


def test_a_batchs_rows_are_each_photos_own(detectors):
    on, off = detectors
    crops = _crops(1)
    prepared = [on.prepare(c) for c in crops]
    before = counters.snapshot().get("gpu_photo_batches", 0)
    batched = on.submit_networks(prepared)()
    assert counters.snapshot().get("gpu_photo_batches", 0) - before == 1
    assert on.net.runner.photos.batches_agree is True
    for p, c in zip(batched, crops):
        assert isinstance(p.outputs, Selected)
        assert _faces(on, p) == _faces(off, off.run_network(off.prepare(c)))


def test_a_photo_of_more_rows_than_the_device_holds_reads_its_heads(detectors):
    """A region of two rows: a photo with more is run again reading its heads, and gives their faces."""
    on, off = detectors
    layout = on.net.workload.photo
    tiny = dataclasses.replace(layout, select=dataclasses.replace(layout.select, cap=2))
    net = facerun.load("yunet-2023mar", device="gpu", workload=Workload(check_side=128, photo=tiny))
    crop = _crops(8, [(384, 512)])[0]
    net.run_photo(crop[:200, :300], (1, 3, 224, 320))  # the first photo checks the layout, reading its heads
    before = counters.snapshot().get("gpu_select_overflows", 0)
    want = off.run_network(off.prepare(crop))
    out = net.run_photo(crop, want.shape)
    assert not isinstance(out, Selected)
    assert len(select_rows(want.outputs, layout.select, want.shape[2:]).rows) > 2  # it had more than two
    assert counters.snapshot().get("gpu_select_overflows", 0) - before == 1
    got = dataclasses.replace(want, outputs=out)
    assert _faces(off, got) == _faces(off, want)


def test_a_library_run_choosing_rows_finds_the_faces_of_the_heads(detectors, tmp_path, monkeypatch):
    on, off = detectors
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")
    paths = []
    for i, crop in enumerate(_crops(9) + _crops(3, [(200, 300)]) + _crops(11)):
        paths.append(tmp_path / f"p{i}.png")
        Image.fromarray(crop).save(paths[-1])
    want = list(iter_photo_faces(paths, off, workers=0))
    before = counters.snapshot().get("gpu_photo_batches", 0)
    got = list(iter_photo_faces(paths, on, workers=2))
    assert counters.snapshot().get("gpu_photo_batches", 0) > before  # a bucket's photos did run batched
    assert [r.path for r in got] == paths
    assert sum(len(r.faces) for r in want) > 0
    for a, b in zip(want, got):
        assert [(f.box, f.score) for f in a.faces] == [(f.box, f.score) for f in b.faces]


def test_batch_programs_choose_rows_once_they_agreed(detectors, monkeypatch):
    """In a bucket's program of N items (FACERUN_PHOTO_ITEMS): the first batch reads its heads (its check against
    the photos' own runs), the next ones each item's rows, giving the photos' faces (to rounding: the batch
    program's kernels may sum in another order)."""
    on, off = detectors
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "2")
    crops = _crops(0, SIZES[:2])
    first = on.submit_networks([on.prepare(c) for c in crops])()
    assert on.net.runner.photos.items_agree is True and not any(isinstance(p.outputs, Selected) for p in first)
    before = counters.snapshot().get("gpu_photo_item_batches", 0)
    again = on.submit_networks([on.prepare(c) for c in crops])()
    assert counters.snapshot().get("gpu_photo_item_batches", 0) - before == 1
    found = 0
    for p, c in zip(again, crops):
        assert isinstance(p.outputs, Selected)
        want = [np.round(f.box, 2).tolist() for f in off.faces_from(off.run_network(off.prepare(c)))]
        assert [np.round(f.box, 2).tolist() for f in on.faces_from(p)] == want
        found += len(want)
    assert found > 0


def test_heads_it_cannot_choose_from_are_read_whole_and_the_gpu_stays(detectors, caplog):
    on, off = detectors
    layout = on.net.workload.photo
    (stride, scores, _), *rest = layout.select.levels
    wrong = dataclasses.replace(layout, select=dataclasses.replace(
        layout.select, levels=((stride, scores, ("nosuch",)), *rest)))
    net = facerun.load("yunet-2023mar", device="gpu", workload=Workload(check_side=128, photo=wrong))
    crop = _crops(1, [(200, 300)])[0]
    net.run_photo(crop, (1, 3, 224, 320))  # the layout's check, heads read
    out = net.run_photo(crop, (1, 3, 224, 320))
    assert not isinstance(out, Selected) and net.runner.photos.select_agree is False and net.runner.active
    assert "heads whole" in caplog.text


def test_the_benchs_check_sees_every_row_the_device_chose_or_left_out(cpu_outputs):
    """bench.selected_as_heads (gpu-photo-batch's check): the host's own rows written into its heads give the heads
    back; a row left out, or a value off, fails the bench's check against them."""
    from facerun.bench.bench import judge, selected_as_heads

    outputs, hw = cpu_outputs[0]
    spec = yunet.select_2023(0.6)
    chosen = select_rows(outputs, spec, hw)
    names = list(outputs)
    assert len(chosen.rows) > 0
    got = selected_as_heads(chosen, outputs, spec)
    assert all(np.array_equal(got[n], np.asarray(outputs[n], np.float32)) for n in names)
    assert judge("detector", [(got, outputs)], names, 1e-3)[2] is True
    best = int(np.argmax(chosen.rows[:, 1] * chosen.rows[:, 2]))  # the strongest row, far from the floor
    left_out = Selected(np.delete(chosen.rows, best, axis=0), chosen.photo_hw)
    assert judge("detector", [(selected_as_heads(left_out, outputs, spec), outputs)], names, 1e-3)[2] is False
    off = chosen.rows.copy()
    off[best, 5] += 1.0  # a box value
    assert judge("detector", [(selected_as_heads(Selected(off, chosen.photo_hw), outputs, spec), outputs)], names,
                 1e-3)[2] is False
