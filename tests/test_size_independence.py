"""What a new input size costs a loaded model: its programs share the model's weight arrays (ParameterPool), its GPU
lowering finds the packed weights by their identity, and the detector's one GPU check covers the kernel variants of
the sizes to come (whole network small, the other variants layer by layer)."""

from __future__ import annotations

import numpy as np
from people_fixtures import MOBILEFACENET, YUNET, need_real_data

from facerun import counters
from facerun import program as P
from facerun.program import Activation, ParameterPool


def _params(prog):
    return [(st.node, name, getattr(st, name)) for st in prog.steps for name in ("weight", "bias")
            if isinstance(getattr(st, name, None), np.ndarray)]


def test_programs_of_two_sizes_hold_one_copy_of_the_weights():
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET))
    a, b = net.program((1, 3, 96, 128)), net.program((1, 3, 160, 224))
    pa, pb = _params(a), _params(b)
    assert len(pa) == len(pb) > 50
    assert all(x[2] is y[2] for x, y in zip(pa, pb))  # the very same arrays, not equal copies
    convs = [st for st in b.steps if isinstance(st, P.Conv)]
    assert all(st.act is None or st.act is twin.act for st, twin in zip(convs, [s for s in a.steps
                                                                               if isinstance(s, P.Conv)]))
    # sharing changes nothing a run computes
    x = np.random.default_rng(0).uniform(0, 255, (1, 3, 160, 224)).astype(np.float32)
    fresh = facerun.load(str(YUNET)).run(x, device="cpu")
    for name, got in net.run(x, device="cpu").items():
        np.testing.assert_array_equal(got, fresh[name])


def test_the_pool_shares_only_equal_arrays():
    pool = ParameterPool()

    def one_conv(weight, slope):
        values = [P.Value(0, "x", (1, 2, 4, 4), "input", 0), P.Value(1, "y", (1, 2, 4, 4), "temp", 1)]
        step = P.Conv(1, "conv", 0, weight, None, 1, (1, 1), (1, 1), (0, 0, 0, 0), Activation("prelu", slope=slope))
        return P.Program(values, [step], [("x", 0)], [("y", 1)])

    w = np.ones((2, 2, 1, 1), np.float32)
    first = one_conv(w, np.array([0.1, 0.2], np.float32))
    pool.share(first)
    same = one_conv(w.copy(), np.array([0.1, 0.2], np.float32))
    pool.share(same)
    assert same.steps[0].weight is w and same.steps[0].act is first.steps[0].act
    other = one_conv(w * 2, np.array([0.1, 0.3], np.float32))
    pool.share(other)
    assert other.steps[0].weight is not w and float(other.steps[0].weight[0, 0, 0, 0]) == 2.0
    assert other.steps[0].act is not first.steps[0].act and float(other.steps[0].act.slope[1]) == np.float32(0.3)


def test_a_new_size_packs_and_uploads_no_weights(gpu):
    import facerun

    need_real_data()
    net = facerun.load(str(YUNET), device="gpu")
    net.run(np.zeros((1, 3, 96, 128), np.float32))
    store = net.gpu.model.weights
    resident, buffers = store.resident_bytes, len(store._buffers)
    made = []
    real_get = store.get
    store.get = lambda dev, role, data: made.append(role) or real_get(dev, role, data)
    try:
        x = np.random.default_rng(2).uniform(0, 255, (1, 3, 128, 96)).astype(np.float32)
        got, want = net.run(x), net.run(x, device="cpu")
    finally:
        store.get = real_get
    for name in want:
        assert np.abs(got[name] - want[name]).max() <= 1e-3 * max(1.0, float(np.ptp(want[name])))
    # every weight, epilogue and tap table of the new size's program was found by identity: nothing packed or
    # hashed (a layer whose plan changed with the size would pack its weights anew: not so between these sizes);
    # only the upsampling's maps, which follow the size, are new
    assert made and set(made) <= {"resize maps", "resize weights"}
    assert len(store._buffers) - buffers <= len(made) and store.resident_bytes - resident < 4096


def test_the_detectors_one_check_covers_the_sizes_to_come(gpu):
    from facerun.face.detect import CHECK_SIDE, Detector

    need_real_data()
    detector = Detector(str(YUNET), device="gpu")
    checked = detector.net.gpu
    ran_on_cpu, real = [], checked.cpu_run
    checked.cpu_run = lambda prog, feeds: ran_on_cpu.append((prog.input_shape, len(prog.steps))) or real(prog, feeds)
    rgb = np.random.default_rng(5).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    model = checked.model
    before = counters.snapshot()
    detector.detect(rgb)
    first = counters.since(before)
    # the first photo waits only for its own variants: the sizes to come are checked before the second run
    left = set().union(*({d.kernel.key for d in model.planned(detector.net.program(shape))}
                         for shape in detector.net.workload.expected_shapes)) - checked.verified
    assert left and first["gpu_checks"] == 1
    detector.detect(rgb[:200, :300])
    paid = counters.since(before)
    assert paid["gpu_checks"] == 1 and "gpu_variant_checks" not in paid
    # the whole network small, the same program masked to a smaller photo against that photo's own program (photos
    # run masked in programs of a larger bucket), then single layers of the small program (the variants the sizes
    # to come need; a 1x1 with the 2x2 max pool folded into its reads: the pool and the layer)
    assert ran_on_cpu[0][0] == (1, 3, CHECK_SIDE, CHECK_SIDE) and ran_on_cpu[0][1] > 50
    assert ran_on_cpu[1] == ((1, 3, CHECK_SIDE - 32, CHECK_SIDE - 64), ran_on_cpu[0][1]) and checked.masks_agree
    assert {steps for _, steps in ran_on_cpu[2:]} == {1, 2} and paid.get("gpu_layer_checks", 0) == len(ran_on_cpu) - 2
    assert paid["gpu_layer_checks"] > first.get("gpu_layer_checks", 0)
    for shape in detector.net.workload.expected_shapes:  # up to max_side: nothing left to check when such a photo comes
        planned = {d.kernel.key for d in model.planned(detector.net.program(shape))}
        assert planned <= checked.verified
    assert {d.kernel.key for d in model.planned(detector.net.program((1, 3, 736, 1280)))} <= checked.verified


def test_the_embedders_check_covers_its_batches(gpu):
    from facerun.face.embed import Embedder

    need_real_data()
    embedder = Embedder(str(MOBILEFACENET), device="gpu")
    crops = np.random.default_rng(6).integers(0, 256, (3, 112, 112, 3), dtype=np.uint8)
    before = counters.snapshot()
    embedder.embed(crops)  # a batch of 3, run as 4
    assert counters.since(before)["gpu_checks"] == 1
    before = counters.snapshot()
    embedder.embed(np.concatenate([crops] * 6))  # 18 faces: a batch of 16 and one of 2, checked ahead
    assert "gpu_variant_checks" not in counters.since(before) and "gpu_checks" not in counters.since(before)


def test_folded_batch_norms_are_folded_once_per_model():
    import facerun

    net = facerun.load("sface-arch-small")  # a replica whose convolutions carry batch norms
    a, b = net.program((1, 3, 112, 112)), net.program((4, 3, 112, 112))
    folded = [n for n in a.folded if n.startswith("BatchNormalization")]
    assert folded, "the replica folds batch norms"
    ca = [st for st in a.steps if isinstance(st, (P.Conv, P.Gemm))]
    cb = [st for st in b.steps if isinstance(st, (P.Conv, P.Gemm))]
    assert all(x.weight is y.weight and x.bias is y.bias for x, y in zip(ca, cb))


def test_the_fold_memo_folds_again_when_a_source_differs():
    from facerun.onnx import passes

    def conv_then_bn(weight, scale):
        values = [P.Value(0, "x", (1, 2, 4, 4), "input", 0), P.Value(1, "c", (1, 2, 4, 4), "temp", 1),
                  P.Value(2, "y", (1, 2, 4, 4), "temp", 2)]
        conv = P.Conv(1, "conv", 0, weight, None, 1, (1, 1), (1, 1), (0, 0, 0, 0))
        bn = P.Affine(2, "bn", 1, scale, np.zeros(2, np.float32))
        return P.Program(values, [conv, bn], [("x", 0)], [("y", 2)])

    memo = {}
    w = np.ones((2, 2, 1, 1), np.float32)
    first = conv_then_bn(w, np.array([2.0, 3.0], np.float32))
    passes.fold_batchnorm(first, memo)
    again = conv_then_bn(w, np.array([2.0, 3.0], np.float32))
    passes.fold_batchnorm(again, memo)
    assert again.steps[0].weight is first.steps[0].weight and len(again.steps) == 1
    other = conv_then_bn(w, np.array([2.0, 5.0], np.float32))
    passes.fold_batchnorm(other, memo)
    assert float(other.steps[0].weight[1, 0, 0, 0]) == 5.0 and float(first.steps[0].weight[1, 0, 0, 0]) == 3.0
