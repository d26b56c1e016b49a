"""GEMMs as users hold them, through the optimizer, blocking and packing, on the native target:
hypothesis draws sizes (1..300, powers of two among them), C- or F-order A, B and C with
padded leading dims (odd and power-of-two; unpadded ones are passed as 2-D C- or F-order arrays,
`minijit.arrays`), and thread counts; every array lies between two guard
pages (PROT_NONE), flush against the upper or the lower one (drawn), so touching the element
past that end kills the process."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit import TensorOperation
from minijit.runtime import host
from tests.conftest import examples

PAGE = mmap.PAGESIZE
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

pytestmark = pytest.mark.skipif(host().isa != "x86_64", reason="native x86-64 packing/blocking paths")


class Guarded:
    """A 1-D array of ``n`` elements between two PROT_NONE pages, its last element ending where the
    upper one starts (``end="upper"``) or its first element starting where the lower one ends."""

    def __init__(self, n: int, dtype: np.dtype, end: str = "upper") -> None:
        dtype = np.dtype(dtype)
        body = -(-n * dtype.itemsize // PAGE) * PAGE
        self._map = mmap.mmap(-1, body + 2 * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        for start in (base, base + PAGE + body):
            assert _LIBC.mprotect(start, PAGE, 0) == 0, ctypes.get_errno()
        offset = PAGE + body - n * dtype.itemsize if end == "upper" else PAGE
        self.array = np.frombuffer(self._map, dtype, n, offset)


def leading(rows: int, kind: str) -> int:
    return {"exact": rows, "odd": rows + 1 - rows % 2 + 2, "pow2": 1 << max(rows - 1, 0).bit_length()}[kind]


sizes = st.one_of(st.integers(1, 300), st.sampled_from([64, 128, 256]))


@settings(max_examples=examples(30), deadline=None)
@given(
    m=sizes,
    n=sizes,
    k=sizes,
    orders=st.tuples(*(st.sampled_from("CF") for _ in range(3))),
    pads=st.tuples(*(st.sampled_from(["exact", "odd", "pow2"]) for _ in range(3))),
    threads=st.integers(1, 3),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ends=st.tuples(*(st.sampled_from(["upper", "lower"]) for _ in range(3))),
    seed=st.integers(0, 2**16),
)
def test_gemm_any_layout_matches_numpy_inside_its_arrays(m, n, k, orders, pads, threads, dtype, ends, seed):
    check_gemm(m, n, k, orders, pads, threads, dtype, ends, seed)


@settings(max_examples=examples(30), deadline=None)
@given(
    long=st.one_of(st.integers(1, 5000), st.sampled_from([4096, 4097, 8192])),
    k=st.one_of(st.integers(1, 600), st.sampled_from([512, 1024])),
    row=st.booleans(),
    orders=st.tuples(*(st.sampled_from("CF") for _ in range(3))),
    pads=st.tuples(*(st.sampled_from(["exact", "odd", "pow2"]) for _ in range(3))),
    threads=st.integers(1, 3),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ends=st.tuples(*(st.sampled_from(["upper", "lower"]) for _ in range(3))),
    touches=st.sampled_from([("none", "none"), ("zero", "none"), ("none", "relu"), ("zero", "relu")]),
    seed=st.integers(0, 2**16),
)
def test_gemv_any_layout_matches_numpy_inside_its_arrays(
    long, k, row, orders, pads, threads, dtype, ends, touches, seed
):
    """Matrix-vector products (1 x N x K or M x 1 x K, the long dim past the GEMV kernel's M
    block), both kernel forms (the layouts decide which), with first/last touches. Every layout,
    strided x or y included (a padded leading dim of a vector's matrix), runs the GEMV kernel on
    x86-64."""
    m, n = (1, long) if row else (long, 1)
    check_gemm(m, n, k, orders, pads, threads, dtype, ends, seed, *touches, gemv=True)


def check_gemm(m, n, k, orders, pads, threads, dtype, ends, seed, first="none", last="none", gemv=False) -> None:
    """Set up and run C (+)= A B with the drawn layouts and touches; compare with numpy in float64
    and check C's padding untouched (each array between guard pages). ``gemv``: on x86-64 the
    main kernel must be the GEMV kernel."""

    # element (i, j) of an R x S matrix: C-order at i*ld + j, F-order at i + j*ld (ld >= row length)
    def layout(order: str, rows: int, cols: int, pad: str) -> tuple[int, int, int]:
        if order == "C":
            ld = leading(cols, pad)
            return ld, 1, (rows - 1) * ld + cols
        ld = leading(rows, pad)
        return 1, ld, (cols - 1) * ld + rows

    (a_i, a_j, a_n), (b_i, b_j, b_n), (c_i, c_j, c_n) = (
        layout(orders[0], m, k, pads[0]),
        layout(orders[1], k, n, pads[1]),
        layout(orders[2], m, n, pads[2]),
    )
    op = TensorOperation("native", num_threads=threads)
    op.setup(dtype, first, "gemm", last, "mnk", ("undefined",) * 3, (m, n, k),
             (a_i, 0, a_j), (0, b_j, b_i), (c_i, c_j, 0))  # fmt: skip
    if gemv and op.target.startswith("x86_64"):
        assert op.primitives["main"].name.startswith("gemv_"), (orders, pads, op.config)
    t = np.float32 if dtype == "fp32" else np.float64
    rng = np.random.default_rng(seed)
    bufs = [Guarded(size, t, end) for size, end in zip((a_n, b_n, c_n), ends, strict=True)]
    A, B, C = (g.array for g in bufs)
    A[:], B[:] = rng.uniform(-1, 1, a_n), rng.uniform(-1, 1, b_n)
    C[:] = rng.uniform(-1, 1, c_n)
    view = np.lib.stride_tricks.as_strided
    item = A.itemsize
    a = view(A, (m, k), (a_i * item, a_j * item)).astype(np.float64)
    b = view(B, (k, n), (b_i * item, b_j * item)).astype(np.float64)
    c0 = C.copy()
    start = view(c0, (m, n), (c_i * item, c_j * item)).astype(np.float64)
    want = (0 if first == "zero" else start) + a @ b
    if last == "relu":
        want = np.maximum(want, 0)
    # an unpadded operand goes in as the 2-D array a user holds: C order, or F order (np.asfortranarray)
    held = [
        x if pad != "exact" else (x.reshape(r, c) if order == "C" else x.reshape(c, r).T)
        for x, pad, order, (r, c) in zip((A, B, C), pads, orders, ((m, k), (k, n), (m, n)), strict=True)
    ]
    op.execute(*held)
    got = view(C, (m, n), (c_i * item, c_j * item))
    tol = (1e-4 if dtype == "fp32" else 1e-11) * max(1, k)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    # elements of C outside the matrix (padding) are untouched
    inside = np.zeros(c_n, bool)
    inside[(np.arange(m)[:, None] * c_i + np.arange(n)[None, :] * c_j).ravel()] = True
    np.testing.assert_array_equal(C[~inside], c0[~inside])


@pytest.mark.parametrize("where", ["after", "before"])
def test_the_guard_pages_catch_a_read_outside_the_array(where):
    """The oracle itself: reading one element past either end kills the process with SIGSEGV."""
    import signal
    import subprocess
    import sys

    code = (
        "import ctypes, numpy as np\n"
        "from tests.minijit.test_gemm_layouts import Guarded\n"
        "g = Guarded(1000, np.float32, " + repr("upper" if where == "after" else "lower") + ")\n"
        "g.array[:] = 1\n"
        "addr = g.array.ctypes.data + (4000 if " + repr(where == "after") + " else -4)\n"
        "print(ctypes.c_float.from_address(addr).value)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGSEGV, proc.stderr.decode()[-500:]
