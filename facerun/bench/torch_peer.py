"""torch on CUDA as a benchmark peer: facerun's own step program run eagerly through torch.nn.functional (cuDNN for
the convolutions), so the peer runs exactly the network facerun runs, folded and fused the same way.

Two precisions: strict fp32, and torch's TF32 (tensor cores round the multiplies' inputs to 10-bit mantissas). A run
is timed like facerun's GPU path: the input copied to the device, every step, the outputs copied back. Optional:
without torch or CUDA the bench rows say why.
"""

from __future__ import annotations

import numpy as np

from .. import program as P
from ..errors import FacerunError


def unavailable() -> str | None:
    """Why torch on CUDA cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    try:
        if not torch.cuda.is_available():
            return "torch finds no CUDA device"
    except Exception as e:  # a broken driver stack
        return f"torch's CUDA failed: {str(e).strip().splitlines()[0][:200]}"
    return None


class Skipped(Exception):
    """Why a bench row of this peer cannot run here."""


class Unsupported(Skipped):
    """A step this peer does not run (the bench row says which)."""


def bench_runner(net, path: str, x, xb, names, cache: dict):
    """The bench's timed function for a torch path: `net`'s program (the batch program on xb for a -batch path; item by
    item when the file is fixed at batch 1 and its batch program cannot be shown to keep the items apart), TF32
    unless the path is a -strict one. The TorchPrograms are kept in `cache`. Raises Skipped with the reason."""
    why = unavailable()
    if why:
        raise Skipped(why)
    feed, tf32 = net.input_name, not path.startswith("torch-cuda-strict")
    prog, items = net.program(x.shape), False
    if xb is not None:
        batch_prog = net.program(xb.shape) if net.batch_free else net.batch_program(xb.shape)
        prog, items = (batch_prog, False) if batch_prog is not None else (prog, True)
    key = ("torch", id(prog), tf32)
    if key not in cache:
        try:
            cache[key] = TorchProgram(prog, tf32)
        except Skipped as e:
            cache[key] = Skipped(f"torch peer: {e}")
        except Exception as e:  # CUDA out of memory while uploading the weights
            cache[key] = Skipped(f"torch failed: {type(e).__name__}: {str(e).strip()[:200]}")
    tp = cache[key]
    if isinstance(tp, Skipped):
        raise tp

    def typed(out: dict) -> dict:  # by the model's output names, integer outputs folded at compile time included
        return {n: prog.exact_outputs.get(n, out.get(n)) for n in names}

    if xb is None:
        return lambda: typed(tp.run({feed: x}))
    if not items:
        return lambda: typed(tp.run({feed: xb}))

    def one_by_one():
        outs = [typed(tp.run({feed: xb[i:i + 1]})) for i in range(xb.shape[0])]
        return {n: np.concatenate([o[n] for o in outs]) for n in names}

    return one_by_one


class TorchProgram:
    """`prog` on torch's CUDA device (`device`: another torch device, for tests): weights uploaded once,
    run(inputs) -> outputs by name as numpy arrays."""

    def __init__(self, prog: P.Program, tf32: bool, device: str = "cuda"):
        import torch

        self.torch = torch
        self.prog = prog
        self.tf32 = tf32
        self.dev = torch.device(device)
        self.consts = {v.id: self._t(v.data) for v in prog.values if v.kind == "const" and v.data is not None}
        self.steps = [(st, self._compile(st)) for st in prog.steps]

    def _t(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(self.dev)

    # ---- steps as closures over their uploaded weights
    def _act(self, act: P.Activation | None):
        torch = self.torch
        if act is None:
            return lambda v: v
        k = act.kind
        if k == "relu":
            return torch.relu
        if k == "sigmoid":
            return torch.sigmoid
        if k == "clip":
            return lambda v: torch.clamp(v, act.lo, act.hi)
        if k == "leaky":
            return lambda v: torch.nn.functional.leaky_relu(v, act.alpha)
        if k == "prelu":
            slope = self._t(act.slope).reshape(-1)

            def prelu(v):
                s = slope.reshape((1, -1) + (1,) * (v.dim() - 2))
                return torch.where(v < 0, v * s, v)

            return prelu
        if k == "exp":
            return torch.exp
        if k == "sqrt":
            return torch.sqrt
        if k in ("hardsigmoid", "hardswish"):
            def gate(v):
                g = torch.clamp(v * act.alpha + act.lo, 0.0, 1.0)
                return g if k == "hardsigmoid" else v * g

            return gate
        raise Unsupported(f"activation {k}")

    def _compile(self, st: P.Step):
        """`st` as a closure over its uploaded weights, through its kind's entry in OPS."""
        make = OPS.get(type(st))
        if make is None:
            raise Unsupported(f"step {st.op}")
        return make(self, st, self.prog.values[st.out].shape)

    def _conv(self, st: P.Conv, shape):
        F = self.torch.nn.functional
        w = self._t(st.weight)
        b = self._t(st.bias) if st.bias is not None else None
        act = self._act(st.act)
        top, left, bottom, right = st.pads
        even = top == bottom and left == right

        def conv(x, res=None):
            if not even:
                x = F.pad(x, (left, right, top, bottom))
            y = F.conv2d(x, w, b, st.stride, (top, left) if even else 0, st.dilation, st.groups)
            if res is not None:
                y = y + res
            return act(y)

        return conv

    def _gemm(self, st: P.Gemm, shape):
        F = self.torch.nn.functional
        w, act = self._t(st.weight), self._act(st.act)
        b = self._t(st.bias) if st.bias is not None else None
        return lambda x: act(F.linear(x, w, b))

    def _affine(self, st: P.Affine, shape):
        view = (1, -1) + (1,) * (len(shape) - 2)
        scale, shift = self._t(st.scale).reshape(view), self._t(st.shift).reshape(view)
        return lambda x: x * scale + shift

    def _binary(self, st: P.Binary, shape):
        torch = self.torch
        ops = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
               "prelu": lambda a, b: torch.where(a < 0, a * b, a)}
        if st.kind not in ops:
            raise Unsupported(f"binary {st.kind}")
        op, act = ops[st.kind], self._act(getattr(st, "act", None))
        return lambda a, b: act(op(a, b))

    def _copy(self, st: P.Copy, shape):
        if any(s < 0 for s in st.strides):
            raise Unsupported("a copy with a negative stride")
        return lambda x: self.torch.as_strided(x.reshape(-1), shape, st.strides, st.offset).contiguous()

    def _resize(self, st: P.Resize, shape):
        torch = self.torch
        ys = torch.from_numpy(np.asarray(st.src_y, np.int64)).to(self.dev)
        xs = torch.from_numpy(np.asarray(st.src_x, np.int64)).to(self.dev)
        return lambda x: x.index_select(2, ys).index_select(3, xs)

    def _linear_resize(self, st: P.LinearResize, shape):
        torch = self.torch
        idx = [torch.from_numpy(np.asarray(m, np.int64)).to(self.dev) for m in (st.y0, st.y1, st.x0, st.x1)]
        wy, wx = self._t(st.wy).reshape(-1, 1), self._t(st.wx)

        def linear(x):
            rows = x.index_select(2, idx[0]) * (1 - wy) + x.index_select(2, idx[1]) * wy
            return rows.index_select(3, idx[2]) * (1 - wx) + rows.index_select(3, idx[3]) * wx

        return linear

    def _pool(self, st: P.Pool, out_shape):
        torch = self.torch
        F = torch.nn.functional
        _, _, oh, ow = out_shape
        (kh, kw), (sh, sw), (dh, dw) = st.kernel, st.stride, st.dilation
        top, left, bottom, right = st.pads
        h, w = self.prog.values[st.x].shape[2:]
        need_h, need_w = (oh - 1) * sh + dh * (kh - 1) + 1, (ow - 1) * sw + dw * (kw - 1) + 1
        extra = (left, max(0, need_w - w - left), top, max(0, need_h - h - top))  # F.pad's order
        if st.kind == "max":
            return lambda x: F.max_pool2d(F.pad(x, extra, value=float("-inf")), (kh, kw), (sh, sw), 0, (dh, dw))
        if (dh, dw) != (1, 1):
            raise Unsupported("a dilated average pool")
        ones = torch.ones((1, 1, h, w), device=self.dev)
        if st.count_include_pad:
            ones = F.pad(F.pad(ones, (left, right, top, bottom), value=1.0),
                         (0, max(0, need_w - w - left - right), 0, max(0, need_h - h - top - bottom)))
        else:
            ones = F.pad(ones, extra)
        count = torch.clamp(F.avg_pool2d(ones, (kh, kw), (sh, sw)) * (kh * kw), min=1.0)
        return lambda x: F.avg_pool2d(F.pad(x, extra), (kh, kw), (sh, sw)) * (kh * kw) / count

    def _pad(self, st: P.Pad, shape=None):
        F = self.torch.nn.functional
        if any(st.interior) or min(st.before + st.after, default=0) < 0:
            raise Unsupported("an interior or negative pad")
        widths = []
        for b, a in zip(reversed(st.before), reversed(st.after)):
            widths += [b, a]
        mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[st.mode]
        if mode == "constant":
            return lambda x: F.pad(x, widths, value=float(st.value))
        return lambda x: F.pad(x, widths, mode=mode)

    def _reduce(self, st: P.Reduce, shape):
        torch = self.torch
        k = st.kind
        ops = {"sum": lambda v: v.sum(1), "mean": lambda v: v.mean(1), "max": lambda v: v.amax(1),
               "min": lambda v: v.amin(1), "l1": lambda v: v.abs().sum(1), "l2": lambda v: torch.sqrt((v * v).sum(1)),
               "sumsquare": lambda v: (v * v).sum(1)}
        if k not in ops:
            raise Unsupported(f"reduction {k}")
        op = ops[k]
        return lambda x: op(x.reshape(st.outer, st.n, st.inner)).reshape(shape)

    # ---- running
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return self._run(inputs)
        except Exception as e:  # CUDA out of memory, a shape torch refuses: the row says so
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            raise FacerunError(f"torch failed: {type(e).__name__}: {first}") from None

    def _run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        values = self.prog.values
        store: dict = {}
        with torch.inference_mode():
            for name, vid in self.prog.inputs:
                store[vid] = torch.from_numpy(np.ascontiguousarray(inputs[name], np.float32)).to(self.dev)

            def get(vid):
                v = values[vid]
                if v.kind == "const":
                    return self.consts[vid]
                base = store[v.base]
                return base if tuple(base.shape) == v.shape else base.reshape(v.shape)

            for st, fn in self.steps:
                y = fn(*[get(v) for v in st.reads])
                shape = values[st.out].shape
                store[st.out] = y if tuple(y.shape) == shape else y.reshape(shape)
                for f in st.frees:
                    store.pop(f, None)
            out = {name: get(vid) for name, vid in self.prog.outputs}
            return {name: t.cpu().numpy() for name, t in out.items()}


# Each step kind's torch form: (TorchProgram, step, output shape) -> a function of the step's read tensors. A new
# step kind is one entry here (and in cpu.KERNELS, gpu/lower.py's LOWERINGS, gpu/masking.py's RULES).
OPS = {
    P.Conv: TorchProgram._conv,
    P.Gemm: TorchProgram._gemm,
    P.MatMul: lambda tp, st, shape: tp.torch.matmul,
    P.Affine: TorchProgram._affine,
    P.Unary: lambda tp, st, shape: tp._act(st.act),
    P.Binary: TorchProgram._binary,
    P.Copy: TorchProgram._copy,
    P.Concat: lambda tp, st, shape: lambda *xs: tp.torch.cat(xs, st.axis),
    P.GlobalAvgPool: lambda tp, st, shape: lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    P.Pool: TorchProgram._pool,
    P.Resize: TorchProgram._resize,
    P.LinearResize: TorchProgram._linear_resize,
    P.Pad: TorchProgram._pad,
    P.Reduce: TorchProgram._reduce,
    P.Softmax: lambda tp, st, shape: lambda x: x.reshape(st.outer, st.n, st.inner).softmax(1).reshape(shape),
}
