"""YuNet pre- and post-processing, done the way OpenCV's cv2.FaceDetectorYN does it.

Reference: OpenCV `modules/objdetect/src/face_detect.cpp` (FaceDetectorYNImpl) and `modules/dnn/src/nms.cpp`.
Faces travel as rows of 15 float32 numbers, OpenCV's layout:
    x, y, w, h (box top-left and size), 5 landmarks (x, y) in YuNet's order (right eye, left eye, nose tip,
    right mouth corner, left mouth corner; "right" is the subject's right), score.

Two generations of the model exist and are told apart by their output names:
- 2023mar (YuNet v2, anchor-free): cls_8/16/32, obj_*, bbox_*, kps_*;
- 2022mar (YuNet v1, prior boxes): loc, conf, iou.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from ..errors import ModelError
from ..runner import KEY_SHIFT, Candidates, PhotoLayout, Selected
from .faces import FIVE_POINTS, Face
from .family import Family, Frame, greedy_keep

PAD_DIVISOR = 32  # OpenCV pads the image bottom/right to a multiple of this before the forward pass
STRIDES = (8, 16, 32)

GENERATION_2023 = "2023mar"
GENERATION_2022 = "2022mar"
OUTPUTS_2023 = tuple(f"{kind}_{stride}" for kind in ("cls", "obj", "bbox", "kps") for stride in STRIDES)
OUTPUTS_2022 = ("loc", "conf", "iou")

# 2022mar prior boxes (libfacedetection.train tasks/task1/config.py): anchor sizes per level, level strides, variances
PRIOR_MIN_SIZES = ((10, 16, 24), (32, 48), (64, 96), (128, 192, 256))
PRIOR_STEPS = (8, 16, 32, 64)
PRIOR_VARIANCE = (0.1, 0.2)

ROW_WIDTH = 15
SCORE_COLUMN = 14
# Below this score threshold a crowded photo has more candidate rows than a device holds (a 140-face WIDER photo has
# about 700 at 0.6), so the heads are read back whole.
SELECT_SCORE = 0.5


def model_generation(output_names) -> str:
    """Which YuNet decoder fits a graph with these outputs; ModelError if it is not a YuNet graph."""
    names = set(output_names)
    if set(OUTPUTS_2023) <= names:
        return GENERATION_2023
    if set(OUTPUTS_2022) <= names:
        return GENERATION_2022
    raise ModelError(
        "not a YuNet face detector: expected outputs cls_8..kps_32 (2023mar) or loc/conf/iou (2022mar), "
        f"found {', '.join(output_names) or 'none'}"
    )


# ----------------------------------------------------------------------------------------------- pre-processing


def padded_size(height: int, width: int) -> tuple[int, int]:
    """The input size the network sees: each side rounded up to a multiple of 32 (OpenCV's padWithDivisor)."""
    return (-(-height // PAD_DIVISOR) * PAD_DIVISOR, -(-width // PAD_DIVISOR) * PAD_DIVISOR)


def bucket_size(pad_h: int, pad_w: int, step: int) -> tuple[int, int]:
    """The input a padded size shares its program with on the GPU: each side rounded up to a multiple of `step`."""
    return -(-pad_h // step) * step, -(-pad_w // step) * step


def crop_2023(outputs: dict, input_hw: tuple[int, int], photo_hw: tuple[int, int]) -> dict:
    """The 2023mar heads of a run on a larger input cut to a photo's (padded) size: each head's rows and columns of
    the photo's region, row-major as its own run gives them."""
    (h, w), (ph, pw) = input_hw, photo_hw
    out = {}
    for name, array in outputs.items():
        stride = int(name.rsplit("_", 1)[1])
        a = np.asarray(array)
        grid = a.reshape(h // stride, w // stride, a.shape[-1])
        out[name] = np.ascontiguousarray(grid[: ph // stride, : pw // stride]).reshape(1, -1, a.shape[-1])
    return out


def make_blob(rgb: np.ndarray) -> np.ndarray:
    """HxWx3 uint8 RGB -> 1x3xHpxWp float32 BGR, raw 0..255, zero-padded at the bottom and right (HxWx4: the
    fourth byte, unused, is left out).

    That is `dnn::blobFromImage(copyMakeBorder(bgr, 0, bottom, 0, right, BORDER_CONSTANT, 0))` with its default
    arguments: no mean, no scale, no channel swap (the image is already BGR on OpenCV's side).
    """
    height, width = rgb.shape[:2]
    pad_h, pad_w = padded_size(height, width)
    blob = np.zeros((1, 3, pad_h, pad_w), dtype=np.float32)
    blob[0, :, :height, :width] = rgb[:, :, 2::-1].transpose(2, 0, 1)
    return blob


def shrunk_size(width: int, height: int, max_side: int) -> tuple[int, int] | None:
    """The (width, height) fit_max_side shrinks a photo of this size to, or None when it stays as it is."""
    if not max_side or max(height, width) <= max_side:
        return None
    factor = max_side / max(height, width)
    return max(1, round(width * factor)), max(1, round(height * factor))


def fit_max_side(rgb: np.ndarray, max_side: int) -> tuple[np.ndarray, float, float]:
    """Shrink `rgb` so its longer side is at most `max_side` (0: never). Returns (image, scale_x, scale_y).

    Pillow's bilinear filter widens its support when it shrinks, so it averages like an area filter (no aliasing).
    The scales are per axis (new/old) because rounding the new size makes them differ slightly.
    """
    height, width = rgb.shape[:2]
    size = shrunk_size(width, height, max_side)
    if size is None:
        return rgb, 1.0, 1.0
    resized = Image.fromarray(np.ascontiguousarray(rgb)).resize(size, Image.Resampling.BILINEAR)
    return np.asarray(resized), size[0] / width, size[1] / height


# --------------------------------------------------------------------------------------------------- decoding


def decode_2023(outputs: dict, pad_h: int, pad_w: int, score_threshold: float) -> np.ndarray:
    """Anchor-free decoding of the 2023mar heads; keeps rows with score >= threshold, in OpenCV's order.

    OpenCV's order is stride 8, 16, 32, and within a stride row-major over the feature map; NMS breaks score ties by
    this order, so it matters for exact parity.
    """
    rows = []
    for stride in STRIDES:
        cols_n, rows_n = pad_w // stride, pad_h // stride
        count = cols_n * rows_n
        cls = _head(outputs, f"cls_{stride}", count, 1)[:, 0]
        obj = _head(outputs, f"obj_{stride}", count, 1)[:, 0]
        score = np.sqrt(np.clip(cls, 0, 1) * np.clip(obj, 0, 1))
        keep = np.flatnonzero(score >= np.float32(score_threshold))
        if keep.size:
            rows.append(_rows_2023(stride, cols_n, keep, score[keep], _head(outputs, f"bbox_{stride}", count, 4)[keep],
                                   _head(outputs, f"kps_{stride}", count, 10)[keep]))
    return np.concatenate(rows) if rows else np.zeros((0, ROW_WIDTH), dtype=np.float32)


def decode_2023_selected(selected: Selected, score_threshold: float) -> np.ndarray:
    """decode_2023 from the heads' candidate rows a device chose (`select_2023`): the same rows, bit for bit, since
    each is computed from the same values by the same operations."""
    pad_h, pad_w = selected.photo_hw
    keys = selected.keys
    rows = []
    for level, stride in enumerate(STRIDES):
        mine = selected.rows[(keys >> KEY_SHIFT) == level]
        score = np.sqrt(np.clip(mine[:, 1], 0, 1) * np.clip(mine[:, 2], 0, 1))
        ok = np.flatnonzero(score >= np.float32(score_threshold))
        if ok.size:
            keep = (mine[ok, 0].view(np.uint32) & np.uint32((1 << KEY_SHIFT) - 1)).astype(np.int64)
            rows.append(_rows_2023(stride, pad_w // stride, keep, score[ok], mine[ok, 3:7], mine[ok, 7:17]))
    return np.concatenate(rows) if rows else np.zeros((0, ROW_WIDTH), dtype=np.float32)


def _rows_2023(stride: int, cols_n: int, keep: np.ndarray, score: np.ndarray, bbox: np.ndarray,
               kps: np.ndarray) -> np.ndarray:
    """One stride's face rows from its kept positions (row-major in the grid of `cols_n` columns), their scores and
    their bbox (n x 4) and kps (n x 10) values."""
    c = (keep % cols_n).astype(np.float32)[:, None]
    r = (keep // cols_n).astype(np.float32)[:, None]
    s = np.float32(stride)
    cx = (c[:, 0] + bbox[:, 0]) * s
    cy = (r[:, 0] + bbox[:, 1]) * s
    w = np.exp(bbox[:, 2]) * s
    h = np.exp(bbox[:, 3]) * s
    face = np.empty((keep.size, ROW_WIDTH), dtype=np.float32)
    face[:, 0] = cx - w / np.float32(2)
    face[:, 1] = cy - h / np.float32(2)
    face[:, 2] = w
    face[:, 3] = h
    face[:, 4:14:2] = (kps[:, 0::2] + c) * s
    face[:, 5:14:2] = (kps[:, 1::2] + r) * s
    face[:, SCORE_COLUMN] = score
    return face


def select_2023(score_threshold: float) -> Candidates:
    """The 2023mar heads' rows a device may choose for decode_2023_selected: positions whose score product passes
    the threshold squared, a hair under (float32 rounding of the square root may lift a product just below it to
    the threshold), so every row decode_2023 keeps is among them."""
    t = float(np.float32(score_threshold))
    floor = float(np.float32(t * t * (1 - 2.0**-20)))
    levels = tuple((s, (f"cls_{s}", f"obj_{s}"), (f"bbox_{s}", f"kps_{s}")) for s in STRIDES)
    return Candidates(levels=levels, floor=floor)


def prior_boxes_2022(pad_h: int, pad_w: int) -> np.ndarray:
    """The 2022mar anchors in pixels as (cx, cy, size), in the network's output order (level, row, col, anchor).

    The feature-map sizes follow the network's own rounding (stride-2 conv, then 2x2 max-pools), as
    libfacedetection.train's PriorBox and OpenCV 4.5's generatePriors compute them.
    """
    fh, fw = (pad_h + 1) // 2 // 2, (pad_w + 1) // 2 // 2
    levels = []
    for sizes, step in zip(PRIOR_MIN_SIZES, PRIOR_STEPS):
        fh, fw = fh // 2, fw // 2
        rr, cc, ss = np.meshgrid(np.arange(fh), np.arange(fw), np.asarray(sizes), indexing="ij")
        levels.append(np.stack([(cc.ravel() + 0.5) * step, (rr.ravel() + 0.5) * step, ss.ravel()], axis=1))
    return np.concatenate(levels).astype(np.float32)


def decode_2022(outputs: dict, pad_h: int, pad_w: int, score_threshold: float) -> np.ndarray:
    """Prior-box decoding of the 2022mar heads (SSD style); keeps rows with score >= threshold.

    Width and height use variance 0.2, as the model was trained (libfacedetection.train `encode`/`decode`).
    OpenCV 4.5.x decoded the width with 0.1 instead, so its 2022mar boxes are a little narrower than these.
    """
    priors = prior_boxes_2022(pad_h, pad_w)
    count = priors.shape[0]
    loc = _head(outputs, "loc", count, 14)
    conf = _head(outputs, "conf", count, 2)
    iou = _head(outputs, "iou", count, 1)[:, 0]
    score = np.sqrt(conf[:, 1] * np.clip(iou, 0, 1))
    keep = np.flatnonzero(score >= np.float32(score_threshold))
    loc, pr = loc[keep], priors[keep]
    centre, size = pr[:, 0:2], pr[:, 2:3]
    v_centre, v_size = np.float32(PRIOR_VARIANCE[0]), np.float32(PRIOR_VARIANCE[1])
    xy = centre + loc[:, 0:2] * v_centre * size
    wh = size * np.exp(loc[:, 2:4] * v_size)
    face = np.empty((keep.size, ROW_WIDTH), dtype=np.float32)
    face[:, 0:2] = xy - wh / np.float32(2)
    face[:, 2:4] = wh
    for n in range(5):
        face[:, 4 + 2 * n : 6 + 2 * n] = centre + loc[:, 4 + 2 * n : 6 + 2 * n] * v_centre * size
    face[:, SCORE_COLUMN] = score[keep]
    return face


def _head(outputs: dict, name: str, count: int, width: int) -> np.ndarray:
    array = np.asarray(outputs[name], dtype=np.float32)
    if array.size != count * width:
        raise ModelError(f"YuNet output '{name}' has shape {list(array.shape)}; expected {count}x{width} values")
    return array.reshape(count, width)


# ------------------------------------------------------------------------------------------------------- NMS


def nms_boxes(boxes: np.ndarray, scores: np.ndarray, score_threshold: float, nms_threshold: float,
              top_k: int = 0) -> np.ndarray:
    """Indices kept by greedy NMS, exactly as `cv2.dnn.NMSBoxes` (the integer-Rect overload) picks them.

    - candidates: score strictly above `score_threshold`, sorted by score descending (stable: ties keep input
      order), cut to `top_k` when top_k > 0;
    - boxes (x, y, w, h) are truncated toward zero to int, as `Rect2i(int(x), ...)` in face_detect.cpp does;
    - overlap = |A∩B| / (|A|+|B|-|A∩B|) on those integer rectangles, with no +1 on widths (right/bottom edges are
      exclusive); a candidate is kept while its overlap with every kept box is <= nms_threshold.
    The overlap is rounded as OpenCV rounds it (double IoU, then 1.f - float(1 - IoU)) so ties at the threshold
    go the same way.
    """
    scores = np.asarray(scores, dtype=np.float32)
    order = np.flatnonzero(scores > np.float32(score_threshold))
    order = order[np.argsort(-scores[order], kind="stable")]
    if top_k > 0:
        order = order[:top_k]
    if order.size == 0:
        return order

    rect = np.trunc(np.asarray(boxes, dtype=np.float32)[order, :4]).astype(np.int64)
    x1, y1, w, h = rect.T
    x2, y2 = x1 + w, y1 + h
    area = w * h
    empty = (w <= 0) | (h <= 0)
    limit = np.float32(nms_threshold)

    def too_close(i: int, rest: slice) -> np.ndarray:
        iw = np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest])
        ih = np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest])
        inter = np.where((iw > 0) & (ih > 0) & ~empty[i] & ~empty[rest], iw * ih, 0).astype(np.float64)
        total = (area[i] + area[rest]).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            distance = np.where(total <= 0, 0.0, 1.0 - inter / (total - inter))
        return np.float32(1) - distance.astype(np.float32) > limit

    return order[greedy_keep(order.size, too_close)]


def suppress(faces: np.ndarray, score_threshold: float, nms_threshold: float, top_k: int) -> np.ndarray:
    """OpenCV's last step: NMS when there are two or more rows; a single row is returned as it is."""
    if faces.shape[0] <= 1:
        return faces
    keep = nms_boxes(faces[:, :4], faces[:, SCORE_COLUMN], score_threshold, nms_threshold, top_k)
    return faces[keep]


def decode(generation: str, outputs: dict, pad_h: int, pad_w: int, score_threshold: float,
           nms_threshold: float, top_k: int) -> np.ndarray:
    """Network outputs -> final face rows (N x 15, float32) in padded-input pixel coordinates."""
    decoder = decode_2023 if generation == GENERATION_2023 else decode_2022
    faces = decoder(outputs, pad_h, pad_w, score_threshold)
    return suppress(faces, score_threshold, nms_threshold, top_k)


_decode_rows = decode


class YuNet(Family):
    """YuNet as a detector family: the photo at its own size (padded), OpenCV's decoding and NMS."""

    name = "yunet"
    title = "YuNet"
    score = 0.6
    nms = 0.3
    landmark_names = FIVE_POINTS
    follows_image = True

    def __init__(self, graph):
        super().__init__(graph)
        self.generation = model_generation(graph.output_names)
        self.title = f"YuNet {self.generation}"

    @classmethod
    def matches(cls, graph) -> bool:
        names = set(graph.output_names)
        return set(OUTPUTS_2023) <= names or set(OUTPUTS_2022) <= names

    @property
    def crop(self):
        """crop(outputs, input_hw, photo_hw): a larger input's outputs cut to a photo's, or None (2022mar's priors
        run over the whole input: its programs are one per size)."""
        return crop_2023 if self.generation == "2023mar" else None

    def photo_layout(self, bucket: int, score: float | None = None) -> PhotoLayout:
        """YuNet's blob (BGR, raw, zero-padded to multiples of 32) for a runner to make from the photo's bytes;
        2023mar's heads cut to a smaller photo's (`crop`), so its photos may share a bucket's program. score: the
        threshold faces are kept at: at SELECT_SCORE or above, a 2023mar photo's heads may come back as the rows
        passing it (select_2023), read back instead of every head."""
        select = None
        if self.generation == GENERATION_2023 and score is not None and score >= SELECT_SCORE:
            select = select_2023(score)
        return PhotoLayout(blob=make_blob, align=PAD_DIVISOR, bgr=True, crop=self.crop, bucket=bucket, select=select)

    def layout(self, rgb) -> tuple[tuple[int, int, int, int], Frame]:
        """The network input's shape for `rgb` (padded to multiples of 32) and its Frame, without the blob."""
        height, width = rgb.shape[:2]
        pad_h, pad_w = padded_size(height, width)
        return (1, 3, pad_h, pad_w), Frame(1.0, 1.0, 0, 0, width, height, pad_w, pad_h)

    def prepare(self, rgb):
        return make_blob(rgb), self.layout(rgb)[1]

    def decode_rows(self, outputs, frame, score, nms, top_k) -> np.ndarray:
        """OpenCV's N x 15 rows, in cv2.FaceDetectorYN.detect's order (`outputs`: the heads by name, or their
        candidate rows a device chose, runner.Selected)."""
        if isinstance(outputs, Selected):
            return suppress(decode_2023_selected(outputs, score), score, nms, top_k)
        return _decode_rows(self.generation, outputs, frame.input_height, frame.input_width, score, nms, top_k)

    def decode(self, outputs, frame, score, nms, top_k):
        return [
            Face(score=float(r[SCORE_COLUMN]), box=tuple(float(v) for v in r[:4]),
                 landmarks=np.asarray(r[4:14], dtype=np.float32).reshape(5, 2))
            for r in self.decode_rows(outputs, frame, score, nms, top_k)
        ]
