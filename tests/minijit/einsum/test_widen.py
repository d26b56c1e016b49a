"""`minijit.einsum` on the dtypes `minijit.einsum.widen` computes on other kernels: complex64/128
(the real 4M formulation on float32/float64), float16 (widened to float32), bool (0/1 float32)
and int8/int16/uint8-uint64 and mixed integer kinds (int32/int64 mod 2^n), against numpy.

Integers and bool: numpy's result bit for bit (wrap-around included). float16 and complex, against
the exact result (float64 / complex128 on the same operands) within the bound `assert_bound`
states. ``out=``/``dtype=``/``casting=``/``order=`` as numpy's, explain naming the path, the 4M
expansion shown to be what computes the result, emulated NEON/SVE included. Complex steps large
enough for the 3M (Gauss) route (`widen.GAUSS_MIN`): against the exact product within the 3M
bound `assert_bound_3m` states, the three real products shown to run and to be what computes it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minijit
from minijit.einsum import dtypes, widen
from minijit.einsum.parse import expand_subscripts
from minijit.targets import native
from tests.conftest import examples

from .strategies import expressions, typed_operands

NEW = [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.float16, np.complex64, np.complex128]
INTS_NATIVE = "s32" in native().int_dtypes
#: unit roundoff of each compute precision
UNIT = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}


draw = typed_operands  # operands of a dtype over its whole range (strategies)


def assert_bound(got, subs: str, ops: list[np.ndarray], result: np.dtype) -> None:
    """float16 and complex results against the exact result ``ref`` (float64/complex128 on the
    same operands). The compiled part (float32 or float64, unit roundoff u) is a chain of
    pairwise sums of products: each step's error is at most gamma_n * (its scale) with n at most
    N = the product of every index size (times 2 for complex: the (re, im) axis is summed too),
    so for ``ops`` operands |c - ref| <= 1.01 * ops * 2N * u * scale, scale the same einsum on
    |re| + |im| (an upper bound on the sum of |products|). float16: one rounding more,
    <= 2^-11 |ref| + 2^-25 (subnormal). Componentwise (re and im each) for complex."""
    exact = np.einsum(subs, *[o.astype(np.complex128 if o.dtype.kind == "c" else np.float64) for o in ops])
    absval = [np.abs(o.real).astype(np.float64) + np.abs(o.imag if o.dtype.kind == "c" else 0) for o in ops]
    scale = np.einsum(subs, *absval)
    inputs, _ = expand_subscripts(subs, tuple(o.ndim for o in ops))
    sizes: dict[str, int] = {}
    for sub, o in zip(inputs, ops, strict=True):
        for c, n in zip(sub, o.shape, strict=True):
            sizes[c] = max(sizes.get(c, 1), n)
    n = 2 * math.prod(sizes.values())
    u = UNIT[np.dtype(np.float32 if result in (np.float16, np.float32, np.complex64) else np.float64)]
    bound = 1.01 * len(ops) * n * u * scale + 1e-300
    if result == np.float16:
        bound = bound * (1 + 2.0**-11) + 2.0**-11 * np.abs(exact) + 2.0**-25
    got = np.asarray(got)
    assert got.dtype == result and got.shape == exact.shape, (subs, got.dtype, got.shape)
    for part in (np.real, np.imag):
        err = np.abs(part(got.astype(np.complex128)) - part(exact))
        assert (err <= bound).all(), f"{subs}: error {err.max()} over the bound {bound.max()}"


def check(subs, ops, target="auto", **kw) -> None:
    """minijit's outcome against numpy's: the same error type, or numpy's dtype and shape and
    numpy's values (bit for bit for integers and bool, within `assert_bound` for the rest)."""
    try:
        want = np.einsum(subs, *ops, **kw)
    except Exception as e:  # noqa: BLE001 - the error type is compared
        with pytest.raises(type(e)):
            minijit.einsum(subs, *ops, target=target, **kw)
        return
    got = minijit.einsum(subs, *ops, target=target, **kw)
    want = np.asarray(want)
    assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape, (subs, np.asarray(got).dtype)
    if want.dtype.kind in "fc":
        cast = kw.get("dtype")  # numpy casts every operand to dtype= first; integers to the result's kind
        ref = [
            o.astype(cast) if cast is not None else o.astype(want.dtype) if o.dtype.kind in "biu" else o for o in ops
        ]
        assert_bound(got, subs, ref, want.dtype)
    else:
        assert np.array_equal(got, want), subs


def compiled(text: str) -> bool:
    return text.startswith("minijit compiled:")


@given(
    expr=expressions(min_ops=1, max_ops=3, max_indices=5, max_size=7, max_product=1024),
    dtype=st.sampled_from(NEW),
    optimize=st.sampled_from([False, True, "greedy"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_new_dtypes_against_numpy(expr, dtype, optimize, seed):
    subs, shapes = expr
    ops = draw(shapes, dtype, seed)
    check(subs, ops, optimize=optimize)
    text = minijit.einsum(subs, *ops, optimize=optimize, explain=True)
    viewed = dtypes._is_view(subs, tuple(ops))  # numpy's einsum returns a view of the operand
    native_ints = INTS_NATIVE or np.dtype(dtype).kind not in "iu"
    assert compiled(text) or viewed or not native_ints, text


@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=5, max_size=6, max_product=512),
    kinds=st.lists(
        st.sampled_from([np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.bool_]),
        min_size=2,
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mixed_integer_kinds_bit_for_bit(expr, kinds, seed):
    subs, shapes = expr
    ops = [draw([s], kinds[i % len(kinds)], seed + i)[0] for i, s in enumerate(shapes)]
    check(subs, ops)
    rt = np.result_type(*ops)
    text = minijit.einsum(subs, *ops, explain=True)
    if rt.kind in "iub" and INTS_NATIVE:
        assert compiled(text), text
    elif rt.kind == "f":  # uint64 with a signed int: numpy's float64 rule, numpy's einsum
        assert text.startswith("numpy.einsum:"), text


@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=5, max_size=6, max_product=512),
    kinds=st.lists(st.sampled_from([np.complex64, np.complex128, np.float32, np.float64, np.float16]), min_size=2),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_complex_and_float16_mixed_with_real_floats(expr, kinds, seed):
    subs, shapes = expr
    ops = [draw([s], kinds[i % len(kinds)], seed + i)[0] for i, s in enumerate(shapes)]
    check(subs, ops)


def test_wraparound_at_the_edges():
    for dt in (np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(dt)
        a = np.full((5, 9), info.max, dt)
        a[1] = info.min
        b = np.full((9, 4), info.max - 1, dt)
        check("ij,jk->ik", [a, b])
        check("ij->", [a])
        check("ij,ij->i", [a, a])
    got = minijit.einsum("i,i->", np.array([250, 7], np.uint8), np.array([250, 7], np.uint8))
    assert got == np.uint8((250 * 250 + 49) % 256) and got.dtype == np.uint8


@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.float16, np.complex64, np.complex128])
def test_gemm_sized_operands(dtype):
    """Shapes large enough for packed, remainder and threaded blocks of the kernels underneath."""
    a, b = draw([(131, 257), (257, 75)], dtype, 8)
    check("ij,jk->ik", [a, b])
    check("bij,bkj->bik", [a[:96].reshape(3, 32, 257), b.T[:63].reshape(3, 21, 257)])


def test_bool_is_logical_and_or():
    rng = np.random.default_rng(3)
    a, b = rng.random((40, 300)) < 0.01, rng.random((300, 30)) < 0.01  # sparse: many all-false sums
    for subs, ops in (("ij,jk", [a, b]), ("ij->i", [a]), ("ij->", [a]), ("ij,jk,kl->il", [a, b, b.T])):
        want = np.einsum(subs, *ops)
        got = minijit.einsum(subs, *ops)
        assert got.dtype == np.bool_ and np.array_equal(got, want), subs
    assert np.einsum("ij,jk", a, b).any() and not np.einsum("ij,jk", a, b).all()  # both values occur
    check("ij,jk", [a, b], dtype=np.int64)  # counts: the integer path
    assert "logical and/or" in minijit.einsum("ij,jk", a, b, explain=True)


def test_explain_names_the_path():
    z = draw([(6, 5), (5, 4)], np.complex64, 0)
    text = minijit.einsum("ij,jk->ik", *z, explain=True)
    assert text.startswith("minijit compiled: complex64 via the real 4M formulation on float32 kernels"), text
    assert "4M" in text.splitlines()[1]
    g = widen.GAUSS_MIN  # large enough for 3M: three real products named
    big = minijit.einsum("ij,jk->ik", *draw([(g, g), (g, g)], np.complex64, 0), explain=True).splitlines()
    assert big[0] == "minijit compiled: complex64 via 3M on float32 kernels", big
    assert [line.split("(3M: ")[1] for line in big[1:]] == ["re.re)", "im.im)", "(re+im).(re+im))"], big
    z2 = [x.astype(np.complex128) for x in z]
    assert "complex128 via the real 4M formulation on float64 kernels" in minijit.einsum("ij,jk", *z2, explain=True)
    h = draw([(6, 5), (5, 4)], np.float16, 0)
    assert "widened to float32" in minijit.einsum("ij,jk", *h, explain=True)
    assert "rounded once to float16" in minijit.einsum("ij,jk", *h, explain=True)
    i8 = draw([(6, 5), (5, 4)], np.int8, 0)
    if INTS_NATIVE:
        assert "int8 widened to int32" in minijit.einsum("ij,jk", *i8, explain=True)
        u64 = draw([(6, 5), (5, 4)], np.uint64, 0)
        assert "uint64 viewed as int64" in minijit.einsum("ij,jk", *u64, explain=True)
    # what stays numpy's: a one-operand view, longdouble, clongdouble, object, complex with ints
    assert minijit.einsum("ij->ji", z[0], explain=True).startswith("numpy.einsum:")
    for ops in ([z[0].astype(np.clongdouble), z[1]], [h[0].astype(np.longdouble), h[1]], [z[0], i8[1]]):
        assert minijit.einsum("ij,jk", *ops, explain=True).startswith("numpy.einsum:"), [o.dtype for o in ops]
        check("ij,jk", ops)


def test_4m_expansion_computes_the_result(monkeypatch):
    a, b = draw([(7, 5), (5, 6)], np.complex64, 1)
    seen = []

    def spy(subs, *xs, optimize=True):
        seen.append((subs, [x.dtype for x in xs], [x.shape for x in xs]))
        return minijit.einsum(subs, *xs, optimize=optimize)

    r = widen.route("ij,jk->ik", (a, b), None, None, None, None, "native")
    got = widen.run(r, "ij,jk->ik", [a, b], True, spy)
    assert_bound(got, "ij,jk->ik", [a, b], np.dtype(np.complex64))
    assert len(seen) == 1 and seen[0][1] == [np.float32, np.float32], seen
    # A (re, im) last, merged with its summed contiguous j: (i, 2j); B expanded: (j, r, k, s) -> (2j, k, s)
    assert seen[0][2] == [(7, 10), (10, 6, 2)], seen
    e = widen.expand_4m(b, 1)
    np.testing.assert_array_equal(e[:, 0, :, 0], b.real)
    np.testing.assert_array_equal(e[:, 1, :, 0], -b.imag)
    np.testing.assert_array_equal(e[:, 0, :, 1], b.imag)
    np.testing.assert_array_equal(e[:, 1, :, 1], b.real)
    # a wrong expansion (the sign of -im dropped) must change minijit's result: it is what computes it
    good = widen.expand_4m

    def conjugated(x, k):
        y = good(x, k)
        np.moveaxis(y, k, -2)[..., 1, 0] *= -1
        return y

    monkeypatch.setattr(widen, "expand_4m", conjugated)
    bad = minijit.einsum("ij,jk->ik", a, b)
    assert not np.allclose(bad, np.einsum("ij,jk->ik", a, b), atol=1e-3)


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u)."""
    return n * u / (1 - n * u)


def assert_bound_3m(got, subs: str, a: np.ndarray, b: np.ndarray, k: int) -> None:
    """A 3M (Gauss) step ``subs`` of complex ``a``, ``b`` summing ``k`` terms, against the exact
    complex128 product, componentwise (docs/decisions.md; Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., chapter 23, the 3M method), u the unit roundoff of the
    real kernels:
    re: |c - ref| <= gamma_{k+1} (|Ar||Br| + |Ai||Bi|) (as 4M's real part);
    im: |c - ref| <= gamma_{k+4} ((|Ar|+|Ai|)(|Br|+|Bi|) + |Ar||Br| + |Ai||Bi|), which, unlike
    4M's gamma_{k+1} (|Ar||Bi| + |Ai||Br|), does not shrink with the imaginary parts.
    The bound is computed in float64 (1.01 covers its own rounding)."""
    u = UNIT[np.dtype(a.real.dtype)]
    ar, ai, br, bi = (np.abs(x).astype(np.float64) for x in (a.real, a.imag, b.real, b.imag))
    exact = np.einsum(subs, a.astype(np.complex128), b.astype(np.complex128))
    same = np.einsum(subs, ar, br) + np.einsum(subs, ai, bi)
    re_bound = 1.01 * gamma(k + 1, u) * same
    im_bound = 1.01 * gamma(k + 4, u) * (np.einsum(subs, ar + ai, br + bi) + same)
    got = np.asarray(got)
    assert got.dtype == a.dtype and got.shape == exact.shape, (subs, got.dtype, got.shape)
    err_re = np.abs(got.real - exact.real)
    err_im = np.abs(got.imag - exact.imag)
    assert (err_re <= re_bound).all(), f"{subs}: re error {err_re.max()} over the bound {re_bound.max()}"
    assert (err_im <= im_bound).all(), f"{subs}: im error {err_im.max()} over the bound {im_bound.max()}"


#: GEMM-like complex steps: (subscripts, operand shapes from (m, n, k, batch)), a transposed
#: operand and a batch included
GEMM_LIKE = [
    ("ij,jk->ik", lambda m, n, k, t: [(m, k), (k, n)]),
    ("ij,kj->ik", lambda m, n, k, t: [(m, k), (n, k)]),
    ("ji,jk->ki", lambda m, n, k, t: [(k, m), (k, n)]),
    ("bij,bjk->bik", lambda m, n, k, t: [(t, m, k), (t, k, n)]),
]


@given(
    form=st.sampled_from(GEMM_LIKE),
    mnk=st.tuples(*[st.integers(widen.GAUSS_MIN, widen.GAUSS_MIN + 40)] * 3),
    batch=st.integers(1, 2),
    dtype=st.sampled_from([np.complex64, np.complex128]),
    imag_scale=st.sampled_from([1.0, 1e-3]),  # small imaginary parts: where 3M's im bound is weak
    transposed=st.booleans(),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_3m_route_against_the_exact_product(form, mnk, batch, dtype, imag_scale, transposed, seed):
    subs, shapes = form
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    parts = [(rng.uniform(-1, 1, s), imag_scale * rng.uniform(-1, 1, s)) for s in shapes(m, n, k, batch)]
    a, b = ((re + 1j * im).astype(dtype) for re, im in parts)
    if transposed:  # a strided operand: B read through a transposed copy's view
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    text = minijit.einsum(subs, a, b, explain=True)
    real = "float32" if dtype == np.complex64 else "float64"
    assert text.startswith(f"minijit compiled: {np.dtype(dtype).name} via 3M on {real} kernels"), text
    got = minijit.einsum(subs, a, b)
    assert_bound_3m(got, subs, a, b, k)
    out = np.zeros_like(got)
    assert minijit.einsum(subs, a, b, out=out) is out
    assert_bound_3m(out, subs, a, b, k)


def test_3m_runs_three_real_products_above_the_threshold_and_4m_below():
    g = widen.GAUSS_MIN
    a, b = draw([(g + 3, g), (g, g + 1)], np.complex128, 9)
    seen = []

    def spy(subs, *xs, optimize=True):
        seen.append((subs, [x.dtype for x in xs], [x.shape for x in xs]))
        return minijit.einsum(subs, *xs, optimize=optimize)

    r = widen.route("ij,jk->ik", (a, b), None, None, None, None, "native")
    assert widen.gemm_sizes("ij", a.shape, "jk", b.shape, "ik") == (g + 3, g + 1, g)
    assert widen.gemm_sizes("bij", (2, 3, 4), "bjk", (2, 4, 5), "bik") == (3, 5, 4)  # the batch counts in none
    got = widen.run(r, "ij,jk->ik", [a, b], True, spy)
    assert_bound_3m(got, "ij,jk->ik", a, b, g)
    assert [s for s, _, _ in seen] == ["ij,jk->ik"] * 3, seen  # T1, T2, T3 on planar parts
    assert all(d == [np.float64, np.float64] and sh == [a.shape, b.shape] for _, d, sh in seen), seen
    # one dim below the threshold (k = g - 1): one real einsum, the 4M expansion
    seen.clear()
    got = widen.run(r, "ij,jk->ik", [a[:, 1:], b[1:]], True, spy)
    assert_bound(got, "ij,jk->ik", [a[:, 1:], b[1:]], np.dtype(np.complex128))
    assert len(seen) == 1 and seen[0][2] == [(g + 3, 2 * (g - 1)), (2 * (g - 1), g + 1, 2)], seen
    assert "4M" in minijit.einsum("ij,jk->ik", a[:, 1:], b[1:], explain=True).splitlines()[0]
    # the three products are what computes the result: a wrong third one (zeros) changes only im
    calls = []

    def third_wrong(subs, *xs, optimize=True):
        calls.append(subs)
        res = minijit.einsum(subs, *xs, optimize=optimize)
        return np.zeros_like(res) if len(calls) == 3 else res

    bad = widen.run(r, "ij,jk->ik", [a, b], True, third_wrong)
    want = a @ b
    np.testing.assert_allclose(bad.real, want.real, rtol=1e-10, atol=1e-10)
    assert not np.allclose(bad.imag, want.imag, atol=1e-3)
    # a three-operand path: the GEMM step runs 3M, the outer product with c (k = 1) 4M
    c = draw([(3,)], np.complex128, 10)[0]
    text = minijit.einsum("ij,jk,l->ikl", a, b, c, explain=True).splitlines()
    assert (
        text[0]
        == "minijit compiled: complex128 via 3M on float64 kernels (the smaller steps via the real 4M formulation)"
    )
    assert [("3M" in line, "4M" in line) for line in text[1:]] == [(True, False)] * 3 + [(False, True)], text
    check("ij,jk,l->ikl", [a, b, c])


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")  # dtype=float32 with complex operands
def test_out_dtype_casting_and_order_as_numpy():
    z = draw([(6, 5), (5, 4)], np.complex64, 2)
    h = draw([(6, 5), (5, 4)], np.float16, 2)
    i8 = draw([(6, 5), (5, 4)], np.int8, 2)
    for ops in (z, h, i8):
        rt = np.result_type(*ops)
        out = np.zeros((6, 4), rt)
        assert minijit.einsum("ij,jk->ik", *ops, out=out) is out
        check("ij,jk->ik", ops)
        want = np.einsum("ij,jk->ik", *ops)
        if rt.kind in "fc":
            assert_bound(out, "ij,jk->ik", ops, rt)
        else:
            np.testing.assert_array_equal(out, want)
        for kw in (
            {"out": np.zeros((6, 5), rt)},  # wrong shape: numpy's error
            {"out": np.zeros((6, 4), np.float64 if rt.kind != "f" else np.int64)},  # other dtype: numpy's rules
            {"dtype": np.complex128},
            {"dtype": np.float32, "casting": "no"},
            {"dtype": np.float32, "casting": "unsafe"},
            {"dtype": np.int16, "casting": "same_kind"},
            {"dtype": np.float64, "casting": "safe"},
            {"order": "F"},
            {"order": "A"},
        ):
            check("ij,jk->ik", ops, **kw)
            if "order" in kw:
                got, want = minijit.einsum("ij,jk->ik", *ops, **kw), np.einsum("ij,jk->ik", *ops, **kw)
                assert (got.flags.f_contiguous, got.flags.c_contiguous) == (
                    want.flags.f_contiguous,
                    want.flags.c_contiguous,
                )
    # out aliasing an operand: computed into a buffer first, as numpy does
    a = draw([(5, 5)], np.complex128, 3)[0]
    want = np.einsum("ij,jk->ik", a, a)
    assert minijit.einsum("ij,jk->ik", a, a, out=a) is a
    np.testing.assert_allclose(a, want, rtol=1e-13, atol=1e-13)
    # order 'K' with F-order operands: numpy's unoptimised strides
    f = [np.asfortranarray(x) for x in draw([(3, 4, 5), (5, 6)], np.complex64, 4)]
    got = minijit.einsum("abc,cd->abd", *f, order="K")
    assert got.strides == np.einsum("abc,cd->abd", *f, order="K", optimize=False).strides
    # strided operands (a transpose, gaps): read as views
    base = draw([(8, 10)], np.complex64, 5)[0]
    check("ij,jk->ik", [base.T, base])
    check("ij,jk->ik", [base[::2, 1::3], base[:4, :5]])
    check("ii->i", [base[:8, :8]])  # a diagonal
    check("...j,j...->...", [base[:3], base.T[:, :3]])


EMULATED_DTYPES = [np.complex64, np.float16, np.int8, np.uint32, np.bool_]


@pytest.mark.parametrize("target", ["aarch64-neon", "aarch64-sve"])
@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=4, max_size=6, max_product=256),
    dtype=st.sampled_from(EMULATED_DTYPES),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_emulated_aarch64(target, expr, dtype, seed):
    subs, shapes = expr
    ops = draw(shapes, dtype, seed)
    check(subs, ops, target=target)
    assert compiled(minijit.einsum(subs, *ops, target=target, explain=True))


def test_emulated_complex128_and_what_stays_numpys():
    a, b = draw([(9, 7), (7, 5)], np.complex128, 6)
    for target in ("aarch64-neon", "aarch64-sve"):
        check("ij,jk->ik", [a, b], target=target)
    u = draw([(9, 7), (7, 5)], np.uint64, 6)  # int64 kernels: SVE only
    assert minijit.einsum("ij,jk", *u, target="aarch64-neon", explain=True).startswith("numpy.einsum:")
    assert compiled(minijit.einsum("ij,jk", *u, target="aarch64-sve", explain=True))
    check("ij,jk", u, target="aarch64-neon")


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    z = draw([(6, 5), (5, 4)], np.complex64, 7)
    got = minijit.einsum("ij,jk->ik", *[torch.from_numpy(x) for x in z])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.complex64
    assert_bound(got.numpy(), "ij,jk->ik", z, np.dtype(np.complex64))
    h = draw([(6, 5), (5, 4)], np.float16, 7)
    got = minijit.einsum("ij,jk->ik", *[torch.from_numpy(x) for x in h])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float16
    assert_bound(got.numpy(), "ij,jk->ik", h, np.dtype(np.float16))


def test_torch_cpu_bfloat16_tensors():
    """bfloat16 (numpy holds none): widened in torch, float32 kernels, one rounding to bfloat16:
    |got - exact| <= 2^-8 |exact| + (1 + 2^-8) * 1.01 * 2n * 2^-24 * sum |a||b| (n = 40 terms)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(30, 40, generator=g).to(torch.bfloat16), torch.randn(40, 20, generator=g).to(torch.bfloat16)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    exact = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    bound = 2.0**-8 * exact.abs() + (1 + 2.0**-8) * 1.01 * 80 * 2.0**-24 * scale
    assert bool(((got.double() - exact).abs() <= bound).all())
    out = torch.empty(30, 20, dtype=torch.bfloat16)
    assert minijit.einsum("ij,jk->ik", a, b, out=out) is out and torch.equal(out, got)
    assert "bfloat16 widened to float32" in minijit.einsum("ij,jk->ik", a, b, explain=True)
    with pytest.raises(TypeError, match="out"):
        minijit.einsum("ij,jk->ik", a, b, out=torch.empty(30, 20))


def test_3m_needs_its_own_imaginary_bound():
    """With small imaginary parts, 3M's im error is set by |re||re| (T3 - T1 cancels it): over 4M's
    componentwise gamma_{k+1} (|Ar||Bi| + |Ai||Br|), within `assert_bound_3m`; 4M's stays within its own."""
    g = widen.GAUSS_MIN
    rng = np.random.default_rng(1)
    a, b = ((rng.uniform(-1, 1, (g, g)) + 1e-3j * rng.uniform(-1, 1, (g, g))).astype(np.complex64) for _ in range(2))
    exact = a.astype(np.complex128) @ b.astype(np.complex128)
    ar, ai, br, bi = (np.abs(x).astype(np.float64) for x in (a.real, a.imag, b.real, b.imag))
    im_4m = gamma(g + 1, 2.0**-24) * (ar @ bi + ai @ br)
    got = minijit.einsum("ij,jk->ik", a, b)  # 3M
    assert_bound_3m(got, "ij,jk->ik", a, b, g)
    assert (np.abs(got.imag - exact.imag) > im_4m).any()
    h = g // 2  # 4M (k below the threshold): within 4M's componentwise bound
    got4 = minijit.einsum("ij,jk->ik", a[:, :h], b[:h])
    im_4m = gamma(h + 1, 2.0**-24) * (ar[:, :h] @ bi[:h] + ai[:, :h] @ br[:h])
    assert (np.abs(got4.imag - (a[:, :h].astype(np.complex128) @ b[:h]).imag) <= im_4m).all()


def test_3m_runs_a_batched_step_in_blocks_of_batch_planes(monkeypatch):
    """A batch index splits 3M into blocks of whole planes (`widen.GAUSS_BLOCK_BYTES` per planar
    part): three real products per block on the block's planes, the result the whole step's."""
    g = widen.GAUSS_MIN
    a, b = draw([(g, 5, g + 2), (g + 2, 5, g + 1)], np.complex64, 11)  # 'ibj,jbk->bki': batch b, not outermost
    plane = (g + 1) * (g + 2) * 4  # bytes of B's planar part per batch plane, the largest
    monkeypatch.setattr(widen, "GAUSS_BLOCK_BYTES", 2 * plane)  # blocks of two planes: 2, 2, 1
    seen = []

    def spy(subs, *xs, optimize=True):
        seen.append([x.shape for x in xs])
        return minijit.einsum(subs, *xs, optimize=optimize)

    r = widen.route("ibj,jbk->bki", (a, b), None, None, None, None, "native")
    got = widen.run(r, "ibj,jbk->bki", [a, b], True, spy)
    assert_bound_3m(got, "ibj,jbk->bki", a, b, g + 2)
    assert [s[0][1] for s in seen] == [2, 2, 2, 2, 2, 2, 1, 1, 1], seen
    monkeypatch.setattr(widen, "GAUSS_BLOCK_BYTES", 1 << 40)  # one block: three products on every plane
    seen.clear()
    assert_bound_3m(widen.run(r, "ibj,jbk->bki", [a, b], True, spy), "ibj,jbk->bki", a, b, g + 2)
    assert [s[0][1] for s in seen] == [5, 5, 5], seen


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shapes", [((2, 2), (2, 2)), ((2, 5), (3, 2)), ((2, 4), (2, 2))])
def test_4m_expansion_of_a_transposed_operand_with_an_axis_of_two(dtype, shapes):
    """``bc,ab->`` expands ``ab`` transposed: numpy 2.4.6's ``np.negative(x, out=view)`` wrote wrong
    values into the expansion for such views with an axis of 2 (found by minijit.dask's drawn
    dtype test); the expansion assigns instead."""
    rng = np.random.default_rng(3)
    a, b = ((rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(dtype) for s in shapes)
    for subs in ("bc,ab->", "bc,ab->b", "bc,ab->ca"):
        want = np.einsum(subs, a.astype(np.complex128), b.astype(np.complex128))
        got = minijit.einsum(subs, a, b)
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.complex64 else 1e-12, atol=1e-5)
    t = widen.expand_4m(b.T, 1)
    np.testing.assert_array_equal(t[:, 1, :, 0], -b.T.imag)


def test_4m_merges_a_contiguous_summed_last_index_and_only_then():
    """A's last index summed and contiguous: it and (re, im) become one K of 2n (matrix-vector:
    ``ij,j->i`` runs ``ij,jb->ib``); a broadcast length-1 operand, a 0-d one, a strided A or an
    index kept in the output take the (re, im) index of their own; all match numpy."""
    rng = np.random.default_rng(11)

    def c(*s):
        return (rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(np.complex64)

    z, v = c(30, 40), c(40)
    assert "einsum ij,jb->ib" in minijit.einsum("ij,j->i", z, v, explain=True)
    cases = [
        ("ij,j->i", z, v), ("ij,j->i", z[:, ::2], v[::2]), ("ij,j->ij", z, v), ("a,a->", c(2), c(1)),
        ("a,a->", c(1), c(2)), ("a,->a", c(3), c()), (",a->", c(), c(3)), ("bij,bjk->bik", c(4, 5, 6), c(4, 6, 3)),
    ]  # fmt: skip
    for subs, a, b in cases:
        want = np.einsum(subs, a.astype(np.complex128), b.astype(np.complex128))
        np.testing.assert_allclose(minijit.einsum(subs, a, b), want, rtol=1e-4, atol=1e-4)
