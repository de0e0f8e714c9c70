"""An FPN's upsample and add in one dispatch: a nearest resize whose output only an Add reads writes the sum itself
(gpu/fusion.py `fusions`, shaders/resize.wgsl `add`). The same f32 sum as the Add's own kernel, so the outputs are
the unfused ones bit for bit; where the Add broadcasts, or its other operand is made after the resize, or something
else reads the resize's output, nothing is folded."""

from __future__ import annotations

import collections

import numpy as np

import facerun
from facerun import program as P
from facerun.gpu import kernels as K
from facerun.gpu import tune
from facerun.gpu.fusion import fusions

from gpu_fixtures import Builder


def _fpn(other_first: bool = True, other_shape=(1, 4, 8, 8), second_reader: bool = False):
    """z (1,4,4,4) upsampled to 8x8 and added to y = relu-conv(x): y made before the resize (or after it)."""
    b = Builder()
    x = b.input("x", (1, 4, 8, 8))
    z = b.input("z", (1, 4, 4, 4))
    w = np.random.default_rng(1).normal(size=(4, 4, 1, 1)).astype(np.float32)

    def conv():
        return b.step(P.Conv, (1, 4, 8, 8), x=x, weight=w, bias=None, groups=1, stride=(1, 1), dilation=(1, 1),
                      pads=(0, 0, 0, 0), act=P.Activation("relu"))

    y = conv() if other_first else None
    maps = np.repeat(np.arange(4, dtype=np.int32), 2)
    up = b.step(P.Resize, (1, 4, 8, 8), x=z, src_y=maps, src_x=maps)
    if y is None:
        y = conv()
    other = y if other_shape == (1, 4, 8, 8) else b.input("c", other_shape)
    s = b.step(P.Binary, (1, 4, 8, 8), a=up, b=other, kind="add")
    outs = [s, y]
    if second_reader:
        outs.append(b.step(P.Unary, (1, 4, 8, 8), x=up, act=P.Activation("relu")))
    return b.program(*outs)


def test_the_add_after_a_resize_is_folded_only_where_it_can_be_and_gives_the_same_sum(gpu_model):
    prog = _fpn()
    [fusion] = fusions(prog).values()
    assert type(fusion.step) is P.Binary and fusion.addend == prog.steps[0].out  # y, the conv's output
    gp = gpu_model.compile(prog)
    assert [d.kernel.stem for d in gp.dispatches][1:] == ["resize"] and len(gp.dispatches) == 2  # no binary
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(1, 4, 8, 8)).astype(np.float32),
             "z": rng.normal(size=(1, 4, 4, 4)).astype(np.float32)}
    out = gp.run(feeds)
    names = [name for name, _ in prog.outputs]
    y = out[names[1]]
    want = feeds["z"].repeat(2, axis=2).repeat(2, axis=3) + y  # the f32 sum the Add's kernel makes
    assert np.array_equal(out[names[0]], want)
    # nothing is folded where the Add broadcasts, its other operand comes later, or the resize has other readers
    assert not fusions(_fpn(other_shape=(1, 4, 1, 1)))  # broadcast: the resize writes one value per output
    assert not fusions(_fpn(other_first=False))  # the addend does not exist yet when the resize runs
    assert not fusions(_fpn(second_reader=True))  # the resize's own output is needed too


def test_yunet_640_runs_without_elementwise_dispatches(gpu_model, models_dir):
    net = facerun.load(models_dir / "face_detection_yunet_2023mar.onnx", device="cpu")
    gp = gpu_model.compile(net.program((1, 3, 640, 640)))
    families = collections.Counter(tune.family_of(d) for d in gp.dispatches)
    assert "elementwise" not in families and families["resize"] == 2  # its two upsample-and-adds, one dispatch each
    # 15 of its 26 pairs of a 1x1 and its depthwise 3x3 run in one pass each (plan.SEPARABLE_MAX_PRODUCTS: the
    # heads and the 1x1s of up to 16 -> 32 channels): 59 dispatches without that; its four 2x2 max pools are read
    # by the 1x1s after them (test_gpu_pooled.py): 44 without that; the four heads of each of its three strides run
    # in one pass a stride (test_gpu_heads.py): 40 without that
    assert len(gp.dispatches) == 31 and families["separable"] == 3 and families["heads"] == 3
    assert "pool" not in families and sum(d.kernel == K.separable(4, heads=True) for d in gp.dispatches) == 3
