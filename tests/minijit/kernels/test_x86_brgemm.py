"""x86-64 BRGEMM kernels executed natively against a float64 numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.x86_64 import binary, brgemm, unary
from tests.minijit.kernels.x86_util import ISAS, NP, available, brgemm_kernel, colmajor_index, needs_x86

pytestmark = needs_x86


def run_brgemm(m, n, k, br, *, ta=False, tb=False, tc=False, dtype="fp32", isa="avx512", pad=(1, 2, 3), seed=0):
    """Run one kernel on random padded operands; assert the result and the untouched padding."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    c_rows, c_cols = (n, m) if tc else (m, n)
    lda, ldb, ldc = a_rows + pad[0], b_rows + pad[1], c_rows + pad[2]
    sa, sb = lda * a_cols + pad[0], ldb * b_cols + pad[1]
    A = rng.uniform(-1, 1, sa * br).astype(dt)
    B = rng.uniform(-1, 1, sb * br).astype(dt)
    C = rng.uniform(-1, 1, ldc * c_cols + 5).astype(dt)
    C0 = C.copy()
    ref = C[colmajor_index(0, c_rows, c_cols, ldc)].astype(np.float64)
    if tc:
        ref = ref.T
    ref = ref.copy()
    for i in range(br):
        Ab = A[colmajor_index(i * sa, a_rows, a_cols, lda)].astype(np.float64)
        Bb = B[colmajor_index(i * sb, b_rows, b_cols, ldb)].astype(np.float64)
        ref += (Ab.T if ta else Ab) @ (Bb.T if tb else Bb)
    kern = brgemm_kernel(m, n, k, br, ta, tb, tc, dtype, isa)
    kern(A, B, C, lda, ldb, ldc, sa, sb)
    cidx = colmajor_index(0, c_rows, c_cols, ldc)
    got = C[cidx].astype(np.float64)
    if tc:
        got = got.T
    eps = np.finfo(dt).eps
    tol = 4 * eps * (k * br + 1) + 1e-300
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))
    outside = np.ones(C.size, bool)
    outside[cidx.ravel()] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=150)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    k=st.integers(1, 256),
    br=st.integers(1, 16),
    dtype=st.sampled_from(["fp32", "fp64"]),
    tb=st.booleans(),
    pad=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)),
)
def test_brgemm_sweep(isa, m, n, k, br, dtype, tb, pad) -> None:
    run_brgemm(m, n, k, br, tb=tb, dtype=dtype, isa=isa, pad=pad)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "m,n,k,br",
    [(64, 6, 256, 2), (300, 13, 7, 1), (129, 300, 3, 1), (1, 300, 17, 2), (300, 1, 1, 3), (48, 8, 5, 16)],
)
def test_brgemm_large_and_edges(isa, dtype, m, n, k, br) -> None:
    run_brgemm(m, n, k, br, dtype=dtype, isa=isa)


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=30)
@given(
    m=st.integers(1, 24),
    n=st.integers(1, 24),
    k=st.integers(1, 40),
    br=st.integers(1, 4),
    dtype=st.sampled_from(["fp32", "fp64"]),
    flags=st.sampled_from([(1, 0, 0), (1, 1, 0), (0, 0, 1), (1, 1, 1), (0, 1, 1)]),
)
def test_brgemm_transposed_scalar_path(isa, m, n, k, br, dtype, flags) -> None:
    ta, tb, tc = map(bool, flags)
    run_brgemm(m, n, k, br, ta=ta, tb=tb, tc=tc, dtype=dtype, isa=isa)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(m=0, n=1, k=1, br_size=1), "m must be"),
        (dict(m=1, n=-1, k=1, br_size=1), "n must be"),
        (dict(m=1, n=1, k=1.5, br_size=1), "k must be"),
        (dict(m=1, n=1, k=1, br_size=0), "br_size must be"),
        (dict(m=1, n=1, k=1, br_size=1, dtype="fp16"), "dtype must be"),
        (dict(m=1, n=1, k=1, br_size=1, isa="sse"), "isa must be"),
        (dict(m=1, n=1, k=1, br_size=1, trans_a=2), "trans_a must be"),
    ],
)
def test_brgemm_rejects_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        brgemm.generate(**kwargs)


def test_brgemm_blocking() -> None:
    assert brgemm.blocking(64 * 3 + 20, "avx512") == [(3, 4, 6, 16), (1, 2, 12, 4)]
    assert brgemm.blocking(32, "avx512", "fp64") == [(1, 4, 6, 8)]
    assert brgemm.blocking(20, "avx2") == [(1, 2, 6, 8), (1, 1, 12, 4)]


def test_listings_reassemble_to_the_code() -> None:
    """Every generated listing assembles with llvm-mc to exactly the kernel's bytes."""
    kernels = []
    for isa in ("avx512", "avx2"):
        if not available(isa):
            continue
        kernels += [
            brgemm_kernel(70, 13, 9, 2, False, False, False, "fp32", isa),
            brgemm_kernel(37, 7, 6, 1, False, True, False, "fp64", isa),
            brgemm_kernel(5, 4, 3, 2, True, True, True, "fp32", isa),
            unary.generate(19, 11, True, "fp32", "relu", isa),
            unary.generate(13, 5, False, "fp64", "zero", isa),
            binary.generate(21, 3, "fp32", "max", isa),
            binary.generate(7, 2, "fp64", "div", isa),
        ]
    # dense-B transposes (overlapping vector stores, exact last rows: xmm/scalar stores, vextractf128,
    # vshufps) for every edge width; generating needs no AVX-512, so both ISAs on any x86 host
    for isa in ("avx512", "avx2"):
        kernels += [unary.generate(16, w, True, "fp32", "copy", isa, dense_b=True) for w in range(1, 8)]
        kernels += [unary.generate(8, w, True, "fp64", "relu", isa, dense_b=True) for w in range(1, 4)]
    for kern in kernels:
        assert kern.listing
        assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name


def pack_panels(B: np.ndarray, width: int, br_stride: int, panel: int, n_panels: int) -> np.ndarray:
    """B (br, K, N) as the kernel's micro-panels: panel p, BR step i, row k at p*panel + i*br_stride + k*width."""
    br, k, n = B.shape
    out = np.full(n_panels * panel, np.nan, B.dtype)  # unwritten slots are never read
    for p in range(n_panels):
        cols = B[:, :, p * width : (p + 1) * width]
        for i in range(br):
            for kk in range(k):
                at = p * panel + i * br_stride + kk * width
                out[at : at + cols.shape[2]] = cols[i, kk]
    return out


def block_operands(seed, dtype, m, n, k, br, zero_c=False):
    """A as (br, K, lda = m + 3), B as (br, K, N), C with columns ``ldc = m + 1`` apart (its block
    NaN with ``zero_c``: it must never be read), a copy C0, and the float64 sum of A_br B_br
    (plus C's block unless ``zero_c``). Returns (A, B, C, C0, ref, lda, ldc, numpy dtype)."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    lda, ldc = m + 3, m + 1
    A = rng.uniform(-1, 1, (br, k, lda)).astype(dt)
    B = rng.uniform(-1, 1, (br, k, n)).astype(dt)
    C = rng.uniform(-1, 1, n * ldc + 4).astype(dt)
    if zero_c:
        C[: n * ldc].reshape(n, ldc)[:, :m] = np.nan
    ref = np.zeros((m, n)) if zero_c else C[: n * ldc].reshape(n, ldc)[:, :m].T.astype(np.float64)
    for i in range(br):
        ref = ref + A[i, :, :m].T.astype(np.float64) @ B[i].astype(np.float64)
    return A, B, C, C.copy(), ref, lda, ldc, dt


def assert_c_block(C, C0, want, m, n, ldc, depth, dt) -> None:
    """C's m x n block (columns ``ldc`` apart) equals ``want`` within the rounding of ``depth``
    products; every element outside the block is unchanged from ``C0``."""
    got = C[: n * ldc].reshape(n, ldc)[:, :m].T
    tol = 4 * np.finfo(dt).eps * (depth + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))
    outside = np.ones(C.size, bool)
    outside[(np.arange(n)[:, None] * ldc + np.arange(m)).ravel()] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


#: block kernel shapes of the packed / N-outer sweeps: remainder rows and columns, short K, BR 1..3
BLOCK_SHAPES = {
    "m": st.integers(1, 70),
    "n": st.integers(1, 30),
    "k": st.integers(1, 40),
    "br": st.integers(1, 3),
    "seed": st.integers(0, 2**16),
}


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=25, deadline=None)
@given(br_outer=st.booleans(), panels=st.sampled_from(["b", "a", "ab"]), **BLOCK_SHAPES)
def test_packed_panels(isa, dtype, m, n, k, br, br_outer, panels, seed):
    """B read from micro-panels (``b_panel``: every M block, the remainder too, uses the full
    block's panel width) and/or A (``a_panel``: register-block rows per panel, the remainder
    panel partly filled); the result matches numpy and nothing outside C changes."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    A, B, C, C0, ref, lda, ldc, dt = block_operands(seed, dtype, m, n, k, br)
    width = brgemm.panel_width(isa)
    n_panels = -(-n // width)
    br_stride = k * width
    panel = br * br_stride
    kw, args = {}, [A, B, lda, None, k * lda, None]
    if "a" in panels:  # A (br, K, M) in panels of `rows` rows: the same packing on the transposed view
        rows = brgemm.panel_rows(isa, dtype)
        a_panel = br * k * rows
        packed_a = pack_panels(A[:, :, :m], rows, k * rows, a_panel, -(-m // rows))
        kw["a_panel"], args[0], args[2], args[4] = a_panel, packed_a, rows, k * rows
    if "b" in panels:
        packed_b = pack_panels(B, width, br_stride, panel, n_panels)
        kw["b_panel"], args[1], args[3], args[5] = panel, packed_b, width, br_stride
    else:
        args[1], args[3], args[5] = np.ascontiguousarray(B.transpose(0, 2, 1)), k, n * k  # column-major B (br, N, K)
    kern = brgemm.generate(m, n, k, br, trans_b="b" in panels, dtype=dtype, isa=isa, br_outer=br_outer, **kw)
    assert all(f"_{x}p{v}" in kern.name for x, v in (("a", kw.get("a_panel")), ("b", kw.get("b_panel"))) if v)
    kern(args[0], args[1], C, args[2], args[3], ldc, args[4], args[5])
    assert_c_block(C, C0, ref, m, n, ldc, k * br, dt)


@given(
    panel=st.integers(0, 1 << 22),
    n_blocks=st.integers(0, 200),
    br=st.integers(1, 64),
    k_loops=st.integers(0, 2048),
)
def test_next_panel_prefetch_covers_the_panel(panel, n_blocks, br, k_loops):
    """An M block's N blocks prefetch the whole next A panel between them (in part only where
    `A_NEXT_PER_ITER` lines in every K iteration of every block cannot cover it), at most one block's
    share of lines beyond it, and never more K iterations than a BR step has."""
    per_iter, iters = brgemm.next_panel_prefetch(panel, n_blocks, br, k_loops)
    lines = -(-panel // 64)
    if panel == 0 or n_blocks == 0 or k_loops == 0:
        assert (per_iter, iters) == (0, 0)
        return
    assert 1 <= per_iter <= brgemm.A_NEXT_PER_ITER and 1 <= iters <= k_loops
    fetched = per_iter * iters * br * n_blocks
    share = -(-lines // n_blocks)
    most = brgemm.A_NEXT_PER_ITER * k_loops * br * n_blocks
    assert fetched >= min(lines, most)
    assert fetched <= (share + per_iter * br) * n_blocks  # each block: its share, rounded up to a BR pass


@needs_x86
def test_packed_b_panels_need_trans_b():
    with pytest.raises(ValueError, match="b_panel"):
        brgemm.generate(16, 6, 4, 1, dtype="fp32", isa="avx2", b_panel=24)
    with pytest.raises(ValueError, match="b_panel"):
        brgemm.generate(16, 6, 4, 1, trans_b=True, trans_c=True, dtype="fp32", isa="avx2", b_panel=24)
    with pytest.raises(ValueError, match="b_panel"):
        brgemm.generate(16, 6, 4, 1, trans_b=True, dtype="fp32", isa="avx2", b_panel=0)
    with pytest.raises(ValueError, match="a_panel"):
        brgemm.generate(16, 6, 4, 1, trans_a=True, dtype="fp32", isa="avx2", a_panel=64)
    with pytest.raises(ValueError, match="a_panel"):
        brgemm.generate(16, 6, 4, 1, dtype="fp32", isa="avx2", a_panel=-1)


@needs_x86
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_panel_kernels_reassemble_on_every_isa(isa):
    """The packed-panel forms (A, B, both; BR inside and outside; fp32/fp64) assemble with llvm-mc to
    exactly the kernel's bytes. Generating needs no AVX-512 (running does: see test_packed_panels)."""
    for m, n, k, br, dtype in ((64, 12, 16, 1, "fp32"), (70, 13, 9, 3, "fp32"), (33, 7, 5, 2, "fp64")):
        rows, width = brgemm.panel_rows(isa, dtype), brgemm.panel_width(isa)
        for a_panel, b_panel in ((br * k * rows, None), (None, br * k * width), (br * k * rows, br * k * width)):
            for br_outer in (None, True):
                kern = brgemm.generate(
                    m, n, k, br, trans_b=b_panel is not None, dtype=dtype, isa=isa,
                    br_outer=br_outer, a_panel=a_panel, b_panel=b_panel,
                )  # fmt: skip
                assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name
                assert "prefetcht0" in kern.listing or n <= brgemm.panel_width(isa)  # next C block, one per N block
                # packed A in the M-outer order: the blocks prefetch the next M block's panel
                assert (brgemm.A_NEXT_HINT in kern.listing) == (
                    a_panel is not None and (br_outer is None or br == 1)
                ), kern.name


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 20),
    k=st.integers(1, 20),
    br=st.integers(1, 3),
    touches=st.sampled_from([(True, False), (False, True), (True, True)]),
    seed=st.integers(0, 2**16),
)
def test_fused_touches(isa, dtype, m, n, k, br, touches, seed):
    """zero_c: C = sum A B with C never read (it starts as NaN); relu_c: relu applied before the
    store, exactly np.maximum(x, 0) with -0 -> +0; nothing outside C changes."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    zero_c, relu_c = touches
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    lda, ldb, ldc = m + 1, k + 2, m + 3
    A = rng.uniform(-1, 1, br * k * lda).astype(dt)
    B = rng.uniform(-1, 1, br * n * ldb).astype(dt)
    C = rng.uniform(-1, 1, n * ldc).astype(dt)
    if zero_c:
        C.reshape(n, ldc)[:, :m] = np.nan  # must never be read
    C0 = C.copy()
    acc = np.zeros((m, n)) if zero_c else C0.reshape(n, ldc)[:, :m].T.astype(np.float64)
    for i in range(br):
        acc = acc + A[i * k * lda :].reshape(-1)[: k * lda].reshape(k, lda)[:, :m].T.astype(np.float64) @ (
            B[i * n * ldb :][: n * ldb].reshape(n, ldb)[:, :k].T.astype(np.float64)
        )
    want = np.maximum(acc, 0) if relu_c else acc
    kern = brgemm.generate(m, n, k, br, dtype=dtype, isa=isa, zero_c=zero_c, epilogue="relu" if relu_c else "none")
    kern(A, B, C, lda, ldb, ldc, k * lda, n * ldb)
    got = C.reshape(n, ldc)[:, :m].T
    tol = 4 * np.finfo(dt).eps * (k * br + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))
    if relu_c:
        assert not np.signbit(got).any()  # no -0
    pad = C.reshape(n, ldc)[:, m:]
    np.testing.assert_array_equal(pad, C0.reshape(n, ldc)[:, m:])


@needs_x86
def test_fused_touches_need_the_vector_path():
    with pytest.raises(ValueError, match="fused touches"):
        brgemm.generate(8, 4, 4, 1, trans_a=True, dtype="fp32", isa="avx2", zero_c=True)
    with pytest.raises(ValueError, match="fused touches"):
        brgemm.generate(8, 4, 4, 2, dtype="fp32", isa="avx2", epilogue="relu", br_outer=True)
    with pytest.raises(ValueError, match="zero_c"):
        brgemm.generate(8, 4, 4, 1, dtype="fp32", isa="avx2", zero_c="yes")


@pytest.mark.parametrize("nb,mv", [(6, 2), (12, 1), (6, 4), (8, 3)])
def test_n_tail_covers_n_and_keeps_fma_chains(nb, mv):
    """The N blocks cover every column once; a tail block is never narrower than the remainder it
    replaces, and a split tail keeps at least as many accumulators per block as the remainder had."""
    for n in range(1, 5 * nb):
        count, widths = brgemm.n_tail(n, nb, mv)
        assert count * nb + sum(widths) == n
        assert all(0 < w <= nb for w in widths)
        rem = n % nb
        if len(widths) == 2:  # merged with the last full block
            assert rem and mv * rem < brgemm.MIN_CHAINS and min(widths) >= rem and max(widths) - min(widths) <= 1
        assert brgemm.n_tail(n, nb, mv, panels=True) == (n // nb, [rem] if rem else [])


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 40),
    k=st.integers(1, 40),
    br=st.integers(1, 3),
    b_panels=st.booleans(),
    touches=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
    seed=st.integers(0, 2**16),
)
def test_copied_a(isa, dtype, m, n, k, br, b_panels, touches, seed):
    """``a_copy``: each M block's first N block copies its A rows (strided, per BR step) into the
    stack buffer the other N blocks read; B column-major or in panels, with and without fused
    touches. The result matches numpy, nothing outside C changes, and A is only read."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    # every drawn shape fits (AVX-512 1-vector remainder blocks narrow to 15 columns, 65..70 and
    # 1..16 rows of fp32 included); the buffer bound is tested below
    assert brgemm.a_copy_fits(m, n, k, br, isa, dtype, trans_b=b_panels)
    zero_c, relu_c = touches
    A, B, C, C0, acc, lda, ldc, dt = block_operands(seed, dtype, m, n, k, br, zero_c)
    A0 = A.copy()
    want = np.maximum(acc, 0) if relu_c else acc
    width = brgemm.panel_width(isa)
    if b_panels:
        b_arg = pack_panels(B, width, k * width, br * k * width, -(-n // width))
        ldb, sb, kw = width, k * width, {"b_panel": br * k * width}
    else:
        b_arg, ldb, sb, kw = np.ascontiguousarray(B.transpose(0, 2, 1)), k, n * k, {}
    kern = brgemm.generate(
        m, n, k, br, trans_b=b_panels, dtype=dtype, isa=isa, a_copy=True, zero_c=zero_c,
        epilogue="relu" if relu_c else "none", **kw,
    )  # fmt: skip
    assert kern.name.endswith("_ac")
    kern(A, b_arg, C, lda, ldb, ldc, k * lda, sb)
    assert_c_block(C, C0, want, m, n, ldc, k * br, dt)
    np.testing.assert_array_equal(A, A0)


@needs_x86
def test_copied_a_with_a_large_buffer_on_a_worker_thread():
    """A 16 x 24 x 2048 x BR 2 kernel keeps 256 KiB of copied A on the stack (touched page by page
    on entry); run on a Python thread it matches numpy."""
    import threading

    isa = "avx2"
    m, n, k, br = 16, 24, 2048, 2
    assert brgemm.a_copy_bytes(k, br, isa) == brgemm.A_COPY_MAX_BYTES
    kern = brgemm.generate(m, n, k, br, dtype="fp32", isa=isa, a_copy=True)
    assert "mov qword ptr [rsp - 262144], 0" in kern.listing  # the deepest page probe
    rng = np.random.default_rng(3)
    A = rng.uniform(-1, 1, (br, k, m)).astype(np.float32)
    B = rng.uniform(-1, 1, (br, n, k)).astype(np.float32)
    C = np.zeros((n, m), np.float32)
    want = sum(A[i].T.astype(np.float64) @ B[i].T.astype(np.float64) for i in range(br))
    done = []
    worker = threading.Thread(target=lambda: done.append(kern(A, B, C, m, k, m, k * m, n * k)))
    worker.start()
    worker.join()
    assert done
    np.testing.assert_allclose(C.T, want, rtol=0, atol=1e-3)


@needs_x86
def test_copied_a_rejects_what_it_cannot_take():
    with pytest.raises(ValueError, match="a_copy"):
        brgemm.generate(16, 6, 4, 1, trans_a=True, dtype="fp32", isa="avx2", a_copy=True)
    with pytest.raises(ValueError, match="a_copy"):
        brgemm.generate(16, 6, 4, 1, dtype="fp32", isa="avx2", a_copy=True, a_panel=64)
    with pytest.raises(ValueError, match="a_copy"):
        brgemm.generate(16, 6, 4, 2, dtype="fp32", isa="avx2", a_copy=True, br_outer=True)
    with pytest.raises(ValueError, match="262144"):  # one float too many for the buffer
        brgemm.generate(16, 6, 4097, 1, dtype="fp32", isa="avx2", a_copy=True)
    assert not brgemm.a_copy_fits(16, 6, 4097, 1, "avx2")
    # AVX-512's 1-vector blocks of 20 columns would take all four B pointers, r15 (SCR) included:
    # a kernel that copies A narrows them to 15 (three pointers)
    assert brgemm.blocking(16, "avx512")[-1][2] == 20 and brgemm.blocking(80, "avx512")[-1][2] == 20
    assert brgemm.blocking(16, "avx512", a_copy=True) == [(1, 1, brgemm.A_COPY_MAX_NB, 16)]
    assert brgemm.blocking(80, "avx512", a_copy=True) == [(1, 4, 6, 16), (1, 1, 15, 16)]
    assert brgemm.a_copy_fits(16, 40, 8, 1, "avx512") and brgemm.a_copy_fits(16, 40, 8, 1, "avx512", trans_b=True)
    kern = brgemm.generate(80, 40, 8, 1, dtype="fp32", isa="avx512", a_copy=True)
    assert kern.name.endswith("_ac")  # computed against numpy by test_copied_a (m 1..70)
    with pytest.raises(ValueError, match="a_copy"):
        brgemm.generate(16, 6, 4, 1, dtype="fp32", isa="avx2", a_copy="yes")


@needs_x86
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_copied_a_kernels_reassemble(isa):
    """The copied-A forms (B column-major and in panels, BR 1..3, fused touches, masked remainder
    rows) assemble with llvm-mc to exactly the kernel's bytes; generating needs no AVX-512."""
    for m, n, k, br, dtype in ((64, 12, 16, 1, "fp32"), (70, 13, 9, 3, "fp32"), (33, 7, 5, 2, "fp64")):
        width = brgemm.panel_width(isa)
        for b_panel in (None, br * k * width):
            assert brgemm.a_copy_fits(m, n, k, br, isa, dtype, trans_b=b_panel is not None)
            for zero_c in (False, True):
                kern = brgemm.generate(
                    m, n, k, br, trans_b=b_panel is not None, dtype=dtype, isa=isa,
                    a_copy=True, b_panel=b_panel, zero_c=zero_c,
                )  # fmt: skip
                assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=30, deadline=None)
@given(
    panels=st.sampled_from(["", "a", "b", "ab", "t"]),
    touches=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
    **BLOCK_SHAPES,
)
def test_n_outer(isa, dtype, m, n, k, br, panels, touches, seed):
    """``n_outer``: the N blocks (full, then the tails) outermost, each walking every M block (the
    masked remainder too, its mask set per N block); A column-major or in panels, B column-major,
    row-major (``t``) or in panels, with and without fused touches. The result matches numpy and
    nothing outside C changes."""
    if not available(isa):
        pytest.skip(f"host lacks {isa}")
    zero_c, relu_c = touches
    A, B, C, C0, acc, lda, ldc, dt = block_operands(seed, dtype, m, n, k, br, zero_c)
    want = np.maximum(acc, 0) if relu_c else acc
    width, rows = brgemm.panel_width(isa), brgemm.panel_rows(isa, dtype)
    a_arg, sa, kw = A, k * lda, {}
    if "a" in panels:
        kw["a_panel"] = br * k * rows
        a_arg, lda, sa = pack_panels(A[:, :, :m], rows, k * rows, br * k * rows, -(-m // rows)), rows, k * rows
    if "b" in panels:
        b_arg, ldb, sb = pack_panels(B, width, k * width, br * k * width, -(-n // width)), width, k * width
        kw["b_panel"] = br * k * width
    elif panels == "t":  # row-major B: b[n + k*ldb]
        b_arg, ldb, sb = B, n, k * n
    else:
        b_arg, ldb, sb = np.ascontiguousarray(B.transpose(0, 2, 1)), k, n * k  # column-major B (br, N, K)
    kern = brgemm.generate(
        m, n, k, br, trans_b=panels in ("b", "ab", "t"), dtype=dtype, isa=isa, n_outer=True,
        zero_c=zero_c, epilogue="relu" if relu_c else "none", **kw,
    )  # fmt: skip
    assert kern.name.endswith("_no")
    kern(a_arg, b_arg, C, lda, ldb, ldc, sa, sb)
    assert_c_block(C, C0, want, m, n, ldc, k * br, dt)


@needs_x86
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_n_outer_kernels_reassemble(isa):
    """The N-outer forms (masked remainder rows, N tails, A and B panels, BR 1..3) assemble with
    llvm-mc to exactly the kernel's bytes; they prefetch nothing (C streams down its columns)."""
    for m, n, k, br, dtype in ((64, 12, 16, 1, "fp32"), (70, 13, 9, 3, "fp32"), (33, 7, 5, 2, "fp64")):
        rows, width = brgemm.panel_rows(isa, dtype), brgemm.panel_width(isa)
        for a_panel, b_panel in ((None, None), (br * k * rows, br * k * width)):
            kern = brgemm.generate(
                m, n, k, br, trans_b=b_panel is not None, dtype=dtype, isa=isa,
                a_panel=a_panel, b_panel=b_panel, n_outer=True,
            )  # fmt: skip
            assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name
            assert "prefetcht0" not in kern.listing


@needs_x86
def test_n_outer_rejects_what_it_cannot_take():
    for kw in ({"trans_a": True}, {"trans_c": True}, {"a_copy": True}, {"br_outer": True}):
        with pytest.raises(ValueError, match="n_outer"):
            brgemm.generate(16, 6, 4, 2, dtype="fp32", isa="avx2", n_outer=True, **kw)
    with pytest.raises(ValueError, match="n_outer"):
        brgemm.generate(16, 6, 4, 1, dtype="fp32", isa="avx2", n_outer="yes")
