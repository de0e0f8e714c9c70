"""Photos run in a larger program, masked to their own size (facerun/gpu/masking.py, epilogue.wgsl's mask): which
programs stay exact so (without a device), and on the device that a masked run gives the photo's own program's
outputs, that the detector's faces do not change, and that a library meets fewer programs."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import FACES, YUNET

import facerun
from facerun import counters
from facerun import program as P
from facerun.errors import InputError
from facerun.face import yunet
from facerun.face.images import load_image
from facerun.gpu.fusion import head_groups, separable_pairs
from facerun.gpu.lower import lower
from facerun.gpu.masking import mask_sizes, maskable
from facerun.gpu.model import _no_consts
from facerun.gpu.plan import Limits

from gpu_fixtures import Builder

RELU = P.Activation("relu")


def _conv(b: Builder, x: int, cin: int, cout: int, out_hw, k: int = 3, stride: int = 1, pad: int = 1, act=RELU):
    w = np.random.default_rng(cout).normal(size=(cout, cin, k, k)).astype(np.float32)
    return b.step(P.Conv, (1, cout, *out_hw), x=x, weight=w, bias=np.ones(cout, np.float32), groups=1,
                  stride=(stride, stride), dilation=(1, 1), pads=(pad,) * 4, act=act)


def _two_convs(between) -> P.Program:
    """input 64x64 -> 3x3 conv -> `between` -> 3x3 conv: whether the second conv's input is zero past the photo
    decides it."""
    b = Builder()
    x = b.input("input", (1, 3, 64, 64))
    y = _conv(b, x, 3, 4, (64, 64), act=None)
    y = between(b, y)
    return b.program(_conv(b, y, 4, 4, (64, 64)))


def test_yunet_2023mar_is_maskable_at_every_size_and_2022mar_is_not():
    net = facerun.load("yunet-2023mar")
    for shape in ((1, 3, 640, 640), (1, 3, 384, 1280), (1, 3, 96, 64)):
        assert maskable(net.program(shape), 32) is None
    # a photo size must be a multiple of the alignment the program's strides divide
    assert "multiple" in maskable(net.program((1, 3, 640, 640)), 7)
    if not YUNET.parent.joinpath("face_detection_yunet_2022mar.onnx").exists():
        pytest.skip(f"YuNet 2022mar not in {YUNET.parent}")
    old = facerun.load(str(YUNET.parent / "face_detection_yunet_2022mar.onnx"))
    assert "MaxPool" in maskable(old.program((1, 3, 640, 640)), 32)


def test_a_relu_keeps_zeros_and_a_constant_added_does_not():
    relu = _two_convs(lambda b, y: b.step(P.Unary, (1, 4, 64, 64), x=y, act=RELU))
    assert maskable(relu, 32) is None
    sigmoid = _two_convs(lambda b, y: b.step(P.Unary, (1, 4, 64, 64), x=y, act=P.Activation("sigmoid")))
    assert "not zero past the photo" in maskable(sigmoid, 32)
    shifted = _two_convs(lambda b, y: b.step(P.Binary, (1, 4, 64, 64), a=y, b=b.const("c", np.ones((1, 4, 1, 1))),
                                             kind="add"))
    assert "not zero past the photo" in maskable(shifted, 32)
    # a constant image (a grid of the input's size) would be another in the photo's own program
    grid = _two_convs(lambda b, y: b.step(P.Binary, (1, 4, 64, 64), a=y, b=b.const("g", np.ones((1, 4, 64, 64))),
                                          kind="mul"))
    assert "rows and columns of its own" in maskable(grid, 32)
    # a batch norm left unfused shifts the zeros too
    norm = _two_convs(lambda b, y: b.step(P.Affine, (1, 4, 64, 64), x=y, scale=np.ones(4, np.float32),
                                          shift=np.ones(4, np.float32)))
    assert "not zero past the photo" in maskable(norm, 32)


def test_overlapping_pools_and_unpadded_convolutions_are_not_maskable():
    b = Builder()
    x = b.input("input", (1, 3, 64, 64))
    y = _conv(b, x, 3, 4, (64, 64))
    b.step(P.Pool, (1, 4, 32, 32), x=y, kind="max", kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1))
    assert "overlap" in maskable(b.program(len(b.values) - 1), 32)
    b = Builder()
    x = b.input("input", (1, 3, 64, 64))
    assert "not the input's size" in maskable(b.program(_conv(b, x, 3, 4, (62, 62), pad=0)), 32)


@pytest.mark.parametrize("separable", [True, False])
def test_every_convolution_output_writer_carries_its_mask_and_winograds_products_do_not(separable):
    prog = facerun.load("yunet-2023mar").program((1, 3, 480, 640))
    low = lower(prog, Limits(), _no_consts, separable=separable)
    # a depthwise 3x3 made in its 1x1's pass has no writer of its own: that pass writes its output, masked; a head
    # group's pass writes every member's output, masked as one output of all their channels
    groups = {id(g[0].pw): g for g in head_groups(prog)} if separable else {}
    grouped = {id(st) for g in groups.values() for h in g for st in (h.pw, h.dw)}
    fused = {d.node for d in low.dispatches if d.kernel.stem == "separable"}
    pairs = {k: dw for k, dw in separable_pairs(prog).items()
             if next(st.node for st in prog.steps if id(st) == k) in fused and k not in grouped}
    folded = {id(dw) for dw in pairs.values()}
    writers = []  # (rows, columns, elements an item) of each output written through the mask
    for st in prog.steps:
        if isinstance(st, P.Conv) and id(st) not in folded and (id(st) in groups or id(st) not in grouped):
            c, h, w = prog.values[pairs.get(id(st), st).out].shape[1:]
            if id(st) in groups:
                c = sum(m.pw.weight.shape[0] for m in groups[id(st)])
            writers.append((h, w, c * h * w))
    masked = [d for d in low.dispatches if d.mask is not None]
    assert [d.mask for d in masked] == writers  # one writer each (a split's reduce, Winograd's output transform)
    assert sum(d.kernel.stem == "separable" for d in masked) == len(pairs) + len(groups) == (6 if separable else 0)
    assert len(groups) == (3 if separable else 0)
    assert all(d.kernel.file != "winograd.wgsl" or d.kernel.entry == "output" for d in masked)
    # the photo's region of each output: its rows and columns over the output's factor
    assert mask_sizes([(60, 80), (15, 20)], (480, 640), (448, 320)) == [(56, 40), (14, 10)]


def test_the_bucket_setting_is_checked(monkeypatch):
    from facerun.face.detect import PHOTO_BUCKET, photo_bucket

    monkeypatch.delenv("FACERUN_PHOTO_BUCKET", raising=False)
    assert photo_bucket() == PHOTO_BUCKET
    monkeypatch.setenv("FACERUN_PHOTO_BUCKET", "256")
    assert photo_bucket() == 256
    for bad in ("100", "0", "big"):
        monkeypatch.setenv("FACERUN_PHOTO_BUCKET", bad)
        with pytest.raises(InputError, match="multiple of 32"):
            photo_bucket()
    assert yunet.bucket_size(480, 640, 128) == (512, 640) and yunet.bucket_size(96, 32, 128) == (128, 128)


# ---------------------------------------------------------------------------------------------------- on the device


def _own_and_masked(model, net, rgb, bucket: int):
    """YuNet's outputs for `rgb`: its own program's, and those of the bucket's program masked to it, cut."""
    shape = yunet.padded_size(*rgb.shape[:2])
    big = yunet.bucket_size(*shape, bucket)
    own = model.compile(net.program((1, 3, *shape))).run_image(rgb)
    masked = model.compile(net.program((1, 3, *big))).run_image(rgb, photo=shape)
    unmasked = model.compile(net.program((1, 3, *big))).run_image(rgb)
    return own, yunet.crop_2023(masked, big, shape), yunet.crop_2023(unmasked, big, shape)


def test_a_masked_run_gives_the_photos_own_outputs(gpu_model):
    net = facerun.load("yunet-2023mar")
    rng = np.random.default_rng(3)
    photos = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((97, 200), (250, 130), (64, 300))]
    photos += [load_image(p)[:, :200] for p in sorted(FACES.glob("Anthony_Hopkins/*.jpg"))[:1]]  # 250x200
    for rgb in photos:
        own, masked, unmasked = _own_and_masked(gpu_model, net, rgb, 256)
        for name, want in own.items():
            scale = max(1.0, float(np.abs(want).max()))
            assert np.abs(masked[name] - want).max() <= 1e-5 * scale, name
        # the mask is what makes it so: the larger program alone sees its zero rows through every layer
        assert max(float(np.abs(unmasked[k] - own[k]).max()) for k in own) > 1e-3


def test_a_program_that_cannot_mask_refuses_a_smaller_photo(gpu_model):
    from facerun.errors import GpuError

    sigmoid = _two_convs(lambda b, y: b.step(P.Unary, (1, 4, 64, 64), x=y, act=P.Activation("sigmoid")))
    gp = gpu_model.compile(sigmoid)
    x = np.zeros((1, 3, 64, 64), np.float32)
    with pytest.raises(GpuError, match="cannot run a smaller photo exactly"):
        gp.run({"input": x}, photo=(32, 32))
    with pytest.raises(GpuError, match="does not fit"):
        gp.run({"input": x}, photo=(48, 32))  # not a multiple of the alignment
    assert gp.run({"input": x}, photo=(64, 64))  # the whole input: no mask


def test_the_detector_finds_the_same_faces_in_fewer_programs(gpu, monkeypatch):
    from facerun.face.detect import Detector

    wider = FACES.parent / "wider" / "images"
    if not wider.exists():
        pytest.skip(f"no WIDER photos in {wider}")
    # WIDER photos are 1024 wide and of many heights: shrunk to 480 wide, one photo of each padded size
    by_size = {}
    for rgb in map(load_image, sorted(wider.rglob("*.jpg"))[:12]):
        fitted = yunet.shrunk_size(rgb.shape[1], rgb.shape[0], 480)
        by_size.setdefault(yunet.padded_size(fitted[1], fitted[0]), rgb)
    photos = list(by_size.values())
    found, programs = {}, {}
    for bucket in ("128", "32"):
        monkeypatch.setenv("FACERUN_PHOTO_BUCKET", bucket)
        detector = Detector("yunet-2023mar", device="gpu", max_side=480)
        before = counters.snapshot()
        found[bucket] = [detector.detect(rgb) for rgb in photos]
        programs[bucket] = counters.since(before).get("gpu_programs_compiled", 0)
        assert detector.net.gpu.masks_agree is (True if bucket == "128" else None)
    buckets = {yunet.bucket_size(*size, 128) for size in by_size}
    assert len(buckets) < len(by_size) > 2 and programs["128"] < programs["32"]
    for a, b in zip(found["128"], found["32"]):
        assert len(a) == len(b)
        for fa, fb in zip(a, b):
            assert abs(fa.score - fb.score) <= 1e-5 and np.allclose(fa.box, fb.box, atol=1e-3)


def test_a_mask_that_disagrees_in_the_check_leaves_photos_in_their_own_programs(gpu, caplog, monkeypatch):
    import dataclasses

    from facerun.face.detect import Detector

    # the family's layout with a crop that takes the wrong rows: the check's masked run then differs from the CPU's
    layout_of = yunet.YuNet.photo_layout

    def wrong_rows(family, bucket, score=None):
        right = layout_of(family, bucket, score)
        return dataclasses.replace(right, crop=lambda out, big, photo: {k: v[:, ::-1] for k, v in right.crop(
            out, big, photo).items()})

    monkeypatch.setattr(yunet.YuNet, "photo_layout", wrong_rows)
    detector = Detector("yunet-2023mar", device="gpu")
    cpu = Detector("yunet-2023mar", device="cpu")
    rgb = np.random.default_rng(9).integers(0, 256, (200, 300, 3), dtype=np.uint8)
    rgb[40:160, 100:220] = 200
    faces = detector.detect(rgb)
    assert detector.net.gpu.masks_agree is False and detector.net.gpu.active
    assert "programs of their own size" in caplog.text
    want = cpu.detect(rgb)
    assert len(faces) == len(want) and all(abs(a.score - b.score) <= 1e-3 for a, b in zip(faces, want))
