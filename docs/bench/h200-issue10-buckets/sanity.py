"""H200 sanity: a photo masked in a bucket program gives its own program's outputs (max abs diff per case)."""
import numpy as np
from facerun.net import load
from facerun.gpu.model import GpuModel
from facerun.face.yunet import crop_2023
n = load('yunet-2023mar')
m = GpuModel()
print(m.device_name)
rng = np.random.default_rng(0)
for (H, W), (h, w) in [((128, 128), (96, 64)), ((768, 1024), (704, 1024)), ((1280, 896), (1280, 864)),
                       ((640, 640), (480, 640)), ((384, 512), (288, 416))]:
    big, small = n.program((1, 3, H, W)), n.program((1, 3, h, w))
    x = rng.uniform(0, 255, (1, 3, h, w)).astype(np.float32)
    xb = np.zeros((1, 3, H, W), np.float32)
    xb[:, :, :h, :w] = x
    got = crop_2023(m.compile(big).run({'input': xb}, photo=(h, w)), (H, W), (h, w))
    want = m.compile(small).run({'input': x})
    print((H, W), (h, w), max(float(np.abs(got[k] - want[k]).max()) for k in want))
