"""TensorOperation GEMMs on aarch64-neon and aarch64-sve for C-order and F-order operands.

A numpy user's GEMM: C = A·B with each of A (M x K), B (K x N), C (M x N) in C
order (row-major) or F order (column-major; passed as the C-contiguous
buffer of its transpose), exec types left ``undefined`` so the optimizer picks
roles, swaps operands for a row-major C and packs what it packs. The
transposed BRGEMM forms run on both targets (SVE at 128, 256 and 512 bits in
the emulator, without a NEON stand-in), with packing on and off. Results are
compared with numpy in float64.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.runtime import runs_natively
from minijit.tensor_operation import TensorOperation
from tests.conftest import examples

NP = {"fp32": np.float32, "fp64": np.float64}
VLS = [128] if runs_natively("aarch64") else [128, 256, 512]
ORDERS = ["".join(o) for o in itertools.product("CF", repeat=3)]  # A, B, C


def strides(order: str, rows: int, cols: int) -> tuple[int, int]:
    """Element strides of (row, column) for a rows x cols matrix in C or F order."""
    return (cols, 1) if order == "C" else (1, rows)


def stored(x: np.ndarray, order: str) -> np.ndarray:
    """The C-contiguous buffer holding ``x`` in ``order`` (F order: the buffer of xᵀ)."""
    return np.ascontiguousarray(x if order == "C" else x.T)


def gemm(target: str, orders: str, m: int, n: int, k: int, dtype: str, sve_vl: int = 128, pack: bool = True) -> None:
    """C = A·B through TensorOperation on ``target``, operands in ``orders`` (A, B, C), vs numpy."""
    oa, ob, oc = orders
    (sam, sak), (sbk, sbn), (scm, scn) = strides(oa, m, k), strides(ob, k, n), strides(oc, m, n)
    op = TensorOperation(target, num_threads=1, sve_vl=sve_vl, pack=pack)
    op.setup(
        dtype,
        "zero",
        "gemm",
        "none",
        ["m", "n", "k"],
        ["undefined"] * 3,
        [m, n, k],
        [sam, 0, sak],
        [0, sbn, sbk],
        [scm, scn, 0],
    )
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a = rng.uniform(-1, 1, (m, k)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (k, n)).astype(NP[dtype])
    c = np.full((n, m) if oc == "F" else (m, n), np.nan, NP[dtype])  # first touch zero overwrites
    op.execute(stored(a, oa), stored(b, ob), c)
    got = c.T if oc == "F" else c
    tol = (2e-6 if dtype == "fp32" else 1e-14) * (k + 2)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(
        got, want, rtol=tol, atol=tol, err_msg=f"{target} {orders} vl={sve_vl}\n{op.listing()[:400]}"
    )


dims = st.integers(1, 70)


@pytest.mark.parametrize("vl", VLS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_neon_gemv_runs_at_the_operations_vector_length(dtype, vl):
    """A NEON operation emulated at SVE length ``vl`` (its worker) whose GEMM is one column: the
    GEMV kernel must be loaded into the same worker as the loop nest that calls it (it was loaded
    at 128 bits: a call to an unmapped address at 256 and 512)."""
    for m, n, k, orders in ((1, 1, 1, "CCC"), (37, 1, 19, "CFC"), (1, 23, 9, "CCF")):
        gemm("aarch64-neon", orders, m, n, k, dtype, vl, pack=False)


@pytest.mark.parametrize("target", ["aarch64-neon", "aarch64-sve"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=examples(10), deadline=None)
@given(m=dims, n=dims, k=dims, orders=st.sampled_from(ORDERS), vl=st.sampled_from(VLS), pack=st.booleans())
def test_gemm_layouts(target, dtype, m, n, k, orders, vl, pack):
    gemm(target, orders, m, n, k, dtype, sve_vl=vl, pack=pack)


@pytest.mark.parametrize("orders", ORDERS)
def test_sve_gemm_every_layout(orders):
    """Each of the eight layouts once on SVE, unpacked (the kernels' transposed forms) and packed."""
    gemm("aarch64-sve", orders, 37, 19, 23, "fp32", sve_vl=VLS[-1], pack=False)
    gemm("aarch64-sve", orders, 21, 40, 33, "fp64", sve_vl=VLS[0], pack=True)


@pytest.mark.parametrize("orders,flags", [("FCF", "_tb"), ("CFC", "_ta"), ("CCF", "_ta_tb")])
def test_sve_runs_its_own_transposed_kernels(orders, flags):
    """Transposed operands in the optimized config get an SVE kernel of that form, not a NEON one."""
    oa, ob, oc = orders
    m, n, k = 37, 19, 23
    (sam, sak), (sbk, sbn), (scm, scn) = strides(oa, m, k), strides(ob, k, n), strides(oc, m, n)
    op = TensorOperation("aarch64-sve", num_threads=1, pack=False)
    op.setup(
        "fp32",
        "zero",
        "gemm",
        "none",
        ["m", "n", "k"],
        ["undefined"] * 3,
        [m, n, k],
        [sam, 0, sak],
        [0, sbn, sbk],
        [scm, scn, 0],
    )
    name = op.primitives["main"].name
    assert name.startswith("sve_brgemm_") and name.endswith(flags), name


def gemv(target: str, row: bool, order: str, m: int, k: int, incx: int, incy: int, sve_vl: int) -> None:
    """A GEMV with strided vectors through TensorOperation on ``target``, vs numpy: y = A x
    (``row`` False; A M x K in ``order``) or the row vector y = x B (B K x M in ``order``), x every
    ``incx``-th and y every ``incy``-th element of its buffer. A y with ``incy`` > 1 makes the
    optimizer take a strided C of one column (the kernels' transposed C with N = 1)."""
    rows, cols = (k, m) if row else (m, k)
    (s_r, s_c) = strides(order, rows, cols)
    sm, sk = (s_c, s_r) if row else (s_r, s_c)
    if row:  # y[1 x M] = x[1 x K] B[K x M]: dims m (size 1), n = M, k
        args = (["m", "n", "k"], [1, m, k], [0, 0, incx], [0, sm, sk], [0, incy, 0])
    else:  # y[M x 1] = A[M x K] x[K x 1]
        args = (["m", "n", "k"], [m, 1, k], [sm, 0, sk], [0, 0, incx], [incy, 0, 0])
    dims_, sizes, s0, s1, so = args
    op = TensorOperation(target, num_threads=1, sve_vl=sve_vl)
    op.setup("fp32", "none", "gemm", "relu", dims_, ["undefined"] * 3, sizes, s0, s1, so)
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    xbuf = rng.uniform(-1, 1, (k - 1) * incx + 1).astype(np.float32)
    ybuf = rng.uniform(-1, 1, (m - 1) * incy + 2).astype(np.float32)
    y0 = ybuf.copy()
    x, y = xbuf[::incx], y0[: (m - 1) * incy + 1 : incy].astype(np.float64)
    prod = x.astype(np.float64) @ a.astype(np.float64) if row else a.astype(np.float64) @ x.astype(np.float64)
    want = np.maximum(y + prod, 0)
    mats = (xbuf, stored(a, order)) if row else (stored(a, order), xbuf)
    op.execute(*mats, ybuf)
    got = ybuf[: (m - 1) * incy + 1 : incy]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * (k + 2), err_msg=f"{target}\n{op.listing()[:600]}")
    others = np.ones(ybuf.size, bool)
    others[: (m - 1) * incy + 1 : incy] = False
    np.testing.assert_array_equal(ybuf[others], y0[others])


@pytest.mark.parametrize("target", ["aarch64-neon", "aarch64-sve"])
@pytest.mark.parametrize(
    "row,order,m,k,incx,incy",
    [
        (False, "C", 37, 23, 3, 2),  # A row-major, x and y strided
        (False, "F", 21, 19, 1, 5),  # A column-major, y strided
        (True, "C", 29, 17, 2, 3),  # y = x B, B row-major: y strided
        (True, "F", 33, 9, 4, 1),  # y = x B, B column-major, x strided
    ],
)
def test_gemv_with_strided_vectors(target, row, order, m, k, incx, incy):
    for vl in VLS if target == "aarch64-sve" else [128]:
        gemv(target, row, order, m, k, incx, incy, vl)
