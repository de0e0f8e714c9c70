"""One table of option names: each name has one meaning in every command (tests/test_option_names.py holds every
visible option of every command to it, and fails on a name that is not here).

The choices the table records:
- `--detector` is always the face detector and `--embedder` always the embedder, wherever either is chosen (detect
  and evaluate run only a detector, yet say `--detector` too, so one spelling serves everywhere). `--model` is no
  option: a command of one model of any kind (inspect, parity, tune) takes it as the MODEL argument.
- `--size WxH` is one network input size; `--sizes WxH,WxH,...` only where a list is meant (`bench models`).
- `--workers` is decoding threads; Ray's actors are `--actors` (`--gpus-per-actor`); `--processes` is OS processes.
- `--json` and `--csv` print data for scripts, instead of the tables, on stdout.
The old spellings (`--model`, `--input-size`, `--shape`, `--embed`, Ray's `--workers`, `--gpus-per-worker`) still
work for a release: hidden from `--help`, they fill the same parameter (TableOption.old_names).

Each entry's help is the sentence every use of the name opens with; a command may add its own detail after it.
"""

from __future__ import annotations

import contextlib
import csv
import sys
from dataclasses import dataclass

import click

from ..errors import InputError
from .types import AUTO, FiniteRange, ProcessCount


@dataclass(frozen=True)
class Meaning:
    help: str  # the sentence every use of the name opens with
    metavar: str | None = None  # the one metavar of a name that takes a value, where the table fixes it
    flag: bool = False  # a switch, taking no value


def _m(help: str, metavar: str | None = None, flag: bool = False) -> Meaning:
    return Meaning(help, metavar, flag)


# name -> its one meaning; single-use names are here too, so a new option cannot slip past the table
OPTIONS: dict[str, Meaning] = {
    # global (facerun OPTIONS COMMAND)
    "--version": _m("Show the version and exit.", flag=True),
    "--gpu-concurrency": _m("At most this many GPU runs at once"),
    "--gpu-share": _m("Keep the GPU busy at most this share of the time"),
    "--max-tensor-mb": _m("Refuse a model asking for a tensor larger than this", "MB"),
    "--max-pixels": _m("Refuse an image of more pixels than this", "N"),
    "--allow-software": _m("Accept a software GPU adapter", flag=True),
    # the models and where they run
    "--detector": _m("The face detector: a known model's name, a replica's or an .onnx file.", "NAME|PATH"),
    "--embedder": _m("The face embedder: a known model's name, a replica's or an .onnx file.", "NAME|PATH"),
    "--models": _m("Look for model files in DIR first", "DIR"),
    "--device": _m("Where the networks run:"),
    "--runtime": _m("onnxruntime: run the network with onnxruntime on the CPU"),
    "--precision": _m("f16: the GPU stores Winograd's planes"),
    # network inputs
    "--size": _m("The network's input size, width x height:", "WxH"),
    "--sizes": _m("Network input sizes, width x height, comma-separated", "WxH,..."),
    "--batch": _m("Inputs per network call:"),
    "--mean": _m("... its mean on the 0..255 scale", "M|R,G,B"),
    "--std": _m("... and its std", "S|R,G,B"),
    "--bgr": _m("... and its channel order", flag=True),
    "--seed": _m("Seed of the random input."),
    # detection
    "--score": _m("Keep faces scoring at least this."),
    "--nms": _m("Drop a face overlapping a better one by more than this IoU."),
    "--top-k": _m("Candidates kept before NMS"),
    "--max-side": _m("YuNet: shrink photos whose longer side is above N pixels before detecting"),
    "--full-decode": _m("Decode every JPEG at full size.", flag=True),
    "--draw": _m("Write annotated copies", "OUT"),
    "--all-faces": _m("Embed every face found, not only the largest of each image.", flag=True),
    # concurrency
    "--workers": _m("Decoding threads"),
    "--processes": _m("Processes to share the photos out over"),
    "--engine": _m("local: this process"),
    "--ray-address": _m("The Ray cluster to join", "ADDR"),
    "--actors": _m("Ray actors, each holding a detector and an embedder."),
    "--gpus-per-actor": _m("GPUs Ray gives each actor"),
    # matching
    "--threshold": _m("The cosine threshold:"),
    "--known": _m("Known people:"),
    "--known-db": _m("Keep the known gallery's embeddings in this face database"),
    "--top": _m("Photos to list."),
    # the face database
    "--db": _m("The face database"),
    "--commit-every": _m("Photos per transaction"),
    "--wait": _m("Seconds to wait for another process writing the same database before refusing."),
    "--prune": _m("Delete the photos marked missing", flag=True),
    "--allow-missing": _m("Go on when a folder is empty, unreadable or has lost", flag=True),
    "--list-missing": _m("List the photos marked missing", flag=True),
    "--min-size": _m("Fewest faces a cluster may have"),
    "--sheets": _m("Write one contact sheet per cluster here"),
    "--name": _m("Name cluster ID", "ID NAME"),
    "--show": _m("Show the stored clustering instead of clustering again.", flag=True),
    "--all": _m("Cluster every face again from scratch", flag=True),
    "--merge": _m("Merge two clusters or people into one", "A B"),
    "--move": _m("Move this face to the person --to", "FACE_ID"),
    "--to": _m("The person or cluster --move puts the face in", "NAME|ID"),
    "--min-face": _m("Faces smaller than this on their box's shorter side are not named", "PX"),
    "--min-score": _m("Faces the detector scored below this are not named", "S"),
    "--skip-small": _m("Do not store faces below --min-face / --min-score", flag=True),
    "--person": _m("List the photos of the person called NAME", "NAME"),
    # evaluation, inspection, parity, tuning
    "--gt": _m("WIDER FACE ground-truth file"),
    "--images": _m("Folder the image names in the ground truth are relative to"),
    "--all-folded": _m("List every folded node, not only counts.", flag=True),
    "--against": _m("The reference"),
    "--steps": _m("Also find the first step whose value departs beyond tolerance.", flag=True),
    "--repeat": _m("Timed runs"),
    "--all-tiles": _m("Time every tile of the plan's table too", flag=True),
    "--tiles": _m("Tile specs to time too"),
    "--no-convs": _m("Only the whole program.", flag=True),
    "--winograd": _m("The whole program's 3x3 stride-1 convolutions:"),
    # benchmarks
    "--paths": _m("Comma-separated paths to"),
    "--warmup": _m("Untimed runs before timing"),
    "--budget": _m("Seconds per row"),
    "--save": _m("Also write the JSON result here."),
    "--plot": _m("Also draw", "FILE.png|.svg"),
    "--roofline": _m("Show each row's TFLOP/s and GB/s against the device's peaks", flag=True),
    "--by-kernel": _m("Also time the GPU rows' programs kernel family by family", flag=True),
    "--reprobe": _m("Measure the device's peaks again", flag=True),
    # models
    "--url": _m("Download from URL"),
    "--dest": _m("Save into DIR", "DIR"),
    "--timeout": _m("Time allowed for each network operation."),
    "--deadline": _m("Time allowed for the whole download"),
    "--clear": _m("Remove the replica files", flag=True),
    # output
    "--out": _m("The file to write:"),
    "--json": _m("Print JSON", flag=True),
    "--csv": _m("Print CSV", flag=True),
}


class TableOption(click.Option):
    """A click option made from the table: its help opens with the table's sentence, and its old spellings
    (old_names) are accepted but shown nowhere (not in --help, not in error hints)."""

    def __init__(self, param_decls, *, old_names=(), **attrs):
        super().__init__([*param_decls, *old_names], **attrs)
        self.old_names = tuple(old_names)

    @contextlib.contextmanager
    def _new_names_only(self):
        opts = self.opts
        self.opts = [o for o in opts if o not in self.old_names]
        try:
            yield
        finally:
            self.opts = opts

    def get_help_record(self, ctx):
        with self._new_names_only():
            return super().get_help_record(ctx)

    def get_error_hint(self, ctx):
        with self._new_names_only():
            return super().get_error_hint(ctx)


def option(name: str, *decls: str, detail: str = "", old: tuple[str, ...] = (), **attrs):
    """click.option for the table's `name` (e.g. "--size", "--bgr/--rgb"): help is the table's sentence and then
    `detail`; `old` spellings map onto the same parameter, hidden."""
    meaning = OPTIONS[name.split("/")[0]]
    attrs["help"] = f"{meaning.help} {detail}".strip() if detail else meaning.help
    if meaning.metavar and not meaning.flag:
        attrs.setdefault("metavar", meaning.metavar)
    return click.option(name, *decls, cls=TableOption, old_names=old, **attrs)


# ------------------------------------------------------------------------------------------------ shared options

DETECTOR_DETAIL = ("Any family: YuNet, SCRFD, RetinaFace, UltraFace, BlazeFace, YOLOv5-face, told from the graph "
                   "(yunet-2023mar, yunet-2022mar, scrfd-500m, retinaface-mnet025, ultraface-rfb320, "
                   "blazeface-front128, yolov5n-0.5-face). Default: yunet-2023mar.")
ALIGNING_DETAIL = ("It finds and aligns the faces: any family with five landmarks (yunet-2023mar, yunet-2022mar, "
                   "scrfd-500m, retinaface-mnet025, yolov5n-0.5-face, or a file of those families). Default: "
                   "yunet-2023mar.")
EMBEDDER_DETAIL = ("Known: sface-2021dec, auraface-v1, mobilefacenet; replicas: sface-arch, auraface-arch and their "
                   "-small variants. Default: the first of sface-2021dec, auraface-v1, mobilefacenet found in "
                   "--models, $FACERUN_MODELS or the cache folder, else the shipped mobilefacenet.")


def detector_option(dest: str = "detector_model", detail: str = ALIGNING_DETAIL, old: tuple[str, ...] = ()):
    return option("--detector", dest, default=None, detail=detail, old=old)


def embedder_option(dest: str = "model", detail: str = EMBEDDER_DETAIL, old: tuple[str, ...] = ("--model",)):
    return option("--embedder", dest, default=None, detail=detail, old=old)


def size_option(dest: str = "size", detail: str = "", old: tuple[str, ...] = ()):
    return option("--size", dest, default=None, detail=detail, old=old)


def device_option(choices=("auto", "cpu", "gpu"), default: str = "auto",
                  detail: str = "auto: the GPU when one is usable, else the CPU; gpu: fail if there is no GPU."):
    return option("--device", "device", type=click.Choice(list(choices)), default=default, show_default=True,
                  detail=detail)


def batch_option(default: int, detail: str, type=None):
    return option("--batch", "batch", default=default, show_default=True,
                  type=type or click.IntRange(min=1), detail=detail)


def workers_option(detail: str = "(default: the cores but one, at most 8, or 12 feeding a GPU)."):
    return option("--workers", "workers", type=click.IntRange(0, 64), default=None, detail=detail)


PROCESSES_AUTO = ("auto: several where they measured faster than one, on a GPU, for 2000 photos or more "
                  "($FACERUN_PROCESSES_FROM) on 12 cores or more (one per 4 cores, at most 4); else one.")


def processes_option(detail: str):
    return option("--processes", "processes", type=ProcessCount(), default=AUTO, show_default=True,
                  detail=f"{detail} {PROCESSES_AUTO}")


def actors_option():
    return option("--actors", "workers", type=click.IntRange(min=1), default=None, old=("--workers",),
                  detail="Default: one per GPU share (cluster GPUs / --gpus-per-actor), else 1.")


def gpus_per_actor_option():
    return option("--gpus-per-actor", "gpus_per_worker", type=FiniteRange(min=0), default=0.0, show_default=True,
                  old=("--gpus-per-worker",),
                  detail="(0.5: two actors share one); each actor then uses the wgpu adapter of its GPU, falling "
                         "back to the CPU with the reason when it cannot.")


def json_option(detail: str = "instead of tables."):
    return option("--json", "as_json", is_flag=True, detail=detail)


def csv_option(detail: str):
    return option("--csv", "as_csv", is_flag=True, detail=detail)


# ------------------------------------------------------------------------------------------------ --csv output


def one_output(as_json: bool, as_csv: bool) -> None:
    if as_json and as_csv:
        raise InputError("choose one of --json and --csv")


def print_csv(header: list[str], rows) -> None:
    """The rows as CSV on stdout, a header first (file names as facerun.fsnames.shown writes them)."""
    from ..fsnames import shown

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([shown(v) if isinstance(v, str) else v for v in row])


def box_cells(box) -> list[str]:
    """x, y, w, h to a hundredth of a pixel, as CSV cells."""
    return [f"{float(v):.2f}" for v in box]
