"""The command line as a whole: help, global options, and replica names everywhere."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

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


def test_global_options_work_after_the_command_too(tmp_path):
    from facerun import limits

    try:
        args = ["inspect", "every-op", "--json", "--gpu-concurrency", "3", "--gpu-share", "0.5"]
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0, out.output
        assert pace.get_pace() == (3, 0.5)
    finally:
        pace.set_pace(None, None)
    photo = tmp_path / "small.png"
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(photo)
    before = CliRunner().invoke(main, ["--max-pixels", "1000", "detect", str(photo), "--device", "cpu"])
    after = CliRunner().invoke(main, ["detect", str(photo), "--device", "cpu", "--max-pixels", "1000"])
    assert after.exit_code == before.exit_code == 1 and after.stderr == before.stderr
    assert limits.max_pixels() == limits.DEFAULT_MAX_PIXELS  # for that run only
    # a subcommand of a group takes them too, and no command's own --help lists them
    tensor = CliRunner().invoke(main, ["bench", "models", "every-op", "--paths", "cpu", "--max-tensor-mb", "0.001"])
    assert "past the limit of 1.0 KiB" in tensor.output, tensor.output  # bench says so in the row it skips
    assert "--max-pixels" not in CliRunner().invoke(main, ["detect", "--help"]).output


def test_parity_on_an_embedder_replica_feeds_its_normalised_range():
    out = CliRunner().invoke(main, ["parity", "auraface-arch-small", "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert res["ok"] and res["outputs"][0]["shape"] == [1, 512] and res["outputs"][0]["cosine"] > 0.99999


@pytest.mark.parametrize("name", sorted(replicas.REPLICAS))
def test_parity_and_inspect_on_every_replica(name):
    out = CliRunner().invoke(main, ["inspect", name, "--json"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.stdout)
    assert info["totals"]["steps"] > 0 and info["totals"]["macs"] > 0
    size = ["--size", "160x96"] if name == "yunet-arch" else []
    out = CliRunner().invoke(main, ["parity", name, "--json", *size])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["ok"]


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


# every command that takes a model has the one --models DIR (cluster works on a database alone)
MODEL_COMMANDS = ["detect", "evaluate", "embed", "compare", "identify", "index", "search", "parity", "inspect",
                  "tune", "bench", "models"]


def test_every_command_taking_a_model_has_models_dir():
    assert set(MODEL_COMMANDS) | {"cluster", "adapter"} == set(COMMANDS)
    for name in MODEL_COMMANDS:
        out = CliRunner().invoke(main, [name, "--help"])
        assert "--models DIR" in out.output, name
    missing = CliRunner().invoke(main, ["inspect", "every-op", "--models", "/no/such/folder"])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


def test_models_dir_is_searched_by_file_name_and_only_for_its_run(tmp_path):
    import shutil

    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(replicas.replica_path("every-op"), folder / "my-net.onnx")
    for args in (["inspect", "my-net.onnx", "--json"], ["parity", "my-net.onnx", "--json"]):
        found = CliRunner().invoke(main, [*args, "--models", str(folder)])
        assert found.exit_code == 0, found.output
        # the next run without --models does not search the folder any more
        gone = CliRunner().invoke(main, args)
        assert gone.exit_code == 1 and "my-net.onnx" in gone.stderr and str(folder) not in gone.stderr


def test_detect_finds_its_model_in_models_dir(tmp_path):
    import shutil

    from conftest import DATA, real_model

    photo = DATA / "faces" / "obama" / "obama.jpg"
    if not photo.exists():
        pytest.skip(f"{photo} not found (set FACERUN_DATA)")
    shutil.copy(real_model("face_detection_yunet_2022mar.onnx"), tmp_path / "detector.onnx")
    out = CliRunner().invoke(main, ["detect", str(photo), "--model", "detector.onnx", "--models", str(tmp_path),
                                    "--json", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.stdout)[0]["faces"]) == 1


def test_a_replica_run_says_its_weights_are_random_on_stderr_only():
    out = CliRunner().invoke(main, ["inspect", "sface-arch-small", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["totals"]["steps"] > 0  # not in the data
    assert out.stderr.splitlines() == ["note: sface-arch-small is a built-in replica with random weights: its "
                                       "embeddings mean nothing, its timings and parity do"]
    real = CliRunner().invoke(main, ["inspect", "yunet-2023mar", "--json"])  # the shipped model: nothing to say
    assert real.exit_code == 0 and real.stderr == ""
    failed = CliRunner().invoke(main, ["tune", "every-op", "--shape", "1,x,3"])  # an error stays the only line
    assert failed.exit_code == 1 and len(failed.stderr.splitlines()) == 1


def test_models_cache_gives_the_replica_cache_size_and_clears_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path))
    built = replicas.replica_path("every-op")
    assert built.parent == tmp_path / "replicas"
    usage = json.loads(CliRunner().invoke(main, ["models", "cache", "--json"]).stdout)
    assert usage == {"path": str(tmp_path / "replicas"), "files": 1, "bytes": built.stat().st_size}
    listed = json.loads(CliRunner().invoke(main, ["models", "list", "--json"]).stdout)
    assert listed["replica_cache"] == usage
    assert "replica cache: " in CliRunner().invoke(main, ["models", "list"]).stdout
    cleared = CliRunner().invoke(main, ["models", "cache", "--clear"])
    assert cleared.exit_code == 0 and "removed 1 replica file" in cleared.stdout and not built.exists()
