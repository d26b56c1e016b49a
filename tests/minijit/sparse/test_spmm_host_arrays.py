"""Native SpMM takes host arrays of any kind (DLPack producers in host memory, as torch CPU
tensors are) and refuses CUDA device arrays by name."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.sparse import SpMM
from tests.minijit.host_arrays import BareCuda, HostDLPack
from tests.minijit.sparse.helpers import csr_with_lengths


def test_native_spmm_reads_and_writes_host_dlpack_arrays_in_place():
    rng = np.random.default_rng(0)
    s = csr_with_lengths([2, 0, 7, 3], 30, rng)
    b = rng.random((30, 6)).astype(np.float32)
    c = np.full((4, 6), np.nan, np.float32)
    op = SpMM(s, 6, target="native", threads=2)
    out = HostDLPack(c)
    assert op.execute(HostDLPack(b), out) is out
    np.testing.assert_allclose(c, s @ b, rtol=1e-5)
    c2 = op.execute(HostDLPack(b), np.zeros((4, 6), np.float32))  # numpy C: returned as before
    np.testing.assert_allclose(c2, s @ b, rtol=1e-5)


@pytest.mark.parametrize("which", ["B", "C"])
def test_native_spmm_refuses_cuda_arrays_by_name(which):
    rng = np.random.default_rng(1)
    s = csr_with_lengths([2, 1], 8, rng)
    op = SpMM(s, 4, target="native", threads=1)
    b = BareCuda((8, 4), "<f4") if which == "B" else rng.random((8, 4)).astype(np.float32)
    c = BareCuda((2, 4), "<f4") if which == "C" else np.zeros((2, 4), np.float32)
    with pytest.raises(TypeError, match=f"{which} is a CUDA device array.*target='cuda'"):
        op.execute(b, c)
