"""Alignment: the similarity fit, the bilinear warp, and agreement with OpenCV's FaceRecognizerSF.alignCrop."""

from __future__ import annotations

import numpy as np
import pytest
from shared_paths import DATA, MODELS

from facerun.errors import InputError
from facerun.face import align

YUNET = MODELS / "face_detection_yunet_2023mar.onnx"
# alignCrop only lives on a FaceRecognizerSF, and creating one needs some embedder file
RECOGNIZER_MODEL = MODELS / "MobileFaceNet.onnx"
MAX_SIDE = 1280  # as facerun's detector: YuNet misses faces that fill very large photos


def _similarity(angle: float, scale: float, shift) -> np.ndarray:
    c, s = np.cos(angle) * scale, np.sin(angle) * scale
    return np.array([[c, -s, shift[0]], [s, c, shift[1]]])


def _apply(matrix, points) -> np.ndarray:
    return points @ matrix[:, :2].T + matrix[:, 2]


# ------------------------------------------------------------------------------------------------- the fit


def test_template_is_arcface_and_scales():
    t = align.template()
    assert t.shape == (5, 2)
    np.testing.assert_allclose(t[0], [38.2946, 51.6963])
    np.testing.assert_allclose(align.template(224), t * 2)
    # a non-square crop keeps the face's proportions and centres it
    wide = align.template((160, 112))
    np.testing.assert_allclose(wide, t + [24.0, 0.0])
    with pytest.raises(InputError):
        align.template(0)


def test_similarity_recovers_an_exact_transform():
    rng = np.random.default_rng(1)
    for _ in range(20):
        truth = _similarity(rng.uniform(-np.pi, np.pi), rng.uniform(0.2, 5.0), rng.uniform(-300, 300, 2))
        src = rng.uniform(0, 500, (5, 2))
        fitted = align.similarity_transform(src, _apply(truth, src))
        np.testing.assert_allclose(fitted, truth, atol=1e-8)


def test_similarity_is_the_least_squares_optimum():
    """With noisy points, the fit equals the solution of the linear least-squares problem in (a, b, tx, ty), where
    the similarity is [[a, -b, tx], [b, a, ty]]: a different route to the same optimum."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        src = rng.uniform(0, 400, (5, 2))
        dst = align.template() + rng.normal(0, 3, (5, 2))
        rows = []
        for (x, y) in src:
            rows.append([x, -y, 1, 0])
            rows.append([y, x, 0, 1])
        a, b, tx, ty = np.linalg.lstsq(np.array(rows), dst.reshape(-1), rcond=None)[0]
        expected = np.array([[a, -b, tx], [b, a, ty]])
        np.testing.assert_allclose(align.similarity_transform(src, dst), expected, atol=1e-8)


def test_mirrored_landmarks_give_a_rotation_not_a_reflection():
    src = align.template() * [-1.0, 1.0]  # left and right swapped by a mirror
    m = align.similarity_transform(src, align.template())
    assert np.linalg.det(m[:, :2]) > 0
    # the linear part is a scaled rotation: equal diagonal, opposite off-diagonal
    assert m[0, 0] == pytest.approx(m[1, 1]) and m[0, 1] == pytest.approx(-m[1, 0])


def test_bad_landmarks_are_input_errors():
    with pytest.raises(InputError):
        align.landmarks_transform(np.zeros((4, 2)))
    with pytest.raises(InputError):
        align.landmarks_transform(np.full((5, 2), 7.0))  # all at one point
    with pytest.raises(InputError):
        align.landmarks_transform(np.full((5, 2), np.nan))
    # a detector row (x, y, w, h, 10 landmark values, score) is accepted as well
    row = np.concatenate([[1, 2, 3, 4], align.template().reshape(-1), [0.9]])
    np.testing.assert_allclose(align.landmarks_transform(row), [[1, 0, 0], [0, 1, 0]], atol=1e-9)


# ------------------------------------------------------------------------------------------------ the warp


def test_warp_integer_shift_copies_pixels_and_fills_the_border_with_zero():
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    shift = np.array([[1.0, 0, -10], [0, 1.0, -5]])  # output (x, y) = input (x + 10, y + 5)
    out = align.warp_affine(image, shift, (45, 40))
    np.testing.assert_array_equal(out[:35, :40], image[5:40, 10:50])
    assert not out[35:].any() and not out[:, 40:].any()


def test_warp_matches_opencv_warpaffine():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)
    for _ in range(5):
        m = _similarity(rng.uniform(-1, 1), rng.uniform(0.5, 2.0), rng.uniform(-40, 40, 2))
        ours = align.warp_affine(image, m, (100, 80)).astype(int)
        theirs = cv2.warpAffine(image, m, (100, 80), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        assert np.abs(ours - theirs.astype(int)).mean() <= 0.5
    gray = align.warp_affine(image[:, :, 0], m, 64, dtype=np.float32)
    assert gray.shape == (64, 64) and gray.dtype == np.float32


# ------------------------------------------------------------------------------------ OpenCV's alignCrop


@pytest.fixture(scope="module")
def opencv_faces():
    """(BGR image, OpenCV detector row) for every face cv2.FaceDetectorYN finds in a sample of the shared photos."""
    cv2 = pytest.importorskip("cv2")
    if not YUNET.exists() or not RECOGNIZER_MODEL.exists():
        pytest.skip(f"models not found in {MODELS}")
    photos = sorted((DATA / "faces").glob("*/*"))
    if not photos:
        pytest.skip(f"photos not found in {DATA}")
    detector = cv2.FaceDetectorYN.create(str(YUNET), "", (320, 320), 0.6, 0.3, 5000)
    found = []
    for path in photos[::3]:
        image = cv2.imread(str(path))
        scale = MAX_SIDE / max(image.shape[:2])
        if scale < 1:
            image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        detector.setInputSize((image.shape[1], image.shape[0]))
        _, rows = detector.detect(image)
        for row in rows if rows is not None else []:
            found.append((path.relative_to(DATA).as_posix(), image, row))
    assert len(found) >= 30
    return found


def test_align_matches_opencv_aligncrop(opencv_faces):
    import cv2

    recognizer = cv2.FaceRecognizerSF.create(str(RECOGNIZER_MODEL), "")
    diffs = []
    for name, image, row in opencv_faces:
        theirs = recognizer.alignCrop(image, row)
        ours = align.align_face(image, row[4:14].reshape(5, 2))
        assert ours.shape == theirs.shape == (112, 112, 3)
        diff = np.abs(ours.astype(int) - theirs.astype(int)).mean()
        assert diff <= 1.0, f"{name}: mean difference {diff:.3f} grey levels"
        diffs.append(diff)
    print(f"\nalignCrop: {len(diffs)} faces, mean abs difference {np.mean(diffs):.4f} "
          f"(worst {np.max(diffs):.4f}) grey levels")


def test_facerun_landmarks_align_like_opencv(opencv_faces):
    """The whole path: facerun's own detector on RGB, then facerun's alignment, against OpenCV end to end."""
    import cv2

    from facerun.face.detect import Detector

    recognizer = cv2.FaceRecognizerSF.create(str(RECOGNIZER_MODEL), "")
    detector = Detector(YUNET, device="cpu", max_side=0)
    for name, bgr, row in opencv_faces[:4]:
        rgb = np.ascontiguousarray(bgr[:, :, ::-1])
        faces = detector.detect(rgb)
        nearest = min(faces, key=lambda f: np.abs(np.asarray(f.box) - row[:4]).sum())
        ours = align.align_face(rgb, nearest.landmarks)[:, :, ::-1]
        theirs = recognizer.alignCrop(bgr, row)
        diff = np.abs(ours.astype(int) - theirs.astype(int)).mean()
        assert diff <= 1.0, f"{name}: mean difference {diff:.3f} grey levels"


def test_larger_crop_puts_landmarks_on_the_scaled_template(opencv_faces):
    _, image, row = opencv_faces[0]
    marks = row[4:14].reshape(5, 2).astype(np.float64)
    for size in (112, 224, (128, 160)):
        m = align.landmarks_transform(marks, size)
        # a least-squares fit: the landmarks land near the template (within a few pixels at 112)
        w, h = (size, size) if isinstance(size, int) else size
        residual = np.abs(_apply(m, marks) - align.template(size)).max()
        assert residual < 8 * min(w, h) / 112
        assert align.align_face(image, marks, size).shape == (h, w, 3)


def _warp_by_the_book(image, m, w, h, border=0.0):
    """The bilinear warp spelled out with 2-D indexing and masks (no region, no gathers): the float32 sums in the
    order warp_affine's docstring gives."""
    inv = align.invert_affine(m)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    sx = inv[0, 0] * xs + inv[0, 1] * ys + inv[0, 2]
    sy = inv[1, 0] * xs + inv[1, 1] * ys + inv[1, 2]
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    fx, fy = (sx - x0).astype(np.float32)[..., None], (sy - y0).astype(np.float32)[..., None]
    img = image.astype(np.float32)

    def at(y, x):
        inside = (y >= 0) & (y < image.shape[0]) & (x >= 0) & (x < image.shape[1])
        got = img[np.clip(y, 0, image.shape[0] - 1), np.clip(x, 0, image.shape[1] - 1)]
        return np.where(inside[..., None], got, np.float32(border))

    top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
    bottom = at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
    return np.clip(np.rint(top * (1 - fy) + bottom * fy), 0, 255).astype(np.uint8)


def test_the_warp_is_the_bilinear_sum_bit_for_bit():
    """Faces inside the photo, across its edge and past it, three channels and one: every pixel the very value of the
    sum written out plainly (the fast path's planes and gathers change nothing)."""
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (70, 90, 3), dtype=np.uint8)
    for angle, scale, shift in [(0.3, 1.7, (10, 5)), (-0.8, 0.6, (-30, 20)), (2.0, 1.0, (60, 60)), (0.1, 3.0, (0, 0))]:
        m = _similarity(angle, scale, np.array(shift, float))
        want = _warp_by_the_book(image, m, 48, 40)
        np.testing.assert_array_equal(align.warp_affine(image, m, (48, 40)), want)
        np.testing.assert_array_equal(align.warp_affine(image[:, :, 1], m, (48, 40)), want[:, :, 1])
        np.testing.assert_array_equal(align.warp_affine(image, m, (48, 40), border_value=255),
                                      _warp_by_the_book(image, m, 48, 40, border=255))


def test_a_face_cut_for_the_device_warps_to_align_faces_crop_bit_for_bit():
    """cut_face keeps only the part of the photo a face's crop samples (black past the photo's edge): warping it
    gives align_face's crop byte for byte, on real faces and on the same photos cut through the middle of them."""
    from facerun.face.detect import Detector
    from facerun.face.images import load_image

    if not YUNET.exists():
        pytest.skip(f"models not found in {MODELS}")
    detector = Detector(YUNET, device="cpu")
    faces = 0
    for name in ("deepface_selfie-many-people.jpg", "fr_obama_and_biden.jpg"):
        rgb = load_image(DATA / "faces" / "group" / name)
        for face in detector.detect(rgb):
            cut = align.cut_face(rgb, face.landmarks)
            assert np.array_equal(align.warp_cut(cut), align.align_face(rgb, face.landmarks))
            assert cut.region.shape[0] * cut.region.shape[1] < rgb.shape[0] * rgb.shape[1] / 4
            middle = int(face.box[0] + face.box[2] / 2)  # the photo's left part gone, through the face
            part, marks = rgb[:, middle:], face.landmarks - [middle, 0]
            half = align.cut_face(part, marks)
            assert np.array_equal(align.warp_cut(half), align.align_face(part, marks))
            assert not half.region[:, :4].any()  # the frame past the edge is black
            faces += 1
    assert faces >= 6
    with pytest.raises(InputError):
        align.cut_face(np.zeros((10, 10), np.uint8), faces * np.ones((5, 2)))
