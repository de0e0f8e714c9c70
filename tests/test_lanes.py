"""Lanes (facerun/cpu/lanes.py): a kernel's bands made on several threads at once, with the results of one."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from test_cpu_fast import RNG, _close, _conv, _fast, _reference, _whole

from facerun import cpu
from facerun import program as P
from facerun.cpu import arena, conv, interpreter, lanes, separable, winograd
from facerun.face import processes
from facerun.net import load
from facerun.zoo.replicas import replica_path

from conftest import real_model


@pytest.fixture
def three_lanes(monkeypatch):
    """Every step big enough for lanes, three of them (six threads: three lanes, three OpenBLAS threads), and a
    record of each hand-over to the pool's threads."""
    monkeypatch.setenv("FACERUN_CPU_THREADS", "6")
    monkeypatch.setattr(lanes, "LANE_MACS", 0)
    monkeypatch.setattr(lanes, "MIN_BAND_VALUES", 1)
    monkeypatch.setattr(interpreter._Run, "threads", 3)  # a run's thread count, as Executable.run sets it
    handed: list[tuple[int, int]] = []
    real = lanes._Pool.run

    def run(self, fns, threads):
        handed.append((len(fns), threads))
        return real(self, fns, threads)

    monkeypatch.setattr(lanes._Pool, "run", run)
    return handed


# ------------------------------------------------------------------------------------------- dealing out bands


@pytest.mark.parametrize("total,per_band,count,step", [(240, 38, 2, 2), (120, 54, 2, 1), (57, 8, 3, 1),
                                                         (480, 15, 16, 1), (30, 30, 4, 2), (7, 2, 2, 1)])
def test_bands_split_evenly_over_the_lanes(total, per_band, count, step):
    rows = lanes.balanced(total, per_band, count, step)
    assert rows % step == 0 and rows <= max(per_band, step)
    starts = list(range(0, total, rows))
    owners = lanes.deal(len(starts), count)
    made = [0] * count
    for r0, lane in zip(starts, owners):
        made[lane] += min(total, r0 + rows) - r0
    assert owners == sorted(owners)  # each lane's bands are contiguous
    assert sum(made) == total
    assert max(made) - min(made) <= rows  # no lane makes more than one band over another
    if total >= count * rows:
        assert len(starts) % count == 0


def test_the_threads_are_shared_between_lanes_and_openblas():
    assert lanes.share(1) == (1, 1)
    assert lanes.share(2) == (2, 1)  # no core for OpenBLAS's spinning threads
    assert lanes.share(4) == (2, 2)
    assert lanes.share(8) == (4, 4)
    assert lanes.share(16) == (4, 12)  # past four lanes the GIL gives little
    for total in range(1, 65):
        got = lanes.share(total)
        assert got[0] >= 1 and got[1] >= 1 and (sum(got) <= total or total <= 2)


def test_small_steps_and_small_bands_stay_on_one_lane(monkeypatch):
    monkeypatch.setenv("FACERUN_CPU_THREADS", "8")
    assert lanes.threads() == 8 and lanes.available() == 4
    assert lanes.count(lanes.LANE_MACS - 1, 8) == 1
    assert lanes.count(lanes.LANE_MACS, 1) == 1
    assert lanes.count(lanes.LANE_MACS, 8) == 4
    assert lanes.count(lanes.LANE_MACS, 8, values=2 * lanes.MIN_BAND_VALUES) == 2
    assert lanes.count(lanes.LANE_MACS, 3) == 3
    monkeypatch.setenv("FACERUN_CPU_THREADS", "1")
    assert lanes.count(1 << 30, 64) == 1
    monkeypatch.delenv("FACERUN_CPU_THREADS")
    assert 1 <= lanes.available() <= lanes.MAX_LANES


# --------------------------------------------------------------------------------------------- the pool


def test_a_failing_lane_raises_in_the_caller_after_the_others_finish():
    finished = []

    def ok(i):
        return lambda: finished.append(i)

    def bad():
        raise ValueError("lane 2 broke")

    with pytest.raises(ValueError, match="lane 2 broke"):
        lanes.POOL.run([ok(0), ok(1), bad, ok(3)], 4)
    assert sorted(finished) == [0, 1, 3]
    lanes.POOL.run([ok(4), ok(5)], 2)  # the pool still works
    assert sorted(finished) == [0, 1, 3, 4, 5]


def test_callers_on_several_threads_share_the_pool():
    results: dict[int, list] = {}

    def caller(k):
        got = [None] * 6
        for _ in range(20):
            lanes.POOL.run([lambda i=i: got.__setitem__(i, k * 10 + i) for i in range(6)], 3)
        results[k] = got

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert {k: v for k, v in results.items()} == {k: [k * 10 + i for i in range(6)] for k in range(4)}


def test_an_overflow_in_a_lane_is_as_quiet_as_in_a_run():
    """numpy's error state is per thread: the workers ignore floating-point errors as Executable.run does on its own
    thread (overflow to inf is the reference's answer too), where a new thread would warn."""
    big = np.full(4, 3e38, np.float32)

    def overflow():
        np.multiply(big, np.float32(10), out=big.copy())

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error")  # a warning in a worker would come back here as an exception
        lanes.POOL.run([overflow, overflow, overflow], 3)


# ------------------------------------------------------------------------------------------ kernels in lanes


def test_each_kernel_in_lanes_equals_the_reference(three_lanes, monkeypatch):
    for module, budget in ((winograd, "TILE_BLOCK_BYTES"), (conv, "DEPTHWISE_BAND_BYTES"), (conv, "COLUMN_BAND_BYTES"),
                           (conv, "STEM_BAND_BYTES")):
        monkeypatch.setattr(module, budget, 2048)  # bands of a few rows
    x = RNG.standard_normal((1, 16, 41, 30)).astype(np.float32)
    for build, st in ((winograd.winograd, _conv(16, 8, act=P.Activation("relu"))),
                      (conv.depthwise, _conv(16, 16, groups=16)),
                      (conv.depthwise, _conv(16, 16, groups=16, stride=2)),
                      (conv.depthwise, _conv(16, 16, k=5, groups=16, pads=(2, 2, 2, 2))),
                      (conv.dense, _conv(16, 6, stride=2, act=P.Activation("clip", lo=-1, hi=1))),
                      (conv.pointwise, _conv(16, 12, k=1, pads=(0, 0, 0, 0), act=P.Activation("sigmoid")))):
        before = len(three_lanes)
        _close(_fast(build, st, x), _reference(st, x))
        assert len(three_lanes) > before and three_lanes[-1][1] == 3, build.__name__  # its bands went to the pool
    rgb = RNG.standard_normal((1, 3, 31, 17)).astype(np.float32)
    stem = _conv(3, 8, stride=2)
    _close(_fast(conv.stem, stem, rgb), _reference(stem, rgb))
    assert three_lanes[-1] == (3, 3)


@pytest.mark.parametrize("pooled", [False, True])
def test_a_1x1_and_depthwise_pair_in_lanes_rolls_a_buffer_per_lane(three_lanes, monkeypatch, pooled):
    """Each lane's first band makes the 1x1 row above it itself (there is no band before it in that lane to roll
    over from); NaN in every lane's scratch shows a row read that nobody made."""
    n, cin, c, h, w = 1, 6, 8, 21, 7
    monkeypatch.setattr(separable, "BAND_BYTES", 2 * w * c * 4)
    pw = _conv(cin, c, k=1, pads=(0, 0, 0, 0), act=P.Activation("prelu", slope=RNG.uniform(0, 1, c).astype(np.float32)))
    dw = _conv(c, c, groups=c, act=P.Activation("relu"))
    x = RNG.standard_normal((n, cin, h, w)).astype(np.float32)
    want = _reference(dw, _reference(pw, x))
    scratch = arena.Scratch()
    for k in range(3):
        scratch.lane(k).get("pwdw", (4 * h * w * c,)).fill(np.nan)
        scratch.lane(k).get("dwband", (4 * h * w * c,)).fill(np.nan)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    if pooled:
        pool = P.Pool(out=2, node="pool", x=1, kind="max", kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0))
        want = cpu.run_step(pool, [want], (n, c, h // 2, w // 2))
        out = np.full((n, h // 2, w // 2, c), np.nan, np.float32)
        separable.pooled(pw, dw, nhwc, out, scratch, interpreter._Run())()
    else:
        out = np.full((n, h, w, c), np.nan, np.float32)
        step, build = separable.pointwise_depthwise(pw, dw)
        conv.fused(step, build, nhwc, out, None, scratch, interpreter._Run())()
    assert three_lanes and three_lanes[-1][0] == 3
    _close(out.transpose(0, 3, 1, 2), want)


# ------------------------------------------------------------------------------------------- whole programs


def _sequential(monkeypatch):
    """The pool's lanes run one after another on the caller's thread (what a busy machine gets)."""
    monkeypatch.setattr(lanes._Pool, "run", lambda self, fns, threads: [fn() for fn in fns] and None)


@pytest.mark.parametrize("name,shape", [("yunet-arch", (1, 3, 96, 128)), ("sface-arch-small", (2, 3, 112, 112)),
                                        ("auraface-arch-small", (1, 3, 112, 112))])
def test_a_program_in_lanes_equals_the_reference_and_its_own_sequential_run(three_lanes, monkeypatch, name, shape):
    net = load(str(replica_path(name)))
    prog, feeds = _whole(net, shape)
    want = cpu.run_program(prog, feeds, reference=True)
    exe = interpreter.Executable(prog)
    got = exe.run(feeds)
    assert any(count > 1 and threads == 3 for count, threads in three_lanes)
    for k in want:
        _close(got[k], want[k])
    _sequential(monkeypatch)
    again = exe.run(feeds)
    for k in got:  # which thread made a band changes nothing
        np.testing.assert_array_equal(again[k], got[k])


def test_yunet_in_lanes_at_its_own_thresholds(monkeypatch):
    """The real detector at 640x480 with the shipped thresholds: its large steps go to lanes, its small ones don't,
    and the result is the reference's."""
    monkeypatch.setenv("FACERUN_CPU_THREADS", "2")
    net = load(str(real_model("face_detection_yunet_2023mar.onnx")))
    prog, feeds = _whole(net, (1, 3, 480, 640), scale=255)
    handed = []
    real = lanes._Pool.run
    monkeypatch.setattr(lanes._Pool, "run", lambda self, fns, threads: handed.append(len(fns)) or real(self, fns,
                                                                                                       threads))
    exe = interpreter.Executable(prog)
    got = exe.run(feeds)
    assert 4 <= len(handed) < len(exe.steps)
    want = cpu.run_program(prog, feeds, reference=True)
    for k in want:
        _close(got[k], want[k])


def test_library_processes_share_the_cores_out(monkeypatch):
    monkeypatch.delenv("FACERUN_CPU_THREADS", raising=False)
    monkeypatch.setattr(lanes, "threads", lambda: 8)
    assert processes._settings(4)["FACERUN_CPU_THREADS"] == "2"
    assert processes._settings(16)["FACERUN_CPU_THREADS"] == "1"
    monkeypatch.setenv("FACERUN_CPU_THREADS", "3")  # the user's word stands
    assert processes._settings(4)["FACERUN_CPU_THREADS"] == "3"


@pytest.mark.parametrize("m", [1, 3, 70])
def test_a_lone_product_split_by_columns_over_the_lanes_equals_one_call(monkeypatch, m):
    """A product outside any band's lane (a fully connected layer, a small map's 1x1) is split by output columns;
    one row goes through matrix-vector products over rows of the weights. Only where OpenBLAS gets no threads of its
    own (two cores, a busy machine): else it makes the product whole."""
    monkeypatch.setenv("FACERUN_CPU_THREADS", "6")
    monkeypatch.setattr(lanes, "SPLIT_MACS", 0)
    monkeypatch.setattr(lanes, "SPLIT_ROW_MACS", 0)
    handed = []
    real = lanes._Pool.run
    monkeypatch.setattr(lanes._Pool, "run", lambda self, fns, threads: handed.append(len(fns)) or real(self, fns,
                                                                                                       threads))
    a = RNG.standard_normal((m, 300)).astype(np.float32)
    w = RNG.standard_normal((100, 300)).astype(np.float32)
    out = np.full((m, 100), np.nan, np.float32)
    ctx = interpreter._Run()
    ctx.threads = 3
    conv.product(a, w.T, out, ctx)()
    assert handed == [3]
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-5, atol=1e-4)
    handed.clear()
    inside = np.full((m, 100), np.nan, np.float32)
    conv.product(a, w.T, inside, lanes.ONE)()  # already in a lane: one call
    assert handed == []
    np.testing.assert_allclose(inside, out, rtol=1e-5, atol=1e-4)
    ctx.blas = 3  # OpenBLAS has threads of its own: the product whole, on them
    whole = np.full((m, 100), np.nan, np.float32)
    conv.product(a, w.T, whole, ctx)()
    assert handed == []
    np.testing.assert_allclose(whole, out, rtol=1e-5, atol=1e-4)


def test_a_program_with_no_lane_steps_gives_openblas_every_thread(monkeypatch):
    """An embedder at batch 1 (maps of 56x56 and less) deals no bands to lanes: its products get all the threads, as
    before lanes; a detector at 640x480 shares them out."""
    monkeypatch.setenv("FACERUN_CPU_THREADS", "6")
    net = load(str(replica_path("yunet-arch")))
    prog, feeds = _whole(net, (1, 3, 480, 640))
    big = interpreter.Executable(prog)
    assert big.laned
    big.run(feeds)
    assert (big.ctx.threads, big.ctx.blas) == lanes.share(6) == (3, 3)
    net = load(str(replica_path("sface-arch-small")))
    prog, feeds = _whole(net, (1, 3, 112, 112))
    small = interpreter.Executable(prog)
    assert not small.laned
    small.run(feeds)
    assert (small.ctx.threads, small.ctx.blas) == (1, 6)


def test_the_benchmark_header_says_how_the_cpu_interpreter_shares_its_threads(monkeypatch):
    from facerun.bench import machine

    monkeypatch.setenv("FACERUN_CPU_THREADS", "8")
    info = machine.machine_info()
    assert info["cpu_interpreter"] == {"threads": 8, "lanes": 4, "openblas": 4}
    assert "CPU interpreter 8 threads: 4 lanes, OpenBLAS 4" in machine.describe_machine(info)
    monkeypatch.setenv("FACERUN_CPU_THREADS", "1")
    assert "CPU interpreter 1 thread: 1 lane, OpenBLAS 1" in machine.describe_machine(machine.machine_info())
