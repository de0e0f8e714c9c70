"""Bad inputs outside the model file: odd files given as images, huge images, numbers that are not numbers. Each is
refused in one line, before any work, never a hang, a MemoryError or an internal error."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from facerun.cli import main
from facerun.errors import FacerunError, GpuError, ImageError


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_without_reading_it(tmp_path):
    from facerun.face.images import load_image

    fifo = tmp_path / "photo.jpg"
    os.mkfifo(fifo)
    with pytest.raises(ImageError, match="not a regular file"):
        load_image(fifo)  # opening it for reading would wait for a writer forever


def test_an_image_past_the_pixel_limit_is_refused_before_decoding(tmp_path, monkeypatch):
    from facerun.face.images import load_image

    path = tmp_path / "big.png"
    Image.fromarray(np.zeros((300, 400, 3), np.uint8)).save(path)
    monkeypatch.setenv("FACERUN_MAX_PIXELS", "100000")
    with pytest.raises(ImageError, match=r"400x300 .*FACERUN_MAX_PIXELS"):
        load_image(path)
    monkeypatch.setenv("FACERUN_MAX_PIXELS", "120000")
    assert load_image(path).shape == (300, 400, 3)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "lots"])
def test_a_gpu_budget_that_is_not_a_size_is_refused(value, monkeypatch):
    from facerun.gpu.memory import budget_bytes

    monkeypatch.setenv("FACERUN_GPU_BUDGET_MB", value)
    with pytest.raises(GpuError, match="FACERUN_GPU_BUDGET_MB"):
        budget_bytes()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_tensor_limit_that_is_not_a_size_is_refused(value, monkeypatch):
    from facerun import limits

    monkeypatch.setenv("FACERUN_MAX_TENSOR_MB", value)
    with pytest.raises(FacerunError, match="FACERUN_MAX_TENSOR_MB"):
        limits.check_tensor((1, 3, 8, 8), "x")


@pytest.mark.parametrize("args", [
    ["--gpu-share", "nan", "inspect", "every-op"],
    ["compare", "a.jpg", "b.jpg", "--threshold", "nan"],
    ["identify", "a.jpg", "--known", ".", "--threshold", "nan"],
    ["detect", "a.jpg", "--score", "nan"],
])
def test_nan_options_are_usage_errors(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "not a finite number" in result.output


def _strict_json(text: str):
    import json

    def no_constants(name):
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=no_constants)


def test_nan_in_json_output_is_null(tmp_path):
    pytest.importorskip("onnxruntime")
    from onnx_graphs import one_node, save

    w = np.full((2, 3, 3, 3), np.nan, np.float32)
    path = save(one_node("Conv", (1, 3, 8, 8), {"w": w}), tmp_path / "nan.onnx")
    result = CliRunner().invoke(main, ["parity", path, "--json"])
    assert _strict_json(result.stdout)["outputs"][0]["name"] == "y0"


def test_nan_and_inf_are_written_as_null(tmp_path):
    from facerun import io
    from facerun.commands.common import json_dumps

    record = {"score": float("nan"), "box": [1.0, float("inf"), -float("inf")], "name": "a"}
    assert _strict_json(json_dumps(record)) == {"score": None, "box": [1.0, None, None], "name": "a"}
    io.write_json(tmp_path / "r.json", record)
    assert _strict_json((tmp_path / "r.json").read_text())["box"] == [1.0, None, None]


def test_drawing_infinite_or_nan_boxes_skips_them():
    from facerun.face.detect import Face
    from facerun.face.draw import draw_faces

    rgb = np.zeros((40, 60, 3), np.uint8)
    marks = np.full((5, 2), 10.0)
    faces = [Face(0.9, (np.inf, 0.0, 10.0, 10.0), marks), Face(float("nan"), (0.0, 0.0, np.nan, 5.0), marks),
             Face(0.9, (1e30, 1e30, 1e30, 1e30), marks), Face(0.9, (5.0, 5.0, 20.0, 20.0), np.full((5, 2), np.inf))]
    image = draw_faces(rgb, faces)
    drawn = np.asarray(image)
    assert drawn.shape == (40, 60, 3)
    assert drawn[5, 5:25].any() and not drawn[30:, 40:].any()  # the finite box only


@pytest.mark.parametrize("args", [["detect", "--no-such-option"], ["no-such-command"], ["detect"],
                                  ["bench", "every-op", "--runs", "many"]])
def test_usage_errors_are_one_error_line_and_exit_2(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help" in lines[0], result.stderr


def test_adapter_exits_3_when_no_adapter_is_usable(monkeypatch):
    monkeypatch.setenv("FACERUN_GPU", "off")
    result = CliRunner().invoke(main, ["adapter"])
    assert result.exit_code == 3, result.output
    result = CliRunner().invoke(main, ["adapter", "--json"])
    assert result.exit_code == 3 and _strict_json(result.stdout)["used"] is None


def test_device_gpu_without_a_gpu_exits_3(monkeypatch):
    monkeypatch.setenv("FACERUN_GPU", "off")
    result = CliRunner().invoke(main, ["parity", "sface-arch-small", "--device", "gpu"])
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_a_huge_size_is_refused_before_allocating():
    result = CliRunner().invoke(main, ["parity", "every-op", "--size", "100000x100000"])
    assert result.exit_code == 1, result.output
    assert "TiB" in result.stderr or "GiB" in result.stderr, result.stderr
    assert "FACERUN_MAX_TENSOR_MB" in result.stderr


def test_bench_pads_yunet_sizes_like_detect():
    import facerun
    from facerun.bench import bench

    net = facerun.load("yunet-arch")
    shapes = bench.shapes_for(net, "detector", bench.Settings(sizes=((320, 240),)))
    assert shapes == [(1, 3, 256, 320)]  # 240 rows padded to 256, as detect pads them
    net.program(shapes[0])  # and the model runs there (240 rows did not: a broadcast error deep inside)


def _photo(path):
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(path)
    return str(path)


def test_draw_to_one_image_name_with_several_images_is_an_error(tmp_path, models_dir):
    a, b = _photo(tmp_path / "a.png"), _photo(tmp_path / "b.png")
    result = CliRunner().invoke(main, ["detect", a, b, "--draw", str(tmp_path / "single.png")])
    assert result.exit_code == 1 and "names one image" in result.stderr, result.output
    assert not (tmp_path / "single.png").exists()


def test_out_npy_does_not_overwrite_an_unnamed_jsonl(tmp_path, models_dir):
    a = _photo(tmp_path / "a.png")
    (tmp_path / "x.jsonl").write_text("someone's notes\n")
    result = CliRunner().invoke(main, ["embed", a, "--out", str(tmp_path / "x.npy")])
    assert result.exit_code == 1 and "x.jsonl" in result.stderr, result.output
    assert (tmp_path / "x.jsonl").read_text() == "someone's notes\n" and not (tmp_path / "x.npy").exists()


def test_the_size_limits_have_flags_beside_their_variables(tmp_path, monkeypatch):
    from facerun import limits

    photo = tmp_path / "small.png"
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(photo)
    refused = CliRunner().invoke(main, ["--max-pixels", "1000", "detect", str(photo), "--device", "cpu"])
    assert refused.exit_code == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "40x30" in refused.stderr and "--max-pixels or FACERUN_MAX_PIXELS" in refused.stderr
    # the flag wins over the variable, for its run only
    monkeypatch.setenv("FACERUN_MAX_PIXELS", "1000")
    ok = CliRunner().invoke(main, ["--max-pixels", "2000", "detect", str(photo), "--device", "cpu", "--json"])
    assert ok.exit_code == 0, ok.output
    assert limits.max_pixels() == 1000
    monkeypatch.delenv("FACERUN_MAX_PIXELS")
    assert limits.max_pixels() == limits.DEFAULT_MAX_PIXELS
    tensor = CliRunner().invoke(main, ["--max-tensor-mb", "0.001", "inspect", "every-op"])
    assert tensor.exit_code == 1 and "past the limit of 1.0 KiB" in tensor.stderr
    assert limits.max_tensor_bytes() == limits.DEFAULT_MAX_TENSOR_MB << 20
    for bad in ("nan", "0", "-5", "inf"):
        usage = CliRunner().invoke(main, ["--max-tensor-mb", bad, "inspect", "every-op"])
        assert usage.exit_code == 2 and usage.stderr.startswith("error: "), bad


def test_a_huge_input_size_is_refused_before_its_canvas_is_made(tmp_path):
    # SCRFD letterboxes the photo into --input-size: 100000x100000 asked for 28 GiB and died in a MemoryError
    from conftest import real_model

    model = real_model("det_500m.onnx")
    photo = tmp_path / "small.png"
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(photo)
    result = CliRunner().invoke(main, ["detect", str(photo), "--model", str(model), "--input-size", "100000x100000",
                                       "--device", "cpu"])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "SCRFD input size 100000x100000" in result.stderr and "GiB" in result.stderr


def test_a_negative_seed_and_a_bogus_tile_are_one_line_each():
    # parity --seed -1 was an internal error (numpy refuses negative seeds); tune --tiles bogus ran every layer
    seed = CliRunner().invoke(main, ["parity", "every-op", "--seed", "-1"])
    assert seed.exit_code == 2 and seed.stderr.startswith("error: ") and len(seed.stderr.splitlines()) == 1
    tile = CliRunner().invoke(main, ["tune", "every-op", "--tiles", "bogus"])
    assert tile.exit_code == 1 and tile.stderr.strip() == "error: --tiles: not a tile: bogus"


def test_pillows_own_limit_follows_max_pixels(tmp_path):
    # a PNG header claiming 20000x15000 (300 megapixels) and no pixels: Pillow refused it past 179 megapixels in its
    # own words, whatever --max-pixels said; now facerun's limit decides either way
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path = tmp_path / "huge.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 15000, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))
    refused = CliRunner().invoke(main, ["detect", str(path), "--device", "cpu"])
    assert refused.exit_code == 1
    assert refused.stderr.strip() == (f"error: {path}: 300 megapixels, past the limit of 100 (--max-pixels or "
                                      "FACERUN_MAX_PIXELS)")  # past twice the limit: Pillow's check, facerun's words
    between = CliRunner().invoke(main, ["--max-pixels", "2e8", "detect", str(path), "--device", "cpu"])
    assert between.exit_code == 1 and "20000x15000 is 300 megapixels, past the limit of 200" in between.stderr
    allowed = CliRunner().invoke(main, ["--max-pixels", "4e8", "detect", str(path), "--device", "cpu"])
    assert allowed.exit_code == 1 and "cannot read image" in allowed.stderr  # decoded (and found empty)
