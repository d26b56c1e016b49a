"""NEON BRGEMM, unary and binary generators, executed (natively on ARM, else in qemu) against numpy."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.aarch64.binary import NeonBinary as neon_binary
from minijit.kernels.aarch64.brgemm import NeonBrgemm as neon_brgemm
from minijit.kernels.aarch64.pieces import Piece, split
from minijit.kernels.aarch64.unary import NeonUnary as neon_unary
from tests.conftest import examples
from tests.minijit.helpers import UFUNCS

GUARD = 7  # elements around every output buffer that must stay untouched
NP = {"fp32": np.float32, "fp64": np.float64}
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": True}

brgemm_kernel = functools.lru_cache(maxsize=None)(neon_brgemm.generate)
unary_kernel = functools.lru_cache(maxsize=None)(neon_unary.generate)
binary_kernel = functools.lru_cache(maxsize=None)(neon_binary.generate)


def guarded(rng: np.random.Generator, size: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """A random buffer with GUARD elements either side, and its inner view."""
    full = rng.standard_normal(size + 2 * GUARD).astype(NP[dtype])
    return full, full[GUARD : GUARD + size]


# -- BRGEMM ---------------------------------------------------------------------------------
def check_brgemm(m, n, k, br, dtype="fp32", trans_a=False, trans_b=False, pad=(1, 2, 3), seed=0) -> None:
    rng = np.random.default_rng(seed)
    lda = (k if trans_a else m) + pad[0]
    ldb = (n if trans_b else k) + pad[1]
    ldc = m + pad[2]
    size_a = lda * (m if trans_a else k)
    size_b = ldb * (k if trans_b else n)
    stride_a, stride_b = size_a + 3, size_b + 5
    a = rng.standard_normal(stride_a * br).astype(NP[dtype])
    b = rng.standard_normal(stride_b * br).astype(NP[dtype])
    full, c = guarded(rng, ldc * n, dtype)
    want = full.astype(np.float64)
    cw = want[GUARD : GUARD + ldc * n].reshape(n, ldc).T[:m]
    for r in range(br):
        ar, br_ = a[r * stride_a : r * stride_a + size_a], b[r * stride_b : r * stride_b + size_b]
        am = ar.reshape(m, lda)[:, :k] if trans_a else ar.reshape(k, lda).T[:m]
        bm = br_.reshape(k, ldb)[:, :n] if trans_b else br_.reshape(n, ldb).T[:k]
        cw += am.astype(np.float64) @ bm.astype(np.float64)
    brgemm_kernel(m, n, k, br, trans_a, trans_b, False, dtype)(a, b, c, lda, ldb, ldc, stride_a, stride_b)
    eps = 1e-6 if dtype == "fp32" else 1e-14
    np.testing.assert_allclose(full, want, rtol=0, atol=eps * (4 * k * br + 10))
    assert np.array_equal(full[:GUARD], want[:GUARD]) and np.array_equal(full[-GUARD:], want[-GUARD:])


small = st.one_of(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.integers(65, 300))


@settings(max_examples=examples(70), **SETTINGS)
@given(m=small, n=small, k=st.integers(1, 256), br=st.integers(1, 16), pad=st.tuples(*[st.integers(1, 5)] * 3))
def test_brgemm_fp32(m, n, k, br, pad):
    check_brgemm(m, n, k, br, "fp32", pad=pad)


@settings(max_examples=examples(50), **SETTINGS)
@given(m=small, n=small, k=st.integers(1, 128), br=st.integers(1, 8), pad=st.tuples(*[st.integers(1, 5)] * 3))
def test_brgemm_fp64(m, n, k, br, pad):
    check_brgemm(m, n, k, br, "fp64", pad=pad)


@settings(max_examples=150, **SETTINGS)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    k=st.integers(1, 64),
    br=st.integers(1, 4),
    ta=st.booleans(),
    tb=st.booleans(),
    dtype=st.sampled_from(["fp32", "fp64"]),
)
def test_brgemm_transposed(m, n, k, br, ta, tb, dtype):
    check_brgemm(m, n, k, br, dtype, trans_a=ta, trans_b=tb)


@pytest.mark.parametrize(
    "m,n,k,br", [(32, 32, 32, 1), (32, 32, 32, 8), (300, 7, 33, 2), (5, 300, 256, 1), (2048, 2, 3, 1), (3, 2, 2048, 1)]
)
def test_brgemm_shapes(m, n, k, br):
    check_brgemm(m, n, k, br)


@pytest.mark.parametrize("block", [(8, 8), (12, 6), (4, 8)])
def test_brgemm_other_blocks(block):
    m, n, k = 29, 19, 11
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32)
    c = np.zeros(m * n, np.float32)
    kern = neon_brgemm.generate(m, n, k, block=block)
    kern(a, b, c, m, k, m, 0, 0)
    want = a.reshape(k, m).T.astype(np.float64) @ b.reshape(n, k).T
    np.testing.assert_allclose(c.reshape(n, m).T, want, atol=1e-4)


def test_split_pieces():
    assert split(16, 4, 4) == [[Piece(0, 4), Piece(4, 4), Piece(8, 4), Piece(12, 4)]]
    assert split(15, 4, 4) == [[Piece(0, 4), Piece(4, 4), Piece(8, 4)], [Piece(12, 2), Piece(14, 1)]]
    assert split(3, 2, 4) == [[Piece(0, 2), Piece(2, 1)]]


def test_brgemm_rejects_bad_parameters():
    for kwargs, name in [
        ({"m": 0, "n": 1, "k": 1}, "m"),
        ({"m": 1, "n": -1, "k": 1}, "n"),
        ({"m": 1, "n": 1, "k": 1.5}, "k"),
        ({"m": 1, "n": 1, "k": 1, "br_size": 0}, "br_size"),
        ({"m": 1, "n": 1, "k": 1, "dtype": "fp16"}, "dtype"),
        ({"m": 1, "n": 1, "k": 1, "trans_a": 1}, "trans_a"),
        ({"m": 1, "n": 1, "k": 1, "block": (6, 4)}, "block"),
        ({"m": 1, "n": 1, "k": 1, "block": (16, 6)}, "registers"),
    ]:
        with pytest.raises(ValueError, match=name):
            neon_brgemm.program(**kwargs)
    with pytest.raises(ValueError, match="trans_c"):  # trans_c itself: test_aarch64_transposed.py
        neon_brgemm.program(4, 4, 4, trans_c=1)


def test_brgemm_inner_loop_and_callee_saved():
    a, body = neon_brgemm.program(32, 32, 32, 8)
    lines = body.splitlines()
    assert sum(s.strip().startswith("fmla") for s in lines) == 64  # 16x4 block, K unrolled by 4
    assert sum(s.strip().startswith(("ldr", "ldp")) for s in lines) == 12  # 4 B + 8 ldp of A
    lines = [s.strip() for s in a.listing().splitlines()]
    for reg in ("x19", "x27", "d8", "d15"):  # used, so saved first and restored last
        assert any(s.startswith(("stp", "str")) and reg in s for s in lines[:12])
        assert any(s.startswith(("ldp", "ldr")) and reg in s for s in lines[-12:])
    assert lines[-1] == "ret"


def test_generation_is_fast():
    t0 = time.perf_counter()
    neon_brgemm.program(32, 32, 32)
    assert time.perf_counter() - t0 < 0.5  # the bench records the real number (~1 ms)


# -- unary ----------------------------------------------------------------------------------
def check_unary(m, n, trans_b, dtype, ptype, pad=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    lda, ldb = m + pad[0], (n if trans_b else m) + pad[1]
    a = rng.standard_normal(lda * n).astype(NP[dtype])
    a[::7], a[1::11], a[2::13], a[3::17] = np.nan, -0.0, -np.inf, np.inf
    size_b = ldb * (m if trans_b else n)
    full, b = guarded(rng, size_b, dtype)
    want = full.copy()
    am = a.reshape(n, lda).T[:m]
    res = {"zero": np.zeros_like(am), "copy": am, "identity": am, "relu": np.maximum(am, NP[dtype](0))}[ptype]
    inner = want[GUARD : GUARD + size_b]
    if trans_b:
        inner.reshape(m, ldb)[:, :n] = res
    else:
        inner.reshape(n, ldb).T[:m] = res
    unary_kernel(m, n, trans_b, dtype, ptype)(a, b, lda, ldb)
    assert np.array_equal(full, want, equal_nan=True)
    assert np.array_equal(np.signbit(full), np.signbit(want))  # relu(-0.0) = +0.0 as numpy


@settings(max_examples=200, **SETTINGS)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 40),
    trans_b=st.booleans(),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ptype=st.sampled_from(neon_unary.PTYPES),
    pad=st.tuples(st.integers(1, 4), st.integers(1, 4)),
)
def test_unary(m, n, trans_b, dtype, ptype, pad):
    check_unary(m, n, trans_b, dtype, ptype, pad)


@pytest.mark.parametrize("trans_b", [False, True])
def test_unary_large(trans_b):
    check_unary(300, 9, trans_b, "fp32", "relu")


def test_unary_rejects_bad_parameters():
    with pytest.raises(ValueError, match="ptype"):
        neon_unary.program(4, 4, ptype="gelu")
    with pytest.raises(ValueError, match="m"):
        neon_unary.program(0, 4)
    with pytest.raises(ValueError, match="dtype"):
        neon_unary.program(4, 4, dtype="int8")


# -- binary ---------------------------------------------------------------------------------
def check_binary(m, n, dtype, ptype, bias=False, pad=(1, 2, 3), seed=0):
    rng = np.random.default_rng(seed)
    ld0, ld1, ldo = m + pad[0], 0 if bias else m + pad[1], m + pad[2]
    x = rng.standard_normal(ld0 * n).astype(NP[dtype])
    y = rng.standard_normal(m if bias else ld1 * n).astype(NP[dtype])
    x[::5], x[1::7], x[2::9] = np.nan, -0.0, np.inf
    y[::6], y[3::8], y[4::10] = np.nan, 0.0, -np.inf
    full, out = guarded(rng, ldo * n, dtype)
    want = full.copy()
    xm = x.reshape(n, ld0).T[:m]
    ym = np.repeat(y[:m, None], n, axis=1) if bias else y.reshape(n, ld1).T[:m]
    with np.errstate(all="ignore"):
        want[GUARD : GUARD + ldo * n].reshape(n, ldo).T[:m] = UFUNCS[ptype](xm, ym)
    binary_kernel(m, n, dtype, ptype)(x, y, out, ld0, ld1, ldo)
    # values and NaN positions as numpy; the sign of a zero tie in min/max is numpy-backend specific
    assert np.array_equal(full, want, equal_nan=True)


@settings(max_examples=200, **SETTINGS)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 20),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ptype=st.sampled_from(list(neon_binary.PTYPES)),
    bias=st.booleans(),
)
def test_binary(m, n, dtype, ptype, bias):
    check_binary(m, n, dtype, ptype, bias)


def test_binary_min_max_nan_and_signed_zero():
    x = np.array([np.nan, 1.0, -0.0, 0.0, -np.inf, 2.0], np.float32)
    y = np.array([1.0, np.nan, 0.0, -0.0, 3.0, np.inf], np.float32)
    for ptype, want in [
        ("min", [np.nan, np.nan, -0.0, -0.0, -np.inf, 2.0]),
        ("max", [np.nan, np.nan, 0, 0, 3, np.inf]),
    ]:
        out = np.zeros(6, np.float32)
        binary_kernel(6, 1, "fp32", ptype)(x, y, out, 6, 6, 6)
        assert np.array_equal(out, np.array(want, np.float32), equal_nan=True)
        assert np.array_equal(np.isnan(out), np.isnan(UFUNCS[ptype](x, y)))
        if ptype == "min":
            assert np.signbit(out[2]) and np.signbit(out[3])  # fmin(-0, +0) = -0
        else:
            assert not np.signbit(out[2]) and not np.signbit(out[3])  # fmax(-0, +0) = +0


def test_binary_rejects_bad_parameters():
    with pytest.raises(ValueError, match="ptype"):
        neon_binary.program(4, 4, ptype="pow")
    with pytest.raises(ValueError, match="n"):
        neon_binary.program(4, 0)


# -- listings reassemble --------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: neon_brgemm.program(35, 13, 7, 3)[0],
        lambda: neon_brgemm.program(9, 6, 3, 2, dtype="fp64")[0],
        lambda: neon_brgemm.program(7, 5, 9, 2, trans_a=True, trans_b=True)[0],
        lambda: neon_brgemm.program(5, 7, 5, 1, trans_a=True, dtype="fp64")[0],
        lambda: neon_brgemm.program(31, 11, 6, 1, trans_b=True)[0],
        lambda: neon_unary.program(37, 6, True, "fp32", "relu"),
        lambda: neon_unary.program(7, 5, True, "fp64", "copy"),
        lambda: neon_unary.program(19, 3, False, "fp32", "zero"),
        lambda: neon_binary.program(23, 4, "fp64", "div"),
        lambda: neon_binary.program(3, 2, "fp32", "max"),
    ],
)
def test_listing_reassembles(make):
    a = make()
    assert llvm.assemble(a.listing()) == a.code()
