"""A fixed corpus of float instructions that holds `ptx.sim` to recorded hardware.

Each `OpCase` is one PTX instruction form the simulator implements (``add.f32``,
``fma.rn.f32``, ``cvt.rna.tf32.f32``, ``setp.ltu.f32``, ...) as a kernel
``out[i] = op(in0[i], in1[i], in2[i])`` for ``i < n``, with fixed default inputs that cover NaN
payloads (quiet, signalling, negative), infinities, signed zeros, subnormals, the largest
finite values and the rounding edges of the result type (ties, one ulp either side, overflow
thresholds). `run` executes a case through a driver module with the `ptx.driver` API: on a GPU
(`ptx.driver`) it returns the chip's bit patterns, in `ptx.simdriver` the simulator's.

``scripts/gpu-check --record`` stores the GPU's results in ``tests/data/hw/<arch>.npz``
(`Record`, `save`), next to one small launch per kernel family (`minijit.cuda.hwrecord`; this
module knows only the file format of those entries). ``tests/ptx/test_hw_record.py`` reruns
every recorded op in the simulator over the recorded inputs (`check_op`): every bit must match.

Instructions the simulator refuses (``div.approx``/``div.full``, f16x2/bf16 arithmetic) or does
not know (``rcp``, ``sqrt``, ``ex2``, ``lg2``, ``neg``, ``abs``) are not in the corpus: a kernel
using one fails in the simulator before any value could differ. Directed rounding (.rz/.rm/.rp),
which the simulator computes exactly but no kernel emits, is held to the softfloat oracle of
tests/ptx/test_sim_oracle.py only, not to the chip.

Record file: a numpy ``.npz`` with one JSON string ``meta`` (``format``, ``arch``, ``runs``: the
device, driver, CUDA/ptxas version, date, commit and command of each recording, and
``entries``: name -> provenance and parameters) and, per entry, its arrays as
``<entry>/<array>``. Op entries are named ``op:<instruction>`` (``op:<instruction>#<label>``
for further input sets, e.g. values transcribed from a failed test's log) and hold ``in0`` ..
``in2`` and ``out`` as unsigned bit patterns of the operand widths, plus ``known`` (bool) when
only some outputs were recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .builder import Kernel, Module, Reg, addr, sreg

__all__ = [
    "OPS",
    "Entry",
    "OpCase",
    "Record",
    "check_op",
    "load",
    "op_entry",
    "record_ops",
    "run",
    "save",
]

FORMAT = 1
BLOCK = 128  #: threads per CTA of a corpus kernel

#: value type -> (register type, unsigned numpy type of its bit pattern)
_VALUE = {
    "f16": ("f16", np.uint16),
    "bf16": ("b16", np.uint16),
    "b16": ("b16", np.uint16),
    "s16": ("s16", np.uint16),
    "u16": ("u16", np.uint16),
    "f32": ("f32", np.uint32),
    "tf32": ("b32", np.uint32),
    "b32": ("b32", np.uint32),
    "s32": ("s32", np.uint32),
    "u32": ("u32", np.uint32),
    "f64": ("f64", np.uint64),
    "s64": ("s64", np.uint64),
    "u64": ("u64", np.uint64),
}


def bits_dtype(value_type: str) -> type:
    """The unsigned numpy type that holds one ``value_type`` bit pattern."""
    return _VALUE[value_type][1]


# --------------------------------------------------------------------------- input values

#: f32 values every f32 operand meets (bit patterns): zeros, ones, NaNs with several payloads and
#: signs (0x7f800001 signalling), infinities, the smallest/largest subnormal and normal, the
#: largest finite, one ulp around 1, f16/bf16 limits (65504, 65520 rounds to inf in f16), the
#: tf32/bf16/f16 tie points of 1.0, integers around 2^23, 2^24, 2^31, 2^32, 2^63
F32_EDGES = np.array(
    [
        0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
        0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7FC00123, 0x7F800001, 0xFFA00042,
        0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
        0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800001, 0x3F7FFFFF, 0x3F000000,
        0x3FC00000, 0xC0400000, 0x3EAAAAAB, 0x477FE000, 0x477FF000, 0xC77FF000,
        0x477FEFFF, 0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000, 0x33800000,
        0x33000000, 0x4B000000, 0x4B800001, 0x4F000000, 0xCF000000, 0x4F800000,
        0x5F000000, 0x7F000000,
    ],
    np.uint32,
)  # fmt: skip

F64_EDGES = np.array(
    [
        0x0000000000000000, 0x8000000000000000, 0x3FF0000000000000, 0xBFF0000000000000,
        0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000000000,
        0x7FFFFFFFFFFFFFFF, 0x7FF8000000000123, 0x7FF0000000000001, 0x0000000000000001,
        0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0x3FF0000000000001,
        0x3FEFFFFFFFFFFFFF, 0x3FF0000010000000, 0x3FF0000030000000, 0x3FF0000020000000,
        0x47EFFFFFE0000000, 0x47EFFFFFF0000000, 0x36A0000000000000, 0x3690000000000000,
        0x380FFFFFE0000000, 0x41DFFFFFFFC00000, 0xC1E0000000000000, 0x43E0000000000000,
    ],
    np.uint64,
)  # fmt: skip

F16_EDGES = np.array(
    [
        0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7FFF, 0x7E12, 0x7C01,
        0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C01, 0x3BFF, 0x3800, 0x3E00, 0x5BFF,
    ],
    np.uint16,
)  # fmt: skip

INT32_EDGES = [0, 1, -1, 2**24, 2**24 + 1, 2**24 + 3, -(2**24) - 1, 2**25 + 2, 2**25 + 6, 2**31 - 1, -(2**31),
               2**31 - 65, 2**31 - 64, 2**31 - 63, 16777217, 33554435]  # fmt: skip
INT64_EDGES = [0, 1, -1, 2**53 + 1, -(2**53) - 1, 2**60 + 2**36 + 1, 2**60 + 2**36, 2**60 + 2**37 - 1,
               2**63 - 1, -(2**63), 2**24 + 1, 2**62 + 2**9 + 1, 2**62 + 2**10 + 2**9]  # fmt: skip


def _rounding_edges(bits: int, drop: int) -> np.ndarray:
    """f32 patterns around the rounding points of a type that keeps the top ``bits - drop``
    bits of a ``bits``-bit pattern: for even and odd kept parts, the dropped part 0, 1, half - 1,
    half, half + 1 and all ones; both signs; at 1.0, at the largest finite value and below it."""
    half = 1 << (drop - 1)
    lows = [0, 1, half - 1, half, half + 1, (1 << drop) - 1]
    bases = [0x3F800000, 0x3F800000 | (1 << drop), 0x7F7FFFFF & ~((1 << drop) - 1), 0x00800000, 0x00000000]
    bases += [0x7F7FFFFF & ~((1 << drop) - 1) & ~(1 << drop)]
    out = [(b | lo) & 0xFFFFFFFF for b in bases for lo in lows]
    out += [x | 0x80000000 for x in out]
    return np.array(out, np.uint32)


def _f16_targets() -> np.ndarray:
    """f32 patterns at the f16 rounding points: ties of normal and subnormal f16 values (f16
    ulp 2^-24 below 2^-14), the overflow threshold 65520 and its neighbours, f16 min normal."""
    vals = []
    for f16 in (0x0001, 0x0002, 0x0003, 0x03FF, 0x0400, 0x0401, 0x3C00, 0x3C01, 0x7BFE, 0x7BFF):
        lo = np.float64(np.array(f16, np.uint16).view(np.float16))
        hi = np.float64(np.array(f16 + 1, np.uint16).view(np.float16))
        mid = np.float32((lo + hi) / 2)
        u = int(mid.view(np.uint32))
        vals += [u - 1, u, u + 1]
    vals += [0x33000000, 0x33000001, 0x32FFFFFF, 0x477FF000, 0x477FEFFF, 0x477FF001]
    out = np.array(vals, np.uint32)
    return np.concatenate([out, out | np.uint32(0x80000000)])


def _random_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` f32 patterns: half uniform bit patterns (every class), half values of any exponent."""
    raw = rng.integers(0, 2**32, n // 2, dtype=np.uint64).astype(np.uint32)
    x = (rng.standard_normal(n - n // 2) * 2.0 ** rng.integers(-140, 120, n - n // 2)).astype(np.float32)
    return np.concatenate([raw, x.view(np.uint32)])


def _pairs(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of ``edges``."""
    a, b = np.meshgrid(edges, edges, indexing="ij")
    return a.ravel(), b.ravel()


def _fma_double_rounding() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f32 a, b, c whose exact a*b + c lies just off an f32 tie but whose float64 rounding lands
    on it (a two-step rounding differs from the fused one): a = b = 1 + 2^-12 gives
    1 + 2^-11 + 2^-24, c = +-2^-80 moves it off the tie; and the mirrored negative cases."""
    a = np.array([1 + 2.0**-12, 1 + 2.0**-12, -(1 + 2.0**-12), 1 + 2.0**-11 + 2.0**-12], np.float32)
    b = np.array([1 + 2.0**-12, 1 + 2.0**-12, 1 + 2.0**-12, 1 + 2.0**-12], np.float32)
    c = np.array([2.0**-80, -(2.0**-80), 2.0**-80, -(2.0**-80)], np.float32)
    return a.view(np.uint32), b.view(np.uint32), c.view(np.uint32)


def _f32_binary(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F32_EDGES)
    ra, rb = _random_f32(rng, 512), _random_f32(rng, 512)
    # round-to-nearest ties of a sum: 1 + 2^-24 (ties to even: 1), 1 + 3*2^-24 (up), cancellation
    ta = np.array([1.0, 1.0 + 2.0**-23, 2.0**24, 1.0, -(1.0 + 2.0**-23)], np.float32).view(np.uint32)
    tb = np.array([2.0**-24, 2.0**-24, 1.0, -(1.0 - 2.0**-24), 2.0**-24], np.float32).view(np.uint32)
    return np.concatenate([a, ra, ta]), np.concatenate([b, rb, tb])


def _f32_ternary(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F32_EDGES[:22])  # zeros, ones, infinities, NaNs, subnormals, the extremes
    c = np.resize(np.roll(F32_EDGES, 5), a.size)
    da, db, dc = _fma_double_rounding()
    ra, rb, rc = _random_f32(rng, 256), _random_f32(rng, 256), _random_f32(rng, 256)
    return np.concatenate([a, da, ra]), np.concatenate([b, db, rb]), np.concatenate([c, dc, rc])


def _f32_unary(seed: int, drop: int | None = None) -> tuple[np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = [F32_EDGES, _random_f32(rng, 1024)]
    if drop is not None:
        parts.append(_rounding_edges(32, drop))
    parts.append(_f16_targets())
    return (np.concatenate(parts),)


def _f64_binary(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F64_EDGES)
    raw = rng.integers(0, 2**64, 256, dtype=np.uint64, endpoint=False)
    x = (rng.standard_normal(256) * 2.0 ** rng.integers(-1000, 1000, 256)).view(np.uint64)
    return np.concatenate([a, raw]), np.concatenate([b, x])


def _f64_ternary(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F64_EDGES[:16])
    c = np.resize(np.roll(F64_EDGES, 3), a.size)
    # exact a*b = 1 - 2^-104: fused, a*b - 1 = -2^-104; rounded first, 0
    da = np.array([1 + 2.0**-52, 1 + 2.0**-52], np.float64).view(np.uint64)
    db = np.array([1 - 2.0**-52, 1 - 2.0**-52], np.float64).view(np.uint64)
    dc = np.array([-1.0, -0.5], np.float64).view(np.uint64)
    r = (rng.standard_normal((3, 256)) * 2.0 ** rng.integers(-300, 300, (3, 256))).view(np.uint64)
    return np.concatenate([a, da, r[0]]), np.concatenate([b, db, r[1]]), np.concatenate([c, dc, r[2]])


def _f64_unary(seed: int) -> tuple[np.ndarray]:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):  # some overflow to infinity: more of them
        x = (rng.standard_normal(512) * 2.0 ** rng.integers(-1100, 1100, 512)).view(np.uint64)
    return (np.concatenate([F64_EDGES, x]),)


def _f16_binary(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F16_EDGES)
    r = rng.integers(0, 2**16, (2, 512), dtype=np.uint32).astype(np.uint16)
    return np.concatenate([a, r[0]]), np.concatenate([b, r[1]])


def _f16_ternary(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _pairs(F16_EDGES[:16])
    c = np.resize(np.roll(F16_EDGES, 3), a.size)
    r = rng.integers(0, 2**16, (3, 512), dtype=np.uint32).astype(np.uint16)
    return np.concatenate([a, r[0]]), np.concatenate([b, r[1]]), np.concatenate([c, r[2]])


def _all16() -> tuple[np.ndarray]:
    """Every third 16-bit pattern (every exponent, sign and NaN class, both mantissa parities) and
    the f16 edges (f16 or bf16 sources)."""
    return (np.concatenate([np.arange(0, 2**16, 3, dtype=np.uint32).astype(np.uint16), F16_EDGES]),)


def _ints(values: Sequence[int], seed: int, bits: int, signed: bool) -> tuple[np.ndarray]:
    """``values`` and random integers of every magnitude (both signs), as ``bits``-bit patterns
    of the signed or unsigned type (negative values as two's complement for unsigned types)."""
    rng = np.random.default_rng(seed)
    rand = [int(v) for v in rng.integers(0, 2**62, 256, dtype=np.int64) >> rng.integers(0, 62, 256)]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1 if signed else bits)) - 1
    vals = [v for v in [*values, *rand, *(-v for v in rand[:128])] if lo <= v <= hi]
    return (np.array([v & ((1 << bits) - 1) for v in vals], bits_dtype(("s" if signed else "u") + str(bits))),)


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class OpCase:
    """One instruction form: ``name`` (the PTX instruction, e.g. "cvt.rn.f16.f32"), the value
    types of its operands and result (keys of ``_VALUE``), ``emit(k, d, *srcs)`` writing it with
    the `ptx.builder` API, and ``inputs()`` giving the corpus's default operand bit patterns."""

    name: str
    ins: tuple[str, ...]
    out: str
    emit: Callable[..., None] = field(compare=False)
    inputs: Callable[[], tuple[np.ndarray, ...]] = field(compare=False)

    @property
    def kernel_name(self) -> str:
        return "hw_" + re.sub(r"\W", "_", self.name)

    def module(self) -> tuple[Module, Kernel]:
        """``out[i] = op(in0[i], ...)`` for ``i < n``; parameters: in pointers, out, n (u32)."""
        m = Module()
        k = m.kernel(self.kernel_name, maxntid=BLOCK)
        ps = [k.param("u64", f"in{i}") for i in range(len(self.ins))] + [k.param("u64", "out")]
        pn = k.param("u32", "n")
        n, i, t, c, w = k.reg("u32"), k.reg("u32"), k.reg("u32"), k.reg("u32"), k.reg("u32")
        k.ld_param(n, pn)
        k.mov(t, sreg.tid.x)
        k.mov(c, sreg.ctaid.x)
        k.mov(w, sreg.ntid.x)
        k.mad(i, c, w, t, mode="lo")
        done = k.reg("pred")
        k.setp("ge", done, i, n)
        k.ret(pred=done)
        srcs = []
        for p, vt in zip(ps, (*self.ins, self.out), strict=True):
            raw, g, off, ptr = k.reg("u64"), k.reg("u64"), k.reg("u64"), k.reg("u64")
            k.ld_param(raw, p)
            k.cvta(g, raw)
            k.mul(off, i, np.dtype(bits_dtype(vt)).itemsize, mode="wide")
            k.add(ptr, g, off)
            srcs.append(ptr)
        regs = []
        for ptr, vt in zip(srcs, self.ins, strict=False):
            r = k.reg(_VALUE[vt][0])
            k.ld("global", r, addr(ptr))
            regs.append(r)
        d = k.reg(_VALUE[self.out][0])
        self.emit(k, d, *regs)
        k.st("global", addr(srcs[-1]), d)
        k.ret()
        return m, k


def _binop(op: str, **kw):
    def emit(k: Kernel, d: Reg, a: Reg, b: Reg) -> None:
        getattr(k, op)(d, a, b, **kw)

    return emit


def _ternop(op: str, **kw):
    def emit(k: Kernel, d: Reg, a: Reg, b: Reg, c: Reg) -> None:
        getattr(k, op)(d, a, b, c, **kw)

    return emit


def _cvt(dtype: str, atype: str, rnd: str | None = None, **kw):
    def emit(k: Kernel, d: Reg, a: Reg) -> None:
        k.cvt(d, a, rnd=rnd, dtype=dtype, atype=atype, **kw)

    return emit


def _pack(dtype: str, relu: bool = False):
    def emit(k: Kernel, d: Reg, hi: Reg, lo: Reg) -> None:
        k.cvt_pack(d, hi, lo, dtype=dtype, relu=relu)

    return emit


def _setp(cmp: str):
    """setp.cmp then selp 1/0: the predicate as a u32."""

    def emit(k: Kernel, d: Reg, a: Reg, b: Reg) -> None:
        p = k.reg("pred")
        k.setp(cmp, p, a, b)
        k.selp(d, 1, 0, p)

    return emit


def _cases() -> dict[str, OpCase]:
    cs: list[OpCase] = []

    def add(name, ins, out, emit, inputs):
        cs.append(OpCase(name, ins, out, emit, inputs))

    f2, f3 = ("f32", "f32"), ("f32", "f32", "f32")
    for op in ("add", "sub", "mul", "min", "max"):
        add(f"{op}.f32", f2, "f32", _binop(op), lambda: _f32_binary(1))
    for op in ("add", "sub", "mul"):  # .rn: never contracted into an fma (the elementwise kernels)
        add(f"{op}.rn.f32", f2, "f32", _binop(op, rnd="rn"), lambda: _f32_binary(1))
    add("div.rn.f32", f2, "f32", _binop("div", rnd="rn"), lambda: _f32_binary(2))
    add("add.sat.f32", f2, "f32", _binop("add", sat=True), lambda: _f32_binary(3))
    add("add.ftz.f32", f2, "f32", _binop("add", ftz=True), lambda: _f32_binary(4))
    add("mul.ftz.f32", f2, "f32", _binop("mul", ftz=True), lambda: _f32_binary(5))
    add("fma.rn.f32", f3, "f32", _ternop("fma"), lambda: _f32_ternary(6))
    add("mad.rn.f32", f3, "f32", _ternop("mad"), lambda: _f32_ternary(7))
    add("fma.rn.sat.f32", f3, "f32", _ternop("fma", sat=True), lambda: _f32_ternary(8))
    add("fma.rn.ftz.f32", f3, "f32", _ternop("fma", ftz=True), lambda: _f32_ternary(9))
    for cmp in ("eq", "ne", "lt", "gt", "ge", "equ", "neu", "ltu", "geu", "num", "nan"):
        add(f"setp.{cmp}.f32", f2, "u32", _setp(cmp), lambda: _f32_binary(10))
    d2, d3 = ("f64", "f64"), ("f64", "f64", "f64")
    for op in ("add", "mul", "min", "max"):
        add(f"{op}.f64", d2, "f64", _binop(op), lambda: _f64_binary(11))
    add("div.rn.f64", d2, "f64", _binop("div", rnd="rn"), lambda: _f64_binary(12))
    add("fma.rn.f64", d3, "f64", _ternop("fma"), lambda: _f64_ternary(13))
    h2, h3 = ("f16", "f16"), ("f16", "f16", "f16")
    for op in ("add", "sub", "mul"):
        add(f"{op}.f16", h2, "f16", _binop(op), lambda: _f16_binary(14))
    add("fma.rn.f16", h3, "f16", _ternop("fma"), lambda: _f16_ternary(15))
    # conversions
    add("cvt.rna.tf32.f32", ("f32",), "tf32", _cvt("tf32", "f32", "rna"), lambda: _f32_unary(20, drop=13))
    add("cvt.rn.f16.f32", ("f32",), "f16", _cvt("f16", "f32", "rn"), lambda: _f32_unary(21, drop=13))
    add("cvt.rn.sat.f16.f32", ("f32",), "f16", _cvt("f16", "f32", "rn", sat=True), lambda: _f32_unary(22))
    add("cvt.rn.bf16.f32", ("f32",), "bf16", _cvt("bf16", "f32", "rn"), lambda: _f32_unary(23, drop=16))
    add("cvt.rn.f16x2.f32", f2, "b32", _pack("f16x2"), lambda: _f32_binary(24))
    add("cvt.rn.bf16x2.f32", f2, "b32", _pack("bf16x2"), lambda: _f32_binary(25))
    add("cvt.rn.relu.f16x2.f32", f2, "b32", _pack("f16x2", relu=True), lambda: _f32_binary(26))
    add("cvt.rn.relu.bf16x2.f32", f2, "b32", _pack("bf16x2", relu=True), lambda: _f32_binary(27))
    add("cvt.f32.f16", ("f16",), "f32", _cvt("f32", "f16"), _all16)
    add("cvt.f32.bf16", ("bf16",), "f32", _cvt("f32", "bf16"), _all16)
    add("cvt.f64.f32", ("f32",), "f64", _cvt("f64", "f32"), lambda: _f32_unary(28))
    add("cvt.rn.f32.f64", ("f64",), "f32", _cvt("f32", "f64", "rn"), lambda: _f64_unary(29))
    for rnd in ("rni", "rzi", "rmi", "rpi"):
        add(f"cvt.{rnd}.s32.f32", ("f32",), "s32", _cvt("s32", "f32", rnd), lambda: _f32_unary(30))
    add("cvt.rzi.u32.f32", ("f32",), "u32", _cvt("u32", "f32", "rzi"), lambda: _f32_unary(31))
    add("cvt.rni.s64.f64", ("f64",), "s64", _cvt("s64", "f64", "rni"), lambda: _f64_unary(32))
    add("cvt.rn.f32.s32", ("s32",), "f32", _cvt("f32", "s32", "rn"), lambda: _ints(INT32_EDGES, 33, 32, True))
    add("cvt.rn.f32.u32", ("u32",), "f32", _cvt("f32", "u32", "rn"), lambda: _ints(INT32_EDGES, 34, 32, False))
    add("cvt.rn.f32.s64", ("s64",), "f32", _cvt("f32", "s64", "rn"), lambda: _ints(INT64_EDGES, 35, 64, True))
    add("cvt.rn.f32.u64", ("u64",), "f32", _cvt("f32", "u64", "rn"), lambda: _ints(INT64_EDGES, 36, 64, False))
    add("cvt.rn.f64.s64", ("s64",), "f64", _cvt("f64", "s64", "rn"), lambda: _ints(INT64_EDGES, 37, 64, True))
    return {c.name: c for c in cs}


#: every instruction form of the corpus, by name
OPS: dict[str, OpCase] = _cases()


# --------------------------------------------------------------------------- running


def run(case: OpCase, inputs: Sequence[np.ndarray], driver: Any, arch: str | None = None) -> np.ndarray:
    """``case`` over ``inputs`` (bit patterns, one array per operand, equal lengths) through
    ``driver`` (`ptx.driver` or `ptx.simdriver`) for ``arch`` (default: the device's): the
    result bit patterns."""
    if len(inputs) != len(case.ins):
        raise ValueError(f"{case.name} takes {len(case.ins)} operand arrays, got {len(inputs)}")
    arrays = [np.ascontiguousarray(x, bits_dtype(t)) for x, t in zip(inputs, case.ins, strict=True)]
    n = arrays[0].size if arrays else 0
    if any(a.ndim != 1 or a.size != n for a in arrays):
        raise ValueError(f"{case.name}: operand arrays must be 1-d of one length, got {[a.shape for a in arrays]}")
    m, k = case.module()
    mod = driver.load_ptx(m.text(), arch or driver.device().arch)
    fn = mod.function(k.name, signature=k.signature)
    out_t = bits_dtype(case.out)
    bufs = [driver.to_device(a) for a in arrays]
    out = driver.to_device(np.zeros(max(n, 1), out_t))
    fn.launch((max(1, -(-n // BLOCK)),), (BLOCK,), args=(*bufs, out, n))
    driver.synchronize()
    return out.to_host(out_t, max(n, 1))[:n]


@dataclass
class Entry:
    """One recorded entry: its ``arrays`` (``in0``.., ``out``, ``known``; launches: their own)
    and ``info`` (provenance and parameters, JSON-serialisable)."""

    name: str
    arrays: dict[str, np.ndarray]
    info: dict[str, Any]

    @property
    def kind(self) -> str:
        """The entry's kind: "op" or "launch"."""
        return self.name.split(":", 1)[0]

    @property
    def base(self) -> str:
        """The instruction or launch case the entry runs (the name without kind and ``#label``)."""
        return self.name.split(":", 1)[1].split("#", 1)[0]

    @property
    def known(self) -> np.ndarray:
        """Which outputs were recorded (all unless the entry has a ``known`` mask)."""
        out = self.arrays["out"]
        return self.arrays["known"].astype(bool) if "known" in self.arrays else np.ones(out.shape, bool)


@dataclass
class Record:
    """A record file: the device ``arch``, the ``runs`` that wrote it, and its entries."""

    arch: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        """Add ``entry``, replacing one of the same name (a newer recording)."""
        self.entries[entry.name] = entry


def op_entry(case: OpCase, inputs: Sequence[np.ndarray], out: np.ndarray, info: dict, label: str = "") -> Entry:
    """The `Entry` of ``case`` run over ``inputs`` with result ``out`` (bit patterns)."""
    arrays = {f"in{i}": np.asarray(x, bits_dtype(t)) for i, (x, t) in enumerate(zip(inputs, case.ins, strict=True))}
    arrays["out"] = np.asarray(out, bits_dtype(case.out))
    return Entry(f"op:{case.name}" + (f"#{label}" if label else ""), arrays, dict(info))


def record_ops(driver: Any, info: dict, names: Sequence[str] | None = None, arch: str | None = None) -> list[Entry]:
    """Run the corpus (or the cases ``names``) through ``driver`` over their default inputs."""
    out = []
    for name in names or OPS:
        case = OPS[name]
        ins = case.inputs()
        out.append(op_entry(case, ins, run(case, ins, driver, arch), info))
    return out


def check_op(entry: Entry, driver: Any = None, limit: int = 8) -> list[str]:
    """Rerun op ``entry`` over its recorded inputs (default: in `ptx.simdriver`) and list the
    recorded outputs whose bits differ (at most ``limit`` lines, then a count)."""
    if driver is None:
        from . import simdriver as driver
    if entry.base not in OPS:
        return [f"{entry.name}: no instruction {entry.base!r} in ptx.hwcorpus.OPS"]
    case = OPS[entry.base]
    ins = [entry.arrays[f"in{i}"] for i in range(len(case.ins))]
    got = run(case, ins, driver)
    want = entry.arrays["out"]
    bad = np.flatnonzero(entry.known & (got != want))
    w = 2 * np.dtype(want.dtype).itemsize
    lines = []
    for i in bad[:limit]:
        args = ", ".join(f"0x{int(x[i]):0{2 * x.itemsize}x}" for x in ins)
        lines.append(
            f"{entry.name}[{i}]: inputs ({args}): hardware 0x{int(want[i]):0{w}x}, simulator 0x{int(got[i]):0{w}x}"
        )
    if bad.size > limit:
        lines.append(f"{entry.name}: {bad.size - limit} more of {int(entry.known.sum())} recorded outputs differ")
    return lines


# --------------------------------------------------------------------------- files


def save(path: str | Path, record: Record) -> None:
    """Write ``record`` to ``path`` (``.npz``; see the module docstring for the layout)."""
    meta = {
        "format": FORMAT,
        "arch": record.arch,
        "runs": record.runs,
        "entries": {name: e.info for name, e in sorted(record.entries.items())},
    }
    arrays = {f"{name}/{key}": a for name, e in record.entries.items() for key, a in e.arrays.items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez_compressed(f, meta=np.array(json.dumps(meta, indent=1, sort_keys=True)), **arrays)


def load(path: str | Path) -> Record:
    """Read a record file; ValueError naming the file when it is not one."""
    with np.load(path, allow_pickle=False) as z:
        if "meta" not in z.files:
            raise ValueError(f"{path}: no 'meta' entry: not a hardware record")
        meta = json.loads(str(z["meta"]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: record format {meta.get('format')!r}, this reader knows {FORMAT}")
        arrays: dict[str, dict[str, np.ndarray]] = {}
        for key in z.files:
            if key != "meta":
                name, _, what = key.rpartition("/")
                arrays.setdefault(name, {})[what] = z[key]
    unknown = set(arrays) ^ set(meta["entries"])
    if unknown:
        raise ValueError(f"{path}: entries without provenance or without arrays: {sorted(unknown)}")
    entries = {name: Entry(name, arrays[name], info) for name, info in meta["entries"].items()}
    return Record(meta["arch"], meta.get("runs", []), entries)
