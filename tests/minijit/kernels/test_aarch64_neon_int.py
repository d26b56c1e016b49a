"""NEON int32 and SVE int32/int64 BRGEMM (``mla``, wrapping as numpy's integer einsum) executed
(natively on ARM, else in the qemu worker; SVE at vector lengths 128/256/512), bit for bit against
a wrapping reference (numpy's unsigned matmul), values over the whole range and at its edges;
every transpose form; refusals."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.aarch64.brgemm import NeonBrgemm, SveBrgemm

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
brgemm_kernel = functools.lru_cache(maxsize=None)(NeonBrgemm.generate)
INT = {"s32": np.int32, "s64": np.int64}
UNS = {"s32": np.uint32, "s64": np.uint64}
sve_kernel = functools.lru_cache(maxsize=None)(SveBrgemm.generate)


def values(rng: np.random.Generator, size: int, kind: str, dtype: str = "s32") -> np.ndarray:
    dt = INT[dtype]
    info = np.iinfo(dt)
    if kind == "edges":
        edges = np.array([info.min, info.min + 1, info.max, info.max - 1, -1, 0, 1, 1 << 16, -(1 << 16)], dt)
        return edges[rng.integers(0, edges.size, size)]
    if kind == "small":
        return rng.integers(-9, 10, size).astype(dt)
    return rng.integers(info.min, info.max, size, dtype=dt, endpoint=True)


def colmajor(offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    return offset + np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]


def check_int(m, n, k, br, ta=False, tb=False, tc=False, kind="full", seed=0, dtype="s32", sve_vl=None) -> None:
    """C's block equals the unsigned (wrapping) reference bit for bit; nothing outside it changes.
    ``sve_vl``: the SVE kernel at that vector length (None: NEON)."""
    rng = np.random.default_rng(seed)
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    c_rows, c_cols = (n, m) if tc else (m, n)
    lda, ldb, ldc = a_rows + 1, b_rows + 2, c_rows + 3
    sa, sb = lda * a_cols + 1, ldb * b_cols + 2
    A, B = values(rng, sa * br, kind, dtype), values(rng, sb * br, kind, dtype)
    C = values(rng, ldc * c_cols + 5, "full", dtype)
    C0 = C.copy()
    ci = colmajor(0, c_rows, c_cols, ldc)
    ref = C[ci].astype(UNS[dtype])
    ref = (ref.T if tc else ref).copy()
    for i in range(br):
        Ab = A[colmajor(i * sa, a_rows, a_cols, lda)].astype(UNS[dtype])
        Bb = B[colmajor(i * sb, b_rows, b_cols, ldb)].astype(UNS[dtype])
        ref += (Ab.T if ta else Ab) @ (Bb.T if tb else Bb)  # unsigned: wraps mod 2^32 / 2^64
    if sve_vl is None:
        kern = brgemm_kernel(m, n, k, br, ta, tb, tc, dtype)
    else:
        kern = sve_kernel(m, n, k, br, ta, tb, tc, dtype, sve_vl=sve_vl)
    kern(A, B, C, lda, ldb, ldc, sa, sb)
    got = C[ci].astype(UNS[dtype])
    np.testing.assert_array_equal(got.T if tc else got, ref)
    outside = np.ones(C.size, bool)
    outside[ci.ravel()] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


@settings(max_examples=40, **SETTINGS)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 12),
    k=st.integers(1, 20),
    br=st.integers(1, 3),
    trans=st.sampled_from([(0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1), (1, 1, 1), (1, 0, 1)]),
    kind=st.sampled_from(["full", "edges", "small"]),
    seed=st.integers(0, 2**16),
)
def test_neon_int32_brgemm(m, n, k, br, trans, kind, seed) -> None:
    """Full and remainder row blocks (q/d/s pieces: one lane as .2s), narrow column blocks, K
    remainders, one column (no GEMV kernel for integers), every transpose form."""
    check_int(m, n, k, br, *map(bool, trans), kind=kind, seed=seed)


@pytest.mark.parametrize("shape", [(64, 8, 33, 2), (17, 1, 5, 1), (16, 4, 4, 1)])
def test_neon_int32_edges_and_listing(shape) -> None:
    check_int(*shape, kind="edges")
    a, _ = NeonBrgemm.program(*shape, dtype="s32")
    assert "mla v" in a.listing() and "fmla" not in a.listing()
    assert llvm.assemble(a.listing()) == a.code()


def test_integer_refusals() -> None:
    """int64 on NEON (no 64-bit integer multiply) and other integer widths are refused by name."""
    with pytest.raises(ValueError, match="dtype"):
        NeonBrgemm.generate(8, 8, 8, 1, dtype="s64")
    with pytest.raises(ValueError, match="dtype"):
        SveBrgemm.generate(8, 8, 8, 1, dtype="s16")


@pytest.mark.parametrize("sve_vl", [128, 256, 512])
@settings(max_examples=15, **SETTINGS)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 12),
    k=st.integers(1, 20),
    br=st.integers(1, 3),
    trans=st.sampled_from([(0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1), (1, 1, 1), (1, 0, 1)]),
    kind=st.sampled_from(["full", "edges", "small"]),
    dtype=st.sampled_from(["s32", "s64"]),
    seed=st.integers(0, 2**16),
)
def test_sve_int_brgemm(sve_vl, m, n, k, br, trans, kind, dtype, seed) -> None:
    """SVE int32/int64 (predicated mla) at three vector lengths: every block variant, the
    gathered transposed forms, one column."""
    check_int(m, n, k, br, *map(bool, trans), kind=kind, seed=seed, dtype=dtype, sve_vl=sve_vl)


def test_sve_int_listing() -> None:
    a = SveBrgemm.program(37, 9, 11, 2, dtype="s64")
    assert "mla z" in a.listing() and "fmla" not in a.listing()
    assert llvm.assemble(a.listing()) == a.code()
