"""`facerun bench [MODEL ...]`: time every path (CPU interpreter, GPU, onnxruntime) and check each against the CPU."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ..bench import bench
from ..errors import InputError
from ..io import check_output_file
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
from .types import FiniteRange

FAIL_MARK = "✗ FAIL"
BUSY_WARNING = 0.25  # warn when other work used more than this share of the CPUs just before the run
PIPED_WIDTH = 160  # tables sent to a file or pipe are not squeezed into 80 columns


def _print_table(table: Table) -> None:
    """Print a table at its natural width: squeezing it into a narrow terminal would cut numbers to '1.2…'."""
    console = out if out.is_terminal else Console(highlight=False, width=PIPED_WIDTH)
    need = console.measure(table, options=console.options.update_width(1000)).maximum
    if need > console.width:
        console = Console(highlight=False, width=need, force_terminal=out.is_terminal)
    console.print(table)


@click.command("bench")
@click.argument("models", nargs=-1)
@models_dir_option(expose=True, help="Benchmark every .onnx file in DIR (recognised by sha256, else by graph shape); "
                                    "MODEL names are looked up in DIR first too.")
@click.option("--sizes", default="640x640", show_default=True,
              help="Detector input sizes, width x height, comma-separated (YuNet: multiples of 32). Embedders run "
                   "at their own size.")
@click.option("--batch", default=16, show_default=True, type=click.IntRange(1, 4096),
              help="Items per batched run (the *-batch paths), reported per face.")
@click.option("--repeat", default=10, show_default=True, type=click.IntRange(1, 100_000),
              help="Timed runs per row (at most; see --budget).")
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 1000),
              help="Untimed runs before timing (the GPU compiles and checks its program here).")
@click.option("--budget", default=20.0, show_default=True, type=FiniteRange(0),
              help="Seconds per row, warm-up included; a row stops early once spent, after at least 3 timed runs.")
@click.option("--paths", "paths_text", default=",".join(bench.DEFAULT_PATHS), show_default=True,
              help=f"Comma-separated paths to time, from: {', '.join(bench.PATHS)}.")
@allow_software_option(hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), help="Also write the JSON result here.")
@click.option("--compare", nargs=2, type=click.Path(path_type=Path), metavar="A.json B.json",
              help="Compare two saved results instead of benchmarking: per-face times side by side and B's speed-up.")
@click.option("--search", "search_sizes", default=None, metavar="N,N,...", is_flag=False,
              flag_value="10000,100000,1000000",
              help="Time brute-force face search instead: query ms over N random 512-d faces (default sizes "
                   "10000,100000,1000000).")
@click.option("--photos", "photos_dir", type=click.Path(path_type=Path), metavar="DIR",
              help="The library benchmark instead: detect (and with --embed, embed) every photo of DIR on each of "
                   "--paths (default cpu,gpu,opencv; also cpu-serial, gpu-serial: one photo after another; "
                   "cpu-processes, gpu-processes: over --processes processes, their start-up timed in; "
                   "opencv-threads: OpenCV a photo per thread over the cores, or --workers threads).")
@click.option("--model", "photo_model", default=None, metavar="DET",
              help="With --photos: the YuNet detector (default yunet-2023mar).")
@click.option("--embed", "embed_model", default=None, metavar="MODEL",
              help="With --photos: also align and embed every face with this embedder, --batch faces per call.")
@click.option("--workers", type=click.IntRange(0, 64), default=None,
              help="With --photos: decoding threads (default: the cores but one, at most 8).")
@click.option("--processes", type=click.IntRange(1, 64), default=4, show_default=True,
              help="With --photos: processes of the *-processes paths.")
def command(models, models_dir, sizes, batch, repeat, warmup, budget, paths_text, allow_software, as_json, save,
            compare, search_sizes, photos_dir, photo_model, embed_model, workers, processes):
    """Time MODEL(s) on every path and check each path's output against the CPU interpreter.

    One row per model, size and path: cpu (the numpy interpreter, the reference), gpu-per-conv (each convolution on
    the GPU, the rest on the CPU), gpu (the whole program), gpu-batch (--batch items in one submission; embedders),
    onnxruntime (its CPU provider, when installed); cpu-batch, onnxruntime-batch and gpu-photo (YuNet from a photo's
    bytes, laid out on the GPU, as detect runs it) on request, and gpu-f16, gpu-batch-f16 (the GPU at --precision
    f16). Columns: median,
    p10 and p90 of the timed runs in ms, ms per face, speed-up over the CPU interpreter, and parity with it: max abs
    diff for detectors, within 1e-4 of each output's range (ranges under 0.01 count as 0.01; 1e-3 on the GPU paths,
    1e-2 on the f16 ones), cosine >= 0.9999 for embedders (0.9995 at f16). A path that cannot run here says why. Exit
    status 1 when a row fails parity.

    MODEL is an .onnx file, a known model's name or a replica name; with neither MODEL nor --models, the built-in
    replicas yunet-arch, sface-arch and auraface-arch run, so nothing needs downloading."""
    if search_sizes:
        from ..people.search import bench_search
        from .search import print_bench

        try:
            counts = tuple(int(n) for n in search_sizes.split(",") if n.strip())
        except ValueError:
            raise InputError(f"--search takes face counts like 10000,100000, not '{search_sizes}'") from None
        print_bench(bench_search(counts), as_json)
        return
    if photos_dir is not None:
        from .bench_photos import run_photos

        given = click.get_current_context().get_parameter_source("paths_text") == click.core.ParameterSource.COMMANDLINE
        run_photos(photos_dir, paths_text if given else None, photo_model, embed_model, batch, workers,
                   allow_software, as_json, processes)
        return
    if compare:
        if models or models_dir:
            raise InputError("--compare takes two saved results and no models")
        _compare(*compare, as_json=as_json)
        return
    paths = tuple(p.strip() for p in paths_text.split(",") if p.strip())
    settings = bench.Settings(
        sizes=tuple(parse_size(s) for s in sizes.split(",") if s.strip()),
        paths=paths,
        batch=batch,
        repeat=repeat,
        warmup=warmup,
        budget=budget,
        # the batch paths run for detectors only when asked for by name
        batch_detectors=click.get_current_context().get_parameter_source("paths_text")
        == click.core.ParameterSource.COMMANDLINE,
        allow_software=allow_software,
    )
    settings.check()
    if not settings.sizes:
        raise InputError("--sizes is empty")
    if save is not None:
        check_output_file(save, "--save")
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
    if as_json:
        print_json(result.to_json())
    else:
        print_result(result)
    failed = result.failed
    if failed and not as_json:
        err.print(f"[red]parity fails on {len(failed)} row(s)[/]: "
                  + ", ".join(f"{r.model} {r.size} {r.path}" for r in failed))
    finish(not failed)


# ------------------------------------------------------------------------------------------------------ output


def _ms(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def _parity_cell(r: bench.Row) -> str:
    if r.path == "cpu" and r.ok:
        return "reference"
    if r.ok is None:
        return "—"
    if r.kind == "embedder":
        text = f"cos {r.cosine_vs_cpu:.6f}" if r.cosine_vs_cpu is not None else "?"
    else:
        text = f"Δ {r.max_abs_vs_cpu:.2g}" if r.max_abs_vs_cpu is not None else "?"
    return f"[green]{text} ✓[/]" if r.ok else f"[bold red]{text} {FAIL_MARK}[/]"


def print_result(result: bench.BenchResult) -> None:
    from ..bench.machine import describe_device, describe_machine

    out.print(f"[bold]machine[/]: {describe_machine(result.machine)}")
    device = describe_device(result.device)
    if result.device.get("not_used_because") and result.device.get("name"):
        device += f"; not used: {result.device['not_used_because']}"
    out.print(f"[bold]device[/]: {device}")
    busy = result.machine.get("busy_before")
    if busy is not None and busy > BUSY_WARNING:
        out.print(f"[yellow]warning[/]: other work kept the CPUs {busy:.0%} busy as the run began: CPU timings swing "
                  f"with it, multi-threaded BLAS most of all")
    s = result.settings
    out.print(f"[dim]{s['repeat']} runs per row at most, {s['warmup']} warm-up, {s['budget_s']:g} s budget per row, "
              f"batch {s['batch']}[/]")
    notes: dict[str, int] = {}  # long reasons become numbered notes under the table
    t = Table(header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("model", "size", "path", "batch", "median ms", "p10", "p90", "ms/face", "speed-up", "parity vs cpu",
                "note"):
        t.add_column(col, justify="left" if col in ("model", "size", "path", "parity vs cpu", "note") else "right")
    for r in result.rows:
        note = ""
        if r.note and r.note != "reference":
            n = notes.setdefault(r.note, len(notes) + 1)
            note = f"[{n}]"
            if r.skipped:
                note = f"skipped [{n}]" if r.ok is None else f"[red]failed[/] [{n}]"
        t.add_row(r.model, r.size, r.path, str(r.batch), _ms(r.median_ms), _ms(r.p10_ms), _ms(r.p90_ms),
                  _ms(r.per_face_ms), f"{r.speedup_vs_cpu:.2f}x" if r.speedup_vs_cpu else "—", _parity_cell(r),
                  note)
    _print_table(t)
    for text, n in notes.items():
        out.print(f"[{n}] {text}", markup=False)


def _compare(path_a: Path, path_b: Path, as_json: bool) -> None:
    from ..bench.machine import describe_device, describe_machine

    a, b = bench.load_result(path_a), bench.load_result(path_b)
    rows = bench.compare(a, b)
    if as_json:
        print_json({
            "a": {"file": str(path_a), "created": a.get("created"), "machine": a["machine"], "device": a.get("device")},
            "b": {"file": str(path_b), "created": b.get("created"), "machine": b["machine"], "device": b.get("device")},
            "rows": [r.__dict__ for r in rows],
        })
        return
    for tag, path, data in (("A", path_a, a), ("B", path_b, b)):
        m = data["machine"]
        out.print(f"[bold]{tag}[/]: {path} ({data.get('created', '?')}, facerun {m.get('facerun', '?')})")
        out.print(f"   machine: {describe_machine(m)}")
        out.print(f"   device: {describe_device(data.get('device') or {})}")
    t = Table(header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("model", "size", "path", "batch", "A ms/face", "B ms/face", "B speed-up", ""):
        t.add_column(col, justify="left" if col in ("model", "size", "path", "") else "right")
    for r in rows:
        flag = ""
        if r.a_ok is False or r.b_ok is False:
            flag = f"[red]parity {'A' if r.a_ok is False else ''}{'B' if r.b_ok is False else ''} {FAIL_MARK}[/]"
        elif r.found_in != "both":
            flag = f"only in {r.found_in}"
        elif r.a_ms is None or r.b_ms is None:
            flag = "skipped in " + ("both" if r.a_ms is None and r.b_ms is None else "A" if r.a_ms is None else "B")
        speed = "—"
        if r.speedup is not None:
            colour = "green" if r.speedup >= 1.05 else "red" if r.speedup <= 0.95 else ""
            speed = f"[{colour}]{r.speedup:.2f}x[/]" if colour else f"{r.speedup:.2f}x"
        t.add_row(r.model, r.size, r.path, str(r.batch), _ms(r.a_ms), _ms(r.b_ms), speed, flag)
    _print_table(t)
    out.print("B speed-up = A ms/face ÷ B ms/face (above 1: B is faster)")
