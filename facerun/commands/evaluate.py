"""`facerun evaluate`: score the detector against WIDER FACE style ground truth (AP, precision, recall by size)."""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np
from rich.table import Table

from ..errors import ImageError
from .common import json_dumps, out, progress_bar
from .detect import detector_options, make_detector
from .options import json_option


@click.command("evaluate")
@click.option("--gt", "gt_file", required=True, type=click.Path(path_type=Path),
              help="WIDER FACE ground-truth file (wider_face_val_bbx_gt.txt format).")
@click.option("--images", "images_dir", required=True, type=click.Path(path_type=Path),
              help="Folder the image names in the ground truth are relative to (WIDER's images/).")
@detector_options
@json_option("instead of tables: the result, one object.")
def command(gt_file, images_dir, model, device, runtime, score, nms, input_size, top_k, max_side, as_json):
    """Run the detector on every image of a WIDER FACE ground-truth file and score it.

    A detection is a true positive when it overlaps a valid face (invalid flag 0) not yet taken by a better-scoring
    detection at IoU >= 0.5; one overlapping only an invalid face is ignored; any other is a false positive.
    AP is the area under the interpolated precision-recall curve (all points, VOC style) over the detections kept
    by --score, so a lower --score (e.g. 0.3) traces more of the curve. Sizes are sqrt(w*h) of the GT box:
    small < 32 px, medium 32-96, large > 96.
    """
    from ..face.evaluate import evaluate, parse_wider_gt
    from ..face.images import load_image

    ground_truth = parse_wider_gt(gt_file)
    if not images_dir.is_dir():
        raise ImageError(f"{images_dir}: no such folder")
    missing = [g.name for g in ground_truth if not (images_dir / g.name).is_file()]
    if missing:
        raise ImageError(f"{len(missing)} of {len(ground_truth)} images of {gt_file} are not under {images_dir} "
                         f"(first: {missing[0]})")
    detector = make_detector(model, device, score, nms, top_k, max_side, runtime, input_size)

    detections = []
    start = time.perf_counter()
    with progress_bar() as progress:
        task = progress.add_task("evaluating", total=len(ground_truth))
        for entry in ground_truth:
            faces = detector.detect(load_image(images_dir / entry.name))
            boxes = np.asarray([f.box for f in faces], dtype=np.float64).reshape(-1, 4)
            detections.append((boxes, np.asarray([f.score for f in faces], dtype=np.float64)))
            progress.advance(task)
    report = evaluate(detections, ground_truth)
    report.update({
        "model": str(detector.model_path),
        "family": detector.family.name,
        "runtime": detector.runtime,
        "device": detector.device,
        "score_threshold": detector.score_threshold,
        "nms_threshold": detector.nms_threshold,
        "max_side": max_side,
        "input_size": list(detector.family.input_size()) if not detector.family.follows_image else None,
        "seconds": round(time.perf_counter() - start, 2),
    })

    if as_json:
        click.echo(json_dumps(report, indent=2))
        return
    table = Table(title=f"{report['images']} images, {report['gt_faces']} valid faces, "
                        f"{report['detections']} detections ({detector.family.title}, score >= "
                        f"{detector.score_threshold:g}, {detector.device}, {report['seconds']:.1f} s)",
                  title_justify="left")
    for name in ("faces", "GT", "AP", "recall", "precision"):
        table.add_column(name, justify="right" if name != "faces" else "left")
    table.add_row("all", str(report["gt_faces"]), f"{report['ap']:.4f}", f"{report['recall']:.4f}",
                  f"{report['precision']:.4f}")
    for bucket, part in report["by_size"].items():
        table.add_row(bucket, str(part["gt_faces"]), f"{part['ap']:.4f}", f"{part['recall']:.4f}", "")
    out.print(table)
    out.print("sizes: sqrt(w*h) of the GT box; small < 32 px, medium 32-96, large > 96; IoU >= 0.5",
                  style="dim")
