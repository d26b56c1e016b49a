"""`minijit.tensordot` / `minijit.transpose` against numpy's, and minijit as an opt_einsum backend:
``opt_einsum.contract(expr, *ops, backend="minijit")`` against opt_einsum's own numpy backend on
random expressions (opt_einsum's ``rand_equation``), float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import minijit
from tests.conftest import examples

oe = pytest.importorskip("opt_einsum")
oe_testing = pytest.importorskip("opt_einsum.testing")
DTYPES = [np.float32, np.float64]


def _tol(dtype):
    return 2e-4 if dtype == np.float32 else 1e-10


@st.composite
def tensordot_cases(draw):
    """Two arrays and axes in every form numpy takes: an int, a pair of sequences (negative
    axes too), a pair of ints."""
    nd_a, nd_b = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    n = draw(st.integers(0, min(nd_a, nd_b)))
    shape_a = draw(st.lists(st.integers(1, 4), min_size=nd_a, max_size=nd_a))
    pick_a = draw(st.permutations(range(nd_a)))[:n]
    pick_b = draw(st.permutations(range(nd_b)))[:n]
    shape_b = draw(st.lists(st.integers(1, 4), min_size=nd_b, max_size=nd_b))
    for i, j in zip(pick_a, pick_b, strict=True):
        shape_b[j] = shape_a[i]
    form = draw(st.sampled_from(["int", "pair", "negative", "scalar-pair"]))
    if form == "int":
        shape_b[:n] = shape_a[nd_a - n :] if n else []
        axes = n
    elif form == "negative":
        axes = ([i - nd_a for i in pick_a], [j - nd_b for j in pick_b])
    elif form == "scalar-pair" and n == 1:
        axes = (pick_a[0], pick_b[0])
    else:
        axes = (list(pick_a), tuple(pick_b))
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = rng.uniform(-1, 1, shape_a).astype(dtype)
    b = rng.uniform(-1, 1, shape_b).astype(dtype)
    return a, b, axes


@settings(max_examples=examples(60), deadline=None)
@given(tensordot_cases())
def test_tensordot_matches_numpy(case):
    a, b, axes = case
    want = np.tensordot(a, b, axes=axes)
    got = minijit.tensordot(a, b, axes=axes)
    assert np.shape(got) == want.shape and np.asarray(got).dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=_tol(a.dtype), atol=_tol(a.dtype))


def test_tensordot_default_axes_and_errors():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 5, 2))
    np.testing.assert_allclose(minijit.tensordot(a, b), np.tensordot(a, b), rtol=1e-12)  # axes=2
    with pytest.raises(ValueError, match="shape-mismatch for sum"):
        minijit.tensordot(a, b, axes=([0], [0]))
    with pytest.raises(ValueError, match="out of bounds"):
        minijit.tensordot(a, b, axes=([3], [0]))
    with pytest.raises(ValueError, match="different lengths"):
        minijit.tensordot(a, b, axes=([1, 2], [0]))
    with pytest.raises(ValueError, match="repeated axis"):
        minijit.tensordot(a, a, axes=([1, 1], [1, 2]))
    with pytest.raises(ValueError, match="axes must be >= 0"):
        minijit.tensordot(a, b, axes=-1)
    with pytest.raises(TypeError, match="int or a pair"):
        minijit.tensordot(a, b, axes="ij")


def test_transpose_is_numpys_view():
    a = np.arange(24.0).reshape(2, 3, 4)
    for axes in (None, (2, 0, 1), (-1, 0, 1), [1, 0, 2]):
        got = minijit.transpose(a, axes)
        np.testing.assert_array_equal(got, np.transpose(a, axes))
        assert np.shares_memory(got, a)
    with pytest.raises(ValueError):
        minijit.transpose(a, (0, 0, 1))
    np.testing.assert_array_equal(minijit.transpose([[1.0, 2.0]]), [[1.0], [2.0]])


@st.composite
def contractions(draw):
    n = draw(st.integers(2, 5))
    regularity = draw(st.integers(2, 3))
    n_out = draw(st.integers(0, 2))
    seed = draw(st.integers(0, 2**16))
    try:
        expr, shapes = oe_testing.rand_equation(n, regularity, n_out=n_out, d_min=1, d_max=4, seed=seed)
    except ValueError:
        assume(False)
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(seed)
    return expr, [rng.uniform(-1, 1, s).astype(dtype) for s in shapes], dtype


@settings(max_examples=examples(30), deadline=None)
@given(contractions())
def test_opt_einsum_backend_matches_its_numpy_backend(case):
    expr, ops, dtype = case
    def lookups() -> int:  # plan lookups of both tiers: the specialised plans and the generic tier's
        info = minijit.cache_info()
        return sum(info[c]["hits"] + info[c]["misses"] for c in ("einsum.plans", "einsum.generic"))

    before = lookups()
    got = oe.contract(expr, *ops, backend="minijit")
    want = oe.contract(expr, *ops, backend="numpy")
    assert lookups() > before  # minijit computed it
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == dtype
    scale = oe.contract(expr, *[np.abs(o) for o in ops], backend="numpy")
    err = np.abs(np.asarray(got, np.float64) - want)
    assert (err <= _tol(dtype) * (np.abs(scale) + 1)).all(), f"{expr}: max error {err.max()}"


def test_opt_einsum_finds_the_backend_functions():
    from opt_einsum.backends import dispatch

    for name in ("tensordot", "transpose", "einsum"):
        assert dispatch.get_func(name, "minijit") is getattr(minijit, name)
