"""`facerun bench --photos DIR`: the library benchmark's table and where its time goes."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.table import Table

from .common import err, out, print_json


def run_photos(folder: Path, paths_text, detector_model, embed_model, batch: int, workers, allow_software: bool,
               as_json: bool, processes: int = 4) -> None:
    from ..bench.photos import DEFAULT_PHOTO_PATHS, bench_photos

    if allow_software:
        from ..gpu import allow_software as allow

        allow(True)
    paths = DEFAULT_PHOTO_PATHS if paths_text is None else tuple(p.strip() for p in paths_text.split(",") if p.strip())
    with err.status("") as status:

        def on_row(path):
            status.update(f"running {path} over {folder}")

        result = bench_photos(folder, paths, detector_model, embed_model, batch, workers, on_row=on_row,
                              processes=processes)
    if as_json:
        print_json(result)
        return
    print_photos(result)


def _num(v, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def print_photos(result: dict) -> None:
    title = (f"{result['photos']} photos in {result['photos_dir']}: {result['detector']}"
             + (f" + {result['embedder']} (batch {result['batch']})" if result["embedder"] else "")
             + f", {result['workers']} decoding threads")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("path", "photos/s", "faces/s", "first ms", "faces", "sizes", "checks", "programs", "decode s",
                 "compile s", "detect s", "post s", "align s", "embed s", "total s", "same as cpu"):
        table.add_column(name, justify="left" if name in ("path", "same as cpu") else "right")
    notes = []
    for r in result["rows"]:
        if r["skipped"] and not r["photos"]:
            table.add_row(r["path"], *["—"] * 14, "skipped")
            notes.append(f"{r['path']}: skipped: {r['skipped']}")
            continue
        s = r["seconds"]
        agree = r["agree_with_cpu"]
        same = "reference" if agree is None else ("yes" if agree["same"] else
                                                  f"no: {agree['photos_differing']} photos differ")
        table.add_row(r["path"], _num(r["photos_per_s"]), _num(r["faces_per_s"]), _num(r["first_photo_ms"], 0),
                      str(r["faces"]), str(r["distinct_sizes"]), str(r["gpu_checks"]), str(r["programs_compiled"]),
                      *(_num(s.get(k), 2) for k in ("decode", "compile", "detect", "post", "align", "embed", "total")),
                      same)
        notes.append(f"{r['path']} ({r['device']}): {r['bottleneck']}")
        if r["skipped"]:
            notes.append(f"{r['path']}: {r['skipped']}")
    from .bench import _print_table

    _print_table(table)
    for line in notes:
        out.print(line, markup=False)
    out.print("stage seconds are busy time summed over the threads doing the stage; total is the wall time",
              markup=False)
