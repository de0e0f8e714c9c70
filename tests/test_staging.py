"""Photos put on the device by the threads that decode them (gpu/staging.py): the bytes land in a buffer of the
pool, a run copies them on the device and gives the very outputs of uploading them itself (alone and in a batch),
the buffer goes back to the pool once the run is submitted (or the photo dropped), the pool keeps to its budget,
and a library run with staging finds the faces of one without, photo for photo."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from PIL import Image
from shared_paths import DATA

from facerun import counters
from facerun.face.detect import Detector
from facerun.face.library import iter_photo_faces
from facerun.gpu.staging import GRAIN, PhotoStaging
from facerun.runner import StagedImage

PHOTOS = sorted((DATA / "wider" / "images").rglob("*.jpg"))


def _need_photos():
    if len(PHOTOS) < 4:
        pytest.skip(f"the WIDER sample not found in {DATA} (set FACERUN_DATA)")


def _photo(i: int, h: int, w: int) -> np.ndarray:
    """WIDER photo i shrunk to `w` columns, its top `h` rows (an odd width makes a byte count not a whole word)."""
    image = Image.open(PHOTOS[i]).convert("RGB")
    rgb = np.asarray(image.resize((w, max(h, round(image.height * w / image.width)))))
    return np.ascontiguousarray(rgb[:h])


def _read(dev, buffer, nbytes: int) -> np.ndarray:
    import wgpu

    out = dev.device.create_buffer(size=-(-nbytes // 4) * 4,
                                   usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    enc = dev.device.create_command_encoder()
    enc.copy_buffer_to_buffer(buffer, 0, out, 0, out.size)
    dev.queue.submit([enc.finish()])
    out.map_sync(wgpu.MapMode.READ)
    data = np.frombuffer(out.read_mapped(), np.uint8).copy()
    out.unmap()
    return data[:nbytes]


def test_a_staged_photo_is_its_bytes_on_the_device_and_its_buffer_comes_back(gpu):
    _need_photos()
    pool = PhotoStaging(gpu, budget=8 * GRAIN)
    rgb = _photo(0, 101, 133)  # 101 x 133 x 3 bytes: not a whole number of words
    image = pool.stage(rgb)
    assert isinstance(image, StagedImage) and np.array_equal(image, rgb)
    staged = image.staged
    assert staged.taken(pool, rgb.shape) and staged.nbytes == -(-rgb.size // 4) * 4
    assert pool.free == [] and pool.held == GRAIN
    buffer = staged.hand_over()  # unmapped, as a run takes it
    assert not staged.taken(pool, rgb.shape)
    assert np.array_equal(_read(gpu, buffer, rgb.size), rgb.reshape(-1))
    staged.release()  # mapped again, back in the pool
    assert [s.buffer for s in pool.free] == [buffer]
    other = _photo(1, 101, 133)
    again = pool.stage(other)  # the same size: the same buffer again once mapped, nothing made
    assert again.staged.slot.buffer is buffer and pool.held == GRAIN
    assert type(again[1:]) is StagedImage and again[1:].staged is None  # a view is a plain image again
    assert np.array_equal(_read(gpu, again.staged.hand_over(), other.size), other.reshape(-1))
    again.staged.release()
    third = pool.stage(rgb)
    del third
    gc.collect()  # a staged photo dropped unrun gives its buffer back
    assert [s.buffer for s in pool.free] == [buffer]


def test_the_pool_keeps_to_its_budget(gpu):
    _need_photos()
    pool = PhotoStaging(gpu, budget=3 * GRAIN)
    small = _photo(0, 200, 300)  # 180000 bytes: a grain each
    kept = [pool.stage(small) for _ in range(3)]
    assert all(k.staged is not None for k in kept) and pool.held == 3 * GRAIN
    before = counters.snapshot().get("gpu_photos_unstaged", 0)
    assert pool.stage(small) is small  # no room: not staged, it goes up the old way
    assert counters.snapshot().get("gpu_photos_unstaged", 0) - before == 1
    large = _photo(1, 400, 500)  # 600000 bytes: three grains
    kept[0].staged.release()
    assert pool.stage(large) is large and pool.held == 2 * GRAIN  # the free one destroyed, still no room
    for k in kept[1:]:
        k.staged.release()
    assert pool.stage(large).staged is not None and pool.held == 3 * GRAIN and pool.free == []
    assert PhotoStaging(gpu, budget=0).stage(small) is small  # off


@pytest.fixture(scope="module")
def detector(gpu):
    _need_photos()
    det = Detector("yunet-2023mar", device="gpu", max_side=512)
    det.detect(_photo(1, 120, 160))  # the model's check and the first photo's layout check
    assert det.net.runner.photos.image_layout is True
    return det


def test_staged_photos_run_to_the_outputs_of_uploaded_ones(detector):
    """Alone (run_image) and in a batch of one bucket (PhotoBatch): staged or not, bit for bit the same; every
    staged buffer back in the pool after its run."""
    det = detector
    pool = det.net.runner.model.staging
    sizes = [(300, 401), (350, 450), (384, 512)]
    crops = [_photo(2, h, w) for h, w in sizes]
    plain = [det.run_network(det.prepare(c)) for c in crops]
    staged = []
    for c in crops:
        p = det.prepare(c)
        det.precompile(p)  # as a decoding thread does: the photo's bytes go up here
        assert isinstance(p.image, StagedImage) and p.image.staged.taken(pool, p.image.shape)
        staged.append(p)
    alone = det.run_network(staged[0])
    assert not staged[0].image.staged.taken(pool, staged[0].image.shape)  # copied, and its buffer given back
    assert _same(alone.outputs, plain[0].outputs)
    before = counters.snapshot().get("gpu_photo_batches", 0)
    batched = det.submit_networks(staged[1:])()
    assert counters.snapshot().get("gpu_photo_batches", 0) - before == 1
    assert all(not p.image.staged.taken(pool, p.image.shape) for p in staged)
    for got, want in zip(batched, plain[1:]):
        assert _same(got.outputs, want.outputs)
    assert len(pool.free) == 3


def test_staged_photos_in_a_batch_program_run_to_the_outputs_of_uploaded_ones(detector, monkeypatch):
    """A batch of one bucket run once in its batch program (FACERUN_PHOTO_ITEMS=on, batch.ItemsBatch): staged photos
    copied into their places on the device give the outputs of the same photos uploaded, bit for bit."""
    monkeypatch.setenv("FACERUN_PHOTO_ITEMS", "on")
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "2")
    det = detector
    pool = det.net.runner.model.staging
    crops = [_photo(3, 300, 401), _photo(1, 350, 450)]
    det.submit_networks([det.prepare(c) for c in crops])()  # the batch program's first batch: checked photo by photo
    assert det.net.runner.photos.items_agree is True
    plain = det.submit_networks([det.prepare(c) for c in crops])()
    free = len(pool.free)
    staged = [det.prepare(c) for c in crops]
    for p in staged:
        det.precompile(p)
        assert isinstance(p.image, StagedImage) and p.image.staged.taken(pool, p.image.shape)
    before = counters.snapshot().get("gpu_photo_item_batches", 0)
    got = det.submit_networks(staged)()
    assert counters.snapshot().get("gpu_photo_item_batches", 0) - before == 1
    assert all(not p.image.staged.taken(pool, p.image.shape) for p in staged)
    for g, want in zip(got, plain):
        assert _same(g.outputs, want.outputs)
    assert len(pool.free) == free  # both buffers back


def _same(a, b) -> bool:
    if hasattr(a, "rows"):  # runner.Selected
        return np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32)) and a.photo_hw == b.photo_hw
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_library_run_staging_photos_finds_the_faces_of_photos_run_alone(detector, tmp_path, monkeypatch):
    """Each photo run alone by detect() (uploaded by the calling thread: nothing staged) against the library run,
    every photo staged by a decoding thread and run in batches of a bucket."""
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "3")
    paths, want = [], []
    for i in range(8):
        rgb = _photo(i % 4, 300 + 20 * (i % 3), 400 + 30 * (i % 2))
        paths.append(tmp_path / f"p{i}.png")
        Image.fromarray(rgb).save(paths[-1])
        want.append(detector.detect(rgb))
    before = counters.snapshot()
    got = list(iter_photo_faces(paths, detector, workers=2))
    after = counters.snapshot()
    assert after.get("gpu_photos_staged", 0) - before.get("gpu_photos_staged", 0) == len(paths)
    assert after.get("gpu_photo_batches", 0) > before.get("gpu_photo_batches", 0)
    assert sum(len(faces) for faces in want) > 0 and [r.path for r in got] == paths
    for faces, result in zip(want, got):
        assert [(f.box, f.score) for f in faces] == [(f.box, f.score) for f in result.faces]


def test_a_mapping_still_pending_when_its_pool_goes_is_harmless(gpu):
    """wgpu reports a mapping in a later poll: the pool (a model's) may be gone by then."""
    from facerun.gpu import readback, staging

    _need_photos()
    pool = PhotoStaging(gpu, budget=2 * GRAIN)
    image = pool.stage(_photo(0, 64, 64))
    image.staged.hand_over()
    image.staged.release()  # its mapping asked for, not seen yet
    number = image.staged.slot.number
    assert number in staging._PENDING
    del pool, image
    gc.collect()
    readback.mapping_calls().poll(gpu.device, wait=True)  # the callback comes now, its slot kept until then
    assert number not in staging._PENDING


def test_an_input_goes_up_in_pieces_that_cover_it_once():
    from facerun.gpu.staging import write_pieces

    data = np.arange(3 * 2**20 // 4 + 5, dtype=np.float32)  # 3 MiB and 5 words
    for mb, pieces in (("1", 4), ("0", 1), ("8", 1), ("", 1)):  # unset: one write
        calls = []

        def write(buf, at, piece, calls=calls):
            calls.append((at, bytes(piece)))

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("FACERUN_UPLOAD_PIECE_MB", mb)
            write_pieces(write, "buf", 256, data)
        assert len(calls) == pieces
        assert [at for at, _ in calls] == [256 + i * 2**20 for i in range(pieces)]
        assert b"".join(b for _, b in calls) == data.tobytes()


def test_a_program_whose_input_went_up_in_pieces_gives_the_same_outputs(gpu, monkeypatch):
    import facerun
    from facerun.agree import seeded_input

    net = facerun.load("yunet-2023mar", device="gpu")
    x = seeded_input((1, 3, 96, 128), 3, (0.0, 255.0))  # 144 KiB
    monkeypatch.setenv("FACERUN_UPLOAD_PIECE_MB", "0")
    whole = net.run(x)
    monkeypatch.setenv("FACERUN_UPLOAD_PIECE_MB", "0.01")  # 15 pieces of 10 KiB
    pieces = net.run(x)
    assert net.device != "cpu"  # both on the GPU (a failed write would drop the model to the CPU)
    assert whole.keys() == pieces.keys()
    assert all(np.array_equal(whole[k], pieces[k]) for k in whole)
    other = net.run(seeded_input((1, 3, 96, 128), 4, (0.0, 255.0)))
    assert any(not np.array_equal(whole[k], other[k]) for k in whole)  # the outputs follow the input
