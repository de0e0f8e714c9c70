"""A photo laid out on the device (GpuProgram.run_image): the bytes go up, the image kernel makes YuNet's blob, and
the outputs are the very ones of the CPU-made blob; the detector uses it once the first photo showed that."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import FACES, YUNET, need_real_data

from facerun.errors import GpuError
from facerun.face.yunet import make_blob


@pytest.fixture(scope="module")
def yunet_gpu(gpu):
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET), device="gpu")
    net.run(np.zeros((1, 3, 96, 128), np.float32))  # the model's check
    return net


def _compiled(net, shape):
    return net.gpu.model.compile(net.program(shape))


@pytest.mark.parametrize("hw", [(97, 131), (96, 128), (64, 33), (1, 1)])
def test_the_devices_layout_is_the_cpus_blob(yunet_gpu, hw):
    rgb = np.random.default_rng(hw[0]).integers(0, 256, hw + (3,), dtype=np.uint8)
    blob = make_blob(rgb)  # zero-padded to multiples of 32, BGR
    gp = _compiled(yunet_gpu, blob.shape)
    got, want = gp.run_image(rgb), gp.run({"input": blob})
    assert all(np.array_equal(got[name], want[name]) for name in want)


@pytest.mark.parametrize("hw", [(97, 131), (64, 33), (1, 1)])
def test_four_byte_pixels_lay_out_as_the_three_byte_ones(yunet_gpu, hw):
    # images.load_photo's layout: R, G, B and a byte the kernel must not read (filled with noise here)
    rgbx = np.random.default_rng(hw[1]).integers(0, 256, hw + (4,), dtype=np.uint8)
    rgb = np.ascontiguousarray(rgbx[:, :, :3])
    blob = make_blob(rgb)
    assert np.array_equal(make_blob(rgbx), blob)
    gp = _compiled(yunet_gpu, blob.shape)
    want = gp.run({"input": blob})
    for got in (gp.run_image(rgbx), gp.run_image(rgb)):
        assert all(np.array_equal(got[name], want[name]) for name in want)
    flipped = gp.run_image(rgbx, bgr=False)
    as_is = gp.run({"input": np.pad(rgb.transpose(2, 0, 1)[None].astype(np.float32),
                                    [(0, 0), (0, 0), (0, blob.shape[2] - hw[0]), (0, blob.shape[3] - hw[1])])})
    assert all(np.array_equal(flipped[name], as_is[name]) for name in as_is)


def test_a_growing_and_shrinking_photo_buffer(yunet_gpu):
    rng = np.random.default_rng(7)
    # a small photo, then one needing a larger bytes buffer, then small again: each laid out right
    for hw in [(40, 50), (200, 250), (33, 31), (200, 250)]:
        rgb = rng.integers(0, 256, hw + (3,), dtype=np.uint8)
        blob = make_blob(rgb)
        gp = _compiled(yunet_gpu, blob.shape)
        got, want = gp.run_image(rgb), gp.run({"input": blob})
        assert all(np.array_equal(got[name], want[name]) for name in want)


def test_rgb_order_and_bad_images(yunet_gpu):
    rgb = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    gp = _compiled(yunet_gpu, (1, 3, 64, 64))
    as_is = gp.run({"input": rgb.transpose(2, 0, 1)[None].astype(np.float32)})
    got = gp.run_image(rgb, bgr=False)
    assert all(np.array_equal(got[name], as_is[name]) for name in as_is)
    with pytest.raises(GpuError, match=r"at most 64x64x3 \(or x4\) uint8"):
        gp.run_image(np.zeros((65, 64, 3), np.uint8))
    with pytest.raises(GpuError, match="uint8"):
        gp.run_image(rgb.astype(np.float32))


def test_the_detector_sends_photos_as_bytes_after_the_first_agreed(gpu):
    from facerun.face.detect import Detector
    from facerun.face.images import load_image

    need_real_data()
    detector = Detector(str(YUNET), device="gpu")
    on_cpu = Detector(str(YUNET), device="cpu")
    rgb = load_image(FACES / "group" / "openface_longoria-cooper.jpg")
    prepared = detector.prepare(rgb)
    assert prepared.blob is None and prepared.image is not None and prepared.shape[2] % 32 == 0
    faces = detector.faces_from(detector.run_network(prepared))
    assert detector.net.gpu.image_layout is True  # checked on this first photo against the CPU-made blob
    want = on_cpu.detect(rgb)
    assert len(faces) == len(want) >= 1
    for got, ref in zip(faces, want):
        assert abs(got.score - ref.score) < 1e-3 and np.allclose(got.box, ref.box, atol=0.5)
