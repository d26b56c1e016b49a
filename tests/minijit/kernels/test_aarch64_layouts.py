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
