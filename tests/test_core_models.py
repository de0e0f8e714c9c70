"""The real model files against onnxruntime, batching, and the errors a user meets with bad files and inputs."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from facerun import InputError, ModelError, UnsupportedOps
from facerun.agree import compare
from facerun.bench import oracle
from facerun.cli import main
from facerun.net import load

from conftest import real_model
from onnx_graphs import save


def _against_ort(path, shape, lo=0.0, hi=255.0, seed=1):
    net = load(path)
    x = np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)
    got = net.run(x)
    want = oracle.run(oracle.session(path), {net.input_name: x})
    assert list(got) == list(want)
    for name in net.output_names:
        d = compare(name, got[name], want[name])
        assert got[name].shape == want[name].shape
        assert d.max_abs <= 1e-4 * d.range, f"{path.name} {shape} {name}: {d}"
    return net


@pytest.mark.parametrize("file", ["face_detection_yunet_2023mar.onnx", "face_detection_yunet_2022mar.onnx"])
@pytest.mark.parametrize("w,h", [(320, 320), (640, 480), (1280, 736)])
def test_yunet_files_match_onnxruntime(file, w, h):
    _against_ort(real_model(file), (1, 3, h, w))


def test_mobilefacenet_matches_onnxruntime():
    net = _against_ort(real_model("MobileFaceNet.onnx"), (1, 3, 112, 112), -2.0, 2.0)
    assert net.program((1, 3, 112, 112)).parameters == 989_952  # MODELS.md's count, after Clip fusion


def test_batch_equals_single_runs():
    # MobileFaceNet's file is fixed at batch 1 (its last Reshape is the constant [1, -1]): run_batch runs item by item
    net = load(real_model("MobileFaceNet.onnx"))
    assert not net.batch_free
    x = np.random.default_rng(3).uniform(-2, 2, size=(5, 3, 112, 112)).astype(np.float32)
    assert net.run(x)[0].shape == (1, 640), "run() is faithful to the file, as onnxruntime is"
    assert net.batch_program(x.shape) is not None, "the leading 1 of its Reshape is the batch: one program"
    batch = net.run_batch(x)[0]
    singles = np.concatenate([net.run(x[i : i + 1])[0] for i in range(5)])
    assert batch.shape == (5, 128)
    np.testing.assert_allclose(batch, singles, rtol=0, atol=1e-5 * np.abs(singles).max())


def test_programs_are_cached_per_shape():
    net = load(real_model("face_detection_yunet_2023mar.onnx"))
    a = net.program((1, 3, 320, 320))
    assert net.program((1, 3, 320, 320)) is a
    b = net.program((1, 3, 480, 640))
    assert b is not a and net.prog_shapes() == [(1, 3, 320, 320), (1, 3, 480, 640)]


def test_inputs_and_outputs_by_index_and_name():
    net = load(real_model("face_detection_yunet_2023mar.onnx"))
    x = np.random.default_rng(0).uniform(0, 255, size=(1, 3, 64, 96)).astype(np.float32)
    by_name = net.run({"input": x})
    by_index = net.run({0: x})
    assert net.output_names[0] == "cls_8"
    np.testing.assert_array_equal(by_name["cls_8"], by_index[0])
    np.testing.assert_array_equal(net.run(x[0])["kps_32"], by_name[11])  # a CHW array is a batch of one


def test_lifetimes_free_every_temporary_once():
    prog = load(real_model("face_detection_yunet_2023mar.onnx")).program((1, 3, 320, 320))
    freed = [f for s in prog.steps for f in s.frees]
    assert len(freed) == len(set(freed))
    outputs = {prog.storage(v) for _, v in prog.outputs}
    temps = {prog.storage(s.out) for s in prog.steps} - outputs
    assert temps <= set(freed) | outputs
    assert prog.peak_bytes < sum(prog.values[t].nbytes for t in temps)


# ------------------------------------------------------------------------------------------------------- errors
def _cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _one_line_error(code, output):
    assert code != 0
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]


def test_bad_files_give_one_clear_error(tmp_path):
    real = real_model("face_detection_yunet_2023mar.onnx").read_bytes()
    cases = {
        "truncated.onnx": real[: len(real) // 2],
        "corrupt.onnx": bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8)),
        "photo.onnx": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 200,
        "empty.onnx": b"",
        "text.onnx": b"hello, I am not a model\n" * 20,
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ModelError):
            load(p)
        line = _one_line_error(*_cli("inspect", str(p)))
        assert name in line
    line = _one_line_error(*_cli("parity", str(tmp_path / "missing.onnx")))
    assert "missing.onnx" in line


def test_unsupported_ops_are_listed_with_their_first_node(tmp_path):
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Tanh", ["x"], ["a"], name="first_tanh"),
        helper.make_node("Erf", ["a"], ["b"], name="the_erf"),
        helper.make_node("Tanh", ["b"], ["c"], name="second_tanh"),
        helper.make_node("Relu", ["c"], ["y"], name="fine"),
    ]
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    p = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "bad.onnx")
    with pytest.raises(UnsupportedOps) as e:
        load(p)
    assert e.value.ops == {"Tanh": "first_tanh", "Erf": "the_erf"}
    line = _one_line_error(*_cli("inspect", p))
    assert "Tanh (first at node 'first_tanh')" in line and "Erf (first at node 'the_erf')" in line


def test_wrong_input_sizes_are_clear_errors():
    path = real_model("MobileFaceNet.onnx")
    net = load(path)
    with pytest.raises(InputError, match="channels"):
        net.run(np.zeros((1, 4, 112, 112), np.float32))
    with pytest.raises(InputError, match="4-D"):
        net.run(np.zeros((112, 112), np.float32))
    # the 7x7 GDConv at the end needs a 7x7 map: 64x64 gives 4x4
    with pytest.raises(InputError, match="does not fit"):
        net.run(np.zeros((1, 3, 64, 64), np.float32))
    _one_line_error(*_cli("parity", str(path), "--size", "64x64"))
    _one_line_error(*_cli("inspect", str(path), "--size", "big"))


@pytest.mark.parametrize("file", ["face_detection_yunet_2023mar.onnx", "face_detection_yunet_2022mar.onnx",
                                  "MobileFaceNet.onnx"])
def test_cli_parity_and_inspect_on_every_shared_model(file):
    import json

    path = str(real_model(file))
    code, out = _cli("parity", path, "--json", "--steps")
    assert code == 0, out
    res = json.loads(out)
    assert res["ok"] and res["against"] == "onnxruntime" and res["first_departing_step"] is None
    assert {o["name"] for o in res["outputs"]} == set(load(path).output_names)
    assert all(o["cosine"] > 0.99999 for o in res["outputs"])
    code, out = _cli("inspect", path, "--json")
    assert code == 0, out
    info = json.loads(out)
    assert info["totals"]["steps"] == len(info["steps"]) > 10
    assert info["totals"]["macs"] == sum(s["macs"] for s in info["steps"])


def test_parity_steps_finds_a_departing_step(tmp_path, monkeypatch):
    """Break the CPU kernel of one op kind and check --steps names the first step of that kind."""
    import facerun.cpu as cpu

    path = str(real_model("face_detection_yunet_2023mar.onnx"))
    real_pool = cpu.pool
    monkeypatch.setattr(cpu, "pool", lambda x, st, shape: real_pool(x, st, shape) * 1.01)
    code, out = _cli("parity", path, "--size", "160x96", "--steps", "--json")
    import json

    res = json.loads(out)
    assert code == 1 and not res["ok"]
    prog = load(path).program((1, 3, 96, 160))
    first_pool = next(i for i, s in enumerate(prog.steps) if s.op == "MaxPool")
    assert res["first_departing_step"]["index"] == first_pool
    assert res["first_departing_step"]["op"] == "MaxPool"


def test_yunet_batch_program_equals_single_runs():
    net = load(real_model("face_detection_yunet_2023mar.onnx"))
    x = np.random.default_rng(8).uniform(0, 255, size=(3, 3, 96, 128)).astype(np.float32)
    prog = net.batch_program(x.shape)
    assert prog is not None and any("taken as the batch" in f for f in prog.folded)
    batch = net.run_batch(x)
    for name in ("cls_8", "bbox_16", "kps_32"):
        singles = np.concatenate([net.run(x[i : i + 1])[name] for i in range(3)])
        assert batch[name].shape == singles.shape
        np.testing.assert_allclose(batch[name], singles, rtol=0, atol=1e-5 * max(1.0, np.abs(singles).max()))


def mixing_model(path):
    """A batch-1 file whose graph mixes everything it is given: Reshape to [-1] then Softmax over all of it."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Reshape", ["c", "flat"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"], axis=0)]
    g = helper.make_graph(nodes, "mix", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.full((2, 3, 1, 1), 0.5, np.float32), "w"),
                           numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_a_graph_that_mixes_its_items_runs_them_one_by_one(tmp_path):
    net = load(mixing_model(tmp_path / "mix.onnx"))
    x = np.random.default_rng(9).uniform(-1, 1, size=(3, 3, 4, 4)).astype(np.float32)
    assert net.batch_program(x.shape) is None
    singles = np.concatenate([net.run(x[i : i + 1])["y"] for i in range(3)])
    np.testing.assert_allclose(net.run_batch(x)["y"], singles, rtol=1e-6)
