"""Detect faces in every photo of a folder and write annotated copies (boxes, landmarks, scores).

    python examples/detect_and_draw.py PHOTOS_DIR OUT_DIR [--model yunet-2023mar|scrfd-500m|...] [--score S] [--limit N]

The detector model is found the way the `facerun` command finds it (--model, $FACERUN_MODELS, the user cache);
`facerun models fetch yunet-2023mar` downloads it. Prints one line per photo and a JSON summary at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import facerun
from facerun.face.draw import draw_faces
from facerun.face.images import iter_images, load_image


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photos", type=Path, help="a folder of photos (walked recursively) or one photo")
    ap.add_argument("out", type=Path, help="folder for the annotated copies (created if needed)")
    ap.add_argument("--model", default=None, help="detector of any family: a path or a known name "
                                                   "(default: YuNet 2023mar)")
    ap.add_argument("--score", type=float, default=None, help="score threshold (default: the family's own)")
    ap.add_argument("--limit", type=int, default=0, help="stop after this many photos (0: all)")
    args = ap.parse_args(argv)

    detector = facerun.Detector(args.model, score=args.score)
    photos = iter_images([args.photos])
    if args.limit:
        photos = photos[: args.limit]
    if not photos:
        print(f"no photos in {args.photos}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)

    summary = {}
    for photo in photos:
        try:
            rgb = load_image(photo)
        except facerun.ImageError as e:  # one unreadable file should not stop the rest
            print(f"skipped: {e}", file=sys.stderr)
            continue
        faces = detector.detect(rgb)  # best score first, in the photo's pixel coordinates
        # name the copy after its path under the input folder, so photos from sub-folders do not collide
        rel = photo.relative_to(args.photos) if args.photos.is_dir() else Path(photo.name)
        target = args.out / ("__".join(rel.with_suffix("").parts) + ".jpg")
        draw_faces(rgb, faces).save(target, quality=90)
        summary[str(rel)] = {"faces": len(faces), "annotated": str(target),
                             "best_score": round(faces[0].score, 3) if faces else None}
        print(f"{rel}: {len(faces)} face(s) -> {target}")
    print(json.dumps({"device": detector.device, "photos": summary}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except facerun.FacerunError as e:  # facerun's errors are one line, meant for the user
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
