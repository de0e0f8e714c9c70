"""The library run behind one entry (facerun.face.engines.run): its engine table, the options value, and a plain
detector (only detect()) run through the library by its adapter, on the shared photos."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from people_fixtures import FACES, SMALL_PHOTOS, copy_photos, need_real_data

from facerun.errors import InputError
from facerun.face.engines import ENGINES, run
from facerun.face.images import load_image
from facerun.face.library import LibraryOptions, LibraryStats, iter_photo_faces_serial
from facerun.face.photo_detector import PhotoDetector, PlainDetector, photo_detector


class OnlyDetect:
    """A detector of someone else's making: one method, detect(rgb), and nothing the library could stage."""

    def __init__(self, detector):
        self._detector = detector
        self.seen: list[tuple] = []

    def detect(self, rgb):
        # what a plain detect() may expect: an H x W x 3 uint8 array, C-contiguous
        assert rgb.ndim == 3 and rgb.shape[2] == 3 and rgb.dtype == np.uint8 and rgb.flags.c_contiguous
        self.seen.append(rgb.shape)
        return self._detector.detect(rgb)


def _faces(results):
    return [(r.path, r.error, [(f.score, f.box, f.landmarks.tolist()) for f in r.faces]) for r in results]


@pytest.mark.parametrize("engine", ["threads", "serial"])
def test_a_plain_detector_runs_through_the_library_with_the_same_faces(tmp_path, yunet_cpu, mobilefacenet, engine):
    need_real_data()
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    paths = [FACES / p for p in SMALL_PHOTOS[:3]] + [broken] + [FACES / p for p in SMALL_PHOTOS[5:7]]
    plain = OnlyDetect(yunet_cpu)
    assert not isinstance(plain, PhotoDetector) and isinstance(photo_detector(plain), PlainDetector)
    assert photo_detector(yunet_cpu) is yunet_cpu  # facerun's Detector is one itself: no adapter

    stats = LibraryStats()
    got = list(run(paths, plain, mobilefacenet, LibraryOptions(batch=3, workers=2, engine=engine), stats=stats))
    assert [r.path for r in got] == paths and got[3].error is not None and "broken.jpg" in got[3].error
    # detect() called once per readable photo, on the photo at its own size (no shrunk decode for it)
    assert sorted(plain.seen) == sorted(load_image(p).shape for p in paths if p != broken)
    assert all(r.input_size is None for r in got) and stats.photos == len(paths)
    # the faces are the detector's own, photo by photo
    for r in got:
        if r.ok:
            want = yunet_cpu.detect(load_image(r.path))
            assert [f.box for f in r.faces] == [f.box for f in want] and len(r.faces) == len(r.embeddings)
    assert sum(len(r.faces) for r in got) > len(paths)  # group photos: batches of 3 span photos
    # and the embeddings those faces get through the staged detector's own run
    staged = list(iter_photo_faces_serial(paths, yunet_cpu, mobilefacenet, batch=3))
    assert _faces(got) == _faces(staged)
    for a, b in zip(got, staged):
        np.testing.assert_array_equal(a.embeddings, b.embeddings)


def test_a_plain_detector_decodes_at_full_size_even_in_a_detect_only_run(yunet_cpu):
    """draft (a detect-only run) shrinks large JPEGs in the decoder only for a detector that says how far (fit_size);
    a plain one gets every photo whole, so its faces equal detect() on load_image's pixels."""
    need_real_data()
    photo = FACES / "group" / "fr_kit_with_rose.jpg"
    plain = OnlyDetect(yunet_cpu)
    (result,) = run([photo], plain, None, LibraryOptions(draft=True, workers=0))
    rgb = load_image(photo)
    assert plain.seen == [rgb.shape] and (result.width, result.height) == (rgb.shape[1], rgb.shape[0])
    assert [f.box for f in result.faces] == [f.box for f in yunet_cpu.detect(rgb)]


def test_the_engine_table_names_every_engine_and_refuses_an_unknown_one_before_any_work():
    assert list(ENGINES) == ["threads", "serial", "processes", "auto", "ray"]

    def paths():
        raise AssertionError("no photo may be listed for an unknown engine")
        yield

    with pytest.raises(InputError) as caught:
        run(paths(), None, None, LibraryOptions(engine="gpu-farm"))
    assert str(caught.value) == "unknown library engine 'gpu-farm' (one of threads, serial, processes, auto, ray)"


def test_the_options_are_one_checked_frozen_value():
    options = LibraryOptions(batch=4, all_faces=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch = 8
    with pytest.raises(InputError, match="batch must be 1 or more, not 0"):
        LibraryOptions(batch=0)
    with pytest.raises(InputError, match="processes must be 1 or more, not 0"):
        LibraryOptions(engine="processes", processes=0)


def test_the_engines_beyond_this_process_say_what_they_need(yunet_cpu):
    # a loaded detector cannot go to another process: the processes engine wants its keyword arguments
    with pytest.raises(InputError, match="keyword arguments"):
        list(run([FACES / SMALL_PHOTOS[0]], yunet_cpu, None, LibraryOptions(engine="processes", processes=2)))
    with pytest.raises(InputError, match="RaySettings"):
        list(run([FACES / SMALL_PHOTOS[0]], yunet_cpu, None, LibraryOptions(engine="ray")))


def test_the_index_takes_the_options_whole(tmp_path, yunet_cpu, mobilefacenet):
    """FaceIndex.update runs its photos by the options it is handed: all_faces=False stores each photo's largest."""
    from facerun.people.index import FaceIndex

    need_real_data()
    copy_photos(tmp_path / "photos", SMALL_PHOTOS[5:7])  # two group photos
    stats = LibraryStats()
    with FaceIndex(tmp_path / "faces.db") as index:
        report = index.update([tmp_path / "photos"], embedder=mobilefacenet, detector=yunet_cpu,
                              options=LibraryOptions(batch=2, all_faces=False, engine="serial"), stats=stats)
        stored = index.faces()
    assert report.added == 2 and report.faces == len(stored) == 2 and stats.photos == 2
    # the largest of each photo, as the detector finds them
    for path in sorted({*stored.paths}):
        faces = yunet_cpu.detect(load_image(path))
        largest = max(faces, key=lambda f: float(f.box[2]) * float(f.box[3]))
        got = stored.boxes[stored.paths.index(path)]
        np.testing.assert_allclose(got, largest.box, rtol=0, atol=1e-4)
