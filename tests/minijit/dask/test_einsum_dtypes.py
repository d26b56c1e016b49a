"""minijit.dask.einsum over every dtype numpy's einsum takes (bool, int8-int64, uint8-uint64,
float16, complex64/128, mixed, object, longdouble), in random chunkings, against np.einsum: bit for
bit for integer and bool results (wrap-around across blocks, logical or across blocks), within a
stated rounding bound for float16 and complex (`assert_numpy_result`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")  # installed by the test extra (pyproject.toml)
import dask  # noqa: E402

import minijit.dask as md  # noqa: E402
from tests.conftest import examples  # noqa: E402
from tests.minijit.dask.helpers import chunk_spec, dask_operands  # noqa: E402
from tests.minijit.einsum.strategies import expressions  # noqa: E402
from tests.minijit.einsum.test_grammar import grammar_expressions  # noqa: E402

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
#: the dtypes drawn: every integer, bool, float16 and complex
DTYPES = [*INTS, np.bool_, np.float16, np.complex64, np.complex128]


def threaded(x):
    return np.asarray(x.compute(scheduler="threads"))


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype, full_range: bool) -> np.ndarray:
    """Operand values of ``dtype``: integers over their whole range when ``full_range`` (products and
    sums wrap) else in -2..2 (0..2 unsigned: no overflow where they mix into a float16 result),
    random bools, floats in [-1, 1), complex with both parts in [-1, 1)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (int(info.min), int(info.max)) if full_range else (max(int(info.min), -2), 2)
        return rng.integers(lo, hi, shape, dtype=dt, endpoint=True)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "c":
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dt)
    return rng.uniform(-1, 1, shape).astype(dt)


def rounding_bound(subs: str, ops: list[np.ndarray], dt: np.dtype) -> np.ndarray:
    """Per element, the error a float or complex result of dtype ``dt`` may carry against the exact
    value (first order, recursive summation): (n + 2 k + 2) u |x|, four times that for complex
    (the modulus of the error of minijit's 4M and 3M complex routes: 2n-term real sums, 3M's
    weaker imaginary part), plus
    n times the smallest subnormal; n: product terms per element (some summed per block, the block
    sums added in the reduction tree), k: operands (products and the pairwise steps' rounded
    intermediates), u: unit roundoff of ``dt``, |x|: the einsum of the operands' absolute values."""
    info = np.finfo(dt)
    hi = np.complex128 if dt.kind == "c" else np.float64
    scale = np.einsum(subs, *[np.abs(o.astype(dt).astype(hi)) for o in ops])
    terms = np.einsum(subs, *[np.ones(o.shape) for o in ops])
    n = float(np.max(terms, initial=1))
    u = float(info.eps) / 2
    return (4 if dt.kind == "c" else 1) * (n + 2 * len(ops) + 2) * u * scale + n * float(info.smallest_subnormal)


def assert_numpy_result(got: np.ndarray, subs: str, ops: list[np.ndarray], **kwargs) -> None:
    """``got`` has np.einsum's shape and dtype; integer and bool results its values bit for bit;
    float and complex results lie within `rounding_bound` of the exact value (the operands cast to
    the result dtype, as numpy's einsum casts them, then contracted in float64/complex128) and
    within twice that of numpy's own result."""
    want = np.asarray(np.einsum(subs, *ops, **kwargs))
    if "dtype" in kwargs and want.dtype != np.dtype(kwargs["dtype"]):
        # numpy returns a view of a lone operand (a permutation or diagonal) and ignores dtype=;
        # minijit.dask (never a view) returns dtype, as numpy does for every other call
        assert len(ops) == 1, subs
        want = np.asarray(np.einsum(subs, ops[0].astype(kwargs["dtype"])))
    assert got.shape == want.shape and got.dtype == want.dtype, (subs, got.shape, got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want), f"{subs}: {got} != {want}"
        return
    hi = np.complex128 if want.dtype.kind == "c" else np.float64
    exact = np.einsum(subs, *[o.astype(want.dtype).astype(hi) for o in ops])
    bound = rounding_bound(subs, ops, want.dtype)
    err = np.abs(got.astype(hi) - exact)
    assert not (err > bound).any(), f"{subs} {got.dtype}: error {err.max()} > bound {bound.max()}"
    assert not (np.abs(got.astype(hi) - want.astype(hi)) > 2 * bound).any(), (subs, got, want)


@st.composite
def operand_dtypes(draw, n: int) -> list:
    """One dtype for every operand (mostly), or one drawn per operand (numpy's type promotion)."""
    if draw(st.integers(0, 2)):
        return [draw(st.sampled_from(DTYPES))] * n
    return [draw(st.sampled_from(DTYPES)) for _ in range(n)]


def draw_operands(data, shapes, seed: int):
    dtypes = data.draw(operand_dtypes(len(shapes)))
    full = np.result_type(*dtypes).kind in "iu"  # integer results: every value, wrapping as numpy's
    rng = np.random.default_rng(seed)
    ops = [values(rng, s, dt, full) for s, dt in zip(shapes, dtypes, strict=True)]
    # sometimes a wider result dtype=, where numpy's default 'safe' casting allows it
    wide = data.draw(st.sampled_from([None, None, np.int64, np.float64, np.complex128]))
    if wide is not None and not all(np.can_cast(o.dtype, wide, "safe") for o in ops):
        wide = None
    return ops, ({"dtype": wide} if wide is not None else {})


@settings(max_examples=examples(60), deadline=None)
@given(expressions(min_ops=1, max_ops=3, max_indices=5, max_size=9, max_product=2000), st.data())
def test_drawn_dtypes_and_chunkings_match_numpy(expr, data):
    subs, shapes = expr
    ops, kwargs = draw_operands(data, shapes, seed=len(subs))
    dops = dask_operands(data.draw, ops)
    chunks, size = data.draw(chunk_spec(subs))
    split_every = data.draw(st.sampled_from([None, 2, 3]))
    with dask.config.set({"array.chunk-size": size}):
        r = md.einsum(subs, *dops, chunks=chunks, split_every=split_every, **kwargs)
    assert r.dtype == kwargs.get("dtype", np.result_type(*ops))  # the graph's dtype is the result's
    assert_numpy_result(threaded(r), subs, ops, **kwargs)


@settings(max_examples=examples(25), deadline=None)
@given(grammar_expressions(), st.sampled_from(DTYPES), st.data())
def test_numpy_grammar_in_every_dtype(expr, dtype, data):
    """``...``, diagonals, traces, implicit outputs and size-1 broadcasting, in each dtype."""
    subs, shapes = expr
    rng = np.random.default_rng(len(subs))
    ops = [values(rng, s, dtype, True) for s in shapes]
    dops = dask_operands(data.draw, ops)
    with dask.config.set({"array.chunk-size": "64B"}):
        got = threaded(md.einsum(subs, *dops, chunks=data.draw(st.sampled_from([None, "input", 1, 2]))))
    assert_numpy_result(got, subs, ops)


def test_bool_sums_are_logical_or_across_blocks():
    """numpy's bool einsum: and of the factors, or of the terms. Every block of the contracted
    index its own task (chunks 1): the reduction tree ors the partial blocks, the result is bool
    (dask.array's own einsum returns int64 counts here)."""
    rng = np.random.default_rng(11)
    A, B = rng.random((5, 9)) < 0.3, rng.random((9, 4)) < 0.3
    A[0] = False  # a row with no term: False
    A[1], B[:, 0] = True, True  # a row/column whose every term is True: True (not 9)
    for split_every in (None, 2, 3):
        r = md.einsum("ij,jk->ik", A, B, chunks={"i": 2, "j": 1, "k": 3}, split_every=split_every)
        got = threaded(r)
        assert r.dtype == got.dtype == np.bool_
        assert np.array_equal(got, np.einsum("ij,jk->ik", A, B))
        assert np.array_equal(got, (A.astype(int) @ B.astype(int)) > 0)
    assert not got[0].any() and got[1, 0]
    full = threaded(md.einsum("i,i->", da.ones(7, dtype=bool, chunks=1), np.ones(7, bool), chunks="input"))
    assert full.dtype == np.bool_ and full == np.True_


def test_integers_wrap_across_blocks_as_numpy():
    """Sums that overflow the result dtype wrap as numpy's einsum wraps them, whatever the blocks:
    200 int8 ones are -56; uint64 near its top wraps to small values; int32 products wrap."""
    a = np.ones((3, 200), np.int8)
    got = threaded(md.einsum("ij,j->i", da.from_array(a, chunks=50), np.ones(200, np.int8), chunks="input"))
    assert got.dtype == np.int8 and np.array_equal(got, [-56] * 3)
    top = np.full(6, np.iinfo(np.uint64).max - 1, np.uint64)
    got = threaded(md.einsum("i,i->", da.from_array(top, chunks=2), np.ones(6, np.uint64), chunks="input"))
    assert got.dtype == np.uint64 and got == np.einsum("i,i->", top, np.ones(6, np.uint64)) == np.uint64(2**64 - 12)
    big = np.full((4, 6), 70000, np.int32)
    got = threaded(md.einsum("ij,jk->ik", big, big.T, chunks=2))
    assert got.dtype == np.int32 and np.array_equal(got, np.einsum("ij,jk->ik", big, big.T))


def test_dtype_keyword_and_casting():
    """``dtype`` widens before the product (int8 operands summed in int64 do not wrap; bool
    operands counted); the default casting is numpy's 'safe' (TypeError naming the rule), and
    ``casting='unsafe'`` narrows as numpy does."""
    a = np.full((3, 200), 1, np.int8)
    got = threaded(md.einsum("ij,kj->ik", da.from_array(a, chunks=40), a, dtype=np.int64, chunks="input"))
    assert got.dtype == np.int64 and np.array_equal(got, np.full((3, 3), 200))
    b = np.random.default_rng(12).random((6, 8)) < 0.5
    got = threaded(md.einsum("ij,kj->ik", b, b, dtype=np.int64, chunks=2))
    assert np.array_equal(got, b.astype(np.int64) @ b.T.astype(np.int64))
    x = np.arange(12, dtype=np.int64).reshape(3, 4) * 1_000_003
    with pytest.raises(TypeError, match="casting rule 'safe'"):
        md.einsum("ij,kj->ik", x, x, dtype=np.int32)
    c = (np.arange(6) + 1j).reshape(2, 3)
    for fn in (np.einsum, md.einsum):  # complex to float: not the same kind, for numpy too
        with pytest.raises(TypeError, match="same_kind"):
            fn("ij,kj->ik", c, c, dtype=np.float64, casting="same_kind")
    got = threaded(md.einsum("ij,kj->ik", x, x, dtype=np.int16, casting="unsafe", chunks=1))
    assert_numpy_result(got, "ij,kj->ik", [x, x], dtype=np.int16, casting="unsafe")
    got = threaded(md.einsum("ij,kj->ik", c, c.real.astype(np.float32), chunks=1))  # complex128 result
    assert_numpy_result(got, "ij,kj->ik", [c, c.real.astype(np.float32)])
    f = np.random.default_rng(13).random((4, 4))
    got = threaded(md.einsum("ij,jk->ik", f, f, dtype=np.float32))  # float32 <-> float64: minijit's default
    assert got.dtype == np.float32


def test_float16_complex_and_longdouble_long_sums():
    """A contracted index of 4096 in blocks of 64: float16 within its bound, complex64/complex128
    and longdouble within theirs (the blocks' sums added in the result dtype)."""
    rng = np.random.default_rng(14)
    for dt in (np.float16, np.complex64, np.complex128, np.longdouble):
        A, B = values(rng, (3, 4096), dt, True), values(rng, (4096, 2), dt, True)
        r = md.einsum("ij,jk->ik", A, B, chunks={"j": 64})
        assert r.dtype == dt
        assert_numpy_result(threaded(r), "ij,jk->ik", [A, B])


def test_object_operands_are_numpys():
    """Object arrays of Python ints: exact (no wrap-around), blocks summed with Python's +."""
    a = np.array([[2**70, 3], [5, -(2**65)]], dtype=object)
    got = threaded(md.einsum("ij,jk->ik", a, a, chunks=1))
    want = np.einsum("ij,jk->ik", a, a)
    assert got.dtype == object and got.tolist() == want.tolist()


def test_integer_tensordot_matmul_and_zero_size():
    rng = np.random.default_rng(15)
    A = rng.integers(-100, 100, (5, 7), dtype=np.int16)
    B = rng.integers(0, 200, (7, 3), dtype=np.uint8)
    got = threaded(md.matmul(da.from_array(A, chunks=2), B, chunks="input"))
    assert got.dtype == np.int16 and np.array_equal(got, np.matmul(A, B))
    got = threaded(md.tensordot(A, B, axes=1, chunks=3))
    assert np.array_equal(got, np.tensordot(A, B, axes=1))
    got = threaded(md.einsum("ij,jk->ik", np.ones((3, 0), bool), np.ones((0, 2), bool)))
    assert got.dtype == np.bool_ and np.array_equal(
        got, np.einsum("ij,jk->ik", np.ones((3, 0), bool), np.ones((0, 2), bool))
    )


def test_dtypes_numpy_refuses_are_refused_before_a_graph():
    a = da.ones((4, 5), chunks=2)
    with pytest.raises(TypeError, match="operand 1 has dtype datetime64"):
        md.einsum("ij,jk->ik", a, np.zeros((5, 3), "datetime64[s]"))
    with pytest.raises(TypeError, match="operand 0 has dtype <U2"):
        md.matmul(np.zeros((2, 2), "U2"), a)
    with pytest.raises(TypeError, match="dtype timedelta64"):
        md.einsum("ij,jk->ik", a, a.T, dtype="m8[s]", casting="unsafe")
    with warnings.catch_warnings():  # numpy refuses them too
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError):
            np.einsum("ij,jk->ik", np.ones((4, 5)), np.zeros((5, 3), "datetime64[s]"))
