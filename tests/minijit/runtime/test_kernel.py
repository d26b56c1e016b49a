"""Signatures, argument checks and native Kernel calls (x86-64 code from llvm-mc)."""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minijit.runtime.features import host
from minijit.runtime.kernel import Kernel
from minijit.runtime.signature import ArgSpec, Signature
from tests.minijit.helpers import mapping_perms

# ---------------------------------------------------------------- signatures


def test_parse_axpy_signature() -> None:
    sig = Signature.parse("void(const float*, const float*, float*, int64_t, int64_t)")
    assert sig.ret == "void" and sig.ret_ctype == "void"
    assert [a.kind for a in sig.args] == ["ptr", "ptr", "ptr", "int", "int"]
    assert [a.const for a in sig.args] == [True, True, False, False, False]
    assert sig.args[0] == ArgSpec("ptr", "const float *", True, pointee="float", dtype="float32", bits=64)
    assert sig.args[3].bits == 64 and sig.args[3].signed
    assert str(sig) == "void(const float *, const float *, float *, int64_t, int64_t)"
    assert sig.c_function_pointer() == "void(*)(const float *, const float *, float *, int64_t, int64_t)"
    assert Signature.parse(str(sig)) == sig
    assert Signature.parse(sig) is sig


@pytest.mark.parametrize(
    "text, ret, kinds",
    [
        ("void()", "void", []),
        ("void(void)", "void", []),
        ("int64_t(int64_t a, int64_t b)", "int", ["int", "int"]),
        ("double sum(const double *x, size_t n)", "double", ["ptr", "int"]),
        (
            "float(float, double, uint8_t, int, long, unsigned long)",
            "float",
            ["float", "double", "int", "int", "int", "int"],
        ),
        ("void(void *, const void*, float const *, double * const)", "void", ["ptr"] * 4),
        ("  uint32_t ( uint16_t * p , int8_t ) ", "int", ["ptr", "int"]),
    ],
)
def test_parse_valid(text: str, ret: str, kinds: list[str]) -> None:
    sig = Signature.parse(text)
    assert sig.ret == ret
    assert [a.kind for a in sig.args] == kinds


def test_parse_details() -> None:
    sig = Signature.parse("double sum(const double *x, size_t n, float const * w, void *scratch)")
    assert sig.name == "sum"
    assert [a.name for a in sig.args] == ["x", "n", "w", "scratch"]
    assert sig.args[1].signed is False and sig.args[1].bits == 64
    assert sig.args[2].const and sig.args[2].ctype == "const float *"
    assert sig.args[3].pointee == "void" and sig.args[3].dtype is None


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "malformed"),
        ("void", "malformed"),
        ("void(float", "malformed"),
        ("(float)", "missing return type"),
        ("void(char*)", "unsupported C type 'char'"),
        ("void(float**)", "pointer to pointer"),
        ("float*(int)", "pointer return"),
        ("void(int, , int)", "parameter 1 is empty"),
        ("void(int,)", "parameter 1 is empty"),
        ("void(void, int)", "'void' is only allowed"),
        ("void(int[4])", "unexpected character"),
        ("void(float x y)", "unsupported C type 'float x'"),
        ("void(const)", "missing type"),
        ("void(float * x *)", "unexpected 'x'"),
        ("void(__m256)", "unsupported C type"),
        ("void(void (*)(int))", "malformed|unexpected"),
    ],
)
def test_parse_invalid(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Signature.parse(text)


def test_check_normalizes_values() -> None:
    sig = Signature.parse("void(float*, int64_t, uint8_t, double, float)")
    y = np.zeros(3, np.float32)
    out = sig.check((y, np.int32(-7), 255, np.float32(0.5), 2))
    assert out[0] is y
    assert out[1:] == (-7, 255, 0.5, 2.0)
    assert type(out[1]) is int and type(out[4]) is float


# ---------------------------------------------------------------- kernels

needs_x86 = pytest.mark.skipif(host().isa != "x86_64", reason="native x86-64 kernels")


@functools.cache
def _asm(listing: str, mattr: str = "") -> bytes:
    from asm.llvm import assemble

    return assemble(listing, triple="x86_64", mattr=mattr)


ADD = "lea rax, [rdi + rsi]\nret"

# y[i] += a * x[i]  for i in [0, n);  void(const float *x, float *y, int64_t n, float a)
AXPY_SSE = """
  test rdx, rdx
  jle 2f
  xor eax, eax
1:
  movss xmm1, dword ptr [rdi + 4*rax]
  mulss xmm1, xmm0
  addss xmm1, dword ptr [rsi + 4*rax]
  movss dword ptr [rsi + 4*rax], xmm1
  inc rax
  cmp rax, rdx
  jne 1b
2:
  ret
"""

AXPY_FMA = """
  test rdx, rdx
  jle 2f
  xor eax, eax
1:
  vmovss xmm1, dword ptr [rsi + 4*rax]
  vfmadd231ss xmm1, xmm0, dword ptr [rdi + 4*rax]
  vmovss dword ptr [rsi + 4*rax], xmm1
  inc rax
  cmp rax, rdx
  jne 1b
2:
  ret
"""

# double sum(const double *x, int64_t n), left to right
SUM = """
  xorpd xmm0, xmm0
  test rsi, rsi
  jle 2f
  xor eax, eax
1:
  addsd xmm0, qword ptr [rdi + 8*rax]
  inc rax
  cmp rax, rsi
  jne 1b
2:
  ret
"""

# void spin(int64_t n): n iterations of a dependent countdown
SPIN = """
  mov rax, rdi
  test rax, rax
  jle 2f
1:
  dec rax
  jnz 1b
2:
  ret
"""

AXPY_SIG = "void(const float *x, float *y, int64_t n, float a)"


@functools.cache
def axpy_kernel() -> Kernel:
    return Kernel(_asm(AXPY_SSE), AXPY_SIG, name="axpy", listing=AXPY_SSE)


def trap_kernel(signature: str) -> Kernel:
    """A kernel whose code is `ud2`: reaching it kills the process with SIGILL."""
    return Kernel(_asm("ud2"), signature, name="trap")


@needs_x86
def test_add_returns_int() -> None:
    k = Kernel(_asm(ADD), "int64_t(int64_t, int64_t)", name="add", listing=ADD)
    assert k(3, 4) == 7
    assert k(-5, 1 << 40) == (1 << 40) - 5
    assert k(np.int64(2**62), np.int16(-1)) == 2**62 - 1
    assert k.name == "add" and k.listing == ADD and k.isa == "x86_64"
    assert k.code == _asm(ADD) and k.size == len(k.code) == 5
    assert isinstance(k.address, int) and k.address > 0
    assert str(k.signature) == "int64_t(int64_t, int64_t)"
    assert "'add'" in repr(k) and "int64_t(int64_t, int64_t)" in repr(k)


@needs_x86
@settings(max_examples=60)
@given(
    data=st.data(),
    n=st.integers(0, 1000),
    a=st.floats(-1e3, 1e3, width=32),
)
def test_axpy_matches_numpy(data: st.DataObject, n: int, a: float) -> None:
    elements = st.floats(-1e6, 1e6, width=32)
    x = data.draw(hnp.arrays(np.float32, n, elements=elements))
    y = data.draw(hnp.arrays(np.float32, n, elements=elements))
    x_before = x.copy()
    expected = np.float32(a) * x + y
    axpy_kernel()(x, y, n, a)
    np.testing.assert_array_equal(y, expected)  # same rounding: mulss then addss
    np.testing.assert_array_equal(x, x_before)


@needs_x86
@pytest.mark.skipif(not (host().avx2 and host().fma), reason="needs AVX2 and FMA")
def test_axpy_fma() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(777).astype(np.float32)
    y = rng.standard_normal(777).astype(np.float32)
    a = 1.75
    expected = (a * x.astype(np.float64) + y).astype(np.float32)
    with Kernel(_asm(AXPY_FMA, "+avx2,+fma"), AXPY_SIG, name="axpy_fma") as k:
        k(x, y, x.size, a)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


@needs_x86
def test_sum_returns_double() -> None:
    x = np.random.default_rng(2).standard_normal(1001)
    k = Kernel(_asm(SUM), "double(const double *, int64_t)", name="sum")
    expected = 0.0
    for v in x.tolist():
        expected += v
    assert k(x, x.size) == expected
    assert k(x, 0) == 0.0


@needs_x86
def test_arrays_pass_their_first_element() -> None:
    x = np.arange(20, dtype=np.float32)
    y = np.zeros(20, dtype=np.float32)
    axpy_kernel()(x[5:], y[10:], 5, 1.0)  # views: pointer is the view's start
    np.testing.assert_array_equal(y[10:15], x[5:10])
    assert not y[:10].any() and not y[15:].any()


@needs_x86
def test_unchecked_accepts_addresses() -> None:
    k = Kernel(_asm(AXPY_SSE), AXPY_SIG, name="axpy_raw", unchecked=True)
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, dtype=np.float32)
    k(x, y.ctypes.data, 8, 2.0)
    np.testing.assert_array_equal(y, 1 + 2 * x)
    with pytest.raises(TypeError, match="float32"):
        k(x.astype(np.float64), y, 8, 2.0)  # arrays are still checked


@needs_x86
def test_void_pointer_takes_any_dtype() -> None:
    k = Kernel(_asm(SUM), "double(const void *, int64_t)")
    x = np.array([1.5, 2.5])
    assert k(x, 2) == 4.0
    assert k(x.view(np.uint8), 2) == 4.0


# Each call below would execute `ud2` (SIGILL) if a check let it through.
@needs_x86
@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((np.zeros(4, np.float64), np.zeros(4, np.float32), 4, 1.0), TypeError, r"argument 0 \(x\).*float32.*float64"),
        ((np.zeros(4, np.float32), np.zeros(4, np.int32), 4, 1.0), TypeError, r"argument 1 \(y\).*float32.*int32"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4), TypeError, "expected 4 arguments, got 3"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4, 1.0, 0), TypeError, "expected 4 arguments, got 5"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 2**63, 1.0), ValueError, r"argument 2 \(n\).*out of range"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4.0, 1.0), TypeError, "expected an integer, got float"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), True, 1.0), TypeError, "expected an integer, got bool"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4, "1"), TypeError, "expected a real number, got str"),
        ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4, 1j), TypeError, "expected a real number"),
        ((np.zeros(4, np.float32), [0.0] * 4, 4, 1.0), TypeError, "expected a numpy array of dtype float32, got list"),
        ((np.zeros(4, np.float32), 12345, 4, 1.0), TypeError, "raw integer addresses need an unchecked kernel"),
        ((np.zeros(4, np.float32), None, 4, 1.0), TypeError, "got NoneType"),
        ((np.zeros(4, ">f4"), np.zeros(4, np.float32), 4, 1.0), TypeError, "dtype float32"),
    ],
)
def test_bad_arguments_never_reach_code(args: tuple, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        trap_kernel(AXPY_SIG)(*args)


@needs_x86
def test_read_only_array_to_non_const_pointer() -> None:
    k = trap_kernel(AXPY_SIG)
    x = np.zeros(4, np.float32)
    y = np.zeros(4, np.float32)
    y.flags.writeable = False
    with pytest.raises(ValueError, match=r"argument 1 \(y\).*read-only"):
        k(x, y, 4, 1.0)
    # a read-only array behind a const pointer is fine
    x.flags.writeable = False
    axpy_kernel()(x, np.zeros(4, np.float32), 4, 1.0)


@needs_x86
@pytest.mark.parametrize(
    "ctype, lo, hi",
    [("int8_t", -128, 127), ("uint8_t", 0, 255), ("int", -(2**31), 2**31 - 1), ("uint64_t", 0, 2**64 - 1)],
)
def test_integer_ranges(ctype: str, lo: int, hi: int) -> None:
    k = trap_kernel(f"void({ctype})")
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ValueError, match="out of range"):
            k(bad)
    sig = Signature.parse(f"void({ctype})")
    assert sig.check((lo,)) == (lo,) and sig.check((hi,)) == (hi,)


@needs_x86
def test_isa_checks() -> None:
    with pytest.raises(ValueError, match="aarch64 code natively on a x86_64 host"):
        Kernel(b"\xc0\x03\x5f\xd6", "void()", isa="aarch64")
    with pytest.raises(ValueError, match="unsupported ISA"):
        Kernel(b"\xc3", "void()", isa="mips")
    assert Kernel(b"\xc3", "void()", isa="amd64")() is None


@needs_x86
def test_bad_signature_and_empty_code() -> None:
    with pytest.raises(ValueError, match="unsupported C type"):
        Kernel(b"\xc3", "void(char *)")
    with pytest.raises(ValueError, match="empty"):
        Kernel(b"", "void()")


@needs_x86
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux only")
def test_kernel_memory_w_xor_x_and_release() -> None:
    k = Kernel(_asm(ADD), "int64_t(int64_t, int64_t)")
    address = k.address
    assert mapping_perms(address) == "r-xp"
    k.close()
    k.close()
    assert k.closed and mapping_perms(address) != "r-xp"
    with pytest.raises(ValueError, match="closed"):
        k(1, 2)
    assert "closed" in repr(k)

    k = Kernel(_asm(ADD), "int64_t(int64_t, int64_t)")
    address = k.address
    del k
    gc.collect()
    perms = mapping_perms(address)
    assert perms is None or "x" not in perms


# ---------------------------------------------------------------- threads


@needs_x86
def test_concurrent_calls() -> None:
    k = axpy_kernel()
    rng = np.random.default_rng(3)

    def work(seed: int) -> bool:
        r = np.random.default_rng(seed)
        ok = True
        for _ in range(50):
            n = int(r.integers(0, 2000))
            x = r.standard_normal(n).astype(np.float32)
            y = r.standard_normal(n).astype(np.float32)
            a = np.float32(r.standard_normal())
            expected = a * x + y
            k(x, y, n, a)
            ok &= bool(np.array_equal(y, expected))
        return ok

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, rng.integers(0, 2**32, 16).tolist()))


@functools.cache
def _spin() -> tuple[Kernel, int]:
    """The spin kernel and an iteration count that takes roughly 0.3 s."""
    k = Kernel(_asm(SPIN), "void(int64_t)", name="spin")
    n = 10_000_000
    t = time.perf_counter()
    k(n)
    dt = max(time.perf_counter() - t, 1e-4)
    return k, max(n, int(n * 0.3 / dt))


@needs_x86
def test_gil_released_during_call() -> None:
    k, n = _spin()
    done = threading.Event()

    def run() -> None:
        k(n)
        done.set()

    t = threading.Thread(target=run)
    t.start()
    max_gap, last = 0.0, time.perf_counter()
    start = last
    while not done.is_set():
        now = time.perf_counter()
        max_gap, last = max(max_gap, now - last), now
    t.join()
    elapsed = time.perf_counter() - start
    assert elapsed > 0.1
    # With the GIL held for the whole call this thread would stall for `elapsed`.
    assert max_gap < elapsed / 2, (max_gap, elapsed)


@needs_x86
def test_close_waits_for_calls_in_flight() -> None:
    k = Kernel(_asm(SPIN), "void(int64_t)", name="spin2")
    _, n = _spin()
    t = threading.Thread(target=k, args=(n,))
    t.start()
    time.sleep(0.05)
    k.close()  # must not unmap under the running call
    t.join()
    assert k.closed
