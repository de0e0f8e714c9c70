"""`facerun bench models [MODEL ...]`: time every path (CPU interpreter, GPU, onnxruntime) and check each against the
CPU. What a bare `facerun bench [MODEL ...]` runs; it also takes the old spellings --photos, --search and --compare."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from ..bench import bench
from ..bench import roofline as roof
from ..bench.paths import MODEL_PATHS, split
from ..errors import InputError
from ..io import check_output_file
from . import bench_compare, bench_photos, bench_plot, bench_search
from .bench_table import FAIL_MARK, faster_or_slower, ms, print_kernels, print_table, rate, tolerance_text
from .common import (
    allow_software_option,
    err,
    finish,
    models_dir_option,
    out,
    parse_size,
    print_json,
    progress_bar,
)
from .options import batch_option, json_option, option
from .types import FiniteRange

BUSY_WARNING = 0.25  # warn when other work used more than this share of the CPUs just before the run

OLD_SPELLINGS = """\b
The old spellings, still accepted (scripts use them):
  facerun bench --photos DIR [options]   = facerun bench photos DIR [options]
  facerun bench --search [N,N,...]       = facerun bench search [N,N,...]
  facerun bench --compare A.json B.json  = facerun bench compare A.json B.json"""


@click.command("models", short_help="Time models path by path, with parity (the default).", epilog=OLD_SPELLINGS)
@click.argument("models", nargs=-1)
@models_dir_option(expose=True, help="Look for model files in DIR first (MODEL names too), and benchmark every .onnx "
                                    "file in it (recognised by sha256, else by graph shape).")
@option("--sizes", "sizes", default="640x640", show_default=True,
        detail="of the detectors (YuNet: multiples of 32); embedders run at their own size.")
@batch_option(16, "those of the *-batch paths, the times reported per face.", type=click.IntRange(1, 4096))
@click.option("--repeat", default=10, show_default=True, type=click.IntRange(1, 100_000),
              help="Timed runs per row (at most; see --budget).")
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 1000),
              help="Untimed runs before timing (the GPU compiles and checks its program here).")
@click.option("--budget", default=20.0, show_default=True, type=FiniteRange(0),
              help="Seconds per row, warm-up included; a row stops early once spent, after at least 3 timed runs.")
@click.option("--paths", "paths_text", default=None, metavar="TEXT",
              help=f"Comma-separated paths to time (default: {','.join(bench.DEFAULT_PATHS)}; the batch paths run "
                   f"for detectors only when named here), from: {', '.join(MODEL_PATHS)}.")
@allow_software_option(hidden=True)
@json_option("instead of tables: the result.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), help="Also write the JSON result here.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.png|.svg",
              help="Also draw the table as a chart (needs facerun[plot]; `bench plot SAVED.json` draws a saved run).")
@option("--roofline", "roofline", is_flag=True,
        detail="(probed once per adapter, cached): columns TFLOP/s, GB/s and their fractions of the fma and copy "
               "peaks; --json always has them.")
@option("--by-kernel", "by_kernel", is_flag=True,
        detail="(direct, tiled, Winograd, depthwise, gemv, elementwise ...): time, share of the pass, and the "
               "fraction of the limit that binds each.")
@option("--reprobe", "reprobe", is_flag=True, detail="(facerun's probe kernels), not the cached ones.")
# the old spellings: each runs another subcommand (the help's epilog says which)
@click.option("--compare", nargs=2, type=click.Path(path_type=Path), metavar="A.json B.json", hidden=True)
@click.option("--search", "search_counts", default=None, metavar="N,N,...", is_flag=False,
              flag_value=",".join(map(str, bench_search.DEFAULT_COUNTS)), hidden=True)
@click.option("--photos", "photos_dir", type=click.Path(path_type=Path), metavar="DIR", hidden=True)
@click.option("--model", "photo_model", default=None, metavar="DET", hidden=True)
@click.option("--embed", "embed_model", default=None, metavar="MODEL", hidden=True)
@click.option("--workers", type=click.IntRange(0, 64), default=None, hidden=True)
@click.option("--processes", type=click.IntRange(1, 64), default=4, hidden=True)
def command(models, models_dir, sizes, batch, repeat, warmup, budget, paths_text, allow_software, as_json, save,
            plot_file, roofline, by_kernel, reprobe, compare, search_counts, photos_dir, photo_model, embed_model,
            workers, processes):
    """Time MODEL(s) on every path and check each path's output against the CPU interpreter.

    One row per model, size and path: cpu (the numpy interpreter, the reference), gpu-per-conv (each convolution on
    the GPU, the rest on the CPU), gpu (the whole program), gpu-batch (--batch items in one submission; embedders),
    onnxruntime (its CPU provider, when installed); cpu-batch, onnxruntime-batch and gpu-photo (YuNet from a photo's
    bytes, laid out on the GPU, as detect runs it) on request, and gpu-f16, gpu-batch-f16 (the GPU at --precision
    f16). Columns: median,
    p10 and p90 of the timed runs in ms, ms per face, how many times faster or slower than the CPU interpreter per
    face ("5.0x faster than cpu"; --json: speedup_vs_cpu, its ms/face over the row's), and parity with it, shown
    with the tolerance it was held to: for detectors max abs diff over each output's range ("ok 3.7e-07 ≤ 1e-04":
    1e-4 of the range, ranges under 0.01 counting as 0.01; 1e-3 on the GPU paths, 1e-2 on the f16 ones), for
    embedders cosine ("ok cos 0.999998 ≥ 0.9999"; 0.9995 at f16). --plot FILE.png|.svg also draws the table as a
    chart (needs facerun[plot]). A path that cannot run here says why. Exit
    status 1 when a row fails parity.

    MODEL is an .onnx file, a known model's name or a replica name; with neither MODEL nor --models, the built-in
    replicas yunet-arch, sface-arch and auraface-arch run, so nothing needs downloading."""
    # the old spellings, in the order the single command once tried them
    if search_counts:
        bench_search.search(bench_search.parse_counts(search_counts, "--search"), as_json)
        return
    if photos_dir is not None:
        photo_paths = bench_photos.DEFAULT_PATHS if paths_text is None else paths_text
        bench_photos.run_photos(photos_dir, split(photo_paths), photo_model, embed_model, batch, workers, as_json,
                                processes, plot_file=plot_file)
        return
    if compare:
        if models or models_dir:
            raise InputError("--compare takes two saved results and no models")
        bench_compare.compare(*compare, as_json=as_json, plot_file=plot_file)
        return
    run_models(models, models_dir, sizes, batch, repeat, warmup, budget, paths_text, allow_software, as_json, save,
               plot_file, roofline, by_kernel, reprobe)


def run_models(models, models_dir, sizes, batch, repeat, warmup, budget, paths_text, allow_software, as_json,
               save, plot_file=None, roofline=False, by_kernel=False, reprobe=False) -> None:
    settings = bench.Settings(
        sizes=tuple(parse_size(s) for s in sizes.split(",") if s.strip()),
        paths=bench.DEFAULT_PATHS if paths_text is None else split(paths_text),
        batch=batch,
        repeat=repeat,
        warmup=warmup,
        budget=budget,
        batch_detectors=paths_text is not None,  # the batch paths run for detectors only when asked for by name
        allow_software=allow_software,
        reprobe=reprobe,
        by_kernel=by_kernel,
    )
    settings.check()
    if not settings.sizes:
        raise InputError("--sizes is empty")
    if save is not None:
        check_output_file(save, "--save")
    if plot_file is not None:
        from ..bench import plot

        plot.check_target(plot_file)  # before the run: no matplotlib, or no place to write, costs no benchmark
    specs = bench.discover(models, models_dir)

    with progress_bar("steps") as progress:
        task = progress.add_task("loading", total=None)

        def on_load(label):
            progress.update(task, description=f"loading {label}")

        def on_row(description, done, total):
            progress.update(task, description=description, completed=done, total=total)

        result = bench.run(specs, settings, on_row=on_row, on_load=on_load)

    if save is not None:
        result.save(save)
    if plot_file is not None:
        bench_plot.written(plot.save(plot.models_figure(result.to_json()), plot_file))
    if as_json:
        print_json(result.to_json())
    else:
        print_result(result, roofline)
    failed = result.failed
    if failed and not as_json:
        err.print(f"[red]parity fails on {len(failed)} row(s)[/]: "
                  + ", ".join(f"{r.model} {r.size} {r.path}" for r in failed))
    finish(not failed)


# ------------------------------------------------------------------------------------------------------ output


def _parity_cell(r: bench.Row) -> str:
    """The parity verdict with the figure it judged and the tolerance it judged it against: `ok 3.7e-07 ≤ 1e-03`
    (detectors: max abs diff over each output's range), `ok cos 0.999998 ≥ 0.9999` (embedders)."""
    if r.path == bench.REFERENCE and r.ok:
        return "reference"
    if r.ok is None:
        return "—"
    path = MODEL_PATHS.get(r.path)
    if r.kind == "embedder":
        least = r.min_cosine if r.min_cosine is not None else path.min_cosine if path else None
        if r.cosine_vs_cpu is None:
            text = "?"
        elif least is None:
            text = f"cos {r.cosine_vs_cpu:.6f}"
        else:
            text = f"cos {r.cosine_vs_cpu:.6f} {'≥' if r.cosine_vs_cpu >= least else '<'} {least:g}"
    elif r.scaled_diff_vs_cpu is not None and r.tolerance is not None:
        sign = "≤" if r.scaled_diff_vs_cpu <= r.tolerance else ">"
        text = f"{r.scaled_diff_vs_cpu:.1e} {sign} {tolerance_text(r.tolerance)}"
    elif r.max_abs_vs_cpu is not None:  # a run saved before the scaled figure was kept
        tol = f" (tolerance {tolerance_text(path.tolerance)} of range)" if path else ""
        text = f"Δ {r.max_abs_vs_cpu:.2g}{tol}"
    else:
        text = "?"
    return f"[green]ok {text}[/]" if r.ok else f"[bold red]{text} {FAIL_MARK}[/]"


def _speed_cell(r: bench.Row) -> str:
    if r.path == bench.REFERENCE and r.speedup_vs_cpu:
        return "reference"
    return faster_or_slower(r.speedup_vs_cpu, bench.REFERENCE)


ROOFLINE_LEGEND = ("roofline: FLOP = 2 x the program's MACs (a convolution as direct, Winograd too), bytes = every "
                   "step's inputs read and output written once plus its weights, float32; fractions of the probe's "
                   "fp32 fma and copy peaks on GPU rows only (no CPU peak is measured); device ms: facerun's program "
                   "alone on the GPU (its dispatches, no upload or read-back), and the time its work takes at the "
                   "peaks as a fraction of that")
PARITY_LEGEND = ("parity: detectors by max abs diff ÷ each output's range (at least 0.01), held to the tolerance; "
                 "embedders by cosine, held to the least allowed")


def print_result(result: bench.BenchResult, roofline: bool = False) -> None:
    """The table; `roofline`: with the TFLOP/s, GB/s and fractions of the peaks (the peaks' line is printed when
    probed, either way); the --by-kernel tables after it when the result has them."""
    from ..bench.machine import describe_device, describe_machine

    out.print(f"[bold]machine[/]: {describe_machine(result.machine)}")
    device = describe_device(result.device)
    if result.device.get("not_used_because") and result.device.get("name"):
        device += f"; not used: {result.device['not_used_because']}"
    out.print(f"[bold]device[/]: {device}")
    peaks = result.device.get("peaks")
    if peaks:
        text = (f"peaks not measured: {peaks['error']}" if "error" in peaks else roof.peaks_line(peaks))
        out.print(f"[bold]device peaks[/]: {text}", highlight=False)
    busy = result.machine.get("busy_before")
    if busy is not None and busy > BUSY_WARNING:
        out.print(f"[yellow]warning[/]: other work kept the CPUs {busy:.0%} busy as the run began: CPU timings swing "
                  f"with it, multi-threaded BLAS most of all")
    s = result.settings
    out.print(f"[dim]{s['repeat']} runs per row at most, {s['warmup']} warm-up, {s['budget_s']:g} s budget per row, "
              f"batch {s['batch']}[/]")
    notes: dict[str, int] = {}  # long reasons become numbered notes under the table
    t = Table(header_style="bold", box=box.SIMPLE_HEAD)
    columns = ["model", "size", "path", "batch", "median ms", "p10", "p90", "ms/face", "speed (ms/face)"]
    if roofline:
        columns += ["TFLOP/s", "GB/s", "of peaks", "device ms"]
    for col in (*columns, "parity vs cpu", "note"):
        t.add_column(col, justify="left" if col in ("model", "size", "path", "parity vs cpu", "note") else "right")
    for r in result.rows:
        note = ""
        if r.note and r.note != "reference":
            n = notes.setdefault(r.note, len(notes) + 1)
            note = f"[{n}]"
            if r.skipped:
                note = f"skipped [{n}]" if r.ok is None else f"[red]failed[/] [{n}]"
        cells = [r.model, r.size, r.path, str(r.batch), ms(r.median_ms), ms(r.p10_ms), ms(r.p90_ms),
                 ms(r.per_face_ms), _speed_cell(r)]
        if roofline:
            cells += [rate(r.tflops), rate(r.gbps), roof.roofline_cell(r), roof.device_cell(r)]
        t.add_row(*cells, _parity_cell(r), note)
    print_table(t)
    out.print(PARITY_LEGEND, markup=False)
    if roofline:
        out.print(ROOFLINE_LEGEND, markup=False)
    for text, n in notes.items():
        out.print(f"[{n}] {text}", markup=False)
    for k in result.kernels:
        print_kernels(k)
