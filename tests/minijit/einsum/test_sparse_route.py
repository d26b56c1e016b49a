"""`minijit.einsum` with sparse operands takes the SparseAuto path (`minijit.sparseauto`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import minijit
from minijit.sparseauto import SparseTensor

CASES = [
    ("ij,jk->ik", [(30, 20), (20, 6)]),  # SpMM
    ("ij,ik,jk->ij", [(30, 20), (30, 5), (20, 5)]),  # SDDMM: the output samples the pattern
    ("ij,j->i", [(30, 20), (20,)]),  # SpMV
    ("ij,jk,kl->il", [(30, 20), (20, 7), (7, 4)]),  # a chain behind a sparse matrix
]


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize(("subscripts", "shapes"), CASES)
@pytest.mark.parametrize("optimize", [True, False])
def test_scipy_sparse_operands_match_numpy(fmt, subscripts, shapes, optimize):
    rng = np.random.default_rng(7)
    a = sp.random(*shapes[0], density=0.15, format=fmt, random_state=3)
    dense = [rng.standard_normal(s) for s in shapes[1:]]
    got = minijit.einsum(subscripts, a, *dense, optimize=optimize)
    want = np.einsum(subscripts, a.toarray(), *dense)
    if subscripts == "ij,ik,jk->ij":  # sampled output: a's class, the pattern of a, zeros elsewhere
        assert type(got) is type(a)
        got = got.toarray()
    else:  # a dense operand, not sampled: numpy, as scipy's A @ B gives
        assert type(got) is np.ndarray
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_pydata_and_minijit_sparse_tensors_match_numpy():
    sparse = pytest.importorskip("sparse")
    rng = np.random.default_rng(1)
    t = sparse.random((12, 9, 7), density=0.1, random_state=2)
    b, c = rng.standard_normal((9, 4)), rng.standard_normal((7, 4))
    want = np.einsum("ijk,jl,kl->il", t.todense(), b, c)
    got = minijit.einsum("ijk,jl,kl->il", t, b, c)
    assert type(got) is sparse.COO  # what sparse.einsum returns
    np.testing.assert_allclose(got.todense(), want, rtol=1e-12, atol=1e-12)
    mt = SparseTensor.from_pydata(t)
    np.testing.assert_allclose(minijit.einsum("ijk,jl,kl->il", mt, b, c), want, rtol=1e-12, atol=1e-12)


def test_out_and_dtype():
    a = sp.random(10, 8, density=0.3, format="csr", random_state=5, dtype=np.float32)
    b = np.ones((8, 3), np.float32)
    out = np.full((10, 3), np.nan, np.float32)
    assert minijit.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_allclose(out, a.toarray() @ b, rtol=1e-6)
    got = minijit.einsum("ij,jk->ik", a, b, dtype=np.float64)
    assert got.dtype == np.float64


def test_what_the_sparse_path_refuses_is_named():
    a = sp.random(10, 8, density=0.3, format="csr", random_state=5)
    b = np.ones((8, 3))
    with pytest.raises(ValueError, match="native CPU, not target='cuda'"):
        minijit.einsum("ij,jk->ik", a, b, target="cuda")
    with pytest.raises(ValueError, match="fill value"):  # a pydata fill value other than 0
        sparse = pytest.importorskip("sparse")
        minijit.einsum("ij->i", sparse.COO.from_numpy(np.ones((2, 2)), fill_value=1.0))
    with pytest.raises(ValueError, match="out has shape"):
        minijit.einsum("ij,jk->ik", a, b, out=np.empty((3, 3)))
    with pytest.raises(TypeError, match="dense result only"):
        minijit.einsum("ij,ik,jk->ij", a, np.ones((10, 2)), np.ones((8, 2)), out=np.empty((10, 8)))
    with pytest.raises(ValueError):  # a shape mismatch, before any code is generated
        minijit.einsum("ij,jk->ik", a, np.ones((7, 3)))
