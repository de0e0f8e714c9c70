"""Embed the largest face of every photo in a folder, then list the photos whose face is closest to a query photo.

    python examples/embed_and_search.py GALLERY_DIR QUERY_PHOTO [--model mobilefacenet] [--top 5] [--json]

Each face is detected (YuNet), aligned to the ArcFace template and embedded; closeness is the cosine of the
unit-length embeddings, and a match is a cosine at or above the model's threshold. The query photo itself is left
out of the gallery if it lives there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import facerun
from facerun.face.detect import Detector
from facerun.face.embed import Embedder, cosine_matrix
from facerun.face.images import iter_images


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gallery", type=Path, help="folder of photos, walked recursively")
    ap.add_argument("query", type=Path, help="photo of the face to look for")
    ap.add_argument("--model", default=None, help="embedder: a path, known name or replica (default: first found)")
    ap.add_argument("--top", type=int, default=5, help="how many closest photos to list")
    ap.add_argument("--json", action="store_true", help="print JSON instead of lines")
    args = ap.parse_args(argv)

    embedder = Embedder(args.model)
    detector = Detector()  # one detector shared by the gallery and the query
    gallery = [p for p in iter_images([args.gallery]) if p.resolve() != args.query.resolve()]
    records = embedder.embed_images(gallery, detector=detector, skip_unreadable=True)
    query = embedder.embed_images([args.query], detector=detector)
    if not query:
        print(f"error: no face found in {args.query}", file=sys.stderr)
        return 1
    if not records:
        print(f"error: no faces found in {args.gallery}", file=sys.stderr)
        return 1

    sims = cosine_matrix(query[0].embedding, [r.embedding for r in records])[0]
    order = sims.argsort()[::-1][: args.top]
    threshold = embedder.threshold
    hits = [{"image": records[i].image, "cosine": round(float(sims[i]), 4),
             "match": bool(threshold is not None and sims[i] >= threshold)} for i in order]
    if args.json:
        print(json.dumps({"model": embedder.name, "threshold": threshold, "query": str(args.query),
                          "gallery_faces": len(records), "closest": hits}, indent=2))
    else:
        print(f"{embedder.name}: {len(records)} gallery faces; closest to {args.query} (threshold {threshold}):")
        for h in hits:
            print(f"  {h['cosine']:+.3f} {'match' if h['match'] else '     '} {h['image']}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except facerun.FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
