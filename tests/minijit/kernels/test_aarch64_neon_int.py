"""NEON int32 BRGEMM (``mla`` by element, wrapping as numpy's integer einsum) executed (natively on
ARM, else in the qemu worker), bit for bit against a wrapping reference (numpy's uint32 matmul),
values over the whole int32 range and at its edges; every transpose form; refusals."""

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
EDGES = np.array([-(2**31), -(2**31) + 1, 2**31 - 1, 2**31 - 2, -1, 0, 1, 1 << 16, -(1 << 16)], np.int32)


def values(rng: np.random.Generator, size: int, kind: str) -> np.ndarray:
    if kind == "edges":
        return EDGES[rng.integers(0, EDGES.size, size)]
    if kind == "small":
        return rng.integers(-9, 10, size).astype(np.int32)
    return rng.integers(-(2**31), 2**31 - 1, size, dtype=np.int32, endpoint=True)


def colmajor(offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    return offset + np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]


def check_int(m, n, k, br, ta=False, tb=False, tc=False, kind="full", seed=0) -> None:
    """C's block equals the uint32 reference bit for bit; nothing outside it changes."""
    rng = np.random.default_rng(seed)
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    c_rows, c_cols = (n, m) if tc else (m, n)
    lda, ldb, ldc = a_rows + 1, b_rows + 2, c_rows + 3
    sa, sb = lda * a_cols + 1, ldb * b_cols + 2
    A, B = values(rng, sa * br, kind), values(rng, sb * br, kind)
    C = values(rng, ldc * c_cols + 5, "full")
    C0 = C.copy()
    ci = colmajor(0, c_rows, c_cols, ldc)
    ref = C[ci].astype(np.uint32)
    ref = (ref.T if tc else ref).copy()
    for i in range(br):
        Ab = A[colmajor(i * sa, a_rows, a_cols, lda)].astype(np.uint32)
        Bb = B[colmajor(i * sb, b_rows, b_cols, ldb)].astype(np.uint32)
        ref += (Ab.T if ta else Ab) @ (Bb.T if tb else Bb)  # uint32: wraps mod 2^32
    brgemm_kernel(m, n, k, br, ta, tb, tc, "s32")(A, B, C, lda, ldb, ldc, sa, sb)
    got = C[ci].astype(np.uint32)
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
    """int64 (NEON has no 64-bit integer multiply) and SVE integers are refused by name."""
    with pytest.raises(ValueError, match="dtype"):
        NeonBrgemm.generate(8, 8, 8, 1, dtype="s64")
    with pytest.raises(ValueError, match="dtype"):
        SveBrgemm.generate(8, 8, 8, 1, dtype="s32")
