"""How well identify, cluster and search work on photos sorted into one folder per person.

    python -m facerun.people.measure PHOTOS_DIR --db faces.db [--model NAME] [--exclude REL_PATH ...] [--json]

PHOTOS_DIR holds identity folders; `group/` (multi-person photos) is indexed but unlabelled. Each labelled photo
counts by its largest face. The index is built (or brought up to date) first, so a second run costs no embedding.
- identify: one known photo per person (the first by name), the other photos of that person as queries, every
  person's known photo in the gallery (people with one photo are distractors); top-1 accuracy, and the share named
  right at the model's threshold (`unknown` counts as wrong).
- cluster: `cluster --all` over every face in the index (and the incremental path: half the faces clustered, the
  rest placed); purity (clustered faces), noise share and adjusted Rand index (noise faces as singletons) over the
  labelled faces.
- search: each labelled photo of a person with two or more photos as the query against the other labelled photos;
  precision of the top k = min(5, other photos of that person), and of the top 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

UNLABELLED = "group"


def labelled_faces(index, root: Path, exclude=()) -> tuple[list[str], list[int], np.ndarray, list[str]]:
    """(identity, row into index.faces(), embedding, path) of each labelled photo's largest face."""
    stored = index.faces()
    root = Path(root).resolve()
    skip = {str((root / e).resolve()) for e in exclude}
    largest: dict[str, int] = {}
    for row, (path, box) in enumerate(zip(stored.paths, stored.boxes)):
        if path in skip:
            continue
        rel = Path(path).relative_to(root) if Path(path).is_relative_to(root) else None
        if rel is None or len(rel.parts) < 2 or rel.parts[0] == UNLABELLED:
            continue
        if path not in largest or box[2] * box[3] > stored.boxes[largest[path]][2] * stored.boxes[largest[path]][3]:
            largest[path] = row
    paths = sorted(largest)
    rows = [largest[p] for p in paths]
    identities = [Path(p).relative_to(root).parts[0] for p in paths]
    return identities, rows, stored.embeddings[rows], paths


def measure_identify(identities, embeddings, threshold: float) -> dict:
    from .identify import Gallery, match

    first: dict[str, int] = {}
    for i, who in enumerate(identities):
        first.setdefault(who, i)
    known = sorted(first.values())
    gallery = Gallery(names=[identities[i] for i in known], images=[""] * len(known), embeddings=embeddings[known])
    queries = [i for i in range(len(identities)) if i not in set(known)]
    top1 = match(gallery, embeddings[queries], threshold=-2.0)
    at_threshold = match(gallery, embeddings[queries], threshold=threshold)
    hits = sum(name == identities[q] for q, (name, _) in zip(queries, top1))
    named = sum(name == identities[q] for q, (name, _) in zip(queries, at_threshold))
    return {"people": len(known), "queries": len(queries), "top1_accuracy": hits / len(queries),
            "accuracy_at_threshold": named / len(queries), "threshold": threshold}


def measure_cluster(index, rows, identities, min_size: int = 2) -> dict:
    """`cluster --all` over every face of the index, and the incremental path: the first half of the faces (by
    face id, as photos arrive) clustered, then the rest placed by grouping.assign_new."""
    from dataclasses import replace

    from .cluster import cluster_index, purity_and_ari
    from .grouping import DEFAULT, assign_new, group_all

    result = cluster_index(index, min_size=min_size, save=False, full=True)
    scores = purity_and_ari(identities, result.labels[rows])
    stored = index.faces()
    gated = result.labels != -3
    vectors = stored.embeddings[gated]
    params = replace(DEFAULT, min_size=min_size)
    half = len(vectors) // 2
    start = np.full(len(vectors), -2, np.int64)
    start[:half] = group_all(vectors[:half], params)
    grown = np.full(len(stored), -3, np.int64)
    grown[gated] = assign_new(vectors, start, params)
    incremental = purity_and_ari(identities, grown[rows])
    return {"min_size": min_size, "clusters": len(result.clusters), "faces_in_index": len(result.labels),
            **{k: scores[k] for k in ("faces", "noise", "purity", "purity_all", "ari")},
            "incremental": {k: incremental[k] for k in ("noise", "purity", "ari")}}


def measure_search(identities, embeddings, k_max: int = 5) -> dict:
    precisions, firsts = [], []
    names = np.array(identities)
    for q, who in enumerate(identities):
        others = int((names == who).sum()) - 1
        if others < 1:
            continue
        cosines = embeddings @ embeddings[q]
        cosines[q] = -np.inf
        order = np.argsort(-cosines, kind="stable")
        k = min(k_max, others)
        precisions.append(float((names[order[:k]] == who).mean()))
        firsts.append(float(names[order[0]] == who))
    return {"queries": len(precisions), "k_max": k_max, "precision_at_k": float(np.mean(precisions)),
            "precision_at_1": float(np.mean(firsts))}


def measure(index, root: Path, threshold: float, exclude=(), min_size: int = 2) -> dict:
    identities, rows, embeddings, _ = labelled_faces(index, root, exclude)
    return {"model": index.model, "labelled_faces": len(rows), "people": len(set(identities)),
            "identify": measure_identify(identities, embeddings, threshold),
            "cluster": measure_cluster(index, rows, identities, min_size),
            "search": measure_search(identities, embeddings)}


def main(argv=None) -> int:
    import argparse

    from ..errors import FacerunError
    from ..face.detect import Detector
    from ..face.embed import Embedder
    from .index import FaceIndex

    parser = argparse.ArgumentParser(prog="python -m facerun.people.measure", description=__doc__.split("\n")[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--model", default="mobilefacenet")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--exclude", action="append", default=[], help="a photo (path under PHOTOS) to leave out")
    parser.add_argument("--min-size", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        embedder = Embedder(args.model, device=args.device)
        with FaceIndex(args.db) as index:
            report = index.update([args.photos], embedder=embedder, detector=Detector(device=args.device))
            result = measure(index, args.photos, embedder.threshold, args.exclude, args.min_size)
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result["index"] = report.to_dict()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    i, c, s = result["identify"], result["cluster"], result["search"]
    print(f"{result['model']}: {result['labelled_faces']} labelled faces, {result['people']} people")
    print(f"identify  top-1 {i['top1_accuracy']:.3f}  at threshold {i['threshold']:g}: {i['accuracy_at_threshold']:.3f}"
          f"  ({i['queries']} queries, one known photo each of {i['people']} people)")
    print(f"cluster   purity {c['purity']:.3f}  ARI {c['ari']:.3f}  noise {c['noise']}/{c['faces']}  "
          f"{c['clusters']} clusters over {c['faces_in_index']} faces (min size {c['min_size']})")
    inc = c["incremental"]
    print(f"          incremental (half clustered, half placed): purity {inc['purity']:.3f}  ARI {inc['ari']:.3f}  "
          f"noise {inc['noise']}/{c['faces']}")
    print(f"search    precision@k {s['precision_at_k']:.3f} (k = min({s['k_max']}, photos of the person - 1))  "
          f"precision@1 {s['precision_at_1']:.3f}  ({s['queries']} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
