"""Conversions at memory speed (issue 53): canonical coordinates convert without a sort into the
same storage the sorting route builds; unsorted and duplicated coordinates are sorted and summed
as scipy and pydata do; shared arrays are read-only views, copies by default."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.sparseauto import convert
from minijit.sparseauto.tensor import SparseTensor

sparse = pytest.importorskip("sparse")


def _storage(t: SparseTensor) -> list:
    return [
        (lv.format, lv.size, None if lv.pos is None else lv.pos.tolist(), None if lv.crd is None else lv.crd.tolist())
        for lv in t.storage
    ]


def _check_invariants(t: SparseTensor) -> None:
    """What the generated loops rely on: int32 read-only pos/crd, strictly increasing fibres."""
    parents = 1
    for lv in t.storage:
        if lv.format == "dense":
            parents *= lv.size
            continue
        assert lv.pos.dtype == lv.crd.dtype == np.int32
        assert not lv.pos.flags.writeable and not lv.crd.flags.writeable
        assert lv.pos.shape[0] == parents + 1 and lv.pos[0] == 0 and lv.pos[-1] == lv.crd.shape[0]
        for q in range(parents):
            fibre = lv.crd[lv.pos[q] : lv.pos[q + 1]]
            assert (np.diff(fibre) > 0).all() and (fibre >= 0).all() and (fibre < lv.size).all()
        parents = lv.crd.shape[0]
    assert t.vals.shape == (parents,) and not t.vals.flags.writeable


@st.composite
def coo_inputs(draw):
    """``(coords, values, shape, kind)``: sorted, unsorted or duplicated coordinates."""
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(nd))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(("sorted", "unsorted", "duplicated")))
    n = draw(st.integers(0, min(size, 40)))
    flat = np.sort(rng.choice(size, n, replace=False))
    if kind == "unsorted":
        flat = rng.permutation(flat)
    elif kind == "duplicated" and n:
        flat = rng.permutation(np.concatenate([flat, rng.choice(flat, draw(st.integers(1, 5)))]))
    coords = np.array(np.unravel_index(flat, shape), dtype=draw(st.sampled_from((np.int64, np.int32, np.uint16))))
    values = rng.standard_normal(flat.shape[0])
    return coords.reshape(nd, -1), values, shape, kind


def _dense(coords, values, shape):
    want = np.zeros(shape)
    np.add.at(want, tuple(coords.astype(np.int64)), values)  # duplicates summed
    return want


@settings(max_examples=80, deadline=None)
@given(coo_inputs(), st.data())
def test_from_coo_matches_numpy_and_the_sorting_route(inp, data):
    coords, values, shape, kind = inp
    nd = len(shape)
    levels = data.draw(st.sampled_from([("compressed",) * nd, ("dense",) + ("compressed",) * (nd - 1)]))
    order = tuple(data.draw(st.permutations(range(nd))))
    copy = data.draw(st.booleans())
    t = SparseTensor.from_coo(coords, values, shape, levels, order, copy=copy)
    _check_invariants(t)
    np.testing.assert_allclose(t.to_dense(), _dense(coords, values, shape), rtol=1e-12, atol=1e-12)
    # the sorting route (shuffled input) builds the same storage
    perm = np.random.default_rng(0).permutation(coords.shape[1])
    again = SparseTensor.from_coo(coords[:, perm], values[perm], shape, levels, order)
    assert _storage(again) == _storage(t)
    np.testing.assert_allclose(again.vals, t.vals, rtol=1e-12, atol=1e-15)


def test_canonical_input_is_not_sorted(monkeypatch):
    """A sorted, duplicate-free COO takes the O(nnz) route: np.lexsort is never called."""
    x = sparse.random((30, 20, 10), density=0.05, random_state=1)
    called = []
    lexsort = np.lexsort
    monkeypatch.setattr(convert.np, "lexsort", lambda *a: called.append(1) or lexsort(*a))
    t = SparseTensor.from_pydata(x)
    assert not called
    np.testing.assert_array_equal(t.to_dense(), x.todense())
    # a COO whose coordinates lie about their order is sorted, not trusted
    c = x.coords[:, ::-1].copy()
    liar = sparse.COO(c, x.data[::-1].copy(), shape=x.shape, sorted=True, has_duplicates=False)
    t = SparseTensor.from_pydata(liar)
    assert called
    _check_invariants(t)
    np.testing.assert_array_equal(t.to_dense(), x.todense())


def test_a_coo_with_unsummed_duplicates_is_summed():
    c = np.array([[0, 0, 1, 1], [2, 2, 0, 0]])
    x = sparse.COO(c, np.array([1.0, 2.0, 3.0, 4.0]), shape=(2, 3), sorted=True, has_duplicates=False)
    t = SparseTensor.from_pydata(x)
    _check_invariants(t)
    np.testing.assert_array_equal(t.to_dense(), [[0, 0, 3.0], [7.0, 0, 0]])


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_canonical_scipy_shares_its_arrays_only_when_asked(fmt, index_dtype):
    m = sp.random(40, 30, density=0.2, format=fmt, random_state=4)
    m.indptr, m.indices = m.indptr.astype(index_dtype), m.indices.astype(index_dtype)
    shared = SparseTensor.from_scipy(m, copy=False)
    copied = SparseTensor.from_scipy(m)
    for t in (shared, copied):
        _check_invariants(t)
        np.testing.assert_array_equal(t.to_dense(), m.toarray())
    lv = shared.storage[1]
    assert np.shares_memory(lv.crd, m.indices) == (index_dtype == np.int32)
    assert np.shares_memory(shared.vals, m.data)
    assert m.indices.flags.writeable and m.data.flags.writeable  # the caller's arrays keep their flags
    assert not np.shares_memory(copied.storage[1].crd, m.indices) and not np.shares_memory(copied.vals, m.data)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["csr", "csc"]), st.booleans())
def test_scipy_unsorted_and_duplicated_rows_are_summed(seed, fmt, copy):
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, 6, 25), rng.integers(0, 5, 25)
    vals = rng.standard_normal(25)
    m = sp.coo_array((vals, (rows, cols)), shape=(6, 5))
    m = m.tocsr() if fmt == "csr" else m.tocsc()
    m.has_canonical_format = False  # scipy's flag is not trusted either way
    m.indices = m.indices.copy()
    # shuffle within rows and split each value into two duplicates
    ip, ind, dat = m.indptr, m.indices, m.data
    new_ind, new_dat = [], []
    for q in range(len(ip) - 1):
        p = rng.permutation(np.arange(ip[q], ip[q + 1]))
        new_ind += list(ind[p]) * 2
        new_dat += list(dat[p] / 2) * 2
    new_ip = ip * 2
    cls = sp.csr_array if fmt == "csr" else sp.csc_array
    bad = cls((np.array(new_dat), np.array(new_ind, np.int32), new_ip), shape=(6, 5))
    before = bad.indices.copy()
    t = SparseTensor.from_scipy(bad, copy=copy)
    _check_invariants(t)
    np.testing.assert_allclose(t.to_dense(), m.toarray(), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(bad.indices, before)  # the caller's matrix is left as it was


def test_a_scipy_flag_that_lies_is_not_trusted():
    m = sp.csr_array((np.array([1.0, 2.0]), np.array([2, 0], np.int32), np.array([0, 2])), shape=(1, 3))
    m.has_canonical_format = True  # wrong: the row is not sorted
    t = SparseTensor.from_scipy(m, copy=False)
    _check_invariants(t)
    np.testing.assert_array_equal(t.to_dense(), [[2.0, 0, 1.0]])


@pytest.mark.parametrize("compressed_axes", [(0,), (1,)])
def test_gcxs_matrix_converts_as_csr_or_csc(compressed_axes):
    d = np.where(np.random.default_rng(2).random((7, 6)) < 0.3, 1.5, 0.0)
    x = sparse.GCXS.from_numpy(d, compressed_axes=compressed_axes)
    t = SparseTensor.from_pydata(x, copy=False)
    _check_invariants(t)
    assert t.levels == ("dense", "compressed") and t.mode_order[0] == compressed_axes[0]
    np.testing.assert_array_equal(t.to_dense(), d)


def test_dok_converts_through_its_coo():
    d = np.zeros((4, 5))
    d[1, 2], d[3, 0] = 2.0, -1.0
    t = SparseTensor.from_pydata(sparse.DOK.from_numpy(d))
    _check_invariants(t)
    np.testing.assert_array_equal(t.to_dense(), d)


def test_sizes_past_int64_keys_take_the_per_level_check():
    shape = (2**31 - 1, 2**31 - 1, 5)  # the linear key would overflow int64
    c = np.array([[0, 0, 2**31 - 2], [1, 5, 0], [4, 0, 3]])
    t = SparseTensor.from_coo(c, np.array([1.0, 2.0, 3.0]), shape)
    _check_invariants(t)
    got, vals = t.to_coo()
    np.testing.assert_array_equal(got, c)
    np.testing.assert_array_equal(vals, [1.0, 2.0, 3.0])
    assert convert.is_canonical(c, shape) == (True, None)
    assert not convert.is_canonical(c[:, ::-1], shape)[0]
