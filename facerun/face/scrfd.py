"""SCRFD (insightface's detector, `det_*.onnx` of its model packs): anchor-centre distance boxes and five keypoints.

Pre- and post-processing as insightface's `model_zoo/scrfd.py` does them:
- the photo is resized into the input size (640x640 unless the file fixes one) with its aspect kept, at the top-left
  of a black canvas; RGB, (x - 127.5) / 128;
- outputs per stride s (8, 16, 32; or 8..128 for five-level models): scores (sigmoid already applied), 4 distances
  and optionally 10 keypoint offsets per anchor, A anchors per cell (2 for three-level models) centred at
  (col * s, row * s), anchor index fastest;
- box = (cx - d0 s, cy - d1 s, cx + d2 s, cy + d3 s), keypoint k = (cx + e_2k s, cy + e_2k+1 s);
- score >= 0.5, NMS at IoU 0.4, boxes and keypoints scaled back to the photo.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .faces import FIVE_POINTS, NO_POINTS
from .family import (
    Family,
    Graph,
    faces_in_photo,
    last_dim,
    letterbox,
    nms,
    output,
    select,
    to_blob,
)

MEAN, STD = 127.5, 128.0
WIDTHS = {"score": 1, "bbox": 4, "kps": 10}


def _levels(count: int) -> int | None:
    """Feature levels of a graph with this many outputs (6/9: three levels, 10/15: five), None if neither."""
    return {6: 3, 9: 3, 10: 5, 15: 5}.get(count)


class Scrfd(Family):
    name = "scrfd"
    title = "SCRFD"
    score = 0.5
    nms = 0.4
    default_input_size = (640, 640)

    def __init__(self, graph: Graph):
        super().__init__(graph)
        levels = _levels(len(graph.outputs))
        widths = [last_dim(shape) for shape in graph.output_shapes]
        # outputs are grouped by what they hold: scores, boxes, then keypoints (insightface relies on that order)
        self.heads = {kind: [n for n, w in zip(graph.output_names, widths) if w == width]
                      for kind, width in WIDTHS.items()}
        self.strides = tuple(8 * 2**i for i in range(levels))
        self.size_multiple = self.strides[-1]
        self.landmark_names = FIVE_POINTS if self.heads["kps"] else NO_POINTS

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        levels = _levels(len(graph.outputs))
        if levels is None or len(graph.input_shape) != 4:
            return False
        shapes = graph.output_shapes
        if not all(len(s) in (2, 3) and (len(s) == 2 or s[0] in (1, None)) for s in shapes):
            return False
        widths = [last_dim(s) for s in shapes]
        scores, boxes, points = widths.count(1), widths.count(4), widths.count(10)
        return scores == levels and boxes == levels and points in (0, levels) and len(widths) == scores + boxes + points

    def prepare(self, rgb):
        canvas, frame = letterbox(rgb, self.input_size(), fill=0, centre=False)
        return to_blob(canvas, MEAN, STD, bgr=False), frame

    def decode(self, outputs, frame, score, nms_threshold, top_k):
        boxes, scores, marks = [], [], []
        use_kps = bool(self.heads["kps"])
        levels = {kind: self._by_level(outputs, names, WIDTHS[kind]) for kind, names in self.heads.items() if names}
        for level, stride in enumerate(self.strides):
            level_scores = levels["score"][level][:, 0]
            centres = self._centres(level_scores.size, stride, frame)
            keep = np.flatnonzero(level_scores >= np.float32(score))
            if keep.size == 0:
                continue
            c = centres[keep]
            d = levels["bbox"][level][keep] * np.float32(stride)
            boxes.append(np.concatenate([c - d[:, 0:2], c + d[:, 2:4]], axis=1))
            scores.append(level_scores[keep])
            if use_kps:
                k = levels["kps"][level][keep].reshape(-1, 5, 2) * np.float32(stride)
                marks.append(c[:, None, :] + k)
        if not scores:
            return []
        boxes, scores = np.concatenate(boxes), np.concatenate(scores)
        marks = np.concatenate(marks) if use_kps else None
        keep = nms(boxes, scores, nms_threshold, top_k)
        return faces_in_photo(*select(boxes, scores, marks, keep), frame, self.landmark_names)

    def _by_level(self, outputs, names: list[str], width: int) -> list[np.ndarray]:
        """One output per level, finest first: the larger an output, the finer its stride."""
        arrays = [output(outputs, name, width, self.title) for name in names]
        return sorted(arrays, key=lambda a: -a.shape[0])

    def _centres(self, count: int, stride: int, frame) -> np.ndarray:
        rows, cols = frame.input_height // stride, frame.input_width // stride
        cells = rows * cols
        if cells == 0 or count % cells:
            raise ModelError(f"SCRFD output of {count} anchors does not fit a {cols}x{rows} stride-{stride} grid")
        anchors = count // cells
        grid = np.stack(np.meshgrid(np.arange(cols), np.arange(rows)), axis=-1).reshape(-1, 2) * stride
        return np.repeat(grid.astype(np.float32), anchors, axis=0)  # anchor index fastest, as the heads lay them out
