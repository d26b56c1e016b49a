"""The x86-64 generic-tier GEMM kernel (`minijit.kernels.x86_64.generic`): one kernel per ISA and
dtype, every size and stride at run time. Its listing reassembles to its bytes with llvm-mc (AVX2
and AVX-512, text only where the host has no AVX-512); it runs on this host's ISA against numpy,
with guard zones around every operand that must stay untouched."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit import targets
from minijit.kernels import generic as spec
from minijit.kernels.x86_64 import generic
from minijit.runtime import detected_host
from minijit.runtime.kernel import Kernel
from tests.conftest import examples

X86 = detected_host().isa == "x86_64"
NATIVE = targets.native().isa if X86 else None
GUARD = 64  # elements of NaN before and after each operand


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_listing_reassembles_to_the_code(isa, dtype):
    try:
        llvm.find_tool("llvm-mc")
    except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
        pytest.skip(str(e))
    prog = generic.program(dtype, isa)
    assert llvm.assemble(prog.listing(), triple="x86_64", mattr="") == prog.code()
    text = prog.listing()
    assert ("k1" in text) == (isa == "avx512") and ("vmaskmov" in text) == (isa == "avx2")


def test_args_are_validated_by_name():
    full = {name: 1 for name in spec.ARGS} | {"accumulate": 0}
    with pytest.raises(ValueError, match="missing"):
        spec.pack_args(**{k: v for k, v in full.items() if k != "lda"})
    with pytest.raises(ValueError, match="unknown"):
        spec.pack_args(**full, ldd=3)
    with pytest.raises(ValueError, match="m must be"):
        spec.pack_args(**(full | {"m": -1}))
    with pytest.raises(ValueError, match="accumulate"):
        spec.pack_args(**(full | {"accumulate": 2}))


def _guarded(rng, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """A buffer of ``n`` random elements between NaN guards, and the view of the elements."""
    buf = np.full(n + 2 * GUARD, np.nan, dtype)
    buf[GUARD : GUARD + n] = rng.uniform(-1, 1, n)
    return buf, buf[GUARD : GUARD + n]


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@settings(max_examples=examples(120))
@given(
    m=st.integers(0, 70),
    n=st.integers(0, 20),
    k=st.integers(0, 20),
    batch=st.integers(0, 3),
    pad=st.integers(0, 5),
    b_order=st.sampled_from(["kn", "nk", "kn-neg"]),
    accumulate=st.integers(0, 1),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_generic_gemm_matches_numpy_and_stays_inside_its_operands(
    m, n, k, batch, pad, b_order, accumulate, dtype, seed
):
    rng = np.random.default_rng(seed)
    name, ctype = ("fp32", "float") if dtype == np.float32 else ("fp64", "double")
    kern = generic.generate(name, NATIVE)
    raw = Kernel(kern.code, spec.signature(ctype), unchecked=True, isa="x86_64")  # B's origin may be mid-buffer
    lda = ldc = m + pad
    size_a, size_b, size_c = lda * k, k * n, ldc * n
    bufs = [_guarded(rng, max(1, batch * size), dtype) for size in (size_a, size_b, size_c)]
    (buf_a, a), (buf_b, b), (buf_c, c) = bufs
    before = [buf.copy() for buf, _ in bufs]
    # B of each batch: k x n column-major (kn), row-major (nk), or column-major walked backwards
    ldb_k, ldb_n, b0 = {"kn": (1, k, 0), "nk": (n, 1, 0), "kn-neg": (-1, -k, max(0, k * n - 1))}[b_order]
    args = spec.pack_args(
        m=m, n=n, k=k, lda=lda, ldb_k=ldb_k, ldb_n=ldb_n, ldc=ldc, batch=batch,
        batch_a=size_a, batch_b=size_b, batch_c=size_c, accumulate=accumulate,
    )  # fmt: skip
    raw(a.ctypes.data, b.ctypes.data + b0 * a.itemsize, c.ctypes.data, args)

    want = before[2][GUARD : GUARD + c.size].astype(np.float64)
    kk, jj = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    for t in range(batch):
        at = a[t * size_a : (t + 1) * size_a].astype(np.float64).reshape(k, lda)[:, :m]  # k x m
        bt = b[t * size_b : (t + 1) * size_b].astype(np.float64)[b0 + kk * ldb_k + jj * ldb_n]  # k x n
        ct = want[t * size_c : (t + 1) * size_c].reshape(n, ldc)
        ct[:, :m] = (at.T @ bt).T + (ct[:, :m] if accumulate else 0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c[: batch * size_c], want[: batch * size_c], rtol=tol, atol=tol * max(1, k))
    if not batch * size_c:
        np.testing.assert_array_equal(buf_c, before[2])  # nothing to write: nothing written
    # the guards, the padding rows of C and both inputs are untouched (NaN compared as equal)
    np.testing.assert_array_equal(buf_c[:GUARD], before[2][:GUARD])
    np.testing.assert_array_equal(buf_c[GUARD + c.size :], before[2][GUARD + c.size :])
    for t in range(batch):
        got = buf_c[GUARD + t * size_c : GUARD + (t + 1) * size_c].reshape(n, ldc)[:, m:]
        np.testing.assert_array_equal(
            got, before[2][GUARD + t * size_c : GUARD + (t + 1) * size_c].reshape(n, ldc)[:, m:]
        )
    np.testing.assert_array_equal(buf_a, before[0])
    np.testing.assert_array_equal(buf_b, before[1])


def _fenced(n: int, dtype, rng) -> tuple[object, np.ndarray]:
    """``n`` elements that end exactly where a PROT_NONE page begins (reading or writing one element
    past them faults), and the mapping that owns them."""
    import ctypes
    import mmap

    item = np.dtype(dtype).itemsize
    pages = -(-max(1, n) * item // mmap.PAGESIZE)
    mapping = mmap.mmap(-1, (pages + 1) * mmap.PAGESIZE)
    base = np.frombuffer(mapping, np.uint8).ctypes.data
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(base + pages * mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0  # PROT_NONE
    start = pages * mmap.PAGESIZE - n * item
    arr = np.frombuffer(mapping, dtype, count=n, offset=start)
    arr[...] = rng.uniform(-1, 1, n)
    return mapping, arr


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_no_access_past_the_last_row_or_column(dtype):
    """A, B and C each end where a no-access page begins: a kernel that read or wrote a full vector
    past the last row (or a column past the last) would fault here; NaN guards cannot see reads."""
    rng = np.random.default_rng(0)
    name, ctype = ("fp32", "float") if dtype == np.float32 else ("fp64", "double")
    kern = generic.generate(name, NATIVE)
    raw = Kernel(kern.code, spec.signature(ctype), unchecked=True, isa="x86_64")
    for m in range(1, 2 * 4 * 16 // np.dtype(dtype).itemsize + 2):
        for n in range(1, 8):
            k = 3
            maps = [_fenced(size, dtype, rng) for size in (m * k, k * n, m * n)]
            (_, a), (_, b), (_, c) = maps
            args = spec.pack_args(
                m=m, n=n, k=k, lda=m, ldb_k=1, ldb_n=k, ldc=m, batch=1, batch_a=0, batch_b=0, batch_c=0, accumulate=1
            )
            want = c.reshape(n, m).astype(np.float64) + (a.reshape(k, m).T.astype(np.float64) @ b.reshape(n, k).T).T
            raw(a.ctypes.data, b.ctypes.data, c.ctypes.data, args)
            np.testing.assert_allclose(c.reshape(n, m), want, rtol=1e-5, atol=1e-5)
            # (the mappings are unmapped when collected: a view of them is still exported here)
