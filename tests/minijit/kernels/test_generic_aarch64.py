"""The AArch64 NEON generic GEMM kernel (`minijit.kernels.aarch64.generic`), run natively on ARM or
in the emulator, against the exact semantics of `minijit.kernels.generic`: per batch and output
element one FMA chain over K in order. The reference emulates a correctly rounded FMA without one
(`fma`: error-free transformations and rounding to odd), checked itself against `fractions`; the
kernel must match it bit for bit, and a float64 numpy product within a tolerance. Every buffer
is NaN outside the elements the kernel may touch (guards, padding, the gaps between batches), and
C's NaNs must come back unchanged; in emulation, operands flush against PROT_NONE pages show
that no access reaches past the first or last element, not even inside a vector."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels import generic as spec
from minijit.kernels.aarch64 import generic
from minijit.runtime.emulator import EmulatedKernel
from tests.conftest import examples

NP = {"fp32": np.float32, "fp64": np.float64}
UINT = {"fp32": np.uint32, "fp64": np.uint64}
MANTISSA = {"fp32": 24, "fp64": 53}
GUARD = 5  # NaN elements either side of every buffer
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": True}
ROWS = {"fp32": 16, "fp64": 8}  # rows of the full register block

kernel = functools.lru_cache(maxsize=None)(generic.generate)


# -- an exact FMA without one ----------------------------------------------------------------------
def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s + e == x + y exactly, s = x + y rounded (Knuth)."""
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _two_prod(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p + e == x * y exactly, p = x * y rounded (Dekker, float64 halves by Veltkamp's split)."""

    def halves(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = 134217729.0 * v  # 2**27 + 1
        hi = c - (c - v)
        return hi, v - hi

    p = x * y
    xh, xl = halves(x)
    yh, yl = halves(y)
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def _odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """s + e (exact, |e| at most half an ulp of s) rounded to odd: s, or its neighbour towards e
    when s is even and e is not zero."""
    bump = ((s.view(np.uint64) & 1) == 0) & (e != 0)
    return np.where(bump, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once to the arrays' dtype (float32 or float64; finite values, no underflow).

    float32: the product is exact in float64; the sum rounded to odd at 53 bits, then to nearest
    at 24 rounds as one rounding would (53 >= 24 + 2). float64: Boldo and Melquiond's emulated FMA
    (IEEE Trans. Computers 57(4), 2008): RN(th + RO(tl + ul)) with uh + ul = a * b, th + tl = c + uh."""
    a, b, c = np.broadcast_arrays(*map(np.asarray, (a, b, c)))
    if a.dtype == np.float32:
        s, e = _two_sum(a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64))
        return _odd(s, e).astype(np.float32)
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    return th + _odd(*_two_sum(tl, ul))


def rounded(x: Fraction, bits: int) -> float:
    """``x`` rounded to nearest (ties to even) at ``bits`` bits of mantissa (no subnormals)."""
    if x == 0:
        return 0.0
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1  # 2**e <= x < 2**(e + 1)
    scaled = x / Fraction(2) ** (e - bits + 1)
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q & 1):
        q += 1
    return sign * math.ldexp(q, e - bits + 1)


def crafted(dtype: str) -> list[tuple[float, float, float]]:
    """(a, b, c) whose fma differs from a * b + c rounded twice (fmul then fadd), or from an fp32
    sum first rounded to float64: the test cases a wrong reference or an unfused kernel gets wrong."""
    if dtype == "fp32":
        u = 2.0**-23
        return [
            (8 * (1 + u), 8 * (1 - u), 2.0**30 + 2**7),  # float64 sum lands on an fp32 midpoint
            (8 * (1 + u), 8 * (1 - u), -(2.0**30 + 2**7)),
            (1 + u, 1 - u, -1.0),  # the product's tail is the whole result
            (1 + 3 * u, 1 + 5 * u, -(1 + 8 * u)),
        ]
    u = 2.0**-52
    return [
        (1 + u, 1 - u, -1.0),
        (1 + 3 * u, 1 + 5 * u, -(1 + 8 * u)),
        (2**27 + 1.0, 2**27 + 1.0, -(2.0**54)),  # 2**28 + 1, not 2**28
        (0.1, 10.0, -1.0),
    ]


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_exact_fma_reference_matches_fractions(dtype):
    """`fma` rounds a * b + c once: the `fractions` sum rounded at the dtype's mantissa, on random
    triples (products cancelling C among them) and on the crafted ones."""
    t, bits = NP[dtype], MANTISSA[dtype]
    rng = np.random.default_rng(7)
    n = 3000
    a = rng.standard_normal(n).astype(t)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(t)
    c = rng.standard_normal(n).astype(t)
    c[::3] = -(a[::3] * b[::3])  # the product rounded: fma leaves its rounding error
    c[1::3] *= np.exp2(rng.integers(-40, 40, c[1::3].size)).astype(t)
    extra = np.array(crafted(dtype), dtype=t)
    a, b, c = (np.concatenate([v, extra[:, i]]) for i, v in enumerate((a, b, c)))
    want = np.array(
        [
            rounded(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), bits)
            for x, y, z in zip(a, b, c, strict=True)
        ],
        t,
    )
    np.testing.assert_array_equal(fma(a, b, c), want)
    tail = fma(extra[:, 0], extra[:, 1], extra[:, 2])
    assert not np.any(tail == extra[:, 0] * extra[:, 1] + extra[:, 2])  # unfused: wrong on every one


# -- operands laid out by the args, NaN everywhere else ----------------------------------------------
def indices(v: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Element offsets (from each kernel pointer) of A[t, m, k], B[t, k, n], C[t, m, n]."""
    t = np.arange(v["batch"])[:, None, None]
    m, n, k = np.arange(v["m"]), np.arange(v["n"]), np.arange(v["k"])
    ia = t * v["batch_a"] + m[:, None] + k[None, :] * v["lda"]
    ib = t * v["batch_b"] + k[:, None] * v["ldb_k"] + n[None, :] * v["ldb_n"]
    ic = t * v["batch_c"] + m[:, None] + n[None, :] * v["ldc"]
    return ia, ib, ic


def buffer(offsets: np.ndarray, dtype: str) -> tuple[np.ndarray, int]:
    """A NaN buffer holding every offset with GUARD elements either side; the index of offset 0."""
    lo, hi = (int(offsets.min()), int(offsets.max())) if offsets.size else (0, 0)
    lo, hi = min(lo, 0), max(hi, 0)
    return np.full(hi - lo + 1 + 2 * GUARD, np.nan, NP[dtype]), GUARD - lo


def pointer(buf: np.ndarray, base: int) -> np.ndarray:
    """A view of all of ``buf`` whose data pointer is element ``base`` (negative offsets from the
    kernel's pointer stay inside the array the runtime copies)."""
    size = buf.itemsize
    return np.lib.stride_tricks.as_strided(
        buf[base:], shape=(2, buf.size - base), strides=(-base * size, size), writeable=True
    )


def check(dtype: str, seed: int = 0, **v: int) -> None:
    """Run the kernel on random operands laid out by ``v`` (every name of `spec.ARGS`); C must be
    the exact FMA chains bit for bit, close to float64 numpy, and NaN elsewhere as before."""
    args = spec.pack_args(**v)
    t, rng = NP[dtype], np.random.default_rng(seed)
    ia, ib, ic = indices(v)
    assert np.unique(ic).size == ic.size, "C's elements must not alias"
    (abuf, a0), (bbuf, b0), (cbuf, c0) = (buffer(i, dtype) for i in (ia, ib, ic))
    for buf, base, idx in ((abuf, a0, ia), (bbuf, b0, ib), (cbuf, c0, ic)):
        buf[base + idx] = rng.standard_normal(idx.shape).astype(t)
    a, b, c_in = abuf[a0 + ia], bbuf[b0 + ib], cbuf[c0 + ic]  # (batch, M, K), (batch, K, N), (batch, M, N)
    before = cbuf.copy()
    kernel(dtype)(pointer(abuf, a0), pointer(bbuf, b0), pointer(cbuf, c0), args)

    want = c_in.copy() if v["accumulate"] else np.zeros_like(c_in)
    for kk in range(v["k"]):
        want = fma(a[:, :, kk, None], b[:, None, kk, :], want)
    got = cbuf[c0 + ic]
    outside = np.ones(cbuf.size, bool)
    outside[c0 + ic] = False
    u = UINT[dtype]
    np.testing.assert_array_equal(cbuf[outside].view(u), before[outside].view(u), "written outside C's block")
    np.testing.assert_array_equal(got.view(u), want.view(u), "not the exact FMA chains")
    approx = np.einsum("tmk,tkn->tmn", a.astype(np.float64), b.astype(np.float64))
    if v["accumulate"]:
        approx += c_in
    eps = 1e-6 if dtype == "fp32" else 1e-15
    np.testing.assert_allclose(got, approx, rtol=0, atol=eps * 8 * (v["k"] + 2) * (1 + np.abs(approx).max(initial=0)))


def layout(m: int, n: int, k: int, batch: int, draw_) -> dict[str, int]:
    """Strides for ``m``, ``n``, ``k``, ``batch``: A and C columns padded, either sign; B any
    strides (zero and aliasing ones among them); C's batches outside or between its columns."""

    def sign() -> int:
        return draw_(st.sampled_from([1, 1, -1]))

    lda = sign() * (m + draw_(st.integers(0, 3)))
    span_a = abs(lda) * max(k - 1, 0) + m
    b_form = draw_(st.sampled_from(["col", "row", "any"]))
    if b_form == "col":
        ldb_k, ldb_n = sign(), sign() * (k + draw_(st.integers(0, 2)))
    elif b_form == "row":
        ldb_k, ldb_n = sign() * (n + draw_(st.integers(0, 2))), sign()
    else:
        ldb_k, ldb_n = draw_(st.integers(-40, 40)), draw_(st.integers(-40, 40))
    span_b = abs(ldb_k) * max(k - 1, 0) + abs(ldb_n) * max(n - 1, 0) + 1
    col = m + draw_(st.integers(0, 3))
    if draw_(st.booleans()):  # batches after one another
        ldc = sign() * col
        batch_c = sign() * (abs(ldc) * max(n - 1, 0) + m + draw_(st.integers(0, 3)))
    else:  # batch t's column j at (j * batch + t) * col
        ldc, batch_c = sign() * col * max(batch, 1), sign() * col
    batch_a = draw_(st.sampled_from([0, 1, -1])) * (span_a + draw_(st.integers(0, 2)))
    batch_b = draw_(st.sampled_from([0, 1, -1])) * (span_b + draw_(st.integers(0, 2)))
    return {
        "lda": lda,
        "ldb_k": ldb_k,
        "ldb_n": ldb_n,
        "ldc": ldc,
        "batch_a": batch_a,
        "batch_b": batch_b,
        "batch_c": batch_c,
    }


size = st.one_of(st.integers(0, 40), st.integers(1, 40), st.integers(1, 40), st.integers(41, 130))


@settings(max_examples=examples(80), **SETTINGS)
@given(dtype=st.sampled_from(["fp32", "fp64"]), data=st.data())
def test_generic_gemm_matches_the_fma_chains(dtype, data):
    draw_ = data.draw
    m, n, k = draw_(size), draw_(size), draw_(size)
    batch = draw_(st.one_of(st.integers(1, 3), st.integers(0, 3)))
    accumulate = draw_(st.integers(0, 1))
    v = layout(m, n, k, batch, draw_)
    check(dtype, seed=m + 7 * n + 13 * k, m=m, n=n, k=k, batch=batch, accumulate=accumulate, **v)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_every_row_and_column_remainder(dtype):
    """M from 0 through two full blocks and N 0..9, so that every q/d/s piece meets every column
    block; K = 3, two batches, padded A and C, B row-major."""
    rows = ROWS[dtype]
    for m in range(2 * rows + 2):
        for n in (0, 1, 2, 3, 4, 5, 6, 7, 9):
            v = {"lda": m + 1, "ldb_k": n + 1, "ldb_n": 1, "ldc": m + 2}
            v |= {"batch_a": 3 * (m + 1) + 1, "batch_b": 3 * (n + 1), "batch_c": n * (m + 2) + 1}
            check(dtype, seed=m * 10 + n, m=m, n=n, k=3, batch=2, accumulate=(m + n) % 2, **v)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "m,n,k,batch",
    [(0, 5, 5, 2), (5, 0, 5, 2), (5, 5, 0, 2), (5, 5, 5, 0), (0, 0, 0, 0), (17, 6, 0, 1), (33, 9, 1, 3)],
)
@pytest.mark.parametrize("accumulate", [0, 1])
def test_empty_sizes(dtype, m, n, k, batch, accumulate):
    """M, N or batch 0: C untouched; K 0: C zero, or unchanged with accumulate (all in `check`)."""
    v = {"lda": m, "ldb_k": 1, "ldb_n": k, "ldc": m + 1, "batch_a": m * k, "batch_b": k * n, "batch_c": -(m + 1) * n}
    check(dtype, m=m, n=n, k=k, batch=batch, accumulate=accumulate, **v)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_each_piece_fuses_the_multiply_add(dtype):
    """The crafted triples (`crafted`) in every row of a full block and of each remainder piece:
    C = fma(a, b, c) exactly, where fmul then fadd would differ."""
    t, rows = NP[dtype], ROWS[dtype]
    triples = np.array(crafted(dtype), dtype=t)
    m = 2 * rows - 1  # a full block, then every narrower piece (3 q, d and s for fp32)
    pick = np.arange(m) % len(triples)
    a, b, c = triples[pick, 0], triples[pick, 1], triples[pick, 2]
    # column j of B holds b of row j's triple: C[:, j] = fma(a, B[j], C[:, j]), checked on the diagonal
    n = m
    args = spec.pack_args(
        m=m, n=n, k=1, lda=m, ldb_k=1, ldb_n=1, ldc=m, batch=1, batch_a=0, batch_b=0, batch_c=0, accumulate=1
    )
    cmat = np.tile(c[:, None], (1, n)).T.copy().ravel()  # column-major: C[i, j] = c[i]
    kernel(dtype)(a.copy(), b.copy(), cmat, args)
    diag = cmat.reshape(n, m).T[np.arange(m), np.arange(m)]
    np.testing.assert_array_equal(diag.view(UINT[dtype]), fma(a, b, c).view(UINT[dtype]))
    assert not np.any(diag == a * b + c)


# -- nothing outside the operands: PROT_NONE pages either side ---------------------------------------
PAGE = 4096


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_no_access_past_the_operands(dtype):
    """A, B and C packed tight (lda = M, B column-major, ldc = M), flush against a PROT_NONE page
    above them, then below: an access past the last row or before the first faults. Every M
    remainder meets every column block."""
    kern = kernel(dtype)
    if not isinstance(kern, EmulatedKernel):
        pytest.skip("guard pages are set up in the emulation worker")
    t, rows, w = NP[dtype], ROWS[dtype], kern.worker
    k = 3
    shapes = [(m, n) for m in range(1, 2 * rows) for n in (1, 2, 3, 4, 5)]
    most = max(m * max(n, k) for m, n in shapes) * t().itemsize
    size = (most + PAGE - 1) // PAGE * PAGE + 2 * PAGE
    regions = [w.mmap(size) for _ in range(3)]
    args_at = w.mmap(PAGE)
    try:
        for r in regions:
            w.mprotect(r, PAGE, 0)
            w.mprotect(r + size - PAGE, PAGE, 0)
        rng = np.random.default_rng(5)
        for upper in (True, False):
            for m, n in shapes:
                a = rng.standard_normal(m * k).astype(t)
                b = rng.standard_normal(k * n).astype(t)
                c = rng.standard_normal(m * n).astype(t)
                args = spec.pack_args(
                    m=m,
                    n=n,
                    k=k,
                    lda=m,
                    ldb_k=1,
                    ldb_n=k,
                    ldc=m,
                    batch=1,
                    batch_a=0,
                    batch_b=0,
                    batch_c=0,
                    accumulate=1,
                )
                at = [
                    r + size - PAGE - x.nbytes if upper else r + PAGE for r, x in zip(regions, (a, b, c), strict=True)
                ]
                writes = [(p, x.tobytes()) for p, x in zip(at, (a, b, c), strict=True)] + [(args_at, args.tobytes())]
                w.call(kern.address, *at, args_at, writes=writes)
                got = np.frombuffer(w.read(at[2], c.nbytes), t)
                want = c.reshape(n, m).T.copy()
                am, bm = a.reshape(k, m).T, b.reshape(n, k).T
                for kk in range(k):
                    want = fma(am[:, kk, None], bm[None, kk, :], want)
                np.testing.assert_array_equal(got, want.T.ravel(), f"m={m} n={n} upper={upper}")
    finally:
        for r in regions:
            w.munmap(r, size)
        w.munmap(args_at, PAGE)


# -- the program --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_listing_assembles_to_the_code(dtype):
    """llvm-mc assembles the listing to the bytes the emitters encoded."""
    try:
        llvm.find_tool("llvm-mc")
    except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
        pytest.skip(str(e))
    a = generic.program(dtype)
    assert llvm.assemble(a.listing()) == a.code()


def test_program_names_and_rejects():
    assert generic.signature("fp64") == spec.signature("double")
    assert generic.name("fp32") == "neon_generic_gemm_fp32"
    listing = generic.program("fp32").listing()
    assert "fmla v16.4s, v0.4s, v4.s[0]" in listing and "ld1r { v4.4s }, [x25], x8" in listing
    assert "fmul" not in listing and "fadd" not in listing
    with pytest.raises(ValueError, match="dtype"):
        generic.program("fp16")
