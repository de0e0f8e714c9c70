"""WIDER FACE style scoring: ground-truth parsing, greedy matching at IoU >= 0.5, precision, recall and AP.

The scoring works on plain arrays (boxes as x, y, w, h), so detections from any detector can be scored the same
way: `score_detections(detections, ground_truth)`.

Conventions (stated because evaluations differ on each of them):
- IoU uses continuous coordinates: a box covers [x, x+w) x [y, y+h), no +1 on widths.
- Detections are matched greedily in descending score order over the whole set, each to the unmatched valid GT box
  of the same image with the highest IoU >= 0.5 (a true positive). A detection without such a box that overlaps an
  *invalid* GT box (invalid flag 1) at IoU >= 0.5 is ignored, neither true nor false positive; any other detection
  (a duplicate included) is a false positive. Invalid boxes do not count towards recall.
- AP is the area under the interpolated precision-recall curve with all-point interpolation (VOC 2010+): precision
  is made monotone from the right and summed over every recall step.
- Face size is sqrt(w*h) of the GT box (COCO's small/medium/large cut at 32 and 96 px, on the area's square root):
  small < 32, medium 32..96, large > 96. For a size bucket, valid faces of other sizes are treated like invalid
  ones, and an unmatched detection counts as a false positive only when its own size is in the bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError

IOU_THRESHOLD = 0.5
SIZE_BUCKETS = {"small": (0.0, 32.0), "medium": (32.0, 96.0), "large": (96.0, float("inf"))}


@dataclass
class GroundTruth:
    """The faces annotated in one image: boxes (M x 4, x y w h) and which of them are valid (invalid flag 0)."""

    name: str
    boxes: np.ndarray
    valid: np.ndarray
    attributes: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), dtype=np.int64))


def parse_wider_gt(path) -> list[GroundTruth]:
    """Read a WIDER FACE ground-truth file (wider_face_*_bbx_gt.txt).

    Entry: image name line, face count line, then one line per face `x1 y1 w h blur expression illumination invalid
    occlusion pose`. A count of 0 is still followed by one dummy line (all zeros), which is skipped.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: no such ground-truth file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None

    entries: list[GroundTruth] = []
    i = 0

    def fail(message: str):
        raise InputError(f"{path}:{i + 1}: {message} (expected the WIDER FACE ground-truth format)")

    while i < len(lines):
        name = lines[i].strip()
        if not name:
            i += 1
            continue
        i += 1
        if i >= len(lines) or not lines[i].strip().isdigit():
            fail(f"expected a face count after image name '{name}'")
        count = int(lines[i])
        i += 1
        rows = []
        for _ in range(max(count, 1)):  # count 0 still has one dummy line
            if i >= len(lines):
                fail(f"file ends inside the entry of '{name}'")
            fields = lines[i].split()
            try:
                numbers = [float(v) for v in fields]
            except ValueError:
                fail(f"expected numbers, found '{lines[i].strip()[:40]}'")
            if len(numbers) < 4:
                fail(f"expected at least x y w h, found {len(numbers)} numbers")
            rows.append((numbers + [0.0] * 10)[:10])
            i += 1
        table = np.asarray(rows[:count], dtype=np.float64).reshape(-1, 10)
        entries.append(GroundTruth(name=name, boxes=table[:, :4].copy(), valid=table[:, 7] == 0,
                                   attributes=table[:, 4:].astype(np.int64)))
    if not entries:
        raise InputError(f"{path}: no ground-truth entries found")
    return entries


# ------------------------------------------------------------------------------------------------------ scoring


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` (N x 4, x y w h) with every box in `b` (M x 4): N x M, continuous coordinates."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    a_lo, a_hi = a[:, None, :2], a[:, None, :2] + a[:, None, 2:]
    b_lo, b_hi = b[None, :, :2], b[None, :, :2] + b[None, :, 2:]
    side = np.clip(np.minimum(a_hi, b_hi) - np.maximum(a_lo, b_lo), 0, None)  # overlap width and height
    inter = side[..., 0] * side[..., 1]
    union = (a[:, 2] * a[:, 3])[:, None] + (b[:, 2] * b[:, 3])[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-point interpolated AP (VOC 2010+): area under the precision envelope over recall."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


def _face_size(boxes: np.ndarray) -> np.ndarray:
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.sqrt(np.clip(boxes[:, 2], 0, None) * np.clip(boxes[:, 3], 0, None))


def score_detections(detections, ground_truth, iou_threshold: float = IOU_THRESHOLD, size_range=None) -> dict:
    """Match detections to ground truth and return {"ap", "precision", "recall", "tp", "fp", "gt", "detections"}.

    detections: one (boxes N x 4 x y w h, scores N) pair per image.
    ground_truth: one (boxes M x 4, valid M bools) pair per image, same order (GroundTruth objects work too).
    size_range: (lo, hi) on sqrt(w*h) to score one size bucket (see the module notes), None for all faces.
    """
    if len(detections) != len(ground_truth):
        raise ValueError(f"{len(detections)} detection sets for {len(ground_truth)} ground-truth images")

    # every detection of every image, best score first (stable: ties keep image order, then detector order)
    det_image, det_box, det_score = [], [], []
    gt_boxes, gt_counted, gt_ignored = [], [], []
    for index, (dets, gt) in enumerate(zip(detections, ground_truth)):
        boxes, scores = dets
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        det_image.append(np.full(len(scores), index))
        det_box.append(boxes)
        det_score.append(scores)
        g_boxes, g_valid = (gt.boxes, gt.valid) if isinstance(gt, GroundTruth) else gt
        g_boxes = np.asarray(g_boxes, dtype=np.float64).reshape(-1, 4)
        counted = np.asarray(g_valid, dtype=bool).reshape(-1).copy()
        if size_range is not None:
            size = _face_size(g_boxes)
            counted &= (size >= size_range[0]) & (size < size_range[1])
        gt_boxes.append(g_boxes)
        gt_counted.append(counted)
        gt_ignored.append(~counted)
    det_image = np.concatenate(det_image) if det_image else np.zeros(0, dtype=int)
    det_box = np.concatenate(det_box) if det_box else np.zeros((0, 4))
    det_score = np.concatenate(det_score) if det_score else np.zeros(0)
    order = np.argsort(-det_score, kind="stable")
    n_gt = int(sum(c.sum() for c in gt_counted))

    # IoU tables per image, computed once
    ious = [box_iou(det_box[det_image == i], gt_boxes[i]) for i in range(len(gt_boxes))]
    row_in_image = np.zeros(len(det_score), dtype=int)
    for i in range(len(gt_boxes)):
        row_in_image[det_image == i] = np.arange(int((det_image == i).sum()))
    matched = [np.zeros(len(c), dtype=bool) for c in gt_counted]

    outcome = np.zeros(len(order), dtype=np.int8)  # 1 true positive, -1 false positive, 0 ignored
    for rank, d in enumerate(order):
        image = det_image[d]
        overlap = ious[image][row_in_image[d]]
        open_valid = gt_counted[image] & ~matched[image] & (overlap >= iou_threshold)
        if open_valid.any():
            best = np.flatnonzero(open_valid)[np.argmax(overlap[open_valid])]
            matched[image][best] = True
            outcome[rank] = 1
        elif (gt_ignored[image] & (overlap >= iou_threshold)).any():
            outcome[rank] = 0
        elif size_range is not None and not _in_range(_face_size(det_box[d])[0], size_range):
            outcome[rank] = 0  # a miss of another size is not this bucket's false positive
        else:
            outcome[rank] = -1

    counted = outcome != 0
    tp = np.cumsum(outcome[counted] == 1)
    fp = np.cumsum(outcome[counted] == -1)
    if n_gt and tp.size:
        recall = tp / n_gt
        precision = tp / np.maximum(tp + fp, 1)
        ap = average_precision(recall, precision)
    else:
        ap = 0.0
    n_tp = int(tp[-1]) if tp.size else 0
    n_fp = int(fp[-1]) if fp.size else 0
    return {
        "ap": ap,
        "precision": n_tp / (n_tp + n_fp) if n_tp + n_fp else 0.0,
        "recall": n_tp / n_gt if n_gt else 0.0,
        "tp": n_tp,
        "fp": n_fp,
        "gt": n_gt,
        "detections": int(len(det_score)),
    }


def _in_range(value: float, size_range) -> bool:
    return size_range[0] <= value < size_range[1]


def evaluate(detections, ground_truth, iou_threshold: float = IOU_THRESHOLD) -> dict:
    """The full report: overall AP/precision/recall and AP/recall by face size, as `facerun evaluate --json` prints."""
    overall = score_detections(detections, ground_truth, iou_threshold)
    by_size = {}
    for bucket, size_range in SIZE_BUCKETS.items():
        part = score_detections(detections, ground_truth, iou_threshold, size_range)
        by_size[bucket] = {"ap": part["ap"], "recall": part["recall"], "gt_faces": part["gt"]}
    return {
        "images": len(ground_truth),
        "gt_faces": overall["gt"],
        "detections": overall["detections"],
        "ap": overall["ap"],
        "precision": overall["precision"],
        "recall": overall["recall"],
        "true_positives": overall["tp"],
        "false_positives": overall["fp"],
        "by_size": by_size,
        "iou_threshold": iou_threshold,
        "size_measure": "sqrt(w*h) of the GT box: small < 32 px, medium 32-96, large > 96",
    }
