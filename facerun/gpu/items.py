"""A batch program run on fewer items than it was made for: only the workgroups of the items that are there.

A library run's batch of photos runs in its bucket's program of N items (FACERUN_PHOTO_ITEMS) however many photos
the batch holds; the items past them are padding whose outputs are never read back. Where a program keeps every
item's values apart (each step's item n depends only on item n of what it reads) and a dispatch's workgroups take
the items in order (item n's work in workgroups before item n + 1's), a batch of n photos dispatches only the first
workgroups, enough for n items: the same shaders, the same parameters, so the real items' outputs are the same bits.

`item_count(prog)` says whether a program is such (its N, or 0); the lowering marks each dispatch whose workgroups
take the items in order with `per_item` = (inner, units): its linear workgroup index is unit * inner + j, and the
units run over the N items in order (a per-value kernel: units = its workgroups, inner = 1; the tiled convolution:
units = its column tiles over batch x positions, inner = its output-channel tiles). `groups_for` gives the grid.
"""

from __future__ import annotations

from math import prod

from .. import program as P

# the steps whose item n reads only item n of their inputs (given every value is items first)
_APART = (P.Conv, P.Pool, P.Resize, P.LinearResize, P.Unary, P.Affine, P.Binary, P.Gemm, P.GlobalAvgPool)


def item_count(prog: P.Program) -> int:
    """N where `prog` is a batch program of N > 1 items whose steps keep the items apart: one input, every value
    it makes N items first, every step one that reads only its own item (a copy or padding that maps item n to item
    n); else 0."""
    if len(prog.inputs) != 1:
        return 0
    shape = prog.values[prog.inputs[0][1]].shape
    n = shape[0] if len(shape) else 0
    if n <= 1:
        return 0
    for st in prog.steps:
        out = prog.values[st.out]
        if len(out.shape) == 0 or out.shape[0] != n:
            return 0
        for vid in st.reads:
            v = prog.values[vid]
            if v.kind != "const" and (len(v.shape) == 0 or v.shape[0] != n):
                return 0
        if isinstance(st, _APART):
            continue
        if isinstance(st, P.Copy) and _copy_keeps_items(prog, st):
            continue
        if isinstance(st, P.Pad) and not st.before[0] and not st.after[0] and (not st.interior or not st.interior[0]):
            continue
        return 0
    return n


def _copy_keeps_items(prog: P.Program, st: P.Copy) -> bool:
    """Whether out[n, ...] gathers only from x[n, ...]: the first stride is one item of x and the rest stay inside
    it."""
    x, out = prog.values[st.x], prog.values[st.out]
    item = prod(x.shape[1:])
    if not st.strides or st.strides[0] != item:
        return False
    spans = [(size - 1) * stride for size, stride in zip(out.shape[1:], st.strides[1:])]
    low = st.offset + sum(s for s in spans if s < 0)
    high = st.offset + sum(s for s in spans if s > 0)
    return low >= 0 and high < item


def workgroups_for(per_item: tuple[int, int], items: int, count: int) -> int:
    """The workgroups of a dispatch marked (inner, units) for its first `count` of `items` items: whole units
    enough for them (units * count / items, rounded up, covers the items' work whatever unit it ends in)."""
    inner, units = per_item
    return inner * -(-units * count // items)


def groups_for(groups: tuple[int, int], per_item: tuple[int, int] | None, items: int, count: int
               ) -> tuple[int, int]:
    """A dispatch's (x, y) grid for its first `count` of `items` items: `groups` (the whole batch's grid, x the row
    its kernel reads its linear index by when y > 1) where the dispatch is not marked or the batch is whole."""
    if per_item is None or count >= items:
        return groups
    need = workgroups_for(per_item, items, count)
    gx, gy = groups
    if need >= gx * gy:
        return groups
    return (need, 1) if need <= gx else (gx, -(-need // gx))
