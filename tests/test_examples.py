"""The scripts in examples/ (a user's examples) and benchmarks/ (the measurements behind the README's figures) run as
a user would run them (a subprocess, facerun on PYTHONPATH) on small real inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"


def run_example(name: str, *args, timeout: float = 120, folder: Path = EXAMPLES,
                software_gpu: bool = False) -> subprocess.CompletedProcess:
    """Runs a script as a user would: a software adapter (lavapipe) is refused, as it is by default, so the script
    runs on the CPU here unless the test is about its GPU rows (software_gpu=True)."""
    env = dict(os.environ)
    if not software_gpu:
        env.pop("FACERUN_ALLOW_SOFTWARE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run([sys.executable, str(folder / name), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done


def run_benchmark(name: str, *args, timeout: float = 120, software_gpu: bool = False) -> subprocess.CompletedProcess:
    return run_example(name, *args, timeout=timeout, folder=BENCHMARKS, software_gpu=software_gpu)


def needs_module(name: str):
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not written yet")


def trailing_json(text: str):
    """The JSON document the script prints last (after its progress lines)."""
    return json.loads(text[text.index("\n{") + 1 :] if not text.startswith("{") else text)


def test_detect_and_draw_writes_annotated_copies(models_dir, data_dir, tmp_path):
    needs_module("facerun.face.detect")
    needs_module("facerun.face.draw")
    photos = data_dir / "faces" / "group"
    done = run_example("detect_and_draw.py", photos, tmp_path / "out", "--limit", "2")
    summary = trailing_json(done.stdout)["photos"]
    originals = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))[:2]
    assert sorted(summary) == [p.name for p in originals]
    for original in originals:
        entry = summary[original.name]
        assert entry["faces"] >= 2, entry  # both are group photos
        annotated = Image.open(entry["annotated"]).convert("RGB")
        with Image.open(original) as im:
            from PIL import ImageOps

            source = ImageOps.exif_transpose(im).convert("RGB")
        assert annotated.size == source.size
        # the drawing changed pixels (boxes are pure green); JPEG noise alone does not put that many there
        a = np.asarray(annotated, dtype=np.int16)
        green = (a[..., 1] > 200) & (a[..., 0] < 60) & (a[..., 2] < 60)
        s = np.asarray(source, dtype=np.int16)
        was_green = (s[..., 1] > 200) & (s[..., 0] < 60) & (s[..., 2] < 60)
        assert green.sum() > was_green.sum() + 100


def test_embed_and_search_finds_the_same_person_first(models_dir, data_dir, tmp_path):
    needs_module("facerun.face.embed")
    if not (models_dir / "MobileFaceNet.onnx").exists():
        pytest.skip("no embedder in the shared models")
    faces = data_dir / "faces"
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    picks = [("obama", "obama1.jpg"), ("obama", "obama2.jpg"), ("biden", "biden.jpg"), ("biden", "biden2.jpg"),
             ("clapton", None), ("lennon", None)]
    for person, file in picks:
        src = faces / person / file if file else sorted((faces / person).iterdir())[0]
        (gallery / f"{person}__{src.name}").symlink_to(src)
    done = run_example("embed_and_search.py", gallery, faces / "obama" / "obama.jpg", "--model", "mobilefacenet",
                       "--top", "6", "--json")
    result = json.loads(done.stdout)
    assert result["gallery_faces"] == len(picks)
    closest = result["closest"]
    assert [Path(h["image"]).name.split("__")[0] for h in closest[:2]] == ["obama", "obama"]
    assert closest[0]["match"] is True
    cosines = [h["cosine"] for h in closest]
    assert cosines == sorted(cosines, reverse=True)
    others = [h for h in closest if not Path(h["image"]).name.startswith("obama")]
    assert all(not h["match"] for h in others), others


def test_bench_and_compare_saves_and_compares_two_runs(tmp_path):
    done = run_example("bench_and_compare.py", tmp_path, "--repeat", "2", "--paths", "cpu,gpu", software_gpu=True)
    from facerun.bench import bench

    a, b = bench.load_result(tmp_path / "run-a.json"), bench.load_result(tmp_path / "run-b.json")
    for data in (a, b):
        assert [(r["model"], r["path"]) for r in data["rows"]] == [
            ("sface-arch-small", "cpu"), ("sface-arch-small", "gpu"),
            ("auraface-arch-small", "cpu"), ("auraface-arch-small", "gpu")]
    table = done.stdout[done.stdout.index("B speed-up"):].splitlines()[1:]
    assert len(table) == 4
    cpu_line = next(ln for ln in table if ln.startswith("sface-arch-small") and " cpu " in ln)
    want = a["rows"][0]["per_face_ms"] / b["rows"][0]["per_face_ms"]
    assert cpu_line.endswith(f"{want:.2f}x")

    # against a baseline: only one new run
    again = tmp_path / "again"
    run_example("bench_and_compare.py", again, "--repeat", "2", "--paths", "cpu", "--baseline", tmp_path / "run-a.json")
    assert sorted(p.name for p in again.iterdir()) == ["run-b.json"]


def test_timing_prints_every_path_with_a_number_or_a_reason(models_dir, data_dir):
    photo = data_dir / "faces" / "obama" / "obama-720p.jpg"
    done = run_benchmark("timing.py", "detect", photo, "--repeat", "2")
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {"facerun cpu", "facerun gpu", "opencv FaceDetectorYN"}
    assert "1 faces" in rows["facerun cpu"] and "1 faces" in rows["opencv FaceDetectorYN"]
    assert float(rows["facerun cpu"].split()[2]) > 0
    gpu = rows["facerun gpu"]  # a number on a real GPU; here the reason the software adapter is refused
    assert "software adapter" in gpu or float(gpu.split()[2]) > 0, gpu
    done = run_benchmark("timing.py", "embed", "sface-arch-small", "--faces", "8", "--batch", "4", "--repeat", "1")
    lines = done.stdout.splitlines()[1:]
    assert [line.split("  ")[0].strip() for line in lines] == ["facerun cpu", "facerun gpu", "onnxruntime cpu",
                                                              "onnxruntime webgpu"]
    assert "faces/s" in lines[0] and float(lines[0].split()[2]) > 0


def test_cpu_ratio_prints_a_ratio_per_model_and_for_detect(models_dir, data_dir):
    needs_module("onnxruntime")
    done = run_benchmark("cpu_ratio.py", "sface-arch-small", "sface-arch-small:2", "face_detection_yunet_2023mar.onnx",
                       "--size", "160x96", "--repeat", "1", "--reference")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("one thread, CPU time")
    assert [ln.split(":")[0] for ln in lines[1:]] == ["sface-arch-small 112x112 batch 1",
                                                     "sface-arch-small 112x112 batch 2",
                                                     "face_detection_yunet_2023mar.onnx 160x96 batch 1"]
    for ln in lines[1:]:
        assert "reference" in ln and float(ln.rsplit(" ", 1)[1].rstrip("x")) > 0
    needs_module("cv2")
    photo = data_dir / "faces" / "obama" / "obama-240p.jpg"
    done = run_benchmark("cpu_ratio.py", "--detect", photo, "--repeat", "1")
    assert done.stdout.splitlines()[1].startswith("detect 427x240: facerun ")


def test_cpu_ratio_on_threads_adds_the_one_lane_row(models_dir):
    needs_module("onnxruntime")
    done = run_benchmark("cpu_ratio.py", "face_detection_yunet_2023mar.onnx", "--size", "320x256", "--repeat", "1",
                       "--threads", "2")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("2 threads, wall clock")
    got = lines[1]
    assert got.startswith("face_detection_yunet_2023mar.onnx 320x256 batch 1: facerun ") and "one-lane" in got
    assert float(got.split("one-lane ")[1].split()[0]) > 0


def test_cpu_wall_prints_a_median_per_model(models_dir):
    done = run_benchmark("cpu_wall.py", "sface-arch-small", "sface-arch-small:2", "face_detection_yunet_2023mar.onnx",
                       "--size", "160x96", "--repeat", "2")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("facerun ") and lines[0].endswith(str(ROOT))
    assert [ln.rsplit(":", 1)[0] for ln in lines[1:]] == ["sface-arch-small 112x112 batch 1",
                                                          "sface-arch-small:2 112x112 batch 2",
                                                          "face_detection_yunet_2023mar.onnx 160x96 batch 1"]
    assert all(float(ln.rsplit(" ", 2)[1]) > 0 for ln in lines[1:])


def test_processes_ceiling_times_each_run_and_finds_the_same_faces(models_dir, data_dir, tmp_path):
    import shutil

    for name in ("fr_two_people.jpg", "fr_obama_and_biden.jpg"):
        shutil.copy(data_dir / "faces" / "group" / name, tmp_path / name)
    done = run_benchmark("processes_ceiling.py", tmp_path, "--device", "cpu", "--runs", "1x1,2x1",
                       "--model", models_dir / "face_detection_yunet_2023mar.onnx")
    lines = [line for line in done.stdout.splitlines() if "photos/s once up" in line]
    assert [line.split(" processes")[0] for line in lines] == ["1", "2"]
    faces = {line.split(" faces:")[0].rsplit(", ", 1)[1] for line in lines}
    assert len(faces) == 1 and int(faces.pop()) >= 4  # the same faces whatever the split


def test_masked_photos_prints_exact_masked_runs(gpu):
    done = run_benchmark("masked_photos.py", "--cases", "2", software_gpu=True)
    lines = [line for line in done.stdout.splitlines() if "program" in line]
    assert len(lines) == 2
    for line in lines:
        masked = float(line.split("masked ")[1].split(",")[0])
        unmasked = float(line.split("unmasked ")[1])
        assert masked <= 1e-4 < unmasked, line


def test_examples_holds_only_a_users_examples():
    # the measurements moved to benchmarks/; what stays is what a user would run to learn the API
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["bench_and_compare.py", "detect_and_draw.py",
                                                            "embed_and_search.py"]


def _ab_module():
    spec = importlib.util.spec_from_file_location("ab", BENCHMARKS / "ab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ab_command_line_parses_models_and_fails_in_one_line(capsys):
    from facerun.errors import ModelError

    ab = _ab_module()
    seen = []
    assert ab.ab_main("A/B", seen.extend, ["sface-arch:4", "yunet-arch"]) == 0
    assert seen == [("sface-arch", 4), ("yunet-arch", 1)]
    assert ab.ab_main("A/B", seen.extend, []) == 0
    assert seen[2:] == [(m.partition(":")[0], int(m.partition(":")[2])) for m in ab.AB_MODELS]

    def broken(specs):
        raise ModelError("no such model: nope")

    assert ab.ab_main("A/B", broken, ["nope"]) == 1
    assert capsys.readouterr().err == "error: no such model: nope\n"
    with pytest.raises(SystemExit):
        ab.ab_main("A/B", seen.extend, ["sface-arch:0"])


def test_gil_share_splits_the_lock_by_thread_role(tmp_path):
    """benchmarks/gil_share.py on py-spy's raw format: each role's share of the samples, as ms a photo, and the
    functions under it; a missing file is one line and exit 1."""
    raw = tmp_path / "gil.txt"
    raw.write_text(
        "thread (0x1): MainThread;<module> (<string>:1);_pipelined (facerun/face/library.py:480);"
        "submit (facerun/gpu/batch.py:190) 30\n"
        "thread (0x2): facerun-decode_0;_worker (concurrent/futures/thread.py:83);"
        "_decode (facerun/face/library.py:191);load_photo_shrunk (facerun/face/images.py:89) 10\n"
        "thread (0x3): facerun-post_1;_post (facerun/face/library.py:241) 10\n")
    done = run_benchmark("gil_share.py", raw, "--rate", "100", "--photos", "10")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("50 samples")
    shares = {line.split()[0]: line.split()[1:4] for line in lines[1:4]}
    assert shares["feeding"] == ["60.0%", "30.000", "ms/photo"]  # 30 samples at 100/s over 10 photos
    assert shares["decode"][0] == shares["post"][0] == "20.0%"
    assert any("load_photo_shrunk (face/images.py)" in line for line in lines)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    missing = subprocess.run([sys.executable, str(BENCHMARKS / "gil_share.py"), str(tmp_path / "none.txt")],
                             capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1


def test_feed_order_times_a_trees_pipeline_with_a_stand_in_detector(data_dir):
    from facerun.face.images import iter_images

    group = data_dir / "faces" / "group"
    done = run_benchmark("feed_order.py", ROOT, group, "--repeat", "1", "--ms", "1")
    rate, _, rest = done.stdout.strip().partition(" photos/s (")
    assert float(rate.split(": ")[1]) > 0 and rest.startswith(f"{len(iter_images([group]))} photos")


def test_pipeline_sim_runs_the_library_loop_against_a_simulated_gpu(data_dir):
    from facerun.face.images import iter_images

    group = data_dir / "faces" / "group"
    done = run_benchmark("pipeline_sim.py", ROOT, group, "--repeat", "2", "--decode-ms", "1", "--batch", "2",
                         "--workers", "2")
    rate, _, rest = done.stdout.strip().partition(" photos/s (")
    assert float(rate.split(": ")[1]) > 0 and rest.startswith(f"{2 * len(iter_images([group]))} photos")
    assert "waiting on decoders" in rest


def test_gil_calls_times_a_c_call_both_ways():
    done = run_benchmark("gil_calls.py", "--threads", "0,1", "--calls", "2000")
    rows = [line.split() for line in done.stdout.strip().splitlines()[1:]]
    assert [r[0] for r in rows] == ["0", "1"] and all(float(v) > 0 for r in rows for v in r[1:])


def test_face_prep_times_alignment_and_an_embedders_input(data_dir):
    photo = sorted((data_dir / "faces").glob("*/*.jpg"))[0]
    done = run_benchmark("face_prep.py", ROOT, photo, "--faces", "4", "--rounds", "1")
    line = done.stdout.strip()
    assert " ms a face, embedder input " in line and float(line.split("align ")[1].split()[0]) > 0
    digest, _, cut = line.rsplit("bytes ", 1)[1].partition(", cut for the GPU ")
    assert len(digest) == 16 and float(cut.split()[0]) > 0  # this tree cuts faces for the GPU too


def test_batch_fill_counts_photos_a_batch_from_the_headers(data_dir, tmp_path):
    """Two buckets' photos alternating: held photos fill the batches, a window of headers too; one bucket alone:
    every batch full."""
    from PIL import Image

    for i in range(8):  # 4 of 640x480, 4 of 1280x960: two buckets, in turn
        Image.new("RGB", (640, 480) if i % 2 else (1280, 960)).save(tmp_path / f"p{i}.jpg")
    done = run_benchmark("batch_fill.py", tmp_path, "--repeat", "2", "--batch", "4")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("16 photos, 2 buckets, batches of at most 4")
    held = dict(part.split(": ") for part in lines[1].split(": ", 1)[1].strip().split("  "))
    window = dict(part.split(": ") for part in lines[2].split(": ", 1)[1].strip().split("  "))
    assert float(held["8"]) == float(window["64"]) == 4.0  # room for both groups: full batches


def test_short_batches_times_a_batch_program_with_and_without_its_padding(data_dir, gpu):
    photo = data_dir / "faces" / "group" / "deepface_couple.jpg"
    done = run_benchmark("short_batches.py", photo, "--side", "160", "--items", "3", "--rounds", "1", "--repeat", "1",
                         timeout=600, software_gpu=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("YuNet, bucket ") and "a program of 3 items" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["2", "3"]
    assert all(r[-1] == "True" for r in rows), done.stdout  # the same faces with the padding skipped


def test_upload_moves_bytes_every_way_and_reads_back_what_it_wrote(gpu):
    done = run_benchmark("upload.py", "--mb", "0.1,0.6", "--rounds", "1", "--piece-mb", "0.03", software_gpu=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("uploads on ") and lines[1].split()[0] == "MB"
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["0.1", "0.6"]
    for r in rows:  # seven "ms (GB/s)" cells and the empty submission's ms
        cells = [float(c.strip("()")) for c in r[1:]]
        assert len(cells) == 15 and all(c > 0 for c in cells), r


def test_encoder_calls_times_a_command_buffer_both_ways(gpu):
    done = run_benchmark("encoder_calls.py", "--threads", "0,2", "--runs", "3", "--rounds", "1", software_gpu=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("YuNet 160x128, ") and "dispatches a pass" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["0", "2"]
    assert all(len(r) == 4 and all(float(c) > 0 for c in r[1:]) for r in rows), rows


def test_first_photo_times_the_whole_job_with_an_embedder(data_dir, tmp_path):
    from people_fixtures import copy_photos

    copy_photos(tmp_path, ("group/fr_obama_and_biden.jpg", "obama/obama3.jpg", "clapton/clapton-2.jpg"))
    done = run_benchmark("first_photo.py", tmp_path, "--embedder", "mobilefacenet", "--device", "cpu", timeout=300)
    row = json.loads(done.stdout)
    assert row["photos"] == 3 and row["faces"] >= 3 and row["first_photo_ms"] > 0
    assert row["seconds"]["embed"] > 0  # the faces were embedded, not only detected
