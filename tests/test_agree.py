"""facerun.agree: the tolerances at their edges, the comparison's special cases, the seeded inputs."""

from __future__ import annotations

import numpy as np
import pytest

from facerun import agree
from facerun.agree import BATCH_ITEMS, EMBEDDING, GPU, GPU_CHECK, ONNXRUNTIME, Tolerance, compare, disagreement

STEP = 2.0**-10  # exactly representable, so "at the limit" is exact


def test_a_value_tolerance_passes_at_its_limit_and_fails_just_beyond():
    want = np.array([0.0, 1.0, 0.5])  # range 1
    rule = Tolerance(STEP)
    assert compare("y", want + [0, STEP, 0], want, rule).ok
    beyond = compare("y", want + [0, STEP + 2.0**-30, 0], want, rule)
    assert not beyond.ok and beyond.why().startswith("off by")


def test_a_barely_varying_output_is_judged_as_if_it_spanned_min_range():
    want = np.full(8, 0.9999)
    want[0] = 0.99989  # a saturated sigmoid: range 1e-5
    limit = agree.TOLERANCE * agree.MIN_RANGE  # 1e-6, not 1e-4 * 1e-5
    assert compare("s", want + 0.5 * limit, want, ONNXRUNTIME).ok
    assert not compare("s", want + 2 * limit, want, ONNXRUNTIME).ok
    assert agree.tolerance_for(1e-5) == pytest.approx(limit)


def test_the_gpu_check_floors_the_scale_at_one_where_parity_does_not():
    want = np.linspace(0.0, 0.5, 11)  # range 0.5
    got = want + 8e-4
    assert compare("y", got, want, GPU_CHECK).ok  # 1e-3 * max(0.5, 1)
    assert not compare("y", got, want, GPU).ok  # 1e-3 * max(0.5, 0.01)
    assert compare("y", got, want, 1e-3).why() == compare("y", got, want, GPU).why()  # a bare number is GPU's rule


def test_a_batch_of_vectors_is_judged_row_by_row_at_the_gpu_check():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((4, 32))
    want[2] *= 1e-5  # a faint embedding: flipping it costs nothing in max abs
    got = want.copy()
    got[2] = -got[2]
    d = compare("emb", got, want, GPU_CHECK)
    assert d.max_abs < 1e-3 and d.cosine > 0.9999 and d.row_cosine == pytest.approx(-1.0)
    assert disagreement({"emb": want}, {"emb": got}) == f"output 'emb': cosine {d.row_cosine:.6f} < 0.9999"
    assert compare("emb", got[:, :8], want[:, :8], GPU_CHECK).row_cosine is None  # 8 columns: not vectors


def test_embeddings_are_judged_by_direction_only():
    want = np.random.default_rng(1).standard_normal((1, 128))
    scaled = compare("emb", 3.0 * want, want, EMBEDDING)
    assert scaled.ok and not compare("emb", 3.0 * want, want, ONNXRUNTIME).ok
    turned = want + 0.05 * np.random.default_rng(2).standard_normal((1, 128))  # 5% off in direction
    d = compare("emb", turned, want, EMBEDDING)
    assert not d.ok and d.cosine < agree.MIN_COSINE and d.why().startswith("cosine")


def test_batch_items_are_judged_against_the_largest_magnitude():
    want = 1000.0 + np.linspace(0.0, 1.0, 5)  # range 1, magnitude 1001
    got = want + 0.05
    assert compare("y", got, want, BATCH_ITEMS).ok  # 1e-4 * 1001
    assert not compare("y", got, want, ONNXRUNTIME).ok  # 1e-4 * 1


def test_shapes_and_non_finite_values():
    want = np.array([[1.0, np.inf, np.nan, 2.0]])
    assert compare("y", want.copy(), want).ok  # non-finite values at the same places agree
    moved = np.array([[np.inf, 1.0, np.nan, 2.0]])
    assert "2 NaN or infinite values where the reference has another value" in compare("y", moved, want).why()
    # at the same places but not the same: a NaN for an infinity, an infinity of the other sign
    assert "1 NaN or infinite value where" in compare("y", np.array([[1.0, np.nan, np.nan, 2.0]]), want).why()
    assert not compare("y", np.array([[1.0, -np.inf, np.nan, 2.0]]), want).ok
    assert not compare("y", np.array([[1.0, np.inf, 0.0, 2.0]]), want).ok  # NaN on one side only
    wrong = compare("y", np.zeros((4, 1)), want)
    assert not wrong.ok and wrong.why() == "shape [4, 1] instead of [1, 4]"
    assert disagreement({"y": want}, {}) == "output 'y': shape None instead of [1, 4]"
    assert disagreement({"y": want}, {"y": want.copy()}) is None


def test_seeded_inputs_are_reproducible_and_in_range():
    a = agree.seeded_input((2, 3, 4, 4), seed=5, value_range=(0.0, 255.0))
    assert a.dtype == np.float32 and a.min() >= 0.0 and a.max() <= 255.0 and a.std() > 50
    assert np.array_equal(a, agree.seeded_input((2, 3, 4, 4), seed=5, value_range=(0.0, 255.0)))
    assert not np.array_equal(a, agree.seeded_input((2, 3, 4, 4), seed=6, value_range=(0.0, 255.0)))
    both = agree.seeded_inputs({"x": (3,), "y": (3,)}, seed=1)
    assert not np.array_equal(both["x"], both["y"])  # drawn in turn from one generator
    assert np.array_equal(both["x"], agree.seeded_input((3,), seed=1))


def test_the_gpu_check_input_is_the_agree_input():
    from facerun.gpu.checked import test_inputs as check_inputs
    from facerun.net import load

    prog = load("every-op").program((1, 4, 9, 7))
    got = check_inputs(prog)
    want = agree.seeded_inputs({name: prog.values[vid].shape for name, vid in prog.inputs}, agree.TEST_SEED)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in got)


def test_no_tolerance_is_finer_than_float32_itself():
    # found by the fuzz test: ReduceSumSquare to one value, 193.60072 (float64 sums) against 193.60071 (float32)
    want = np.array([[[[193.60071]]]], np.float32)
    got = np.nextafter(want, np.float32(1e9))  # one float32 step up
    assert compare("y", got, want).ok
    assert not compare("y", want + np.float32(0.1), want).ok  # a real departure still is one


def test_one_value_is_judged_against_its_size():
    # found by the fuzz test on the GPU: a ReduceSum of 660 values to one, 8.099813 against the CPU's 8.099824
    want, got = np.array(8.099824, np.float32), np.array(8.099813, np.float32)
    assert compare("y", got, want, GPU).ok and not compare("y", np.array(8.11, np.float32), want, GPU).ok
    assert not compare("y", np.array([8.099813, 0.0]), np.array([8.099824, 0.0]), Tolerance(1e-7)).ok
