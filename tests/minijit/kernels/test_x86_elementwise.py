"""x86-64 unary and binary kernels against numpy, bit for bit (NaN, +-inf, +-0.0 included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.kernels.x86_64 import binary, unary
from tests.minijit.helpers import UFUNCS
from tests.minijit.kernels.x86_util import (
    ISAS,
    NP,
    available,
    binary_kernel,
    bits_equal,
    colmajor_index,
    needs_x86,
    unary_kernel,
    with_specials,
)

pytestmark = needs_x86

UNARY_REF = {
    "zero": lambda x: np.zeros_like(x),
    "copy": lambda x: x,
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
}


def run_unary(m, n, tb, dtype, ptype, isa, pad=(2, 3), seed=0, dense=False) -> None:
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    lda, ldb = m + pad[0], (n if tb else m) + (0 if dense else pad[1])
    A = with_specials(rng.standard_normal(lda * n).astype(dt), rng)
    B = rng.standard_normal(ldb * (m if tb else n) + 3).astype(dt)
    B0 = B.copy()
    ref = UNARY_REF[ptype](A[colmajor_index(0, m, n, lda)])
    # dense transposing: the kernel must use ldb = n whatever it is passed (plain: ldb = m is passed)
    unary_kernel(m, n, tb, dtype, ptype, isa, dense)(A, B, lda, ldb + 7 if dense and tb else ldb)
    bidx = colmajor_index(0, n, m, ldb).T if tb else colmajor_index(0, m, n, ldb)
    assert bits_equal(B[bidx], ref, dtype)
    outside = np.ones(B.size, bool)
    outside[bidx.ravel()] = False
    assert bits_equal(B[outside], B0[outside], dtype)


def run_binary(m, n, dtype, ptype, isa, bias=False, seed=0) -> None:
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    ld0, ld1, ldo = m + 1, 0 if bias else m + 2, m + 3
    X0 = with_specials(rng.standard_normal(ld0 * n).astype(dt), rng)
    X1 = with_specials(rng.standard_normal((m + 2) * n).astype(dt), rng)
    O = rng.standard_normal(ldo * n + 2).astype(dt)
    O0 = O.copy()
    with np.errstate(all="ignore"):
        ref = UFUNCS[ptype](X0[colmajor_index(0, m, n, ld0)], X1[colmajor_index(0, m, n, ld1)])
    binary_kernel(m, n, dtype, ptype, isa)(X0, X1, O, ld0, ld1, ldo)
    oidx = colmajor_index(0, m, n, ldo)
    got = O[oidx]
    if ptype in ("min", "max"):  # NaN payloads too, like numpy
        assert bits_equal(got, ref, dtype)
    else:
        np.testing.assert_array_equal(got, ref)
        assert bits_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)], dtype)
    outside = np.ones(O.size, bool)
    outside[oidx.ravel()] = False
    assert bits_equal(O[outside], O0[outside], dtype)


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=100)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    tb=st.booleans(),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ptype=st.sampled_from(list(UNARY_REF)),
    pad=st.tuples(st.integers(0, 5), st.integers(0, 5)),
)
def test_unary_sweep(isa, m, n, tb, dtype, ptype, pad) -> None:
    run_unary(m, n, tb, dtype, ptype, isa, pad)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tb", [True, False])
@settings(max_examples=60)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 20),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ptype=st.sampled_from(list(UNARY_REF)),
)
def test_unary_dense_b_sweep(isa, tb, m, n, dtype, ptype) -> None:
    """``dense_b``, bit-exact and nothing past the block written. Transposing (``tb``): into B rows
    exactly n apart (packed micro-panels), overlapping full-vector stores for tiles narrower than a
    register, the last row exact. Plain: into B columns exactly m apart (rows of a packed B panel),
    each column's partial vector stored whole where later columns overwrite the spill, the last
    columns under the mask."""
    run_unary(m, n, tb, dtype, ptype, isa, pad=(1, 0), dense=True)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_unary_dense_plain_stores_whole_vectors_except_the_last_columns(isa) -> None:
    """m = 6 fp32 (one partial vector a column), n = 42: the first 41 columns (AVX2, 8 lanes) or 40
    (AVX-512, 16 lanes) store whole vectors in a loop of their own, the rest under the mask; a
    single column has no spilling loop. The listings reassemble to the code."""
    from asm import llvm

    spilling = {"avx2": 41, "avx512": 40}[isa]
    dense = unary.generate(6, 42, False, "fp32", "copy", isa, dense_b=True)
    head, masked_part = dense.listing.split("jnz .Ln_dense", 1)  # the spilling loop, then the rest
    assert f"mov r8d, {spilling}" in head
    mask_store = "vmaskmovps ymmword ptr" if isa == "avx2" else "] {k1}"  # a masked store
    assert mask_store not in head.split(".Ln_dense")[-1] and mask_store in masked_part
    single = unary.generate(6, 1, False, "fp32", "copy", isa, dense_b=True)
    assert ".Ln_dense" not in single.listing
    for k in (dense, single):
        assert llvm.assemble(k.listing, triple="x86_64", mattr="") == k.code


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n", [(300, 7), (9, 300), (128, 128)])
def test_unary_large(isa, tb, m, n) -> None:
    run_unary(m, n, tb, "fp32", "relu", isa)
    run_unary(m, n, tb, "fp64", "copy", isa)


def test_relu_matches_numpy_on_signed_zero_and_nan() -> None:
    x = np.array([-0.0, 0.0, np.nan, -np.nan, -1.0, np.inf, -np.inf, 1e-45, -1e-45], np.float32)
    for isa in [isa for isa in ("avx512", "avx2") if available(isa)]:
        for tb in (False, True):
            b = np.full(x.size, 7.0, np.float32)
            unary.generate(x.size, 1, tb, "fp32", "relu", isa)(x, b, x.size, x.size if not tb else 1)
            assert bits_equal(b, np.maximum(x, 0), "fp32")


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=100)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 40),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ptype=st.sampled_from(list(UFUNCS)),
    bias=st.booleans(),
)
def test_binary_sweep(isa, m, n, dtype, ptype, bias) -> None:
    run_binary(m, n, dtype, ptype, isa, bias)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("ptype", list(UFUNCS))
def test_binary_large(isa, ptype) -> None:
    run_binary(300, 5, "fp32", ptype, isa)
    run_binary(77, 3, "fp64", ptype, isa, bias=True)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: unary.generate(0, 1), "m must be"),
        (lambda: unary.generate(1, 1, ptype="gelu"), "ptype must be"),
        (lambda: unary.generate(1, 1, dtype="bf16"), "dtype must be"),
        (lambda: unary.generate(1, 1, trans_b="yes"), "trans_b must be"),
        (lambda: binary.generate(1, 0), "n must be"),
        (lambda: binary.generate(1, 1, ptype="pow"), "ptype must be"),
        (lambda: binary.generate(1, 1, isa="neon"), "isa must be"),
    ],
)
def test_rejects_bad_arguments(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()
