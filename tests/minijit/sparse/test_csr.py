"""CSR and operand validation: malformed input raises before any kernel runs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from minijit.sparse import SpMM, as_csr, spmm


def _good():
    indptr = np.array([0, 2, 2, 5], np.int32)
    indices = np.array([0, 3, 1, 2, 3], np.int32)
    data = np.arange(5, dtype=np.float32)
    return indptr, indices, data, (3, 4)


def test_accepts_scipy_and_tuple():
    ip, ix, d, shape = _good()
    a = as_csr((ip, ix, d, shape))
    b = as_csr(sp.csr_matrix((d, ix, ip), shape=shape))
    assert a.shape == b.shape == (3, 4) and a.nnz == 5
    assert a.indptr.dtype == np.int32 and a.indices.dtype == np.int32


@pytest.mark.parametrize(
    "mutate, exc, text",
    [
        (lambda ip, ix, d, s: (ip, np.array([0, 3, 2, 1, 3], np.int32), d, s), ValueError, "not sorted"),
        (lambda ip, ix, d, s: (ip, np.array([0, 3, 1, 2, 4], np.int32), d, s), ValueError, "out of range"),
        (lambda ip, ix, d, s: (ip, np.array([0, 3, 1, -1, 3], np.int32), d, s), ValueError, "out of range"),
        (lambda ip, ix, d, s: (np.array([0, 2, 1, 5], np.int32), ix, d, s), ValueError, "monotone"),
        (lambda ip, ix, d, s: (np.array([1, 2, 2, 5], np.int32), ix, d, s), ValueError, "indptr[0]"),
        (lambda ip, ix, d, s: (np.array([0, 2, 5], np.int32), ix, d, s), ValueError, "length"),
        (lambda ip, ix, d, s: (np.array([0, 2, 2, 4], np.int32), ix, d, s), ValueError, "nnz mismatch"),
        (lambda ip, ix, d, s: (ip, ix, d[:4], s), ValueError, "nnz mismatch"),
        (lambda ip, ix, d, s: (ip.astype(np.float32), ix, d, s), TypeError, "integer"),
        (lambda ip, ix, d, s: (ip, ix, d.astype(np.int32), s), TypeError, "float"),
        (lambda ip, ix, d, s: (ip, ix.tolist(), d, s), TypeError, "numpy array"),
        (lambda ip, ix, d, s: (ip, np.repeat(ix, 2)[::2], d, s), ValueError, "contiguous"),
        (lambda ip, ix, d, s: (ip, ix, np.repeat(d, 2)[::2], s), ValueError, "contiguous"),
        (lambda ip, ix, d, s: (ip, ix, d, (3,)), ValueError, "shape"),
        (lambda ip, ix, d, s: (ip, ix, d, (3, -4)), ValueError, "cols"),
    ],
)
def test_malformed_csr(mutate, exc, text):
    with pytest.raises(exc, match=None) as ei:
        as_csr(mutate(*_good()))
    assert text in str(ei.value)


def test_non_csr_inputs():
    with pytest.raises(TypeError, match="tocsr"):
        as_csr(sp.coo_matrix(np.eye(3)))
    with pytest.raises(TypeError):
        as_csr(np.eye(3))


def test_operand_checks_before_kernel():
    ip, ix, d, shape = _good()
    op = SpMM((ip, ix, d, shape), 5, target="native")
    c = np.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match="shape mismatch"):
        op.execute(np.zeros((5, 5), np.float32), c)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(np.zeros((4, 5), np.float64), c)
    with pytest.raises(ValueError, match="B is not one dense block"):
        op.execute(np.zeros((4, 10), np.float32)[:, ::2], c)
    with pytest.raises(TypeError, match="float32"):
        op.execute(np.zeros((4, 5), np.float32), np.zeros((3, 5), np.float64))
    with pytest.raises(ValueError, match="shape mismatch"):
        op.execute(np.zeros((4, 5), np.float32), np.zeros((3, 6), np.float32))
    with pytest.raises(ValueError, match="C is not one dense block"):
        op.execute(np.zeros((4, 5), np.float32), np.zeros((3, 10), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="nnz"):
        op.update_values(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="target"):
        SpMM((ip, ix, d, shape), 5, target="tpu")
    with pytest.raises(ValueError, match="n must"):
        SpMM((ip, ix, d, shape), 0, target="native")
    with pytest.raises(ValueError, match="fp16"):
        SpMM((ip, ix, d, shape), 5, dtype="fp32", target="cuda")
    with pytest.raises(TypeError):
        spmm((ip, ix, d, shape), np.zeros(4, np.float32))


@pytest.mark.parametrize("target", ["native", "cuda"])
def test_views_rejected_or_read_as_the_view(target):
    """SpMM takes B and C as matrices, each one dense block: a row- or column-major B is read as
    the matrix it is (B.T of a C-order array included), a column-major C is written as the matrix
    it is and nothing around it; a B or C with gaps or negative strides raises ValueError naming
    it and saying how to fix it; nothing is written."""
    kw = {}
    if target == "cuda":
        from ptx import simdriver

        kw["driver"] = simdriver
    ip, ix, d, shape = _good()
    s = sp.csr_matrix((d, ix, ip), shape=shape)
    op = SpMM((ip, ix, d, shape), 5, target=target, **kw)
    rng = np.random.default_rng(5)
    bt = rng.standard_normal((5, 4)).astype(np.float32)
    want = s @ bt.T
    c = np.zeros((3, 5), np.float32)
    np.testing.assert_allclose(op.execute(bt.T, c), want, rtol=1e-2, atol=1e-2)  # F-order B: its values
    guard = np.full(17, 7.0, np.float32)
    cf = guard[1:-1].reshape(5, 3).T  # F-order C inside a larger buffer
    assert op.execute(np.asfortranarray(bt.T), cf) is cf
    np.testing.assert_allclose(cf, want, rtol=1e-2, atol=1e-2)
    assert guard[0] == 7.0 and guard[-1] == 7.0
    wide = np.zeros((4, 15), np.float32)
    for b in (np.repeat(bt.T, 3, axis=1)[:, ::3], bt.T[::-1], np.zeros((5, 5), np.float32).T[:4]):
        before = c.copy()
        with pytest.raises(ValueError, match="B is not one dense block.*np.ascontiguousarray"):
            op.execute(b, c)
        np.testing.assert_array_equal(c, before)
    for out in (wide.reshape(4, 15)[:3, ::3], np.zeros((6, 4), np.float32).T[:3, :5], wide[:3, ::-3]):
        with pytest.raises(ValueError, match="C is not one dense block.*np.empty"):
            op.execute(bt.T, out)
        assert not out.any() and not wide.any()
