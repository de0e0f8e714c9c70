"""facerun's exceptions: every failure a user can meet is one of these, with a message that fits on one line."""


class FacerunError(Exception):
    """Base of every error facerun reports to a user (the CLI prints it in one line and exits non-zero)."""


class ModelError(FacerunError):
    """A model file that cannot be read, is not ONNX, is damaged, or uses what facerun does not support."""


class UnsupportedOps(ModelError):
    """A model using operators facerun cannot run; `ops` maps each op type to the first node using it."""

    def __init__(self, ops: dict[str, str]):
        self.ops = dict(ops)
        listed = ", ".join(f"{op} (first at node '{node}')" for op, node in self.ops.items())
        super().__init__(f"unsupported operators: {listed}")


class InputError(FacerunError):
    """An input of the wrong shape, type or size for a model."""


class ImageError(FacerunError):
    """A file that is missing, unreadable or not an image."""


class GpuError(FacerunError):
    """The GPU path cannot be used (no adapter, switched off, broken) or failed; the CPU path still works."""
