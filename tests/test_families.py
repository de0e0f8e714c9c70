"""Detector families (SCRFD, RetinaFace, UltraFace, BlazeFace, YOLOv5-face): recognition from the graph, each
decoder on the real models run through onnxruntime and judged against YuNet's faces on the shared photos, facerun's
own path end to end where its interpreter runs the model, and what the commands do with each family."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from facerun.cli import main
from facerun.errors import InputError, ModelError, UnsupportedOps
from facerun.face import blazeface, families, retinaface
from facerun.face.detect import Detector
from facerun.face.evaluate import box_iou
from facerun.face.faces import BLAZEFACE_POINTS, FIVE_POINTS, Face
from facerun.face.family import letterbox, nms
from facerun.face.images import load_image
from facerun.zoo.known import by_name

from conftest import real_model

pytest.importorskip("onnxruntime")

# known name -> (file, family name, landmark count)
FAMILY_MODELS = {
    "scrfd-500m": ("det_500m.onnx", "scrfd", 5),
    "retinaface-mnet025": ("retinaface_mnet025.onnx", "retinaface", 5),
    "ultraface-rfb320": ("ultraface_RFB-320.onnx", "ultraface", 0),
    "blazeface-front128": ("blazeface_front128.onnx", "blazeface", 6),
    "yolov5n-0.5-face": ("yolov5n-0.5-face.onnx", "yolov5-face", 5),
}
# every family runs on facerun's own path (UltraFace's Exp and BlazeFace's Pad included)
FACERUN_RUNS = ("scrfd-500m", "retinaface-mnet025", "ultraface-rfb320", "blazeface-front128", "yolov5n-0.5-face")
# BlazeFace is MediaPipe's short-range model on a 128x128 input: it finds faces that fill a good part of the photo
LARGE_SHARE = {"blazeface-front128": 0.3}
LARGE_SHARE_DEFAULT = 0.1  # a "large" YuNet face is at least this share of the photo's shorter side tall


def _photos(data_dir) -> list[Path]:
    """The group photos and the first photo of every identity folder."""
    faces = data_dir / "faces"
    chosen = sorted((faces / "group").iterdir())
    for folder in sorted(p for p in faces.iterdir() if p.is_dir() and p.name != "group"):
        chosen.append(min(folder.iterdir()))
    return chosen


@pytest.fixture(scope="module")
def reference(models_dir, data_dir):
    """photo -> (rgb, YuNet 2023mar's faces), YuNet's network run by onnxruntime (its facerun path is tested in
    test_detect against OpenCV)."""
    yunet = Detector(models_dir / "face_detection_yunet_2023mar.onnx", runtime="onnxruntime")
    found = {}
    for path in _photos(data_dir):
        rgb = load_image(path)
        found[path] = (rgb, yunet.detect(rgb))
    return found


@pytest.fixture(scope="module", params=list(FAMILY_MODELS))
def family_faces(request, reference, models_dir):
    """(name, detector, photo -> faces) for each family, its network run by onnxruntime."""
    name = request.param
    real_model(FAMILY_MODELS[name][0])
    detector = Detector(name, runtime="onnxruntime")
    return name, detector, {path: detector.detect(rgb) for path, (rgb, _) in reference.items()}


def _boxes(faces) -> np.ndarray:
    return np.asarray([f.box for f in faces], dtype=np.float64).reshape(-1, 4)


# --------------------------------------------------------------------------------------------- recognition


@pytest.mark.parametrize("name", list(FAMILY_MODELS))
def test_each_file_is_recognised_from_its_graph_even_renamed(name, models_dir, tmp_path):
    filename, family, count = FAMILY_MODELS[name]
    source = real_model(filename)
    renamed = Path(shutil.copyfile(source, tmp_path / "detector.onnx"))
    found = families.family_of(renamed)
    assert found.name == family and len(found.landmark_names) == count
    assert found.five_points == (count == 5)
    assert by_name(name).family == family and by_name(name).filename == filename


def test_yunet_is_still_yunet(models_dir):
    assert families.family_of(models_dir / "face_detection_yunet_2023mar.onnx").title == "YuNet 2023mar"
    assert families.family_of(real_model("face_detection_yunet_2022mar.onnx")).title == "YuNet 2022mar"


def test_an_embedder_is_not_a_detector_and_the_message_says_what_it_has(models_dir):
    path = real_model("MobileFaceNet.onnx")
    with pytest.raises(ModelError) as caught:
        Detector(path, device="cpu")
    message = str(caught.value)
    assert "not a face detector" in message and "output0 [1x128]" in message and "\n" not in message


def test_known_preprocessing_matches_the_decoders():
    """The known table's pre-processing (documentation) says what the family modules do."""
    from facerun.face import scrfd, ultraface

    assert by_name("scrfd-500m").mean == (scrfd.MEAN,) * 3 and by_name("scrfd-500m").std == (scrfd.STD,) * 3
    assert by_name("retinaface-mnet025").mean == retinaface.MEAN_BGR and not by_name("retinaface-mnet025").rgb
    assert by_name("ultraface-rfb320").mean == (ultraface.MEAN,) * 3


# ------------------------------------------------------------------------------------------- decoder pieces


def test_blazeface_anchors_are_mediapipes_front_model_layout():
    a = blazeface.anchors()
    assert a.shape == (896, 2)
    # stride 8: 16x16 cells, 2 anchors each, centres at (col + 0.5) / 16; then stride 16: 8x8 cells, 6 anchors each
    assert np.allclose(a[0], [0.5 / 16, 0.5 / 16]) and np.allclose(a[1], a[0])
    assert np.allclose(a[2], [1.5 / 16, 0.5 / 16])
    assert np.allclose(a[511], [15.5 / 16, 15.5 / 16])
    assert np.allclose(a[512:518], [0.5 / 8, 0.5 / 8]) and np.allclose(a[518], [1.5 / 8, 0.5 / 8])
    assert np.allclose(a[-1], [7.5 / 8, 7.5 / 8])


def test_retinaface_priors_fit_the_graph():
    priors = retinaface.prior_boxes(640, 640)
    assert priors.shape == (16800, 3)  # the exported file's row count
    assert np.allclose(priors[:4], [[4, 4, 16], [4, 4, 32], [12, 4, 16], [12, 4, 32]])
    assert np.allclose(priors[-1], [624, 624, 512])


def test_weighted_nms_merges_overlaps_and_keeps_the_best_score():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [50, 50, 60, 60]], dtype=np.float32)
    scores = np.array([0.9, 0.6, 0.8], dtype=np.float32)
    marks = np.arange(3 * 6 * 2, dtype=np.float32).reshape(3, 6, 2)
    kept_boxes, kept_scores, kept_marks = blazeface.weighted_nms(boxes, scores, marks, 0.3)
    assert np.allclose(kept_scores, [0.9, 0.8])
    assert np.allclose(kept_boxes[0], (boxes[0] * 0.9 + boxes[1] * 0.6) / 1.5)
    assert np.allclose(kept_marks[0], (marks[0] * 0.9 + marks[1] * 0.6) / 1.5)
    assert np.allclose(kept_boxes[1], boxes[2]) and np.allclose(kept_marks[1], marks[2])


def test_nms_drops_overlaps_and_honours_top_k():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 9], [20, 20, 30, 30], [40, 40, 50, 50]], dtype=np.float32)
    scores = np.array([0.5, 0.9, 0.7, 0.1])
    assert nms(boxes, scores, 0.5).tolist() == [1, 2, 3]
    assert nms(boxes, scores, 0.5, top_k=2).tolist() == [1, 2]


def test_letterbox_frame_maps_input_pixels_back_to_the_photo():
    rgb = np.zeros((300, 500, 3), dtype=np.uint8)
    canvas, frame = letterbox(rgb, (640, 640), fill=114, centre=True)
    assert canvas.shape == (640, 640, 3) and canvas[0, 0, 0] == 114
    assert frame.offset_x == 0 and frame.offset_y == (640 - 384) // 2
    corners = np.array([[frame.offset_x, frame.offset_y], [640, frame.offset_y + 384]])
    assert np.allclose(frame.to_photo(corners), [[0, 0], [500, 300]])


# --------------------------------------------------------------------------- every family on the real photos


def test_large_faces_are_found_where_yunet_finds_them(family_faces, reference):
    name, _, found = family_faces
    share = LARGE_SHARE.get(name, LARGE_SHARE_DEFAULT)
    large, matched, misses = 0, 0, []
    for path, (rgb, yunet_faces) in reference.items():
        ours = _boxes(found[path])
        for face in yunet_faces:
            if face.score < 0.8 or face.box[3] < share * min(rgb.shape[:2]):
                continue
            large += 1
            iou = box_iou(np.asarray([face.box]), ours)[0].max() if len(ours) else 0.0
            matched += iou >= 0.5
            if iou < 0.5:
                misses.append(f"{path.name} IoU {iou:.2f}")
    print(f"\n{name}: {matched} of {large} large YuNet faces matched at IoU >= 0.5")
    assert large >= 25
    # measured on these photos: all but 1 (SCRFD: a 112x112 face crop it cannot see once scaled to fill 640x640)
    assert matched >= large - 1, misses


def test_faces_are_sensible_and_landmarks_lie_in_their_boxes(family_faces, reference):
    name, detector, found = family_faces
    count = FAMILY_MODELS[name][2]
    total = 0
    for path, (rgb, _) in reference.items():
        height, width = rgb.shape[:2]
        for face in found[path]:
            total += 1
            x, y, w, h = face.box
            assert x >= 0 and y >= 0 and x + w <= width + 1e-3 and y + h <= height + 1e-3 and w > 4 and h > 4
            assert detector.score_threshold <= face.score <= 1.0
            if count == 0:
                assert face.landmarks is None
                continue
            assert face.landmarks.shape == (count, 2)
            if x < 1 or y < 1 or x + w > width - 1 or y + h > height - 1:
                continue  # a face cut by the photo's edge has landmarks beyond it
            # eyes, nose and mouth within the box (5% slack); BlazeFace's ear points may sit on its sides
            inner = face.landmarks[: 4 if count == 6 else 5]
            slack_x, slack_y = 0.05 * w, 0.05 * h
            assert ((inner[:, 0] >= x - slack_x) & (inner[:, 0] <= x + w + slack_x)).all(), (path.name, face)
            assert ((inner[:, 1] >= y - slack_y) & (inner[:, 1] <= y + h + slack_y)).all(), (path.name, face)
    assert total >= 30


def test_landmarks_are_in_yunets_order(family_faces, reference):
    """On faces both find, each point lies near YuNet's same point: eyes, nose (and mouth corners) in one order."""
    name, _, found = family_faces
    count = FAMILY_MODELS[name][2]
    if count == 0:
        pytest.skip("UltraFace gives no landmarks")
    errors = []
    for path, (_, yunet_faces) in reference.items():
        ours = found[path]
        for face in yunet_faces:
            iou = box_iou(np.asarray([face.box]), _boxes(ours))[0] if ours else np.zeros(0)
            if not iou.size or iou.max() < 0.5:
                continue
            other = ours[int(iou.argmax())]
            if count == 5:
                error = np.linalg.norm(other.landmarks - face.landmarks, axis=1)
            else:  # BlazeFace: eyes and nose, and its mouth centre against the middle of YuNet's mouth corners
                theirs = np.vstack([face.landmarks[:3], face.landmarks[3:5].mean(axis=0)])
                error = np.linalg.norm(other.landmarks[:4] - theirs, axis=1)
            errors.append(error.max() / face.box[2])
    errors = np.asarray(errors)
    print(f"\n{name}: landmark distance to YuNet's, share of face width: median {np.median(errors):.3f}, "
          f"max {errors.max():.3f} over {errors.size} faces")
    # measured: medians 0.05-0.06 and maxima 0.15-0.22; a swapped eye or mouth pair is about 0.4
    assert errors.size >= 30 and np.median(errors) < 0.1 and errors.max() < 0.3


# ---------------------------------------------------------------------------------- facerun's own runtime


@pytest.mark.parametrize("name", FACERUN_RUNS)
def test_facerun_path_gives_onnxruntimes_faces(name, data_dir):
    real_model(FAMILY_MODELS[name][0])
    ours, oracle = Detector(name, device="cpu"), Detector(name, runtime="onnxruntime")
    assert ours.device == "cpu" and oracle.device == "onnxruntime"
    seen = 0
    # BlazeFace (a short-range model) finds only the large faces: its count may be 0 on a group photo
    for photo in ["group/insightface_t1.jpg", "group/fr_kit_with_rose.jpg", "group/fr_two_people.jpg",
                  "obama/obama.jpg"]:
        rgb = load_image(data_dir / "faces" / photo)
        a, b = ours.detect(rgb), oracle.detect(rgb)
        assert len(a) == len(b), photo
        seen += len(a)
        if not a:
            continue
        iou = box_iou(_boxes(a), _boxes(b))
        pairs = [(f, b[j]) for f, j in zip(a, iou.argmax(axis=1))]  # near-equal scores may swap places
        assert iou.max(axis=1).min() > 0.999
        assert max(abs(f.score - g.score) for f, g in pairs) < 1e-4
        if a[0].landmarks is not None:
            assert max(np.abs(f.landmarks - g.landmarks).max() for f, g in pairs) < 0.05
    assert seen >= 3


def _with_an_op_facerun_lacks(tmp_path) -> Path:
    """UltraFace with its Exp node turned into Softplus, an operator facerun does not run (the graph's outputs, which
    name the family, unchanged)."""
    import onnx

    model = onnx.load(str(real_model("ultraface_RFB-320.onnx")))
    next(n for n in model.graph.node if n.op_type == "Exp").op_type = "Softplus"
    path = tmp_path / "ultraface_softplus.onnx"
    onnx.save(model, str(path))
    return path


def test_unsupported_ops_say_which_and_how_to_run_meanwhile(tmp_path):
    with pytest.raises(UnsupportedOps) as caught:
        Detector(_with_an_op_facerun_lacks(tmp_path), device="cpu")
    assert "Softplus" in caught.value.ops and "--runtime onnxruntime" in str(caught.value)


# ----------------------------------------------------------------------------------------------- alignment


@pytest.mark.parametrize("name", ["ultraface-rfb320", "blazeface-front128"])
def test_families_without_five_points_are_refused_for_alignment(name):
    real_model(FAMILY_MODELS[name][0])
    with pytest.raises(ModelError, match="five-point ArcFace template") as caught:
        Detector(name, for_alignment=True)
    assert "\n" not in str(caught.value)
    assert ("no mouth corners" in str(caught.value)) == (name == "blazeface-front128")


def test_scrfd_faces_embed_like_yunet_faces(data_dir):
    """Aligned on SCRFD's landmarks, a face embeds as it does aligned on YuNet's: the points mean the same."""
    from facerun.face.embed import Embedder

    real_model("det_500m.onnx")
    embedder = Embedder(real_model("MobileFaceNet.onnx"), device="cpu")
    photos = [data_dir / "faces" / p for p in ("obama/obama.jpg", "biden/biden.jpg", "kit_harington/john1.jpeg")]
    photos = [p for p in photos if p.exists()]
    a = embedder.embed_images(photos, detector=Detector("scrfd-500m", runtime="onnxruntime"))
    b = embedder.embed_images(photos, detector=Detector(device="cpu"))
    assert len(a) == len(b) == len(photos) >= 2
    same = [float(x.embedding @ y.embedding) for x, y in zip(a, b)]
    assert min(same) > 0.8, same  # the same photo; different people score near 0 with this model


# --------------------------------------------------------------------------------------------------- CLI


def _cli(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def _one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_cli_detect_json_for_each_kind_of_landmarks(data_dir):
    for name in FAMILY_MODELS:
        real_model(FAMILY_MODELS[name][0])
    photo = data_dir / "faces" / "group" / "fr_two_people.jpg"
    for name, (_, family, count) in FAMILY_MODELS.items():
        result = _cli("detect", photo, "--model", name, "--runtime", "onnxruntime", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)[0]
        assert report["family"] == family and report["device"] == "onnxruntime"
        assert len(report["faces"]) == 2, name
        for face in report["faces"]:
            assert (face["landmarks"] is None) if count == 0 else (len(face["landmarks"]) == count)


def test_cli_detect_table_names_the_familys_landmarks(data_dir):
    real_model("blazeface_front128.onnx")
    photo = data_dir / "faces" / "group" / "fr_two_people.jpg"
    result = _cli("detect", photo, "--model", "blazeface-front128", "--device", "cpu")  # facerun's own path
    assert result.exit_code == 0, result.output
    assert "2 faces" in result.stdout and "ear R" in result.stdout and "blazeface" in result.stdout


def test_cli_draw_without_landmarks_and_with_six(data_dir, tmp_path):
    photo = data_dir / "faces" / "group" / "fr_two_people.jpg"
    for name in ("ultraface-rfb320", "blazeface-front128"):
        real_model(FAMILY_MODELS[name][0])
        out = tmp_path / f"{name}.png"
        result = _cli("detect", photo, "--model", name, "--runtime", "onnxruntime", "--draw", out)
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 0


def test_cli_unsupported_ops_are_one_line(data_dir, tmp_path):
    line = _one_error_line(_cli("detect", data_dir / "faces" / "obama" / "obama.jpg", "--model",
                                _with_an_op_facerun_lacks(tmp_path), "--device", "cpu"))
    assert "Softplus" in line and "--runtime onnxruntime" in line


def test_cli_embed_refuses_a_detector_without_five_points(data_dir, tmp_path):
    real_model("blazeface_front128.onnx")
    out = tmp_path / "faces.npy"
    line = _one_error_line(_cli("embed", data_dir / "faces" / "obama" / "obama.jpg", "--model",
                                real_model("MobileFaceNet.onnx"), "--detector", "blazeface-front128", "--out", out))
    assert "no mouth corners" in line and not out.exists()


def test_cli_embed_with_an_scrfd_detector(data_dir):
    real_model("det_500m.onnx")
    result = _cli("embed", data_dir / "faces" / "obama" / "obama.jpg", "--model", real_model("MobileFaceNet.onnx"),
                  "--detector", "scrfd-500m", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert len(records) == 1 and len(records[0]["embedding"]) == 128


def test_input_size_for_a_file_that_leaves_it_free(data_dir):
    real_model("det_500m.onnx")
    rgb = load_image(data_dir / "faces" / "group" / "fr_two_people.jpg")
    big = Detector("scrfd-500m", runtime="onnxruntime", input_size=(1152, 672))
    blob, frame = big.family.prepare(rgb)
    assert blob.shape == (1, 3, 672, 1152) and frame.scale_x == pytest.approx(min(1152 / 1126, 672 / 661), rel=1e-3)
    default = Detector("scrfd-500m", runtime="onnxruntime").detect(rgb)
    larger = big.detect(rgb)
    assert len(larger) == len(default) == 2
    assert box_iou(_boxes(larger), _boxes(default)).max(axis=1).min() > 0.8
    with pytest.raises(InputError, match="multiples of 32"):
        Detector("scrfd-500m", runtime="onnxruntime", input_size=(1000, 640))
    real_model("retinaface_mnet025.onnx")
    with pytest.raises(InputError, match="takes 640x640 only"):
        Detector("retinaface-mnet025", runtime="onnxruntime", input_size=(1024, 640))


def test_face_without_landmarks_to_dict():
    face = Face(score=0.5, box=(1.0, 2.0, 3.0, 4.0), landmarks=None, landmark_names=())
    assert face.to_dict() == {"score": 0.5, "box": [1.0, 2.0, 3.0, 4.0], "landmarks": None}
    assert not face.has_five_points
    assert Face(0.5, (0, 0, 1, 1), np.zeros((6, 2)), BLAZEFACE_POINTS).has_five_points is False
    assert Face(0.5, (0, 0, 1, 1), np.zeros((5, 2)), FIVE_POINTS).has_five_points
