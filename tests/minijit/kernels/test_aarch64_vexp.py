"""The AArch64 ``exp`` primitive (`minijit.kernels.aarch64.vexp`), NEON and SVE at 128/256/512
bits, run in the qemu worker (natively on an AArch64 host: its own length only).

Sample sizes (about 10 s in all on a 2-core Zen 3 guest): the reduced range |x| <= ln2/2 at 2^20
evenly spaced points per dtype (NEON and one SVE length each), the x86-64 test's whole-range
sweep at 2^18 points per target; the edges (+-inf, NaN, +-0, the overflow and underflow
thresholds, subnormal results, huge |x|) everywhere. References: fp32 against float64 exp (far
below fp32's spacing), fp64 against long double exp where long double has a 64-bit or wider
mantissa, else against mpmath at 2^12 points. Where the host runs the x86-64 AVX2 primitive, the
AArch64 results must be its bits exactly (the same operations in the same order)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from asm import llvm
from asm.aarch64 import Assembler
from minijit.kernels.aarch64 import vexp
from minijit.runtime import runs_natively
from tests.minijit.kernels.test_x86_vexp import THRESHOLDS, bit_distance, sweep, ulp_of
from tests.minijit.kernels.x86_util import available

NP = {"fp32": np.float32, "fp64": np.float64}
TARGETS = [("neon", 128)] + [("sve", vl) for vl in ([128] if runs_natively("aarch64") else [128, 256, 512])]
#: the documented bound (fractional ulps) and the bit-pattern distance to the correctly rounded result
ULP, BITS = 1.0, 1
LONG = np.finfo(np.longdouble).nmant >= 63

kernel = functools.cache(vexp.generate)


def run(dtype: str, isa: str, vl: int, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    y = np.full_like(x, np.nan)
    kernel(dtype, isa, vl)(x, y, x.size)
    return y


def exact(x: np.ndarray, dtype: str) -> np.ndarray:
    """exp(x) well below ``dtype``'s spacing: float64 for fp32, long double for fp64."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(x.astype(np.float64 if dtype == "fp32" else np.longdouble))


def ulp_error(y: np.ndarray, ref: np.ndarray, dtype: str) -> np.ndarray:
    """|y - ref| in ulps of ``dtype`` at ``ref`` (finite, positive ``ref``)."""
    return np.abs(y.astype(ref.dtype) - ref) / ulp_of(ref.astype(np.float64), dtype).astype(ref.dtype)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ["neon", "sve"])
def test_listings_reassemble(isa, dtype):
    a = vexp.program(dtype, isa)
    assert llvm.assemble(a.listing()) == a.code()
    # the primitive alone, three registers interleaved, constants in other registers
    vt = vexp.VTarget(dtype, isa)
    a = Assembler()
    nq = vexp.quads(dtype)
    consts = vexp.ExpConsts.new(a, vt, list(range(nq)))
    consts.setup(a, vexp.X[9])
    vexp.emit_exp(a, vt, [29, 30, 31], list(range(nq, nq + 9)), consts)
    a.ret()
    consts.emit_data(a)
    assert llvm.assemble(a.listing()) == a.code()


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_table_holds_the_constants(dtype):
    """Every constant sits at its (quad, lane) in the table; whole-vector ones fill their quad."""
    vt = vexp.VTarget(dtype, "sve", 256)
    consts = vexp.ExpConsts.new(Assembler(), vt, list(range(vexp.quads(dtype))))
    table = np.frombuffer(consts.data(), NP[dtype]).reshape(-1, 16 // vt.es)
    for name, value in vexp.constants(dtype).items():
        q, lane = consts.where[name]
        cells = table[q] if name in vexp.WHOLE else table[q, lane : lane + 1]
        assert np.all(cells == NP[dtype](value)), name


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(("isa", "vl"), TARGETS)
def test_error_over_the_whole_range(isa, vl, dtype):
    x = sweep(dtype, 1 << 18)
    y = run(dtype, isa, vl, x)
    ref = exact(x, dtype)
    rounded = ref.astype(NP[dtype])
    assert bit_distance(y, rounded, dtype).max() <= BITS
    finite = (ref > 0) & (rounded < np.inf)
    if dtype == "fp64" and not LONG:  # pragma: no cover - hosts whose long double is double
        return
    err = ulp_error(y[finite], ref[finite], dtype)
    assert err.max() <= ULP
    subnormal = ref[finite] < np.finfo(NP[dtype]).tiny
    assert subnormal.sum() > 1000 and err[subnormal].max() <= ULP
    order = np.argsort(x, kind="stable")
    assert np.all(y[order][1:] >= y[order][:-1])  # monotone on the sweep


@pytest.mark.parametrize(("dtype", "target"), [("fp32", 0), ("fp32", -1), ("fp64", 0), ("fp64", 1)])
def test_error_over_the_reduced_range(dtype, target):
    """2^20 evenly spaced points of |x| <= ln2/2 (NEON, and one SVE length per dtype)."""
    isa, vl = TARGETS[target % len(TARGETS)]
    h = math.log(2) / 2
    x = np.linspace(-h, h, 1 << 20).astype(NP[dtype])
    y = run(dtype, isa, vl, x)
    ref = exact(x, dtype)
    assert bit_distance(y, ref.astype(NP[dtype]), dtype).max() <= BITS
    if dtype == "fp64" and not LONG:  # pragma: no cover
        mp = pytest.importorskip("mpmath")
        x, y = x[:: 1 << 8], y[:: 1 << 8]
        with mp.workdps(30):
            ref = np.array([float(mp.exp(mp.mpf(float(v)))) for v in x])
    assert ulp_error(y, ref, dtype).max() <= 2.0  # the bound: 2 ulp
    assert ulp_error(y, ref, dtype).max() <= ULP  # the module's bound


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(("isa", "vl"), TARGETS)
def test_edges(isa, vl, dtype):
    f = NP[dtype]
    over, zero, normal = (f(float.fromhex(h)) for h in THRESHOLDS[dtype])
    inf, tiny = f(np.inf), np.finfo(f).smallest_subnormal

    def up(v):
        return np.nextafter(v, inf)

    x = np.array(
        [-inf, inf, np.nan, -np.nan, 0.0, -0.0, tiny, -tiny, over, up(over), zero, up(zero), normal, up(normal),
         1e30, -1e30, f(np.finfo(f).max), f(np.finfo(f).min), -1e9, 1.0, -1.0],
        f,
    )  # fmt: skip
    y = run(dtype, isa, vl, x)
    assert y[0] == 0 and not np.signbit(y[0]) and y[1] == inf
    assert np.isnan(y[2]) and np.isnan(y[3])
    assert np.all(y[4:8] == 1)
    assert np.isfinite(y[8]) and y[9] == inf
    assert y[10] == 0 and y[11] == tiny  # the last result rounded to 0, then the smallest subnormal
    assert 0 < y[12] < np.finfo(f).tiny  # a subnormal result
    assert bit_distance(y[10:14], exact(x[10:14], dtype).astype(f), dtype).max() <= BITS
    assert y[14] == inf and y[15] == 0 and y[16] == inf and y[17] == 0 and y[18] == 0
    ref = exact(x[19:], dtype).astype(f)
    assert bit_distance(y[19:], ref, dtype).max() <= BITS
    # lengths that end inside a vector: nothing past n is written
    for n in (1, 3, 5, 2 * (vl // 8 // x.itemsize) + 1):
        xs = np.linspace(-3, 3, n).astype(f)
        out = np.full(n + 8, -7.0, f)
        kernel(dtype, isa, vl)(xs, out, n)
        assert np.all(out[n:] == -7.0)
        assert bit_distance(out[:n], exact(xs, dtype).astype(f), dtype).max() <= BITS


@pytest.mark.skipif(not available("avx2"), reason="the x86-64 AVX2 primitive runs only on an AVX2 host")
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_same_bits_as_the_x86_primitive(dtype):
    from tests.minijit.kernels.test_x86_vexp import run as x86_run

    x = sweep(dtype, 1 << 16)
    want = x86_run(dtype, "avx2", x)
    for isa, vl in TARGETS:
        y = run(dtype, isa, vl, x)
        same = (y == want) | (np.isnan(y) & np.isnan(want))
        assert same.all() and np.array_equal(np.signbit(y), np.signbit(want)), (isa, vl)


def test_bad_arguments():
    with pytest.raises(ValueError, match="isa"):
        vexp.VTarget("fp32", "avx2")
    with pytest.raises(ValueError, match="vl"):
        vexp.VTarget("fp32", "sve", 200)
    with pytest.raises(ValueError, match="dtype"):
        vexp.VTarget("fp16", "neon")
    vt = vexp.VTarget("fp32", "sve", 128)
    a = Assembler()
    with pytest.raises(ValueError, match="z0..z7"):
        vexp.ExpConsts.new(a, vt, [8, 1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="regs"):
        vexp.ExpConsts.new(a, vt, [0, 1])
    consts = vexp.ExpConsts.new(a, vt, list(range(7)))
    with pytest.raises(ValueError, match="scratch"):
        vexp.emit_exp(a, vt, 10, [11, 12], consts)
    with pytest.raises(ValueError, match="distinct"):
        vexp.emit_exp(a, vt, 10, [11, 12, 3], consts)
