"""x86-64 GEMV kernels (the BRGEMM of one column) executed natively against a float64 numpy
reference, with every operand flush against a PROT_NONE page."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.x86_64 import brgemm, gemv
from tests.minijit.kernels.x86_util import ISAS, NP, available, needs_x86
from tests.minijit.test_gemm_layouts import Guarded

pytestmark = needs_x86


def run_gemv(m, k, br, *, ta, tb, dtype, isa, tc=False, zero_c=False, relu_c=False, pad=(1, 2, 1), seed=0, kern=None):
    """y (+)= sum_br A_br x_br through ``kern`` (default `gemv.generate`); asserts the result, no
    -0 after relu, and every element of y's buffer that is not y untouched. A (``pad[0]`` extra
    rows or columns between BR steps), x (stride ``1 + pad[1]`` with ``tb``) and y (stride
    ``1 + pad[2]`` with ``tc``, then 3 guard elements) each end at a PROT_NONE page, so a read
    past any of them faults."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    rows, cols = (k, m) if ta else (m, k)
    lda = rows + pad[0]
    sa = lda * cols + pad[0]
    incx = 1 + pad[1] if tb else 1
    sb = (k - 1) * incx + 1 + pad[1]
    incy = 1 + pad[2] if tc else 1
    A = Guarded(sa * (br - 1) + lda * (cols - 1) + rows, dt).array
    X = Guarded(sb * (br - 1) + (k - 1) * incx + 1, dt).array
    Y = Guarded((m - 1) * incy + 1 + 3, dt).array  # 3 guard elements after y
    A[:] = rng.uniform(-1, 1, A.size)
    X[:] = rng.uniform(-1, 1, X.size)
    Y[:] = rng.uniform(-1, 1, Y.size)
    y = Y[: (m - 1) * incy + 1 : incy]
    if zero_c:
        y[:] = np.nan  # must never be read
    Y0 = Y.copy()
    ref = np.zeros(m) if zero_c else y.astype(np.float64)
    for i in range(br):
        a = np.lib.stride_tricks.as_strided(A[i * sa :], (rows, cols), (A.itemsize, lda * A.itemsize))
        x = X[i * sb :][: (k - 1) * incx + 1 : incx]
        ref = ref + (a.T if ta else a).astype(np.float64) @ x.astype(np.float64)
    want = np.maximum(ref, 0) if relu_c else ref
    if kern is None:
        epilogue = "relu" if relu_c else "none"
        kern = gemv.generate(m, k, br, ta, tb, dtype, isa, trans_c=tc, zero_c=zero_c, epilogue=epilogue)
    ldb = incx if tb else k + 7  # ldb is the x stride with trans_b and unused (N = 1) without
    ldc = incy if tc else m + 5  # ldc is the y stride with trans_c and unused without
    kern(A, X, Y, lda, ldb, ldc, sa, sb)
    tol = 4 * np.finfo(dt).eps * (k * br + 1)
    np.testing.assert_allclose(y, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))
    if relu_c:
        assert not np.signbit(y).any()
    others = np.ones(Y.size, bool)
    others[: (m - 1) * incy + 1 : incy] = False
    np.testing.assert_array_equal(Y[others], Y0[others])


#: (trans_a, trans_b, trans_c): A row-major, x strided, y strided
FORMS = [(ta, tb, tc) for ta in (False, True) for tb in (False, True) for tc in (False, True)]


#: GEMV shapes of the sweep: every remainder of rows, vectors and column groups; BR 1..4
GEMV_SHAPES = {"m": st.integers(1, 300), "k": st.integers(1, 300), "br": st.integers(1, 4)}


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["fp32", "fp64"]),
    form=st.sampled_from(FORMS),
    touches=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
    pad=st.tuples(st.integers(0, 9), st.integers(0, 5), st.integers(0, 5)),
    seed=st.integers(0, 2**16),
    **GEMV_SHAPES,
)
def test_gemv_sweep(isa, m, k, br, dtype, form, touches, pad, seed) -> None:
    """Column form (A column-major) and row form (A row-major), each with x and y contiguous or
    strided: every remainder of rows, vectors and column groups, BR steps, the fused touches,
    exact and padded leading dims."""
    ta, tb, tc = form
    run_gemv(
        m, k, br, ta=ta, tb=tb, tc=tc, dtype=dtype, isa=isa, zero_c=touches[0], relu_c=touches[1], pad=pad, seed=seed
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "m,k,br,ta,tb,tc",
    [
        (gemv.M_BLOCK_BYTES // 4 * 2 + 37, 9, 2, False, False, False),  # two full M blocks of y and a remainder
        (gemv.M_BLOCK_BYTES // 4 * 2 + 37, 9, 2, False, True, True),  # the same with y (and x) strided
        (gemv.M_BLOCK_BYTES // 8, 6, 1, False, False, True),  # exactly one block (fp64), two (fp32)
        (9, 4099, 2, True, False, False),  # long rows: many K steps, a masked K tail
        (9, 4099, 2, True, True, True),  # the same with x copied (8198 elements) and y strided
        (4 * gemv.DOT_ROWS + 3, 1, 3, True, True, False),  # K shorter than one vector
    ],
)
def test_gemv_large_and_edges(isa, dtype, m, k, br, ta, tb, tc) -> None:
    run_gemv(m, k, br, ta=ta, tb=tb, tc=tc, dtype=dtype, isa=isa, zero_c=not ta, relu_c=True)


@pytest.mark.parametrize("isa", ISAS)
def test_gemv_row_form_largest_x_copy(isa) -> None:
    """A strided x of exactly `gemv.X_COPY_MAX_BYTES` (every BR step's K elements) is one copy;
    one element more runs in chunks of whole BR steps (the GEMV kernel either way)."""
    k = gemv.X_COPY_MAX_BYTES // 4 // 2
    assert gemv.x_chunks(k, 2, 4) == (2, k) and gemv.x_chunks(k + 1, 2, 4) == (1, k + 1)
    run_gemv(5, k, 2, ta=True, tb=True, tc=True, dtype="fp32", isa=isa, pad=(3, 1, 2))
    run_gemv(5, k + 1, 2, ta=True, tb=True, tc=True, dtype="fp32", isa=isa, pad=(3, 1, 2), zero_c=True, relu_c=True)
    assert brgemm.generate(5, 1, k + 1, 2, True, True, isa=isa).name.startswith("gemv_")


@pytest.mark.parametrize("isa", ISAS)
def test_gemv_row_form_x_in_pieces_of_k(isa) -> None:
    """fp64 K over the buffer: each BR step's K runs in pieces (`x_chunks`), the last one with the
    masked tail."""
    cap = gemv.X_COPY_MAX_BYTES // 8
    k = cap + 4 * 2 + 3
    assert gemv.x_chunks(k, 2, 8) == (1, cap)
    run_gemv(3, k, 2, ta=True, tb=True, tc=True, dtype="fp64", isa=isa, pad=(1, 2, 1), zero_c=True, relu_c=True)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 11),
    k=st.integers(1, 80),
    br=st.integers(1, 9),
    cap=st.sampled_from([128, 192, 256, 512]),
    tc=st.booleans(),
    dtype=st.sampled_from(["fp32", "fp64"]),
    touches=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
    seed=st.integers(0, 2**16),
)
def test_gemv_row_form_chunked_x_matches_numpy(m, k, br, cap, tc, dtype, touches, seed) -> None:
    """The chunked strided-x row form at small buffer sizes (`X_COPY_MAX_BYTES` patched): whole BR
    steps per chunk with a remainder chunk, or K pieces with a remainder piece; y strided or not,
    zeroed first and relu'd after the last chunk; nothing outside the operands touched."""
    isa = "avx512" if available("avx512") else "avx2"
    with mock.patch.object(gemv, "X_COPY_MAX_BYTES", cap):
        run_gemv(
            m, k, br, ta=True, tb=True, tc=tc, dtype=dtype, isa=isa, zero_c=touches[0], relu_c=touches[1], seed=seed
        )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", FORMS)
def test_brgemm_of_one_column_is_the_gemv(isa, form) -> None:
    """``brgemm.generate`` with N = 1 returns the GEMV kernel for every transpose (``trans_c``: a
    strided y), which computes the BRGEMM, fused touches included; the packed forms keep the
    BRGEMM kernel."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    ta, tb, tc = form
    kern = brgemm.generate(37, 1, 21, 3, ta, tb, tc, dtype="fp32", isa=isa, epilogue="relu")
    assert kern.name.startswith("gemv_fp32_")
    run_gemv(37, 21, 3, ta=ta, tb=tb, tc=tc, dtype="fp32", isa=isa, relu_c=True, kern=kern)
    assert brgemm.generate(37, 1, 21, 3, trans_b=True, b_panel=21, isa=isa).name.startswith("brgemm_")
    assert brgemm.generate(37, 2, 21, 3, dtype="fp32", isa=isa).name.startswith("brgemm_")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(m=0, k=1), "m must be"),
        (dict(m=1, k=1 << 17), "k must be"),
        (dict(m=1, k=1, br_size=0), "br_size must be"),
        (dict(m=1, k=1, dtype="fp16"), "dtype must be"),
        (dict(m=1, k=1, isa="sse"), "isa must be"),
        (dict(m=1, k=1, zero_c=2), "zero_c must be"),
        (dict(m=1, k=1, trans_c=2), "trans_c must be"),
    ],
)
def test_gemv_rejects_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        gemv.generate(**kwargs)


def test_gemv_listings_reassemble_to_the_code() -> None:
    """Every form's listing assembles with llvm-mc to exactly the kernel's bytes (generating needs
    no AVX-512, so both ISAs on any x86 host)."""
    for isa in ("avx512", "avx2"):
        for dtype in ("fp32", "fp64"):
            for kern in (
                gemv.generate(4200, 7, 2, False, False, dtype, isa, zero_c=True, epilogue="relu"),
                gemv.generate(77, 9, 1, False, True, dtype, isa),
                gemv.generate(7, 37, 3, True, False, dtype, isa, epilogue="relu"),
                gemv.generate(4200, 7, 2, False, True, dtype, isa, trans_c=True, epilogue="relu"),
                gemv.generate(7, 37, 3, True, True, dtype, isa, trans_c=True, zero_c=True),
            ):
                assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name
