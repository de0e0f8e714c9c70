"""Reading ONNX files and compiling them into step programs."""

# The op table is ops.OPS; tensor_ops adds its handlers to it. Imported here, so the table is whole whichever
# module of the package is imported first.
from . import tensor_ops  # noqa: F401
