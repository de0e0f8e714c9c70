"""BlazeFace (MediaPipe's short-range "front camera" face detector, 128x128): SSD anchors, six keypoints, weighted NMS.

Pre- and post-processing as MediaPipe's face detection graph does them (the PyTorch ports follow it too):
- the photo is fitted into 128x128 with its aspect kept, centred on black; RGB, x / 127.5 - 1;
- 896 anchors from MediaPipe's SsdAnchorsCalculator with the front model's options: 4 layers, strides 8, 16, 16, 16,
  aspect ratio 1 plus one interpolated scale (2 anchors per layer and cell; layers of one stride share a grid, so
  the stride-16 cells hold 6), offset 0.5, fixed anchor size 1;
- regressors [896, 16]: centre = r0,1 / 128 * anchor size + anchor centre, size = r2,3 / 128 * anchor size, and six
  keypoints at r4+2k like the centre (input fractions); logits [896, 1] clipped to +-100, sigmoid;
- score >= 0.75, then MediaPipe's weighted NMS: each kept face is the score-weighted mean of the boxes and keypoints
  overlapping the best one at IoU > 0.3, with the best one's score.
The six keypoints are eyes, nose tip, mouth centre and ear tragions; there are no mouth corners, so these faces cannot
be aligned to the five-point ArcFace template.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from .faces import BLAZEFACE_POINTS
from .family import (
    Family,
    Graph,
    box_iou_one,
    faces_in_photo,
    last_dim,
    letterbox,
    output,
    sigmoid,
    to_blob,
)

INPUT_SIZE = 128
STRIDES = (8, 16, 16, 16)
ANCHORS_PER_LAYER = 2  # aspect ratio 1.0 and the interpolated scale
ANCHOR_OFFSET = 0.5
SCORE_CLIP = 100.0
KEYPOINTS = 6


def anchors(size: int = INPUT_SIZE, strides=STRIDES) -> np.ndarray:
    """SSD anchor centres (cx, cy) as fractions of the input, in the network's order (SsdAnchorsCalculator with
    fixed_anchor_size: every anchor is 1 x 1, so only the centres matter)."""
    centres = []
    layer = 0
    while layer < len(strides):
        same = layer
        while same < len(strides) and strides[same] == strides[layer]:
            same += 1
        per_cell = ANCHORS_PER_LAYER * (same - layer)
        cells = math.ceil(size / strides[layer])
        r, c = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grid = np.stack([(c.ravel() + ANCHOR_OFFSET) / cells, (r.ravel() + ANCHOR_OFFSET) / cells], axis=1)
        centres.append(np.repeat(grid, per_cell, axis=0))
        layer = same
    return np.concatenate(centres).astype(np.float32)


class BlazeFace(Family):
    name = "blazeface"
    title = "BlazeFace"
    score = 0.75
    nms = 0.3
    landmark_names = BLAZEFACE_POINTS
    default_input_size = (INPUT_SIZE, INPUT_SIZE)

    def __init__(self, graph: Graph):
        super().__init__(graph)
        by_width = {last_dim(shape): name for name, shape in graph.outputs}
        self.regressors, self.logits = by_width[4 + 2 * KEYPOINTS], by_width[1]
        if self.input_size() != (INPUT_SIZE, INPUT_SIZE):
            w, h = self.input_size()
            raise ModelError(f"{graph.path.name}: a BlazeFace graph at {w}x{h}; facerun knows the anchors of the "
                             f"128x128 front-camera model only")

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        shapes = graph.output_shapes
        if len(shapes) != 2 or len(graph.input_shape) != 4 or not all(len(s) in (2, 3) for s in shapes):
            return False
        return sorted(last_dim(s) for s in shapes) == [1, 4 + 2 * KEYPOINTS] and shapes[0][-2] == shapes[1][-2]

    def prepare(self, rgb):
        canvas, frame = letterbox(rgb, self.input_size(), fill=0, centre=True)
        return to_blob(canvas, 127.5, 127.5, bgr=False), frame

    def decode(self, outputs, frame, score, nms_threshold, top_k):
        centres = anchors()
        raw = output(outputs, self.regressors, 4 + 2 * KEYPOINTS, self.title)
        if raw.shape[0] != centres.shape[0]:
            raise ModelError(f"BlazeFace output '{self.regressors}' has {raw.shape[0]} rows; the front model has "
                             f"{centres.shape[0]} anchors")
        logits = output(outputs, self.logits, 1, self.title)[:, 0]
        scores = sigmoid(np.clip(logits, -SCORE_CLIP, SCORE_CLIP))
        keep = np.flatnonzero(scores >= np.float32(score))
        if keep.size == 0:
            return []
        size = np.float32(INPUT_SIZE)
        r, c = raw[keep] / size, centres[keep]
        # with anchors of size 1 the offsets are plain input fractions; everything in input pixels from here
        centre = (r[:, 0:2] + c) * size
        half = r[:, 2:4] * size / 2
        boxes = np.concatenate([centre - half, centre + half], axis=1)
        marks = (r[:, 4:].reshape(-1, KEYPOINTS, 2) + c[:, None, :]) * size
        boxes, scores, marks = weighted_nms(boxes, scores[keep], marks, nms_threshold, top_k)
        return faces_in_photo(boxes, scores, marks, frame, self.landmark_names)


def weighted_nms(boxes, scores, marks, threshold: float, top_k: int = 0):
    """MediaPipe's WEIGHTED non-max suppression: take the best remaining detection, merge every remaining one that
    overlaps it at IoU > threshold (itself included) into a score-weighted mean box and keypoints, keep the best
    one's score; repeat. `top_k` > 0 caps the faces returned."""
    order = np.argsort(-scores, kind="stable")
    out_boxes, out_scores, out_marks = [], [], []
    while order.size and (top_k <= 0 or len(out_scores) < top_k):
        best = order[0]
        overlap = box_iou_one(boxes[best], boxes[order]) > threshold
        overlap[0] = True  # the best one merges with itself even when its box is empty
        members = order[overlap]
        weights = scores[members].astype(np.float64)[:, None]
        total = weights.sum()
        out_boxes.append((boxes[members] * weights).sum(axis=0) / total)
        out_marks.append((marks[members].reshape(members.size, -1) * weights).sum(axis=0) / total)
        out_scores.append(scores[best])
        order = order[~overlap]
    k = marks.shape[1]
    return (np.asarray(out_boxes, dtype=np.float32).reshape(-1, 4), np.asarray(out_scores, dtype=np.float32),
            np.asarray(out_marks, dtype=np.float32).reshape(-1, k, 2))
