"""YOLOv5-face (deepcam-cn/yolov5-face exports with the raw heads): letterbox, three anchor heads, five landmarks.

Pre- and post-processing as the project's `detect_face.py` and its `Detect` head do them:
- letterbox: the photo resized into the input size (640x640 here) with its aspect kept, centred on grey (114);
  RGB / 255;
- three heads [1, 3, H, W, 4 + 1 + 10 + classes] at strides 8, 16, 32 with 3 anchors each (P3 4,5 8,10 13,16;
  P4 23,29 43,55 73,105; P5 146,217 231,300 335,433, in input pixels); all but the landmarks go through a sigmoid;
- centre = (2 sigma(t) - 0.5 + cell) * stride, size = (2 sigma(t))^2 * anchor, landmark = l * anchor + cell * stride;
- score = objectness * class score > 0.6, NMS at IoU 0.5, coordinates mapped back out of the letterbox.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .faces import FIVE_POINTS
from .family import (
    Family,
    Graph,
    faces_in_photo,
    letterbox,
    nms,
    select,
    sigmoid,
    to_blob,
)

ANCHORS = {  # stride -> (w, h) of each of the head's anchors, in input pixels
    8: ((4, 5), (8, 10), (13, 16)),
    16: ((23, 29), (43, 55), (73, 105)),
    32: ((146, 217), (231, 300), (335, 433)),
}
BOX, OBJECTNESS, MARKS = slice(0, 4), 4, slice(5, 15)
FILL = 114


class Yolo5Face(Family):
    name = "yolov5-face"
    title = "YOLOv5-face"
    score = 0.6
    nms = 0.5
    landmark_names = FIVE_POINTS
    default_input_size = (640, 640)

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.heads = graph.output_names

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        shapes = graph.output_shapes
        if len(shapes) != 3 or len(graph.input_shape) != 4:
            return False
        return all(len(s) == 5 and s[1] == 3 and s[-1] is not None and s[-1] >= 16 for s in shapes)

    def prepare(self, rgb):
        canvas, frame = letterbox(rgb, self.input_size(), fill=FILL, centre=True)
        return to_blob(canvas, 0.0, 255.0, bgr=False), frame

    def decode(self, outputs, frame, score, nms_threshold, top_k):
        boxes, scores, marks = [], [], []
        for name in self.heads:
            head = np.asarray(outputs[name], dtype=np.float32)
            if head.ndim != 5 or head.shape[0] != 1 or head.shape[-1] < 16:
                raise ModelError(f"YOLOv5-face output '{name}' has shape {list(head.shape)}; expected [1,3,H,W,16]")
            _, count, rows, cols, width = head.shape
            stride = frame.input_height // rows
            anchor = ANCHORS.get(stride)
            if anchor is None or count != len(anchor) or cols * stride != frame.input_width:
                raise ModelError(f"YOLOv5-face output '{name}' ({list(head.shape)}) is not a stride-8/16/32 head "
                                 f"of a {frame.input_width}x{frame.input_height} input with 3 anchors")
            flat = head.reshape(-1, width)
            level_scores = sigmoid(flat[:, OBJECTNESS]) * sigmoid(flat[:, 15:]).max(axis=1)
            keep = np.flatnonzero(level_scores > np.float32(score))
            if keep.size == 0:
                continue
            a, cell = np.divmod(keep, rows * cols)
            r, c = np.divmod(cell, cols)
            grid = np.stack([c, r], axis=1).astype(np.float32)
            size = np.asarray(anchor, dtype=np.float32)[a]
            t = sigmoid(flat[keep, BOX])
            centre = (t[:, 0:2] * 2 - 0.5 + grid) * stride
            wh = (t[:, 2:4] * 2) ** 2 * size
            boxes.append(np.concatenate([centre - wh / 2, centre + wh / 2], axis=1))
            scores.append(level_scores[keep])
            marks.append(flat[keep, MARKS].reshape(-1, 5, 2) * size[:, None, :] + (grid * stride)[:, None, :])
        if not scores:
            return []
        boxes, scores, marks = np.concatenate(boxes), np.concatenate(scores), np.concatenate(marks)
        kept = nms(boxes, scores, nms_threshold, top_k)
        return faces_in_photo(*select(boxes, scores, marks, kept), frame, self.landmark_names)
