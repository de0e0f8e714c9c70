"""Built-in architecture replicas: same-shape ONNX graphs with random weights, for tests and benchmarks.

Each replica reproduces the layer structure of a real face network (operators, channel counts, strides, input and
output names) with weights drawn from a fixed seed, so benchmarks and parity checks run without downloading anything.
The numbers they produce mean nothing; their cost and their operator mix match the originals.

`replica_path(name)` writes a replica once into the cache folder and returns its path; facerun then loads it like
any other ONNX file. Names: every-op, yunet-arch, sface-arch, auraface-arch, sface-arch-small, auraface-arch-small.

Shapes: the embedders take a symbolic batch "N" ([N,3,112,112] -> [N,D]); the detector keeps batch 1 and has a
symbolic height and width ("H", "W"; any multiple of 32); every-op is fixed at [1,4,9,7].
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import ModelError
from ..io import atomic_write
from ..settings import cache_root

# Bump to regenerate every cached replica even when this file's text is unchanged (e.g. a change in a helper module).
FORMAT_VERSION = 1

# ONNX IR version paired with each opset, so older onnxruntime builds load the files too.
_IR_FOR_OPSET = {11: 6, 13: 7}


# ---------------------------------------------------------------------------------------------- graph building


class _Graph:
    """Collects nodes and initializers; draws weights from one seeded generator so a build is reproducible."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: set[str] = set()

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._used:
            name, i = f"{base}_{i}", i + 1
        self._used.add(name)
        return name

    def const(self, base: str, array) -> str:
        """An initializer; float data is stored as float32, integers as int64."""
        a = np.asarray(array)
        a = a.astype(np.float32 if a.dtype.kind == "f" else np.int64)
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None, **attrs) -> str:
        """Adds a node; its (first) output is named after the node unless `outputs` names them."""
        name = self.fresh(name)
        outs = outputs or [name]
        for o in outs:
            self._used.add(o)
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0]

    def constant_node(self, name: str, array) -> str:
        """A `Constant` node (rather than an initializer), as exporters often emit for shape pieces."""
        a = np.asarray(array)
        a = a.astype(np.float32 if a.dtype.kind == "f" else np.int64)
        return self.node("Constant", [], name, value=numpy_helper.from_array(a, name + "_value"))

    # -- weights --------------------------------------------------------------------------------------------------

    def he(self, shape: tuple[int, ...], fan_in: int, gain: float = 2.0, scale: float = 1.0) -> np.ndarray:
        """He-style normal weights: std = scale * sqrt(gain / fan_in)."""
        std = scale * np.sqrt(gain / fan_in)
        return (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def small(self, shape, std: float = 0.05) -> np.ndarray:
        return (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    # -- layers ---------------------------------------------------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, k: int | tuple[int, int], name: str, *, stride: int = 1,
             pads: tuple[int, int, int, int] | None = None, groups: int = 1, dilation: int = 1, bias: bool = True,
             gain: float = 2.0, scale: float = 1.0, auto_pad: str | None = None) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        fan_in = cin // groups * kh * kw
        inputs = [x, self.const(f"{name}.weight", self.he((cout, cin // groups, kh, kw), fan_in, gain, scale))]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.small((cout,), 0.02)))
        attrs = dict(kernel_shape=[kh, kw], strides=[stride, stride], group=groups, dilations=[dilation, dilation])
        if auto_pad is not None:
            attrs["auto_pad"] = auto_pad
        else:
            if pads is None:
                p = dilation * (kh - 1) // 2
                pads = (p, p, p, p)
            attrs["pads"] = list(pads)
        return self.node("Conv", inputs, name, **attrs)

    def bn(self, x: str, c: int, name: str, gamma: tuple[float, float] = (0.8, 1.2),
           outputs: list[str] | None = None) -> str:
        """Inference batch norm with sane random statistics (var in [0.5, 1.5])."""
        r = self.rng
        scale = r.uniform(*gamma, c)
        shift = r.normal(0.0, 0.05, c)
        mean = r.normal(0.0, 0.05, c)
        var = r.uniform(0.5, 1.5, c)
        inputs = [x] + [self.const(f"{name}.{p}", v) for p, v in
                        (("weight", scale), ("bias", shift), ("running_mean", mean), ("running_var", var))]
        return self.node("BatchNormalization", inputs, name, outputs, epsilon=1e-5)

    def prelu(self, x: str, c: int, name: str, slope_shape: tuple[int, ...] | None = None) -> str:
        slope = self.rng.uniform(0.1, 0.3, c).reshape(slope_shape or (c, 1, 1))
        return self.node("PRelu", [x, self.const(f"{name}.weight", slope)], name)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], opset: int,
              graph_name: str, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=_IR_FOR_OPSET[opset], producer_name="facerun.zoo.replicas",
                              producer_version=str(FORMAT_VERSION), doc_string=doc)
        return m


def _tensor(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# ------------------------------------------------------------------------------------------------- every-op


def every_operator() -> onnx.ModelProto:
    """One small graph that uses every operator facerun supports, on odd shapes (input [1,4,9,7]).

    Outputs: "conv_map" [1,16,9,7], "probs" [1,1,8] (softmax), "embedding" [1,10] (gemm), "pooled" [1,16,3,3].
    Every divisor is bounded away from zero and every exponent is small, so values stay moderate.
    """
    g = _Graph(seed=13)
    x = "input"

    # Elementwise prelude: each broadcast pattern once.
    k_c = g.constant_node("channel_gain", g.rng.uniform(0.5, 1.5, (1, 4, 1, 1)))
    a = g.node("Mul", [x, k_c], "mul_per_channel")                                    # [1,C,1,1] constant
    a = g.node("Add", [a, g.const("row_offset", g.small((1, 1, 1, 7), 0.1))], "add_row")  # [1,1,1,W] constant
    a = g.node("Sub", [a, g.const("scalar_shift", np.float32(0.1))], "sub_scalar")        # 0-d scalar

    # The convolution zoo.
    c1 = g.conv(a, 4, 8, 3, "conv_dense3x3", bias=False)
    c1 = g.bn(c1, 8, "bn_after_conv")                                       # folds into conv_dense3x3
    c1 = g.node("Relu", [c1], "relu")
    c2 = g.conv(c1, 8, 8, 3, "conv_depthwise", groups=8)
    c2 = g.prelu(c2, 8, "prelu_c11", (8, 1, 1))
    c3 = g.conv(c2, 8, 8, 3, "conv_grouped", groups=2)
    c3 = g.node("LeakyRelu", [c3], "leaky_relu", alpha=0.1)
    c4 = g.conv(c3, 8, 8, 3, "conv_dilated", dilation=2)                   # pads 2 keep 9x7
    c4 = g.prelu(c4, 8, "prelu_1c11", (1, 8, 1, 1))
    s = g.node("Add", [c1, c4], "add_activations")                          # two activations
    s = g.bn(s, 8, "bn_after_add")                                          # cannot fold: no conv before it
    c5 = g.conv(x, 4, 6, 3, "conv_asym_pads", pads=(0, 1, 2, 1))             # top, left, bottom, right
    c6 = g.conv(c5, 6, 6, 2, "conv_same_upper", auto_pad="SAME_UPPER")       # 2x2: pads 0 before, 1 after
    c7 = g.conv(a, 4, 4, 5, "conv_5x5")
    c7 = g.node("Sigmoid", [c7], "sigmoid")
    cat = g.node("Concat", [s, c6, c7], "concat", axis=1)                    # [1,18,9,7]
    c8 = g.conv(cat, 18, 16, 1, "conv_1x1", gain=1.0)                        # [1,16,9,7]
    c9 = g.conv(c8, 16, 16, 3, "conv_stride2", stride=2)                     # [1,16,5,4]
    c9 = g.node("Clip", [c9, g.const("clip_min", np.float32(-1.5)), g.const("clip_max", np.float32(1.5))], "clip")

    # Upsampling back to 9x7: by scales then crop, and by sizes computed from shapes (folds at compile time).
    empty = ""
    up = g.node("Resize", [c9, empty, g.const("up_scales", [1.0, 1.0, 2.0, 2.0])], "resize_scales",
                mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # [1,16,10,8]
    up = g.node("Slice", [up, g.const("crop_starts", [0, 0]), g.const("crop_ends", [9, 7]),
                          g.const("crop_axes", [2, 3])], "slice_crop")                            # [1,16,9,7]
    nc = g.node("Slice", [g.node("Shape", [c8], "shape_c8"), g.const("nc_start", [0]), g.const("nc_end", [2])],
                "slice_shape_nc")
    hw = g.node("Slice", [g.node("Shape", [x], "shape_input"), g.const("hw_start", [2]), g.const("hw_end", [4])],
                "slice_shape_hw")
    sizes = g.node("Concat", [nc, hw], "concat_sizes", axis=0)                                     # [1,16,9,7]
    up2 = g.node("Resize", [c9, empty, empty, sizes], "resize_sizes",
                 mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    num = g.node("Add", [up, up2], "add_upsampled")
    den = g.node("Add", [g.node("Sigmoid", [c8], "sigmoid_gate"), g.const("half", np.float32(0.5))], "add_half")
    q = g.node("Div", [num, den], "div_activations")                        # den in [0.5, 1.5]
    fill = g.node("ConstantOfShape", [g.node("Shape", [q], "shape_q")], "constant_of_shape",
                  value=numpy_helper.from_array(np.array([0.25], np.float32), "fill_value"))
    conv_map = g.node("Add", [q, fill], "add_fill", outputs=["conv_map"])

    # Pools.
    mp = g.node("MaxPool", [s], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])  # [1,8,5,4]
    pooled = g.node("AveragePool", [c9], "avgpool", outputs=["pooled"], kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0)   # [1,16,3,3]; last column window partial

    # Softmax head: GAP -> Squeeze -> Unsqueeze -> Softmax(-1).
    gap = g.node("GlobalAveragePool", [mp], "global_avgpool")                # [1,8,1,1]
    sq = g.node("Squeeze", [gap, g.const("sq_axes", [2, 3])], "squeeze")     # [1,8]
    us = g.node("Unsqueeze", [sq, g.const("us_axes", [1])], "unsqueeze")     # [1,1,8]
    g.node("Softmax", [us], "softmax", outputs=["probs"], axis=-1)

    # Gemm head: channel slices -> Transpose -> MatMul -> shape-built Reshape -> Gemm, plus Flatten -> Gemm.
    sl1 = g.node("Slice", [conv_map, g.const("ch_start", [2]), g.const("ch_end", [10]), g.const("ch_axis", [1])],
                 "slice_channels")                                                               # [1,8,9,7]
    sl2 = g.node("Slice", [c8, g.const("st_start", [0]), g.const("st_end", [16]), g.const("st_axis", [1]),
                           g.const("st_step", [2])], "slice_step2")                              # [1,8,9,7]
    m = g.node("Mul", [sl1, sl2], "mul_activations")
    m = g.node("Mul", [m, g.const("scalar_gain", np.float32(0.5))], "mul_scalar")
    t = g.node("Transpose", [m], "transpose", perm=[0, 1, 3, 2])            # [1,8,7,9]
    mm = g.node("MatMul", [t, g.const("matmul_weight", g.he((9, 5), 9, 1.0))], "matmul")  # [1,8,7,5]
    n = g.node("Gather", [g.node("Shape", [mm], "shape_mm"), g.const("index0", np.int64(0))], "gather_batch", axis=0)
    n = g.node("Unsqueeze", [n, g.const("n_axes", [0])], "unsqueeze_batch")
    target = g.node("Concat", [n, g.constant_node("minus_one", [-1])], "concat_target", axis=0)  # [1,-1]
    flat1 = g.node("Reshape", [mm, target], "reshape")                      # [1,280]
    gemm1 = g.node("Gemm", [flat1, g.const("gemm1.weight", g.he((10, 280), 280, 1.0)),
                            g.const("gemm1.bias", g.small((10,), 0.1))], "gemm_reshaped", transB=1)
    flat2 = g.node("Flatten", [pooled], "flatten", axis=1)                   # [1,144]
    gemm2 = g.node("Gemm", [flat2, g.const("gemm2.weight", g.he((10, 144), 144, 1.0)),
                            g.const("gemm2.bias", g.small((10,), 0.1))], "gemm_flattened", transB=1)
    summed = g.node("Sub", [gemm1, gemm2], "sub_activations")
    channels = g.node("Cast", [g.node("Gather", [g.node("Shape", [x], "shape_x_again"), g.const("index1", np.int64(1))],
                                      "gather_channels", axis=0)], "cast_channels", to=TensorProto.FLOAT)  # 4.0
    g.node("Div", [summed, channels], "div_by_channels", outputs=["embedding"])

    outputs = [_tensor("conv_map", [1, 16, 9, 7]), _tensor("probs", [1, 1, 8]), _tensor("embedding", [1, 10]),
               _tensor("pooled", [1, 16, 3, 3])]
    return g.model([_tensor("input", [1, 4, 9, 7])], outputs, 13, "every_operator",
                   "facerun every-op test graph (random weights)")


# --------------------------------------------------------------------------------------------------- YuNet


def yunet_like() -> onnx.ModelProto:
    """The YuNet-2023mar detector's layers (yunet_s) with random weights, opset 11.

    Backbone: conv3x3/2 + ReLU, then "DP units" (1x1 conv, depthwise 3x3 conv, ReLU) with 2x2 max pools; a top-down
    neck (nearest x2 Resize + Add); heads per stride 8/16/32 (1x1 conv then 3x3 grouped conv) for cls, bbox, obj and
    kps, each flattened by Transpose + Reshape to [1, cells, k]; cls and obj end in Sigmoid.
    Input "input" [1,3,H,W] raw BGR 0..255, H and W multiples of 32 (declared symbolic, default 640x640).
    """
    g = _Graph(seed=2023)

    def relu(x: str, name: str) -> str:
        return g.node("Relu", [x], name)

    def dp_unit(x: str, cin: int, cout: int, name: str) -> str:
        # 1x1 conv (no activation) then depthwise 3x3 + ReLU; gains keep the activation scale near 1.
        y = g.conv(x, cin, cout, 1, f"{name}.conv1", gain=1.0)
        y = g.conv(y, cout, cout, 3, f"{name}.conv2", groups=cout, gain=2.0)
        return relu(y, f"{name}.relu")

    def maxpool(x: str, name: str) -> str:
        return g.node("MaxPool", [x], name, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=0)

    # Raw 0..255 pixels: scale the stem down so its output is O(1).
    y = relu(g.conv("input", 3, 16, 3, "backbone.model0.conv1", stride=2, scale=1 / 128), "backbone.model0.relu")
    y = dp_unit(y, 16, 16, "backbone.model0.conv2")
    y = maxpool(y, "backbone.pool0")
    y = dp_unit(y, 16, 16, "backbone.model1.conv1")
    y = dp_unit(y, 16, 32, "backbone.model1.conv2")
    y = dp_unit(y, 32, 32, "backbone.model2.conv1")
    y = dp_unit(y, 32, 64, "backbone.model2.conv2")
    y = maxpool(y, "backbone.pool2")
    y = dp_unit(y, 64, 64, "backbone.model3.conv1")
    c3 = dp_unit(y, 64, 64, "backbone.model3.conv2")            # stride 8
    y = maxpool(c3, "backbone.pool3")
    y = dp_unit(y, 64, 64, "backbone.model4.conv1")
    c4 = dp_unit(y, 64, 64, "backbone.model4.conv2")            # stride 16
    y = maxpool(c4, "backbone.pool4")
    y = dp_unit(y, 64, 64, "backbone.model5.conv1")
    c5 = dp_unit(y, 64, 64, "backbone.model5.conv2")            # stride 32

    # Neck: lateral DP unit, then upsample x2 and add the finer backbone map (twice).
    roi = g.const("resize_roi", np.zeros((0,), np.float32))
    scales = g.const("resize_scales", [1.0, 1.0, 2.0, 2.0])
    p5 = dp_unit(c5, 64, 64, "neck.lateral_convs.2")
    resize = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                  cubic_coeff_a=-0.75)  # the unused cubic coefficient too, as PyTorch writes it
    up = g.node("Resize", [p5, roi, scales], "neck.upsample1", **resize)
    p4 = dp_unit(g.node("Add", [c4, up], "neck.add1"), 64, 64, "neck.lateral_convs.1")
    up = g.node("Resize", [p4, roi, scales], "neck.upsample0", **resize)
    p3 = dp_unit(g.node("Add", [c3, up], "neck.add0"), 64, 64, "neck.lateral_convs.0")
    levels = [(8, p3), (16, p4), (32, p5)]

    # Heads, in the original's node order: cls, bbox, obj, kps; each level: 1x1 conv then 3x3 (grouped) conv.
    maps: dict[tuple[str, int], str] = {}
    for head, k, head_scale in (("cls", 1, 0.3), ("bbox", 4, 0.1), ("obj", 1, 0.3), ("kps", 10, 0.1)):
        for i, (stride, feat) in enumerate(levels):
            name = f"bbox_head.multi_level_{head}.{i}"
            h = g.conv(feat, 64, k, 1, f"{name}.conv1", gain=1.0, scale=head_scale)
            maps[head, stride] = g.conv(h, k, k, 3, f"{name}.conv2", groups=k, gain=1.0)

    # Flatten every map to [1, cells, k] in the original's output order.
    shapes = {k: g.const(f"reshape_{k}", [1, -1, k]) for k in (1, 4, 10)}
    outputs = []
    for head, k in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)):
        for stride, _ in levels:
            out = f"{head}_{stride}"
            t = g.node("Transpose", [maps[head, stride]], f"{out}.transpose", perm=[0, 2, 3, 1])
            if head in ("cls", "obj"):
                r = g.node("Reshape", [t, shapes[k]], f"{out}.reshape")
                g.node("Sigmoid", [r], f"{out}.sigmoid", outputs=[out])
            else:
                g.node("Reshape", [t, shapes[k]], f"{out}.reshape", outputs=[out])
            outputs.append(_tensor(out, [1, f"cells_{stride}", k]))
    return g.model([_tensor("input", [1, 3, "H", "W"])], outputs, 11, "yunet_like",
                   "facerun replica of YuNet 2023mar (yunet_s) layers, random weights")


# ---------------------------------------------------------------------------------------------------- SFace


def _scaled(c: int, width: float) -> int:
    return max(4, int(round(c * width)))


# (output channels, stride of the depthwise conv) for the 13 MobileNet-v1 blocks. MobileNet-v1 at 224 has five
# stride-2 layers; at 112 SFace keeps 7x7 at the end, so the last block stays at stride 1 (total stride 16).
_SFACE_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                 (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 1), (1024, 1)]


def sface_like(width: float = 1.0) -> onnx.ModelProto:
    """SFace-shaped embedder (MobileNet-v1 body) with random weights: "data" [N,3,112,112] RGB 0..255 -> "fc1" [N,128].

    The graph normalises its input itself ((x - 127.5) / 128), like SFace. `width` scales every channel count.
    """
    g = _Graph(seed=2021)
    x = g.node("Sub", ["data", g.const("mean", np.float32(127.5))], "normalize.sub")
    x = g.node("Mul", [x, g.const("inv_std", np.float32(1 / 128))], "normalize.mul")
    c = _scaled(32, width)
    x = g.conv(x, 3, c, 3, "stem.conv", stride=2, bias=False)
    x = g.prelu(g.bn(x, c, "stem.bn"), c, "stem.prelu")
    for i, (cout, stride) in enumerate(_SFACE_BLOCKS):
        cout = _scaled(cout, width)
        n = f"block{i + 1}"
        x = g.conv(x, c, c, 3, f"{n}.dw", stride=stride, groups=c, bias=False)
        x = g.prelu(g.bn(x, c, f"{n}.dw_bn"), c, f"{n}.dw_prelu")
        x = g.conv(x, c, cout, 1, f"{n}.pw", bias=False)
        x = g.prelu(g.bn(x, cout, f"{n}.pw_bn"), cout, f"{n}.pw_prelu")
        c = cout
    x = g.bn(x, c, "output.bn")
    x = g.node("Flatten", [x], "output.flatten", axis=1)
    features = c * 7 * 7
    x = g.node("Gemm", [x, g.const("fc.weight", g.he((128, features), features, 1.0)),
                        g.const("fc.bias", g.small((128,), 0.02))], "fc", transB=1)
    g.bn(x, 128, "fc_bn", outputs=["fc1"])  # BatchNorm1d on [N,128]
    return g.model([_tensor("data", ["N", 3, 112, 112])], [_tensor("fc1", ["N", 128])], 13, "sface_like",
                   f"facerun replica of SFace (MobileNet-v1 body, width {width:g}), random weights")


# ------------------------------------------------------------------------------------------------- AuraFace


def auraface_like(layers: tuple[int, ...] = (3, 13, 30, 3), widths: tuple[int, ...] = (64, 128, 256, 512),
                  embedding: int = 512) -> onnx.ModelProto:
    """IResNet (insightface's iresnet; 100 layers by default, as AuraFace) with random weights.

    "input.1" [N,3,112,112] (RGB, (x - 127.5) / 127.5) -> "683" [N,512]. Batch norms are separate nodes, as in the
    training graph, so the compiler's folding is exercised. The last BN of each residual branch starts small, like a
    trained network's, so 49 residual additions do not blow activations up.
    """
    g = _Graph(seed=100)
    c = widths[0]
    x = g.conv("input.1", 3, c, 3, "conv1", bias=False)
    x = g.prelu(g.bn(x, c, "bn1"), c, "prelu")
    for s, (blocks, planes) in enumerate(zip(layers, widths)):
        for b in range(blocks):
            n = f"layer{s + 1}.{b}"
            stride = 2 if b == 0 else 1
            y = g.bn(x, c, f"{n}.bn1")
            y = g.conv(y, c, planes, 3, f"{n}.conv1", bias=False)
            y = g.prelu(g.bn(y, planes, f"{n}.bn2"), planes, f"{n}.prelu")
            y = g.conv(y, planes, planes, 3, f"{n}.conv2", stride=stride, bias=False)
            y = g.bn(y, planes, f"{n}.bn3", gamma=(0.05, 0.15))
            if b == 0:
                shortcut = g.conv(x, c, planes, 1, f"{n}.downsample.0", stride=stride, bias=False, gain=1.0)
                shortcut = g.bn(shortcut, planes, f"{n}.downsample.1")
            else:
                shortcut = x
            x = g.node("Add", [y, shortcut], f"{n}.add")
            c = planes
    x = g.bn(x, c, "bn2")
    x = g.node("Flatten", [x], "flatten", axis=1)
    features = c * 7 * 7
    x = g.node("Gemm", [x, g.const("fc.weight", g.he((embedding, features), features, 1.0)),
                        g.const("fc.bias", g.small((embedding,), 0.02))], "fc", transB=1)
    g.bn(x, embedding, "features", outputs=["683"])  # BatchNorm1d; "683" is the exported AuraFace output's name
    return g.model([_tensor("input.1", ["N", 3, 112, 112])], [_tensor("683", ["N", embedding])], 13, "auraface_like",
                   f"facerun replica of AuraFace (IResNet layers {tuple(layers)}, widths {tuple(widths)}), "
                   "random weights")


# -------------------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Preprocess:
    """What an input image needs before the model: channel order and (x - mean) / std per channel."""

    color: str  # "RGB" | "BGR"
    mean: float
    std: float


@dataclass(frozen=True)
class Replica:
    """A registry entry: how to build the graph and how callers should feed it."""

    name: str
    kind: str  # "detector" | "embedder" | "test"
    input_shape: tuple[int, ...]  # the default shape to run (batch 1)
    description: str
    build: Callable[[], onnx.ModelProto] = field(repr=False)
    preprocess: Preprocess | None = None
    family: str | None = None  # the family of the network it copies (facerun.zoo.card)
    version: int = 1  # bump when the build changes in a way this file's text does not show


REPLICAS: dict[str, Replica] = {r.name: r for r in (
    Replica("every-op", "test", (1, 4, 9, 7),
            "every operator facerun supports, on odd shapes, with 4 outputs", every_operator),
    Replica("yunet-arch", "detector", (1, 3, 640, 640),
            "YuNet 2023mar layers (53 convs, stride 8/16/32 heads), random weights",
            yunet_like, Preprocess("BGR", 0.0, 1.0), "yunet-2023mar"),
    Replica("sface-arch", "embedder", (1, 3, 112, 112),
            "SFace layers (MobileNet-v1 body, 1024x7x7 -> 128), random weights",
            sface_like, Preprocess("RGB", 0.0, 1.0), "arcface-style"),
    Replica("auraface-arch", "embedder", (1, 3, 112, 112),
            "AuraFace layers (IResNet-100, 65 M parameters, 12.1 GMAC -> 512), random weights",
            auraface_like, Preprocess("RGB", 127.5, 127.5), "arcface-style"),
    Replica("sface-arch-small", "embedder", (1, 3, 112, 112),
            "SFace layers at quarter width (256x7x7 -> 128), random weights",
            lambda: sface_like(width=0.25), Preprocess("RGB", 0.0, 1.0), "arcface-style"),
    Replica("auraface-arch-small", "embedder", (1, 3, 112, 112),
            "AuraFace layers cut to one block per stage at widths 16..128 (-> 512), random weights",
            lambda: auraface_like(layers=(1, 1, 1, 1), widths=(16, 32, 64, 128)), Preprocess("RGB", 127.5, 127.5),
            "arcface-style"),
)}


_ANY_BUILD = re.compile(r"(.+)-([0-9a-f]{12})\.onnx")  # a cached build: name-digest.onnx


def is_replica(name: str) -> bool:
    return name in REPLICAS


def get_replica(name: str) -> Replica:
    try:
        return REPLICAS[name]
    except KeyError:
        raise ModelError(f"unknown replica '{name}' (known: {', '.join(REPLICAS)})") from None


def cache_dir() -> Path:
    """Where replicas are written: the `replicas` folder of facerun's cache (facerun.settings.cache_root)."""
    return cache_root() / "replicas"


def content_version(name: str) -> str:
    """A short digest naming one build of a replica: it changes with this file's text or the replica's version."""
    replica = get_replica(name)
    h = hashlib.sha256(f"{FORMAT_VERSION}:{name}:{replica.version}:".encode())
    h.update(_source_text())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def _source_text() -> bytes:
    try:
        return Path(__file__).read_bytes()
    except OSError:  # source not readable (e.g. a frozen install): the explicit versions still name the build
        return b""


def replica_path(name: str) -> Path:
    """The replica's ONNX file, built and written on first use (atomically: temp file, then rename)."""
    replica = get_replica(name)
    folder = cache_dir()
    path = folder / f"{name}-{content_version(name)}.onnx"
    if path.is_file():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot write replica '{name}' to {folder}: {e.strerror or e}") from None
    model = replica.build()
    atomic_write(path, lambda f: f.write(model.SerializeToString()), error=ModelError)
    # Older builds of the same replica are dead weight (auraface-arch is 260 MB): remove them.
    for old in folder.iterdir():
        build = _ANY_BUILD.fullmatch(old.name)
        if old != path and build and build.group(1) == name:
            old.unlink(missing_ok=True)
    return path


def cache_usage() -> dict:
    """The replica cache: its folder, the replica files in it and their total size (auraface-arch alone is 260 MB)."""
    folder = cache_dir()
    files = sorted(p for p in folder.glob("*.onnx") if _ANY_BUILD.fullmatch(p.name)) if folder.is_dir() else []
    return {"path": str(folder), "files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def clear_cache() -> int:
    """Remove every replica build from the cache (each is rebuilt on its next use); returns how many were removed."""
    folder = cache_dir()
    removed = 0
    for path in folder.glob("*.onnx") if folder.is_dir() else []:
        if _ANY_BUILD.fullmatch(path.name):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


# who is told that a replica, random weights and all, is being used (the command line says so on stderr)
_listener: Callable[[Replica], None] | None = None


def on_use(listener: Callable[[Replica], None] | None) -> None:
    """Call `listener(replica)` whenever a replica's card is made (None: stop)."""
    global _listener
    _listener = listener


def announce(replica: Replica) -> None:
    if _listener is not None:
        _listener(replica)


def replica_of_file(path) -> Replica | None:
    """The replica a file is the current build of (by its name, which carries the build's digest), or None."""
    found = _ANY_BUILD.fullmatch(Path(path).name)
    name = found.group(1) if found else None
    if name in REPLICAS and found.group(2) == content_version(name):
        return REPLICAS[name]
    return None
