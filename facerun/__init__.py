"""facerun: run and benchmark face networks on the CPU (numpy, the reference) and on any GPU (WGSL through wgpu).

    import facerun
    net = facerun.load("face_detection_yunet_2023mar.onnx")   # or a replica name: "auraface-arch"
    outputs = net.run(blob)                                    # dict of outputs, by name and by index
    program = net.program((1, 3, 640, 640))                    # the compiled step program
"""

from .errors import FacerunError, GpuError, ImageError, InputError, ModelError, UnsupportedOps

__version__ = "0.1.0"

__all__ = [
    "load",
    "Net",
    "Detector",
    "Embedder",
    "FaceIndex",
    "FacerunError",
    "GpuError",
    "ImageError",
    "InputError",
    "ModelError",
    "UnsupportedOps",
]


def __getattr__(name):
    # heavy modules (onnx, wgpu) load on first use, so `import facerun` and `facerun --help` stay quick
    if name in ("load", "Net"):
        from . import net

        return getattr(net, name)
    if name == "Detector":
        from .face.detect import Detector

        return Detector
    if name == "Embedder":
        from .face.embed import Embedder

        return Embedder
    if name == "FaceIndex":
        from .people.index import FaceIndex

        return FaceIndex
    raise AttributeError(f"module 'facerun' has no attribute '{name}'")
