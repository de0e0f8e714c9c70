"""WIDER FACE ground truth, matching and AP; facerun's detections scored against OpenCV's on the same photos."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from facerun.cli import main
from facerun.errors import InputError
from facerun.face.detect import Detector
from facerun.face.evaluate import (
    SIZE_BUCKETS,
    GroundTruth,
    average_precision,
    box_iou,
    evaluate,
    parse_wider_gt,
    score_detections,
)
from facerun.face.images import load_image

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def wider(data_dir):
    gt_file = data_dir / "wider" / "wider_face_val_bbx_gt_sample.txt"
    if not gt_file.exists():
        pytest.skip("WIDER sample not in the data set")
    return gt_file, data_dir / "wider" / "images"


# -------------------------------------------------------------------------------------------------- parsing


def test_parse_sample_ground_truth(wider):
    gt_file, images = wider
    entries = parse_wider_gt(gt_file)
    lines = gt_file.read_text().split("\n")
    names = [line.strip() for line in lines if line.strip().endswith(".jpg")]
    assert [e.name for e in entries] == names and len(entries) == 106
    counts = [int(lines[i + 1]) for i, line in enumerate(lines) if line.strip().endswith(".jpg")]
    assert [len(e.boxes) for e in entries] == counts
    first = entries[0]  # 0--Parade/0_Parade_marchingband_1_465.jpg, first face "345 211 4 4 2 0 0 0 2 0"
    assert first.boxes[0].tolist() == [345, 211, 4, 4] and first.valid[0]
    assert first.attributes[0].tolist() == [2, 0, 0, 0, 2, 0]
    assert all((images / e.name).is_file() for e in entries)
    invalid = sum(int((~e.valid).sum()) for e in entries)
    assert 0 < invalid < sum(counts)


def test_parse_count_zero_and_errors(tmp_path):
    path = tmp_path / "gt.txt"
    path.write_text("a/empty.jpg\n0\n0 0 0 0 0 0 0 0 0 0 \nb/one.jpg\n2\n1 2 30 40 0 0 0 0 0 0\n5 6 7 8 1 1 0 1 2 0\n")
    empty, one = parse_wider_gt(path)
    assert empty.name == "a/empty.jpg" and empty.boxes.shape == (0, 4)
    assert one.boxes.tolist() == [[1, 2, 30, 40], [5, 6, 7, 8]] and one.valid.tolist() == [True, False]
    path.write_text("a/x.jpg\n2\n1 2 3 4 0 0 0 0 0 0\n")
    with pytest.raises(InputError, match="ends inside"):
        parse_wider_gt(path)
    path.write_text("a/x.jpg\nmany\n")
    with pytest.raises(InputError, match=r"gt.txt:2: expected a face count"):
        parse_wider_gt(path)
    with pytest.raises(InputError, match="no such"):
        parse_wider_gt(tmp_path / "missing.txt")


# -------------------------------------------------------------------------------------------------- scoring


def test_average_precision_by_hand():
    # TP, FP, TP over 2 faces: recall .5 .5 1, precision 1 .5 .667 -> .5 * 1 + .5 * 2/3
    assert average_precision(np.array([0.5, 0.5, 1.0]), np.array([1.0, 0.5, 2 / 3])) == pytest.approx(5 / 6)
    assert average_precision(np.array([0.5, 1.0]), np.array([1.0, 1.0])) == pytest.approx(1.0)
    # precision is made monotone: the dip at recall .5 is lifted to the later .75
    assert average_precision(np.array([0.5, 0.5, 1.0]), np.array([0.5, 1 / 3, 0.75])) == pytest.approx(0.75)


def test_box_iou_continuous():
    assert box_iou([[0, 0, 10, 10]], [[5, 0, 10, 10]])[0, 0] == pytest.approx(50 / 150)
    assert box_iou([[0, 0, 10, 10]], [[10, 0, 10, 10]])[0, 0] == 0.0  # touching edges do not overlap


def test_matching_rules():
    gt = [GroundTruth("img", np.array([[0, 0, 40, 40], [100, 0, 40, 40], [200, 0, 40, 40]], float),
                      np.array([True, True, False]))]
    dets = [(np.array([[1, 1, 40, 40],      # TP on face 0
                       [0, 0, 39, 41],      # duplicate of face 0: FP
                       [201, 0, 40, 40],    # on the invalid face: ignored
                       [400, 400, 40, 40],  # nothing there: FP
                       [99, 1, 40, 40]],    # TP on face 1, lowest score
                      float), np.array([0.9, 0.8, 0.95, 0.7, 0.6]))]
    result = score_detections(dets, gt)
    assert (result["tp"], result["fp"], result["gt"], result["detections"]) == (2, 2, 2, 5)
    assert result["recall"] == 1.0 and result["precision"] == 0.5
    # ranked: TP, FP, FP, TP -> recall .5 .5 .5 1, precision 1 .5 .33 .5 -> .5 * 1 + .5 * .5
    assert result["ap"] == pytest.approx(0.75)


def test_size_buckets_only_count_their_faces():
    gt = [GroundTruth("img", np.array([[0, 0, 10, 10], [100, 0, 50, 50], [300, 0, 200, 200]], float),
                      np.ones(3, bool))]
    dets = [(np.array([[0, 0, 10, 10], [300, 0, 200, 200], [700, 700, 20, 20]], float), np.array([0.9, 0.8, 0.7]))]
    small = score_detections(dets, gt, size_range=SIZE_BUCKETS["small"])
    assert (small["gt"], small["tp"], small["fp"]) == (1, 1, 1)  # the stray 20 px box is a small false positive
    medium = score_detections(dets, gt, size_range=SIZE_BUCKETS["medium"])
    assert (medium["gt"], medium["tp"], medium["fp"], medium["recall"]) == (1, 0, 0, 0.0)
    large = score_detections(dets, gt, size_range=SIZE_BUCKETS["large"])
    assert (large["gt"], large["tp"], large["fp"], large["ap"]) == (1, 1, 0, 1.0)


# ------------------------------------------------------------------------------------------ facerun vs OpenCV


def test_wider_ap_matches_opencv(wider, models_dir):
    gt_file, images = wider
    model = models_dir / "face_detection_yunet_2023mar.onnx"
    entries = parse_wider_gt(gt_file)
    detector = Detector(model, device="cpu", max_side=0)  # full size, as OpenCV is given the whole photo
    opencv = cv2.FaceDetectorYN.create(str(model), "", (320, 320), 0.6, 0.3, 5000)
    ours, theirs = [], []
    for entry in entries:
        rgb = load_image(images / entry.name)
        faces = detector.detect(rgb)
        ours.append((np.asarray([f.box for f in faces]).reshape(-1, 4), np.asarray([f.score for f in faces])))
        opencv.setInputSize((rgb.shape[1], rgb.shape[0]))
        _, rows = opencv.detect(np.ascontiguousarray(rgb[:, :, ::-1]))
        rows = np.zeros((0, 15)) if rows is None else rows
        theirs.append((rows[:, :4], rows[:, 14]))
    a, b = evaluate(ours, entries), evaluate(theirs, entries)
    print(f"\nWIDER sample ({a['images']} images, {a['gt_faces']} valid faces): "
          f"AP facerun {a['ap']:.5f} vs OpenCV {b['ap']:.5f}; recall {a['recall']:.4f} vs {b['recall']:.4f}; "
          f"precision {a['precision']:.4f} vs {b['precision']:.4f}")
    for bucket in SIZE_BUCKETS:
        print(f"  {bucket}: AP {a['by_size'][bucket]['ap']:.4f} vs {b['by_size'][bucket]['ap']:.4f}")
    assert a["gt_faces"] == b["gt_faces"] > 2000
    assert 0.3 < a["ap"] < 1.0
    assert abs(a["ap"] - b["ap"]) <= 0.005
    for bucket in SIZE_BUCKETS:
        assert abs(a["by_size"][bucket]["ap"] - b["by_size"][bucket]["ap"]) <= 0.01


# ------------------------------------------------------------------------------------------------------ CLI


def test_cli_evaluate_json(wider, tmp_path):
    gt_file, images = wider
    lines = gt_file.read_text().splitlines()
    # the first three entries only, to keep it quick
    starts = [i for i, line in enumerate(lines) if line.strip().endswith(".jpg")]
    small_gt = tmp_path / "gt.txt"
    small_gt.write_text("\n".join(lines[: starts[3]]) + "\n")
    result = CliRunner().invoke(main, ["evaluate", "--gt", str(small_gt), "--images", str(images), "--json",
                                       "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["images"] == 3
    for key in ("gt_faces", "detections", "ap", "precision", "recall"):
        assert key in report
    assert set(report["by_size"]) == {"small", "medium", "large"}
    assert all(0.0 <= report["by_size"][b][k] <= 1.0 for b in report["by_size"] for k in ("ap", "recall"))
    # the same numbers as scoring the detector's faces in-process
    detector = Detector(device="cpu")
    entries = parse_wider_gt(small_gt)
    dets = []
    for entry in entries:
        faces = detector.detect(images / entry.name)
        dets.append((np.asarray([f.box for f in faces]).reshape(-1, 4), np.asarray([f.score for f in faces])))
    assert report["ap"] == pytest.approx(evaluate(dets, entries)["ap"])


def test_cli_evaluate_missing_images(wider, tmp_path):
    gt_file, _ = wider
    result = CliRunner().invoke(main, ["evaluate", "--gt", str(gt_file), "--images", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "106 of 106 images" in lines[0]
