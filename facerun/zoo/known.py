"""The face models facerun knows by content: name, canonical file name, sha256, size, pre-processing and source.

A model file is identified by its sha256, never by its name, so a renamed or mirrored copy is still recognised and a
damaged one is not mistaken for the real thing. The table is plain data: add a `KnownModel` to `KNOWN` to teach
facerun a new model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..io import forget_sha256, sha256_of  # the hash this table identifies files by

# ImageNet statistics moved to the 0..255 scale: (x/255 - m) / s == (x - 255 m) / (255 s)
_IMAGENET_MEAN = (123.675, 116.28, 103.53)  # 255 * (0.485, 0.456, 0.406)
_IMAGENET_STD = (58.395, 57.12, 57.375)  # 255 * (0.229, 0.224, 0.225)


@dataclass(frozen=True, kw_only=True)
class KnownModel:
    name: str  # short name used on the command line, e.g. "yunet-2023mar"
    filename: str  # canonical file name, as published
    sha256: str | None  # of the whole file, lower-case hex
    size: int | None  # bytes, when known
    kind: str  # "detector" | "embedder"
    rgb: bool  # channel order fed to the model (False: BGR)
    notes: str  # one line: source, licence, normalisation, threshold origin
    url: str | None = None  # published location used by `facerun models fetch`
    family: str | None = None  # how facerun runs it: yunet-2023mar, yunet-2022mar, arcface-style (facerun.zoo.card)
    input_size: tuple[int, int] | None = None  # (w, h) for embedders; detectors take any size
    # pre-processing on 0..255 values: (x - mean) / std, per channel; raw pixels by default
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    threshold: float | None = None  # cosine match threshold (embedders); its source is in `notes`
    # share of impostor pairs (two people) at or above `threshold`, where it was calibrated (benchmarks/calibrate.py)
    false_match_rate: float | None = None
    dim: int | None = None  # embedding length (embedders)
    license: str | None = None  # of the weights, as the source states it


KNOWN: tuple[KnownModel, ...] = (
    KnownModel(
        name="yunet-2023mar",
        filename="face_detection_yunet_2023mar.onnx",
        sha256="8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4",
        size=232_589,
        kind="detector",
        rgb=False,
        # OpenCV Zoo stores it in Git LFS; the pinned commit's LFS pointer carries this sha256 and size
        url="https://media.githubusercontent.com/media/opencv/opencv_zoo/"
        "82b38c8f98e7b52aa171400f3e4c722352d0669f/models/face_detection_yunet/face_detection_yunet_2023mar.onnx",
        notes="YuNet v2 (yunet_s), OpenCV Zoo, MIT; BGR raw 0..255, pad to a multiple of 32; outputs cls/obj/bbox/kps",
        family="yunet-2023mar",
        license="MIT",
    ),
    KnownModel(
        name="yunet-2022mar",
        filename="face_detection_yunet_2022mar.onnx",
        sha256="50ef07f702a31741ca46a4c0d947773b64143b9362780237bf0d427d6c79bab7",
        size=345_478,
        kind="detector",
        rgb=False,
        url="https://media.githubusercontent.com/media/opencv/opencv_zoo/"
        "c71f7a40d34cd3830086ee9b7a01174e013ad42a/models/face_detection_yunet/face_detection_yunet_2022mar.onnx",
        notes="YuNet v1 (prior-box head), OpenCV Zoo, MIT; BGR raw 0..255; outputs loc/conf/iou decoded with priors",
        family="yunet-2022mar",
        license="MIT",
    ),
    KnownModel(
        name="sface-2021dec",
        filename="face_recognition_sface_2021dec.onnx",
        sha256="0ba9fbfa01b5270c96627c4ef784da859931e02f04419c829e83484087c34e79",
        size=38_696_353,
        kind="embedder",
        input_size=(112, 112),
        rgb=True,
        threshold=0.363,
        url="https://media.githubusercontent.com/media/opencv/opencv_zoo/"
        "edef535367a4f8053b5bfb7580935c83772a9639/models/face_recognition_sface/face_recognition_sface_2021dec.onnx",
        notes="SFace (MobileFaceNet, SFace loss), OpenCV Zoo, Apache-2.0; RGB 0..255, normalised inside the graph; "
        "cosine threshold 0.363 is OpenCV's (opencv_zoo sface.py)",
        dim=128,
        family="arcface-style",
        license="Apache-2.0",
    ),
    KnownModel(
        name="auraface-v1",
        filename="glintr100.onnx",
        sha256="a7933ea5330113b01c9b60351d8f4c33003f145d8470ac5f0e52ee2effe25c60",
        size=260_694_151,
        kind="embedder",
        input_size=(112, 112),
        rgb=True,
        mean=(127.5, 127.5, 127.5),
        std=(127.5, 127.5, 127.5),
        threshold=0.30,
        url="https://huggingface.co/fal/AuraFace-v1/resolve/bf13b6d82eb80bf47ac057ca4338ceefe878dd68/glintr100.onnx",
        notes="AuraFace v1 (ResNet100 ArcFace, 512-d), fal on Hugging Face, Apache-2.0; RGB (x-127.5)/127.5; "
        "threshold 0.30 is a facerun default (fal publishes none), not yet calibrated",
        dim=512,
        family="arcface-style",
        license="Apache-2.0",
    ),
    KnownModel(
        name="mobilefacenet",
        filename="MobileFaceNet.onnx",
        sha256="b7120c095d60094f28a4a54ba6a8bf51b297a6273fb40ef6350dfec1f63d9507",
        size=3_998_070,
        kind="embedder",
        input_size=(112, 112),
        rgb=True,
        mean=_IMAGENET_MEAN,
        std=_IMAGENET_STD,
        # calibrated on the shared identity folders (88 photos of 25 people, benchmarks/calibrate.py): the lowest
        # cosine with at most 0.1% of the 3,656 impostor pairs at or above it; none of the 172 genuine pairs below
        threshold=0.39,
        false_match_rate=0.0005,
        # a plain git blob (not LFS), so raw.githubusercontent.com serves the bytes themselves
        url="https://raw.githubusercontent.com/foamliu/MobileFaceNet/"
        "a6cc9032a659b615f477833e1a70b5e7931bcccc/weights/MobileFaceNet.onnx",
        notes="foamliu MobileFaceNet, Apache-2.0; RGB, ImageNet normalisation x/255-mean/std; output not normalised; "
        "threshold 0.39 calibrated on the shared identity folders at a false-match rate of 0.05% (target 0.1%)",
        dim=128,
        family="arcface-style",
        license="Apache-2.0",
    ),
)

def _raw(repo: str, commit: str, path: str) -> str:
    """The download address of a file committed as a plain git blob (not LFS)."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


# More detector families. Sources and licences as recorded in the shared models' MODELS.md (repo @ commit : path).
_DETECTORS = (
    KnownModel(
        name="scrfd-500m",
        filename="det_500m.onnx",
        sha256="5e4447f50245bbd7966bd6c0fa52938c61474a04ec7def48753668a9d8b4ea3a",
        size=2_524_817,
        kind="detector",
        input_size=None,
        rgb=True,
        mean=(127.5, 127.5, 127.5),
        std=(128.0, 128.0, 128.0),
        threshold=None,
        url=_raw("yukkki7/FaceAnalysisApp", "d4126572f7642f97f903cfab7ab73f67e99622db", "models/scrfd_500m.onnx"),
        notes="SCRFD-500M with 5 keypoints, insightface's buffalo_s/buffalo_sc detector (the official file); any input "
        "size, run at 640x640; insightface pretrained weights are for non-commercial research only",
        family="scrfd",
        license="non-commercial research only (insightface pretrained models)",
    ),
    KnownModel(
        name="retinaface-mnet025",
        filename="retinaface_mnet025.onnx",
        sha256="e0e19bad8494b3f7a7edb39a90194ff055923e13a3453569a454386f857fe538",
        size=1_729_306,
        kind="detector",
        input_size=(640, 640),
        rgb=False,
        mean=(104.0, 117.0, 123.0),
        std=(1.0, 1.0, 1.0),
        threshold=None,
        url=_raw("kgzhwang/Pytorch_Retinaface", "6e724185520256cfa136feb4910203b1f55c5274", "FaceDetector.onnx"),
        notes="RetinaFace MobileNet-0.25 (biubug6/Pytorch_Retinaface weights), opset 17, fixed 640x640; BGR minus "
        "(104,117,123); priors with variances 0.1/0.2, 5 landmarks",
        family="retinaface",
        license="MIT",
    ),
    KnownModel(
        name="ultraface-rfb320",
        filename="ultraface_RFB-320.onnx",
        sha256="34cd7e60aeff28744c657de7a3dc64e872d506741de66987f3426f2b79f88017",
        size=1_270_727,
        kind="detector",
        input_size=(320, 240),
        rgb=True,
        mean=(127.0, 127.0, 127.0),
        std=(128.0, 128.0, 128.0),
        threshold=None,
        url=_raw("Linzaer/Ultra-Light-Fast-Generic-Face-Detector-1MB", "dffdddda9794a50607cba8f318507a28c1c27cab",
                 "models/onnx/version-RFB-320.onnx"),
        notes="Ultra-Light-Fast-Generic-Face-Detector-1MB, RFB 320x240 (the official file); boxes decoded in the "
        "graph (uses Exp), no landmarks",
        family="ultraface",
        license="MIT",
    ),
    KnownModel(
        name="blazeface-front128",
        filename="blazeface_front128.onnx",
        sha256="e7c7edca3ecc7e76a89f902135e42bbc89daa1e82d9f22c53021c7df5b1d0695",
        size=418_815,
        kind="detector",
        input_size=(128, 128),
        rgb=True,
        mean=(127.5, 127.5, 127.5),
        std=(127.5, 127.5, 127.5),
        threshold=None,
        url=_raw("759401524/MediaPipePyTorch", "4b8d6735de3ad86b2ad95e1d56ebcc030674034d", "blazeface.onnx"),
        notes="MediaPipe BlazeFace, front camera 128x128, via a PyTorch port, opset 10 (uses Pad); 896 SSD anchors, "
        "6 keypoints (no mouth corners), weighted NMS",
        family="blazeface",
        license="Apache-2.0",
    ),
    KnownModel(
        name="yolov5n-0.5-face",
        filename="yolov5n-0.5-face.onnx",
        sha256="7da50650e16167e93acf24caf01f15f2922ecf168c884f2825a3c95479f8687d",
        size=1_809_111,
        kind="detector",
        input_size=(640, 640),
        rgb=True,
        mean=(0.0, 0.0, 0.0),
        std=(255.0, 255.0, 255.0),
        threshold=None,
        url=_raw("dominhhieu1019/yolov5-face", "29a8e9d80252594c623a54b1e3d492e2e9e9570d", "weights/yolov5n-0.5.onnx"),
        notes="YOLOv5-face n-0.5 (deepcam-cn), raw heads, fixed 640x640; letterbox, RGB / 255, 5 landmarks",
        family="yolov5-face",
        license="GPL-3.0",
    ),
)

KNOWN = KNOWN + _DETECTORS

_BY_SHA = {m.sha256: m for m in KNOWN if m.sha256}


def by_sha256(sha: str) -> KnownModel | None:
    """The known model whose file has this sha256 (hex, any case), or None."""
    return _BY_SHA.get(sha.strip().lower())


def by_name(name: str) -> KnownModel | None:
    """The known model with this short name or canonical file name (case-insensitive), or None."""
    wanted = name.strip().lower()
    for model in KNOWN:
        if wanted in (model.name.lower(), model.filename.lower()):
            return model
    return None


__all__ = ["KnownModel", "KNOWN", "by_sha256", "by_name", "sha256_of", "forget_sha256"]
