"""The built-in replicas: they build, pass the ONNX checker, run in onnxruntime, and match the real architectures."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from math import prod
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from facerun.errors import ModelError
from facerun.zoo import replicas

ort = pytest.importorskip("onnxruntime")

REAL_YUNET = "face_detection_yunet_2023mar.onnx"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One replica cache for the module, so each replica (auraface-arch is 260 MB) is built once."""
    folder = tmp_path_factory.mktemp("facerun-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FACERUN_CACHE", str(folder))
        yield folder


@pytest.fixture
def real_yunet(models_dir) -> Path:
    return models_dir / REAL_YUNET


def session(path_or_model) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    src = path_or_model if isinstance(path_or_model, (str, Path)) else path_or_model.SerializeToString()
    return ort.InferenceSession(str(src) if isinstance(src, Path) else src, opts, providers=["CPUExecutionProvider"])


def sample_input(replica: replicas.Replica, shape=None) -> np.ndarray:
    """Image-like values for image models (0..255, then the replica's own pre-processing), normal noise otherwise."""
    rng = np.random.default_rng(7)
    shape = shape or replica.input_shape
    if replica.kind == "test":
        return rng.standard_normal(shape).astype(np.float32)
    x = rng.uniform(0, 255, shape).astype(np.float32)
    p = replica.preprocess
    return ((x - p.mean) / p.std).astype(np.float32)


def declared(value_info) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value_info.type.tensor_type.shape.dim]


# ------------------------------------------------------------------------------------- counting from the graph


def graph_counts(model: onnx.ModelProto, input_shape) -> tuple[int, int]:
    """(parameters, multiply-accumulates) of a model for one input shape, read from the ONNX graph alone.

    Parameters: every float initializer element. MACs: Conv (output elements x Cin/groups x kh x kw), Gemm and
    MatMul (output elements x the reduced dimension); elementwise work is not counted.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, n in zip(dims, input_shape):
        d.Clear()
        d.dim_value = n
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: declared(v) for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    params = sum(prod(t.dims) for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT)
    macs = 0
    for node in model.graph.node:
        out = shapes.get(node.output[0])
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            assert out and all(isinstance(d, int) for d in out), f"shape inference left {node.name} unresolved"
        if node.op_type == "Conv":
            macs += prod(out) * prod(inits[node.input[1]][1:])
        elif node.op_type == "Gemm":
            trans_b = {a.name: a.i for a in node.attribute}.get("transB", 0)
            w = inits[node.input[1]]
            macs += prod(out) * (w[1] if trans_b else w[0])
        elif node.op_type == "MatMul":
            macs += prod(out) * inits[node.input[1]][0]
    return params, macs


# ------------------------------------------------------------------------------------------- every replica


SMALL = [n for n in replicas.REPLICAS if n != "auraface-arch"]


def check_runs(name: str) -> dict[str, np.ndarray]:
    replica = replicas.REPLICAS[name]
    path = replicas.replica_path(name)
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    sess = session(path)
    assert [i.name for i in sess.get_inputs()] == [model.graph.input[0].name]
    x = sample_input(replica)
    results = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {sess.get_inputs()[0].name: x})))
    assert list(results) == [o.name for o in model.graph.output]
    for out in model.graph.output:
        got = results[out.name].shape
        want = declared(out)
        assert len(got) == len(want), out.name
        for g, w in zip(got, want):
            if isinstance(w, int) and w > 0:
                assert g == w, (out.name, got, want)
        assert np.isfinite(results[out.name]).all(), out.name
        assert np.abs(results[out.name]).max() < 100, f"{out.name} is out of a moderate range"
    return results


@pytest.mark.parametrize("name", SMALL)
def test_replica_builds_checks_and_runs(cache, name):
    check_runs(name)


def test_full_auraface_builds_checks_and_runs(cache):
    results = check_runs("auraface-arch")
    assert results["683"].shape == (1, 512)


def test_registry_entries_describe_their_models(cache):
    assert set(replicas.REPLICAS) == {"every-op", "yunet-arch", "sface-arch", "auraface-arch",
                                       "sface-arch-small", "auraface-arch-small"}
    for name, replica in replicas.REPLICAS.items():
        assert replica.name == name and replica.description and "\n" not in replica.description
        assert replica.kind in ("detector", "embedder", "test")
        assert replicas.is_replica(name)
        if name == "auraface-arch":
            continue  # its declared input is checked with the full run; avoid loading 260 MB twice
        model = onnx.load(str(replicas.replica_path(name)))
        want = declared(model.graph.input[0])
        assert len(want) == len(replica.input_shape)
        assert all(not isinstance(w, int) or w == s for w, s in zip(want, replica.input_shape))
    assert replicas.REPLICAS["yunet-arch"].kind == "detector"
    assert replicas.REPLICAS["every-op"].kind == "test"
    sface = replicas.REPLICAS["sface-arch"].preprocess
    assert (sface.color, sface.mean, sface.std) == ("RGB", 0.0, 1.0)
    aura = replicas.REPLICAS["auraface-arch"].preprocess
    assert (aura.color, aura.mean, aura.std) == ("RGB", 127.5, 127.5)
    assert not replicas.is_replica("yunet") and not replicas.is_replica("/tmp/every-op.onnx")


def test_unknown_name_is_a_model_error_listing_the_known_names(cache):
    with pytest.raises(ModelError) as info:
        replicas.replica_path("sface-arch-tiny")
    message = str(info.value)
    assert "sface-arch-tiny" in message
    assert all(name in message for name in replicas.REPLICAS)


@pytest.mark.parametrize("name", ["every-op", "yunet-arch", "sface-arch-small", "auraface-arch-small"])
def test_builds_are_reproducible(name):
    build = replicas.REPLICAS[name].build
    assert build().SerializeToString() == build().SerializeToString()


# ---------------------------------------------------------------------------------------------- embedders


@pytest.mark.parametrize("name", ["sface-arch", "sface-arch-small", "auraface-arch-small"])
def test_embedders_take_a_symbolic_batch(cache, name):
    replica = replicas.REPLICAS[name]
    path = replicas.replica_path(name)
    model = onnx.load(str(path))
    assert declared(model.graph.input[0])[0] == "N"
    assert declared(model.graph.output[0])[0] == "N"
    sess = session(path)
    faces = sample_input(replica, (3, 3, 112, 112))
    batched = sess.run(None, {sess.get_inputs()[0].name: faces})[0]
    assert batched.shape == (3, 128 if name.startswith("sface") else 512)
    for i in range(3):
        single = sess.run(None, {sess.get_inputs()[0].name: faces[i:i + 1]})[0]
        np.testing.assert_allclose(batched[i], single[0], rtol=1e-4, atol=1e-4)
    assert not np.allclose(batched[0], batched[1], atol=1e-3), "different faces should give different embeddings"


def test_sface_normalises_inside_the_graph():
    model = replicas.sface_like(width=0.25)
    first, second = model.graph.node[:2]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert first.op_type == "Sub" and first.input[0] == "data" and float(inits[first.input[1]]) == 127.5
    assert second.op_type == "Mul" and float(inits[second.input[1]]) == pytest.approx(1 / 128)


def test_sface_layers():
    model = replicas.sface_like()
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert len(convs) == 27  # stem + 13 x (depthwise, pointwise)
    assert inits[convs[0].input[1]] == (32, 3, 3, 3)
    assert sum(1 for c in convs if inits[c.input[1]][1] == 1 and inits[c.input[1]][2] == 3) == 13
    assert inits[convs[-1].input[1]] == (1024, 1024, 1, 1)
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert inits[gemm.input[1]] == (128, 1024 * 7 * 7)
    assert [n.op_type for n in model.graph.node[-4:]] == ["BatchNormalization", "Flatten", "Gemm",
                                                          "BatchNormalization"]
    assert Counter(n.op_type for n in model.graph.node)["PRelu"] == 27
    assert model.graph.output[0].name == "fc1"


def test_auraface_parameters_and_macs_match_iresnet100(cache):
    model = onnx.load(str(replicas.replica_path("auraface-arch")))
    params, macs = graph_counts(model, (1, 3, 112, 112))
    assert params == pytest.approx(65e6, rel=0.03)
    assert macs == pytest.approx(12.1e9, rel=0.03)
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Add"] == 3 + 13 + 30 + 3  # one residual addition per block
    assert ops["Conv"] == 1 + 2 * 49 + 4   # stem, two per block, four downsampling shortcuts
    assert [i.name for i in model.graph.input] == ["input.1"]
    assert declared(model.graph.output[0]) == ["N", 512]


def test_small_auraface_is_much_smaller():
    params, macs = graph_counts(replicas.REPLICAS["auraface-arch-small"].build(), (1, 3, 112, 112))
    assert params < 5e6 and macs < 0.5e9


# ------------------------------------------------------------------------------------------------ every-op


def attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_every_op_uses_each_supported_operator():
    model = replicas.every_operator()
    g = model.graph
    ops = Counter(n.op_type for n in g.node)
    required = ["Conv", "BatchNormalization", "Relu", "Sigmoid", "Clip", "LeakyRelu", "PRelu", "Add", "Sub", "Mul",
                "Div", "Transpose", "MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Gemm", "MatMul",
                "Concat", "Softmax", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Shape", "Gather", "Slice",
                "Cast", "Constant", "ConstantOfShape"]
    assert not [op for op in required if ops[op] == 0]
    assert model.opset_import[0].version == 13
    assert declared(g.input[0]) == [1, 4, 9, 7] and g.input[0].name == "input"
    assert len(g.output) >= 3

    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    convs = [n for n in g.node if n.op_type == "Conv"]
    kinds = set()
    for c in convs:
        a, w = attrs(c), inits[c.input[1]]
        if a.get("group", 1) > 1 and w.shape[1] == 1:
            kinds.add("depthwise")
        if a.get("group", 1) == 2:
            kinds.add("grouped2")
        if a.get("strides") == [2, 2]:
            kinds.add("stride2")
        if a.get("dilations") == [2, 2]:
            kinds.add("dilated2")
        pads = a.get("pads")
        if pads and (pads[0] != pads[2] or pads[1] != pads[3]):
            kinds.add("asymmetric")
        if a.get("auto_pad") in ("SAME_UPPER", b"SAME_UPPER"):
            kinds.add("same_upper")
        kinds.add(f"{w.shape[2]}x{w.shape[3]}")
        if a.get("group", 1) == 1 and w.shape[1] > 1 and w.shape[2:] == (3, 3):
            kinds.add("dense3x3")
    assert {"depthwise", "grouped2", "stride2", "dilated2", "asymmetric", "same_upper", "1x1", "5x5",
            "dense3x3"} <= kinds

    bn_sources = {producer[n.input[0]].op_type for n in g.node if n.op_type == "BatchNormalization"}
    assert bn_sources == {"Conv", "Add"}
    slopes = {inits[n.input[1]].shape for n in g.node if n.op_type == "PRelu"}
    assert {(8, 1, 1), (1, 8, 1, 1)} <= slopes
    clip = next(n for n in g.node if n.op_type == "Clip")
    assert len(clip.input) == 3 and all(clip.input)

    resizes = [n for n in g.node if n.op_type == "Resize"]
    for r in resizes:
        a = attrs(r)
        assert (a["mode"], a["coordinate_transformation_mode"], a["nearest_mode"]) == (b"nearest", b"asymmetric",
                                                                                       b"floor")
    assert any(len(r.input) == 3 and r.input[2] for r in resizes), "a Resize by scales"
    assert any(len(r.input) == 4 and r.input[3] for r in resizes), "a Resize by sizes"

    avg = attrs(next(n for n in g.node if n.op_type == "AveragePool"))
    assert avg["ceil_mode"] == 1 and avg["count_include_pad"] == 0
    assert any(attrs(n).get("pads") for n in g.node if n.op_type == "MaxPool")
    gemms = [n for n in g.node if n.op_type == "Gemm"]
    assert any(attrs(n).get("transB") == 1 and len(n.input) == 3 for n in gemms)
    assert any(n.input[1] in inits and n.input[0] not in inits for n in g.node if n.op_type == "MatMul")
    assert any(attrs(n).get("axis") == 1 for n in g.node if n.op_type == "Concat")
    assert any(attrs(n).get("axis") == -1 for n in g.node if n.op_type == "Softmax")

    # Elementwise broadcasting: per-channel, per-column, scalar, and two activations.
    operand_shapes = set()
    for n in g.node:
        if n.op_type in ("Add", "Sub", "Mul", "Div"):
            for name in n.input:
                if name in inits:
                    operand_shapes.add(inits[name].shape)
                elif producer.get(name) is not None and producer[name].op_type == "Constant":
                    operand_shapes.add(tuple(attrs(producer[name])["value"].dims))
    assert {(1, 4, 1, 1), (1, 1, 1, 7), ()} <= operand_shapes
    assert any(all(i not in inits and producer.get(i) is not None and producer[i].op_type not in ("Constant", "Cast")
                   for i in n.input) for n in g.node if n.op_type == "Div"), "a Div of two activations"
    assert any(producer.get(i) is not None and producer[i].op_type == "ConstantOfShape"
               for n in g.node if n.op_type == "Add" for i in n.input)

    # Slices: on shapes, on an activation's channels, and one with step 2.
    shape_fed = {n.name for n in g.node if n.op_type == "Slice" and producer[n.input[0]].op_type == "Shape"}
    assert shape_fed
    activation_slices = [n for n in g.node if n.op_type == "Slice" and n.name not in shape_fed]
    assert any(len(n.input) >= 4 and inits[n.input[3]].tolist() == [1] for n in activation_slices)
    assert any(len(n.input) == 5 and inits[n.input[4]].tolist() == [2] for n in activation_slices)


def test_every_op_runs_with_moderate_values_on_varied_inputs():
    sess = session(replicas.every_operator())
    rng = np.random.default_rng(3)
    for scale in (0.1, 1.0, 5.0):
        x = (rng.standard_normal((1, 4, 9, 7)) * scale).astype(np.float32)
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
        assert outs["conv_map"].shape == (1, 16, 9, 7)
        assert outs["probs"].shape == (1, 1, 8)
        np.testing.assert_allclose(outs["probs"].sum(-1), 1.0, rtol=1e-5)
        assert outs["embedding"].shape == (1, 10)
        for name, v in outs.items():
            assert np.isfinite(v).all() and np.abs(v).max() < 1e3, name


# ------------------------------------------------------------------------------------------------- YuNet


def conv_signature(node, inits) -> tuple:
    a = attrs(node)
    return (tuple(inits[node.input[1]]), len(node.input) == 3, tuple(a.get("strides", [1, 1])), a.get("group", 1),
            tuple(a.get("pads", [0, 0, 0, 0])), tuple(a.get("dilations", [1, 1])))


def test_yunet_replica_has_the_real_layers(cache, real_yunet):
    real = onnx.load(str(real_yunet))
    fake = onnx.load(str(replicas.replica_path("yunet-arch")))
    assert fake.opset_import[0].version == real.opset_import[0].version == 11
    assert Counter(n.op_type for n in fake.graph.node) == Counter(n.op_type for n in real.graph.node)
    assert [n.op_type for n in fake.graph.node] == [n.op_type for n in real.graph.node]
    shapes = {}
    for m in (real, fake):
        inits = {t.name: tuple(t.dims) for t in m.graph.initializer}
        shapes[m is real] = Counter(conv_signature(n, inits) for n in m.graph.node if n.op_type == "Conv")
    assert shapes[True] == shapes[False]
    for kind in ("Resize", "MaxPool", "Transpose"):
        want = Counter(str(sorted(attrs(n).items())) for n in real.graph.node if n.op_type == kind)
        assert Counter(str(sorted(attrs(n).items())) for n in fake.graph.node if n.op_type == kind) == want, kind
    assert graph_counts(fake, (1, 3, 640, 640))[1] == graph_counts(real, (1, 3, 640, 640))[1]


def test_yunet_replica_outputs_match_the_real_file_at_640(cache, real_yunet):
    x = np.random.default_rng(1).uniform(0, 255, (1, 3, 640, 640)).astype(np.float32)
    real, fake = session(real_yunet), session(replicas.replica_path("yunet-arch"))
    want = [(o.name, r.shape) for o, r in zip(real.get_outputs(), real.run(None, {"input": x}))]
    got = [(o.name, r.shape) for o, r in zip(fake.get_outputs(), fake.run(None, {"input": x}))]
    assert got == want
    assert [i.name for i in fake.get_inputs()] == ["input"]


@pytest.mark.parametrize("height, width", [(320, 480), (96, 64)])
def test_yunet_replica_runs_at_other_multiples_of_32(cache, height, width):
    sess = session(replicas.replica_path("yunet-arch"))
    x = np.random.default_rng(2).uniform(0, 255, (1, 3, height, width)).astype(np.float32)
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    for head, k in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)):
        for s in (8, 16, 32):
            assert outs[f"{head}_{s}"].shape == (1, (height // s) * (width // s), k)
    assert ((outs["cls_8"] > 0) & (outs["cls_8"] < 1)).all()


# -------------------------------------------------------------------------------------------------- cache


def test_replica_path_is_cached_and_atomic(tmp_path, monkeypatch):
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    first = replicas.replica_path("every-op")
    assert first.parent == tmp_path / "replicas" and first.suffix == ".onnx" and first.name.startswith("every-op-")
    stat = first.stat()

    # A second call finds the file: it must not build (the builder would raise) nor rewrite it.
    original = replicas.REPLICAS["every-op"]

    def must_not_build():
        raise AssertionError("rebuilt a cached replica")

    monkeypatch.setitem(replicas.REPLICAS, "every-op", dataclasses.replace(original, build=must_not_build))
    again = replicas.replica_path("every-op")
    assert again == first
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)

    # A write that fails half-way (a full disk) leaves neither a file nor a temporary behind.
    class FullDisk:
        def SerializeToString(self):
            raise OSError(28, "No space left on device")

    monkeypatch.setitem(replicas.REPLICAS, "every-op", dataclasses.replace(original, version=99, build=FullDisk))
    with pytest.raises(ModelError, match="No space left on device"):
        replicas.replica_path("every-op")
    assert sorted(p.name for p in (tmp_path / "replicas").iterdir()) == [first.name]

    # A new version regenerates under a new name and clears the old build, but not another replica's file.
    neighbour = tmp_path / "replicas" / ("every-op-small-" + "0" * 12 + ".onnx")
    neighbour.write_bytes(b"another replica")
    monkeypatch.setitem(replicas.REPLICAS, "every-op", dataclasses.replace(original, version=2))
    second = replicas.replica_path("every-op")
    assert second != first and second.is_file() and not first.exists() and neighbour.exists()
    onnx.checker.check_model(str(second))
    assert not [p for p in (tmp_path / "replicas").iterdir() if p.name.startswith(".")]


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path / "custom"))
    assert replicas.cache_dir() == tmp_path / "custom" / "replicas"
    monkeypatch.delenv("FACERUN_CACHE")
    if os.name == "posix" and sys.platform != "darwin":
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert replicas.cache_dir() == tmp_path / "xdg" / "facerun" / "replicas"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert replicas.cache_dir() == Path.home() / ".cache" / "facerun" / "replicas"


def test_unwritable_cache_is_a_model_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FACERUN_CACHE", str(blocker))
    with pytest.raises(ModelError, match="cannot write replica 'every-op'"):
        replicas.replica_path("every-op")


# ------------------------------------------------------------------------------------- through facerun.load


@pytest.mark.parametrize("name", ["every-op", "yunet-arch", "sface-arch-small", "auraface-arch-small", "sface-arch",
                                  pytest.param("auraface-arch", marks=pytest.mark.slow)])
def test_facerun_loads_replicas_by_name(cache, name):
    """The normal import path (a replica name given to facerun.load) agrees with onnxruntime on the same file."""
    import facerun
    replica = replicas.REPLICAS[name]
    shape = (1, 3, 128, 96) if name == "yunet-arch" else replica.input_shape
    x = sample_input(replica, shape)
    net = facerun.load(name, device="cpu")
    got = net.run(x)
    sess = session(replicas.replica_path(name))
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {sess.get_inputs()[0].name: x})))
    assert list(got) == list(want)
    for out, ref in want.items():
        np.testing.assert_allclose(got[out], ref, rtol=1e-3, atol=1e-4, err_msg=out)
