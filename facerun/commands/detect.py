"""`facerun detect`: find faces in photos with YuNet (same faces as OpenCV's cv2.FaceDetectorYN)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import FacerunError, ImageError, InputError
from ..face.detect import DEFAULT_MAX_SIDE, Detector
from ..io import atomic_write, check_output_file, check_output_folder
from .common import err, error_line, finish, json_dumps, out, progress_bar
from .types import FiniteRange

DRAW_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".bmp": "BMP"}


def detector_options(function):
    """The options every command that runs the detector shares (detect, evaluate)."""
    options = [
        click.option("--model", default=None, metavar="PATH|NAME",
                     help="YuNet .onnx file or known model name (yunet-2023mar, yunet-2022mar). "
                          "Default: yunet-2023mar, looked up in $FACERUN_MODELS and the cache folder."),
        click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
                     help="auto: the GPU when one is usable, else the CPU; gpu: fail if there is no GPU."),
        click.option("--score", type=FiniteRange(0, 1), default=0.6, show_default=True,
                     help="Keep faces scoring at least this."),
        click.option("--nms", type=FiniteRange(0, 1), default=0.3, show_default=True,
                     help="Drop a face overlapping a better one by more than this IoU."),
        click.option("--top-k", type=int, default=5000, show_default=True,
                     help="Candidates kept before NMS (0 or less: all)."),
        click.option("--max-side", type=click.IntRange(min=0), default=DEFAULT_MAX_SIDE, show_default=True,
                     help="Shrink photos whose longer side is above N pixels before detecting; 0 keeps full size. "
                          "YuNet's boxes grow from stride-32 anchors by exp(size) and it was trained on 640x640 "
                          "crops, so a face filling a big photo (taller than ~500 px) is missed at full size; "
                          "results are always in the original photo's pixels."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def make_detector(model, device, score, nms, top_k, max_side) -> Detector:
    return Detector(model=model, device=device, score=score, nms=nms, top_k=top_k, max_side=max_side)


@click.command("detect")
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@detector_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array (an object per image) instead of tables.")
@click.option("--draw", "draw_to", type=click.Path(path_type=Path), metavar="OUT",
              help="Write annotated copies: to the file OUT for one image, else into the folder OUT (as PNG).")
def command(images, model, device, score, nms, top_k, max_side, as_json, draw_to):
    """Find faces in IMAGE files or folders (searched recursively for .jpg .jpeg .png .webp .bmp).

    For each face: the score, the box (x y = top-left corner, w h) and five landmarks (right eye, left eye, nose
    tip, right and left mouth corner, as seen from the subject), in the original photo's pixel coordinates.
    A file that cannot be read is reported and skipped; the exit status is then 1. No face is not an error.
    """
    from ..face.images import iter_images, load_image

    paths = iter_images(images)
    if not paths:
        raise InputError(f"no images found in {', '.join(str(p) for p in images)}")
    draw_target = _draw_target(draw_to, len(paths)) if draw_to else None
    detector = make_detector(model, device, score, nms, top_k, max_side)

    failed = False
    results = []
    used_names: set[str] = set()
    progress = progress_bar() if len(paths) > 1 else None
    # with the bar live on a terminal, tables go through the bar's console so they print above it
    tables = progress.console if progress is not None and out.is_terminal and err.is_terminal else out
    with progress if progress is not None else contextlib.nullcontext():
        task = progress.add_task("detecting", total=len(paths)) if progress is not None else None
        for path in paths:
            try:
                rgb = load_image(path)
                start = time.perf_counter()
                faces = detector.detect(rgb)
                ms = (time.perf_counter() - start) * 1000.0
                result = {
                    "image": str(path),
                    "width": int(rgb.shape[1]),
                    "height": int(rgb.shape[0]),
                    "faces": [face.to_dict() for face in faces],
                    "device": detector.device,
                    "ms": round(ms, 1),
                }
                if draw_target is not None:
                    _write_drawing(rgb, faces, _draw_path(draw_target, path, used_names))
                if as_json:
                    results.append(result)
                else:
                    tables.print(_table(result))
            except FacerunError as e:
                failed = True
                error_line(e, progress.console if progress is not None else err)
            if progress is not None:
                progress.advance(task)

    if as_json:
        click.echo(json_dumps(results, indent=2))
    if failed:
        finish(False)


def _table(result: dict):
    faces = result["faces"]
    title = (f"{result['image']}  {result['width']}x{result['height']}  "
             f"{len(faces)} face{'s' if len(faces) != 1 else ''}  {result['ms']:.0f} ms ({result['device']})")
    if not faces:
        return Text(title)
    table = Table(title=Text(title), title_justify="left")
    for name in ("#", "score", "x", "y", "w", "h"):
        table.add_column(name, justify="right")
    table.add_column("landmarks: eye R, eye L, nose, mouth R, mouth L")
    for i, face in enumerate(faces, 1):
        marks = "  ".join(f"({x:.0f},{y:.0f})" for x, y in face["landmarks"])
        table.add_row(str(i), f"{face['score']:.3f}", *(f"{v:.1f}" for v in face["box"]), marks)
    return table


# ---------------------------------------------------------------------------------------------------- drawing


def _draw_target(draw_to: Path, count: int) -> Path:
    """Check --draw before any work, so a bad target fails at once and nothing is half-written."""
    if count > 1 or draw_to.is_dir():
        if draw_to.exists() and not draw_to.is_dir():
            raise InputError(f"--draw {draw_to}: several images need a folder, and this is a file")
        if not draw_to.exists() and draw_to.suffix.lower() in DRAW_FORMATS:
            raise InputError(f"--draw {draw_to} names one image, but {count} images were given; "
                             "give a folder for their drawings")
        return check_output_folder(draw_to, "--draw")
    if draw_to.suffix.lower() not in DRAW_FORMATS:
        raise InputError(f"--draw {draw_to}: unknown image type '{draw_to.suffix}' "
                         f"(use {', '.join(DRAW_FORMATS)})")
    return check_output_file(draw_to, "--draw")


def _draw_path(target: Path, image: Path, used: set[str]) -> Path:
    if not target.is_dir():
        return target
    stem, n = image.stem, 1
    name = f"{stem}.png"
    while name in used:  # two photos with one name from different folders
        n += 1
        name = f"{stem}-{n}.png"
    used.add(name)
    return target / name


def _write_drawing(rgb, faces, path: Path) -> None:
    from ..face.draw import draw_faces

    picture = draw_faces(rgb, faces)
    if picture.mode != "RGB":
        picture = picture.convert("RGB")
    image_format = DRAW_FORMATS.get(path.suffix.lower(), "PNG")
    atomic_write(path, lambda handle: picture.save(handle, format=image_format), error=ImageError)
