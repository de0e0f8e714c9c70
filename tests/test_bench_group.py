"""`facerun bench` as a group: `bench models` (what a bare `facerun bench` runs), `bench photos DIR`, `bench search`,
`bench compare A B`; the old spellings --photos, --search and --compare giving the same results; the path registry.

Timings are never compared (this machine is shared): the same invocation twice gives the same rows, models, paths,
parity verdicts, faces and settings, and different milliseconds.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from people_fixtures import FACES, SMALL_PHOTOS, need_real_data
from PIL import Image

from facerun.bench import bench, paths
from facerun.cli import main

SMALL = "sface-arch-small"
# what differs between two runs of one invocation: the clock, and what the machine was doing
TIMING_ROW = {"median_ms", "p10_ms", "p90_ms", "per_face_ms", "speedup_vs_cpu", "runs", "tflops", "gbps", "of_fma_peak",
              "of_bandwidth_peak"}
TIMING_PHOTO_ROW = {"photos_per_s", "faces_per_s", "first_photo_ms", "after_first_per_s", "seconds", "one_off_seconds",
                    "bottleneck", "photos_per_s_runs", "photos_per_s_low", "photos_per_s_high"}


def invoke(*args):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


def as_json(*args):
    res = invoke(*args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def untimed(rows: list[dict], timing: set) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Three shared photos, shrunk so the CPU runs stay quick."""
    need_real_data()
    folder = tmp_path_factory.mktemp("bench-photos")
    for i, (name, side) in enumerate(zip(SMALL_PHOTOS[:3], (160, 200, 240))):
        image = Image.open(FACES / name).convert("RGB")
        image.thumbnail((side, side))
        image.save(folder / f"photo{i}.jpg", quality=92)
    return folder


# ------------------------------------------------------------------------------------------------ bench models


def test_bench_models_is_what_a_bare_bench_runs():
    args = (SMALL, "--paths", "cpu,cpu-batch", "--batch", "2", "--repeat", "2", "--warmup", "0")
    new, old = as_json("models", *args), as_json(*args)
    assert [r["path"] for r in new["rows"]] == ["cpu", "cpu-batch"]
    assert untimed(new["rows"], TIMING_ROW) == untimed(old["rows"], TIMING_ROW)
    assert new["settings"] == old["settings"] and new["machine"]["cores"] == old["machine"]["cores"]
    assert all(r["ok"] is True and r["runs"] == 2 for r in new["rows"])
    # options before the model go to `bench models` too, as before the group
    first = as_json("--paths", "cpu", "--repeat", "1", "--warmup", "0", SMALL)
    assert [(r["model"], r["path"]) for r in first["rows"]] == [(SMALL, "cpu")]


def test_a_bare_bench_runs_bench_models_on_its_defaults(monkeypatch):
    from facerun.commands import bench_models

    calls = []
    monkeypatch.setattr(bench_models, "run_models", lambda *args: calls.append(args))
    for args in ((), ("models",)):
        assert invoke(*args).exit_code == 0
    # models, models_dir, sizes, batch, repeat, warmup, budget, paths_text, allow_software, as_json, save, plot,
    # roofline, by_kernel, reprobe
    assert calls == [((), None, "640x640", 16, 10, 1, 20.0, None, False, False, None, None, False, False, False)] * 2


def test_bench_models_text_table_and_failure_exit_match_the_bare_spelling():
    args = (SMALL, "--paths", "cpu", "--repeat", "1", "--warmup", "0")
    new, old = invoke("models", *args), invoke(*args)
    assert new.exit_code == old.exit_code == 0
    row = next(ln for ln in new.stdout.splitlines() if ln.split()[:3] == [SMALL, "112x112", "cpu"])
    assert "reference" in row
    assert [ln.split()[:4] for ln in new.stdout.splitlines() if ln.startswith(SMALL)] == \
           [ln.split()[:4] for ln in old.stdout.splitlines() if ln.startswith(SMALL)]


def test_unknown_paths_are_one_line_naming_the_known_ones(photos):
    for args, known in ((("models", SMALL, "--paths", "cpu,tpu"), bench.PATHS),
                        ((SMALL, "--paths", "tpu"), bench.PATHS),
                        (("photos", str(photos), "--paths", "cpu,tpu"), tuple(paths.PHOTO_PATHS)),
                        (("--photos", str(photos), "--paths", "tpu"), tuple(paths.PHOTO_PATHS))):
        res = invoke(*args)
        assert res.exit_code == 1, (args, res.output)
        line = res.stderr
        assert line.startswith("error: unknown ") and "path tpu" in line and line.count("\n") == 1, line
        assert all(name in line for name in known), line


def test_a_path_is_one_registry_entry(monkeypatch):
    # a path the registry did not have: the CPU interpreter fed the input again, timed and judged like the others
    def make(case, net):
        x = case.x
        return (lambda: net.run_cpu(x.copy())), None

    monkeypatch.setitem(paths.MODEL_PATHS, "cpu-copy", paths.ModelPath("cpu-copy", make, "the input copied first"))
    data = as_json(SMALL, "--paths", "cpu,cpu-copy", "--repeat", "2", "--warmup", "0")
    row = data["rows"][1]
    assert row["path"] == "cpu-copy" and row["batch"] == 1 and row["runs"] == 2
    assert row["ok"] is True and row["cosine_vs_cpu"] == pytest.approx(1.0) and row["max_abs_vs_cpu"] == 0.0

    def wrong(case, net):
        x = case.x
        return (lambda: {k: -v for k, v in net.run_cpu(x).items()}), None

    monkeypatch.setitem(paths.MODEL_PATHS, "cpu-negated", paths.ModelPath("cpu-negated", wrong, "a wrong answer"))
    res = invoke(SMALL, "--paths", "cpu,cpu-negated", "--repeat", "1", "--warmup", "0", "--json")
    assert res.exit_code == 1 and json.loads(res.stdout)["rows"][1]["ok"] is False


def test_the_registry_is_where_the_path_sets_come_from():
    assert tuple(paths.MODEL_PATHS) == bench.PATHS and bench.DEFAULT_PATHS == (
        "cpu", "gpu-per-conv", "gpu", "gpu-batch", "onnxruntime")
    assert {n for n in bench.PATHS if n.endswith("-batch") or n == "gpu-batch-f16"} == bench.BATCH_PATHS
    assert bench.HALF_PATHS == {"gpu-f16", "gpu-batch-f16"} <= bench.GPU_PATHS
    assert bench.TORCH_PATHS | bench.WEBGPU_PATHS == bench.PEER_GPU_PATHS
    assert [n for n, p in paths.MODEL_PATHS.items() if p.reference] == ["cpu"]
    assert tuple(paths.PHOTO_PATHS) == ("cpu", "gpu", "cpu-serial", "gpu-serial", "cpu-decoder-processes",
                                        "gpu-decoder-processes", "decode", "decode-processes", "cpu-processes",
                                        "gpu-processes", "opencv", "opencv-threads")
    assert [n for n, p in paths.PHOTO_PATHS.items() if p.default] == ["cpu", "gpu", "opencv"]
    tolerances = {n: (p.tolerance, p.min_cosine) for n, p in paths.MODEL_PATHS.items()}
    assert tolerances["cpu-batch"] == tolerances["onnxruntime"] == (bench.agree.TOLERANCE, bench.MIN_COSINE)
    assert tolerances["gpu"] == tolerances["torch-cuda"] == (bench.GPU_TOLERANCE, bench.MIN_COSINE)
    assert tolerances["gpu-f16"] == (bench.agree.GPU_F16_TOLERANCE, bench.agree.MIN_COSINE_F16)


# ------------------------------------------------------------------------------------------------ bench photos


def test_bench_photos_gives_the_old_spellings_json(photos):
    args = ("--paths", "cpu,cpu-serial", "--batch", "4")
    new, old = as_json("photos", str(photos), *args), as_json("--photos", str(photos), *args)
    assert [r["path"] for r in new["rows"]] == ["cpu", "cpu-serial"]
    assert {k: v for k, v in new.items() if k != "rows"} == {k: v for k, v in old.items() if k != "rows"}
    assert untimed(new["rows"], TIMING_PHOTO_ROW) == untimed(old["rows"], TIMING_PHOTO_ROW)
    assert new["photos"] == 3 and new["rows"][0]["faces"] > 0
    assert new["rows"][0]["agree_with_cpu"] is None and new["rows"][1]["agree_with_cpu"]["same"] is True


def test_bench_photos_refuses_a_folder_without_photos(tmp_path):
    for args in (("photos", str(tmp_path)), ("--photos", str(tmp_path))):
        res = invoke(*args, "--paths", "cpu")
        assert res.exit_code == 1 and res.stderr.startswith("error: ") and "no photos found" in res.stderr
        assert res.stderr.count("\n") == 1
    res = invoke("photos")
    assert res.exit_code == 2 and "DIR" in res.stderr


# ------------------------------------------------------------------------------------------------ bench search


def test_bench_search_gives_the_old_spellings_rows():
    new = as_json("search", "2000,3000")
    spaced = as_json("search", "2000", "3000")
    old = as_json("--search", "2000,3000")
    for data in (new, spaced, old):
        rows = data["search"]
        assert [(r["faces"], r["dim"]) for r in rows] == [(2000, 512), (3000, 512)]
        assert all(r["median_ms"] > 0 and r["p90_ms"] >= r["median_ms"] for r in rows)
    assert [r["matrix_mb"] for r in new["search"]] == [r["matrix_mb"] for r in old["search"]]
    text = invoke("search", "2000")
    assert text.exit_code == 0 and "2,000" in text.stdout and "brute-force" in text.stdout


def test_bench_search_refuses_counts_that_are_not_numbers():
    for args, words in ((("search", "many"), "bench search takes face counts"),
                        (("search", "0"), "at least 1"),
                        (("--search", "many"), "--search takes face counts")):
        res = invoke(*args)
        assert res.exit_code == 1 and res.stderr.startswith("error: ") and words in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1


# ------------------------------------------------------------------------------------------------ bench compare


def test_bench_compare_gives_the_old_spellings_output(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for target, chosen in ((a, "cpu,cpu-batch"), (b, "cpu")):
        res = invoke("models", SMALL, "--paths", chosen, "--batch", "2", "--repeat", "2", "--warmup", "0",
                     "--save", str(target))
        assert res.exit_code == 0, res.output
    new, old = as_json("compare", str(a), str(b)), as_json("--compare", str(a), str(b))
    assert new == old
    by_path = {r["path"]: r for r in new["rows"]}
    saved_a, saved_b = json.loads(a.read_text()), json.loads(b.read_text())
    want = saved_a["rows"][0]["per_face_ms"] / saved_b["rows"][0]["per_face_ms"]
    assert by_path["cpu"]["speedup"] == pytest.approx(want) and by_path["cpu-batch"]["found_in"] == "A"
    text_new, text_old = invoke("compare", str(a), str(b)), invoke("--compare", str(a), str(b))
    assert text_new.exit_code == text_old.exit_code == 0 and text_new.stdout == text_old.stdout
    assert f"{want:.2f}x" in text_new.stdout

    res = invoke("compare", str(a))
    assert res.exit_code == 2 and "B.json" in res.stderr
    res = invoke(SMALL, "--compare", str(a), str(b))
    assert res.exit_code == 1 and "--compare takes two saved results and no models" in res.stderr


# ------------------------------------------------------------------------------------------------ help


def test_every_subcommand_has_its_help_and_json():
    top = invoke("--help")
    assert top.exit_code == 0
    text = top.stdout
    for name in ("models", "photos", "search", "compare"):
        assert f"\n  {name} " in text, name
        sub = invoke(name, "--help")
        assert sub.exit_code == 0 and "--json" in sub.stdout and len(sub.stdout.split()) > 60, name
    # the bare spelling's options, and the old spellings, are in the group's own help
    assert "--models DIR" in text and "--paths" in text and "--save" in text
    for old in ("--photos DIR", "--search [N,N,...]", "--compare A.json B.json"):
        assert old in text and old in invoke("models", "--help").stdout
    # the old spellings' options are not shown as options of `bench models`
    options = invoke("models", "--help").stdout.split("Options:")[1].split("The old spellings")[0]
    assert "--photos" not in options and "--embed" not in options and "--workers" not in options
    photo_help = invoke("photos", "--help").stdout
    unwrapped = " ".join(photo_help.split()).replace("- ", "-")  # click wraps long path names at their hyphens
    assert all(name in unwrapped for name in paths.PHOTO_PATHS) and "--embed" in photo_help


def test_a_model_named_like_a_subcommand_is_reached_through_bench_models():
    # `bench models photos` looks for a model called photos (exit 1, no such model), where `bench photos` is the
    # subcommand asking for its DIR (a usage error, exit 2)
    res = invoke("models", "photos", "--paths", "cpu", "--repeat", "1")
    assert res.exit_code == 1 and "photos" in res.stderr and res.stderr.startswith("error: ")
    assert invoke("photos", "--paths", "cpu").exit_code == 2
