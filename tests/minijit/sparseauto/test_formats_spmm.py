"""CPU SpMM through the shared sparse layer (issue 53 part 4): `minijit.sparse.SpMM` runs the
layer's CSR route (`RowSpMM`) on the layer's tensor type; the route takes any tensor whose level
formats say "a full level, then a segmented one", by rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minijit.sparse import SpMM, as_csr
from minijit.sparseauto import sparse_einsum
from minijit.sparseauto.execute import RowSpMM, row_spmm_accepts
from minijit.sparseauto.formats import DENSE, SINGLETON, Blocked, Compressed
from minijit.sparseauto.tensor import SparseTensor
from minijit.targets import native

sp = pytest.importorskip("scipy.sparse")
pytestmark = pytest.mark.skipif(not native().supported, reason="no native CSR kernel for this host")


def _csr(m: int, k: int, density: float, seed: int, duplicates: bool):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m, k)) < density)
    if duplicates and rows.size:  # repeat some entries: SpMM sums them, as S @ B does
        extra = rng.integers(0, rows.size, rows.size // 2 + 1)
        rows, cols = np.concatenate([rows, rows[extra]]), np.concatenate([cols, cols[extra]])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
    data = rng.standard_normal(rows.size).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.int32)
    return indptr, cols.astype(np.int32), data, (m, k)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 40),
    st.integers(1, 30),
    st.sampled_from((1, 3, 8, 17, 64)),
    st.sampled_from((0.0, 0.1, 0.5)),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.sampled_from(("fp32", "fp16")),
    st.integers(1, 3),
)
def test_spmm_runs_the_layer_route_on_the_layer_tensor(m, k, n, density, seed, duplicates, dtype, threads):
    indptr, indices, data, shape = _csr(m, k, density, seed, duplicates)
    op = SpMM((indptr, indices, data, shape), n, dtype=dtype, target="native", threads=threads)
    assert isinstance(op._layer, RowSpMM) and op._layer.s.levels == (DENSE, Compressed(unique=False))
    assert np.shares_memory(op._layer.pos, indptr) and op._kernel is op._layer.kernel
    b = np.random.default_rng(seed + 1).standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    op.execute(b, c)
    s = sp.csr_matrix((data, indices, indptr), shape=shape)
    if dtype == "fp16":
        s = sp.csr_matrix((data.astype(np.float16).astype(np.float32), indices, indptr), shape=shape)
        b = b.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(c, s @ b, rtol=1e-5, atol=1e-4)
    new = np.random.default_rng(seed + 2).standard_normal(data.shape[0]).astype(np.float32)
    op.update_values(new)  # new values reach the layer's tensor
    assert np.array_equal(op._layer.s.vals, new.astype(np.float16).astype(np.float32) if dtype == "fp16" else new)


def test_as_csr_takes_the_layer_tensor_by_its_formats():
    d = np.array([[0, 1.0, 0], [0, 0, 0], [2.0, 0, 3.0]], np.float32)
    t = SparseTensor.from_dense(d, (DENSE, Compressed()))
    csr = as_csr(t)
    assert csr.indptr is t.storage[1].pos and csr.indices is t.storage[1].crd and csr.data is t.vals
    assert np.array_equal(csr.to_scipy().toarray(), d)
    back = csr.tensor()
    assert row_spmm_accepts(back) and np.array_equal(back.to_dense(), d)
    for levels in ((Compressed(unique=False), SINGLETON), (DENSE, Blocked(2)), (Compressed(), Compressed())):
        with pytest.raises(TypeError, match="full level, then a segmented one"):
            as_csr(SparseTensor.from_dense(d, levels))
    with pytest.raises(TypeError, match="full level, then a segmented one"):
        as_csr(SparseTensor.from_dense(d, (DENSE, Compressed()), mode_order=(1, 0)))  # CSC


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 30),
    st.integers(1, 30),
    st.sampled_from((1, 5, 32)),
    st.integers(0, 2**31 - 1),
    st.sampled_from(("csr", "dcsr", "coo", "csc")),
)
def test_the_row_route_takes_any_tensor_whose_formats_say_csr(m, k, n, seed, layout):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random((m, k)) < 0.3, rng.standard_normal((m, k)), 0).astype(np.float32)
    levels = {
        "csr": (DENSE, Compressed()),
        "csc": (DENSE, Compressed()),  # stored by columns: mode order (1, 0)
        "dcsr": (Compressed(), Compressed()),
        "coo": (Compressed(unique=False), SINGLETON),
    }[layout]
    t = SparseTensor.from_dense(d, levels, (1, 0) if layout == "csc" else None)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if layout != "csr":  # not a full level then a segmented one, by rows: refused by name
        assert not row_spmm_accepts(t)
        with pytest.raises(ValueError, match="full then a segmented level"):
            RowSpMM(t, n, native())
        return
    assert row_spmm_accepts(t) and not row_spmm_accepts(t.astype(np.float64))
    c = np.full((m, n), np.nan, np.float32)
    RowSpMM(t, n, native(), threads=2).run(b, c)
    np.testing.assert_allclose(c, d @ b, rtol=1e-5, atol=1e-4)
    # sparse einsum of the same expression on the same tensor agrees (its generated nest: faster
    # than the row kernel at small N on the measured host, see bench/results)
    np.testing.assert_allclose(sparse_einsum("ij,jk->ik", t, b), c, rtol=1e-5, atol=1e-4)
