"""What the whole-run A/B scripts here share (half_planes.py, winograd_tiles.py): run medians over alternating
rounds, and the MODEL[:BATCH] command line. Out of the package: only these measurements use them."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def alternating_runs(programs: dict, feeds: dict, rounds: int, runs: int) -> dict[str, float]:
    """Median seconds of a whole run (`GpuProgram.run`) of each program by label, over `rounds` rounds that take
    the programs in turn, `runs` timed runs each after one untimed: for A/B runs of variants side by side, which a
    shared GPU's drifting clocks disturb least."""
    times: dict[str, list[float]] = {label: [] for label in programs}
    for _ in range(rounds):
        for label, gp in programs.items():
            gp.run(feeds)
            for _ in range(runs):
                start = time.perf_counter()
                gp.run(feeds)
                times[label].append(time.perf_counter() - start)
    return {label: float(np.median(t)) for label, t in times.items()}


AB_MODELS = ("auraface-arch:1", "auraface-arch:8", "auraface-arch:16")


def ab_main(description: str, ab, argv=None) -> int:
    """The command line of a whole-run A/B script (half_planes.py): MODEL[:BATCH] ... (default AB_MODELS) parsed
    into (name, batch) pairs for `ab(specs)`; a FacerunError is one line and exit 1."""
    from facerun.errors import FacerunError

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("models", nargs="*", default=list(AB_MODELS), metavar="MODEL[:BATCH]")
    args = ap.parse_args(argv)
    try:
        specs = [(name, int(batch or 1)) for name, _, batch in (m.partition(":") for m in args.models)]
    except ValueError:
        ap.error("a model is NAME or NAME:BATCH, the batch a whole number")
    if any(b < 1 for _, b in specs):
        ap.error("a batch is at least 1")
    try:
        ab(specs)
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
