"""`facerun bench photos DIR`: the end-to-end library benchmark, a row per path over one folder of photos.

With an embedder, each facerun path gives two rows: detection alone (`cpu`) and the whole job (`cpu+embed`).
Paths (facerun.bench.paths' PHOTO_PATHS; the rows themselves are facerun.bench.photo_rows'): `cpu` and `gpu` (the
pipelined library run, facerun.face.library), `cpu-serial` and `gpu-serial` (the same work one photo after another:
the loop facerun ran before the pipeline), `cpu-processes` and `gpu-processes` (the library run over --processes
processes, facerun.face.processes, their start-up inside the row's clock), `opencv` (cv2.FaceDetectorYN on the same
decoded, equally shrunk photos) and `opencv-threads` (the same, a photo per thread over the machine's cores, or
--workers threads). Every facerun row counts the one-off work its run paid for (facerun.counters) and says how its
faces compare with the cpu row's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import InputError
from .paths import PHOTO_PATHS as REGISTRY
from .paths import check_names
from .photo_rows import PhotoJob, PhotoRow

PHOTO_PATHS = tuple(REGISTRY)
DEFAULT_PHOTO_PATHS = tuple(name for name, p in REGISTRY.items() if p.default)
FORMAT = "facerun-bench-photos/1"  # saved runs from before it had no format and read the same
SPREAD_PERCENTILES_FROM = 5  # runs; with fewer, p10 and p90 would only interpolate between min and max
IOU_MIN = 0.95
SCORE_TOL = 1e-3


def bench_photos(folder: Path, paths=DEFAULT_PHOTO_PATHS, detector_model=None, embed_model=None, batch: int = 16,
                 workers: int | None = None, on_row=None, processes: int = 4, repeat: int = 1) -> dict:
    """Run every path over the photos of `folder` (searched recursively), `repeat` times each; the result as
    JSON-ready data."""
    from ..face.images import iter_images
    from ..face.library import default_workers

    check_names(paths, REGISTRY, "photo path")
    folder = Path(folder)
    photos = iter_images([folder])
    if not folder.is_dir() or not photos:
        raise InputError(f"{folder}: no photos found (a folder of .jpg .jpeg .png .webp .bmp files)")
    # OpenCV's threads row takes the whole machine, as a user running it alone would, unless --workers says
    opencv_threads = max(2, os.cpu_count() or 2) if workers is None else max(2, workers)
    # None: each facerun row's library run decodes over its own default (more threads feeding a GPU)
    job = PhotoJob(photos, detector_model, batch, workers, processes, opencv_threads)
    rows: list[tuple[bool, PhotoRow]] = []  # (may be the reference, the row)
    floors: list[PhotoRow] = []  # the decode rows
    for name in paths:
        path = REGISTRY[name]
        if on_row is not None:
            on_row(name)
        rows.append((path.reference, repeated(lambda p=path: p.row(job, None), repeat, on_row, name)))
        if path.floor:
            floors.append(rows[-1][1])
        if embed_model is not None and path.embeds:  # detection alone, then the whole job: both in one run
            if on_row is not None:
                on_row(f"{name}+embed")
            rows.append((False, repeated(lambda p=path: p.row(job, embed_model), repeat, on_row,
                                                  f"{name}+embed")))
    reference = next((r for can, r in rows if can and not r.skipped), None)
    floor = max((r.photos_per_s for r in floors if r.photos_per_s), default=None)
    for _, row in rows:
        if reference is not None and row is not reference and not row.skipped and not any(r is row for r in floors):
            row.agree_with_cpu = agreement(reference.faces_by_photo, row.faces_by_photo)
        if floor and row.photos_per_s is not None:
            row.vs_decode = round(row.photos_per_s / floor, 4)
    return {"format": FORMAT, "photos_dir": str(folder), "photos": len(photos),
            "detector": _name(detector_model, "yunet-2023mar"), "embedder": _name(embed_model, None), "batch": batch,
            "workers": default_workers("gpu") if workers is None else workers, "repeat": repeat,
            "rows": [r.to_json() for _, r in rows]}


def repeated(run, n: int, on_row=None, name: str = "") -> PhotoRow:
    """`run()` n times: the run whose photos/s is the median one (the lower middle for an even n), carrying the
    medians of photos/s and faces/s and the spread of photos/s over the runs. A skipped run ends the repeats."""
    runs = []
    for i in range(n):
        if on_row is not None and n > 1:
            on_row(f"{name} (run {i + 1} of {n})")
        row = run()
        runs.append(row)
        if row.skipped and not row.photos:
            return row
    timed = [r for r in runs if r.photos_per_s is not None]
    if not timed:
        return runs[0]
    rates = np.array([r.photos_per_s for r in timed])
    chosen = timed[int(np.argsort(rates, kind="stable")[(len(timed) - 1) // 2])]
    chosen.runs = len(timed)
    chosen.photos_per_s_runs = [round(float(v), 4) for v in rates]
    chosen.photos_per_s = float(np.median(rates))
    chosen.faces_per_s = float(np.median([r.faces_per_s for r in timed]))
    if len(timed) >= SPREAD_PERCENTILES_FROM:
        chosen.spread = "p10–p90"
        chosen.photos_per_s_low, chosen.photos_per_s_high = (float(v) for v in np.percentile(rates, [10, 90]))
    else:
        chosen.spread = "min–max"
        chosen.photos_per_s_low, chosen.photos_per_s_high = float(rates.min()), float(rates.max())
    return chosen


def _name(model, default):
    return default if model is None else Path(str(model)).name


def iou(a, b) -> float:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    w = min(ax + aw, bx + bw) - max(ax, bx)
    h = min(ay + ah, by + bh) - max(ay, by)
    inter = max(0.0, w) * max(0.0, h)
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


def agreement(want: list, got: list) -> dict:
    """Same faces as the reference, photo by photo: the same count, and each face matched (greedily, by IoU) to one
    with IoU >= 0.95 and a score within 1e-3."""
    differing, matched, total = 0, 0, 0
    for ref, faces in zip(want, got):
        total += len(ref)
        free = list(faces)
        ok = len(ref) == len(faces)
        for score, box in ref:
            best = max(range(len(free)), key=lambda i: iou(box, free[i][1]), default=None)
            if best is not None and iou(box, free[best][1]) >= IOU_MIN and abs(free[best][0] - score) <= SCORE_TOL:
                matched += 1
                free.pop(best)
            else:
                ok = False
        differing += not ok
    differing += abs(len(want) - len(got))
    return {"same": differing == 0, "photos_differing": differing, "faces_matched": matched, "faces": total}
