"""x86-64 integer BRGEMM kernels (dtype s32 / s64, `minijit.kernels.x86_64.muladd`) executed
natively, bit for bit against a wrapping reference (numpy's unsigned matmul: two's complement mod
2^32 / 2^64, numpy's integer einsum), values over the whole range and at its edges; AVX-512
kernels (no AVX-512 on every host) reassembled by llvm-mc to exactly their bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.x86_64 import brgemm, unary
from minijit.kernels.x86_64.brgemm_plan import blocking, panel_rows, panel_width
from tests.minijit.kernels.test_x86_brgemm import pack_panels
from tests.minijit.kernels.x86_util import ISAS, available, brgemm_kernel, colmajor_index, needs_x86

INT = {"s32": np.int32, "s64": np.int64}
UNS = {"s32": np.uint32, "s64": np.uint64}


def int_values(rng: np.random.Generator, size: int, dtype: str, kind: str) -> np.ndarray:
    """``size`` values of ``dtype``: the whole range ("full"), the range's edges and their
    neighbours ("edges": every product and sum wraps), or small values ("small")."""
    dt = INT[dtype]
    info = np.iinfo(dt)
    if kind == "small":
        return rng.integers(-9, 10, size, dtype=dt)
    if kind == "edges":
        edges = np.array([info.min, info.min + 1, info.max, info.max - 1, -1, 0, 1, 1 << 16, -(1 << 16)], dt)
        return edges[rng.integers(0, edges.size, size)]
    return rng.integers(info.min, info.max, size, dtype=dt, endpoint=True)


def wrapped(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(UNS[dtype])


def run_int(m, n, k, br, *, ta=False, tb=False, tc=False, dtype="s32", isa="avx2", kind="full", seed=0, **opts):
    """Run one kernel on padded operands; C's block equals the wrapped reference bit for bit and
    nothing outside it changes."""
    rng = np.random.default_rng(seed)
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    c_rows, c_cols = (n, m) if tc else (m, n)
    lda, ldb, ldc = a_rows + 1, b_rows + 2, c_rows + 3
    sa, sb = lda * a_cols + 1, ldb * b_cols + 2
    A, B = int_values(rng, sa * br, dtype, kind), int_values(rng, sb * br, dtype, kind)
    C = int_values(rng, ldc * c_cols + 5, dtype, "full")
    C0 = C.copy()
    cidx = colmajor_index(0, c_rows, c_cols, ldc)
    ref = wrapped(C[cidx], dtype)
    ref = (ref.T if tc else ref).copy()
    if opts.get("zero_c"):
        ref[...] = 0
    for i in range(br):
        Ab = wrapped(A[colmajor_index(i * sa, a_rows, a_cols, lda)], dtype)
        Bb = wrapped(B[colmajor_index(i * sb, b_rows, b_cols, ldb)], dtype)
        ref += (Ab.T if ta else Ab) @ (Bb.T if tb else Bb)  # unsigned: wraps mod 2^32 / 2^64
    kern = brgemm.generate(m, n, k, br, ta, tb, tc, dtype, isa, **opts)
    kern(A, B, C, lda, ldb, ldc, sa, sb)
    got = wrapped(C[cidx], dtype)
    np.testing.assert_array_equal(got.T if tc else got, ref)
    outside = np.ones(C.size, bool)
    outside[cidx.ravel()] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


SHAPES = {
    "m": st.integers(1, 70),
    "n": st.integers(1, 30),
    "k": st.integers(1, 40),
    "br": st.integers(1, 3),
    "seed": st.integers(0, 2**16),
    "kind": st.sampled_from(["full", "edges", "small"]),
    "dtype": st.sampled_from(["s32", "s64"]),
}


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=60, deadline=None)
@given(
    trans=st.sampled_from([(0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1), (1, 1, 1), (1, 0, 1)]),
    option=st.sampled_from(["plain", "zero_c", "n_outer", "a_copy", "br_outer"]),
    **SHAPES,
)
def test_int_brgemm_sweep(isa, m, n, k, br, seed, kind, dtype, trans, option) -> None:
    """Every transposition (the vector path, or the scalar path of trans_a / trans_c) with and
    without a fused zero C, and the vector path's options: N blocks outermost, A copied by the
    kernel, BR outside."""
    ta, tb, tc = map(bool, trans)
    opts = {"zero_c": True} if option == "zero_c" else {}  # the scalar path starts at zero too
    if not (ta or tc) and option != "plain":
        if option == "a_copy" and not brgemm.a_copy_fits(m, n, k, br, isa, dtype, tb):
            option = "plain"
        opts = {} if option == "plain" else {option: True}
    run_int(m, n, k, br, ta=ta, tb=tb, tc=tc, dtype=dtype, isa=isa, kind=kind, seed=seed, **opts)


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["s32", "s64"])
@pytest.mark.parametrize("m,n,k,br", [(64, 6, 64, 2), (131, 13, 7, 1), (5, 300, 3, 1), (300, 1, 9, 3), (8, 8, 1, 1)])
def test_int_brgemm_blocks_and_edges(isa, dtype, m, n, k, br) -> None:
    """Full and remainder blocks, one column (no GEMV kernel for integers), K of 1; edge values."""
    run_int(m, n, k, br, dtype=dtype, isa=isa, kind="edges")


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # pack_panels' NaN fill, never read
@settings(max_examples=20, deadline=None)
@given(panels=st.sampled_from(["b", "a", "ab"]), **SHAPES)
def test_int_packed_panels(isa, m, n, k, br, seed, kind, dtype, panels) -> None:
    """A and/or B in the micro-panels the planner packs (B's panel width is every dtype's)."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    rng = np.random.default_rng(seed)
    lda, ldc = m + 3, m + 1
    A = int_values(rng, br * k * lda, dtype, kind).reshape(br, k, lda)
    B = int_values(rng, br * k * n, dtype, kind).reshape(br, k, n)
    C = int_values(rng, n * ldc + 4, dtype, "full")
    C0 = C.copy()
    ref = wrapped(C[: n * ldc].reshape(n, ldc)[:, :m].T, dtype)
    for i in range(br):
        ref = ref + wrapped(A[i, :, :m].T, dtype) @ wrapped(B[i], dtype)
    width = panel_width(isa)
    kw, args = {}, [A, np.ascontiguousarray(B.transpose(0, 2, 1)), lda, k, k * lda, n * k]
    if "a" in panels:
        rows = panel_rows(isa, dtype)
        a_panel = br * k * rows
        kw["a_panel"] = a_panel
        args[0], args[2], args[4] = pack_panels(A[:, :, :m], rows, k * rows, a_panel, -(-m // rows)), rows, k * rows
    if "b" in panels:
        panel = br * k * width
        kw["b_panel"] = panel
        args[1], args[3], args[5] = pack_panels(B, width, k * width, panel, -(-n // width)), width, k * width
    kern = brgemm.generate(m, n, k, br, trans_b="b" in panels, dtype=dtype, isa=isa, **kw)
    kern(args[0], args[1], C, args[2], args[3], ldc, args[4], args[5])
    got = wrapped(C[: n * ldc].reshape(n, ldc)[:, :m].T, dtype)
    np.testing.assert_array_equal(got, ref)
    outside = np.ones(C.size, bool)
    outside[(np.arange(n)[:, None] * ldc + np.arange(m)).ravel()] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("dtype", ["s32", "s64"])
def test_int_listings_reassemble(isa, dtype) -> None:
    """Every block kind (full, remainder, one-vector {1toN} on AVX-512, scalar path) of both ISAs:
    the listing assembles with llvm-mc to exactly the kernel's bytes (AVX-512 is checked so on
    hosts without it), with the dtype's multiply."""
    mul = {"avx512": {"s32": "vpmulld", "s64": "vpmullq"}, "avx2": {"s32": "vpmulld", "s64": "vpmuludq"}}[isa][dtype]
    for shape, flags in (((70, 13, 9, 2), (0, 0, 0)), ((19, 25, 5, 1), (0, 1, 0)), ((5, 4, 3, 2), (1, 1, 1))):
        kern = brgemm_kernel(*shape, *map(bool, flags), dtype, isa)
        assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name
        assert (mul in kern.listing) != flags[0], kern.name  # the scalar path: imul
        assert "vfmadd" not in kern.listing


def test_int_blocks() -> None:
    """int64 on AVX2 holds one vector of M (two accumulators per output); the rest keep the
    float blocks; the packed-B panel width is the same for every dtype."""
    assert blocking(9, "avx2", "s64") == [(2, 1, 6, 4), (1, 1, 6, 1)]
    assert blocking(20, "avx2", "s32") == blocking(20, "avx2", "fp32")
    assert blocking(100, "avx512", "s64") == blocking(100, "avx512", "fp64")
    assert panel_rows("avx2", "s64") == 4 and panel_width("avx2") == 6


def test_int_refusals() -> None:
    """Integer dtypes: no epilogue in the BRGEMM; the other generators refuse them by name."""
    with pytest.raises(ValueError, match="epilogue"):
        brgemm.generate(8, 8, 8, 1, dtype="s32", isa="avx2", epilogue="relu")
    with pytest.raises(ValueError, match="dtype"):
        unary.generate(8, 8, False, "s32", "copy", "avx2")
    with pytest.raises(ValueError, match="dtype"):
        brgemm.generate(8, 8, 8, 1, dtype="s16", isa="avx2")
