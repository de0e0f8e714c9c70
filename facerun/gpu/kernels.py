"""The WGSL kernels: sources (facerun/shaders/*.wgsl, read with importlib.resources), their specialisation, and the
packing of each kernel's parameters into its uniform struct.

Every kernel shares one bind-group layout: binding 0 a uniform `Params`, 1-4 and 6 read-only storage buffers, 5 the
read-write output. The `Params` struct of each source is parsed here, so the host packs parameters by field name and
a field missing on either side is an error at once rather than a silently shifted value.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .plan import ConvPlan, GemmPlan, Tile

UNIFORM_BINDING = 0  # the dispatch's Params
READ_BINDINGS = (1, 2, 3, 4, 6)  # the read-only storage bindings, in the order a dispatch lists its reads
OUT_BINDING = 5  # the read-write output
UNIFORM_SLOT = 256  # bytes per dispatch's parameters (and the uniform offset alignment every device accepts)


@cache
def source_text(name: str) -> str:
    return resources.files("facerun.shaders").joinpath(name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ the kernels


@dataclass(frozen=True)
class Kernel:
    """One compute pipeline: a source file, its specialisation and the entry point."""

    file: str
    entry: str = "main"
    subst: tuple[tuple[str, str], ...] = ()
    epilogue: bool = False  # needs epilogue.wgsl (convolution-like kernels)

    @property
    def key(self) -> str:
        spec = ",".join(f"{k}={v}" for k, v in self.subst)
        return f"{self.file}:{self.entry}" + (f"[{spec}]" if spec else "")

    def code(self) -> str:
        body = specialise(source_text(self.file), dict(self.subst))
        parts = [source_text("common.wgsl")]
        if self.epilogue:
            parts.append(source_text("epilogue.wgsl"))
        parts.append(body)
        return "\n".join(parts)

    def params(self) -> ParamLayout:
        return _layout_of(self)


@cache
def _layout_of(kernel: Kernel) -> ParamLayout:
    return param_layout(kernel.code())


_EXPR = re.compile(r"\$\{([^}]*)\}")
_DIRECTIVE = re.compile(r"^\s*#(unroll|if|end)\b(.*)$")


def specialise(text: str, consts: dict) -> str:
    """Fill a kernel template: `${expr}` is a Python expression over `consts` (and loop variables); a block between
    `#unroll NAME START STOP` and `#end` is repeated for NAME in range(START, STOP), and one between `#if EXPR` and
    `#end` kept only when EXPR holds. Unrolling by hand keeps register blocks in registers: GPU compilers do not
    reliably promote loop-indexed arrays out of memory."""
    lines = text.splitlines()

    def expand(start: int, env: dict) -> tuple[list[str], int]:
        out: list[str] = []
        i = start
        while i < len(lines):
            m = _DIRECTIVE.match(lines[i])
            if m is None:
                out.append(_EXPR.sub(lambda e: str(eval(e.group(1), {}, env)), lines[i]))
                i += 1
                continue
            kind, arg = m.group(1), m.group(2).split()
            if kind == "end":
                return out, i + 1
            if kind == "if":
                body, nxt = expand(i + 1, env)
                if eval(" ".join(arg), {}, env):
                    out += body
                i = nxt
                continue
            name, lo, hi = arg[0], eval(arg[1], {}, env), eval(" ".join(arg[2:]), {}, env)
            nxt = i + 1
            for v in range(lo, hi):
                body, nxt = expand(i + 1, {**env, name: v})
                out += body
            if lo >= hi:  # still find the block's end
                _, nxt = expand(i + 1, {**env, name: 0})
            i = nxt
        if start:
            raise ValueError("a kernel template block has no #end")
        return out, i

    return "\n".join(expand(0, dict(consts))[0])


def tiled_conv(tile: Tile, pointwise: bool, partial: bool) -> Kernel:
    tx, ty = tile.bn // tile.tn, tile.bm // tile.tm
    wg = tx * ty
    a_vec = tile.bk * tile.bm // 4
    subst = dict(BM=tile.bm, BN=tile.bn, BK=tile.bk, TM=tile.tm, TN=tile.tn, MV=tile.tm // 4, NV=tile.tn // 4, TX=tx,
                 TY=ty, WG=wg, A_VEC=a_vec, A_LOADS=-(-a_vec // wg), B_ROWS=wg // tile.bn,
                 B_LOADS=tile.bk // (wg // tile.bn), KU=tile.ku, POINTWISE=pointwise, PARTIAL=partial)
    return Kernel("conv_tiled.wgsl", "main", tuple(subst.items()), epilogue=True)


DIRECT_CONV = Kernel("conv_direct.wgsl", "direct", epilogue=True)
DEPTHWISE_CONV = Kernel("conv_direct.wgsl", "depthwise", epilogue=True)
SPLIT_REDUCE = Kernel("conv_direct.wgsl", "reduce", epilogue=True)


def gemv(rows: int, vec4: bool) -> Kernel:
    subst = dict(ROWS=int(rows), ELEM="vec4<f32>" if vec4 else "f32", DOT="dot(a, b)" if vec4 else "a * b")
    return Kernel("gemv.wgsl", "main", tuple(subst.items()), epilogue=True)


def conv_kernel(plan: ConvPlan) -> Kernel:
    """The pipeline of a convolution plan's main pass (the plan has made every choice; this only names it)."""
    if plan.kernel == "depthwise":
        return DEPTHWISE_CONV
    if plan.kernel == "direct":
        return DIRECT_CONV
    return tiled_conv(plan.tile, plan.pointwise, plan.partial)


def gemm_kernel(plan: GemmPlan) -> Kernel:
    """The pipeline of a fully connected layer's plan."""
    if plan.kernel == "gemv":
        return gemv(plan.rows_per_group, plan.vec4)
    return conv_kernel(plan.conv)


UNARY = Kernel("unary.wgsl")
BINARY = Kernel("binary.wgsl")
COPY = Kernel("copy.wgsl")
POOL = Kernel("pool.wgsl")
GLOBAL_AVG = Kernel("gavg.wgsl")
RESIZE = Kernel("resize.wgsl")
SOFTMAX = Kernel("softmax.wgsl")
MATMUL = Kernel("matmul.wgsl")

ACT_CODES = {None: 0, "relu": 1, "sigmoid": 2, "clip": 3, "leaky": 4, "prelu": 5}
BINARY_CODES = {"add": 0, "sub": 1, "mul": 2, "div": 3, "prelu": 4}


# ------------------------------------------------------------------------------------------ parameter packing

_SCALARS = {"u32": "I", "f32": "f", "i32": "i"}
_FIELD = re.compile(r"^(\w+)\s*:\s*(.+?)\s*,?$")


@dataclass(frozen=True)
class Field:
    name: str
    fmt: str  # struct format of one scalar
    count: int  # scalars (1, or 4 per vec4)
    offset: int  # bytes


@dataclass(frozen=True)
class ParamLayout:
    fields: tuple[Field, ...]
    size: int

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def pack(self, **values) -> bytes:
        """The uniform bytes for `values` (every field by name; vec4 arrays as flat lists)."""
        missing = [f.name for f in self.fields if f.name not in values]
        extra = sorted(set(values) - set(self.names))
        if missing or extra:
            raise KeyError(f"kernel parameters: missing {missing}, unknown {extra}")
        buf = bytearray(self.size)
        for f in self.fields:
            v = values[f.name]
            items = list(v) if f.count > 1 else [v]
            if len(items) != f.count:
                raise ValueError(f"parameter {f.name} takes {f.count} values, got {len(items)}")
            if f.fmt == "I" and any(not 0 <= int(i) < (1 << 32) for i in items):
                raise OverflowError(f"parameter {f.name}={items} does not fit a u32")
            conv = float if f.fmt == "f" else int
            struct.pack_into(f"<{f.count}{f.fmt}", buf, f.offset, *(conv(i) for i in items))
        return bytes(buf)


def param_layout(code: str) -> ParamLayout:
    """Parse `struct Params { ... }` of a WGSL module into byte offsets (WGSL's uniform layout rules for the types
    the kernels use: 4-byte scalars, vec4<u32>, array<vec4<u32>, N>)."""
    m = re.search(r"struct\s+Params\s*\{(.*?)\n\}", code, re.S)
    if m is None:
        raise ValueError("kernel source has no Params struct")
    fields, offset, align = [], 0, 4
    for line in m.group(1).splitlines():
        line = line.split("//")[0].strip()
        if not line:
            continue
        fm = _FIELD.match(line)
        if fm is None:
            raise ValueError(f"cannot parse Params field: {line}")
        name, ty = fm.group(1), fm.group(2).replace(" ", "")
        if ty in _SCALARS:
            fmt, count, size, a = _SCALARS[ty], 1, 4, 4
        else:
            vm = re.fullmatch(r"vec4<(u32|f32|i32)>", ty)
            am = re.fullmatch(r"array<vec4<(u32|f32|i32)>,(\d+)>", ty)
            if vm:
                fmt, count, size, a = _SCALARS[vm.group(1)], 4, 16, 16
            elif am:
                n = int(am.group(2))
                fmt, count, size, a = _SCALARS[am.group(1)], 4 * n, 16 * n, 16
            else:
                raise ValueError(f"unsupported Params field type {ty}")
        offset = -(-offset // a) * a
        fields.append(Field(name, fmt, count, offset))
        offset += size
        align = max(align, a)
    size = -(-offset // 16) * 16  # uniform structs are padded to 16
    if size > UNIFORM_SLOT:
        raise ValueError(f"Params of {size} bytes exceed the {UNIFORM_SLOT}-byte slot")
    return ParamLayout(tuple(fields), size)


def act_params(act, channels: int, slope_at: int) -> dict:
    """The activation fields of a kernel's Params (the slope array itself goes into its coefficient buffer)."""
    kind = None if act is None else act.kind
    if kind not in ACT_CODES:
        raise ValueError(f"unknown activation {kind}")
    return dict(
        act=ACT_CODES[kind],
        lo=float(act.lo) if act is not None else 0.0,
        hi=float(act.hi) if act is not None else 0.0,
        alpha=float(act.alpha) if act is not None else 0.0,
        slope_at=slope_at if kind == "prelu" else 0,
    )
