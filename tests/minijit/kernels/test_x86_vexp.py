"""The x86-64 ``exp`` primitive (`minijit.kernels.x86_64.vexp`): its error bound over the whole input
range (2^20 points, fractional and bit-pattern ulp distances to a correctly rounded reference),
its exact special cases and thresholds, the masked tail, and the listings (both ISAs reassemble to
their bytes with llvm-mc). The kernels run on this host's ISA: AVX2 here, AVX-512 only where the
host has it; the AVX-512 instruction sequence is checked against the AVX2 one it mirrors."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

from asm import llvm
from asm.x86_64 import YMM, ZMM, Assembler
from minijit.kernels.x86_64 import vexp
from minijit.kernels.x86_64.common import Target
from tests.minijit.kernels.x86_util import ISAS, NP, UINT, needs_x86

#: the documented bounds: fractional ulp error, and bit-pattern distance to the correctly rounded result
ULP = 1.0
BITS = 1
N = 1 << 20
INT = {"fp32": np.int32, "fp64": np.int64}
#: largest x with a finite exp(x), largest x whose exp(x) rounds to +0, largest below ln(smallest normal)
THRESHOLDS = {
    "fp32": ("0x1.62e42ep+6", "-0x1.9fe36ap+6", "-0x1.5d58a0p+6"),
    "fp64": ("0x1.62e42fefa39efp+9", "-0x1.74910d52d3052p+9", "-0x1.6232bdd7abcd3p+9"),
}
RANGE = {"fp32": (-104.0, 89.0), "fp64": (-746.0, 710.0)}

kernel = functools.cache(vexp.generate)


def run(dtype: str, isa: str, x: np.ndarray, nonpositive: bool = False) -> np.ndarray:
    x = np.ascontiguousarray(x)  # the kernel walks memory from the first element
    y = np.empty_like(x)
    kernel(dtype, isa, nonpositive)(x, y, x.size)
    return y


def sweep(dtype: str, n: int = N, seed: int = 50) -> np.ndarray:
    """``n`` points over the whole range of interest: uniform, dense around 0 (log-spaced magnitudes
    down to the smallest subnormal), the reduced range, around the overflow threshold, over the
    subnormal results, and huge |x|."""
    f = NP[dtype]
    rng = np.random.default_rng(seed)
    lo, hi = RANGE[dtype]
    over, zero, normal = (float.fromhex(h) for h in THRESHOLDS[dtype])
    tiny = float(np.finfo(f).smallest_subnormal)
    parts = [
        rng.uniform(lo, hi, 4 * n // 10),
        rng.choice([-1.0, 1.0], n // 5) * np.exp(rng.uniform(math.log(tiny), 0.0, n // 5)),
        rng.uniform(-math.log(2) / 2, math.log(2) / 2, n // 10),
        rng.uniform(over - 2, over + 1, n // 10),
        rng.uniform(zero - 1, normal + 2, n // 10),
    ]
    x = np.concatenate(parts).astype(f)
    return np.concatenate([x, rng.uniform(-1e3, 1e3, n - x.size).astype(f)])


def bit_distance(y: np.ndarray, ref: np.ndarray, dtype: str) -> np.ndarray:
    """|bits(y) - bits(ref)| for non-negative results (as signed integers)."""
    i = INT[dtype]
    return np.abs(y.view(i).astype(np.int64) - ref.view(i).astype(np.int64))


def ulp_of(v: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` at the exact values ``v > 0`` (float64), subnormal below the normals."""
    fi = np.finfo(NP[dtype])
    _, e = np.frexp(v)
    return np.ldexp(1.0, np.maximum(e - 1, fi.minexp) - fi.nmant)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_listing_reassembles_to_the_code(isa, dtype):
    try:
        llvm.find_tool("llvm-mc")
    except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
        pytest.skip(str(e))
    for nonpositive in (False, True):
        k = kernel(dtype, isa, nonpositive)
        assert llvm.assemble(k.listing, triple="x86_64", mattr="") == k.code
    # the primitive alone: table operands only, every constant pinned, several registers interleaved
    t = Target.of(dtype, isa)
    regs = t.vregs
    everything = (
        list(vexp.constants(dtype)) if isa == "avx512" else list(vexp.ExpConsts.new(Assembler(), t).first_loads)
    )
    for names, xs in (([], 1), (everything, 1), ([], 3)):
        a = Assembler()
        used = xs * (1 + vexp.SCRATCH)
        consts = vexp.ExpConsts.new(a, t, {n: regs[used + i] for i, n in enumerate(names)})
        consts.setup(a)
        vexp.emit_exp(a, t, regs[:xs], regs[xs:used], consts)
        a.ret()
        consts.emit_data(a)
        assert llvm.assemble(a.listing(), triple="x86_64", mattr="") == a.code()


def _sequence(isa: str, dtype: str, nonpositive: bool = False) -> list[str]:
    """emit_exp's instructions, loads of constants named alike, registers and operands left out."""
    t = Target.of(dtype, isa)
    a = Assembler()
    consts = vexp.ExpConsts.new(a, t)
    vexp.emit_exp(a, t, t.vregs[0], t.vregs[1:4], consts, nonpositive)
    out = []
    for line in a.listing().splitlines():
        mn, _, ops = line.strip().partition(" ")
        if mn in ("vmovups", "vmovupd", "vbroadcastss", "vbroadcastsd"):
            mn = "load"
        out.append(f"{mn} {ops.count('[') and 'm' or 'r'}")
    return out


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_avx512_sequence_is_the_avx2_one(dtype):
    """The AVX-512 code cannot run here: it must be the AVX2 sequence, instruction for instruction
    (its encodings are checked by llvm-mc; AVX2 is checked numerically)."""
    for nonpositive in (False, True):
        assert _sequence("avx512", dtype, nonpositive) == _sequence("avx2", dtype, nonpositive)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_table_operands_read_the_intended_constants(isa, dtype):
    """Every constant is read from its own slot with its element size (AVX2: a replicated 32-byte
    vector; AVX-512: a dword/qword broadcast), and the slot holds its value."""
    t = Target.of(dtype, isa)
    regs = t.vregs
    a = Assembler()
    consts = vexp.ExpConsts.new(a, t, {"two": regs[4]})
    consts.setup(a)
    vexp.emit_exp(a, t, regs[0], regs[1:4], consts)
    vexp.emit_exp(a, t, regs[0], regs[1:4], consts, nonpositive=True)  # reads "lo_np"
    a.ret()
    consts.emit_data(a)
    code, base = a.code(), consts.label.pos
    assert base % 64 == 0
    name_at = {offset: name for name, offset in consts.offsets.items()}
    operand = re.compile(rf"(\w+) ptr \[rip \+ {re.escape(consts.label.name)}(?: \+ (\d+))?\]")
    seen = set()
    for line in a.listing().splitlines():
        mnemonic = line.split()[0]
        for size, offset in operand.findall(line):
            name = name_at[int(offset or 0)]
            kind, value = consts.table[name]
            element = vexp._element(kind, value, dtype)
            slot = code[base + int(offset or 0) :][: consts.slot]
            if isa == "avx2":
                assert size == "ymmword" and slot == element * (32 // len(element)), line
                if not mnemonic.startswith("vmov"):
                    assert (4 if mnemonic.endswith("ps") else 8) == len(element), line
            else:
                assert {"dword": 4, "qword": 8}[size] == len(element) and slot.startswith(element), line
            seen.add(name)
    assert seen == set(consts.table)  # "two" by its setup load


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
def test_fp32_error_over_the_whole_range(isa):
    x = sweep("fp32")
    y = run("fp32", isa, x)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))  # < 1 ulp of float64: far below fp32's spacing
        ref = exact.astype(np.float32)
    assert bit_distance(y, ref, "fp32").max() <= BITS
    finite = (ref > 0) & np.isfinite(ref)
    err = np.abs(y[finite] - exact[finite]) / ulp_of(exact[finite], "fp32")
    assert err.max() <= ULP
    reduced = np.abs(x[finite]) <= math.log(2) / 2
    assert err[reduced].max() <= ULP
    subnormal = exact[finite] < np.finfo(np.float32).tiny
    assert subnormal.sum() > 10000 and err[subnormal].max() <= ULP  # gradual underflow
    order = np.argsort(x, kind="stable")
    assert np.all(y[order][1:] >= y[order][:-1])  # monotone on the sweep


@needs_x86
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ISAS)
def test_nonpositive_form_is_the_general_one_on_normal_results(isa, dtype):
    """``nonpositive`` (x <= 0): the general form's bits wherever that result is normal, +0 or within
    the smallest normal of it (absolute) below, +0 for -inf, NaN for NaN."""
    f = NP[dtype]
    lo = RANGE[dtype][0]
    x = sweep(dtype, 1 << 18)
    x = -np.abs(x[np.isfinite(x)])
    x = np.concatenate([x, np.linspace(lo, 0.0, 1 << 16), [-np.inf, np.nan, -0.0, 0.0, vexp.NONPOSITIVE_LO[dtype]]])
    x = x.astype(f)
    general, short = run(dtype, isa, x), run(dtype, isa, x, nonpositive=True)
    tiny = np.finfo(f).tiny
    normal = general >= tiny
    assert normal.sum() > x.size // 2 and (~normal).sum() > 1000
    assert np.array_equal(general[normal].view(UINT[dtype]), short[normal].view(UINT[dtype]))
    below = ~normal & ~np.isnan(x)
    assert np.all(short[below] >= 0) and np.all(np.abs(short[below] - general[below]) <= tiny)
    assert short[-5] == 0 and not np.signbit(short[-5]) and np.isnan(short[-4])
    assert short[-3] == short[-2] == 1 and short[-1] == 0  # exp(+-0) = 1; the clamp gives +0


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
def test_fp64_error_over_the_whole_range(isa):
    x = sweep("fp64")
    y = run("fp64", isa, x)
    with np.errstate(over="ignore"):
        ref = np.exp(x)  # libm: within 1 ulp itself
    assert bit_distance(y, ref, "fp64").max() <= BITS + 1
    order = np.argsort(x, kind="stable")
    assert np.all(y[order][1:] >= y[order][:-1])


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
def test_fp64_error_against_mpmath(isa):
    """2^16 points of the sweep against exp at 30 digits: the error in ulps, exactly."""
    mp = pytest.importorskip("mpmath")
    x = np.ascontiguousarray(sweep("fp64")[:: N >> 16])
    y = run("fp64", isa, x)
    finite = y < np.finfo(np.float64).max
    x, y = x[finite], y[finite]
    hi, lo, scale = np.empty(x.size), np.empty(x.size), np.empty(x.size, np.int64)
    with mp.workdps(30):
        for i, v in enumerate(x.tolist()):
            e = mp.exp(mp.mpf(v))
            man, exp = e.man_exp  # e = man 2^exp: its ulp is 2^k, subnormal spacing below 2^-1022
            k = max(exp + int(man).bit_length() - 1, -1022) - 52
            s = mp.ldexp(e, -k)  # e in ulps, as a double-double
            hi[i] = float(s)
            lo[i] = float(s - hi[i])
            scale[i] = k
    err = np.abs((np.ldexp(y, -scale) - hi) - lo)
    assert err.max() <= ULP
    assert err[np.abs(x) <= math.log(2) / 2].max() <= ULP
    assert err[x < float.fromhex(THRESHOLDS["fp64"][2])].max() <= ULP  # subnormal results


@needs_x86
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ISAS)
def test_special_cases_and_thresholds(isa, dtype):
    f, fi = NP[dtype], np.finfo(NP[dtype])
    up, down = (lambda v: np.nextafter(f(v), f(np.inf))), (lambda v: np.nextafter(f(v), f(-np.inf)))
    over, zero, normal = (f(float.fromhex(h)) for h in THRESHOLDS[dtype])
    snan = np.array([0x7F800001 if dtype == "fp32" else 0x7FF0000000000001], UINT[dtype]).view(f)[0]
    lo, hi = vexp.CLAMP[dtype]
    cases = [
        (-np.inf, 0.0),
        (np.inf, np.inf),
        (0.0, 1.0),
        (-0.0, 1.0),
        (over, None),  # the largest x with a finite exp(x): finite (checked below)
        (up(over), np.inf),
        (up(up(over)), np.inf),
        (zero, 0.0),
        (down(zero), 0.0),
        (up(zero), float(fi.smallest_subnormal)),
        (fi.max, np.inf),
        (-fi.max, 0.0),
        (1e30, np.inf),
        (-1e30, 0.0),
        (hi, np.inf),
        (up(hi), np.inf),
        (lo, 0.0),
        (down(lo), 0.0),
    ]
    x = np.array([c[0] for c in cases], f)
    y = run(dtype, isa, x)
    for xi, yi, (_, want) in zip(x, y, cases, strict=True):
        if want is not None:
            assert yi.tobytes() == f(want).tobytes(), (xi, yi, want)  # +0, not -0
    assert np.isfinite(y[4])
    # NaN in -> a quiet NaN out (signalling NaN too)
    nans = np.array([np.nan, -np.nan, snan], f)
    out = run(dtype, isa, nans).view(UINT[dtype])
    quiet = 1 << (fi.nmant - 1)
    exponent = ((1 << (fi.nexp)) - 1) << fi.nmant
    assert np.all(out & exponent == exponent) and np.all(out & quiet)
    # neighbours of the thresholds, subnormal and tiny inputs, the reduced range's ends: within the bound
    near = [v for c in (over, zero, normal, f(math.log(2) / 2), f(-math.log(2) / 2)) for v in (down(c), c, up(c))]
    small = [fi.smallest_subnormal, fi.tiny, down(fi.tiny), fi.eps / 8, 1e-20]
    x = np.array(near + small + [-s for s in small], f)
    y = run(dtype, isa, x)
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64)).astype(f)
    assert bit_distance(y, ref, dtype).max() <= BITS
    assert np.all(y[len(near) :] == 1.0)  # exp of |x| below half an ulp of 1


@needs_x86
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ISAS)
def test_every_length_and_in_place(isa, dtype):
    """n elements exactly (four-register loop, single registers, masked tail), nothing past them."""
    f, vl = NP[dtype], Target.of(dtype, isa).vl
    rng = np.random.default_rng(7)
    src = rng.uniform(-20, 20, 10 * vl).astype(f)
    full = run(dtype, isa, src)
    guard = 16
    for n in sorted({0, 1, vl - 1, vl, vl + 1, 2 * vl + 3, 4 * vl - 1, 4 * vl, 4 * vl + 1, 5 * vl + 3, 9 * vl - 1}):
        out = np.full(n + 2 * guard, -7.0, f)
        kernel(dtype, isa)(src[:n].copy(), out[guard : guard + n], n)
        assert out[guard : guard + n].tobytes() == full[:n].tobytes()
        assert np.all(out[:guard] == -7.0) and np.all(out[guard + n :] == -7.0)
    out = np.full(8, -7.0, f)
    kernel(dtype, isa)(src[:8], out, -3)  # n <= 0: nothing
    assert np.all(out == -7.0)
    inplace = src.copy()
    kernel(dtype, isa)(inplace, inplace, inplace.size)
    assert inplace.tobytes() == full.tobytes()


def test_emit_exp_checks_its_registers():
    t = Target.of("fp32", "avx2")
    a = Assembler()
    consts = vexp.ExpConsts.new(a, t, {"lo": YMM[10]})
    with pytest.raises(ValueError, match="scratch"):
        vexp.emit_exp(a, t, YMM[0], YMM[1:3], consts)
    with pytest.raises(ValueError, match="ymm0..ymm15"):
        vexp.emit_exp(a, t, ZMM[0], YMM[1:4], consts)
    with pytest.raises(ValueError, match="ymm0..ymm15"):
        vexp.emit_exp(a, t, YMM[16], YMM[1:4], consts)
    with pytest.raises(ValueError, match="distinct"):
        vexp.emit_exp(a, t, YMM[0], [YMM[1], YMM[2], YMM[0]], consts)
    with pytest.raises(ValueError, match="distinct"):
        vexp.emit_exp(a, t, YMM[0], [YMM[1], YMM[2], YMM[10]], consts)
    with pytest.raises(ValueError, match="consts are for"):
        vexp.emit_exp(a, Target.of("fp64", "avx2"), YMM[0], YMM[1:4], consts)
    with pytest.raises(ValueError, match="unknown constants"):
        vexp.ExpConsts.new(a, t, {"pi": YMM[5]})
    with pytest.raises(ValueError, match="dtype"):
        vexp.constants("fp16")
    assert len(a) == 0  # nothing emitted by a refused call


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_coefficients_are_the_remez_derivation(dtype):
    pytest.importorskip("mpmath")
    assert vexp.derive_coefficients(dtype) == tuple(float.fromhex(c) for c in vexp.COEFFICIENTS[dtype])


def test_constants_are_exact():
    """The split of ln 2 and log2(e) are the correctly rounded values; the fp32 exponent build adds
    exactly."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(60):
        ln2 = mp.log(2)
        for dtype, bits in (("fp32", 24), ("fp64", 53)):
            c = {k: float.fromhex(v) for k, v in vexp.REDUCTION[dtype].items()}
            with mp.workprec(bits):
                assert c["ln2_hi"] == float(+ln2) and c["log2e"] == float(+(1 / ln2))
                assert c["ln2_lo"] == float(+(ln2 - c["ln2_hi"]))
    for dtype, f, u, p, bias, lowest in (
        ("fp32", np.float32, np.uint32, 23, 127, -127),
        ("fp64", np.float64, np.uint64, 52, 1023, -1023),
    ):
        shift_a = vexp.constants(dtype)["shift_a"][1]
        bits = int(np.array(shift_a, f).view(u))
        assert float(f(shift_a)) == shift_a == 1.5 * 2**p + bias
        assert bits == int(np.array(1.5 * 2**p, f).view(u)) + bias
        # vpslld 23 / vpsllq 52 of t_a = S_a + n_a (every n_a of the clamped range) is 2^n_a's bits, +0 at the clamp
        width = 32 if dtype == "fp32" else 64
        for n_a in range(lowest, bias + 1):
            assert ((bits + n_a) << p) % 2**width == (bias + n_a) << p
