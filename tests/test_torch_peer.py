"""The torch peer of `facerun bench` runs facerun's own step program through torch.nn.functional; here on torch's
CPU device (the bench uses CUDA), against the CPU interpreter. Skipped where torch is not installed."""

from __future__ import annotations

import pytest

import facerun
from facerun import agree, cpu


@pytest.mark.parametrize("name, shape", [("yunet-arch", (1, 3, 96, 128)), ("sface-arch-small", (2, 3, 112, 112)),
                                         ("every-op", None)])
def test_the_torch_peer_computes_what_the_interpreter_does(name, shape):
    pytest.importorskip("torch", reason="torch is not installed")
    from facerun.bench.torch_peer import TorchProgram, Unsupported

    net = facerun.load(name, device="cpu")
    shape = shape or tuple(net.default_shape(1))
    prog = net.program(shape)
    x = agree.seeded_inputs({n: prog.values[v].shape for n, v in prog.inputs}, 3)
    want = cpu.run_program(prog, x)
    try:
        peer = TorchProgram(prog, tf32=False, device="cpu")
    except Unsupported as e:
        pytest.skip(f"the peer does not run every step of {name}: {e}")
    got = peer.run(x)
    assert agree.disagreement(want, got, agree.GPU) is None
