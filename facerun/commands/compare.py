"""`facerun compare`: are the largest faces of two photos the same person? Cosine similarity and a verdict."""

from __future__ import annotations

import re
from pathlib import Path

import click

from ..errors import ImageError
from ..zoo.known import KNOWN
from .common import err, json_dumps, out
from .embed import embedder_options, make_detector, make_embedder
from .options import json_option
from .types import FiniteRange


def _threshold_lines() -> str:
    """One help line per known embedder: its threshold and where the number comes from."""
    lines = []
    for m in KNOWN:
        if m.kind != "embedder" or m.threshold is None:
            continue
        origin = next((part.strip() for part in m.notes.split(";") if "threshold" in part), "")
        origin = re.sub(r"^(cosine )?threshold [0-9.]+ (is )?", "", origin)
        lines.append(f"  {m.name}: {m.threshold:g}" + (f" - {origin}" if origin else ""))
    return "\n".join(lines)


HELP = f"""Compare the largest face of photo A with the largest face of photo B.

Prints the cosine similarity of their embeddings and the verdict: the same person when the cosine is at or above
the threshold (--threshold, else the model's own). Thresholds of the known embedders:

\b
{_threshold_lines()}

Replicas have random weights, so no threshold means anything for them; the verdict is left out unless
--threshold is given. An image that is missing, unreadable or has no face is an error (exit status 1).
"""


@click.command("compare", help=HELP)
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@embedder_options
@click.option("--threshold", type=FiniteRange(-1, 1), default=None,
              help="The cosine threshold: at or above it the faces count as one person. Default: the model's.")
@json_option('instead of lines: {"a","b","model","cosine","threshold","same"}, one object.')
def command(a, b, model, device, detector_model, input_size, mean, std, bgr, threshold, as_json):
    from ..face.embed import cosine, largest, same_person
    from ..face.images import load_image

    # read both photos first, so a missing second file fails before any model is loaded
    photos = [(path, load_image(path)) for path in (a, b)]
    embedder = make_embedder(model, device, input_size, mean, std, bgr, threshold)
    detector = make_detector(detector_model, device)
    if embedder.note:
        err.print(f"note: {embedder.note}", markup=False)

    crops = []
    for path, rgb in photos:
        faces = largest(detector.detect(rgb))
        if not faces:
            raise ImageError(f"{path}: no face found")
        crops.append(embedder.align(rgb, faces[0].landmarks))
    vectors = embedder.embed(crops)  # one batch of two
    cos = cosine(vectors[0], vectors[1])
    limit = embedder.threshold
    same = same_person(cos, limit) if limit is not None else None

    if as_json:
        click.echo(json_dumps({"a": str(a), "b": str(b), "model": embedder.name, "cosine": round(cos, 6),
                               "threshold": limit, "same": same}, indent=2))
        return
    if same is None:
        verdict = f"no threshold known for {embedder.name}; pass --threshold for a verdict"
    else:
        verdict = "same person" if same else "different people"
    where = f"{limit:g}" if limit is not None else "-"
    out.print(f"{a}  vs  {b}", markup=False)
    out.print(f"cosine {cos:.4f}  threshold {where}  ->  {verdict}  ({embedder.name}, {embedder.device})",
              markup=False)
