"""`minijit.einsum` on sparse operands returns the caller's own types (issue 53 part 1): pydata
inputs what ``sparse.einsum`` returns (its class checked against pydata's own call), scipy inputs
scipy's conventions, `SparseTensor` inputs `SparseTensor`/numpy; values against numpy on the
densified operands; every result owns its arrays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.sparseauto import SparseTensor

sparse = pytest.importorskip("sparse")

PYDATA = ("coo", "gcxs", "dok", "dense")
#: (subscripts, operand dims) that the sparse path runs for any storage of its operands
PYDATA_CASES = [("ab,bc->ac", (2, 2)), ("abc,abc->", (3, 3)), ("abc,abc->abc", (3, 3)), ("ab,b->a", (2, 1))]


def _pydata_operand(fmt: str, ndim: int, rng: np.random.Generator, density: float):
    d = np.where(rng.random((3,) * ndim) < density, rng.standard_normal((3,) * ndim), 0.0)
    return d if fmt == "dense" else sparse.COO.from_numpy(d).asformat(fmt)


def _todense(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return x.todense() if hasattr(x, "todense") and not isinstance(x, sp.sparray | sp.spmatrix) else x.toarray()


def _owns(result, operands) -> None:
    """No array of ``result`` shares memory with an operand's."""
    mine = [
        getattr(result, a)
        for a in ("data", "coords", "indices", "indptr")
        if isinstance(getattr(result, a, None), np.ndarray)
    ]
    if isinstance(result, np.ndarray):
        mine = [result]
    for x in operands:
        theirs = [
            getattr(x, a)
            for a in ("data", "coords", "indices", "indptr", "row", "col")
            if isinstance(getattr(x, a, None), np.ndarray)
        ]
        if isinstance(x, np.ndarray):
            theirs = [x]
        assert not any(np.shares_memory(m, t) for m in mine for t in theirs)


@pytest.mark.parametrize(("subscripts", "dims"), PYDATA_CASES)
@pytest.mark.parametrize("formats", [f for f in itertools.product(PYDATA, repeat=2) if f != ("dense", "dense")])
def test_pydata_results_have_sparse_einsums_class(subscripts, dims, formats):
    rng = np.random.default_rng(len(subscripts) + 7 * PYDATA.index(formats[0]) + PYDATA.index(formats[1]))
    ops = [_pydata_operand(f, d, rng, 0.5) for f, d in zip(formats, dims, strict=True)]
    got = minijit.einsum(subscripts, *ops)
    theirs = sparse.einsum(subscripts, *ops)
    assert type(got) is type(theirs) and got.shape == theirs.shape
    want = np.einsum(subscripts, *[_todense(x) for x in ops])
    np.testing.assert_allclose(_todense(got), want, rtol=1e-12, atol=1e-12)
    _owns(got, ops)


SCIPY_FORMATS = ("csr", "csc", "coo")


def _scipy_operand(fmt: str, matrix: bool, shape, seed: int, density: float):
    a = sp.random_array(shape, density=density, format=fmt, rng=seed)
    return sp.csr_matrix(a).asformat(fmt) if matrix else a


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(SCIPY_FORMATS),
    st.sampled_from(SCIPY_FORMATS),
    st.booleans(),
    st.booleans(),
    st.integers(1, 7),
    st.integers(1, 7),
    st.sampled_from((0.0, 0.2, 0.7)),
    st.integers(0, 2**31 - 1),
)
def test_scipy_results_follow_scipys_conventions(fa, fb, ma, mb, m, k, density, seed):
    rng = np.random.default_rng(seed)
    a = _scipy_operand(fa, ma, (m, k), seed, density)
    b = _scipy_operand(fb, mb, (k, 4), seed + 1, density)
    dense = rng.standard_normal((k, 4))
    # sparse with sparse: the first operand's class
    got = minijit.einsum("ij,jk->ik", a, b)
    assert type(got) is type(a)
    np.testing.assert_allclose(got.toarray(), a.toarray() @ b.toarray(), rtol=1e-12, atol=1e-12)
    _owns(got, (a, b))
    # sparse with dense: numpy
    got = minijit.einsum("ij,jk->ik", a, dense)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, a.toarray() @ dense, rtol=1e-12, atol=1e-12)
    # sampled (SDDMM): the sampled operand's class, its pattern
    u, v = rng.standard_normal((m, 3)), rng.standard_normal((k, 3))
    got = minijit.einsum("ij,ik,jk->ij", a, u, v)
    assert type(got) is type(a)
    np.testing.assert_allclose(got.toarray(), a.toarray() * (u @ v.T), rtol=1e-12, atol=1e-12)
    _owns(got, (a,))
    # a scalar of sparse operands: numpy
    got = minijit.einsum("ij,ij->", a, a)
    assert type(got) is np.ndarray and got.shape == ()
    np.testing.assert_allclose(got, (a.toarray() ** 2).sum(), rtol=1e-12, atol=1e-12)


def test_sparse_tensor_inputs_give_sparse_tensor_or_numpy():
    rng = np.random.default_rng(3)
    d = np.where(rng.random((5, 4)) < 0.4, 1.0, 0.0)
    t = SparseTensor.from_dense(d, ("dense", "compressed"))
    u, v = rng.standard_normal((5, 2)), rng.standard_normal((4, 2))
    got = minijit.einsum("ij,ik,jk->ij", t, u, v)
    assert type(got) is SparseTensor
    assert got.vals.flags.writeable or not np.shares_memory(got.vals, t.vals)
    np.testing.assert_allclose(got.to_dense(), d * (u @ v.T), rtol=1e-12)
    got = minijit.einsum("ij,jk->ik", t, v)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, d @ v, rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from((0.0, 0.4, 1.0)), st.integers(0, 99))
def test_dense_results_become_the_coo_pydata_builds(shape, density, seed):
    from minijit.sparseauto.interop import _coo_from_dense

    rng = np.random.default_rng(seed)
    d = np.where(rng.random(shape) < density, rng.standard_normal(shape), 0.0)
    got, want = _coo_from_dense(d), sparse.COO.from_numpy(d)
    np.testing.assert_array_equal(got.coords, want.coords)
    np.testing.assert_array_equal(got.data, want.data)
    assert got.shape == want.shape and not np.shares_memory(got.data, d)


@pytest.mark.parametrize("fmt", ["bsr", "dia", "dok", "lil"])
@pytest.mark.parametrize("matrix", [False, True])
def test_other_scipy_formats_come_back_as_themselves(fmt, matrix):
    a = _scipy_operand("csr", matrix, (6, 6), 3, 0.4).asformat(fmt)
    rng = np.random.default_rng(1)
    u, v = rng.standard_normal((6, 2)), rng.standard_normal((6, 2))
    got = minijit.einsum("ij,ik,jk->ij", a, u, v)  # sampled: a's class
    assert type(got) is type(a)
    np.testing.assert_allclose(got.toarray(), a.toarray() * (u @ v.T), rtol=1e-12, atol=1e-12)
    got = minijit.einsum("ij,jk->ik", a, a)  # sparse x sparse: the first's class
    assert type(got) is type(a)
    np.testing.assert_allclose(got.toarray(), a.toarray() @ a.toarray(), rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([sp.csr_array, sp.csc_matrix]))
def test_unsorted_duplicated_scipy_operands_are_summed_through_einsum(seed, cls):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    rows, cols = rng.integers(0, 5, n), rng.integers(0, 4, n)  # duplicates likely, order random
    vals = rng.standard_normal(n)
    outer, inner, size = (rows, cols, 5) if cls is sp.csr_array else (cols, rows, 4)
    order = np.argsort(outer, kind="stable")  # grouped by the compressed axis, unsorted within
    indptr = np.concatenate([[0], np.cumsum(np.bincount(outer, minlength=size))])
    a = cls((vals[order], inner[order].astype(np.int32), indptr), shape=(5, 4))
    want = np.zeros((5, 4))
    np.add.at(want, (rows, cols), vals)
    b = rng.standard_normal((4, 3))
    got = minijit.einsum("ij,jk->ik", a, b)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, want @ b, rtol=1e-10, atol=1e-12)
    u = rng.standard_normal((5, 2))
    got = minijit.einsum("ij,ik,jk->ij", a, u, b[:, :2])
    assert type(got) is cls
    np.testing.assert_allclose(got.toarray(), want * (u @ b[:, :2].T), rtol=1e-10, atol=1e-12)


def test_pydata_result_class_follows_the_fill_value_of_a_fully_reduced_operand():
    """sparse.einsum reduces an operand that shares no index to a 0-d COO whose fill value is its
    sum; a non-zero fill broadcast by a dense factor makes the result dense, a zero one (or a
    scalar factor) keeps it sparse: the result's class follows that value, as pydata's does."""
    sparse = pytest.importorskip("sparse")
    x = sparse.COO.from_numpy(np.array([1.0, 0, -1.0]))  # sums to 0
    y = sparse.COO.from_numpy(np.array([1.0, 0, 2.0]))  # sums to 3
    d, d1, d3, c = np.array([1.0, 2.0]), np.array([5.0]), np.array([1.0, 2.0, 3.0]), np.float64(3.0)
    cases = [
        ("b,a->a", (x, d)), ("b,a->a", (y, d)), ("b,a->a", (y, d1)), ("b,a->ab", (y, d)), ("b,b->b", (y, d3)),
        (",b->b", (c, y)), ("b,,a->a", (y, c, d)), ("b,,a->a", (x, c, d)), ("b,,->", (y, c, c)),
        ("b,c,a->a", (y, y, d)), ("b,c,a->a", (x, y, d)), ("bb,a->a", (sparse.COO.from_numpy(np.eye(3)), d)),
        ("a,b->", (d, y)), ("a,b->a", (d, y)), ("a,b,ac->c", (d, y, np.ones((2, 4)))),
    ]  # fmt: skip
    classes = set()
    for subs, ops in cases:
        want, got = sparse.einsum(subs, *ops), minijit.einsum(subs, *ops)
        assert type(got) is type(want), (subs, type(got), type(want))
        classes.add(type(want))
        np.testing.assert_allclose(_as_dense(got), _as_dense(want), rtol=1e-12)
    assert classes == {np.ndarray, sparse.COO}  # both outcomes drawn


def _as_dense(r):
    return r.todense() if hasattr(r, "todense") else np.asarray(r)
