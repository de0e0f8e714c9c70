"""How small a face can be and still be recognised: the shared identity photos shrunk so that their largest face is
S pixels on its shorter box side, detected and embedded again, and matched against the other photos of everyone
(full size, one gallery face a photo). Prints, per S, the share detected, the share named right at the embedder's
threshold (top-1 and above it) and the share of false names. The quality gate's default (people/quality.py) is read
off this table.

    python benchmarks/face_size.py [--sides 12,16,20,24,32,40,48,64]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from PIL import Image

DATA = Path(os.environ.get("FACERUN_DATA", "/work/shared/data")) / "faces"
MODELS = Path(os.environ.get("FACERUN_MODELS", "/work/shared/models"))
NEAR_COPIES = ("obama/obama-240p.jpg", "obama/obama-480p.jpg", "obama/obama-720p.jpg", "obama/obama_small.jpg")


def main() -> None:
    from facerun.face.detect import Detector
    from facerun.face.embed import Embedder
    from facerun.face.images import iter_images, load_image

    parser = argparse.ArgumentParser()
    parser.add_argument("--sides", default="12,16,20,24,32,40,48,64")
    args = parser.parse_args()
    embedder = Embedder(str(MODELS / "MobileFaceNet.onnx"), device="cpu")
    detector = Detector(str(MODELS / "face_detection_yunet_2023mar.onnx"), device="cpu")
    photos = [p for p in iter_images([DATA]) if p.parent.name != "group"
              and str(p.relative_to(DATA)) not in NEAR_COPIES]
    people, vectors, images, boxes = [], [], [], []
    for path in photos:
        image = load_image(path)
        faces = sorted(detector.detect(image), key=lambda f: -f.box[2] * f.box[3])
        if not faces:
            continue
        people.append(path.parent.name)
        vectors.append(embedder.embed(embedder.align(image, faces[0].landmarks))[0])
        images.append(image)
        boxes.append(faces[0].box)
    people, vectors = np.array(people), np.stack(vectors)
    threshold = embedder.threshold
    print(f"{len(people)} photos of {len(set(people))} people, threshold {threshold}")
    print("side px  detected  named right  named wrong")
    for side in (int(s) for s in args.sides.split(",")):
        found = right = wrong = 0
        for i, (image, box) in enumerate(zip(images, boxes)):
            if (people == people[i]).sum() < 2:
                continue
            scale = side / min(box[2], box[3])
            if scale >= 1:
                small, sbox = image, box
            else:
                h, w = image.shape[:2]
                size = (max(1, round(w * scale)), max(1, round(h * scale)))
                small = np.asarray(Image.fromarray(image).resize(size, Image.BILINEAR))
                sbox = [v * scale for v in box]
            faces = [f for f in detector.detect(small) if _iou(f.box, sbox) > 0.3]
            if not faces:
                continue
            found += 1
            vector = embedder.embed(embedder.align(small, faces[0].landmarks))[0]
            cos = vectors @ vector
            cos[i] = -np.inf  # not its own full-size copy
            best = int(cos.argmax())
            if cos[best] >= threshold:
                right += people[best] == people[i]
                wrong += people[best] != people[i]
        n = sum((people == p).sum() >= 2 for p in people)
        print(f"{side:7d}  {found / n:8.3f}  {right / n:11.3f}  {wrong / n:11.3f}")


def _iou(a, b) -> float:
    iw = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    union = a[2] * a[3] + b[2] * b[3] - iw * ih
    return iw * ih / union if union > 0 else 0.0


if __name__ == "__main__":
    main()
