"""Reading ONNX files and compiling them into step programs."""

# The op table is ops.OPS; shape_ops and tensor_ops add their handlers to it. Imported here, so the table is whole
# whichever module of the package is imported first.
from . import shape_ops, tensor_ops  # noqa: F401
