"""The model card: one answer to "which model is this, what is it, how is it fed" for every way a model is named."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import facerun
from facerun import io
from facerun.bench import bench
from facerun.commands.common import sample_input
from facerun.errors import InputError, ModelError
from facerun.onnx.read import read_model
from facerun.zoo import find, known, replicas
from facerun.zoo.card import ModelCard, Preprocess, card_for, embedder_card, identify

from conftest import real_model


def _tiny_embedder(path: Path, size: int = 64) -> Path:
    """An image model facerun has never seen: size x size -> 8x8 patches -> global mean -> an 8-d vector."""
    weight = np.random.default_rng(3).standard_normal((8, 3, 8, 8)).astype(np.float32) * 0.05
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["features"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["embedding"], axis=1),
    ]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                              ["N", 3, size, size])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7), str(path))
    return path


def _resaved(source: Path, path: Path) -> Path:
    """`source` with another doc string: the same graph under a sha256 nothing knows."""
    model = onnx.load(str(source))
    model.doc_string = "re-saved so its sha256 is unknown"
    onnx.save(model, str(path))
    return path


# -------------------------------------------------------------------------------------------------- known


def test_a_known_file_by_path_and_by_name():
    path = real_model("face_detection_yunet_2023mar.onnx")
    card = card_for(path)
    assert (card.source, card.kind, card.family, card.name) == ("known", "detector", "yunet-2023mar", "yunet-2023mar")
    assert card.label == path.name and card.path == path and card.sha256 == io.sha256_of(path)
    assert card.preprocess.bgr and card.input_range == (0.0, 255.0) and card.threshold is None
    by_name = card_for("yunet-2023mar")
    assert by_name.label == "yunet-2023mar" and by_name.sha256 == card.sha256 and by_name.kind == "detector"


def test_a_known_embedder_carries_its_preprocessing_and_threshold():
    path = real_model("MobileFaceNet.onnx")
    card = card_for(path)
    assert (card.kind, card.family, card.threshold) == ("embedder", "arcface-style", 0.39)
    assert card.false_match_rate == 0.0005  # calibrated: benchmarks/calibrate.py
    pre = card.preprocess
    assert pre.input_size == (112, 112) and not pre.bgr
    lo, hi = card.input_range
    # ImageNet statistics on 0..255: (0 - 123.675) / 58.395 .. (255 - 103.53) / 57.375
    assert lo == pytest.approx(-123.675 / 58.395) and hi == pytest.approx((255 - 103.53) / 57.375)
    net = facerun.load(path)
    assert net.card == card and net.card is net.card  # made once, carried by the Net


def test_a_renamed_known_file_is_still_known(tmp_path):
    copy = tmp_path / "detector.onnx"
    shutil.copyfile(real_model("face_detection_yunet_2022mar.onnx"), copy)
    card = card_for(copy)
    assert card.source == "known" and card.name == "yunet-2022mar" and card.family == "yunet-2022mar"


# ------------------------------------------------------------------------------------------------ replicas


def test_a_replica_by_name_and_by_its_cached_file_is_one_card():
    by_name = card_for("auraface-arch-small")
    assert (by_name.source, by_name.kind, by_name.family, by_name.name) == (
        "replica", "embedder", "arcface-style", "auraface-arch-small")
    assert by_name.preprocess.input_size == (112, 112) and by_name.input_range == (-1.0, 1.0)
    by_path = card_for(by_name.path)
    assert by_path.source == "replica" and by_path.name == "auraface-arch-small"
    assert by_path.label == by_name.path.name and by_path.input_range == by_name.input_range
    assert card_for("yunet-arch").kind == "detector" and card_for("yunet-arch").family == "yunet-2023mar"
    every = card_for("every-op")
    assert every.kind == "other" and every.preprocess is None and every.input_range == (0.0, 255.0)


def test_parity_and_bench_feed_a_replica_the_same_range():
    # auraface-arch expects (x - 127.5) / 127.5: both the parity command's input and bench's lie in [-1, 1], whether
    # the replica is named or its file is given
    for model in ("auraface-arch-small", str(replicas.replica_path("auraface-arch-small"))):
        net = facerun.load(model)
        shape = net.default_shape(1)
        parity_input = sample_input(net, shape, seed=1)
        case = bench._Case(net, bench.classify(net), shape, bench.Settings(), {})
        for x in (parity_input, case.x):
            assert -1.0 <= x.min() < -0.99 and 0.99 < x.max() <= 1.0, model
    assert bench.classify(facerun.load("auraface-arch-small")) == "embedder"


def test_a_copy_of_a_replica_under_another_build_name_is_not_that_replica(tmp_path):
    source = replicas.replica_path("every-op")
    stale = tmp_path / "every-op-000000000000.onnx"
    shutil.copyfile(source, stale)
    assert replicas.replica_of_file(source) is replicas.REPLICAS["every-op"]
    assert replicas.replica_of_file(stale) is None
    assert card_for(stale).source == "graph"


def test_the_replica_cache_follows_the_one_cache_rule(tmp_path, monkeypatch):
    monkeypatch.delenv("FACERUN_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: a relative value is ignored
    assert replicas.cache_dir() == find.cache_root() / "replicas"
    if sys.platform.startswith("linux"):
        assert replicas.cache_dir() == tmp_path / ".cache" / "facerun" / "replicas"


# ---------------------------------------------------------------------------------------- by graph shape


def test_unknown_files_are_recognised_by_their_graph(tmp_path):
    embedder = _resaved(real_model("MobileFaceNet.onnx"), tmp_path / "mine.onnx")
    card = card_for(embedder)
    assert (card.source, card.kind, card.family) == ("graph", "embedder", "arcface-style")
    assert card.preprocess is None and card.input_range == (0.0, 255.0) and card.name is None
    for name, family in (("face_detection_yunet_2023mar.onnx", "yunet-2023mar"),
                         ("face_detection_yunet_2022mar.onnx", "yunet-2022mar"), ("det_500m.onnx", "scrfd")):
        detector = card_for(_resaved(real_model(name), tmp_path / name))
        assert (detector.source, detector.kind, detector.family) == ("graph", "detector", family)


def test_graph_recognition_needs_no_real_model_and_reuses_the_compiled_program(tmp_path):
    net = facerun.load(_tiny_embedder(tmp_path / "tiny.onnx"))
    assert net.card.source == "graph" and net.card.kind == "embedder"
    assert net.prog_shapes() == [(1, 3, 64, 64)]  # compiled once for the card; the first run uses it
    net.run(np.zeros((1, 3, 64, 64), np.float32))
    assert net.prog_shapes() == [(1, 3, 64, 64)]
    # a larger fixed input is not taken for an embedder
    big = card_for(_tiny_embedder(tmp_path / "big.onnx", size=320))
    assert big.kind == "detector" and big.family is None


def test_a_graph_that_is_no_image_model_is_other(tmp_path):
    from onnx_graphs import one_node, save

    path = save(one_node("Relu", [2, 5]), tmp_path / "relu.onnx")
    assert card_for(path).kind == "other" and bench.classify(facerun.load(path)) == "other"


# ------------------------------------------------------------------------------------------------- described


def test_a_sidecar_describes_an_embedder(tmp_path):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    (tmp_path / "tiny.json").write_text(json.dumps({"input_size": [64, 64], "mean": 127.5, "std": [64, 64, 64],
                                                    "bgr": True, "threshold": 0.5}))
    card = card_for(path)
    assert (card.source, card.kind, card.family, card.threshold) == ("sidecar", "embedder", "arcface-style", 0.5)
    assert card.sidecar == tmp_path / "tiny.json" and card.preprocess.bgr
    assert card.preprocess.describe() == "64x64 BGR (x-127.5)/64"
    assert card.input_range == (-127.5 / 64, 127.5 / 64)
    (tmp_path / "tiny.json").write_text(json.dumps({"mean": 0}))
    with pytest.raises(ModelError, match="needs at least mean and std"):
        card_for(path)


def test_an_embedder_described_by_the_caller(tmp_path):
    card = card_for(_tiny_embedder(tmp_path / "tiny.onnx"))
    given = embedder_card(card, {"mean": "127.5", "std": 127.5}, declared_size=(64, 64))
    assert given.source == "given" and given.kind == "embedder" and given.preprocess.input_size == (64, 64)
    assert given.input_range == (-1.0, 1.0) and given.threshold is None
    with pytest.raises(ModelError, match="--std") as refused:
        embedder_card(card, {"mean": 127.5}, declared_size=(64, 64))
    assert "tiny.onnx" in str(refused.value) and card.sha256[:12] in str(refused.value)
    with pytest.raises(ModelError, match="--input-size, --mean, --std are missing"):
        embedder_card(card, {"bgr": True}, declared_size=None)
    with pytest.raises(InputError, match="std 1,0,1 must be above 0"):
        embedder_card(card, {"mean": 0, "std": "1,0,1"}, declared_size=(64, 64))
    # a known model's values are overridden by what is given, and it stays known
    known_card = card_for("sface-arch-small")
    overridden = embedder_card(known_card, {"mean": 10}, declared_size=(112, 112))
    assert overridden.source == "replica" and overridden.preprocess.mean == (10.0, 10.0, 10.0)


@pytest.mark.parametrize("given, refused", [
    ({"mean": 127.5, "std": 1e-45}, r"std 1e-45 scales pixels to ±1.28e\+47; a std of at least 0.0128 keeps"),
    ({"mean": 127.5, "std": 0.001}, "scales pixels to ±1.28e"),
    ({"mean": 127.5, "std": -1}, "std -1 must be above 0"),
    ({"mean": 127.5, "std": "nan"}, "std must be finite"),
    ({"mean": "inf", "std": 1}, "mean must be finite"),
    ({"mean": 300, "std": 1}, "mean 300 is not a pixel value"),
    ({"mean": -1, "std": 1}, "mean -1 is not a pixel value"),
])
def test_pre_processing_that_makes_no_sense_is_refused(tmp_path, given, refused):
    card = card_for(_tiny_embedder(tmp_path / "tiny.onnx"))
    with pytest.raises(InputError, match=refused) as e:
        embedder_card(card, given, declared_size=(64, 64))
    assert "\n" not in str(e.value)
    assert embedder_card(card, {"mean": 127.5, "std": 0.02}, declared_size=(64, 64)).input_range[1] < 1e4


def test_a_sidecar_with_nonsense_values_is_refused(tmp_path):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    (tmp_path / "tiny.json").write_text('{"input_size": 64, "mean": 127.5, "std": 1e-45}')
    with pytest.raises(InputError, match="tiny.json: std 1e-45 scales pixels"):
        card_for(path)
    (tmp_path / "tiny.json").write_text('{"input_size": 64, "mean": 127.5, "std": 128, "threshold": NaN}')
    with pytest.raises(ModelError, match="threshold must be a number from -1 to 1"):
        card_for(path)


# ------------------------------------------------------------------------------------------------- plumbing


def test_load_takes_a_card_and_keeps_its_label(tmp_path):
    card = identify("sface-arch-small")
    assert isinstance(card, ModelCard) and identify(card) is card
    net = facerun.load(card)
    assert net.card is card and net.label == "sface-arch-small"
    with pytest.raises(ModelError, match="not a file, a known model"):
        identify("no-such-model-here")


def test_one_sha256_for_reading_and_identifying(tmp_path):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    assert read_model(path).sha256 == io.sha256_of(path) == card_for(path).sha256
    assert known.sha256_of is io.sha256_of


def test_inspect_shows_the_card():
    from click.testing import CliRunner

    from facerun.cli import main

    shown = CliRunner().invoke(main, ["inspect", "auraface-arch-small"])
    assert shown.exit_code == 0, shown.output
    assert "card embedder, arcface-style, replica auraface-arch-small; 112x112 RGB (x-127.5)/127.5" in shown.stdout
    data = json.loads(CliRunner().invoke(main, ["inspect", "auraface-arch-small", "--json"]).stdout)
    assert data["card"]["source"] == "replica" and data["card"]["preprocess"]["mean"] == [127.5] * 3


@pytest.mark.parametrize("bgr", [False, True])
@pytest.mark.parametrize("mean, std", [((127.5,) * 3, (128.0,) * 3), ((123.7, 116.3, 103.5), (58.4, 57.1, 57.4))])
def test_preprocess_is_the_formula_bit_for_bit(bgr, mean, std):
    """(x - mean) / std a channel, in the model's channel order, planes first: the very floats of the plain sum."""
    faces = np.random.default_rng(2).integers(0, 256, (5, 112, 96, 3), dtype=np.uint8)
    x = faces[..., ::-1] if bgr else faces
    want = ((x.astype(np.float32) - np.float32(mean)) / np.float32(std)).transpose(0, 3, 1, 2)
    got = Preprocess((96, 112), mean, std, bgr).apply(faces)
    assert got.shape == (5, 3, 112, 96) and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
