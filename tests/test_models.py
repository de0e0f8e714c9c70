"""Known-model table, model search path and cache, downloads against a local HTTP server, and `facerun models`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_paths import MODELS

from facerun.cli import main
from facerun.errors import ModelError
from facerun.zoo import find, known

from local_http import ModelServer

SHARED = MODELS
YUNET = SHARED / "face_detection_yunet_2023mar.onnx"
SHARED_FILES = ["face_detection_yunet_2023mar.onnx", "face_detection_yunet_2022mar.onnx", "MobileFaceNet.onnx",
                "det_500m.onnx", "retinaface_mnet025.onnx", "ultraface_RFB-320.onnx", "blazeface_front128.onnx",
                "yolov5n-0.5-face.onnx"]

needs_shared = pytest.mark.skipif(not YUNET.is_file(), reason=f"shared models not found in {SHARED}")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No test sees the user's real cache or model folders."""
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FACERUN_MODELS", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def yunet_bytes() -> bytes:
    if not YUNET.is_file():
        pytest.skip(f"shared models not found in {SHARED}")
    return YUNET.read_bytes()


@pytest.fixture
def server(yunet_bytes):
    with ModelServer(yunet_bytes, max_seconds=60) as s:
        yield s


def _place(src: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(src, folder / (name or src.name)))


# ------------------------------------------------------------------------------------------- known table


@needs_shared
@pytest.mark.parametrize("filename", SHARED_FILES)
def test_shared_files_are_identified_by_sha256(filename):
    path = SHARED / filename
    data = path.read_bytes()
    sha = known.sha256_of(path)
    assert sha == hashlib.sha256(data).hexdigest()  # the streamed hash agrees with a one-shot one
    model = known.by_sha256(sha)
    assert model is not None, f"{filename} not recognised"
    assert model.filename == filename
    assert model.size == len(data)
    assert known.by_sha256(sha.upper()) is model


def test_table_is_consistent():
    names = [m.name for m in known.KNOWN]
    assert len(set(names)) == len(names)
    assert len({m.filename.lower() for m in known.KNOWN}) == len(names)
    for m in known.KNOWN:
        assert m.kind in ("detector", "embedder")
        assert m.sha256 is None or (len(m.sha256) == 64 and int(m.sha256, 16) >= 0 and m.sha256 == m.sha256.lower())
        assert m.url is None or m.url.startswith("https://")
        # the detector files keep the names their families' packs use, which their source repos may not
        assert m.url is None or m.url.rsplit("/", 1)[-1] == m.filename or m.kind == "detector"
        assert m.url is None or m.url.endswith(".onnx")
        assert "\n" not in m.notes and m.notes
        assert all(s > 0 for s in m.std)
        if m.kind == "embedder":
            assert m.input_size == (112, 112) and m.threshold is not None and m.dim in (128, 512)
        else:
            assert m.family is not None and m.license


def test_by_name_accepts_names_and_file_names():
    assert known.by_name("yunet-2023mar").filename == "face_detection_yunet_2023mar.onnx"
    assert known.by_name("Face_Detection_YuNet_2023mar.onnx").name == "yunet-2023mar"
    assert known.by_name("glintr100.onnx").name == "auraface-v1"
    assert known.by_name("nosuchmodel") is None
    assert known.by_sha256("0" * 64) is None


def test_mobilefacenet_preprocessing_is_imagenet_on_0_255():
    m = known.by_name("mobilefacenet")
    pixel = 200.0
    for c, (mean, std) in enumerate(zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))):
        assert (pixel - m.mean[c]) / m.std[c] == pytest.approx((pixel / 255 - mean) / std, rel=1e-6)


def test_sha256_memo_notices_a_changed_file(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"a" * 1000)
    first = known.sha256_of(path)
    path.write_bytes(b"b" * 1000)  # same size: only the mtime tells them apart
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert known.sha256_of(path) == hashlib.sha256(b"b" * 1000).hexdigest() != first


# ------------------------------------------------------------------------------------ search path, cache


def test_cache_folder_follows_each_platform(tmp_path):
    home = str(tmp_path)
    assert find.cache_root("linux", {"HOME": home}) == tmp_path / ".cache" / "facerun"
    assert find.cache_root("linux", {"HOME": home, "XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/facerun")
    assert find.cache_root("linux", {"HOME": home, "XDG_CACHE_HOME": "rel"}) == tmp_path / ".cache" / "facerun"
    assert find.cache_root("darwin", {"HOME": home}) == tmp_path / "Library" / "Caches" / "facerun"
    assert find.cache_root("win32", {"HOME": home, "LOCALAPPDATA": "/lad"}) == Path("/lad/facerun/Cache")
    assert find.models_cache_dir("darwin", {"HOME": home, "FACERUN_CACHE": "/fc"}) == Path("/fc/models")


def test_search_order_and_deduplication(tmp_path, monkeypatch):
    a, b, explicit = tmp_path / "a", tmp_path / "b", tmp_path / "explicit"
    monkeypatch.setenv("FACERUN_MODELS", os.pathsep.join([str(a), "", str(b), str(a)]))
    # the models shipped inside the package come last
    assert find.search_dirs(explicit) == [explicit, a, b, tmp_path / "cache" / "models", find.SHIPPED_DIR]
    assert find.search_dirs() == [a, b, tmp_path / "cache" / "models", find.SHIPPED_DIR]


@needs_shared
def test_resolve_follows_the_search_order(tmp_path, monkeypatch):
    cache, env_dir, explicit = tmp_path / "cache" / "models", tmp_path / "env", tmp_path / "explicit"
    in_cache = _place(YUNET, cache)
    assert find.resolve("yunet-2023mar") == in_cache
    assert find.default_detector() == in_cache

    monkeypatch.setenv("FACERUN_MODELS", os.pathsep.join([str(tmp_path / "absent"), str(env_dir)]))
    in_env = _place(YUNET, env_dir)
    assert find.resolve("yunet-2023mar") == in_env
    assert find.resolve("face_detection_yunet_2023mar.onnx") == in_env

    in_explicit = _place(YUNET, explicit)
    assert find.resolve("yunet-2023mar", models_dir=explicit) == in_explicit
    # a path wins over everything
    assert find.resolve(str(in_cache), models_dir=explicit) == in_cache


@needs_shared
def test_resolve_finds_a_renamed_file_by_sha256(tmp_path, monkeypatch):
    folder = tmp_path / "renamed"
    _place(SHARED / "MobileFaceNet.onnx", folder, "embedder.onnx")
    renamed = _place(YUNET, folder, "detector.onnx")
    assert find.resolve("yunet-2023mar", models_dir=folder) == renamed
    assert find.resolve("detector.onnx", models_dir=folder) == renamed  # plain file name in a search folder


def test_resolve_missing_model_says_where_it_looked_and_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("FACERUN_MODELS", str(tmp_path / "env"))
    with pytest.raises(ModelError) as err:
        find.resolve("sface-2021dec", models_dir=tmp_path / "explicit")
    message = str(err.value)
    assert "\n" not in message
    assert "facerun models fetch sface-2021dec" in message
    for folder in (tmp_path / "explicit", tmp_path / "env", tmp_path / "cache" / "models"):
        assert str(folder) in message


def test_resolve_rejects_missing_paths_and_unknown_names(tmp_path):
    with pytest.raises(ModelError, match="no such model file"):
        find.resolve(str(tmp_path / "nope" / "model.onnx"))
    with pytest.raises(ModelError, match="folder"):
        find.resolve(str(tmp_path))
    with pytest.raises(ModelError, match="not a file, a known model"):
        find.resolve("nosuchmodel")


@needs_shared
def test_resolve_refuses_a_truncated_file_under_the_canonical_name(tmp_path):
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / YUNET.name).write_bytes(YUNET.read_bytes()[:1000])
    with pytest.raises(ModelError, match="should be 232589 bytes"):
        find.resolve("yunet-2023mar", models_dir=folder)


@needs_shared
def test_scan_identifies_files_and_skips_partial_downloads(tmp_path):
    folder = tmp_path / "scan"
    _place(YUNET, folder, "renamed.onnx")
    (folder / "random.onnx").write_bytes(b"not a model")
    (folder / ".face_detection_yunet_2022mar.onnx.part").write_bytes(b"partial")
    (folder / "notes.txt").write_text("ignored")
    found = {f.path.name: f for f in find.scan(folder) if f.path.parent == folder}
    assert set(found) == {"renamed.onnx", "random.onnx"}
    assert found["renamed.onnx"].known.name == "yunet-2023mar"
    assert found["random.onnx"].known is None
    assert found["random.onnx"].sha256 == hashlib.sha256(b"not a model").hexdigest()


# ----------------------------------------------------------------------------------------------- fetch


def _no_leftovers(dest: Path, name: str = "face_detection_yunet_2023mar.onnx") -> bool:
    return not (dest / name).exists()


def test_fetch_good_download_lands_the_exact_file(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    seen = []
    path = find.fetch("yunet-2023mar", dest, url=server.url("good"), progress=lambda d, t: seen.append((d, t)))
    assert path == dest / "face_detection_yunet_2023mar.onnx"
    assert path.read_bytes() == yunet_bytes
    assert [p.name for p in dest.iterdir()] == [path.name]  # no partial file left behind
    assert seen[-1] == (len(yunet_bytes), len(yunet_bytes))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_fetch_default_destination_is_the_cache(tmp_path, server):
    path = find.fetch("yunet-2023mar", url=server.url("good"))
    assert path.parent == tmp_path / "cache" / "models"
    assert find.resolve("yunet-2023mar") == path


def test_fetch_truncated_never_lands_and_keeps_the_partial(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match="ended after") as err:
        find.fetch("yunet-2023mar", dest, url=server.url("truncated"), retries=2, backoff=0)
    assert "\n" not in str(err.value)
    assert _no_leftovers(dest)
    part = dest / ".face_detection_yunet_2023mar.onnx.part"
    assert 0 < part.stat().st_size < len(yunet_bytes)
    assert yunet_bytes.startswith(part.read_bytes())
    # three attempts; the retries asked to resume from where the first one stopped
    assert len(server.log) == 3
    assert server.log[0][1] is None and server.log[1][1] == f"bytes={len(yunet_bytes) // 2}-"


def test_fetch_corrupted_deletes_the_partial_and_writes_nothing(tmp_path, server):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match="sha256"):
        find.fetch("yunet-2023mar", dest, url=server.url("corrupted"), backoff=0)
    assert list(dest.iterdir()) == []


def test_fetch_resumes_with_a_range_request(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    path = find.fetch("yunet-2023mar", dest, url=server.url("resume"), backoff=0)
    assert path.read_bytes() == yunet_bytes
    half = len(yunet_bytes) // 2
    assert server.log == [("/resume", None, 200), ("/resume", f"bytes={half}-", 206)]


def test_fetch_restarts_from_zero_when_the_server_ignores_range(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    path = find.fetch("yunet-2023mar", dest, url=server.url("no-resume"), backoff=0)
    assert path.read_bytes() == yunet_bytes
    assert [status for _, _, status in server.log] == [200, 200]
    assert server.log[1][1] is not None  # it asked to resume and got the whole file instead


def test_fetch_resumes_a_partial_left_by_an_earlier_run(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError):
        find.fetch("yunet-2023mar", dest, url=server.url("truncated"), retries=0)
    assert _no_leftovers(dest)
    path = find.fetch("yunet-2023mar", dest, url=server.url("good"))
    assert path.read_bytes() == yunet_bytes
    assert server.log[-1] == ("/good", f"bytes={len(yunet_bytes) // 2}-", 206)


def test_fetch_a_wrong_partial_is_caught_by_the_sha256_and_then_recovers(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    dest.mkdir()
    part = dest / ".face_detection_yunet_2023mar.onnx.part"
    part.write_bytes(b"\0" * 5000)  # junk that a resume would splice onto good bytes
    with pytest.raises(ModelError, match="sha256"):
        find.fetch("yunet-2023mar", dest, url=server.url("good"))
    assert list(dest.iterdir()) == []
    assert find.fetch("yunet-2023mar", dest, url=server.url("good")).read_bytes() == yunet_bytes


def test_fetch_keeps_an_existing_file_when_the_download_is_bad(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    dest.mkdir()
    old = dest / "face_detection_yunet_2023mar.onnx"
    old.write_bytes(b"old damaged copy")
    with pytest.raises(ModelError):
        find.fetch("yunet-2023mar", dest, url=server.url("corrupted"))
    assert old.read_bytes() == b"old damaged copy"
    find.fetch("yunet-2023mar", dest, url=server.url("good"))
    assert old.read_bytes() == yunet_bytes


def test_fetch_skips_the_network_when_the_file_is_already_right(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    _place(YUNET, dest)
    assert find.fetch("yunet-2023mar", dest, url=server.url("good")).read_bytes() == yunet_bytes
    assert server.log == []


def test_fetch_unreachable_server_is_a_model_error(tmp_path):
    with socket.socket() as s:  # a port that was free a moment ago and has nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match=f"127.0.0.1:{port}") as err:
        find.fetch("yunet-2023mar", dest, url=f"http://127.0.0.1:{port}/m.onnx", retries=1, backoff=0)
    assert "\n" not in str(err.value)
    assert _no_leftovers(dest)


def test_fetch_times_out_on_a_silent_server(tmp_path, server):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match="timed out"):
        find.fetch("yunet-2023mar", dest, url=server.url("stall"), timeout=0.3, retries=0)
    assert _no_leftovers(dest)


def test_fetch_http_404_fails_without_retrying(tmp_path, server):
    with pytest.raises(ModelError, match="404"):
        find.fetch("yunet-2023mar", tmp_path / "dest", url=server.url("missing"), backoff=0)
    assert len(server.log) == 1


def test_fetch_unknown_model():
    with pytest.raises(ModelError, match="unknown model 'nosuchmodel'"):
        find.fetch("nosuchmodel", url="http://127.0.0.1:9/x")


# -------------------------------------------------------------------------------------------------- CLI


def _run(*args, env=None):
    return CliRunner().invoke(main, ["models", *args], env=env, catch_exceptions=False)


@needs_shared
def test_cli_list_json(tmp_path):
    result = _run("list", "--json", env={"FACERUN_MODELS": str(SHARED)})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [d["path"] for d in report["search_dirs"]] == [str(SHARED), str(tmp_path / "cache" / "models"),
                                                         str(find.SHIPPED_DIR)]
    state = {m["name"]: m for m in report["models"]}
    assert state["yunet-2023mar"]["present"] and state["yunet-2023mar"]["sha256_ok"]
    assert state["mobilefacenet"]["path"] == str(SHARED / "MobileFaceNet.onnx")
    assert not state["auraface-v1"]["present"] and state["auraface-v1"]["path"] is None
    assert state["scrfd-500m"]["family"] == "scrfd" and state["scrfd-500m"]["present"]
    assert state["scrfd-500m"]["license"].startswith("non-commercial")
    assert state["mobilefacenet"]["family"] == "arcface-style"


@needs_shared
def test_cli_models_alone_lists(tmp_path):
    result = _run("--models", str(SHARED))
    assert result.exit_code == 0, result.output
    assert "Known models" in result.stdout and "yunet-2023mar" in result.stdout
    for title in ("YuNet", "SCRFD", "RetinaFace", "UltraFace", "BlazeFace", "YOLOv5-face"):
        assert title in result.stdout


@needs_shared
def test_cli_verify_ok_then_mismatch(tmp_path):
    folder = tmp_path / "mine"
    _place(YUNET, folder, "detector.onnx")
    result = _run("verify", "--json", "--models", str(folder))
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(result.stdout)["files"] if Path(r["path"]).parent == folder]
    assert [(r["model"], r["status"]) for r in rows] == [("yunet-2023mar", "renamed")]

    # a 2022mar file under the 2023mar name: identified, and flagged as not what its name says
    _place(SHARED / "face_detection_yunet_2022mar.onnx", folder, "face_detection_yunet_2023mar.onnx")
    result = _run("verify", "--json", "--models", str(folder))
    assert result.exit_code == 1
    rows = {Path(r["path"]).name: r for r in json.loads(result.stdout)["files"] if Path(r["path"]).parent == folder}
    assert rows["face_detection_yunet_2023mar.onnx"]["status"] == "mismatch"
    assert rows["face_detection_yunet_2023mar.onnx"]["model"] == "yunet-2022mar"
    assert "error:" in result.stderr


def test_cli_fetch_unknown_model_is_one_line_error():
    result = _run("fetch", "nosuchmodel")
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown model 'nosuchmodel'")


def test_cli_fetch_from_a_mirror(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    result = _run("fetch", "yunet-2023mar", "--url", server.url("good"), "--dest", str(dest))
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path == dest / "face_detection_yunet_2023mar.onnx" and path.read_bytes() == yunet_bytes


def test_cli_fetch_corrupted_mirror_fails_cleanly(tmp_path, server):
    dest = tmp_path / "dest"
    result = _run("fetch", "yunet-2023mar", "--url", server.url("corrupted"), "--dest", str(dest))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: download of yunet-2023mar")
    assert list(dest.iterdir()) == []


def test_cli_path_prints_the_cache_folder(tmp_path):
    result = _run("path")
    assert result.exit_code == 0
    assert result.stdout.strip() == str(tmp_path / "cache" / "models")


# ------------------------------------------------------------------------------------- fetch: hostile cases


def test_fetch_never_writes_through_a_symlink_planted_at_the_partial_name(tmp_path, server, yunet_bytes):
    dest = tmp_path / "dest"
    dest.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (dest / ".face_detection_yunet_2023mar.onnx.part").symlink_to(victim)
    path = find.fetch("yunet-2023mar", dest, url=server.url("good"), backoff=0)
    assert victim.read_text() == "precious\n"
    assert path.read_bytes() == yunet_bytes and not path.is_symlink()


def test_fetch_stops_at_the_known_size(tmp_path, server):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match="more than the model's"):
        find.fetch("yunet-2023mar", dest, url=server.url("endless"), backoff=0)
    assert not list(dest.glob("*.onnx*"))


def test_fetch_has_an_overall_deadline(tmp_path, server):
    dest = tmp_path / "dest"
    with pytest.raises(ModelError, match="deadline"):
        find.fetch("yunet-2023mar", dest, url=server.url("trickle"), backoff=0, timeout=5, deadline=1.5)


def test_fetch_keeps_its_deadline_against_a_byte_a_second(tmp_path, server):
    """Each byte of /drip comes within the socket timeout, so only a deadline kept inside a read can stop it (a read
    of a whole chunk waited 18 hours there)."""
    import time

    dest = tmp_path / "dest"
    start = time.monotonic()
    result = _run("fetch", "yunet-2023mar", "--url", server.url("drip"), "--dest", str(dest), "--timeout", "5",
                  "--deadline", "2")
    took = time.monotonic() - start
    assert result.exit_code == 1 and "within the 2 s deadline" in result.stderr, result.output
    assert took < 4.5, f"stopped after {took:.1f} s, past the 2 s deadline"
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_two_fetches_into_one_folder_both_succeed(tmp_path, server, yunet_bytes):
    import threading

    dest = tmp_path / "dest"
    results, errors = [], []

    def one():
        try:
            results.append(find.fetch("yunet-2023mar", dest, url=server.url("good"), backoff=0))
        except Exception as e:  # noqa: BLE001  (the test reports whatever either thread met)
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 2 and results[0] == results[1] and results[0].read_bytes() == yunet_bytes


def test_shipped_models_are_found_with_no_folder_and_checked_by_sha256(tmp_path, monkeypatch):
    monkeypatch.setenv("FACERUN_MODELS", str(tmp_path / "empty"))
    assert find.resolve("yunet-2023mar") == find.SHIPPED_DIR / "face_detection_yunet_2023mar.onnx"
    assert find.resolve("mobilefacenet") == find.SHIPPED_DIR / "MobileFaceNet.onnx"
    assert {"LICENSE-yunet.txt", "LICENSE-MobileFaceNet.txt"} <= {p.name for p in find.SHIPPED_DIR.iterdir()}
    # a damaged copy inside the package is refused, never used
    damaged = tmp_path / "shipped"
    damaged.mkdir()
    data = bytearray((find.SHIPPED_DIR / "face_detection_yunet_2023mar.onnx").read_bytes())
    data[1000] ^= 0xFF
    (damaged / "face_detection_yunet_2023mar.onnx").write_bytes(bytes(data))
    monkeypatch.setattr(find, "SHIPPED_DIR", damaged)
    with pytest.raises(ModelError, match="shipped with facerun"):
        find.resolve("yunet-2023mar")


def test_fetch_removes_partials_older_than_a_day_and_temporaries_of_dead_runs(tmp_path, server, yunet_bytes):
    import subprocess
    import sys
    import time

    from facerun import io

    dest = tmp_path / "dest"
    dest.mkdir()
    old = time.time() - 2 * io.STALE_AFTER
    own = dest / ".face_detection_yunet_2023mar.onnx.part"  # two days old: restarted, not resumed
    own.write_bytes(b"\0" * 5000)
    os.utime(own, (old, old))
    stale = dest / ".face_recognition_sface_2021dec.onnx.part"  # another model's, two days old
    stale.write_bytes(b"x")
    os.utime(stale, (old, old))
    fresh = dest / ".MobileFaceNet.onnx.part"  # another model's, fresh: a later fetch resumes it
    fresh.write_bytes(b"x")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    orphan = dest / f".notes.json.{child.pid}.a1b2c3.part"  # an atomic write killed midway
    orphan.write_bytes(b"{")
    path = find.fetch("yunet-2023mar", dest, url=server.url("good"))
    assert path.read_bytes() == yunet_bytes
    assert server.log[-1] == ("/good", None, 200)  # started over: the old partial was not spliced on
    assert sorted(p.name for p in dest.iterdir()) == [fresh.name, path.name]
