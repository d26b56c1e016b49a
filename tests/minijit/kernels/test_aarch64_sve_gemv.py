"""SVE GEMV kernels (the BRGEMM of one column): the same bytes at SVE VL 128, 256 and 512, executed
(natively on AArch64 at the host's length, else in the qemu worker at each) against a float64
numpy reference.

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

from minijit import kernels
from minijit.kernels.aarch64 import mca
from minijit.kernels.aarch64.brgemm import SveBrgemm as sve_brgemm
from minijit.kernels.aarch64.gemv import SveGemv as sve_gemv
from minijit.runtime import load, runs_natively
from tests.conftest import examples
from tests.minijit.kernels.test_aarch64_gemv import chunked_x_cases
from tests.minijit.kernels.test_aarch64_sve import _abi_wrapper

VLS = [128] if runs_natively("aarch64") else [128, 256, 512]
NP = {"fp32": np.float32, "fp64": np.float64}
GUARD = 5
SENTINEL = -7777.0
FLAGS = [(ta, tb, tc) for ta in (False, True) for tb in (False, True) for tc in (False, True)]


@functools.cache
def gemv_kernels(m, k, br, ta, tb, tc, dtype) -> list:
    """`sve_gemv`'s kernel at every length in VLS, loaded from one program's bytes."""
    a, _ = sve_gemv.program(m, k, br, ta, tb, tc, dtype)
    sig = sve_gemv.signature(dtype)
    return [load(a.code(), sig, isa="aarch64", name=a.name, listing=a.listing(), sve_vl=vl) for vl in VLS]


def run(m, k, br, flags, dtype, pads=(1, 2, 1, 3), seed=0, kerns=None) -> None:
    """y += sum_br A_br x_br through each of ``kerns`` (default: `gemv_kernels`, one per vector
    length); asserts the result and that no element of y's buffer other than y changed. ``pads``:
    extra rows / columns of A (lda), x stride - 1 (``trans_b``), y stride - 1 (``trans_c``), extra
    elements between BR steps."""
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
    y0 = rng.uniform(-1, 1, m)
    inside = np.zeros(GUARD + (m - 1) * incy + 1 + GUARD, bool)
    inside[GUARD : GUARD + (m - 1) * incy + 1 : incy] = True
    ldb = incx if tb else k + 7  # the x stride with trans_b, unused without
    ldc = incy if tc else m + 5  # the y stride with trans_c, unused without
    tol = 4 * np.finfo(t).eps * (k * br + 2)
    for kern in kerns or gemv_kernels(m, k, br, ta, tb, tc, dtype):
        ybuf = np.full(inside.size, SENTINEL, t)
        ybuf[inside] = y0
        kern(a, x, ybuf[GUARD:], lda, ldb, ldc, stride_a, stride_x)
        y = ybuf[inside]
        np.testing.assert_allclose(y, y0.astype(t).astype(np.float64) + ref, rtol=0, atol=tol, err_msg=str(kern))
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
    """Every form with M and K ragged against the column step (8 columns x 8 vectors of y: 32
    fp32 / 16 fp64 rows at 128 bits, 128 / 64 at 512) and the row step (8 rows x 2 vectors of K),
    so that full steps and every count of remainder vectors run at some length, fp32 and fp64."""
    run(157, 23, 2, flags, "fp32", seed=1)
    run(61, 37, 3, flags, "fp64", pads=(0, 1, 2, 0), seed=2)


@pytest.mark.parametrize("flags", FLAGS)
def test_gemv_past_one_y_block(flags):
    """M past one 16 KiB block of y (4096 fp32, 2048 fp64): the M block loop, its last partial
    block and, with trans_c, the stack buffer it runs in."""
    run(4100, 3, 2, flags, "fp32", seed=3)
    run(2 * 2048 + 5, 2, 1, flags, "fp64", seed=4)


def test_gemv_largest_x_copy():
    """Row form with a strided x: the largest x that fits the stack buffer is one copy; one element
    more runs in chunks of whole BR steps, the GEMV kernel through `sve_brgemm.generate` too."""
    k = sve_gemv.X_COPY_MAX_BYTES // (4 * 2)
    assert sve_gemv.x_chunks(k, 2, 4) == (2, k) and sve_gemv.x_chunks(k + 1, 2, 4) == (1, k + 1)
    run(3, k, 2, (True, True, False), "fp32", seed=5)
    kerns = [sve_brgemm.generate(2, 1, k + 1, 2, True, True, sve_vl=vl) for vl in VLS]
    assert [kern.name for kern in kerns] == [f"sve_gemv_2x{k + 1}_br2_fp32_ta_tb"] * len(VLS)
    run(2, k + 1, 2, (True, True, False), "fp32", seed=6, kerns=kerns)


def test_gemv_x_in_pieces_of_k():
    """fp64 K over the buffer: each BR step's K runs in pieces of whole K steps at every length
    (`x_chunks`), the last one with the ``whilelt`` remainder; y strided."""
    cap = sve_gemv.X_COPY_MAX_BYTES // 8
    k = cap + 2 * 4 + 3
    assert sve_gemv.x_chunks(k, 2, 8) == (1, cap)
    run(3, k, 2, (True, True, True), "fp64", seed=8)


@settings(max_examples=examples(40), deadline=None)
@chunked_x_cases([512, 640, 1024, 1536], 300)
@example(m=9, k=256, br=2, cap=512, tc=True, dtype="fp32", pads=(1, 2, 1, 3))  # K pieces, no remainder
@example(m=3, k=30, br=5, cap=640, tc=False, dtype="fp64", pads=(0, 1, 0, 2))  # 2 steps per chunk, remainder
def test_gemv_chunked_x_matches_numpy(m, k, br, cap, tc, dtype, pads):
    """The chunked strided-x row form at small buffer sizes (`X_COPY_MAX_BYTES` patched to ``cap``
    bytes), at every vector length: whole BR steps per chunk with a remainder chunk, or K pieces
    (whole K steps at 2048 bits) with a remainder piece (or all of x in one copy); y strided or
    not; nothing outside y written."""
    with mock.patch.object(sve_gemv, "X_COPY_MAX_BYTES", cap):
        a, _ = sve_gemv.program(m, k, br, True, True, tc, dtype)
    sig = sve_gemv.signature(dtype)
    kerns = [load(a.code(), sig, isa="aarch64", name=a.name, listing=a.listing(), sve_vl=vl) for vl in VLS]
    run(m, k, br, (True, True, tc), dtype, pads, seed=m * 71 + k, kerns=kerns)


def _gemv_name(m, k, dtype, flags) -> str:
    return f"sve_gemv_{m}x{k}_br2_{dtype}" + "".join(
        f for f, on in zip(("_ta", "_tb", "_tc"), flags, strict=True) if on
    )


@pytest.mark.parametrize("flags", FLAGS)
def test_brgemm_of_one_column_is_the_gemv(flags):
    """`sve_brgemm.generate` and `minijit.kernels.brgemm(target="aarch64-sve")` with n = 1 return
    the GEMV kernel (every transpose, at each vector length) and compute the BRGEMM; n = 2 keeps the
    BRGEMM kernel."""
    for dtype, (m, k) in (("fp32", (19, 11)), ("fp64", (9, 6))):
        kerns = [sve_brgemm.generate(m, 1, k, 2, *flags, dtype, sve_vl=vl) for vl in VLS]
        assert [kern.name for kern in kerns] == [_gemv_name(m, k, dtype, flags)] * len(VLS)
        assert [kern.worker.sve_vl for kern in kerns if hasattr(kern, "worker")] in ([], VLS)
        run(m, k, 2, flags, dtype, seed=7, kerns=kerns)
    ta, tb, tc = flags
    kern = kernels.brgemm(9, 1, 6, 2, trans_a=ta, trans_b=tb, trans_c=tc, dtype="fp64", target="aarch64-sve")
    assert kern.name == _gemv_name(9, 6, "fp64", flags)
    assert sve_brgemm.generate(5, 2, 3, 1, *flags).name.startswith("sve_brgemm_")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "flags, k, cap",
    [((False, False, True), 21, None), ((True, True, False), 21, None), ((True, True, True), 150, 512)],
)
def test_gemv_preserves_callee_saved_registers(flags, k, cap, dtype):
    """x19..x28, d8..d15 and sp survive both forms (column form with its y buffer on the stack, row
    form with its x buffer, and with x in K pieces: ``cap`` patches `X_COPY_MAX_BYTES`): the
    wrapper reads its saved registers back through sp."""
    ta, tb, tc = flags
    m, br = 37, 2
    with mock.patch.object(sve_gemv, "X_COPY_MAX_BYTES", cap or sve_gemv.X_COPY_MAX_BYTES):
        w = _abi_wrapper(sve_gemv.program(m, k, br, *flags, dtype)[0].code())
    sig = sve_gemv.signature(dtype).replace("void(", "int64_t(")
    t = NP[dtype]
    a, x, y = np.ones(m * k * br, t), np.ones(2 * k * br, t), np.zeros(2 * m, t)
    for vl in VLS:
        f = load(w.code(), sig, isa="aarch64", name=w.name, sve_vl=vl)
        assert f(a, x, y, k if ta else m, 2, 2, m * k, 2 * k) == 0, f"SVE {vl}: a callee-saved register changed"
    np.testing.assert_array_equal(y[:: 2 if tc else 1][:m], br * k * len(VLS))


def test_mca_lanes_follow_the_modelled_cores():
    """The mca table counts SVE elements at the vector length of the core each model describes
    (neoverse-v2 128 bits, neoverse-v1 256); an mcpu without SVE is refused."""
    assert [mca.sve_lanes(c, d) for c in ("neoverse-v2", "neoverse-v1") for d in ("fp32", "fp64")] == [4, 2, 8, 4]
    with pytest.raises(ValueError, match="mcpu"):
        mca.sve_lanes("apple-m4")
