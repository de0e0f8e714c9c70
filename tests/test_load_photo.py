"""images.load_photo, the library run's decoder: four bytes a pixel copied out of Pillow in C, and the shrink to
--max-side made from Pillow's image. Its pixels must be load_image's and yunet.fit_max_side's, byte for byte, on
every shared photo and every image mode, so a library run finds exactly the faces `detect` finds photo by photo."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import DATA, FACES, YUNET, need_real_data
from PIL import Image

from facerun.errors import ImageError
from facerun.face import images
from facerun.face.images import iter_images, load_image, load_photo
from facerun.face.yunet import fit_max_side, shrunk_size


def _fit(side):
    return lambda width, height: shrunk_size(width, height, side)


@pytest.fixture(scope="module")
def shared_photos():
    need_real_data()
    paths = iter_images([FACES, DATA / "wider" / "images"])
    assert len(paths) > 150
    return paths


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
