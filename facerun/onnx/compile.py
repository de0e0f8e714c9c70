"""ONNX nodes -> a step program for one input shape.

One pass over the nodes in graph order. Each tensor name is bound either to a constant (numpy array) or to a program
value. Nodes whose inputs are all constants are evaluated here (shape arithmetic folds away); reshape-like nodes become
views; BatchNormalization folds into the convolution (or fully connected layer) before it when nothing else reads that
output, and an activation or a residual Add that follows a convolution joins its epilogue under the same condition.
"""

from __future__ import annotations

from math import ceil, prod

import numpy as np

from .. import program as P
from ..errors import InputError, ModelError
from .read import ImportedModel, Node

F32_MAX = float(np.finfo(np.float32).max)


class _Act:
    """A tensor name bound to a program value."""

    __slots__ = ("vid",)

    def __init__(self, vid: int):
        self.vid = vid


def _pairs(v, n=2):
    return tuple(int(x) for x in v) if v is not None else (1,) * n


def _broadcast(a: tuple, b: tuple) -> tuple:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise InputError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def _strides(shape) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


class Compiler:
    def __init__(self, model: ImportedModel, input_shapes: dict[str, tuple[int, ...]], batch_items: int | None = None):
        self.model = model
        self.opset = model.opset
        # batch_items=N: a file fixed at batch 1 compiled for N items: a constant Reshape whose leading 1 meets the
        # N items keeps them apart (the Net checks the result against single runs before it uses the program)
        self.batch_items = batch_items
        self.values: list[P.Value] = []
        self.steps: list[P.Step] = []
        self.producer: dict[int, P.Step] = {}
        self.folded: list[str] = []
        self.env: dict[str, object] = {}
        self.uses: dict[str, int] = {}
        for n in model.nodes:
            for i in n.inputs:
                if i:
                    self.uses[i] = self.uses.get(i, 0) + 1
        for o in model.outputs:
            self.uses[o] = self.uses.get(o, 0) + 1
        self.graph_outputs = set(model.outputs)
        for name, arr in model.constants.items():
            self.env[name] = arr
        self.inputs = []
        for name, _ in model.inputs:
            shape = tuple(int(d) for d in input_shapes[name])
            vid = self._value(name, shape, "input")
            self.env[name] = _Act(vid)
            self.inputs.append((name, vid))

    # -------------------------------------------------------------------------------------------------- helpers
    def _value(self, name, shape, kind, base=None, data=None) -> int:
        vid = len(self.values)
        self.values.append(P.Value(vid, name, tuple(int(d) for d in shape), kind, vid if base is None else base, data))
        return vid

    def _const_value(self, name, arr) -> int:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        return self._value(name, arr.shape, "const", data=arr)

    def _shape(self, vid) -> tuple:
        return self.values[vid].shape

    def _emit(self, step: P.Step, name: str, shape) -> int:
        vid = self._value(name, shape, "temp")
        step.out = vid
        self.steps.append(step)
        self.producer[vid] = step
        return vid

    def _order(self, vid: int) -> int:
        """Index of the step that makes vid's storage (-1 for inputs and constants)."""
        step = self.producer.get(self.values[vid].base)
        return -1 if step is None else self.steps.index(step)

    def _view(self, name, src: int, shape) -> int:
        if prod(shape) != self.values[src].size:
            raise InputError(f"cannot view {list(self._shape(src))} as {list(shape)}")
        return self._value(name, shape, "view", base=self.values[src].base)

    def _act_or_const(self, node: Node, i: int):
        name = node.inputs[i] if i < len(node.inputs) else ""
        if not name:
            return None
        if name not in self.env:
            raise ModelError(f"node '{node.name}' reads '{name}', which nothing produces")
        return self.env[name]

    def _const(self, node: Node, i: int, what: str):
        v = self._act_or_const(node, i)
        if v is None:
            return None
        if isinstance(v, _Act):
            raise ModelError(f"node '{node.name}' ({node.op}): its {what} must be a constant, facerun cannot compute it")
        return v

    def _vid(self, v, name="const") -> int:
        """A program value for an operand that may be a constant."""
        if isinstance(v, _Act):
            return v.vid
        return self._const_value(name, v)

    def _fusable(self, vid: int, kinds: tuple) -> P.Step | None:
        """The step that produced vid, if it is one of `kinds`, has no epilogue yet and nothing else reads vid."""
        step = self.producer.get(vid)
        if step is None or not isinstance(step, kinds) or self.values[vid].kind != "temp":
            return None
        name = self.values[vid].name
        if self.uses.get(name, 0) != 1 or name in self.graph_outputs:
            return None
        if getattr(step, "act", None) is not None:
            return None
        return step

    # ---------------------------------------------------------------------------------------------------- main
    def compile(self) -> P.Program:
        for node in self.model.nodes:
            ins = [self._act_or_const(node, i) for i in range(len(node.inputs))]
            present = [v for v in ins if v is not None]
            if node.op in ("Shape",):
                self._bind(node, self._shape_of(node, ins[0]))
                continue
            if node.op == "Constant":
                self._bind(node, self._constant(node))
                continue
            if node.op == "ConstantOfShape" or all(not isinstance(v, _Act) for v in present):
                self._bind(node, self._fold(node, ins))
                continue
            handler = getattr(self, "_op_" + node.op, None)
            if handler is None:
                raise ModelError(f"node '{node.name}' ({node.op}) on computed tensors is not supported")
            try:
                handler(node, ins)
            except (InputError, ModelError):
                raise
            except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as e:
                raise InputError(f"node '{node.name}' ({node.op}): {e}") from None

        outputs = []
        for name in self.model.outputs:
            v = self.env.get(name)
            if v is None:
                raise ModelError(f"output '{name}' is never produced")
            if not isinstance(v, _Act):
                v = _Act(self._const_value(name, v))
            outputs.append((name, v.vid))
        prog = P.Program(self.values, self.steps, self.inputs, outputs, self.folded)
        prog.assign_lifetimes()
        return prog

    def _bind(self, node: Node, value):
        self.env[node.outputs[0]] = value

    def _out(self, node: Node, vid: int):
        self.env[node.outputs[0]] = _Act(vid)

    # ------------------------------------------------------------------------------------------ constant folding
    def _constant(self, node: Node):
        a = node.attrs
        if "value" in a:
            return np.asarray(a["value"])
        for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
            if key in a:
                return np.array(a[key], dtype=dtype)
        for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
            if key in a:
                return np.array(a[key], dtype=dtype)
        raise ModelError(f"node '{node.name}' (Constant): no value facerun can read")

    def _shape_of(self, node: Node, v):
        shape = self._shape(v.vid) if isinstance(v, _Act) else np.shape(v)
        start = node.attrs.get("start", 0)
        end = node.attrs.get("end", None)
        return np.array(shape[start:end], dtype=np.int64)

    def _fold(self, node: Node, ins):
        """Evaluate a node whose inputs are all constants."""
        op, a = node.op, node.attrs
        x = ins[0] if ins else None
        self.folded.append(f"{op} '{node.name}' evaluated at compile time")
        if op == "ConstantOfShape":
            value = a.get("value", np.zeros(1, np.float32))
            return np.full(tuple(int(d) for d in x), np.asarray(value).reshape(-1)[0], dtype=np.asarray(value).dtype)
        if op == "Gather":
            return np.take(x, np.asarray(ins[1]).astype(np.int64), axis=a.get("axis", 0))
        if op == "Cast":
            return x.astype(_onnx_dtype(a["to"]))
        if op in ("Identity", "Dropout"):
            return x
        if op in ("Add", "Sub", "Mul", "Div"):
            fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
            if op == "Div" and np.issubdtype(np.asarray(x).dtype, np.integer):
                return np.asarray(x) // np.asarray(ins[1])
            return fn(x, ins[1])
        if op == "Concat":
            return np.concatenate([np.atleast_1d(v) for v in ins if v is not None], axis=a.get("axis", 0))
        if op == "Unsqueeze":
            axes = a.get("axes") if "axes" in a else [int(i) for i in ins[1]]
            out = np.asarray(x)
            rank = out.ndim + len(axes)
            for ax in sorted(ax % rank for ax in axes):
                out = np.expand_dims(out, ax)
            return out
        if op == "Squeeze":
            axes = a.get("axes") if "axes" in a else (None if len(ins) < 2 or ins[1] is None else [int(i) for i in ins[1]])
            return np.squeeze(x, axis=None if axes is None else tuple(axes))
        if op == "Reshape":
            return np.asarray(x).reshape(self._reshape_target(node, np.shape(x), ins[1]))
        if op == "Flatten":
            axis = a.get("axis", 1) % max(np.ndim(x), 1)
            return np.asarray(x).reshape(prod(np.shape(x)[:axis]), -1)
        if op == "Transpose":
            return np.transpose(x, a.get("perm"))
        if op == "Slice":
            starts, ends, axes, steps = self._slice_args(node, ins)
            idx = [slice(None)] * np.ndim(x)
            for s, e, ax, st in zip(starts, ends, axes, steps):
                idx[ax % np.ndim(x)] = slice(int(s), int(e), int(st))
            return np.asarray(x)[tuple(idx)]
        raise ModelError(f"node '{node.name}' ({op}) on constants is not supported")

    def _reshape_target(self, node, shape, target) -> tuple:
        target = [int(d) for d in np.asarray(target).reshape(-1)]
        allowzero = node.attrs.get("allowzero", 0)
        out = []
        for i, d in enumerate(target):
            if d == 0 and not allowzero:
                out.append(shape[i])
            else:
                out.append(d)
        if out.count(-1) > 1:
            raise InputError("a reshape with two -1 dimensions")
        if -1 in out:
            known = prod(d for d in out if d != -1)
            total = prod(shape)
            if known == 0 or total % known:
                raise InputError(f"cannot reshape {list(shape)} to {target}")
            out[out.index(-1)] = total // known
        if prod(out) != prod(shape):
            raise InputError(f"cannot reshape {list(shape)} to {target}")
        return tuple(out)

    def _slice_args(self, node, ins):
        a = node.attrs
        if self.opset < 10 or "starts" in a:
            starts, ends = a["starts"], a["ends"]
            axes = a.get("axes", list(range(len(starts))))
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in ins[1]]
            ends = [int(v) for v in ins[2]]
            axes = [int(v) for v in ins[3]] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
            steps = [int(v) for v in ins[4]] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        return starts, ends, axes, steps

    # ---------------------------------------------------------------------------------------------- operators
    def _op_Conv(self, node, ins):
        a = node.attrs
        x = ins[0].vid
        w = np.asarray(self._const(node, 1, "weight"), dtype=np.float32)
        b = self._const(node, 2, "bias")
        n, c, h, wd = self._shape(x)
        if w.ndim != 4:
            raise ModelError(f"node '{node.name}': only 2-D convolutions are supported (weight {list(w.shape)})")
        groups = int(a.get("group", 1))
        cout, cg, kh, kw = w.shape
        if c != cg * groups:
            raise InputError(f"node '{node.name}' (Conv) expects {cg * groups} input channels, got {c}")
        sh, sw = _pairs(a.get("strides"))
        dh, dw = _pairs(a.get("dilations"))
        pads = self._pads(a, (h, wd), (kh, kw), (sh, sw), (dh, dw))
        oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
        if oh <= 0 or ow <= 0:
            raise InputError(f"node '{node.name}' (Conv): input {h}x{wd} is too small for its {kh}x{kw} kernel")
        bias = None if b is None else np.asarray(b, dtype=np.float32).reshape(-1).copy()
        step = P.Conv(0, node.name, x, w.copy(), bias, groups, (sh, sw), (dh, dw), pads)
        self._out(node, self._emit(step, node.outputs[0], (n, cout, oh, ow)))

    def _pads(self, a, hw, k, s, d) -> tuple[int, int, int, int]:
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = []
            for i in range(2):
                out = -(-hw[i] // s[i])
                total = max(0, (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - hw[i])
                small, big = total // 2, total - total // 2
                pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
            return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
        if auto == "VALID":
            return (0, 0, 0, 0)
        p = a.get("pads", [0, 0, 0, 0])
        return (int(p[0]), int(p[1]), int(p[2]), int(p[3]))

    def _op_BatchNormalization(self, node, ins):
        x = ins[0].vid
        gamma, beta, mean, var = (np.asarray(self._const(node, i, "statistics"), np.float64) for i in range(1, 5))
        eps = float(node.attrs.get("epsilon", 1e-5))
        scale = gamma / np.sqrt(var + eps)
        shift = beta - mean * scale
        prev = self._fusable(x, (P.Conv, P.Gemm))
        if prev is not None and getattr(prev, "residual", None) is not None:
            prev = None  # the BN applies to conv + residual: it cannot go into the weights
        if prev is not None:
            w = prev.weight.astype(np.float64)
            prev.weight = (w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            b = np.zeros(w.shape[0]) if prev.bias is None else prev.bias.astype(np.float64)
            prev.bias = (b * scale + shift).astype(np.float32)
            self.values[x].name = node.outputs[0]
            self.folded.append(f"BatchNormalization '{node.name}' folded into {prev.op} '{prev.node}'")
            self._out(node, x)
            return
        shape = self._shape(x)
        step = P.Affine(0, node.name, x, scale.astype(np.float32), shift.astype(np.float32))
        self._out(node, self._emit(step, node.outputs[0], shape))

    def _activation(self, node, act: P.Activation, x: int):
        prev = self._fusable(x, (P.Conv, P.Gemm))
        per_channel_ok = act.kind != "prelu" or (len(self._shape(x)) >= 2 and act.slope.size == self._shape(x)[1])
        if prev is not None and per_channel_ok:
            prev.act = act
            self.values[x].name = node.outputs[0]
            self.folded.append(f"{node.op} '{node.name}' fused into {prev.op} '{prev.node}'")
            self._out(node, x)
            return
        self._out(node, self._emit(P.Unary(0, node.name, x, act), node.outputs[0], self._shape(x)))

    def _op_Relu(self, node, ins):
        self._activation(node, P.Activation("relu"), ins[0].vid)

    def _op_Sigmoid(self, node, ins):
        self._activation(node, P.Activation("sigmoid"), ins[0].vid)

    def _op_LeakyRelu(self, node, ins):
        self._activation(node, P.Activation("leaky", alpha=float(node.attrs.get("alpha", 0.01))), ins[0].vid)

    def _op_Clip(self, node, ins):
        if self.opset < 11:
            lo, hi = node.attrs.get("min", -F32_MAX), node.attrs.get("max", F32_MAX)
        else:
            lo_c, hi_c = self._const(node, 1, "min"), self._const(node, 2, "max")
            lo = -F32_MAX if lo_c is None else float(np.asarray(lo_c).reshape(-1)[0])
            hi = F32_MAX if hi_c is None else float(np.asarray(hi_c).reshape(-1)[0])
        self._activation(node, P.Activation("clip", lo=float(lo), hi=float(hi)), ins[0].vid)

    def _op_PRelu(self, node, ins):
        x = ins[0].vid
        slope = ins[1]
        shape = self._shape(x)
        if not isinstance(slope, _Act):
            slope = np.asarray(slope, np.float32)
            # per channel when the slope, broadcast against x, varies along axis 1 only
            if len(shape) >= 2 and slope.size == shape[1]:
                full = np.broadcast_to(slope, _broadcast(shape, slope.shape)) if slope.ndim <= len(shape) else None
                aligned = slope.ndim >= len(shape) - 1 and slope.shape[-(len(shape) - 1)] == shape[1]
                if full is not None and (aligned or shape[1] == 1):
                    self._activation(node, P.Activation("prelu", slope=slope.reshape(-1).copy()), x)
                    return
        self._binary(node, ins, "prelu")

    def _binary(self, node, ins, kind):
        a, b = ins[0], ins[1]
        sa = self._shape(a.vid) if isinstance(a, _Act) else np.shape(a)
        sb = self._shape(b.vid) if isinstance(b, _Act) else np.shape(b)
        shape = _broadcast(sa, sb)
        if kind == "add":
            # a residual add after a convolution joins its epilogue
            for conv_side, other in ((a, b), (b, a)):
                if isinstance(conv_side, _Act) and isinstance(other, _Act):
                    conv = self._fusable(conv_side.vid, (P.Conv,))
                    # the other operand must exist when the convolution runs: made by an earlier step (or an input)
                    made_before = conv is not None and self._order(other.vid) < self._order(conv_side.vid)
                    if made_before and conv.residual is None and self._shape(other.vid) == shape == self._shape(conv_side.vid):
                        conv.residual = other.vid
                        self.values[conv_side.vid].name = node.outputs[0]
                        self.folded.append(f"Add '{node.name}' fused into Conv '{conv.node}' as a residual")
                        self._out(node, conv_side.vid)
                        return
        step = P.Binary(0, node.name, self._vid(a, node.name + ":a"), self._vid(b, node.name + ":b"), kind)
        self._out(node, self._emit(step, node.outputs[0], shape))

    def _op_Add(self, node, ins):
        self._binary(node, ins, "add")

    def _op_Sub(self, node, ins):
        self._binary(node, ins, "sub")

    def _op_Mul(self, node, ins):
        self._binary(node, ins, "mul")

    def _op_Div(self, node, ins):
        self._binary(node, ins, "div")

    def _op_Transpose(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        perm = node.attrs.get("perm") or list(range(len(shape)))[::-1]
        perm = [p % len(shape) for p in perm]
        out_shape = tuple(shape[p] for p in perm)
        if [p for p in perm if shape[p] != 1] == sorted(p for p in perm if shape[p] != 1):
            self._out(node, self._view(node.outputs[0], x, out_shape))  # only size-1 axes move: same memory order
            return
        st = _strides(shape)
        step = P.Copy(0, node.name, x, 0, tuple(st[p] for p in perm), "transpose")
        self._out(node, self._emit(step, node.outputs[0], out_shape))

    def _op_Slice(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        starts, ends, axes, steps = self._slice_args(node, [None] + [self._const(node, i, "bounds") for i in range(1, len(ins))])
        st = _strides(shape)
        offset, strides, out_shape = 0, list(st), list(shape)
        for s, e, ax, step in zip(starts, ends, axes, steps):
            ax = int(ax) % len(shape)
            if step == 0:
                raise ModelError(f"node '{node.name}' (Slice): step 0")
            r = range(*slice(int(s), int(e), int(step)).indices(shape[ax]))
            out_shape[ax] = len(r)
            offset += (r.start if len(r) else 0) * st[ax]
            strides[ax] = st[ax] * int(step)
        if out_shape == list(shape) and offset == 0 and strides == st:
            self._out(node, x)  # a slice that keeps everything
            return
        step = P.Copy(0, node.name, x, offset, tuple(strides), "slice")
        self._out(node, self._emit(step, node.outputs[0], tuple(out_shape)))

    def _pool(self, node, ins, kind):
        a = node.attrs
        x = ins[0].vid
        n, c, h, w = self._shape(x)
        kh, kw = _pairs(a["kernel_shape"])
        sh, sw = _pairs(a.get("strides"))
        dh, dw = _pairs(a.get("dilations"))
        pads = self._pads(a, (h, w), (kh, kw), (sh, sw), (dh, dw))
        ceil_mode = int(a.get("ceil_mode", 0))
        dims = []
        for size, k, s, d, p0, p1 in ((h, kh, sh, dh, pads[0], pads[2]), (w, kw, sw, dw, pads[1], pads[3])):
            span = size + p0 + p1 - d * (k - 1) - 1
            out = (ceil(span / s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + p0:
                out -= 1  # the last window would start in the end padding
            if out <= 0:
                raise InputError(f"node '{node.name}' ({node.op}): input {h}x{w} is too small for its window")
            dims.append(out)
        step = P.Pool(0, node.name, x, kind, (kh, kw), (sh, sw), pads, (dh, dw), bool(a.get("count_include_pad", 0)))
        self._out(node, self._emit(step, node.outputs[0], (n, c, dims[0], dims[1])))

    def _op_MaxPool(self, node, ins):
        if len(node.outputs) > 1 and node.outputs[1]:
            raise ModelError(f"node '{node.name}' (MaxPool): the indices output is not supported")
        self._pool(node, ins, "max")

    def _op_AveragePool(self, node, ins):
        self._pool(node, ins, "avg")

    def _op_GlobalAveragePool(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        self._out(node, self._emit(P.GlobalAvgPool(0, node.name, x), node.outputs[0], shape[:2] + (1,) * (len(shape) - 2)))

    def _resize(self, node, x, scales, sizes, mode, ctm, nearest_mode):
        shape = self._shape(x)
        if mode != "nearest":
            raise ModelError(f"node '{node.name}' ({node.op}): mode '{mode}' is not supported (nearest only)")
        if len(shape) != 4:
            raise ModelError(f"node '{node.name}' ({node.op}): only 4-D inputs are supported")
        if sizes is not None and len(sizes):
            out = tuple(int(v) for v in sizes)
            sc = [o / i for o, i in zip(out, shape)]
        else:
            sc = [float(v) for v in scales]
            out = tuple(int(np.floor(i * s)) for i, s in zip(shape, sc))
        if out[:2] != shape[:2]:
            raise ModelError(f"node '{node.name}' ({node.op}): resizing the batch or channel axis is not supported")
        maps = [_nearest_map(shape[ax], out[ax], sc[ax], ctm, nearest_mode) for ax in (2, 3)]
        step = P.Resize(0, node.name, x, maps[0], maps[1])
        self._out(node, self._emit(step, node.outputs[0], out))

    def _op_Resize(self, node, ins):
        a = node.attrs
        x = ins[0].vid
        if self.opset < 11:
            scales, sizes = self._const(node, 1, "scales"), None
        else:
            scales = self._const(node, 2, "scales")
            sizes = self._const(node, 3, "sizes")
            if scales is not None and np.size(scales) == 0:
                scales = None
        ctm = a.get("coordinate_transformation_mode", "half_pixel" if self.opset >= 11 else "asymmetric")
        nearest = a.get("nearest_mode", "round_prefer_floor" if self.opset >= 11 else "floor")
        if self.opset < 11:
            ctm, nearest = "asymmetric", "floor"
        self._resize(node, x, scales, sizes, a.get("mode", "nearest"), ctm, nearest)

    def _op_Upsample(self, node, ins):
        scales = node.attrs.get("scales")
        if scales is None:
            scales = self._const(node, 1, "scales")
        self._resize(node, ins[0].vid, scales, None, node.attrs.get("mode", "nearest"), "asymmetric", "floor")

    def _op_Gemm(self, node, ins):
        a = node.attrs
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        x = ins[0].vid
        if a.get("transA", 0):
            m, k = self._shape(x)
            st = _strides((m, k))
            x = self._emit(P.Copy(0, node.name + ":transA", x, 0, (st[1], st[0]), "transpose"), node.name + ":At", (k, m))
        if isinstance(ins[1], _Act):
            raise ModelError(f"node '{node.name}' (Gemm): a computed B operand is not supported")
        b = np.asarray(ins[1], np.float32)
        weight = (b if a.get("transB", 0) else b.T) * alpha
        m, k = self._shape(x)
        if weight.shape[1] != k:
            raise InputError(f"node '{node.name}' (Gemm) expects {weight.shape[1]} input features, got {k}")
        nout = weight.shape[0]
        bias = None
        c = self._const(node, 2, "C") if len(ins) > 2 else None
        if c is not None:
            c = np.asarray(c, np.float32) * beta
            if c.size == 1:
                bias = np.full(nout, c.reshape(-1)[0], np.float32)
            elif c.size == nout and (c.ndim == 1 or c.shape[0] == 1):
                bias = c.reshape(-1).copy()
            else:
                raise ModelError(f"node '{node.name}' (Gemm): a C of shape {list(c.shape)} is not supported")
        step = P.Gemm(0, node.name, x, np.ascontiguousarray(weight), bias)
        self._out(node, self._emit(step, node.outputs[0], (m, nout)))

    def _op_MatMul(self, node, ins):
        a, b = ins
        if isinstance(a, _Act) and not isinstance(b, _Act) and np.ndim(b) == 2:
            sa = self._shape(a.vid)
            k, nout = np.shape(b)
            if sa[-1] != k:
                raise InputError(f"node '{node.name}' (MatMul) expects {k} input features, got {sa[-1]}")
            x = a.vid
            if len(sa) != 2:
                x = self._view(node.name + ":2d", a.vid, (prod(sa[:-1]), k))
            weight = np.ascontiguousarray(np.asarray(b, np.float32).T)
            out = self._emit(P.Gemm(0, node.name, x, weight, None), node.outputs[0], (prod(sa[:-1]), nout))
            if len(sa) != 2:
                out = self._view(node.outputs[0], out, sa[:-1] + (nout,))
            self._out(node, out)
            return
        sa = self._shape(a.vid) if isinstance(a, _Act) else np.shape(a)
        sb = self._shape(b.vid) if isinstance(b, _Act) else np.shape(b)
        try:
            shape = np.matmul(np.empty(sa, np.float32), np.empty(sb, np.float32)).shape
        except ValueError:
            raise InputError(f"node '{node.name}' (MatMul): shapes {list(sa)} and {list(sb)} do not multiply") from None
        step = P.MatMul(0, node.name, self._vid(a, node.name + ":a"), self._vid(b, node.name + ":b"))
        self._out(node, self._emit(step, node.outputs[0], shape))

    def _op_Concat(self, node, ins):
        axis = node.attrs.get("axis", 0)
        parts = [v for v in ins if v is not None]
        shapes = [self._shape(v.vid) if isinstance(v, _Act) else np.shape(v) for v in parts]
        rank = len(shapes[0])
        axis %= rank
        for s in shapes:
            if len(s) != rank or any(s[d] != shapes[0][d] for d in range(rank) if d != axis):
                raise InputError(f"node '{node.name}' (Concat): shapes {[list(s) for s in shapes]} do not line up")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        vids = tuple(self._vid(v, f"{node.name}:{i}") for i, v in enumerate(parts))
        self._out(node, self._emit(P.Concat(0, node.name, vids, axis), node.outputs[0], tuple(out)))

    def _op_Softmax(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        if self.opset < 13:
            axis = node.attrs.get("axis", 1) % len(shape)
            outer, n, inner = prod(shape[:axis]), prod(shape[axis:]), 1
        else:
            axis = node.attrs.get("axis", -1) % len(shape)
            outer, n, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1 :])
        self._out(node, self._emit(P.Softmax(0, node.name, x, outer, n, inner), node.outputs[0], shape))

    # views
    def _op_Flatten(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        axis = node.attrs.get("axis", 1) % (len(shape) + 1) if shape else 0
        self._out(node, self._view(node.outputs[0], x, (prod(shape[:axis]), prod(shape[axis:]))))

    def _op_Reshape(self, node, ins):
        x = ins[0].vid
        target = self._const(node, 1, "shape")
        n = self.batch_items
        if n and n > 1 and np.size(target) and int(np.asarray(target).reshape(-1)[0]) == 1 and self._shape(x)[0] == n:
            target = np.concatenate([[n], np.asarray(target).reshape(-1)[1:]]).astype(np.int64)
            self.folded.append(f"Reshape '{node.name}': its leading 1 taken as the batch of {n}")
        self._out(node, self._view(node.outputs[0], x, self._reshape_target(node, self._shape(x), target)))

    def _op_Squeeze(self, node, ins):
        x = ins[0].vid
        shape = self._shape(x)
        if "axes" in node.attrs:
            axes = node.attrs["axes"]
        else:
            c = self._const(node, 1, "axes") if len(ins) > 1 else None
            axes = None if c is None else [int(v) for v in np.asarray(c).reshape(-1)]
        if axes is None:
            out = tuple(d for d in shape if d != 1)
        else:
            axes = {ax % len(shape) for ax in axes}
            if any(shape[ax] != 1 for ax in axes):
                raise InputError(f"node '{node.name}' (Squeeze): axis of size other than 1 in {list(shape)}")
            out = tuple(d for i, d in enumerate(shape) if i not in axes)
        self._out(node, self._view(node.outputs[0], x, out))

    def _op_Unsqueeze(self, node, ins):
        x = ins[0].vid
        shape = list(self._shape(x))
        axes = node.attrs["axes"] if "axes" in node.attrs else [int(v) for v in np.asarray(self._const(node, 1, "axes")).reshape(-1)]
        rank = len(shape) + len(axes)
        for ax in sorted(ax % rank for ax in axes):
            shape.insert(ax, 1)
        self._out(node, self._view(node.outputs[0], x, tuple(shape)))

    def _op_Identity(self, node, ins):
        self._out(node, ins[0].vid)

    def _op_Dropout(self, node, ins):
        self._out(node, ins[0].vid)

    def _op_Cast(self, node, ins):
        if _onnx_dtype(node.attrs["to"]) != np.float32:
            raise ModelError(f"node '{node.name}' (Cast): casting a computed tensor to a non-float type is not supported")
        self._out(node, ins[0].vid)


def _nearest_map(n_in: int, n_out: int, scale: float, ctm: str, mode: str) -> np.ndarray:
    """Source index for each output index of a nearest resize, as ONNX's Resize defines it."""
    i = np.arange(n_out, dtype=np.float64)
    if ctm == "asymmetric":
        x = i / scale
    elif ctm == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(i)
    elif ctm == "align_corners":
        x = i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(i)
    elif ctm == "tf_half_pixel_for_nn":
        x = (i + 0.5) / scale
    else:
        raise ModelError(f"Resize: coordinate_transformation_mode '{ctm}' is not supported")
    if mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    elif mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif mode == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    else:
        raise ModelError(f"Resize: nearest_mode '{mode}' is not supported")
    return np.clip(idx, 0, n_in - 1).astype(np.int32)


def _onnx_dtype(to: int):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(to)


def compile_model(model: ImportedModel, input_shapes: dict[str, tuple[int, ...]], batch_items: int | None = None) -> P.Program:
    return Compiler(model, input_shapes, batch_items).compile()
