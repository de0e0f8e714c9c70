"""The runner contract (facerun/runner.py): a Net gets its runner and workload at load and nothing writes them after;
any runner in net.RUNNERS serves a Net through the protocol alone; the workload steers the GPU's one check; every
backend's table covers every step kind."""

from __future__ import annotations

import numpy as np
import pytest

import facerun
from facerun import cpu
from facerun import net as net_module
from facerun import program as P
from facerun.face import yunet
from facerun.runner import CpuRunner, PhotoLayout, Runner, Workload


class Recording:
    """A backend of the test's own: runs on the CPU interpreter and records what the Net asked of it; `refuse` makes
    every run answer None (the Net must then run on the CPU itself)."""

    device = "test device"
    reason = None

    def __init__(self, refuse: bool = False):
        self.refuse = refuse
        self.calls: list[str] = []

    def run(self, prog, feeds):
        self.calls.append("run")
        return None if self.refuse else {k: v + 1.0 for k, v in cpu.run_program(prog, feeds).items()}

    def run_many(self, prog, items):
        self.calls.append("run_many")
        return None

    def run_photo(self, prog, rgb, layout, photo=None):
        self.calls.append("run_photo" if photo is None else f"run_photo masked {photo}")
        return None

    def takes_photos(self):
        return True

    def masks_photos(self):
        return True

    def prepare(self, prog):
        self.calls.append(f"prepare {tuple(prog.input_shape)}")

    def stage_photo(self, rgb):
        return rgb

    def forget(self, prog):
        pass


def test_a_backend_is_its_runner_and_one_registry_line(monkeypatch):
    made = []

    def recording(workload, required, precision):
        made.append(workload)
        return Recording()

    monkeypatch.setitem(net_module.RUNNERS, "test", recording)
    work = Workload(check_side=64)
    net = facerun.load("every-op", device="test", workload=work)
    assert made == [work] and net.workload is work and isinstance(net.runner, Runner)
    assert net.device == "test device" and net.gpu is net.runner and net.gpu_reason is None
    x = np.random.default_rng(1).uniform(-1, 1, net.default_shape(1)).astype(np.float32)
    want = net.run_cpu(x)
    got = net.run(x)
    assert net.runner.calls == ["run"]
    assert all(np.array_equal(got[k], want[k] + 1.0) for k in want)  # the runner's answer, not the CPU's
    assert all(np.array_equal(net.run(x, device="cpu")[k], want[k]) for k in want)


def test_a_runner_that_does_not_take_a_call_leaves_it_to_the_cpu(monkeypatch):
    monkeypatch.setitem(net_module.RUNNERS, "test", lambda workload, required, precision: Recording(refuse=True))
    net = facerun.load("every-op", device="test")
    x = np.random.default_rng(2).uniform(-1, 1, net.default_shape(1)).astype(np.float32)
    got, want = net.run(x), net.run_cpu(x)
    assert net.runner.calls == ["run"] and all(np.array_equal(got[k], want[k]) for k in want)


def test_photos_reach_the_runner_in_their_bucket_then_their_own_program(monkeypatch):
    monkeypatch.setitem(net_module.RUNNERS, "test", lambda workload, required, precision: Recording(refuse=True))
    layout = PhotoLayout(blob=yunet.make_blob, align=yunet.PAD_DIVISOR, crop=yunet.crop_2023, bucket=128)
    net = facerun.load("yunet-2023mar", device="test", workload=Workload(photo=layout))
    rgb = np.random.default_rng(3).integers(0, 256, (70, 100, 3), dtype=np.uint8)  # pads to 96x128
    assert net.takes_photos and net.photo_bucket((1, 3, 96, 128)) == (1, 3, 128, 128)
    net.prepare((1, 3, 96, 128), photo=True)
    out = net.run_photo(rgb, (1, 3, 96, 128))
    # the bucket's program masked to the photo, its own program, then (neither taken) the blob on the CPU
    assert net.runner.calls == ["prepare (1, 3, 128, 128)", "run_photo masked (96, 128)", "run_photo", "run"]
    want = net.run_cpu(yunet.make_blob(rgb))
    assert all(np.array_equal(out[k], want[k]) for k in want)


def test_nothing_writes_a_net_after_load():
    net = facerun.load("every-op")
    assert isinstance(net.runner, CpuRunner) and net.gpu is None and net.gpu_reason == "not requested"
    for name in ("runner", "gpu", "gpu_reason"):
        with pytest.raises(AttributeError):
            setattr(net, name, None)
    assert not hasattr(net, "expected_shapes") and not hasattr(net, "check_side")


def test_layout_buckets_round_up_to_whole_buckets_only_when_outputs_can_be_cut():
    layout = PhotoLayout(blob=yunet.make_blob, align=32, crop=yunet.crop_2023, bucket=128)
    for h, w in ((96, 128), (224, 320), (128, 128), (32, 640)):
        assert layout.bucket_shape((1, 3, h, w)) == (1, 3, *yunet.bucket_size(h, w, 128))
    assert PhotoLayout(blob=yunet.make_blob, crop=None, bucket=128).bucket_shape((1, 3, 96, 128)) is None
    assert PhotoLayout(blob=yunet.make_blob, crop=yunet.crop_2023, bucket=32).bucket_shape((1, 3, 96, 128)) is None
    assert Workload(expected_batches=(2, 4)).expected_for((1, 3, 112, 96)) == [(2, 3, 112, 96), (4, 3, 112, 96)]


def test_every_backend_table_covers_every_step_kind():
    from facerun.bench import torch_peer
    from facerun.gpu import lower, masking

    kinds = {c for c in vars(P).values() if isinstance(c, type) and issubclass(c, P.Step) and c is not P.Step}
    assert set(cpu.KERNELS) == kinds and set(lower.LOWERINGS) == kinds and set(torch_peer.OPS) == kinds
    assert set(masking.RULES) <= kinds


def test_the_workload_sets_the_size_of_the_gpus_one_check(gpu):
    from facerun import counters

    net = facerun.load("yunet-2023mar", device="gpu", workload=Workload(check_side=64))
    checked = net.gpu
    seen, real = [], checked.cpu_run
    checked.cpu_run = lambda prog, feeds: seen.append(tuple(prog.input_shape)) or real(prog, feeds)
    before = counters.snapshot()
    net.run(np.zeros((1, 3, 160, 224), np.float32))
    assert counters.since(before)["gpu_checks"] == 1 and seen[0] == (1, 3, 64, 64)
    plain = facerun.load("yunet-2023mar", device="gpu")
    shown, real = [], plain.gpu.cpu_run
    plain.gpu.cpu_run = lambda prog, feeds: shown.append(tuple(prog.input_shape)) or real(prog, feeds)
    plain.run(np.zeros((1, 3, 160, 224), np.float32))
    assert shown[0] == (1, 3, 160, 224)  # no check_side: the whole network at the size in hand
