"""images.load_photo, the library run's decoder: four bytes a pixel copied out of Pillow in C (or decoded into that
layout by libjpeg-turbo's own API, images._turbo), and the shrink to --max-side made from Pillow's image. Its pixels
must be load_image's and yunet.fit_max_side's, byte for byte, on every shared photo and every image mode, so a
library run finds exactly the faces `detect` finds photo by photo. Every test runs with both JPEG decoders."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import DATA, FACES, YUNET, need_real_data
from PIL import Image

from facerun.errors import ImageError
from facerun.face import images, turbo
from facerun.face.images import iter_images, load_image, load_photo, load_photo_shrunk
from facerun.face.yunet import fit_max_side, shrunk_size


@pytest.fixture(autouse=True, params=["pillow", "turbo"])
def jpeg_decoder(request, monkeypatch):
    """Each test once with Pillow decoding the JPEGs and once with libjpeg-turbo's API (simplejpeg); the tests over
    every shared photo once, with the decoder facerun picks (ONE_DECODER: test_turbo compares the two on them)."""
    if request.param == "default":
        monkeypatch.delenv("FACERUN_JPEG", raising=False)
        return request.param
    if request.param == "turbo":
        pytest.importorskip("simplejpeg", reason="simplejpeg is not installed (pip install 'facerun[jpeg]')")
    monkeypatch.setenv("FACERUN_JPEG", request.param)
    assert turbo.available() == (request.param == "turbo")
    return request.param


ONE_DECODER = pytest.mark.parametrize("jpeg_decoder", ["default"], indirect=True)


def _fit(side):
    return lambda width, height: shrunk_size(width, height, side)


@pytest.fixture(scope="module")
def shared_photos():
    need_real_data()
    paths = iter_images([FACES, DATA / "wider" / "images"])
    assert len(paths) > 150
    return paths


@ONE_DECODER
def test_every_shared_photo_decodes_to_load_images_pixels_and_shrinks_as_fit_max_side(shared_photos):
    shrunk_count = 0
    for path in shared_photos:
        want = load_image(path)
        pixels, shrunk = load_photo(path, _fit(640))
        assert pixels.shape == want.shape[:2] + (4,) and pixels.dtype == np.uint8 and pixels.flags.c_contiguous
        assert np.array_equal(pixels[:, :, :3], want), path
        small, sx, sy = fit_max_side(want, 640)
        if shrunk is None:
            assert small is want, path
            continue
        shrunk_count += 1
        assert shrunk.shape == small.shape[:2] + (4,) and np.array_equal(shrunk[:, :, :3], small), path
        assert (sx, sy) == (shrunk.shape[1] / want.shape[1], shrunk.shape[0] / want.shape[0])
    assert shrunk_count > 50  # most shared photos are larger than 640


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "CMYK", "I;16", "I"])
def test_every_image_mode_gives_load_images_pixels(tmp_path, mode):
    need_real_data()
    rgb = load_image(FACES / "group" / "fr_two_people.jpg")[:300, :400]
    if mode == "I;16":
        image = Image.fromarray(rgb[:, :, 1].astype(np.uint16) * 257 + 5)
    elif mode == "I":
        image = Image.fromarray(rgb[:, :, 0].astype(np.int32) * 3)
    else:
        image = Image.fromarray(rgb).convert(mode)
    path = tmp_path / ("photo.tif" if mode in ("CMYK", "I") else "photo.png")
    image.save(path)
    pixels, shrunk = load_photo(path, _fit(200))
    assert np.array_equal(pixels[:, :, :3], load_image(path))
    assert np.array_equal(shrunk[:, :, :3], fit_max_side(load_image(path), 200)[0])


def test_exif_turned_photos_are_turned_before_the_shrink(tmp_path):
    need_real_data()
    rgb = load_image(FACES / "group" / "fr_two_people.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "turned.jpg"
    Image.fromarray(rgb).transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes(), quality=95)
    want = load_image(path)
    assert want.shape[:2] == rgb.shape[:2]
    pixels, shrunk = load_photo(path, _fit(300))
    assert np.array_equal(pixels[:, :, :3], want)
    assert np.array_equal(shrunk[:, :, :3], fit_max_side(want, 300)[0])


def test_without_pillows_core_paste_the_pixels_are_the_same(monkeypatch):
    need_real_data()
    path = FACES / "group" / "fr_two_people.jpg"
    fast = load_photo(path, _fit(500))

    def refuse(*args, **kwargs):
        raise ValueError("no shared buffers here")

    monkeypatch.setattr(images.Image, "frombuffer", refuse)
    slow = load_photo(path, _fit(500))
    assert np.array_equal(fast[0][:, :, :3], slow[0][:, :, :3]) and np.array_equal(fast[1][:, :, :3],
                                                                                   slow[1][:, :, :3])


def test_bad_files_give_load_images_messages(tmp_path):
    need_real_data()
    text = tmp_path / "notes.jpg"
    text.write_text("not a picture\n")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes((FACES / "group" / "fr_two_people.jpg").read_bytes()[:2000])
    for path in (tmp_path / "missing.jpg", tmp_path, text, truncated):
        with pytest.raises(ImageError) as want:
            load_image(path)
        with pytest.raises(ImageError) as got:
            load_photo(path, _fit(640))
        assert str(got.value) == str(want.value) and "\n" not in str(got.value)


def test_the_detector_takes_load_photos_pixels_and_finds_detects_faces():
    from facerun.face.detect import Detector

    need_real_data()
    detector = Detector(str(YUNET), device="cpu", max_side=480)
    for name in ("group/fr_obama_and_biden.jpg", "obama/obama3.jpg", "Tom_Hanks/Tom_Hanks_54745.png"):
        path = FACES / name
        pixels, shrunk = load_photo(path, detector.fit_size)
        got = detector.faces_from(detector.run_network(detector.prepare(pixels, shrunk)))
        want = detector.detect(load_image(path))
        assert len(got) == len(want) >= 1
        for a, b in zip(got, want):
            assert a.score == b.score and a.box == b.box and np.array_equal(a.landmarks, b.landmarks)
    with pytest.raises(Exception, match="shrinks to"):
        pixels, shrunk = load_photo(FACES / "obama" / "obama3.jpg", _fit(300))
        detector.prepare(pixels, shrunk)


# ------------------------------------------------------------------------------------- draft decoding


def _drafts(monkeypatch) -> list:
    """The scales libjpeg was asked to decode at (JpegImageFile.draft's answers, or turbo.decode's scale), recorded."""
    from PIL import JpegImagePlugin

    asked = []
    real = JpegImagePlugin.JpegImageFile.draft
    real_turbo = turbo.decode

    def draft(self, mode, size):
        before = self.size
        out = real(self, mode, size)
        asked.append(round(before[0] / self.size[0]))
        return out

    def turbo_decode(data, width, height, scale=1, channels=4):
        asked.append(scale)
        return real_turbo(data, width, height, scale, channels)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", draft)
    monkeypatch.setattr(turbo, "decode", turbo_decode)
    return asked


@ONE_DECODER
def test_load_photo_shrunk_drafts_only_jpegs_twice_the_fitted_size(shared_photos, monkeypatch):
    """Every shared photo fitted to 1280 and to 640: a JPEG at least twice the fitted size on both sides decodes
    scaled down (to no less than that size) and gives pixels close to the full decode's shrink, at the photo's own
    size; every other photo gives load_photo's shrunk pixels byte for byte."""
    asked = _drafts(monkeypatch)
    drafted, means = 0, []
    for side in (1280, 640):
        for path in shared_photos:
            pixels, shrunk = load_photo(path, _fit(side))
            want = pixels if shrunk is None else shrunk
            before = len(asked)
            got, size = load_photo_shrunk(path, _fit(side))
            assert size == (pixels.shape[1], pixels.shape[0]), path
            assert got.shape == want.shape and got.flags.c_contiguous, path
            if len(asked) == before or asked[-1] == 1:
                assert np.array_equal(got[:, :, :3], want[:, :, :3]), path
                continue
            drafted += 1
            assert path.suffix.lower() in (".jpg", ".jpeg")
            with Image.open(path) as image:
                assert min(image.size[0] / got.shape[1], image.size[1] / got.shape[0]) >= 2
            diff = np.abs(got[:, :, :3].astype(np.int16) - want[:, :, :3])
            means.append(diff.mean())
            # the DCT's scaling filters otherwise than Pillow's shrink: 50 drafts, mean difference 0.51 levels
            # (the sharpest photo 2.2), 99% of values within 5 levels (the sharpest within 17)
            assert diff.mean() < 3.0 and np.percentile(diff, 99) <= 24, (path, diff.mean())
    assert drafted >= 40  # two shared photos past 2560 pixels, many past 1280
    assert np.median(means) < 1.0


def test_a_turned_camera_photo_drafts_upright(tmp_path, monkeypatch):
    """EXIF orientation 6 on a 3000x2000 JPEG: the draft is asked in the stored orientation, the photo comes out
    upright at its upright size, close to load_photo's shrink."""
    need_real_data()
    rgb = np.asarray(Image.fromarray(load_image(FACES / "group" / "fr_two_people.jpg")).resize((3000, 2000)))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "turned.jpg"
    Image.fromarray(rgb).transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes(), quality=95)
    asked = _drafts(monkeypatch)
    got, size = load_photo_shrunk(path, _fit(640))
    # 2000x3000 stored (drafted to 500x750), 3000x2000 upright, fitted to 640x427
    assert asked == [4] and size == (3000, 2000)
    _, want = load_photo(path, _fit(640))
    assert got.shape == want.shape == (427, 640, 4)
    assert np.abs(got[:, :, :3].astype(np.int16) - want[:, :, :3]).mean() < 2.0


def test_a_detect_only_library_run_drafts_and_finds_the_full_decodes_faces(monkeypatch):
    """The library run without an embedder decodes the two large shared JPEGs scaled down; their faces are the full
    decode's (boxes within IoU 0.97, scores within 0.01), given at the photo's own size. With an embedder the photos
    decode at full size (alignment crops them)."""
    from facerun.bench.photos import iou
    from facerun.face.detect import Detector
    from facerun.face.library import iter_photo_faces_serial

    need_real_data()
    paths = [FACES / "deepface_id03" / "img49.jpg", FACES / "deepface_id08" / "img40.jpg"]
    detector = Detector(str(YUNET), device="cpu")
    asked = _drafts(monkeypatch)
    drafted = list(iter_photo_faces_serial(paths, detector))
    assert [s for s in asked if s > 1] == [2, 2]
    full = list(iter_photo_faces_serial(paths, detector, draft=False))
    assert [s for s in asked if s > 1] == [2, 2]
    for a, b in zip(drafted, full):
        assert (a.width, a.height) == (b.width, b.height) == load_image(a.path).shape[1::-1]
        assert len(a.faces) == len(b.faces) >= 1
        for fa, fb in zip(a.faces, b.faces):
            assert iou(fa.box, fb.box) > 0.97 and abs(float(fa.score) - float(fb.score)) < 0.01
            assert np.abs(np.asarray(fa.landmarks) - np.asarray(fb.landmarks)).max() < 0.01 * a.width
    list(iter_photo_faces_serial(paths, detector, keep_images=True))
    assert [s for s in asked if s > 1] == [2, 2]  # keeping the photos: full size
