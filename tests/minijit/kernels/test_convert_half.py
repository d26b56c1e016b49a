"""fp16 <-> fp32 conversion kernels (x86-64 F16C / AVX-512 natively, AArch64 NEON in the emulator
worker, or natively on AArch64), bit for bit against numpy's ``astype``.

Every ``n`` in 0..70 and a few large ones; values: all 65536 fp16 bit patterns (widening), and for
narrowing ±0, fp32 and fp16 subnormals, exact ties between fp16 neighbours (round to even),
the overflow edge (65519.99.. -> 65504, 65520 -> inf), ±inf, quiet NaNs with payloads, random bits.
Quiet NaNs compare bit for bit; signalling NaNs (hardware quiets them, numpy's software path may
not) only as NaN. Sentinels before and after ``dst`` must survive; on x86-64 ``src`` and ``dst``
also end (or start) at a PROT_NONE page, so a read or write past them faults.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from minijit.kernels.aarch64 import convert as a64
from minijit.kernels.x86_64 import convert as x86
from tests.minijit.kernels.x86_util import ISAS, available, needs_x86
from tests.minijit.test_gemm_layouts import Guarded

GUARD = 5
SIZES = [*range(71), 1000, 4099, 1 << 16]
UINT = {"fp16": np.uint16, "fp32": np.uint32}
FLOAT = {"fp16": np.float16, "fp32": np.float32}
SENTINEL = {"fp16": 0x7E55, "fp32": 0x7FC0DEAD}  # quiet NaNs no conversion of these inputs gives

x86_kernel = functools.lru_cache(maxsize=None)(x86.generate)
a64_kernel = functools.lru_cache(maxsize=None)(a64.generate)


def _fp16_pool() -> np.ndarray:
    """All fp16 bit patterns, shuffled (fixed seed) so every region of a short slice is mixed."""
    return np.random.default_rng(1).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)


def _fp32_pool() -> np.ndarray:
    """fp32 bit patterns around every fp16 rounding edge, then random bits and random fp16 ties."""
    f = np.float32
    special = [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, -65520.0, 1e6, -1e30, 1.0]
    special += [2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-24, 5.96e-8, -5.96e-8]
    special += [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-23, 2.0**-149, -(2.0**-140), 1.1754942e-38]
    bits = [np.array(s, f).view(np.uint32) for s in special]
    bits += [np.uint32(b) for b in (0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7FFFFFFF, 0xFFE00001, 0x7F800001)]
    rng = np.random.default_rng(2)
    rand = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32)
    # exact ties: an fp16's fp32 bits with bit 12 set (half an fp16 ulp for normal fp16 values)
    h = rng.integers(0, 0x7C00, 4000, dtype=np.uint64).astype(np.uint16) | (rng.integers(0, 2, 4000) << 15).astype(
        np.uint16
    )
    ties = h.view(np.float16).astype(np.float32).view(np.uint32)
    ties = ties[(h & 0x7C00) != 0] | np.uint32(0x1000)
    pool = np.concatenate([np.array(bits, np.uint32), rand, ties])
    return np.random.default_rng(3).permutation(pool)


POOL = {"fp16": _fp16_pool(), "fp32": _fp32_pool()}


def _src_bits(src: str, n: int) -> np.ndarray:
    pool = POOL[src]
    reps = -(-(n + 97) // len(pool))
    return np.tile(pool, reps)[(n * 97) % len(pool) :][:n].copy()


def _is_snan(bits: np.ndarray, dtype: str) -> np.ndarray:
    quiet, exp = (1 << 9, 0x7C00) if dtype == "fp16" else (1 << 22, 0x7F800000)
    frac = exp ^ (0x7FFF if dtype == "fp16" else 0x7FFFFFFF)
    return ((bits & exp) == exp) & ((bits & frac) != 0) & ((bits & quiet) == 0)


def check(run, src: str, dst: str, n: int, guarded: bool = False, end: str = "upper") -> None:
    """``run(s, d, n)`` converts; compare with numpy and check the sentinels around ``d``."""
    sbits = _src_bits(src, n)
    if guarded:
        s = Guarded(max(n, 1), FLOAT[src], end).array[:n] if end == "lower" else Guarded(n, FLOAT[src], end).array
        s.view(UINT[src])[:] = sbits
        d = Guarded(n, FLOAT[dst], end).array
        full = None
    else:
        s = sbits.view(FLOAT[src])
        full = np.full(n + 2 * GUARD, SENTINEL[dst], UINT[dst])
        d = full[GUARD : GUARD + n].view(FLOAT[dst])
    run(s, d, n)
    with np.errstate(all="ignore"):
        want = sbits.view(FLOAT[src]).astype(FLOAT[dst]).view(UINT[dst])
    got = d.view(UINT[dst])
    snan = _is_snan(sbits, src)
    np.testing.assert_array_equal(got[~snan], want[~snan], err_msg=f"{src}->{dst} n={n}")
    assert np.isnan(d[snan]).all()
    if full is not None:
        assert (full[:GUARD] == SENTINEL[dst]).all() and (full[GUARD + n :] == SENTINEL[dst]).all(), n


DIRS = [("fp16", "fp32"), ("fp32", "fp16")]


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("src, dst", DIRS)
def test_x86_every_size(isa, src, dst) -> None:
    k = x86_kernel(src, dst, isa)
    for n in SIZES:
        check(k, src, dst, n)


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("src, dst", DIRS)
@pytest.mark.parametrize("end", ["upper", "lower"])
def test_x86_flush_against_protected_pages(isa, src, dst, end) -> None:
    k = x86_kernel(src, dst, isa)
    for n in [*range(1, 40), 63, 64, 65, 2049]:
        check(k, src, dst, n, guarded=True, end=end)


@pytest.mark.parametrize("src, dst", DIRS)
def test_aarch64_neon_every_size(src, dst) -> None:
    k = a64_kernel(src, dst)
    for n in SIZES:
        check(k, src, dst, n)


def test_nonpositive_n_touches_nothing() -> None:
    runs = [a64_kernel("fp16", "fp32")] + ([x86_kernel("fp16", "fp32", "avx2")] if available("avx2") else [])
    for k in runs:
        s = np.ones(8, np.float16)
        full = np.full(8, SENTINEL["fp32"], np.uint32)
        for n in (0, -1, -(1 << 40)):
            k(s, full.view(np.float32), n)
        assert (full == SENTINEL["fp32"]).all()


def test_avx512_listing_reassembles() -> None:
    """The AVX-512 code (run only on AVX-512 hosts) is what llvm-mc makes of its listing."""
    from asm import llvm

    for src, dst in DIRS:
        k = x86.generate(src, dst, "avx512")
        assert llvm.assemble(k.listing, triple=llvm.X86_64_TRIPLE, mattr="") == k.code
        assert "{k1}" in k.listing and ("vcvtph2ps zmm" in k.listing or "vcvtps2ph ymmword" in k.listing)


@pytest.mark.parametrize("bad", [("fp16", "fp16"), ("fp32", "fp64"), ("bf16", "fp32")])
def test_rejects_bad_directions(bad) -> None:
    with pytest.raises(ValueError, match="src, dst"):
        x86.generate(*bad)
    with pytest.raises(ValueError, match="src, dst"):
        a64.program(*bad)
    with pytest.raises(ValueError, match="isa"):
        x86.generate("fp16", "fp32", "sse2")
