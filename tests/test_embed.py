"""Embeddings: parity with onnxruntime, batching, verification quality on real photos, model description, and the
`embed` / `compare` commands."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from shared_paths import DATA, MODELS

from facerun.cli import main
from facerun.errors import InputError, ModelError
from facerun.face.detect import Detector
from facerun.face.embed import Embedder, cosine, cosine_matrix, largest
from facerun.face.images import load_image

MOBILEFACENET = MODELS / "MobileFaceNet.onnx"
FACES = DATA / "faces"
# obama/ also holds one frame at four resolutions, a downscale and partial crops: only these are distinct photos
OBAMA_DISTINCT = {"obama.jpg", "obama1.jpg", "obama2.jpg", "obama3.jpg"}

# Each model's documented input, written out here independently of facerun's tables: (mean, std) on 0..255, RGB.
REFERENCE_PREPROCESSING = {
    "mobilefacenet": (255 * np.array([0.485, 0.456, 0.406]), 255 * np.array([0.229, 0.224, 0.225])),  # MODELS.md
    "sface-arch-small": (np.zeros(3), np.ones(3)),  # SFace normalises inside the graph
    "auraface-arch-small": (np.full(3, 127.5), np.full(3, 127.5)),  # ArcFace convention
}


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found (set FACERUN_MODELS / FACERUN_DATA)")
    return path


def _model_arg(name: str) -> str:
    return str(_need(MOBILEFACENET)) if name == "mobilefacenet" else name


def _identity_photos() -> dict[str, list[Path]]:
    """identity -> its photos (group photos left out; obama cut to its distinct photos)."""
    _need(FACES)
    found = {}
    for folder in sorted(p for p in FACES.iterdir() if p.is_dir() and p.name != "group"):
        photos = sorted(p for p in folder.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
        if folder.name == "obama":
            photos = [p for p in photos if p.name in OBAMA_DISTINCT]
        found[folder.name] = photos
    return found


class _KnownFaces:
    """A stand-in detector that answers with faces found earlier (so batching tests do not detect twice)."""

    def __init__(self, faces_by_shape):
        self.faces = faces_by_shape
        self.device = "cpu"

    def detect(self, rgb):
        return self.faces[rgb.shape]


@pytest.fixture(scope="module")
def photos_and_faces():
    """16 photos of 16 identities, each with the faces facerun's detector finds in it."""
    _need(MODELS / "face_detection_yunet_2023mar.onnx")
    detector = Detector(MODELS / "face_detection_yunet_2023mar.onnx", device="cpu", max_side=640)
    chosen = []
    for photos in _identity_photos().values():
        rgb = load_image(photos[0])
        faces = detector.detect(rgb)
        if faces:
            chosen.append((photos[0], rgb, faces))
        if len(chosen) == 16:
            break
    assert len(chosen) == 16
    return chosen


@pytest.fixture(scope="module")
def crops(photos_and_faces):
    """16 aligned 112x112 RGB crops, the largest face of each photo."""
    from facerun.face.align import align_face

    return np.stack([align_face(rgb, largest(faces)[0].landmarks) for _, rgb, faces in photos_and_faces])


# --------------------------------------------------------------------------------------------------- parity


def _onnxruntime_embeddings(path: Path, crops: np.ndarray, mean, std, one_at_a_time: bool) -> np.ndarray:
    from facerun.bench import oracle

    if not oracle.available():
        pytest.skip("onnxruntime not installed")
    session = oracle.session(path)
    x = ((crops.astype(np.float64) - mean) / std).astype(np.float32).transpose(0, 3, 1, 2)
    name = session.get_inputs()[0].name
    if one_at_a_time:  # MobileFaceNet's graph reshapes to a constant [1, -1]: batch 1 only
        out = np.concatenate([oracle.run(session, {name: x[i : i + 1]})[session.get_outputs()[0].name]
                              for i in range(len(x))])
    else:
        out = oracle.run(session, {name: x})[session.get_outputs()[0].name]
    out = out.reshape(len(x), -1)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.mark.parametrize("name", ["mobilefacenet", "sface-arch-small", "auraface-arch-small"])
def test_embeddings_match_onnxruntime(name, crops):
    embedder = Embedder(_model_arg(name), device="cpu")
    some = crops[:6]
    ours = embedder.embed(some)
    mean, std = REFERENCE_PREPROCESSING[name]
    theirs = _onnxruntime_embeddings(embedder.path, some, mean, std, one_at_a_time=not embedder.net.batch_free)
    assert ours.shape == theirs.shape == (6, embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    agreement = np.sum(ours * theirs, axis=1)
    assert agreement.min() >= 0.9999, f"{name}: cosine to onnxruntime {agreement.min():.6f}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mobilefacenet", "sface-arch-small", "auraface-arch-small"])
def test_gpu_embeddings_match_cpu(name, crops, gpu):
    gpu = Embedder(_model_arg(name), device="gpu")
    assert gpu.net.gpu is not None, gpu.net.gpu_reason
    cpu = Embedder(_model_arg(name), device="cpu")
    some = crops[:4]
    agreement = np.sum(gpu.embed(some) * cpu.embed(some), axis=1)
    assert agreement.min() >= 0.9999, f"{name} on {gpu.device}: cosine to the CPU {agreement.min():.6f}"


@pytest.mark.parametrize("name", ["mobilefacenet", "sface-arch-small", "auraface-arch-small"])
def test_a_batch_of_16_equals_16_single_embeddings(name, crops):
    embedder = Embedder(_model_arg(name), device="cpu")
    together = embedder.embed(crops, batch=16)
    alone = np.concatenate([embedder.embed(crop) for crop in crops])
    assert together.shape == (16, embedder.dim)
    np.testing.assert_allclose(together, alone, atol=2e-5)
    # the faces are of 16 different people: no two rows may coincide
    off_diagonal = cosine_matrix(together)[~np.eye(16, dtype=bool)]
    assert off_diagonal.max() < 0.999


def test_embed_images_batches_across_images_without_mixing_faces(photos_and_faces):
    """Faces gathered from several images (group photos among them) into batches of 3 come back in order, each
    with its own vector."""
    detector = Detector(MODELS / "face_detection_yunet_2023mar.onnx", device="cpu", max_side=640)
    groups = [load_image(p) for p in sorted((FACES / "group").glob("fr_*.jpg"))]
    images = [rgb for _, rgb, _ in photos_and_faces[:4]] + groups
    known = _KnownFaces({rgb.shape: detector.detect(rgb) for rgb in images})
    embedder = Embedder("auraface-arch-small", device="cpu")
    by_three = embedder.embed_images(images, detector=known, all_faces=True, batch=3)
    one_by_one = [r for image in images
                  for r in embedder.embed_images([image], detector=known, all_faces=True, batch=1)]
    expected_faces = sum(len(known.detect(rgb)) for rgb in images)
    assert len(by_three) == len(one_by_one) == expected_faces >= len(images) + 4
    for a, b in zip(by_three, one_by_one):
        assert a.box == b.box
        assert cosine(a.embedding, b.embedding) > 0.99999
    assert len({r.image for r in by_three}) == len(images)  # "array 0", "array 1", ... in order


def test_embed_rejects_wrong_crops():
    embedder = Embedder("sface-arch-small", device="cpu")
    with pytest.raises(InputError, match="112x112"):
        embedder.embed(np.zeros((2, 100, 100, 3), np.uint8))
    with pytest.raises(InputError, match="uint8"):
        embedder.embed(np.zeros((1, 112, 112, 3), np.float32))
    assert embedder.embed(np.zeros((0, 112, 112, 3), np.uint8)).shape == (0, 128)


# ------------------------------------------------------------------------------- verification on real photos


def _auc(genuine: np.ndarray, impostor: np.ndarray) -> float:
    """Probability that a random genuine pair outscores a random impostor pair (ties count half)."""
    greater = (genuine[:, None] > impostor[None, :]).sum()
    ties = (genuine[:, None] == impostor[None, :]).sum()
    return float((greater + 0.5 * ties) / (genuine.size * impostor.size))


def test_mobilefacenet_separates_the_shared_identities():
    _need(MOBILEFACENET)
    identities = _identity_photos()
    paths = [p for photos in identities.values() for p in photos]
    owner = [name for name, photos in identities.items() for _ in photos]
    embedder = Embedder(str(MOBILEFACENET), device="cpu")
    records = embedder.embed_images(paths, detector=Detector(device="cpu"))
    assert [r.image for r in records] == [str(p) for p in paths], "every photo must give its largest face"

    similarity = cosine_matrix(np.stack([r.embedding for r in records]))
    genuine, impostor, genuine_names = [], [], []
    for i, j in itertools.combinations(range(len(paths)), 2):
        if owner[i] == owner[j]:  # one-photo folders never meet themselves: they serve only as negatives
            genuine.append(similarity[i, j])
            genuine_names.append(f"{paths[i].relative_to(FACES)} ~ {paths[j].relative_to(FACES)}")
        else:
            impostor.append(similarity[i, j])
    genuine, impostor = np.array(genuine), np.array(impostor)
    auc = _auc(genuine, impostor)
    threshold = embedder.threshold
    print(f"\nMobileFaceNet on {len(paths)} photos of {len(identities)} identities: {genuine.size} genuine, "
          f"{impostor.size} impostor pairs; AUC {auc:.4f}; mean cosine genuine {genuine.mean():.3f}, "
          f"impostor {impostor.mean():.3f}; at threshold {threshold}: TAR {np.mean(genuine >= threshold):.3f}, "
          f"FAR {np.mean(impostor >= threshold):.4f}; weakest genuine {genuine.min():.3f} "
          f"({genuine_names[int(genuine.argmin())]})")
    assert genuine.size >= 150 and impostor.size >= 3000
    below = [f"{n}: {s:.3f}" for n, s in zip(genuine_names, genuine) if s <= impostor.mean()]
    assert not below, f"genuine pairs at or below the mean impostor cosine {impostor.mean():.3f}: {below}"
    assert auc >= 0.99


# ------------------------------------------------------------------------------------- describing a model


def _tiny_embedder(path: Path) -> Path:
    """A valid ONNX embedder facerun has never seen: 16x16 patches -> 8 channels -> global mean -> 8-d vector."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weight = rng.standard_normal((8, 3, 16, 16)).astype(np.float32) * 0.05
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["features"], kernel_shape=[16, 16], strides=[16, 16]),
        helper.make_node("Relu", ["features"], ["active"]),
        helper.make_node("GlobalAveragePool", ["active"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["embedding"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_embedder",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 112, 112])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_unknown_embedder_is_refused_with_how_to_describe_it(tmp_path):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    with pytest.raises(ModelError) as refused:
        Embedder(str(path), device="cpu")
    message = str(refused.value)
    assert "tiny.onnx" in message and "--size 112x112 --mean 127.5 --std 127.5" in message
    assert str(tmp_path / "tiny.json") in message and "\n" not in message
    with pytest.raises(ModelError, match="--std"):
        Embedder(str(path), device="cpu", mean=127.5)  # half a description is still refused


def test_unknown_embedder_runs_with_given_preprocessing(tmp_path, crops):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    embedder = Embedder(str(path), device="cpu", mean=127.5, std="127.5", bgr=True)  # size from the file
    assert embedder.preprocessing.source == "given" and embedder.note and "not a model facerun knows" in embedder.note
    assert embedder.input_size == (112, 112) and embedder.threshold is None
    ours = embedder.embed(crops[:3])
    theirs = _onnxruntime_embeddings(path, crops[:3, :, :, ::-1], 127.5, 127.5, one_at_a_time=False)
    assert np.sum(ours * theirs, axis=1).min() >= 0.9999


def test_unknown_embedder_described_by_a_sidecar(tmp_path, crops):
    path = _tiny_embedder(tmp_path / "tiny.onnx")
    (tmp_path / "tiny.json").write_text(json.dumps({"input_size": "112x112", "mean": [0.0, 0.0, 0.0], "std": 255,
                                                    "bgr": False, "threshold": 0.4}))
    embedder = Embedder(str(path), device="cpu")
    assert embedder.preprocessing.source == "sidecar" and "tiny.json" in embedder.note
    assert embedder.threshold == 0.4
    theirs = _onnxruntime_embeddings(path, crops[:2], 0.0, 255.0, one_at_a_time=False)
    assert np.sum(embedder.embed(crops[:2]) * theirs, axis=1).min() >= 0.9999
    (tmp_path / "tiny.json").write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        Embedder(str(path), device="cpu")


def test_a_detector_is_not_an_embedder():
    with pytest.raises(ModelError, match="not an embedder"):
        Embedder(str(_need(MODELS / "face_detection_yunet_2023mar.onnx")), device="cpu")
    with pytest.raises(ModelError, match="not an embedder"):
        Embedder("yunet-arch", device="cpu")


def test_default_embedder_is_the_first_known_one_found(tmp_path, monkeypatch):
    _need(MOBILEFACENET)
    monkeypatch.setenv("FACERUN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FACERUN_MODELS", str(MODELS))
    assert Embedder(device="cpu").name == "mobilefacenet"  # the shared folder holds neither SFace nor AuraFace
    monkeypatch.setenv("FACERUN_MODELS", str(tmp_path))
    # nothing in the user's folders: the MobileFaceNet shipped inside the package
    from facerun.zoo.find import SHIPPED_DIR

    shipped = Embedder(device="cpu")
    assert shipped.name == "mobilefacenet" and shipped.path.parent == SHIPPED_DIR


# ---------------------------------------------------------------------------------------------------- CLI


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def blank_png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("blank") / "blank.png"
    Image.new("RGB", (200, 150), (128, 128, 128)).save(path)
    return path


def test_cli_embed_npy_and_index_line_up(tmp_path, blank_png):
    model = _need(MOBILEFACENET)
    photos = [FACES / "obama" / "obama.jpg", FACES / "obama" / "obama2.jpg", FACES / "biden" / "biden.jpg"]
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    out = tmp_path / "vectors.npy"
    result = _cli("embed", *photos, blank_png, bad, "--model", model, "--out", out, "--device", "cpu")
    assert result.exit_code == 1, result.output  # the broken file fails the run, after the rest is done
    assert "broken.jpg" in result.stderr and "no face: " + str(blank_png) in result.stderr
    vectors = np.load(out)
    index = [json.loads(line) for line in (tmp_path / "vectors.jsonl").read_text().splitlines()]
    assert vectors.shape == (3, 128) and vectors.dtype == np.float32
    assert [row["row"] for row in index] == [0, 1, 2]
    assert [row["image"] for row in index] == [str(p) for p in photos]
    assert all(row["model"] == "mobilefacenet" and len(row["box"]) == 4 and row["score"] > 0.6 for row in index)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # the same photos written as .jsonl carry the same vectors, face by face
    lines = tmp_path / "vectors-lines.jsonl"
    assert _cli("embed", *photos, "--model", model, "--out", lines, "--device", "cpu").exit_code == 0
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [r["image"] for r in records] == [row["image"] for row in index]
    assert [r["box"] for r in records] == [row["box"] for row in index]
    np.testing.assert_allclose(np.array([r["embedding"] for r in records]), vectors, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jpg", "vectors-lines.jsonl", "vectors.jsonl",
                                                          "vectors.npy"]  # no temporary files left behind


def test_cli_embed_json_and_all_faces():
    result = _cli("embed", _need(FACES / "group" / "fr_two_people.jpg"), "--model", "sface-arch-small", "--all-faces",
                  "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert len(records) == 2 and all(len(r["embedding"]) == 128 and r["model"] == "sface-arch-small" for r in records)
    assert "summary" in result.stderr


def test_cli_embed_errors_write_nothing(tmp_path):
    photo = _need(FACES / "obama" / "obama.jpg")
    for out in (tmp_path / "missing-folder" / "x.npy", tmp_path / "x.txt"):
        line = _one_error_line(_cli("embed", photo, "--model", "sface-arch-small", "--out", out))
        assert "--out" in line
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"junk")
    result = _cli("embed", bad, "--model", "sface-arch-small", "--out", tmp_path / "x.npy", "--device", "cpu")
    assert result.exit_code == 1 and "nothing written" in result.output
    unknown = _tiny_embedder(tmp_path / "tiny.onnx")
    assert "describe it with --size 112x112" in _one_error_line(_cli("embed", photo, "--model", unknown))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jpg", "tiny.onnx"]


def test_cli_compare_same_and_different_people():
    model = _need(MOBILEFACENET)
    same = _cli("compare", FACES / "obama" / "obama.jpg", FACES / "obama" / "obama2.jpg", "--model", model, "--json",
                "--device", "cpu")
    different = _cli("compare", FACES / "obama" / "obama.jpg", FACES / "biden" / "biden.jpg", "--model", model,
                     "--json", "--device", "cpu")
    assert same.exit_code == 0 and different.exit_code == 0, same.output + different.output
    a, b = json.loads(same.stdout), json.loads(different.stdout)
    print(f"\ncompare (mobilefacenet): obama vs obama2 cosine {a['cosine']:.4f}, obama vs biden {b['cosine']:.4f}, "
          f"threshold {a['threshold']}")
    assert set(a) == {"a", "b", "model", "cosine", "threshold", "same"}
    assert a["same"] is True and b["same"] is False and a["threshold"] == 0.39
    assert a["cosine"] > a["threshold"] > b["cosine"]
    text = _cli("compare", FACES / "obama" / "obama.jpg", FACES / "obama" / "obama2.jpg", "--model", model,
                "--threshold", "0.99", "--device", "cpu")
    assert text.exit_code == 0 and "different people" in text.stdout and "threshold 0.99" in text.stdout


def test_cli_compare_errors_are_one_line(tmp_path, blank_png):
    photo = _need(FACES / "obama" / "obama.jpg")
    line = _one_error_line(_cli("compare", blank_png, photo, "--model", "sface-arch-small", "--device", "cpu"))
    assert "no face" in line and "blank.png" in line
    line = _one_error_line(_cli("compare", photo, tmp_path / "nope.jpg", "--model", "sface-arch-small"))
    assert "nope.jpg" in line and "no such file" in line
    replica = _cli("compare", photo, photo, "--model", "sface-arch-small", "--json", "--device", "cpu")
    verdict = json.loads(replica.stdout)
    assert verdict["same"] is None and verdict["threshold"] is None and verdict["cosine"] == pytest.approx(1.0)


@pytest.mark.parametrize("option, value, says", [
    ("--std", "1e-45", "std 1e-45 scales pixels to ±2.55e+47"),
    ("--std", "0", "std 0 must be above 0"),
    ("--std", "-127.5", "std -127.5 must be above 0"),
    ("--std", "nan", "std must be finite"),
    ("--mean", "nan", "mean must be finite"),
    ("--mean", "1e9", "mean 1e+09 is not a pixel value"),
])
def test_cli_pre_processing_that_makes_no_sense_is_one_line(tmp_path, blank_png, option, value, says):
    photo = blank_png  # refused before any photo is read
    for command in (["embed", photo, "--out", tmp_path / "x.npy"], ["compare", photo, photo]):
        result = _cli(*command, "--model", "sface-arch-small", "--device", "cpu", option, value)
        assert result.exit_code == 1 and says in _one_error_line(result), result.output
    assert list(tmp_path.iterdir()) == []
