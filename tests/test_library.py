"""The library run: GPU programs whose cost does not depend on the input size (counters), bounded program caches,
the pipelined iter_photo_faces equal to the serial one on the shared photos, nothing half-written when a run stops,
and `facerun bench --photos`."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, SMALL_PHOTOS, YUNET, need_real_data
from PIL import Image

from facerun import counters
from facerun.cli import main as cli
from facerun.face.library import LibraryStats, iter_photo_faces, iter_photo_faces_serial
from facerun.lru import LruCache


def small_photos(folder, sides=(160, 200, 240)):
    """Shared photos shrunk (each longer side another size), so the GPU tests stay quick on a software adapter."""
    need_real_data()
    folder.mkdir(exist_ok=True)
    made = []
    for i, (name, side) in enumerate(zip(SMALL_PHOTOS, sides)):
        image = Image.open(FACES / name).convert("RGB")
        image.thumbnail((side, side))
        path = folder / f"photo{i}.jpg"
        image.save(path, quality=92)
        made.append(path)
    return made


# ------------------------------------------------------------------------------------------------ GPU programs


def test_a_new_size_creates_no_pipeline_and_no_whole_check(gpu):
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET), device="gpu")
    rng = np.random.default_rng(1)
    sizes = [(160, 160), (160, 192), (192, 160), (128, 96)]
    paid = []
    for h, w in sizes:
        x = rng.uniform(0, 255, (1, 3, h, w)).astype(np.float32)
        before = counters.snapshot()
        got = net.run(x)
        paid.append(counters.since(before))
        want = net.run(x, device="cpu")
        for name in want:
            assert np.abs(got[name] - want[name]).max() <= 1e-3 * max(1.0, float(np.ptp(want[name])))
    assert net.gpu is not None and net.gpu.whole_checked
    # the first size pays the model's one whole check (its pipelines too, unless earlier tests in this process made
    # them: pipelines belong to the device, one per process)
    assert paid[0]["gpu_checks"] == 1
    for later in paid[1:]:  # a new size: a program and its buffers, nothing more
        assert later.get("gpu_checks", 0) == 0 and later.get("pipelines_created", 0) == 0
        assert later.get("gpu_variant_checks", 0) == 0
        assert later["programs_compiled"] == 1 and later["gpu_programs_compiled"] == 1


def test_an_unchecked_kernel_variant_is_checked_alone_on_a_layer(gpu):
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET), device="gpu")
    net.run(np.zeros((1, 3, 96, 128), np.float32))
    checked = net.gpu
    gp = checked.model.compile(net.program((1, 3, 96, 128)))
    forgotten = sorted(k for k in gp.kernel_keys if k.startswith("conv_tiled"))[:1]
    assert forgotten, "YuNet's program runs tiled convolutions"
    checked.verified.difference_update(forgotten)  # as if this size had needed a variant not seen before
    before = counters.snapshot()
    net.run(np.ones((1, 3, 96, 128), np.float32))
    paid = counters.since(before)
    assert paid.get("gpu_variant_checks") == 1 and paid.get("gpu_checks", 0) == 0
    assert set(forgotten) <= checked.verified and checked.active


def test_lru_cache_keeps_the_newest_under_the_budget():
    gone = []
    cache = LruCache(10, cost=lambda v: v, on_evict=lambda k, v: gone.append(k))
    for key, cost in (("a", 4), ("b", 4), ("c", 4)):
        cache.put(key, cost)
    assert cache.keys() == ["b", "c"] and gone == ["a"] and cache.total == 8
    cache.get("b")
    cache.put("d", 4)
    assert cache.keys() == ["b", "d"] and gone == ["a", "c"]
    cache.put("huge", 50)  # alone over the budget, still kept
    assert cache.keys() == ["huge"] and cache.total == 50


def test_sizes_share_the_models_buffers_and_bind_groups(gpu):
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET), device="gpu")
    rng = np.random.default_rng(3)
    inputs = {hw: rng.uniform(0, 255, (1, 3) + hw).astype(np.float32) for hw in [(192, 192), (160, 192), (192, 128)]}
    net.run(inputs[(192, 192)])  # the largest first: the arena is sized for it
    before = counters.snapshot()
    for hw in [(160, 192), (192, 128)]:
        net.run(inputs[hw])
    paid = counters.since(before)
    dispatches = len(net.gpu.model.compile(net.program((1, 3, 160, 192))).dispatches)
    # smaller sizes run in the same buffers; only a layer whose plan changed (its packed weights) binds anew
    assert "gpu_arena_grown" not in paid and paid["gpu_programs_compiled"] == 2
    assert paid.get("gpu_bind_groups_created", 0) <= dispatches // 4
    for hw in [(192, 192), (160, 192), (192, 128), (160, 192)]:  # interleaved: each program's parameters reloaded
        got, want = net.run(inputs[hw]), net.run(inputs[hw], device="cpu")
        for name in want:
            assert np.abs(got[name] - want[name]).max() <= 1e-3 * max(1.0, float(np.ptp(want[name])))


def test_the_whole_check_runs_once_at_batch_one(gpu):
    from facerun.face.embed import Embedder

    need_real_data()
    embedder = Embedder(str(MOBILEFACENET), device="gpu")
    net = embedder.net
    checked, real = [], net.gpu.cpu_run
    net.gpu.cpu_run = lambda prog, feeds: checked.append((prog.input_shape, len(prog.steps))) or real(prog, feeds)
    crops = np.random.default_rng(4).integers(0, 256, (8, 112, 112, 3), dtype=np.uint8)
    before = counters.snapshot()
    embedder.embed(crops)
    paid = counters.since(before)
    assert paid["gpu_checks"] == 1 and "gpu_variant_checks" not in paid
    whole = len(net.program((1, 3, 112, 112)).steps)
    assert checked[0] == ((1, 3, 112, 112), whole)  # the whole network at batch 1, then single layers
    assert len(checked) > 1 and all(steps == 1 for _, steps in checked[1:])
    assert sum(shape[0] == 1 for shape, _ in checked[1:]) > len(checked[1:]) // 2  # most at batch 1, plan forced
    before = counters.snapshot()
    embedder.embed(crops[:5])  # the same padded batch: nothing more to check
    assert "gpu_checks" not in counters.since(before) and "gpu_variant_checks" not in counters.since(before)


def test_gpu_batches_are_padded_to_a_few_sizes(gpu):
    from facerun.face.embed import Embedder
    from facerun.net import gpu_batch

    need_real_data()
    assert [gpu_batch(n) for n in (1, 2, 3, 5, 9, 16, 17, 40)] == [1, 2, 4, 8, 16, 16, 32, 48]
    on_gpu, on_cpu = Embedder(str(MOBILEFACENET), device="gpu"), Embedder(str(MOBILEFACENET), device="cpu")
    crops = np.random.default_rng(5).integers(0, 256, (3, 112, 112, 3), dtype=np.uint8)
    got, want = on_gpu.embed(crops), on_cpu.embed(crops)
    assert got.shape == want.shape == (3, on_cpu.dim)
    assert float(np.min(np.sum(got * want, axis=1))) >= 0.9999
    shapes = [k[1] if k[0] == "batch" else k[0] for k in on_gpu.net._programs]
    assert 4 in shapes and 3 not in shapes  # three faces ran as a batch of four


def test_program_caches_stay_bounded_over_many_sizes(monkeypatch):
    import facerun

    need_real_data()
    monkeypatch.setenv("FACERUN_PROGRAM_BUDGET_MB", "1")  # YuNet's program holds ~0.4 MB of weights
    net = facerun.load(str(YUNET))
    before = counters.snapshot()
    sizes = [(32 * i, 64) for i in range(1, 9)]
    for h, w in sizes:
        net.run(np.zeros((1, 3, h, w), np.float32))
    paid = counters.since(before)
    assert paid["programs_compiled"] == len(sizes)
    kept = len(net.prog_shapes())
    assert 1 <= kept < len(sizes) and paid["programs_evicted"] == len(sizes) - kept
    assert net._programs.total <= 1 << 20 and net.prog_shapes()[-1] == (1, 3) + sizes[-1]
    # an evicted size comes back: compiled again, same answer
    x = np.random.default_rng(2).uniform(0, 255, (1, 3, 32, 64)).astype(np.float32)
    first = net.run(x)
    assert np.array_equal(net.run(x)["cls_8"], first["cls_8"])


def test_gpu_program_cache_stays_bounded(gpu, monkeypatch):
    import facerun

    need_real_data()
    monkeypatch.setenv("FACERUN_GPU_PROGRAM_BUDGET_MB", "0.01")  # every program over it: one kept
    net = facerun.load(str(YUNET), device="gpu")
    before = counters.snapshot()
    for h in (64, 96, 128, 160, 192):
        net.run(np.zeros((1, 3, h, 96), np.float32))
    model = net.gpu.model
    assert counters.since(before)["gpu_programs_evicted"] == 4 and model.compiled_count == 1


# --------------------------------------------------------------------------------------------- the library run


def _same(serial, piped):
    assert [r.path for r in piped] == [r.path for r in serial]
    for a, b in zip(serial, piped):
        assert a.error == b.error and (a.width, a.height) == (b.width, b.height)
        assert [f.box for f in a.faces] == [f.box for f in b.faces]
        assert [f.score for f in a.faces] == [f.score for f in b.faces]
        assert all(np.array_equal(f.landmarks, g.landmarks) for f, g in zip(a.faces, b.faces))
        assert np.array_equal(a.embeddings, b.embeddings)


def test_the_pipelined_run_equals_the_serial_run_on_real_photos(tmp_path, mobilefacenet, yunet_cpu, monkeypatch):
    from facerun import blas

    # the CPU's BLAS takes one thread while the machine is busy, and its sums then round differently (last bits of
    # an embedding): both runs get the same count, so they must agree bit for bit whatever the load does meanwhile
    threads = blas.default_threads()
    monkeypatch.setattr(blas, "default_threads", lambda: threads)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    paths = [FACES / p for p in SMALL_PHOTOS[:4]] + [broken] + [FACES / p for p in SMALL_PHOTOS[4:]]
    serial = list(iter_photo_faces_serial(paths, yunet_cpu, mobilefacenet, batch=4))
    stats = LibraryStats()
    piped = list(iter_photo_faces(paths, yunet_cpu, mobilefacenet, batch=4, workers=2, stats=stats))
    _same(serial, piped)
    assert sum(len(r.faces) for r in piped) == stats.faces > len(paths)  # group photos: batches span photos
    assert stats.photos == len(paths) and len(stats.sizes) > 1 and all(stats.seconds[s] > 0 for s in stats.seconds)
    # and equal to the detector used alone, photo by photo
    from facerun.face.images import load_image

    for r in piped[:4]:
        assert [f.box for f in yunet_cpu.detect(load_image(r.path))] == [f.box for f in r.faces]


def test_the_pipelined_run_equals_the_serial_run_on_the_gpu(tmp_path, gpu):
    from facerun.face.detect import Detector
    from facerun.face.embed import Embedder

    paths = small_photos(tmp_path / "small")
    detector = Detector(str(YUNET), device="gpu")
    embedder = Embedder(str(MOBILEFACENET), device="gpu")
    serial = list(iter_photo_faces_serial(paths, detector, embedder, batch=2))
    _same(serial, list(iter_photo_faces(paths, detector, embedder, batch=2, workers=2)))
    assert detector.device != "cpu" and sum(len(r.faces) for r in serial) > 0


def test_a_failure_in_the_middle_stops_the_run_and_the_threads(mobilefacenet, yunet_cpu, monkeypatch):
    import threading

    calls = []
    real = yunet_cpu.run_network

    def failing(prepared):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the device fell over")
        return real(prepared)

    monkeypatch.setattr(yunet_cpu, "run_network", failing)
    paths = [FACES / p for p in SMALL_PHOTOS] * 3
    got = []
    with pytest.raises(RuntimeError, match="fell over"):
        for r in iter_photo_faces(paths, yunet_cpu, None, workers=2):
            got.append(r)
    assert len(got) <= 2 and [r.path for r in got] == paths[: len(got)]
    for t in threading.enumerate():
        # the CPU interpreter's lane pool is the process's, like OpenBLAS's threads: idle, it waits for work
        if t.name.startswith("facerun-") and not t.name.startswith("facerun-lane-"):
            t.join(timeout=30)
            assert not t.is_alive()


@pytest.mark.parametrize("suffix", [".npy", ".jsonl"])
def test_ctrl_c_in_the_middle_of_embed_leaves_no_output_file(tmp_path, monkeypatch, suffix):
    need_real_data()
    from facerun.face.detect import Detector

    real = Detector.run_network
    calls = []

    def interrupted(self, prepared):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, prepared)

    monkeypatch.setattr(Detector, "run_network", interrupted)
    target = tmp_path / f"faces{suffix}"
    paths = [str(FACES / p) for p in SMALL_PHOTOS[:5]]
    result = CliRunner().invoke(cli, ["embed", *paths, "--model", str(MOBILEFACENET), "--detector", str(YUNET),
                                      "--device", "cpu", "--out", str(target)])
    assert result.exit_code != 0 and len(calls) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the file, its index, nor a .part


def test_detect_through_the_library_run_gives_the_detectors_faces(tmp_path, yunet_cpu):
    from facerun.face.images import load_image

    paths = small_photos(tmp_path / "small")
    result = CliRunner().invoke(cli, ["detect", str(tmp_path / "small"), "--model", str(YUNET), "--device", "cpu",
                                      "--json", "--draw", str(tmp_path / "drawn")])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["image"] for r in rows] == [str(p) for p in paths]
    for row, path in zip(rows, paths):
        assert [f["box"] for f in row["faces"]] == [f.to_dict()["box"] for f in yunet_cpu.detect(load_image(path))]
    assert sorted(p.name for p in (tmp_path / "drawn").iterdir()) == [p.with_suffix(".png").name for p in paths]


def test_the_first_photo_runs_with_only_a_few_photos_decoding_beside_it(tmp_path, monkeypatch):
    """Until the network has run its first FIRST_RUNS (2) photos, FIRST_AHEAD photos decode ahead of it (the model's
    GPU check finishes before the second run); then the whole window."""
    import shutil

    from facerun.face import library
    from facerun.face.detect import Detector

    need_real_data()
    photo = FACES / "group" / "insightface_t1.jpg"  # six faces
    paths = []
    for i in range(12):
        paths.append(tmp_path / f"p{i:02d}.jpg")
        shutil.copy(photo, paths[-1])
    detector = Detector(device="cpu")
    started, at_runs = [], []
    real_decode, real_run = library._decode, detector.run_network

    def decode(path, det, stats, draft):
        started.append(path)
        return real_decode(path, det, stats, draft)

    def run_network(prepared):
        out = real_run(prepared)
        at_runs.append(len(started))  # decodes begun by the end of this run
        return out

    monkeypatch.setattr(library, "_decode", decode)
    monkeypatch.setattr(detector, "run_network", run_network)
    got = list(iter_photo_faces(paths, detector, workers=8))
    assert [r.path for r in got] == paths and all(len(r.faces) == 6 for r in got)
    assert library.FIRST_RUNS == 2
    assert at_runs[0] <= 1 + library.FIRST_AHEAD  # the first photo and the two behind it, whatever the threads
    assert at_runs[1] <= 2 + library.FIRST_AHEAD  # the second photo too (its run finishes the check)
    assert at_runs[2] > 2 + library.FIRST_AHEAD  # then the window of 2 x workers + 2 opens


# ------------------------------------------------------------------------------------------- bench --photos


def test_bench_photos_gives_every_field_per_path(tmp_path):
    paths = small_photos(tmp_path / "small")
    result = CliRunner().invoke(cli, ["--allow-software", "bench", "--photos", str(tmp_path / "small"), "--paths",
                                      "cpu,cpu-serial,gpu,opencv,opencv-threads", "--embed", str(MOBILEFACENET),
                                      "--batch", "4",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {r["path"]: r for r in report["rows"]}
    assert list(rows) == ["cpu", "cpu+embed", "cpu-serial", "cpu-serial+embed", "gpu", "gpu+embed", "opencv",
                          "opencv-threads"]
    assert report["photos"] == len(paths)
    fields = {"photos", "faces", "distinct_sizes", "photos_per_s", "faces_per_s", "first_photo_ms", "gpu_checks",
              "programs_compiled", "seconds", "agree_with_cpu", "bottleneck"}
    for path in ("cpu", "cpu-serial", "cpu+embed", "cpu-serial+embed"):
        row = rows[path]
        assert fields <= set(row) and row["photos"] == len(paths) and row["faces"] > 0
        assert row["distinct_sizes"] == len(paths) and row["photos_per_s"] > 0 and row["first_photo_ms"] > 0
        assert set(row["seconds"]) == {"decode", "compile", "detect", "post", "align", "embed", "total", "feeding",
                                       "phases", "waiting"}
        assert (row["seconds"]["embed"] > 0) == path.endswith("+embed")
        assert row["after_first_per_s"] > 0
        assert row["gpu_checks"] == 0 and "%" in row["bottleneck"]
    assert rows["cpu"]["agree_with_cpu"] is None
    for path in ("cpu-serial", "cpu+embed"):
        assert rows[path]["agree_with_cpu"]["same"] and rows[path]["faces"] == rows["cpu"]["faces"]
    gpu = rows["gpu+embed"]
    if gpu["skipped"] and not gpu["photos"]:
        assert "GPU" in gpu["skipped"] or "adapter" in gpu["skipped"]
    else:
        assert gpu["agree_with_cpu"]["same"] and gpu["gpu_whole_checks"] == 2 <= gpu["gpu_checks"]  # a model each
    opencv = rows["opencv"]
    if opencv["skipped"]:
        assert "OpenCV" in opencv["skipped"]
    else:
        assert opencv["photos"] == len(paths) and opencv["agree_with_cpu"]["faces"] == rows["cpu"]["faces"]
        # a photo per thread, each thread its own detector: the same faces as one after another
        threads = rows["opencv-threads"]
        assert threads["workers"] >= 2 and threads["photos"] == len(paths) and threads["faces"] == opencv["faces"]
        assert threads["agree_with_cpu"] == opencv["agree_with_cpu"] and "threads" in threads["bottleneck"]


def test_a_photo_rows_rate_after_its_first_photo_leaves_the_start_up_out():
    from facerun.bench.photo_rows import PhotoRow, _fill
    from facerun.face.library import LibraryStats

    stats = LibraryStats()
    stats.photos, stats.first_photo_s, stats.wall_s = 11, 1.0, 3.0  # a second to start, then 10 photos in 2 s
    row = PhotoRow("gpu-processes")
    _fill(row, stats, {})
    assert row.photos_per_s == pytest.approx(11 / 3) and row.after_first_per_s == pytest.approx(5.0)
    stats.photos = 1
    _fill(row := PhotoRow("gpu"), stats, {})
    assert row.after_first_per_s is None  # one photo: no rate after it


def test_bench_photos_refuses_an_empty_folder(tmp_path):
    result = CliRunner().invoke(cli, ["bench", "--photos", str(tmp_path), "--paths", "cpu"])
    assert result.exit_code == 1 and "no photos found" in result.output


def test_a_gpu_detector_decodes_over_the_gpus_default_threads(monkeypatch):
    """A detector's device names its GPU ("NVIDIA ... (Vulkan)"), not "gpu": either way the run decodes over the
    GPU's default threads, and over the CPU's where the network runs on the CPU."""
    from facerun.face import library

    monkeypatch.setattr(library.os, "cpu_count", lambda: 16)
    assert library.default_workers("cpu") == library.default_workers(None) == library.DECODE_THREADS == 8
    assert library.default_workers("gpu") == library.default_workers("NVIDIA H100 80GB HBM3 (Vulkan)") == 12


def test_post_processing_threads_follow_the_decoders_unless_set(monkeypatch):
    from facerun.face import library

    monkeypatch.delenv("FACERUN_POST_THREADS", raising=False)
    assert [library.post_threads(w) for w in (1, 2, 5, 8, 12)] == [1, 1, 2, 4, 4]
    monkeypatch.setenv("FACERUN_POST_THREADS", "8")
    assert library.post_threads(12) == library.post_threads(2) == 8


def test_a_slow_decode_does_not_hold_the_photos_decoded_after_it(tmp_path, monkeypatch):
    """The network takes the oldest photo decoded, not the oldest photo: one photo decoding slowly, the ones after it
    run first, and the results still come out in input order."""
    from facerun.face import library

    paths = small_photos(tmp_path / "small", sides=(120, 136, 152, 168, 184, 200, 216, 232))
    slow = paths[4]
    real = library.load_photo_shrunk

    def load(path, fit):
        if path == slow:
            time.sleep(0.5)
        return real(path, fit)

    class Noting:  # a plain detector noting the order the network meets the photos in
        def __init__(self):
            self.seen = []

        def detect(self, rgb):
            self.seen.append(rgb.shape)
            return []

    monkeypatch.setattr(library, "load_photo_shrunk", load)
    detector = Noting()
    out = list(iter_photo_faces(paths, detector, workers=4))
    assert [r.path for r in out] == paths and all(r.ok for r in out)
    shapes = [(r.height, r.width, 3) for r in out]
    assert len(set(shapes)) == len(shapes) and sorted(detector.seen) == sorted(shapes)
    assert detector.seen.index(shapes[4]) > detector.seen.index(shapes[5])  # the slow one ran after the next


class _ThreadNoting:
    """A GPU embedder stand-in: a face's vector is its landmarks' first point; it notes the thread each batch is
    submitted and read on, and may fail at its `fail_at`th batch or sleep `slow` seconds a read."""

    dim, device = 2, "gpu"

    def __init__(self, fail_at: int | None = None, slow: float = 0.0):
        import threading

        self.threads, self.fail_at, self.slow, self._thread = [], fail_at, slow, threading.current_thread

    def cut(self, rgb, landmarks):
        return np.asarray(landmarks, np.float32)

    def submit_faces(self, faces):
        self.threads.append(self._thread().name)
        if self.fail_at is not None and len(self.threads) == self.fail_at:
            raise RuntimeError("the embedder fell over")

        def read():
            time.sleep(self.slow)
            return np.stack([f[0] for f in faces])

        return read


def test_a_gpu_embedder_embeds_on_a_thread_of_its_own(yunet_cpu, monkeypatch):
    """The faces go to a thread of their own (FACERUN_EMBED_THREAD=on, for a GPU embedder): the same results in the
    same order as the feeding thread embedding them, its batches submitted from that thread, the feeding thread's
    clock without them."""
    paths = [FACES / p for p in SMALL_PHOTOS] * 2
    runs = {}
    for setting in ("off", "on"):
        monkeypatch.setenv("FACERUN_EMBED_THREAD", setting)
        embedder, stats = _ThreadNoting(), LibraryStats()
        runs[setting] = (list(iter_photo_faces(paths, yunet_cpu, embedder, batch=3, workers=2, stats=stats)),
                         embedder, stats)
    (inline, e_off, s_off), (threaded, e_on, s_on) = runs["off"], runs["on"]
    assert [r.path for r in threaded] == paths and sum(len(r.faces) for r in threaded) > len(paths)
    for a, b in zip(inline, threaded):
        assert [f.box for f in a.faces] == [f.box for f in b.faces]
        assert np.array_equal(a.embeddings, b.embeddings)
        assert np.array_equal(b.embeddings, np.stack([f.landmarks[0] for f in b.faces]).astype(np.float32))
    assert set(e_on.threads) == {"facerun-embed_0"} and "facerun-embed_0" not in e_off.threads
    assert s_on.embed_thread and not s_off.embed_thread and s_on.seconds["embed"] > 0
    from facerun import phases

    assert s_off.clock.ns[phases.EMBED] > 0 and s_on.clock.ns[phases.EMBED] == 0


def test_a_failing_embed_thread_stops_the_run_and_its_threads(yunet_cpu, monkeypatch):
    import threading

    monkeypatch.setenv("FACERUN_EMBED_THREAD", "on")
    paths = [FACES / p for p in SMALL_PHOTOS] * 3
    got = []
    with pytest.raises(RuntimeError, match="embedder fell over"):
        for r in iter_photo_faces(paths, yunet_cpu, _ThreadNoting(fail_at=3), batch=2, workers=2):
            got.append(r)
    assert [r.path for r in got] == paths[: len(got)]
    for t in threading.enumerate():
        if t.name.startswith("facerun-") and not t.name.startswith("facerun-lane-"):
            t.join(timeout=30)
            assert not t.is_alive()


def test_the_feeding_thread_waits_for_a_slow_embed_thread(yunet_cpu, monkeypatch):
    """At most a window of photos waits for the embedding thread: a slow one holds the feeding thread back (its
    wait counted as `embedder`), and every photo still comes out, in order."""
    monkeypatch.setenv("FACERUN_EMBED_THREAD", "on")
    paths = [FACES / p for p in SMALL_PHOTOS] * 3
    stats = LibraryStats()
    out = list(iter_photo_faces(paths, yunet_cpu, _ThreadNoting(slow=0.2), batch=1, workers=1, stats=stats))
    assert [r.path for r in out] == paths
    assert stats.clock.idle_ns["embedder"] > 0.2e9


def _sized(folder, sizes):
    folder.mkdir(exist_ok=True)
    paths = []
    for i, (w, h) in enumerate(sizes):
        path = folder / f"p{i:02d}.jpg"
        Image.new("RGB", (w, h), (i * 9 % 255, 90, 160)).save(path)
        paths.append(path)
    return paths


def test_the_lookahead_hands_out_paths_grouped_by_bucket_in_a_window(tmp_path):
    from collections import deque

    from facerun.face.library import _Lookahead

    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    sizes = [(100, 80), (300, 200), (100, 80), (300, 200), (100, 80), (640, 480), (300, 200), (100, 80)]
    paths = _sized(tmp_path / "p", sizes)
    paths.insert(3, tmp_path / "broken.jpg")
    order = deque()
    look = _Lookahead(iter(paths), lambda w, h: (w, h), window=6, size=2, order=order)
    got = [look.next().path for _ in range(len(paths))]
    assert look.next() is None and [e.path for e in order] == paths  # every path in the reorder buffer, in order
    names = [p.name for p in got]
    # the oldest path's bucket, then one more of it from the window; the unreadable file alone
    assert names == ["p00.jpg", "p02.jpg", "p01.jpg", "p03.jpg", "broken.jpg", "p04.jpg", "p07.jpg", "p05.jpg",
                     "p06.jpg"]
    first = _Lookahead(iter(paths), lambda w, h: (w, h), window=6, size=2, order=deque())
    assert [first.next(1).path for _ in range(3)] == paths[:3]  # a window of one: input order
    # the headers read elsewhere (the decoding threads' pool): the same grouping once they are read; a header not
    # read yet is not grouped, and the oldest path's is read here rather than waited for
    from concurrent.futures import Future

    def read_now(fn, path):
        done = Future()
        done.set_result(fn(path))
        return done

    pooled = _Lookahead(iter(paths), lambda w, h: (w, h), window=6, size=2, order=deque(), submit=read_now)
    assert [pooled.next().path.name for _ in range(len(paths))] == names
    never = _Lookahead(iter(paths), lambda w, h: (w, h), window=6, size=2, order=deque(),
                       submit=lambda fn, path: Future())
    assert [never.next().path for _ in range(len(paths))] == paths  # nothing read elsewhere: input order


def test_a_photos_upright_size_comes_from_its_header(tmp_path):
    from facerun.face.images import ORIENTATION, upright_size

    plain, turned = tmp_path / "plain.jpg", tmp_path / "turned.jpg"
    Image.new("RGB", (40, 30)).save(plain)
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    Image.new("RGB", (40, 30)).save(turned, exif=exif)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xffnot really")
    assert upright_size(plain) == (40, 30) and upright_size(turned) == (30, 40)
    assert upright_size(tmp_path / "broken.jpg") is None and upright_size(tmp_path / "missing.jpg") is None


def test_photos_read_ahead_by_bucket_fill_the_gpus_batches(tmp_path, gpu, monkeypatch):
    """FACERUN_PHOTO_LOOKAHEAD: photos of four buckets in turn, batches of 4: in input order they go to the decoders
    one bucket after another; read ahead, grouped by bucket from their headers, so the batches fill; the same faces,
    in input order. (How many submissions each order makes also depends on whether the feeding thread waits on the
    decoders, when it runs the groups it has: timing, so the test counts the decoders' order instead.)"""
    import concurrent.futures

    from facerun.face import library
    from facerun.face.detect import Detector

    detector = Detector(str(YUNET), device="gpu")
    sizes = [(100, 80), (200, 100), (300, 100), (100, 300)]
    assert len({detector.batch_key_of_size(w, h) for w, h in sizes}) == 4
    paths = _sized(tmp_path / "p", sizes * 8)
    bucket_of = {p: i % 4 for i, p in enumerate(paths)}
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")
    decoded = []  # the photos in the order they were handed to the decoding threads

    class Pool(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            if fn is library._decode:
                decoded.append(args[0])
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(library, "ThreadPoolExecutor", Pool)
    batches, real = [], detector.submit_networks
    monkeypatch.setattr(detector, "submit_networks", lambda prepared: batches.append(len(prepared)) or real(prepared))
    runs = {}
    for window in (None, "32"):
        if window:
            monkeypatch.setenv("FACERUN_PHOTO_LOOKAHEAD", window)
        decoded.clear(), batches.clear()
        runs[window] = (list(iter_photo_faces(paths, detector, None, workers=2)), list(decoded), list(batches))
    (plain, plain_order, plain_batches), (grouped, grouped_order, grouped_batches) = runs[None], runs["32"]
    assert [r.path for r in grouped] == paths and all(r.ok for r in grouped)
    assert [[f.box for f in r.faces] for r in grouped] == [[f.box for f in r.faces] for r in plain]
    # the first two photos run alone (the model's checks); every other photo in a batch of its bucket
    assert sum(grouped_batches) == sum(plain_batches) == len(paths) - 2 and max(grouped_batches) == 4

    def changes(order):  # how often the next photo to decode is of another bucket
        return sum(bucket_of[a] != bucket_of[b] for a, b in zip(order, order[1:]))

    assert sorted(plain_order) == sorted(grouped_order) == sorted(paths)
    assert plain_order == paths and changes(plain_order) == len(paths) - 1
    # read ahead: a bucket's photos go to the decoders together, a batch's worth (4) of them at least once
    assert changes(grouped_order) < changes(plain_order)
    # (which photos are grouped depends on when their headers were read: the first ones go before any is)
    buckets = [bucket_of[p] for p in grouped_order]
    assert any(len(set(buckets[i:i + 4])) == 1 for i in range(len(buckets) - 3))


def test_a_photo_wanted_next_is_hurried_not_forced_while_photos_come(tmp_path, gpu, monkeypatch):
    """FACERUN_PHOTO_HURRY: a photo of a rare bucket every twelfth, the rest of two common ones, batches of 4. Set to 0,
    the reorder buffer forces the rare photo's group (run and read back at once) before the last photo is fed; by
    default its group is submitted and read back with the next batch, and only the run's end forces what is left.
    The same faces either way, in input order. Groups are not run while the feeding thread waits on the decoders
    (Buckets.idle, off here): that would submit the rare photo's group whenever the decoders fell behind first, and
    the forcing this test looks for would then depend on the machine's timing."""
    from facerun.face.buckets import Buckets
    from facerun.face.detect import Detector

    detector = Detector(str(YUNET), device="gpu")
    common, rare = [(160, 120), (224, 160)], [(288, 224), (120, 200), (200, 288), (320, 192)]
    sizes = [rare[(i // 12) % 4] if i % 12 == 0 else common[i % 2] for i in range(36)]
    assert len({detector.batch_key_of_size(w, h) for w, h in sizes}) == 5
    (tmp_path / "p").mkdir()
    paths = []
    for i, size in enumerate(sizes):
        paths.append(tmp_path / "p" / f"p{i:02d}.jpg")
        Image.open(FACES / SMALL_PHOTOS[i % 5]).convert("RGB").resize(size).save(paths[-1])
    added, forced = [0], []
    add, force = Buckets.add, Buckets.force
    monkeypatch.setattr(Buckets, "add", lambda self, photo: added.__setitem__(0, added[0] + 1) or add(self, photo))
    monkeypatch.setattr(Buckets, "force", lambda self, slot: forced.append(added[0]) or force(self, slot))
    monkeypatch.setattr(Buckets, "idle", lambda self: None)
    monkeypatch.setenv("FACERUN_PHOTO_BATCH", "4")
    runs = {}
    for hurry in ("0", "2"):
        monkeypatch.setenv("FACERUN_PHOTO_HURRY", hurry)
        added[0], forced[:] = 0, []
        results = list(iter_photo_faces(paths, detector, None, workers=2))
        runs[hurry] = ([r.path for r in results], [[f.box for f in r.faces] for r in results], list(forced), added[0])
    (paths0, faces0, forced0, fed0), (paths2, faces2, forced2, fed2) = runs["0"], runs["2"]
    assert paths0 == paths2 == paths and faces0 == faces2 and sum(map(len, faces2)) > 30
    assert any(at < fed0 for at in forced0)  # forced while photos were still coming
    assert forced2 and all(at == fed2 for at in forced2)  # only once every photo was fed
