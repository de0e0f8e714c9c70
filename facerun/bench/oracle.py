"""onnxruntime as the reference oracle: facerun/ort.py, under the name the benchmarks, `parity` and the tests use.
The face jobs run models on onnxruntime too (`--runtime onnxruntime`), so the code lives below face/, not here."""

from ..ort import OracleNet, available, run, session, webgpu_available

__all__ = ["OracleNet", "available", "run", "session", "webgpu_available"]
