"""The library run's rate over N processes once they are all up: start-up timed apart from the run.

    python benchmarks/processes_ceiling.py DIR [--model DET] [--device gpu] [--runs 1x4,4x2,8x2] [--repeat 1]

Each run spawns N processes; each makes its own Detector (imports, device, the GPU's check on a small image), says it
is ready and waits; when all are, one event starts them, and each runs facerun.face.library.iter_photo_faces over
every N-th photo with W decoding threads (a run NxW). Printed: photos/s from the start signal to the last photo,
the start-up, and photos/s with the start-up counted. `facerun detect --processes N` is what a user runs; this shows
the ceiling it approaches on a large library, and what one process leaves on the table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def worker(slot, model, device, paths, workers, ready, go, out):
    t = time.perf_counter()
    import numpy as np

    from facerun.face.detect import Detector
    from facerun.face.library import iter_photo_faces

    det = Detector(model, device=device)
    det.detect(np.zeros((96, 128, 3), np.uint8))  # the GPU's check and pipelines, before the clock
    ready.put((slot, time.perf_counter() - t))
    go.wait()
    t = time.perf_counter()
    faces = [len(r.faces) for r in iter_photo_faces(paths, det, workers=workers)]
    out.put((slot, time.perf_counter() - t, sum(faces), len(faces)))


def run(photos, model, device, n, workers):
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    t0 = time.perf_counter()
    procs = [ctx.Process(target=worker, args=(i, model, device, photos[i::n], workers, ready, go, out))
             for i in range(n)]
    for p in procs:
        p.start()
    starts = [ready.get()[1] for _ in procs]
    t1 = time.perf_counter()
    go.set()
    done = [out.get() for _ in procs]
    t2 = time.perf_counter()
    for p in procs:
        p.join()
    count, faces = sum(d[3] for d in done), sum(d[2] for d in done)
    print(f"{n} processes x {workers} decoding threads, {count} photos, {faces} faces: {count / (t2 - t1):.1f} "
          f"photos/s once up ({t2 - t1:.2f} s); start-up {t1 - t0:.2f} s (each {min(starts):.2f}-{max(starts):.2f}); "
          f"{count / (t2 - t0):.1f} photos/s with it", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--model", default=None, help="detector (default: yunet-2023mar)")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--runs", default="1x4,2x3,4x2,4x3,8x2", help="NxW runs: processes x decoding threads")
    ap.add_argument("--repeat", type=int, default=1, help="the photo list this many times over")
    args = ap.parse_args()
    from facerun.face.images import iter_images

    photos = [str(p) for p in iter_images([args.folder])] * args.repeat
    for spec in args.runs.split(","):
        n, w = (int(v) for v in spec.lower().split("x"))
        run(photos, args.model, args.device, n, w)


if __name__ == "__main__":
    main()
