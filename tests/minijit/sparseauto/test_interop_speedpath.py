"""The fused conversion passes of `minijit.einsum` on scipy/pydata operands (issue 53 part 3):
`convert_native.csf_from_sorted` gives the same tensor as the numpy conversion, refuses what it
must (out of order, repeated, out of range: the numpy path then sorts or raises), never writes
the caller's arrays; `convert_native.coo_from_dense` lists the non-zeros as pydata does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minijit
from minijit.sparseauto import convert_native, interop
from minijit.sparseauto.tensor import SparseTensor

sparse = pytest.importorskip("sparse")
sp = pytest.importorskip("scipy.sparse")

native = pytest.mark.skipif(not convert_native.available(), reason="the fused passes are x86-64 code")
F64 = np.dtype(np.float64)


def same_tensor(a: SparseTensor, b: SparseTensor) -> None:
    assert a.shape == b.shape and a.mode_order == b.mode_order
    assert [str(x) for x in a.levels] == [str(x) for x in b.levels]
    for la, lb in zip(a.storage, b.storage, strict=True):
        assert la.size == lb.size
        for part in ("pos", "crd"):
            x, y = getattr(la, part), getattr(lb, part)
            assert (x is None) == (y is None)
            if x is not None:
                assert x.dtype == np.int32 and not x.flags.writeable
                np.testing.assert_array_equal(x, y)
    assert a.vals.dtype == b.vals.dtype and not a.vals.flags.writeable
    np.testing.assert_array_equal(a.vals, b.vals)


@st.composite
def coo_inputs(draw):
    """(coords int64 ndim x nnz, values, shape): random entries, sometimes sorted and unique
    (canonical), sometimes repeated or shuffled, sometimes with long fibres (AVX2 blocks)."""
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=nd, max_size=nd)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(0, 60))
    if draw(st.booleans()):  # long fibres: the last mode dense under few prefixes
        shape = shape[:-1] + (draw(st.integers(8, 40)),)
    coords = np.array([rng.integers(0, s, n) for s in shape], np.int64).reshape(nd, n)
    kind = draw(st.sampled_from(["canonical", "canonical", "shuffled", "repeated"]))
    if kind == "canonical" and n:
        keys = np.unique(np.ravel_multi_index(coords, shape))
        coords = np.array(np.unravel_index(keys, shape), np.int64).reshape(nd, -1)
    elif kind == "shuffled" and n:
        coords = coords[:, rng.permutation(n)]
    elif kind == "repeated" and n:
        coords = np.concatenate([coords, coords[:, :1]], axis=1)
    vals = rng.standard_normal(coords.shape[1])
    return np.ascontiguousarray(coords), vals, shape


def _canonical(coords: np.ndarray, shape: tuple[int, ...]) -> bool:
    if coords.shape[1] < 2:
        return True
    return bool(np.all(np.diff(np.ravel_multi_index(coords, shape)) > 0))


@native
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coo_inputs())
def test_csf_from_sorted_equals_numpy_conversion(case) -> None:
    coords, vals, shape = case
    before_c, before_v = coords.copy(), vals.copy()
    got = convert_native.csf_from_sorted(coords, vals, shape, F64)
    np.testing.assert_array_equal(coords, before_c)  # only read
    np.testing.assert_array_equal(vals, before_v)
    if coords.shape[1] == 0 or not _canonical(coords, shape):
        assert got is None  # the numpy path sorts, sums duplicates or answers for no entries
        return
    assert got is not None
    same_tensor(got, SparseTensor.from_coo(coords, vals, shape))
    # both variants of the pass (AVX2 blocks and the scalar walk) write the same arrays
    nd, nnz = coords.shape
    outs = []
    for vector in (False, True) if convert_native.available() else (False,):
        from minijit.sparseauto.convert_native_x86 import csf_pass

        k = csf_pass(nd, vector=vector)
        crd, pos = np.zeros((nd, nnz), np.int32), np.zeros((max(nd - 1, 1), nnz + 1), np.int32)
        counts = np.zeros(nd, np.int64)
        assert k(coords, nnz, np.array(shape, np.int64), crd, pos, counts) == -1
        outs.append((crd, pos, counts))
    for x, y in zip(*outs, strict=True):
        np.testing.assert_array_equal(x, y)


@native
@settings(max_examples=60, deadline=None)
@given(coo_inputs(), st.data())
def test_einsum_on_coo_matches_preconverted(case, data) -> None:
    coords, vals, shape = case
    x = sparse.COO(coords, vals, shape=shape)  # pydata sorts and sums: canonical
    before = (x.coords.copy(), x.data.copy())
    t = interop.operand(x, "operand 0")
    same_tensor(t, SparseTensor.from_pydata(x))
    np.testing.assert_array_equal(x.coords, before[0])
    np.testing.assert_array_equal(x.data, before[1])
    assert x.coords.flags.writeable  # the caller's flags are left alone
    letters = "ijkl"[: len(shape)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    mats = [rng.standard_normal((n, 3)) for n in shape[1:]]
    expr = f"{letters},{','.join(c + 'z' for c in letters[1:])}->{letters[0]}z" if len(shape) > 1 else "i->i"
    got = minijit.einsum(expr, x, *mats)
    want = np.einsum(expr, x.todense(), *mats)
    np.testing.assert_allclose(np.asarray(got.todense() if hasattr(got, "todense") else got), want, atol=1e-12)


@native
def test_csf_from_sorted_refuses_bad_input_deep_in_a_fibre() -> None:
    """One fibre of 1000 values (AVX2 blocks) with one fault far inside: every kind of fault
    (down, repeat, past the size, negative, an upper coordinate changing) is caught."""
    n = 1000
    base = np.zeros((3, n), np.int64)
    base[2] = np.arange(n)
    shape = (2, 2, n)
    ok = convert_native.csf_from_sorted(base, np.ones(n), shape, F64)
    assert ok is not None and ok.storage[2].crd.shape == (n,)
    faults = {
        "down": (2, 501, 400),
        "repeat": (2, 501, 500),
        "past the size": (2, n - 1, n),
        "negative": (2, 0, -1),
        "upper up then the last down": (1, 700, 1),  # (0, 1, 700) then (0, 0, 701)
    }
    for what, (row, j, value) in faults.items():
        c = base.copy()
        c[row, j] = value
        assert convert_native.csf_from_sorted(c, np.ones(n), shape, F64) is None, what
    c = base.copy()
    c[0, 300:] = 1  # a legal new slice inside the block walk
    t = convert_native.csf_from_sorted(c, np.ones(n), shape, F64)
    assert t is not None
    same_tensor(t, SparseTensor.from_coo(c, np.ones(n), shape))


def test_refused_inputs_take_the_numpy_path() -> None:
    """Coordinates the pass does not take (int32, not C-contiguous, none) give None, and
    `interop.operand` still converts them (the numpy path)."""
    c = np.array([[0, 1], [1, 0]], np.int64)
    v = np.array([1.0, 2.0])
    assert convert_native.csf_from_sorted(c.astype(np.int32), v, (2, 2), F64) is None
    assert convert_native.csf_from_sorted(np.asfortranarray(np.tile(c, 2))[:, ::2], v, (2, 2), F64) is None
    assert convert_native.csf_from_sorted(np.zeros((2, 0), np.int64), np.zeros(0), (2, 2), F64) is None
    x = sparse.COO(c, v, shape=(2, 2))
    same_tensor(interop.operand(x, "operand 0"), SparseTensor.from_pydata(x))
    empty = sparse.COO(np.zeros((2, 0), np.int64), np.zeros(0), shape=(3, 4))
    same_tensor(interop.operand(empty, "operand 0"), SparseTensor.from_pydata(empty))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_scipy_operands_unchanged_path(fmt: str) -> None:
    """scipy operands keep `as_sparse`'s path (read-only views where the layout matches)."""
    a = sp.random(30, 20, density=0.2, format=fmt, random_state=3, dtype=np.float64)
    t = interop.operand(a, "operand 0")
    same_tensor(t, SparseTensor.from_scipy(a))
    d = np.random.default_rng(0).standard_normal((20, 5))
    np.testing.assert_allclose(minijit.einsum("ij,jk->ik", a, d), a.toarray() @ d, atol=1e-12)


def test_gcxs_operand() -> None:
    x = sparse.random((6, 5, 4), density=0.3, random_state=2, format="gcxs")
    same_tensor(interop.operand(x, "operand 0"), SparseTensor.from_pydata(x))


@native
@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(lambda nd: st.lists(st.integers(1, 6), min_size=nd, max_size=nd)),
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 2**32 - 1),
)
def test_coo_from_dense_matches_pydata(shape, dt, seed) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dt)
    a[rng.random(shape) < 0.4] = 0.0
    a[rng.random(shape) < 0.1] = -0.0
    a[rng.random(shape) < 0.05] = np.nan
    before = a.copy()
    coords, data = convert_native.coo_from_dense(a)
    np.testing.assert_array_equal(a, before)
    want = sparse.COO.from_numpy(a)
    assert coords.dtype == np.int64 and data.dtype == a.dtype
    np.testing.assert_array_equal(coords, want.coords)
    np.testing.assert_array_equal(data, want.data)  # NaN == NaN for array_equal's purposes here
    got = interop._coo_from_dense(a)
    np.testing.assert_array_equal(got.coords, want.coords)
    assert got.shape == want.shape


def test_coo_from_dense_refusals() -> None:
    assert convert_native.coo_from_dense(np.zeros((2, 3, 4, 5, 6))) is None  # more than 4 dims
    assert convert_native.coo_from_dense(np.zeros((3, 4), np.int64)) is None
    assert convert_native.coo_from_dense(np.zeros((4, 3)).T) is None  # not C-contiguous
    assert convert_native.coo_from_dense(np.zeros((0, 3))) is None
    z = np.zeros((3, 4)) if convert_native.available() else None
    if z is not None:
        coords, data = convert_native.coo_from_dense(z)
        assert coords.shape == (2, 0) and data.shape == (0,)


def test_generator_bounds() -> None:
    from minijit.sparseauto.convert_native_x86 import csf_pass, nonzero_pass

    with pytest.raises(ValueError, match="nd"):
        csf_pass(0)
    with pytest.raises(ValueError, match="nd"):
        csf_pass(convert_native.MAX_NDIM + 1)
    with pytest.raises(ValueError, match="nd"):
        nonzero_pass(5, "float64")
    with pytest.raises(ValueError, match="dtype"):
        nonzero_pass(2, "int64")


def test_numpy_fallback_lists_what_from_numpy_lists() -> None:
    """Arrays the pass does not take (5-D, not C-contiguous) go through numpy with the same
    answer as pydata's from_numpy (-0.0 and NaN stored, +0.0 not)."""
    rng = np.random.default_rng(5)
    for a in (rng.standard_normal((2, 3, 2, 2, 3)), rng.standard_normal((5, 4)).T):
        a[rng.random(a.shape) < 0.4] = 0.0
        a[rng.random(a.shape) < 0.2] = -0.0
        a[rng.random(a.shape) < 0.1] = np.nan
        got, want = interop._coo_from_dense(a), sparse.COO.from_numpy(a)
        np.testing.assert_array_equal(got.coords, want.coords)
        np.testing.assert_array_equal(got.data, want.data)


@native
@pytest.mark.parametrize("nd", [5, 6, 7])
def test_csf_from_sorted_many_modes(nd: int) -> None:
    """Five to seven modes keep their position counts in stack slots (no free registers)."""
    rng = np.random.default_rng(nd)
    shape = (3, 2, 3, 2, 3, 2, 40)[-nd:]
    keys = np.unique(rng.integers(0, int(np.prod(shape)), 300))
    coords = np.array(np.unravel_index(keys, shape), np.int64)
    vals = rng.standard_normal(keys.shape[0])
    same_tensor(convert_native.csf_from_sorted(coords, vals, shape, F64), SparseTensor.from_coo(coords, vals, shape))
    bad = coords.copy()
    bad[nd - 2, 150] = shape[nd - 2]  # past the size of an upper mode
    assert convert_native.csf_from_sorted(bad, vals, shape, F64) is None
