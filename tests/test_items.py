"""A batch program run on fewer items than it was made for (facerun/gpu/items.py): which programs keep their items
apart, which dispatches take the items in order, and the grid a batch of fewer items needs. No GPU: plans only (the
same outputs on lavapipe are in tests/test_bucket_batches.py)."""

from __future__ import annotations

import numpy as np
import pytest

import facerun
from facerun import program as P
from facerun.gpu import kernels as K
from facerun.gpu.items import groups_for, item_count, workgroups_for
from facerun.gpu.lower import lower
from facerun.gpu.plan import Limits


class _Consts:  # the lowering's constant store, without a device
    def __call__(self, role, data):
        return ("const", role)


def _yunet_batch(items: int, h: int = 128, w: int = 160) -> P.Program:
    net = facerun.load("yunet-2023mar", device="cpu")
    prog = net.batch_program((items, 3, h, w))
    assert prog is not None
    return prog


def test_a_detectors_batch_program_keeps_its_items_apart_and_marks_its_dispatches():
    prog = _yunet_batch(4)
    assert item_count(prog) == 4
    low = lower(prog, Limits(), _Consts())
    assert low.items == 4
    marked = [d for d in low.dispatches if d.per_item is not None]
    # every YuNet dispatch takes the items in order: convolutions (tiled, depthwise, fused pairs, the 1x1s its pools
    # are folded into), resizes, and the heads' transposes and sigmoids
    assert len(marked) == len(low.dispatches)
    stems = {d.kernel.stem for d in marked}
    assert {"conv_tiled", "conv_direct", "separable", "resize"} <= stems and "pool" not in stems, stems
    assert any("POOLED" in d.kernel.key for d in marked)
    for d in marked:
        inner, units = d.per_item
        assert inner * units >= 1 and workgroups_for(d.per_item, 4, 4) <= d.groups[0] * d.groups[1] + inner
    # one photo's program, or a program at batch 1: nothing to cut
    assert item_count(facerun.load("yunet-2023mar", device="cpu").program((1, 3, 128, 160))) == 0
    assert lower(facerun.load("yunet-2023mar", device="cpu").program((1, 3, 128, 160)), Limits(),
                 _Consts()).items == 0


def test_a_separable_pass_needs_exactly_its_items_tiles():
    prog = _yunet_batch(8)
    low = lower(prog, Limits(), _Consts())
    fused = [d for d in low.dispatches if d.kernel.stem == "separable"]
    assert fused
    for d in fused:
        inner, units = d.per_item
        assert units == 8 and inner * 8 == d.plan.workgroups
        for count in range(1, 8):
            assert workgroups_for(d.per_item, 8, count) == inner * count


def _copy_program(strides, offset=0, shape=(4, 2, 3)) -> P.Program:
    """x (4, 2, 3) -> a Copy with the given strides into a value of `shape`."""
    values = [P.Value(0, "x", (4, 2, 3), "input", 0), P.Value(1, "y", shape, "temp", 1)]
    steps = [P.Copy(out=1, node="c", x=0, offset=offset, strides=strides)]
    return P.Program(values=values, steps=steps, inputs=[("x", 0)], outputs=[("y", 1)])


def test_steps_that_mix_items_turn_it_off():
    """A transpose that keeps the items (strides 6, 1, 3) keeps it on; one that moves them, a gather reaching into
    the next item, or every item reading the first, turns it off."""
    assert item_count(_copy_program((6, 1, 3), shape=(4, 3, 2))) == 4
    assert item_count(_copy_program((1, 12, 4), shape=(4, 2, 3))) == 0  # the items spread over the rows
    assert item_count(_copy_program((6, 1, 3), offset=1, shape=(4, 3, 2))) == 0  # past its item's end
    assert item_count(_copy_program((6, 3, 1), shape=(4, 2, 3))) == 4  # a plain copy
    assert item_count(_copy_program((0, 3, 1), shape=(4, 2, 3))) == 0  # every item reads item 0


@pytest.mark.parametrize("groups, per_item, count, want", [
    ((40, 1), (1, 40), 2, (10, 1)),  # a per-value kernel, 2 of 8 items: a quarter of its workgroups
    ((40, 1), (1, 40), 8, (40, 1)),  # the whole batch
    ((40, 1), None, 2, (40, 1)),  # not marked: the whole grid
    ((65535, 3), (1, 65535 * 3), 5, (65535, 2)),  # a folded grid keeps its row and drops the rows not needed
    ((30, 1), (3, 10), 1, (6, 1)),  # tiled: 3 channel tiles x 2 of 10 column tiles (1.25 of them, rounded up)
])
def test_the_grid_of_fewer_items(groups, per_item, count, want):
    assert groups_for(groups, per_item, 8, count) == want


def test_the_grid_covers_every_item_there():
    """For per-value kernels and tiled columns alike, the first `count` items' work falls in the workgroups kept."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        items = int(rng.integers(2, 17))
        per_item_values = int(rng.integers(1, 5000))
        per_group = int(rng.choice([64, 128, 256]))
        inner = int(rng.integers(1, 5))
        units = -(-items * per_item_values // per_group)
        for count in range(1, items):
            kept = workgroups_for((inner, units), items, count)
            need = inner * -(-count * per_item_values // per_group)  # the last value of item count - 1, its unit
            assert need <= kept <= inner * units


def test_kernels_by_output_value_are_the_flat_ones():
    """The flat kernels marked by the lowering are those whose thread i writes output value i."""
    from facerun.gpu.lower import _BY_OUTPUT_VALUE

    assert K.REDUCE not in _BY_OUTPUT_VALUE and K.SOFTMAX not in _BY_OUTPUT_VALUE and K.MATMUL not in _BY_OUTPUT_VALUE
