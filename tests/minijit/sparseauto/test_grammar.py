"""numpy's whole einsum grammar on the sparse path (issue 53 part 2): repeated indices (sparse
diagonals), ``...``, implicit outputs, 0-d operands, the sublist form, DOK inputs, integer and
complex dtypes; more than two sparse operands on one index and storage orders that contradict
each other. Results against ``np.einsum`` on the densified operands; types as ``sparse.einsum``
returns them."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit

sparse = pytest.importorskip("sparse")

LETTERS = "abcd"


def _dense(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return x.toarray() if isinstance(x, sp.sparray | sp.spmatrix) else np.asarray(x.todense())


@st.composite
def expressions(draw):
    """``(subscripts, operands)``: 1-3 pydata operands (COO/DOK/dense, one sparse at least) over
    letters drawn with repeats, sometimes a 0-d operand, the output explicit or implicit."""
    size = draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    terms = [draw(st.lists(st.sampled_from(LETTERS), min_size=0, max_size=3)) for _ in range(n)]
    if all(len(t) == 0 for t in terms):
        terms[0] = ["a"]
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    density = draw(st.sampled_from((0.0, 0.3, 1.0)))
    fmts = [draw(st.sampled_from(("coo", "dok", "dense"))) for _ in range(n)]
    if all(f == "dense" or len(t) == 0 for f, t in zip(fmts, terms, strict=True)):
        k = next(i for i, t in enumerate(terms) if t)
        fmts[k] = "coo"
    ops = []
    for t, f in zip(terms, fmts, strict=True):
        d = np.where(rng.random((size,) * len(t)) < density, rng.standard_normal((size,) * len(t)), 0.0)
        if f != "dense" and not t:  # 0-d: its value stored, fill value 0 (from_numpy would make it the fill)
            ops.append(sparse.COO(np.zeros((0, 1), np.intp), d.reshape(1), shape=()).asformat(f))
        else:
            ops.append(d if f == "dense" else sparse.COO.from_numpy(d).asformat(f))
    used = sorted({c for t in terms for c in t})
    lhs = ",".join("".join(t) for t in terms)
    if draw(st.booleans()):
        return lhs, ops  # implicit output
    out = draw(st.permutations(used)).copy()
    return lhs + "->" + "".join(out[: draw(st.integers(0, len(out)))]), ops


@settings(max_examples=40, deadline=None)
@given(expressions())
def test_drawn_expressions_match_numpy_with_sparse_einsums_types(expr):
    subscripts, ops = expr
    got = minijit.einsum(subscripts, *ops)
    want = np.einsum(subscripts, *[_dense(x) for x in ops])
    theirs = sparse.einsum(subscripts, *ops)
    assert type(got) is type(theirs)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("subscripts", "dims"),
    [("...ab,...b->...a", (3, 2)), ("a...,a...", (3, 3)), ("...,...->...", (2, 2)), ("ij...,jk->ik...", (3, 2))],
)
def test_ellipsis_on_sparse_operands(subscripts, dims):
    rng = np.random.default_rng(5)
    ops = [sparse.COO.from_numpy(np.where(rng.random((3,) * d) < 0.4, 1.0 + rng.random((3,) * d), 0.0)) for d in dims]
    got = minijit.einsum(subscripts, *ops)
    np.testing.assert_allclose(_dense(got), np.einsum(subscripts, *[_dense(x) for x in ops]), rtol=1e-12)


def test_sublist_form_and_diagonal_on_scipy():
    a = sp.random_array((5, 5), density=0.4, format="csr", rng=2)
    b = np.arange(10.0).reshape(5, 2)
    got = minijit.einsum(a, [0, 1], b, [1, 2], [0, 2])
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, a.toarray() @ b, rtol=1e-12)
    np.testing.assert_allclose(minijit.einsum("ii->i", a), np.diag(a.toarray()), rtol=1e-12)
    np.testing.assert_allclose(minijit.einsum(a, [0, 0]), np.trace(a.toarray()), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.complex128, np.float32])
def test_dtypes_numpy_takes_are_not_refused(dtype):
    x = sparse.COO.from_numpy(np.array([[0, 2.5, 0], [1.5, 0, 3.0], [0, 0, 4.0]]))
    y = np.array([1.0, 2.0, 3.0])
    got = minijit.einsum("ij,i->j", x, y, dtype=dtype)
    want = np.einsum("ij,i->j", x.todense().astype(dtype), y.astype(dtype))
    assert type(got) is sparse.COO and got.dtype == dtype
    np.testing.assert_allclose(got.todense(), want, rtol=1e-6)
    c = sparse.COO.from_numpy(x.todense() * (1 + 2j))  # complex operands, no dtype: numpy's type
    got = minijit.einsum("ij,j->i", c, y)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got.todense(), c.todense() @ y, rtol=1e-12)
    m = sp.csr_array(np.array([[0, 2], [3, 0]], np.int64))  # integer data: numpy's int64 back
    got = minijit.einsum("ij,jk->ik", m, m)
    assert type(got) is sp.csr_array and got.dtype == np.int64
    np.testing.assert_array_equal(got.toarray(), m.toarray() @ m.toarray())


def test_zero_d_operands_scale_the_result():
    x = sparse.random((3, 4), density=0.5, random_state=1)
    s0 = sparse.COO.from_numpy(np.array(2.5))
    got = minijit.einsum("ab,->ab", x, s0)
    assert type(got) is sparse.COO
    np.testing.assert_allclose(got.todense(), 2.5 * x.todense(), rtol=1e-12)
    got = minijit.einsum(",,->", s0, s0, s0)
    assert type(got) is sparse.COO and got.shape == ()
    np.testing.assert_allclose(got.todense(), 2.5**3, rtol=1e-12)


def test_many_sparse_operands_and_contradicting_orders():
    rng = np.random.default_rng(9)
    ops = [sparse.random((3, 3, 3), density=0.5, random_state=k) for k in range(3)]
    for subscripts in ("abc,cda,dea->abe", "abc,abc,abc->a", "abc,cba->ab"):
        terms = subscripts.split("->")[0].split(",")
        got = minijit.einsum(subscripts, *ops[: len(terms)])
        want = np.einsum(subscripts, *[x.todense() for x in ops[: len(terms)]])
        np.testing.assert_allclose(got.todense(), want, rtol=1e-12, atol=1e-12)
    dok = sparse.DOK.from_numpy(np.where(rng.random((3, 3)) < 0.5, 1.0, 0.0))
    got = minijit.einsum("ab,bc->ac", dok, dok)
    assert type(got) is sparse.DOK
    np.testing.assert_allclose(got.todense(), dok.todense() @ dok.todense(), rtol=1e-12)


def test_refusals_name_the_problem():
    x = sparse.random((2, 3, 4), density=0.5, random_state=1)
    with pytest.raises(ValueError, match="has size 3, elsewhere 2"):  # a diagonal of unequal dims
        minijit.einsum("aab", x)
    with pytest.raises(ValueError):
        minijit.einsum("abc,acb", x, x)
    with pytest.raises(ValueError, match="fill value"):
        minijit.einsum("abc->a", sparse.COO.from_numpy(np.ones((2, 3, 4)), fill_value=1.0))
    with pytest.raises(TypeError):
        minijit.einsum(0, x, x)
