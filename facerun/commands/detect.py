"""`facerun detect`: find faces in photos with any detector family (YuNet: the faces cv2.FaceDetectorYN finds)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import FacerunError, ImageError, InputError
from ..face.detect import DEFAULT_MAX_SIDE, Detector
from ..io import atomic_write, check_output_file, check_output_folder
from .common import (
    err,
    error_line,
    finish,
    json_dumps,
    models_dir_option,
    out,
    parse_size,
    plural,
    progress_bar,
    short_paths,
)
from .engine import detector_device, local_processes
from .options import (
    DETECTOR_DETAIL,
    box_cells,
    csv_option,
    detector_option,
    device_option,
    json_option,
    one_output,
    print_csv,
    processes_option,
    size_option,
)
from .types import AUTO, FiniteRange

DRAW_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".bmp": "BMP"}


def detector_options(function):
    """The options every command that runs the detector shares (detect, evaluate)."""
    options = [
        detector_option("model", old=("--model",),
                        detail=DETECTOR_DETAIL + " Looked up in --models, $FACERUN_MODELS, the cache folder, then the "
                                                 "copy shipped with facerun."),
        models_dir_option(),
        device_option(),
        click.option("--runtime", type=click.Choice(["facerun", "onnxruntime"]), default="facerun",
                     show_default=True,
                     help="onnxruntime: run the network with onnxruntime on the CPU (the reference oracle, needs "
                          "facerun[oracles]); for comparisons, and for models using operators facerun does not run "
                          "yet. Pre-processing and decoding are facerun's either way."),
        click.option("--score", type=FiniteRange(0, 1), default=None,
                     help="Keep faces scoring at least this. Default: the family's own (YuNet 0.6, SCRFD 0.5, "
                          "RetinaFace 0.6, UltraFace 0.7, BlazeFace 0.75, YOLOv5-face 0.6)."),
        click.option("--nms", type=FiniteRange(0, 1), default=None,
                     help="Drop a face overlapping a better one by more than this IoU. Default: the family's own "
                          "(YuNet 0.3, SCRFD 0.4, RetinaFace 0.4, UltraFace 0.3, BlazeFace 0.3, YOLOv5-face 0.5)."),
        size_option("input_size", old=("--input-size",),
                    detail="for a file that leaves it free (SCRFD: 640x640 by default, as insightface "
                           "runs it); the photo is fitted into it. Files fixed at one size take only that."),
        click.option("--top-k", type=int, default=5000, show_default=True,
                     help="Candidates kept before NMS (0 or less: all)."),
        click.option("--max-side", type=click.IntRange(min=0), default=DEFAULT_MAX_SIDE, show_default=True,
                     help="YuNet: shrink photos whose longer side is above N pixels before detecting; 0 keeps full "
                          "size. YuNet runs on the photo at its own size; its boxes grow from stride-32 anchors by "
                          "exp(size) and it was trained on 640x640 crops, so a face filling a big photo (taller "
                          "than ~500 px) is missed at full size. The other families resize every photo into their "
                          "network's input. Results are always in the original photo's pixels."),
    ]
    for decorate in reversed(options):
        function = decorate(function)
    return function


def make_detector(model, device, score, nms, top_k, max_side, runtime="facerun", input_size=None) -> Detector:
    return Detector(model=model, device=device, score=score, nms=nms, top_k=top_k, max_side=max_side,
                    runtime=runtime, input_size=parse_size(input_size, "--size"))


@click.command("detect")
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@detector_options
@json_option("instead of tables: one array, an object per image.")
@csv_option("instead of tables: image,face,score,x,y,w,h, one row per face (none for a photo without).")
@click.option("--draw", "draw_to", type=click.Path(path_type=Path), metavar="OUT",
              help="Write annotated copies: to the file OUT for one image, else into the folder OUT (as PNG).")
@processes_option("(N), each with its own Python, device queue and check of the GPU: one process is bound by "
                  "Python's GIL (some 300-450 photos/s on a fast GPU). Each process takes a second or more to "
                  "start, so this pays on libraries of thousands of photos, on 12 or more cores.")
@click.option("--full-decode", is_flag=True,
              help="Decode every JPEG at full size. By default, when only the faces are wanted (no --draw), a JPEG "
                   "at least twice the size YuNet shrinks it to (--max-side) is decoded scaled down by 1/2 to 1/8 in "
                   "the decoder, never below that size: a camera photo decodes in a fraction of the time, and its "
                   "faces move by a fraction of a pixel.")
def command(images, model, device, runtime, score, nms, input_size, top_k, max_side, as_json, as_csv, draw_to,
            processes, full_decode):
    """Find faces in IMAGE files or folders (searched recursively for .jpg .jpeg .png .webp .bmp).

    For each face: the score, the box (x y = top-left corner, w h) and the family's landmarks, in the original
    photo's pixel coordinates: five (right eye, left eye, nose tip, right and left mouth corner, as seen from the
    subject) for YuNet, SCRFD, RetinaFace and YOLOv5-face; six for BlazeFace (eyes, nose tip, mouth centre, ears);
    none for UltraFace.
    A file that cannot be read is reported and skipped; the exit status is then 1. No face is not an error.
    """
    from ..face.engines import run
    from ..face.images import iter_images, load_image
    from ..face.library import LibraryOptions

    one_output(as_json, as_csv)
    paths = iter_images(images)
    if not paths:
        raise InputError(f"no images found in {', '.join(str(p) for p in images)}")
    draw_target = _draw_target(draw_to, len(paths)) if draw_to else None
    # the processes' fork server (where they may run) loads while this process loads its detector
    processes = local_processes("local", processes, device, len(paths))
    # with processes, this one names the family and checks the options, and runs photos while they start
    # (FACERUN_PARENT_RUNS; else it stays on the CPU: the network runs in them)
    detector = make_detector(model, detector_device(processes, device), score, nms, top_k, max_side, runtime,
                             input_size)
    options = LibraryOptions(keep_images=draw_target is not None, draft=not full_decode)
    if processes != 1:  # each process makes its detector of these arguments; a drawing decodes its photo again here
        arguments = {"model": str(detector.model_path), "device": device, "score": score, "nms": nms, "top_k": top_k,
                     "max_side": max_side, "runtime": runtime, "input_size": parse_size(input_size, "--size")}
        many = {"engine": "auto"} if processes == AUTO else {"engine": "processes", "processes": processes}
        options = LibraryOptions(keep_images=draw_target is not None, draft=not full_decode, detector_args=arguments,
                                 **many)
    photos = run(paths, detector, None, options)

    failed = False
    results = []
    used_names: set[str] = set()
    drawn = 0
    root, names = short_paths(paths)
    label = dict(zip((str(p) for p in paths), names))
    if root and not (as_json or as_csv) and len(paths) > 1:
        out.print(f"photos under {root}", markup=False, highlight=False)
    progress = progress_bar() if len(paths) > 1 else None
    # with the bar live on a terminal, tables go through the bar's console so they print above it
    tables = progress.console if progress is not None and out.is_terminal and err.is_terminal else out
    with progress if progress is not None else contextlib.nullcontext():
        task = progress.add_task("detecting", total=len(paths)) if progress is not None else None
        # the library run: photos decoded on worker threads while the network works on the one before
        for photo in photos:
            try:
                if photo.error is not None:
                    raise ImageError(photo.error)
                result = {
                    "image": str(photo.path),
                    "width": photo.width,
                    "height": photo.height,
                    "faces": [face.to_dict() for face in photo.faces],
                    "family": detector.family.name,
                    "device": photo.device or detector.device,
                    "ms": round(photo.detect_ms, 1),
                }
                if draw_target is not None:
                    if photo.image is None:  # decoded in another process: again here, to draw on
                        photo.image = load_image(photo.path)
                    _write_drawing(photo.image, photo.faces, _draw_path(draw_target, photo.path, used_names))
                    photo.image = None
                    drawn += 1
                if as_json or as_csv:
                    results.append(result)
                else:
                    shown = label.get(result["image"], result["image"]) if len(paths) > 1 else result["image"]
                    tables.print(_table(result, detector.family.landmark_names, shown))
            except FacerunError as e:
                failed = True
                error_line(e, progress.console if progress is not None else err)
            if progress is not None:
                progress.advance(task)

    if as_json:
        click.echo(json_dumps(results, indent=2))
    elif as_csv:
        print_csv(["image", "face", "score", "x", "y", "w", "h"],
                  ([r["image"], i, f"{face['score']:.4f}", *box_cells(face["box"])]
                   for r in results for i, face in enumerate(r["faces"], 1)))
    if draw_target is not None:
        what = f"{plural(drawn, 'drawing')} into {draw_target}{os.sep}" if draw_target.is_dir() else \
            f"the drawing to {draw_target}" if drawn else f"no drawing to {draw_target}"
        err.print(f"wrote {what}", markup=False, highlight=False)
    if failed:
        finish(False)


def _table(result: dict, landmark_names: tuple[str, ...], shown: str):
    faces = result["faces"]
    title = (f"{shown}  {result['width']}x{result['height']}  "
             f"{plural(len(faces), 'face')}  {result['ms']:.0f} ms ({result['family']}, "
             f"{result['device']})")
    if not faces:
        return Text(title)
    table = Table(title=Text(title), title_justify="left")
    for name in ("#", "score", "x", "y", "w", "h"):
        table.add_column(name, justify="right")
    if landmark_names:
        table.add_column("landmarks: " + ", ".join(landmark_names))
    for i, face in enumerate(faces, 1):
        marks = "  ".join(f"({x:.0f},{y:.0f})" for x, y in face["landmarks"] or ())
        cells = [str(i), f"{face['score']:.3f}", *(_tenths(v) for v in face["box"])]
        table.add_row(*cells, *([marks] if landmark_names else []))
    return table


def _tenths(v: float) -> str:
    """A box edge to a tenth of a pixel; an edge a hair left of the photo is 0.0, not -0.0."""
    text = f"{v:.1f}"
    return "0.0" if text == "-0.0" else text


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
