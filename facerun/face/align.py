"""Face alignment: map a detector's five landmarks onto the ArcFace template and warp the face into a square crop.

The embedders (SFace, AuraFace, MobileFaceNet) were trained on faces placed this way, so an embedding is only as good
as the crop. The result matches OpenCV's `FaceRecognizerSF.alignCrop` (same template, same least-squares
similarity, bilinear sampling with a black border).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ..errors import InputError
from ..runner import FaceCut

# Where the five landmarks sit in a 112x112 ArcFace crop, in YuNet's order: right eye, left eye, nose tip, right and
# left mouth corner (as seen from the subject). Used by InsightFace and OpenCV alike.
ARCFACE_TEMPLATE = np.array(
    [
        [38.2946, 51.6963],
        [73.5318, 51.5014],
        [56.0252, 71.7366],
        [41.5493, 92.3655],
        [70.7299, 92.2041],
    ],
    dtype=np.float64,
)
TEMPLATE_SIZE = 112


def _size_pair(size) -> tuple[int, int]:
    """112 or (w, h) -> (w, h), checked."""
    if isinstance(size, (int, np.integer)):
        w = h = int(size)
    else:
        w, h = (int(v) for v in size)
    if w <= 0 or h <= 0:
        raise InputError(f"crop size must be positive, got {w}x{h}")
    return w, h


def template(size=TEMPLATE_SIZE) -> np.ndarray:
    """The five-point template for a crop of `size` (an int or (w, h)), as a 5x2 float64 array.

    The 112 template is scaled uniformly by min(w, h) / 112 and centred, so the face keeps its proportions in a
    non-square crop."""
    return _template(*_size_pair(size)).copy()


@cache
def _template(w: int, h: int) -> np.ndarray:
    """template()'s array, made once a size (read only: shared by every face aligned at that size)."""
    scale = min(w, h) / TEMPLATE_SIZE
    offset = np.array([(w - TEMPLATE_SIZE * scale) / 2, (h - TEMPLATE_SIZE * scale) / 2])
    points = ARCFACE_TEMPLATE * scale + offset
    points.flags.writeable = False
    return points


def similarity_transform(src, dst) -> np.ndarray:
    """The 2x3 similarity (rotation, uniform scale, translation; no reflection) that best maps the points `src`
    onto `dst` in the least-squares sense: Umeyama's (1991) fit restricted to rotations, as OpenCV's.

    In the plane that fit has a closed form: with both point sets centred, the linear part is [[a, -b], [b, a]],
    a = sum(src . dst) / sum(|src|^2) and b = sum(src x dst) / sum(|src|^2) (the scaled cosine and sine), which is
    what the SVD route gives, in a tenth of its time (a library aligns every face). Mirrored or scrambled landmarks
    thus still give the closest proper rotation."""
    src = np.asarray(src, dtype=np.float64).reshape(-1, 2)
    dst = np.asarray(dst, dtype=np.float64).reshape(-1, 2)
    if src.shape != dst.shape or len(src) < 2:
        raise InputError(f"need matching point sets of 2 or more points, got {src.shape} and {dst.shape}")
    # five points: Python's floats, not numpy's calls (each of those costs more than its arithmetic here)
    points, targets = src.tolist(), dst.tolist()
    if not all(math.isfinite(v) for point in points for v in point):
        raise InputError("landmarks contain NaN or infinity")
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    tx, ty = sum(q[0] for q in targets) / n, sum(q[1] for q in targets) / n
    spread = dot = cross = 0.0
    for (x, y), (u, v) in zip(points, targets):
        x, y, u, v = x - mx, y - my, u - tx, v - ty
        spread += x * x + y * y
        dot += x * u + y * v
        cross += x * v - y * u
    if not spread > 0.0:
        raise InputError("landmarks are all at one point; cannot align the face")
    a, b = dot / spread, cross / spread
    return np.array([[a, -b, tx - (a * mx - b * my)], [b, a, ty - (b * mx + a * my)]])


def landmarks_transform(landmarks, size=TEMPLATE_SIZE) -> np.ndarray:
    """The 2x3 matrix taking image coordinates to crop coordinates for five landmarks (YuNet's order)."""
    points = np.asarray(landmarks, dtype=np.float64)
    if points.shape != (5, 2):
        # accept a detector row too: x, y, w, h, then 10 landmark values (OpenCV's FaceDetectorYN layout)
        flat = points.reshape(-1)
        if flat.size in (14, 15):
            points = flat[4:14].reshape(5, 2)
        elif flat.size == 10:
            points = flat.reshape(5, 2)
        else:
            raise InputError(f"expected 5 landmarks (5x2), got shape {list(np.shape(landmarks))}")
    return similarity_transform(points, _template(*_size_pair(size)))


def invert_affine(matrix) -> np.ndarray:
    """Inverse of a 2x3 affine matrix."""
    m = np.asarray(matrix, dtype=np.float64).reshape(2, 3)
    linear = m[:, :2]
    det = np.linalg.det(linear)
    if abs(det) < 1e-12:
        raise InputError("the alignment transform is singular (landmarks collapse to a point)")
    inverse_linear = np.linalg.inv(linear)
    return np.hstack([inverse_linear, -inverse_linear @ m[:, 2:]])


def _similarity_inverse(matrix: np.ndarray) -> np.ndarray:
    """The inverse of a similarity [[a, -b, tx], [b, a, ty]] (landmarks_transform's), in closed form: a tenth of
    invert_affine's time (on 90 real faces the crops came out the same bytes)."""
    (a, _, tx), (b, _, ty) = matrix.tolist()
    det = a * a + b * b
    if det < 1e-12:
        raise InputError("the alignment transform is singular (landmarks collapse to a point)")
    p, q = a / det, b / det
    return np.array([[p, q, -(p * tx + q * ty)], [-q, p, q * tx - p * ty]])


@cache
def _grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Output pixel coordinates (x, y) of an h x w crop, float64 (read only: shared by every warp of that size)."""
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    xs.flags.writeable = False
    ys.flags.writeable = False
    return xs, ys


def warp_affine(image, matrix, size, border_value: float = 0.0, dtype=np.uint8) -> np.ndarray:
    """Warp `image` (HxW or HxWxC) by the 2x3 `matrix` (source -> output coordinates) into a crop of `size`
    ((w, h) or an int), sampling bilinearly; output pixels whose neighbours fall outside the image take
    `border_value` for those neighbours. dtype: uint8 (rounded, clipped) or a float type (unrounded)."""
    src = np.asarray(image)
    if src.ndim not in (2, 3) or src.shape[0] == 0 or src.shape[1] == 0:
        raise InputError(f"expected an HxW or HxWxC image, got shape {list(src.shape)}")
    return _warp(src, invert_affine(matrix), size, border_value, dtype)


def _corners(inverse: np.ndarray, w: int, h: int, limit: float) -> tuple[int, int, int, int]:
    """The region a w x h crop's samples touch: (left, top, right, bottom), the last two past its last neighbours.
    The sample points are an affine function of the crop's pixel, so their extremes are at its corners: computed as
    _warp computes them (the same float64 operations in the same order), on those four pixels alone."""
    (a, b, c), (d, e, f) = inverse.tolist()
    xs, ys = [], []
    for x, y in ((0.0, 0.0), (w - 1.0, 0.0), (0.0, h - 1.0), (w - 1.0, h - 1.0)):
        xs.append(math.floor(min(max(x * a + y * b + c, -limit), limit)))
        ys.append(math.floor(min(max(x * d + y * e + f, -limit), limit)))
    return min(xs), min(ys), max(xs) + 2, max(ys) + 2


def cut_face(image, landmarks, size=TEMPLATE_SIZE) -> FaceCut:
    """What aligning a face takes from its HxWx3 uint8 photo, for a device that samples it itself: the region its
    crop's samples touch (a frame of black past the photo's edge) and the crop's sample points in that region's
    coordinates (runner.FaceCut). `warp_cut` makes align_face's crop of it."""
    src = np.asarray(image)
    if src.ndim != 3 or src.shape[2] != 3 or src.dtype != np.uint8 or src.shape[0] == 0 or src.shape[1] == 0:
        raise InputError(f"expected an HxWx3 uint8 image, got shape {list(src.shape)} {src.dtype}")
    w, h = _size_pair(size)
    inverse = _similarity_inverse(landmarks_transform(landmarks, size))
    height, width = src.shape[:2]
    left, top, right, bottom = _corners(inverse, w, h, float(max(height, width) + 2))
    region = np.zeros((bottom - top, right - left, 3), np.uint8)
    cy0, cy1 = max(top, 0), min(bottom, height)
    cx0, cx1 = max(left, 0), min(right, width)
    if cy0 < cy1 and cx0 < cx1:
        region[cy0 - top : cy1 - top, cx0 - left : cx1 - left] = src[cy0:cy1, cx0:cx1]
    (a, b, c), (d, e, f) = inverse.tolist()
    return FaceCut(region, (a, b, c - left, d, e, f - top))


def warp_cut(cut: FaceCut, size=TEMPLATE_SIZE) -> np.ndarray:
    """The aligned crop (uint8, size x size x 3) of a face cut by cut_face: align_face's."""
    a, b, c, d, e, f = cut.inverse
    return _warp(cut.region, np.array([[a, b, c], [d, e, f]]), size, 0.0, np.uint8)


def _warp(src: np.ndarray, inverse: np.ndarray, size, border_value: float, dtype) -> np.ndarray:
    """warp_affine by the inverse matrix (output -> source coordinates)."""
    w, h = _size_pair(size)
    # each output pixel centre looks up the source point it came from (inverse mapping: no holes); the arithmetic
    # is in place, each step the same operation on the same values as written out
    xs, ys = _grid(h, w)
    sx = np.multiply(xs, inverse[0, 0])
    sx += ys * inverse[0, 1]
    sx += inverse[0, 2]
    sy = np.multiply(xs, inverse[1, 0])
    sy += ys * inverse[1, 1]
    sy += inverse[1, 2]
    # a point far outside has no neighbours inside; clamping keeps floor() and the index math in int range
    limit = float(max(src.shape[0], src.shape[1]) + 2)
    np.clip(sx, -limit, limit, out=sx)
    np.clip(sy, -limit, limit, out=sy)
    x0 = np.floor(sx)
    y0 = np.floor(sy)
    fx = np.subtract(sx, x0, out=sx).astype(np.float32)
    fy = np.subtract(sy, y0, out=sy).astype(np.float32)
    x0 = x0.astype(np.intp)
    y0 = y0.astype(np.intp)

    # Only the region the samples touch is read: copied once, with a one-pixel frame of `border_value`, so the
    # four neighbour gathers need no bounds masks (and a 4600-pixel photo is not touched outside the face). The
    # region is laid out a plane a channel: numpy's gathers and products along a last axis of 3 (or against
    # weights broadcast over it) run several times slower than over whole planes. A uint8 photo's region stays
    # uint8; its gathered neighbours are made float32, the same values.
    planar = src if src.ndim == 3 else src[:, :, None]
    height, width, channels = planar.shape
    left, top = int(x0.min()), int(y0.min())
    right, bottom = int(x0.max()) + 2, int(y0.max()) + 2
    small = planar.dtype == np.uint8 and float(border_value).is_integer() and 0 <= border_value <= 255
    region = np.full((channels, bottom - top, right - left), border_value, dtype=np.uint8 if small else np.float32)
    cy0, cy1 = max(top, 0), min(bottom, height)
    cx0, cx1 = max(left, 0), min(right, width)
    if cy0 < cy1 and cx0 < cx1:
        region[:, cy0 - top : cy1 - top, cx0 - left : cx1 - left] = planar[cy0:cy1, cx0:cx1].transpose(2, 0, 1)
    stride = region.shape[2]
    flat = region.reshape(channels, -1)
    at = y0  # y0 becomes each sample's top-left neighbour's index in the flattened region
    at -= top
    at *= stride
    at += x0
    at -= left

    def near(offset: int) -> np.ndarray:  # np.take: several times faster than 2-D indexing
        return flat.take(at + offset if offset else at, axis=1).astype(np.float32, copy=False)

    gx, gy = 1 - fx, 1 - fy
    out = near(0)  # the top row: a * (1 - fx) + b * fx, then the bottom row's, then the rows by (1 - fy) and fy
    out *= gx
    b = near(1)
    b *= fx
    out += b
    bottom_row = near(stride)
    bottom_row *= gx
    b = near(stride + 1)
    b *= fx
    bottom_row += b
    out *= gy
    bottom_row *= fy
    out += bottom_row
    if np.dtype(dtype) == np.uint8:
        np.rint(out, out=out)
        np.clip(out, 0, 255, out=out)
        out = out.astype(np.uint8)
    else:
        out = out.astype(dtype)
    return np.ascontiguousarray(out.transpose(1, 2, 0) if src.ndim == 3 else out[0])


def align_face(image, landmarks, size=TEMPLATE_SIZE, dtype=np.uint8) -> np.ndarray:
    """The aligned crop (size x size, or (w, h)) of the face whose five landmarks are given, from an HxWx3 image."""
    src = np.asarray(image)
    if src.ndim not in (2, 3) or src.shape[0] == 0 or src.shape[1] == 0:
        raise InputError(f"expected an HxW or HxWxC image, got shape {list(src.shape)}")
    return _warp(src, _similarity_inverse(landmarks_transform(landmarks, size)), size, 0.0, dtype)


def align_faces(image, landmarks_list, size=TEMPLATE_SIZE, dtype=np.uint8) -> np.ndarray:
    """Aligned crops of several faces of one image, stacked: N x h x w x C."""
    w, h = _size_pair(size)
    image = np.asarray(image)
    channels = image.shape[2] if image.ndim == 3 else None
    crops = [align_face(image, marks, size, dtype) for marks in landmarks_list]
    if not crops:
        shape = (0, h, w) if channels is None else (0, h, w, channels)
        return np.zeros(shape, dtype=dtype)
    return np.stack(crops)


__all__ = [
    "ARCFACE_TEMPLATE",
    "TEMPLATE_SIZE",
    "template",
    "similarity_transform",
    "landmarks_transform",
    "invert_affine",
    "warp_affine",
    "align_face",
    "align_faces",
    "cut_face",
    "warp_cut",
]
