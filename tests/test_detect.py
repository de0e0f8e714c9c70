"""YuNet detection on facerun's runtime against OpenCV's cv2.FaceDetectorYN (same model file, same input size).

OpenCV pads the image to a multiple of 32 inside `detect`; it is given the image size and the very same pixels.
Large photos are first shrunk (by the test, with facerun's own resize) so both detectors see equal input and the
sweep stays quick on the CPU interpreter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from facerun.cli import main
from facerun.errors import InputError, ModelError
from facerun.face import yunet
from facerun.face.detect import DEFAULT_MAX_SIDE, Detector, Face
from facerun.face.draw import BOX_COLOUR
from facerun.face.evaluate import box_iou
from facerun.face.images import iter_images, load_image

cv2 = pytest.importorskip("cv2")

SWEEP_MAX_SIDE = 640  # the sweep's input size cap (both detectors get the same shrunk image)
SCORE, NMS, TOP_K = 0.6, 0.3, 5000


@pytest.fixture(scope="module")
def model_2023(models_dir) -> Path:
    return models_dir / "face_detection_yunet_2023mar.onnx"


@pytest.fixture(scope="module")
def model_2022(models_dir) -> Path:
    path = models_dir / "face_detection_yunet_2022mar.onnx"
    if not path.exists():
        pytest.skip("face_detection_yunet_2022mar.onnx not in the models folder")
    return path


@pytest.fixture(scope="module")
def cpu_detector(model_2023) -> Detector:
    return Detector(model_2023, device="cpu", score=SCORE, nms=NMS, top_k=TOP_K)


@pytest.fixture(scope="module")
def opencv(model_2023):
    """rgb -> OpenCV's N x 15 rows for that exact image."""
    detector = cv2.FaceDetectorYN.create(str(model_2023), "", (320, 320), SCORE, NMS, TOP_K)

    def run(rgb: np.ndarray) -> np.ndarray:
        detector.setInputSize((rgb.shape[1], rgb.shape[0]))
        _, faces = detector.detect(np.ascontiguousarray(rgb[:, :, ::-1]))
        return np.zeros((0, 15), dtype=np.float32) if faces is None else faces

    return run


@pytest.fixture(scope="module")
def two_people(data_dir) -> Path:
    return data_dir / "faces" / "group" / "fr_two_people.jpg"


def _rows(faces: list[Face]) -> np.ndarray:
    return np.asarray([[*f.box, *f.landmarks.ravel(), f.score] for f in faces], dtype=np.float64).reshape(-1, 15)


def parity_problems(ours: np.ndarray, theirs: np.ndarray, iou_min=0.95, score_tol=1e-3, landmark_tol=1.0) -> list:
    """What differs between two sets of face rows (empty: they agree). Faces are paired by best IoU."""
    if len(ours) != len(theirs):
        return [f"{len(ours)} faces vs OpenCV's {len(theirs)} (scores {np.round(ours[:, 14], 3).tolist()} vs "
                f"{np.round(theirs[:, 14], 3).tolist()})"]
    problems = []
    if len(ours) == 0:
        return problems
    iou = box_iou(ours[:, :4], theirs[:, :4])
    taken = set()
    for i in np.argsort(-ours[:, 14], kind="stable"):
        j = next((j for j in np.argsort(-iou[i]) if j not in taken), None)
        taken.add(j)
        if iou[i, j] < iou_min:
            problems.append(f"face {i}: box IoU {iou[i, j]:.4f}")
        if abs(ours[i, 14] - theirs[j, 14]) > score_tol:
            problems.append(f"face {i}: score {ours[i, 14]:.5f} vs {theirs[j, 14]:.5f}")
        worst = np.abs(ours[i, 4:14] - theirs[j, 4:14]).max()
        if worst > landmark_tol:
            problems.append(f"face {i}: landmark off by {worst:.2f} px")
    return problems


# ------------------------------------------------------------------------------------------ pre/post-processing


def test_blob_matches_opencv_padding_and_layout(two_people):
    rgb = load_image(two_people)[:333, :517]  # neither side a multiple of 32
    blob = yunet.make_blob(rgb)
    assert blob.shape == (1, 3, 352, 544) and blob.dtype == np.float32
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    padded = cv2.copyMakeBorder(bgr, 0, 352 - 333, 0, 544 - 517, cv2.BORDER_CONSTANT, value=0)
    assert np.array_equal(blob, cv2.dnn.blobFromImage(padded))
    assert yunet.padded_size(640, 480) == (640, 480) and yunet.padded_size(641, 1) == (672, 32)


def test_nms_matches_opencv_nmsboxes():
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        xy = rng.uniform(-20, 200, size=(n, 2))
        wh = rng.uniform(0.5, 80, size=(n, 2))
        boxes = np.hstack([xy, wh]).astype(np.float32)
        # clusters of near-duplicates, exact score ties and scores equal to the threshold
        boxes[n // 2:] = boxes[: n - n // 2] + rng.normal(0, 3, size=(n - n // 2, 4)).astype(np.float32)
        scores = np.round(rng.uniform(0.3, 1.0, size=n), 2).astype(np.float32)
        score_thr = float(np.float32(rng.choice([0.5, 0.6, scores[0]])))
        nms_thr = float(rng.choice([0.0, 0.3, 0.45, 0.7]))
        top_k = int(rng.choice([0, 5, 5000]))
        ours = yunet.nms_boxes(boxes, scores, score_thr, nms_thr, top_k)
        rects = np.trunc(boxes).astype(int).tolist()  # face_detect.cpp hands NMSBoxes Rect2i(int(x), ...)
        theirs = cv2.dnn.NMSBoxes(rects, scores.tolist(), score_thr, nms_thr, 1.0, top_k)
        assert list(ours) == list(np.asarray(theirs).ravel()), f"trial {trial}"


def test_generation_from_output_names():
    assert yunet.model_generation(yunet.OUTPUTS_2023) == yunet.GENERATION_2023
    assert yunet.model_generation(["loc", "conf", "iou"]) == yunet.GENERATION_2022
    with pytest.raises(ModelError, match="not a YuNet"):
        yunet.model_generation(["output0"])


def test_a_non_yunet_model_is_refused(models_dir):
    path = models_dir / "MobileFaceNet.onnx"
    if not path.exists():
        pytest.skip("MobileFaceNet.onnx not in the models folder")
    with pytest.raises(ModelError, match="not a face detector"):
        Detector(path, device="cpu")


def test_prior_boxes_match_the_2022_graph(model_2022):
    import facerun

    net = facerun.load(str(model_2022), device="cpu")
    for height, width in [(120, 160), (352, 544)]:
        out = net.run(np.zeros((1, 3, height, width), dtype=np.float32))
        assert yunet.prior_boxes_2022(height, width).shape[0] == np.asarray(out["loc"]).reshape(-1, 14).shape[0]


# -------------------------------------------------------------------------------------------- parity sweep


def _sweep_photos(data_dir) -> list[Path]:
    return iter_images([data_dir / "faces", data_dir / "wider" / "images"])


# The GPU sweep takes every 10th photo (about 2 s a photo on lavapipe: all 206 would take 7 minutes of CI);
# FACERUN_TEST_GPU_SWEEP_EVERY=1 sweeps them all. The CPU sweep always takes every photo.
GPU_SWEEP_EVERY = int(os.environ.get("FACERUN_TEST_GPU_SWEEP_EVERY", "10"))


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_every_photo_matches_opencv(device, model_2023, opencv, data_dir, request):
    if device == "gpu":
        request.getfixturevalue("gpu")  # skips without an adapter, fails under CI=true
    detector = Detector(model_2023, device=device, score=SCORE, nms=NMS, top_k=TOP_K, max_side=0)
    if device == "gpu":
        assert detector.net.gpu is not None, detector.net.gpu_reason
    every = GPU_SWEEP_EVERY if device == "gpu" else 1
    photos = _sweep_photos(data_dir)
    assert len(photos) > 150
    photos = photos[::every]
    failures, faces_seen = [], 0
    for path in photos:
        rgb, _, _ = yunet.fit_max_side(load_image(path), SWEEP_MAX_SIDE)
        ours = detector.detect_rows(rgb).astype(np.float64)
        theirs = opencv(rgb).astype(np.float64)
        faces_seen += len(theirs)
        failures += [f"{path.relative_to(data_dir)}: {p}" for p in parity_problems(ours, theirs)]
    print(f"\n{device}: {len(photos)} photos, {faces_seen} OpenCV faces, {len(failures)} differences")
    assert faces_seen > 500 // every
    assert not failures, "\n".join(failures[:20])


def test_default_max_side_matches_opencv_on_group_photos(cpu_detector, opencv, data_dir):
    """Detector.detect shrinks big photos and maps faces back; OpenCV on the same shrunk image agrees."""
    for path in iter_images([data_dir / "faces" / "group"]):
        rgb = load_image(path)
        small, sx, sy = yunet.fit_max_side(rgb, DEFAULT_MAX_SIDE)
        theirs = opencv(small).astype(np.float64)
        theirs[:, 0:14:2] /= sx
        theirs[:, 1:14:2] /= sy
        ours = _rows(cpu_detector.detect(rgb))
        # landmarks scaled back by up to 1/0.56: allow the 1 px of the shrunk image, in original pixels
        assert not parity_problems(ours, theirs, landmark_tol=1.0 / min(sx, sy)), path.name


# ---------------------------------------------------------------------------------- big faces, 2022mar model


def test_big_face_found_at_the_default_max_side(cpu_detector, opencv, data_dir):
    path = data_dir / "faces" / "deepface_id08" / "img40.jpg"
    rgb = load_image(path)
    assert rgb.shape[:2] == (4600, 3061)
    faces = cpu_detector.detect(path)
    assert len(faces) == 1
    x, y, w, h = faces[0].box
    assert faces[0].score > 0.8 and h > 1000 and 0 < x < 3061 - w and 0 < y < 4600 - h
    small, sx, sy = yunet.fit_max_side(rgb, DEFAULT_MAX_SIDE)
    assert max(small.shape) == DEFAULT_MAX_SIDE
    theirs = opencv(small)
    assert len(theirs) == 1
    assert box_iou(np.asarray([faces[0].box]), theirs[:, :4] / [sx, sy, sx, sy])[0, 0] > 0.95


def test_2022mar_model_finds_the_same_faces(model_2022, cpu_detector, data_dir):
    old = Detector(model_2022, device="cpu")
    assert old.generation == yunet.GENERATION_2022
    for name in ["deepface_id08/img40.jpg", "obama/obama.jpg", "group/fr_two_people.jpg", "group/insightface_t1.jpg"]:
        rgb = load_image(data_dir / "faces" / name)
        new_faces, old_faces = cpu_detector.detect(rgb), old.detect(rgb)
        assert old_faces, name
        assert all(f.score >= 0.6 for f in old_faces)
        iou = box_iou(_rows(new_faces)[:, :4], _rows(old_faces)[:, :4])
        # every 2023mar face (the big one in img40 included) has a 2022mar face on it
        assert (iou.max(axis=1) > 0.5).all(), (name, iou.max(axis=1))


# --------------------------------------------------------------------------------------- image variants


def test_exif_rotated_copy_gives_faces_in_the_same_place(cpu_detector, two_people, tmp_path):
    rgb = load_image(two_people)
    exif = Image.Exif()
    exif[0x0112] = 6  # the pixels are stored turned 90 degrees; viewers (and facerun) turn them upright
    rotated = tmp_path / "rotated.jpg"
    Image.fromarray(rgb).transpose(Image.Transpose.ROTATE_90).save(rotated, quality=95, exif=exif.tobytes())
    upright, turned = _rows(cpu_detector.detect(rgb)), _rows(cpu_detector.detect(rotated))
    assert len(upright) == 2
    assert not parity_problems(turned, upright, iou_min=0.9, score_tol=0.02, landmark_tol=3.0)


def test_grayscale_photo_detects_the_same_faces(cpu_detector, opencv, two_people, tmp_path):
    rgb = load_image(two_people)
    gray = tmp_path / "gray.png"
    Image.fromarray(rgb).convert("L").save(gray)
    colour_faces, gray_faces = _rows(cpu_detector.detect(rgb)), _rows(cpu_detector.detect(gray))
    assert len(colour_faces) == 2
    # both people are still found (without colour YuNet may add a weak extra face, and so does OpenCV)
    assert (box_iou(colour_faces[:, :4], gray_faces[:, :4]).max(axis=1) > 0.8).all()
    bgr = cv2.imread(str(gray), cv2.IMREAD_COLOR)
    assert not parity_problems(gray_faces, opencv(bgr[:, :, ::-1]).astype(np.float64))


def test_rgba_png_photo_matches_opencv_imread(cpu_detector, opencv, data_dir):
    path = data_dir / "faces" / "lin_manuel_miranda" / "lin-manuel-miranda.png"
    if not path.exists():
        pytest.skip("lin-manuel-miranda.png not in the data set")
    ours = _rows(cpu_detector.detect(path))
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)  # drops the alpha channel, as facerun does
    assert len(ours) >= 1
    assert not parity_problems(ours, opencv(bgr[:, :, ::-1]).astype(np.float64))


def test_path_and_array_give_the_same_faces(cpu_detector, two_people):
    from_path = _rows(cpu_detector.detect(two_people))
    from_array = _rows(cpu_detector.detect(load_image(two_people)))
    assert np.array_equal(from_path, from_array)
    assert cpu_detector.device == "cpu"


def test_bad_inputs_are_input_errors(cpu_detector, model_2023):
    with pytest.raises(InputError):
        cpu_detector.detect(np.zeros((10, 10), dtype=np.uint8))
    with pytest.raises(InputError):
        cpu_detector.detect(np.zeros((10, 10, 3), dtype=np.float32))
    with pytest.raises(InputError):
        Detector(model_2023, device="cpu", score=1.5)


def test_face_to_dict():
    face = Face(score=0.91234, box=(1.0, 2.0, 3.0, 4.0), landmarks=np.arange(10, dtype=np.float32).reshape(5, 2))
    assert face.to_dict() == {"score": 0.9123, "box": [1.0, 2.0, 3.0, 4.0],
                              "landmarks": [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]}


# -------------------------------------------------------------------------------------------------------- CLI


def _cli(*args):
    return CliRunner().invoke(main, ["detect", *map(str, args)])


def _single_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_cli_missing_file(tmp_path):
    assert "no such file" in _single_error_line(_cli(tmp_path / "nope.jpg", "--device", "cpu"))


def test_cli_not_an_image(tmp_path):
    text = tmp_path / "list.jpg"
    text.write_text("not a photo")
    assert "not an image" in _single_error_line(_cli(text, "--device", "cpu"))


def test_cli_missing_model(two_people, tmp_path):
    line = _single_error_line(_cli(two_people, "--model", tmp_path / "gone" / "yunet.onnx", "--device", "cpu"))
    assert "no such model file" in line


def test_cli_unknown_model_name(two_people):
    line = _single_error_line(_cli(two_people, "--model", "yunet-2099", "--device", "cpu"))
    assert "yunet-2099" in line


def test_cli_json_and_the_bad_file_among_good_ones(two_people, tmp_path):
    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 120), (90, 90, 90)).save(blank)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG broken")
    result = _cli(two_people, bad, blank, "--json", "--device", "cpu")
    assert result.exit_code == 1  # one failure ...
    assert len(result.stderr.strip().splitlines()) == 1 and "bad.png" in result.stderr
    report = json.loads(result.stdout)  # ... and the others are still reported
    assert [Path(r["image"]).name for r in report] == ["fr_two_people.jpg", "blank.png"]
    people, empty = report
    assert (people["width"], people["height"]) == (1126, 661) and people["device"] == "cpu" and people["ms"] > 0
    assert len(people["faces"]) == 2 and empty["faces"] == []  # no face is not an error
    for face in people["faces"]:
        x, y, w, h = face["box"]
        assert 0.6 <= face["score"] <= 1 and 0 <= x < x + w <= 1126 and 0 <= y < y + h <= 661
        assert len(face["landmarks"]) == 5 and all(x <= px <= x + w for px, _ in face["landmarks"])


def test_cli_table_output(two_people):
    result = _cli(two_people, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "2 faces" in result.stdout and "score" in result.stdout


def test_cli_draw_one_file(two_people, tmp_path):
    out = tmp_path / "drawn.png"
    result = _cli(two_people, "--draw", out, "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    face = json.loads(result.stdout)[0]["faces"][0]
    drawn = Image.open(out)
    assert drawn.format == "PNG" and drawn.size == (1126, 661)
    x, y, w, h = face["box"]
    # the box's top edge is drawn in the box colour
    assert drawn.convert("RGB").getpixel((round(x + w / 2), round(y))) == BOX_COLOUR


def test_cli_draw_folder_for_several_images(data_dir, tmp_path):
    group = data_dir / "faces" / "group"
    photos = [group / "fr_two_people.jpg", group / "openface_longoria-cooper.jpg"]
    out = tmp_path / "drawings"
    result = _cli(*photos, "--draw", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["fr_two_people.png", "openface_longoria-cooper.png"]
    assert Image.open(out / "fr_two_people.png").size == (1126, 661)


def test_cli_draw_bad_target_fails_before_work(two_people, tmp_path):
    line = _single_error_line(_cli(two_people, "--draw", tmp_path / "out.xyz", "--device", "cpu"))
    assert "unknown image type" in line
    assert list(tmp_path.iterdir()) == []
