"""Whether a photo run in a larger program, masked to its size, gives its own program's outputs on this GPU: YuNet
2023mar on seeded inputs at a few (program, photo) sizes, the largest difference over every output, with and
without the mask (without it the zero rows past the photo reach every layer's edge).

    python benchmarks/masked_photos.py [--cases N]   # FACERUN_ALLOW_SOFTWARE=1 on a machine with lavapipe only

Prints one line per case: the program's and the photo's rows x columns, max |masked - own| (0 where the kernels
are the same), max |unmasked - own|.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import facerun
from facerun.errors import FacerunError
from facerun.face.yunet import crop_2023
from facerun.gpu.model import GpuModel

CASES = [((128, 128), (96, 64)), ((384, 512), (288, 416)), ((640, 640), (480, 640)), ((768, 1024), (704, 1024)),
         ((1280, 896), (1280, 864))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=len(CASES), help="the first N cases only")
    args = parser.parse_args()
    try:
        net = facerun.load("yunet-2023mar")
        model = GpuModel()
    except FacerunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(model.device_name)
    rng = np.random.default_rng(0)
    for (h, w), photo in CASES[: args.cases]:
        big, own = net.program((1, 3, h, w)), net.program((1, 3, *photo))
        x = rng.uniform(0, 255, (1, 3, *photo)).astype(np.float32)
        padded = np.zeros((1, 3, h, w), np.float32)
        padded[:, :, : photo[0], : photo[1]] = x
        gp = model.compile(big)
        masked = crop_2023(gp.run({"input": padded}, photo=photo), (h, w), photo)
        unmasked = crop_2023(gp.run({"input": padded}), (h, w), photo)
        want = model.compile(own).run({"input": x})
        worst = max(float(np.abs(masked[k] - want[k]).max()) for k in want)
        plain = max(float(np.abs(unmasked[k] - want[k]).max()) for k in want)
        print(f"{h}x{w} program, {photo[0]}x{photo[1]} photo: masked {worst:.3g}, unmasked {plain:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
