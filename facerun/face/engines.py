"""The library run behind one entry: `run(paths, detector, embedder, options)`, whichever engine options.engine names.

ENGINES is the table: "threads" (the pipelined run of this process) and "serial" (one photo after another) are
face/library.py's, "processes" is face/processes.py's, "auto" (threads, or processes where they pay) too, "ray"
face/ray_engine.py's. Each engine takes (paths, detector, embedder, options, stats) and yields PhotoFaces; `run`
checks the options, counts every result in the run's LibraryStats and calls progress, the same for all of them.
The engines beyond this process are imported when asked for (Ray's only with Ray installed). The table sits above
library.py, which the engines themselves import, so that no module imports back up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ..errors import InputError
from . import library
from .library import LibraryOptions, LibraryStats, PhotoFaces, observed


def _processes(paths, detector, embedder, options, stats):
    from .processes import engine

    return engine(paths, detector, embedder, options, stats)


def _auto(paths, detector, embedder, options, stats):
    from .processes import auto_engine

    return auto_engine(paths, detector, embedder, options, stats)


def _ray(paths, detector, embedder, options, stats):
    from .ray_engine import engine

    return engine(paths, detector, embedder, options, stats)


# engine name -> (paths, detector, embedder, options, stats) -> PhotoFaces
ENGINES: dict[str, Callable[..., Iterable[PhotoFaces]]] = {
    "threads": library.threads,
    "serial": library.serial,
    "processes": _processes,
    "auto": _auto,
    "ray": _ray,
}


def run(paths: Iterable, detector, embedder=None, options: LibraryOptions | None = None, *,
        stats: LibraryStats | None = None, progress: Callable[[PhotoFaces], None] | None = None
        ) -> Iterator[PhotoFaces]:
    """The faces (and with an embedder their embeddings) of each photo of `paths`, one PhotoFaces per photo, as
    iter_photo_faces describes (in input order, errors as results), by the engine options.engine names; the Ray
    engine's come in no particular order.

    detector: a face.photo_detector.PhotoDetector (facerun's Detector) or anything with detect(rgb); the processes
    engine makes one per process from options.detector_args (or takes `detector` as those keyword arguments), the
    Ray engine's actors from options.ray. stats: filled as the run goes (a new one when None). progress(result):
    once per photo, just before it is yielded. An unknown engine is an InputError before any work."""
    options = options if options is not None else LibraryOptions()
    engine = ENGINES.get(options.engine)
    if engine is None:
        raise InputError(f"unknown library engine '{options.engine}' (one of {', '.join(ENGINES)})")
    stats = stats if stats is not None else LibraryStats()
    return observed(engine(paths, detector, embedder, options, stats), stats, progress)


__all__ = ["ENGINES", "LibraryOptions", "run"]
