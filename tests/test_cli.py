"""The command line as a whole: help, global options, and replica names everywhere."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from facerun.cli import COMMANDS, main
from facerun.gpu import pace
from facerun.zoo import replicas


def test_help_lists_every_command():
    out = CliRunner().invoke(main, ["--help"])
    assert out.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in out.output
        sub = CliRunner().invoke(main, [name, "--help"])
        assert sub.exit_code == 0 and "Usage:" in sub.output, name


def test_global_pace_options_set_the_gpu_pace():
    try:
        args = ["--gpu-concurrency", "2", "--gpu-share", "0.25", "inspect", "every-op", "--json"]
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0, out.output
        assert pace.get_pace() == (2, 0.25)
        assert pace.rest_after(0.1, 0.25) == 0.1 * 0.75 / 0.25
    finally:
        pace.set_pace(None, None)
    bad = CliRunner().invoke(main, ["--gpu-share", "2", "inspect", "every-op"])
    assert bad.exit_code != 0


def test_parity_on_an_embedder_replica_feeds_its_normalised_range():
    out = CliRunner().invoke(main, ["parity", "auraface-arch-small", "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)
    assert res["ok"] and res["outputs"][0]["shape"] == [1, 512] and res["outputs"][0]["cosine"] > 0.99999


@pytest.mark.parametrize("name", sorted(replicas.REPLICAS))
def test_parity_and_inspect_on_every_replica(name):
    out = CliRunner().invoke(main, ["inspect", name, "--json"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.output)
    assert info["totals"]["steps"] > 0 and info["totals"]["macs"] > 0
    size = ["--size", "160x96"] if name == "yunet-arch" else []
    out = CliRunner().invoke(main, ["parity", name, "--json", *size])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["ok"]


def test_parity_counts_the_same_nan_on_both_sides_as_agreeing(tmp_path):
    # sqrt(x - 128) over the seeded 0..255 input: NaN wherever x < 128, in onnxruntime and in facerun alike
    pytest.importorskip("onnxruntime")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Sub", ["x", "c"], ["shifted"]), helper.make_node("Sqrt", ["shifted"], ["y"])]
    graph = helper.make_graph(nodes, "sqrt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(np.array(128.0, np.float32), "c")])
    path = tmp_path / "sqrt.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    out = CliRunner().invoke(main, ["parity", str(path), "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)  # valid JSON: no bare NaN
    assert result["ok"] and 10 < result["outputs"][0]["nonfinite"] < 54
    text = CliRunner().invoke(main, ["parity", str(path)])
    assert text.exit_code == 0 and "NaN/inf on both" in text.stdout
