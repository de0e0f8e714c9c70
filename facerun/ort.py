"""onnxruntime behind the part of `Net` the face jobs use (`OracleNet`, for `--runtime onnxruntime` and for models
whose operators facerun does not run yet), and its sessions: the outside reference the benchmarks and tests compare
with (`facerun.bench.oracle` is this module by its older name). Optional: `pip install facerun[oracles]`; never needed
to run facerun. Beside net.py in the layering, so the face jobs may use it without importing bench/."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import FacerunError


def available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def webgpu_available() -> str | None:
    """None when onnxruntime's WebGPU execution provider (the onnxruntime-ep-webgpu plugin) can be used, else why
    not."""
    try:
        import onnxruntime as ort
        import onnxruntime_ep_webgpu as plugin
    except ImportError:
        return "onnxruntime-ep-webgpu is not installed"
    try:
        _register_webgpu(ort, plugin)
        if not any(d.ep_name == plugin.get_ep_name() for d in ort.get_ep_devices()):
            return "onnxruntime's WebGPU provider found no adapter"
    except Exception as e:
        return f"onnxruntime's WebGPU provider failed: {str(e).strip().splitlines()[-1][:200]}"
    return None


_WEBGPU_REGISTERED = False


def _register_webgpu(ort, plugin):
    global _WEBGPU_REGISTERED
    if not _WEBGPU_REGISTERED:
        ort.register_execution_provider_library("webgpu", plugin.get_library_path())
        _WEBGPU_REGISTERED = True


def session(path: Path, extra_outputs: list[str] | None = None, threads: int | None = None, provider: str = "cpu"):
    """An onnxruntime CPU session for `path` with the input's spatial and batch sizes made free (YuNet's file
    declares 640x640 but runs at any multiple of 32), optionally exposing intermediate tensors as outputs."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FacerunError("onnxruntime is not installed (pip install 'facerun[oracles]')") from None
    import onnx

    model = onnx.load(str(path))
    g = model.graph
    inits = {t.name for t in g.initializer}
    for inp in g.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            if i != 1:  # keep the channel count
                d.ClearField("dim_value")
                d.dim_param = f"d{i}"
    for out in g.output:
        out.type.tensor_type.ClearField("shape")
    del g.value_info[:]
    for name in extra_outputs or []:
        vi = g.output.add()
        vi.name = name
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
    if provider == "webgpu":
        why = webgpu_available()
        if why:
            raise FacerunError(why)
        import onnxruntime_ep_webgpu as plugin

        device = next(d for d in ort.get_ep_devices() if d.ep_name == plugin.get_ep_name())
        opts.add_provider_for_devices([device], {})
        return _open(path, lambda: ort.InferenceSession(model.SerializeToString(), sess_options=opts))
    cpu = ["CPUExecutionProvider"]
    return _open(path, lambda: ort.InferenceSession(model.SerializeToString(), opts, providers=cpu))


def _open(path, make):
    """onnxruntime's session, or its refusal of the file as one line (its own texts run over many)."""
    try:
        return make()
    except Exception as e:  # onnxruntime raises its own exception types, not importable by one name
        lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()] or [type(e).__name__]
        raise FacerunError(f"onnxruntime cannot load {Path(path).name}: {lines[-1][:300]}") from None


def run(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    try:
        return dict(zip(names, sess.run(names, feeds)))
    except Exception as e:  # onnxruntime's own errors carry long multi-line texts
        raise FacerunError(f"onnxruntime failed: {str(e).strip().splitlines()[-1][:300]}") from None


class OracleNet:
    """A model run by onnxruntime behind the part of `Net` the face jobs use (`run`, `output_names`, `device`):
    for comparisons, and for models whose operators facerun's interpreter does not run yet."""

    device = "onnxruntime"

    def __init__(self, path: Path, threads: int | None = None):
        self.path = Path(path)
        self.session = session(self.path, threads=threads)
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, x) -> dict[str, np.ndarray]:
        return run(self.session, {self.input_name: np.ascontiguousarray(x, dtype=np.float32)})
