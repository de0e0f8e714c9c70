"""facerun steers numpy's OpenBLAS, not another wheel's private copy loaded beside it (faiss-cpu carries one): steering
the wrong one left numpy's products on another thread count, and a detector's landmarks rounded otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from facerun import blas


def test_numpys_openblas_comes_first_and_other_wheels_copies_never():
    paths = ["/site/faiss_cpu.libs/libopenblaso-r0.so", "/site/numpy.libs/libscipy_openblas64_-x.so",
             "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "/site/numpy/.libs/libopenblas.so"]
    assert blas._numpys_first(paths) == ["/site/numpy.libs/libscipy_openblas64_-x.so",
                                         "/site/numpy/.libs/libopenblas.so",
                                         "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"]


def test_with_faiss_loaded_the_library_steered_is_numpys():
    pytest.importorskip("faiss")
    code = ("import faiss, ctypes, numpy\n"
            "from facerun import blas\n"
            "lib, prefix, suffix = blas._load()\n"
            "print(lib._name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert "numpy" in out and "faiss" not in out, out
