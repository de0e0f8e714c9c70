"""`facerun bench photos DIR`: the library benchmark's table and where its time goes."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from ..bench.paths import PHOTO_PATHS, split
from .bench_table import print_table
from .common import allow_software_option, err, models_dir_option, out, print_json
from .options import batch_option, detector_option, embedder_option, json_option, option, workers_option

DEFAULT_PATHS = ",".join(name for name, p in PHOTO_PATHS.items() if p.default)
PATHS_HELP = ("Comma-separated paths to run, from: "
              + "; ".join(f"{name} ({p.help})" for name, p in PHOTO_PATHS.items()) + ".")


@click.command("photos", short_help="The library run over a folder of photos, path by path.")
@click.argument("folder", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--paths", "paths_text", default=DEFAULT_PATHS, show_default=True, help=PATHS_HELP)
@detector_option("detector_model", old=("--model",), detail="A YuNet one (default yunet-2023mar).")
@embedder_option("embed_model", old=("--embed",),
                 detail="With one, every face is also aligned and embedded, --batch faces per call: each facerun "
                        "path gives a second row, PATH+embed.")
@batch_option(16, "faces per embedding call (with --embedder).", type=click.IntRange(1, 4096))
@workers_option("(default: the cores but one, at most 8, or 12 feeding a GPU); also opencv-threads' threads "
                "(default: the cores).")
@option("--processes", "processes", type=click.IntRange(1, 64), default=4, show_default=True,
        detail="on the *-processes paths.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Timed runs of each row: photos/s and faces/s become their medians, with the spread of photos/s "
                   "(min–max under 5 runs, else p10–p90); the other figures are the median run's.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.png|.svg",
              help="Also draw photos/s per path as a chart (needs facerun[plot]).")
@models_dir_option()
@allow_software_option(hidden=True)
@json_option("instead of tables: every field.")
def command(folder, paths_text, detector_model, embed_model, batch, workers, processes, repeat, plot_file,
            allow_software, as_json):
    """Detect (and with --embedder, embed) every photo of DIR (searched recursively) on each path, a row per path.

    Columns: photos/s and faces/s over the row's wall time, the first photo's ms (after the models are loaded and
    the device created), faces, distinct network input sizes, GPU checks (CPU agreement runs), step programs
    compiled, busy seconds by stage summed over the threads doing it (decode, compile, detect, post, align, embed)
    and the wall time, and whether the faces are the cpu row's, photo by photo (the same count, each face at IoU >=
    0.95 and score within 1e-3). Under the table each row says where its time goes. A GPU or OpenCV path that cannot
    run here says why. `--json` gives every field (docs/benchmarks.md).

    The old spelling `facerun bench --photos DIR [options]` runs this too."""
    run_photos(folder, split(paths_text), detector_model, embed_model, batch, workers, as_json, processes, repeat,
               plot_file)


def run_photos(folder: Path, paths: tuple[str, ...], detector_model, embed_model, batch: int, workers,
               as_json: bool, processes: int = 4, repeat: int = 1, plot_file: Path | None = None) -> None:
    from ..bench.photos import bench_photos

    if plot_file is not None:
        from ..bench import plot

        plot.check_target(plot_file)
    with err.status("") as status:

        def on_row(path):
            status.update(f"running {path} over {folder}")

        result = bench_photos(folder, paths, detector_model, embed_model, batch, workers, on_row=on_row,
                              processes=processes, repeat=repeat)
    if plot_file is not None:
        from .bench_plot import written

        written(plot.save(plot.photos_figure(result), plot_file))
    if as_json:
        print_json(result)
        return
    print_photos(result)


def _num(v, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _checks(r: dict) -> str:
    """The row's GPU checks run, and those an earlier process kept (taken instead of run)."""
    kept = r.get("gpu_checks_kept") or 0
    return f"{r['gpu_checks']} ({kept} kept)" if kept else str(r["gpu_checks"])


def _rate(r: dict) -> str:
    """photos/s, with its spread over the runs where there were several: `102.7 (98.1–105.0 min–max)`."""
    if r.get("runs", 1) > 1 and r.get("photos_per_s_low") is not None:
        return f"{_num(r['photos_per_s'])} ({_num(r['photos_per_s_low'])}–{_num(r['photos_per_s_high'])} " \
               f"{r['spread']})"
    return _num(r["photos_per_s"])


def phases_line(seconds: dict, photos: int) -> str:
    """The feeding thread's ms a photo by phase (facerun.phases), the phases it spent no time in left out."""
    per = {k: v * 1000.0 / photos for k, v in seconds["phases"].items()}
    shown = ", ".join(f"{k} {v:.2f}" for k, v in per.items() if v >= 0.005)
    line = f"feeding thread {seconds['feeding'] * 1000.0 / photos:.2f} ms a photo: {shown}"
    waits = {k: v * 1000.0 / photos for k, v in (seconds.get("waiting") or {}).items()}
    if any(v >= 0.005 for v in waits.values()):
        line += "; waiting on " + ", ".join(f"{k} {v:.2f}" for k, v in waits.items() if v >= 0.005)
    return line


def print_photos(result: dict) -> None:
    repeat = result.get("repeat", 1)
    title = (f"{result['photos']} photos in {result['photos_dir']}: {result['detector']}"
             + (f" + {result['embedder']} (batch {result['batch']})" if result["embedder"] else "")
             + f", {result['workers']} decoding threads"
             + (f"; {repeat} runs per row: photos/s and faces/s their medians, photos/s with its spread"
                if repeat > 1 else ""))
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("path", "photos/s", "vs decode", "faces/s", "first ms", "faces", "sizes", "checks", "programs",
                 "decode s", "compile s", "detect s", "post s", "align s", "embed s", "total s", "same as cpu"):
        table.add_column(name, justify="left" if name in ("path", "same as cpu") else "right")
    notes = []
    for r in result["rows"]:
        if r["skipped"] and not r["photos"]:
            table.add_row(r["path"], *["—"] * 15, "skipped")
            notes.append(f"{r['path']}: skipped: {r['skipped']}")
            continue
        s = r["seconds"]
        agree = r["agree_with_cpu"]
        same = "reference" if agree is None else ("yes" if agree["same"] else
                                                  f"no: {agree['photos_differing']} photos differ")
        if r.get("floor"):
            same = "decode only"
        table.add_row(r["path"], _rate(r), _num(r.get("vs_decode"), 2), _num(r["faces_per_s"]),
                      _num(r["first_photo_ms"], 0),
                      str(r["faces"]), str(r["distinct_sizes"]), _checks(r), str(r["programs_compiled"]),
                      *(_num(s.get(k), 2) for k in ("decode", "compile", "detect", "post", "align", "embed", "total")),
                      same)
        notes.append(f"{r['path']} ({r['device']}): {r['bottleneck']}")
        if r.get("after_first_per_s") and not r.get("floor"):
            notes.append(f"{r['path']}: {r['after_first_per_s']:.1f} photos/s from its first photo on")
        if s.get("phases") and r["photos"]:
            notes.append(f"{r['path']}: {phases_line(s, r['photos'])}")
        if r["skipped"]:
            notes.append(f"{r['path']}: {r['skipped']}")
    print_table(table)
    for line in notes:
        out.print(line, markup=False)
    out.print("stage seconds are busy time summed over the threads doing the stage; total is the wall time",
              markup=False)
