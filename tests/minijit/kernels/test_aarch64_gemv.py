"""NEON GEMV kernels (the BRGEMM of one column), executed (natively on AArch64, else in the qemu
worker) against a float64 numpy reference.

y sits in a buffer of sentinels (GUARD elements either side and, with ``trans_c``, between its
strided elements) that must survive the call; the padding of A (between its columns or rows and
between BR steps) and of x (between strided elements and BR steps) is NaN, so a kernel that reads
and uses anything outside the operands fails the comparison.
"""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.aarch64 import mca
from minijit.kernels.aarch64.brgemm import NeonBrgemm as neon_brgemm
from minijit.kernels.aarch64.brgemm import SveBrgemm
from minijit.kernels.aarch64.gemv import NeonGemv as neon_gemv
from minijit.kernels.aarch64.gemv import SveGemv
from tests.conftest import examples

NP = {"fp32": np.float32, "fp64": np.float64}
GUARD = 5
SENTINEL = -7777.0
FLAGS = [(ta, tb, tc) for ta in (False, True) for tb in (False, True) for tc in (False, True)]

gemv_kernel = functools.lru_cache(maxsize=None)(neon_gemv.generate)


def run(m, k, br, flags, dtype, pads=(1, 2, 1, 3), seed=0, kern=None) -> None:
    """y += sum_br A_br x_br through ``kern`` (default: `neon_gemv.generate`); asserts the result
    and that no element of y's buffer other than y changed. ``pads``: extra rows / columns of A
    (lda), x stride - 1 (``trans_b``), y stride - 1 (``trans_c``), extra elements between BR steps."""
    ta, tb, tc = flags
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    rows, cols = (k, m) if ta else (m, k)  # A as stored: `rows` contiguous elements per column
    lda = rows + pads[0]
    incx = 1 + pads[1] if tb else 1
    incy = 1 + pads[2] if tc else 1
    size_a, size_x = lda * (cols - 1) + rows, (k - 1) * incx + 1
    stride_a, stride_x = size_a + pads[3], size_x + pads[3]
    a = np.full(stride_a * (br - 1) + size_a, np.nan, t)
    x = np.full(stride_x * (br - 1) + size_x, np.nan, t)
    ref = None
    for r in range(br):
        ar = np.lib.stride_tricks.as_strided(a[r * stride_a :], (rows, cols), (a.itemsize, lda * a.itemsize))
        xr = x[r * stride_x :][:size_x:incx]
        ar[...] = rng.uniform(-1, 1, (rows, cols))
        xr[...] = rng.uniform(-1, 1, k)
        term = (ar.T if ta else ar).astype(np.float64) @ xr.astype(np.float64)
        ref = term if ref is None else ref + term
    ybuf = np.full(GUARD + (m - 1) * incy + 1 + GUARD, SENTINEL, t)
    y = ybuf[GUARD : GUARD + (m - 1) * incy + 1 : incy]
    y[...] = rng.uniform(-1, 1, m)
    want = y.astype(np.float64) + ref
    inside = np.zeros(ybuf.size, bool)
    inside[GUARD : GUARD + (m - 1) * incy + 1 : incy] = True
    kern = kern or gemv_kernel(m, k, br, ta, tb, tc, dtype)
    ldb = incx if tb else k + 7  # the x stride with trans_b, unused without
    ldc = incy if tc else m + 5  # the y stride with trans_c, unused without
    kern(a, x, ybuf[GUARD:], lda, ldb, ldc, stride_a, stride_x)
    tol = 4 * np.finfo(t).eps * (k * br + 2)
    np.testing.assert_allclose(y, want, rtol=0, atol=tol, err_msg=str(kern))
    assert np.all(ybuf[~inside] == SENTINEL), f"{kern}: wrote outside y"


sizes = st.integers(1, 70)
pads = st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=examples(150), deadline=None)
@given(m=sizes, k=sizes, br=st.integers(1, 3), flags=st.sampled_from(FLAGS), pads=pads)
def test_gemv_sweep(dtype, m, k, br, flags, pads):
    run(m, k, br, flags, dtype, pads, seed=m * 71 + k)


@pytest.mark.parametrize("flags", FLAGS)
def test_gemv_every_form_at_the_edges(flags):
    """Every form with M and K ragged against the column step (8 columns x 48 rows) and the row
    step (8 rows x 8 elements of K), fp32 and fp64."""
    run(53, 23, 2, flags, "fp32", seed=1)
    run(61, 21, 3, flags, "fp64", pads=(0, 1, 2, 0), seed=2)


@pytest.mark.parametrize("flags", FLAGS)
def test_gemv_past_one_y_block(flags):
    """M past one 16 KiB block of y (4096 fp32, 2048 fp64): the M block loop, its last partial
    block and, with trans_c, the stack buffer it runs in."""
    run(4100, 3, 2, flags, "fp32", seed=3)
    run(2 * 2048 + 5, 2, 1, flags, "fp64", seed=4)


def test_gemv_largest_x_copy():
    """Row form with a strided x: the largest x that fits the stack buffer is one copy; one element
    more runs in chunks of whole BR steps, the GEMV kernel through `neon_brgemm.generate` too."""
    k = neon_gemv.X_COPY_MAX_BYTES // (4 * 2)
    assert neon_gemv.x_chunks(k, 2, 4) == (2, k) and neon_gemv.x_chunks(k + 1, 2, 4) == (1, k + 1)
    run(3, k, 2, (True, True, False), "fp32", seed=5)
    kern = neon_brgemm.generate(2, 1, k + 1, 2, True, True)
    assert kern.name == f"neon_gemv_2x{k + 1}_br2_fp32_ta_tb"
    run(2, k + 1, 2, (True, True, False), "fp32", seed=6, kern=kern)


def test_gemv_x_in_pieces_of_k():
    """fp64 K over the buffer: each BR step's K runs in pieces of whole K steps (`x_chunks`), the
    last one with the d tail; y strided."""
    cap = neon_gemv.X_COPY_MAX_BYTES // 8
    k = cap + 4 * 2 + 1
    assert neon_gemv.x_chunks(k, 2, 8) == (1, cap)
    run(3, k, 2, (True, True, True), "fp64", seed=8)


def chunked_x_cases(caps: list[int], k_max: int):
    """``given`` for the chunked strided-x row form: m, k (at most ``k_max``), br, ``cap`` (the
    patched `X_COPY_MAX_BYTES`) from ``caps``, tc (trans_c), dtype and pads."""
    return given(
        m=st.integers(1, 11),
        k=st.integers(1, k_max),
        br=st.integers(1, 6),
        cap=st.sampled_from(caps),
        tc=st.booleans(),
        dtype=st.sampled_from(["fp32", "fp64"]),
        pads=pads,
    )


@settings(max_examples=examples(50), deadline=None)
@chunked_x_cases([32, 96, 128, 200, 256], 60)
@example(m=9, k=48, br=2, cap=96, tc=False, dtype="fp32", pads=(1, 2, 1, 3))  # K pieces, no remainder
@example(m=3, k=10, br=7, cap=128, tc=True, dtype="fp32", pads=(0, 1, 0, 2))  # 3 steps per chunk, remainder
def test_gemv_chunked_x_matches_numpy(m, k, br, cap, tc, dtype, pads):
    """The chunked strided-x row form at small buffer sizes (`X_COPY_MAX_BYTES` patched to ``cap``
    bytes): whole BR steps per chunk with a remainder chunk, or K pieces with a remainder piece
    (or all of x in one copy); y strided or not; nothing outside y written."""
    with mock.patch.object(neon_gemv, "X_COPY_MAX_BYTES", cap):
        kern = neon_gemv.generate(m, k, br, True, True, tc, dtype)
    run(m, k, br, (True, True, tc), dtype, pads, seed=m * 71 + k, kern=kern)


@pytest.mark.parametrize("flags", FLAGS)
def test_brgemm_of_one_column_is_the_gemv(flags):
    """`neon_brgemm.generate` with n = 1 returns the GEMV kernel (every transpose) and computes
    the BRGEMM; n = 2 or an explicit block keep the BRGEMM kernel."""
    for dtype, (m, k) in (("fp32", (19, 11)), ("fp64", (9, 6))):
        kern = neon_brgemm.generate(m, 1, k, 2, *flags, dtype)
        assert kern.name == f"neon_gemv_{m}x{k}_br2_{dtype}" + "".join(
            f for f, on in zip(("_ta", "_tb", "_tc"), flags, strict=True) if on
        )
        run(m, k, 2, flags, dtype, seed=7, kern=kern)
    assert neon_brgemm.generate(5, 2, 3, 1, *flags).name.startswith("neon_brgemm_")
    assert neon_brgemm.generate(5, 1, 3, 1, *flags, block=(4, 1)).name.startswith("neon_brgemm_")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"m": 0, "k": 1}, "m"),
        ({"m": 1, "k": -2}, "k"),
        ({"m": 1, "k": 1.5}, "k"),
        ({"m": True, "k": 1}, "m"),
        ({"m": 1, "k": 1, "br_size": 0}, "br_size"),
        ({"m": 1, "k": 1, "dtype": "fp16"}, "dtype"),
        ({"m": 1, "k": 1, "trans_a": 1}, "trans_a"),
        ({"m": 1, "k": 1, "trans_b": "yes"}, "trans_b"),
        ({"m": 1, "k": 1, "trans_c": None}, "trans_c"),
    ],
)
@pytest.mark.parametrize("gemv, brgemm", [(neon_gemv, neon_brgemm), (SveGemv, SveBrgemm)], ids=["neon", "sve"])
def test_gemv_rejects_bad_arguments(kwargs, match, gemv, brgemm):
    """Bad arguments raise ValueError naming the argument, from the GEMV generator and from the
    routing in the BRGEMM's ``generate`` (before any kernel is chosen), on NEON and SVE."""
    with pytest.raises(ValueError, match=match):
        gemv.program(**kwargs)
    with pytest.raises(ValueError, match=match):
        brgemm.generate(n=1, **kwargs)


@pytest.mark.parametrize(
    "args, loop",
    [
        ((100, 19, 2), "rows"),
        ((100, 19, 2, False, True, True, "fp64"), "rows"),
        ((37, 45, 3, True), "k"),
        ((21, 30, 2, True, True, True, "fp64"), "k"),
    ],
)
@pytest.mark.parametrize("gemv, branch", [(neon_gemv, "b.ne #-4"), (SveGemv, "b.ge #-4")], ids=["neon", "sve"])
def test_listing_reassembles_and_names_its_loop(args, loop, gemv, branch):
    """The kernel's listing reassembles (llvm-mc) to its bytes; the body `program` returns is the
    innermost loop of the listing (column form: rows of y; row form: K), less its counter; SVE's
    full steps run unpredicated (p0)."""
    a, body = gemv.program(*args)
    assert llvm.assemble(a.listing()) == a.code()
    lines = [s.strip() for s in mca.loop_body(a.listing(), loop).splitlines()]
    assert lines[:-2] == [s.strip() for s in body.splitlines()]
    assert lines[-2].startswith("subs") and lines[-1] == branch
    fmlas = sum(s.startswith("fmla") for s in lines)
    if loop == "rows":
        assert fmlas == gemv.COLS * gemv.ROW_VECTORS
    else:
        assert fmlas == gemv.DOT_ROWS * gemv.DOT_VECTORS
    assert not any(s.startswith(("whilelt", "cnt")) for s in lines)
