"""The replay list (gpu/replay.py): runs recorded through wgpu-native's C calls (through ctypes holding the
interpreter lock, or through cffi) give the API path's outputs bit for bit, on a YuNet program (blob and photo laid
out on the device, masked too) and an embedder; and a wgpu-py whose C signatures differ falls back to the API,
saying so once."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import facerun
from facerun import agree
from facerun.errors import InputError
from facerun.face.images import load_image
from facerun.gpu import GpuModel, replay

PHOTO = Path(__file__).resolve().parent.parent / "docs" / "img" / "astronaut.jpg"  # shipped: no ../shared needed


@pytest.fixture
def fresh_native(monkeypatch):
    """replay's process-wide state cleared for the test (and restored after it)."""
    monkeypatch.setattr(replay, "_native", None)
    monkeypatch.setattr(replay, "_said", set())


def _compiled(gpu, monkeypatch, mode: str, prog):
    monkeypatch.setenv("FACERUN_GPU_REPLAY", mode)
    gp = GpuModel(dev=gpu).compile(prog)  # a model of its own: nothing cached from the other mode
    assert gp.raw == (mode != "api")
    assert (gp.replay.native is not None) == (mode != "api")
    if mode != "api":
        assert gp.replay.native.held == (mode == "held")
    return gp


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_yunet_native_replay_equals_the_api_path(gpu, monkeypatch, fresh_native):
    net = facerun.load("yunet-2023mar")
    prog = net.program((1, 3, 128, 160))
    x = {prog.inputs[0][0]: agree.seeded_input((1, 3, 128, 160), 5) * 127 + 128}
    rgb = np.ascontiguousarray(load_image(PHOTO)[:100, :150])
    runs = {}
    for mode in ("api", "native", "held"):
        gp = _compiled(gpu, monkeypatch, mode, prog)
        runs[mode] = (gp.run(x), gp.run(x),  # the second run replays commands recorded ahead
                      gp.run_image(rgb), gp.run_image(rgb[:90, :120], photo=(96, 128)))
    for mode in ("native", "held"):
        for a, b in zip(runs["api"], runs[mode]):
            _same(a, b)
        assert all(np.abs(v).max() > 0 for v in runs[mode][3].values())  # a real run, not zeros


def test_native_runs_make_and_release_their_own_command_buffers(gpu, monkeypatch, fresh_native):
    """Where runs are recorded natively, their encoders and command buffers are wgpu-native's own too (no wgpu-py
    call that lets go of the interpreter lock): the next run's commands, recorded ahead, are a replay.Commands,
    released once submitted."""
    net = facerun.load("yunet-2023mar")
    prog = net.program((1, 3, 128, 160))
    rgb = np.ascontiguousarray(load_image(PHOTO)[:100, :150])
    for mode in ("native", "held"):
        gp = _compiled(gpu, monkeypatch, mode, prog)
        first = gp.run_image(rgb)
        ahead = gp.photo._ready[1]
        assert type(ahead) is replay.Commands and ahead._raw is not None
        _same(first, gp.run_image(rgb))  # the run that submitted them
        assert ahead._raw is None  # released after its submission
        assert type(gp.photo._ready[1]) is replay.Commands and gp.photo._ready[1] is not ahead


def test_a_native_encoder_wgpu_found_invalid_raises_at_finish(gpu, monkeypatch, fresh_native):
    """As wgpu-py's finish does: wgpu-native aborts the whole process on submitting a command buffer it found
    invalid, so an error reported while recording must stop it at finish, before any submission."""
    import wgpu

    usage = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    a, b = (gpu.device.create_buffer(size=256, usage=usage) for _ in range(2))
    for mode in ("native", "held"):
        monkeypatch.setenv("FACERUN_GPU_REPLAY", mode)
        monkeypatch.setattr(replay, "_native", None)
        native = replay.native_calls()
        good = replay.Encoder(native, gpu.device)
        good.copy_buffer_to_buffer(a, 0, b, 0, 256)
        native.submit(gpu.queue, good.finish())  # a valid one goes
        bad = replay.Encoder(native, gpu.device)
        bad.copy_buffer_to_buffer(a, 0, b, 0, 1024)  # past b's end
        with pytest.raises(RuntimeError):
            bad.finish()


def test_embedder_native_replay_equals_the_api_path(gpu, monkeypatch, fresh_native):
    net = facerun.load("mobilefacenet")  # the shipped default
    prog = net.program((1, 3, 112, 112))
    x = {prog.inputs[0][0]: agree.seeded_input((1, 3, 112, 112), 7)}
    api = _compiled(gpu, monkeypatch, "api", prog).run(x)
    for mode in ("native", "held"):
        native = _compiled(gpu, monkeypatch, mode, prog).run(x)
        _same(api, native)
        assert float(np.abs(next(iter(native.values()))).max()) > 0


def test_other_c_signatures_fall_back_to_the_api_and_say_so_once(gpu, monkeypatch, fresh_native, caplog):
    monkeypatch.setitem(replay.SIGNATURES, "wgpuComputePassEncoderSetBindGroup",
                        "void(*)(struct WGPUComputePassEncoderImpl *, uint32_t, struct WGPUBindGroupImpl *)")
    monkeypatch.setenv("FACERUN_GPU_REPLAY", "auto")
    net = facerun.load("yunet-2023mar")
    prog = net.program((1, 3, 64, 64))
    x = {prog.inputs[0][0]: agree.seeded_input((1, 3, 64, 64), 3) * 127 + 128}
    with caplog.at_level(logging.WARNING, logger="facerun.gpu"):
        model = GpuModel(dev=gpu)
        gp = model.compile(prog)
        assert replay.native_calls() is None
        got = gp.run(x)
        model.compile(net.program((1, 3, 96, 64)))
    said = [r for r in caplog.records if "native calls differ" in r.getMessage()]
    assert len(said) == 1 and "wgpuComputePassEncoderSetBindGroup" in said[0].getMessage()
    assert not gp.raw and gp.replay is not None and gp.replay.native is None
    monkeypatch.undo()  # the real signatures back: the native path gives the same bits
    monkeypatch.setattr(replay, "_native", None)
    monkeypatch.setenv("FACERUN_GPU_REPLAY", "native")
    _same(got, GpuModel(dev=gpu).compile(prog).run(x))


def test_missing_native_calls_fall_back(gpu, monkeypatch, fresh_native):
    def no_native(*a, **k):
        raise ImportError("no wgpu_native backend")

    monkeypatch.setattr(replay.Native, "__init__", no_native)
    monkeypatch.setenv("FACERUN_GPU_REPLAY", "auto")
    assert replay.native_calls() is None


def test_the_replay_setting_is_checked(monkeypatch):
    from facerun import settings

    monkeypatch.setenv("FACERUN_GPU_REPLAY", "fast")
    with pytest.raises(InputError, match="FACERUN_GPU_REPLAY must be one of auto, held, native, api"):
        settings.get("FACERUN_GPU_REPLAY")
    monkeypatch.setenv("FACERUN_GPU_REPLAY", " API ")
    assert settings.get("FACERUN_GPU_REPLAY") == "api"


@pytest.mark.parametrize("mode", ["held", "native"])
def test_native_writes_and_unmaps_are_the_apis(gpu, monkeypatch, fresh_native, mode):
    """replay.writer's queue writes (bytes-like and arrays, at an offset) land as queue.write_buffer's do, and a
    buffer the staging pool mapped is unmapped by the native call for the device's copy."""
    import wgpu

    from facerun.gpu.staging import GRAIN, PhotoStaging

    monkeypatch.setenv("FACERUN_GPU_REPLAY", mode)
    native = replay.native_calls()
    assert native is not None and native.held == (mode == "held")
    usage = wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.MAP_READ
    ours, theirs = (gpu.device.create_buffer(size=64, usage=usage) for _ in range(2))
    words = np.arange(7, 13, dtype=np.uint32)
    raw = bytearray(range(200, 216))
    write = replay.writer(native, gpu.queue)
    write(ours, 8, words)
    write(ours, 40, raw)
    gpu.queue.write_buffer(theirs, 8, words)
    gpu.queue.write_buffer(theirs, 40, raw)
    got = []
    for buf in (ours, theirs):
        buf.map_sync(wgpu.MapMode.READ)
        got.append(np.frombuffer(buf.read_mapped(), np.uint8).copy())
        buf.unmap()
    assert np.array_equal(got[0], got[1]) and got[0][8:32].view(np.uint32).tolist() == words.tolist()
    pool = PhotoStaging(gpu, budget=GRAIN)
    image = pool.stage(np.full((8, 8, 3), 77, np.uint8))
    buffer = image.staged.hand_over()  # unmapped through `native`: a copy from it is valid now
    out = gpu.device.create_buffer(size=192, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.MAP_READ)
    enc = gpu.device.create_command_encoder()
    enc.copy_buffer_to_buffer(buffer, 0, out, 0, 192)
    gpu.queue.submit([enc.finish()])
    out.map_sync(wgpu.MapMode.READ)
    assert (np.frombuffer(out.read_mapped(), np.uint8) == 77).all()
    out.unmap()
    image.staged.release()
