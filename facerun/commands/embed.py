"""`facerun embed`: detect, align and embed faces; write the vectors as .npy (+ .jsonl index) or .jsonl."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click
import numpy as np
from rich.table import Table
from rich.text import Text

from ..errors import FacerunError, InputError
from ..io import check_output_file, jsonl_writer, npy_writer, write_together
from .common import (
    err,
    error_line,
    finish,
    fmt_box,
    json_dumps,
    models_dir_option,
    out,
    path_column,
    plural,
    progress_bar,
    short_paths,
)
from .engine import detector_device, embed_on_ray, engine_options, local_options, local_processes, ray_settings
from .options import (
    batch_option,
    box_cells,
    csv_option,
    detector_option,
    device_option,
    embedder_option,
    json_option,
    one_output,
    print_csv,
    size_option,
)

OUT_KINDS = (".npy", ".jsonl")


def embedder_options(function):
    """Options shared by `embed` and `compare`: the embedder, its pre-processing, the detector and the device."""
    options = [
        embedder_option(),
        models_dir_option(),
        device_option(),
        detector_option(),
        size_option("input_size", old=("--input-size",),
                    detail="the embedder's, for one facerun does not know (e.g. 112x112)."),
        click.option("--mean", default=None, metavar="M|R,G,B",
                     help="... its mean on the 0..255 scale (one value or one per channel), e.g. 127.5."),
        click.option("--std", default=None, metavar="S|R,G,B",
                     help="... and its std: the model gets (pixel - mean) / std, e.g. 127.5."),
        click.option("--bgr/--rgb", "bgr", default=None,
                     help="... and its channel order (default RGB). These four override a known model's values; "
                          "a JSON file <model>.json next to the model ({\"input_size\": [112, 112], \"mean\": 127.5, "
                          "\"std\": 127.5, \"bgr\": false}) works too."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def make_embedder(model, device, input_size, mean, std, bgr, threshold=None, precision="f32"):
    from ..face.embed import Embedder

    return Embedder(model=model, device=device, input_size=input_size, mean=mean, std=std, bgr=bgr,
                    threshold=threshold, precision=precision)


def make_detector(detector_model, device):
    from ..face.detect import Detector

    return Detector(model=detector_model, device=device, for_alignment=True)


@click.command("embed")
@click.argument("images", nargs=-1, required=True, type=click.Path())  # str: a URI keeps its "//"
@embedder_options
@batch_option(16, "faces (on the GPU: one submission per batch).")
@click.option("--all-faces", is_flag=True, help="Embed every face found, not only the largest of each image.")
@click.option("--precision", type=click.Choice(["f32", "f16"]), default="f32", show_default=True,
              help="f16: the GPU stores Winograd's planes (the 3x3 layers of IResNets such as AuraFace) as half "
                   "floats, sums in float32; used only after its check against the CPU (cosine 0.9995).")
@click.option("--out", "out_path", type=click.Path(path_type=Path), metavar="FILE",
              help="The file to write: the vectors, x.npy (N x dim float32, plus the index x.jsonl beside it: "
                   "image, box, score, model, row) or x.jsonl (one face per line, the embedding included).")
@json_option("instead of tables: the faces and their embeddings, one array (with --engine ray: the run's "
             "summary).")
@csv_option("instead of the faces' table: image,face,score,x,y,w,h, one row per face (the vectors: --out).")
@engine_options
def command(images, model, device, detector_model, input_size, mean, std, bgr, batch, all_faces, precision, out_path,
            as_json, as_csv, engine, ray_address, workers, gpus_per_worker, processes):
    """Embed the faces in IMAGE files or folders (folders are searched recursively for images).

    Each image's largest face (or, with --all-faces, every face) is found by the detector, aligned to the ArcFace
    112x112 five-point template and embedded; vectors are L2-normalised, so a dot product is the cosine
    similarity. An image with no face is reported and skipped; an unreadable file is reported, the rest go on and
    the exit status is 1. Output files are written whole or not at all.

    With --engine ray the photos run on a Ray cluster (or a local Ray instance) and --out names a Parquet folder
    (x.parquet): one row per face, plus one per photo without a face or unreadable (the `error` column).
    """
    from ..face.embed import FaceEmbedding, Timing
    from ..face.engines import run
    from ..face.images import iter_images
    from ..face.library import LibraryStats

    models = {"model": model, "detector": detector_model, "device": device, "input_size": input_size, "mean": mean,
              "std": std, "bgr": bgr}
    one_output(as_json, as_csv)
    if engine == "ray":
        local_processes(engine, processes, device)  # refuses a count of processes beside it
    if precision != "f32" and (engine != "local" or device == "cpu"):
        raise InputError(f"--precision {precision} is for the local GPU (--device auto or gpu, --engine local)")
    settings = ray_settings(engine, ray_address, workers, gpus_per_worker, batch=batch, all_faces=all_faces,
                            models=models)
    if settings is not None:
        if as_csv:
            raise InputError("--csv is for --engine local (with --engine ray the faces go to --out, a Parquet folder)")
        embed_on_ray(images, settings, out_path, as_json)
        return
    outputs = _plan_outputs(out_path) if out_path is not None else None
    paths = iter_images(images)
    if not paths:
        raise InputError(f"no images found in {', '.join(str(p) for p in images)}")
    processes = local_processes(engine, processes, device, len(paths))
    embedder = make_embedder(model, device, input_size, mean, std, bgr, precision=precision)
    detector = make_detector(detector_model, detector_device(processes, device))  # processes make their own
    options = local_options(processes, detector, device, batch=batch, all_faces=all_faces)

    if embedder.note:
        err.print(f"note: {embedder.note}", markup=False)
    failed: list[str] = []
    faceless: list[str] = []
    timing = Timing()
    progress = progress_bar() if len(paths) > 1 else None
    with progress if progress is not None else contextlib.nullcontext():
        task = progress.add_task("embedding", total=len(paths)) if progress is not None else None
        say = progress.console if progress is not None else err

        records = []
        # the library run: decoding on worker threads, faces batched across photos for the embedder
        stats = LibraryStats()
        for photo in run(paths, detector, embedder, options, stats=stats):
            label = str(photo.path)
            if photo.error is not None:
                failed.append(label)
                error_line(photo.error, say)
            elif not photo.faces:
                faceless.append(label)
                say.print(f"no face: {label}", markup=False)
            else:
                timing.images += 1
            for face, vector in zip(photo.faces, photo.embeddings):
                records.append(FaceEmbedding(image=label, box=tuple(float(v) for v in face.box),
                                             score=float(face.score), embedding=vector,
                                             landmarks=np.asarray(face.landmarks)))
            if progress is not None:
                progress.advance(task)
        timing.images += len(faceless)
        timing.faces = len(records)
        timing.load_s, timing.detect_s = stats.seconds["decode"], stats.seconds["detect"] + stats.seconds["post"]
        timing.align_s, timing.embed_s = stats.seconds["align"], stats.seconds["embed"]

    written = None
    if outputs is not None and timing.images > 0:
        written = _write(outputs, records, embedder)
    if as_json:
        click.echo(json_dumps([r.to_dict(model=embedder.name) for r in records], indent=2))
    elif as_csv:
        print_csv(["image", "face", "score", "x", "y", "w", "h"],
                  ([r.image, face, f"{r.score:.4f}", *box_cells(r.box)] for r, face in _numbered(records)))
    elif outputs is None:
        out.print(_faces_table(records))
    summary_console = err if as_json or as_csv else out
    summary_console.print(_summary(timing, len(paths), len(faceless), len(failed), embedder, detector, batch))
    if written:
        summary_console.print("wrote " + " and ".join(str(p) for p in written), markup=False)
    elif outputs is not None:
        summary_console.print(f"nothing written to {outputs[0]}: no image could be read", markup=False)
    if failed:
        finish(False)


# -------------------------------------------------------------------------------------------------- output


def _plan_outputs(out_path: Path) -> list[Path]:
    """Check --out before any work: a known suffix, an existing folder, not a folder itself."""
    suffix = out_path.suffix.lower()
    if suffix not in OUT_KINDS:
        raise InputError(f"--out {out_path}: use a .npy file (vectors, plus a .jsonl index beside it) or a .jsonl "
                         "file (a .parquet folder with --engine ray)")
    check_output_file(out_path, "--out")
    if suffix == ".npy":
        index = out_path.with_suffix(".jsonl")
        if index.exists() and not out_path.exists():
            # an x.jsonl with no x.npy is not an earlier run's index: someone's file, which --out x.npy did not name
            raise InputError(f"--out {out_path} writes its index to {index}, which exists without an {out_path.name} "
                             "beside it; move it or choose another name")
        check_output_file(index, "--out's index")
        return [out_path, index]
    return [out_path]


def _write(outputs: list[Path], records, embedder) -> list[Path]:
    """Write the vectors (and their index) together: a failure leaves the old files or nothing, never a part."""
    model = embedder.name
    if outputs[0].suffix.lower() == ".npy":
        dim = records[0].embedding.size if records else embedder.dim
        vectors = np.stack([r.embedding for r in records]) if records else np.zeros((0, dim))
        index = [{**r.to_dict(model=model, with_embedding=False), "row": row} for row, r in enumerate(records)]
        writers = [npy_writer(vectors.astype(np.float32)), jsonl_writer(index)]
    else:
        writers = [jsonl_writer([r.to_dict(model=model) for r in records])]
    return write_together(list(zip(outputs, writers)), error=FacerunError)


def _numbered(records):
    """(record, its face's number within its photo, from 1)."""
    count: dict[str, int] = {}
    for r in records:
        count[r.image] = count.get(r.image, 0) + 1
        yield r, count[r.image]


def _faces_table(records) -> Table | Text:
    if not records:
        return Text("no faces embedded")
    root, names = short_paths([r.image for r in records])
    boxes = [fmt_box(r.box) for r in records]
    # the photo's name and the box are what matter; the glimpse of each vector gets the width left over
    # (" +0.123" per value, at least one), so the table fits the terminal instead of cutting the names
    used = min(max(len(n) for n in names), 60) + len("score") + max(max(len(b) for b in boxes), 11) + 13
    shown = max(1, min(4, (out.width - used - len(" ...")) // 7))
    title = plural(len(records), "face") + (f" under {root}" if root else "")
    table = Table(title=title, title_justify="left")
    path_column(table, names)
    for name in ("score", "box x,y,w,h", "embedding"):
        table.add_column(name, justify="right")
    for r, name, box in zip(records, names, boxes):
        table.add_row(name, f"{r.score:.3f}", box, " ".join(f"{v:+.3f}" for v in r.embedding[:shown]) + " ...")
    return table


def _summary(timing, images: int, faceless: int, failed: int, embedder, detector, batch: int) -> Table:
    """Two columns (what, value), so it fits a narrow terminal."""
    per_face = timing.ms_per_face
    devices = embedder.device
    if detector.device != embedder.device:
        devices += f" (detector: {detector.device})"
    rows = [
        ("images", f"{images} ({faceless} without a face, {failed} unreadable)"),
        ("faces embedded", str(timing.faces)),
        ("detect", f"{timing.detect_s * 1000 / timing.images:.1f} ms per image" if timing.images else "-"),
        ("align + embed", f"{per_face:.1f} ms per face ({1000.0 / per_face:.1f} faces/s), batch {batch}"
         if per_face else "-"),
        ("model", f"{embedder.name} ({embedder.dim}-d, {embedder.preprocessing.describe()})"),
        ("device", devices),
    ]
    table = Table(title="summary", title_justify="left", show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column()
    for what, value in rows:
        table.add_row(what, value)
    return table
