"""Simulated arithmetic, logic, shifts, compares, selects and conversions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import mma as _mma
from . import types as T
from .sim_memory import _MASK, _U64
from .sim_parse import Instr
from .sim_values import _to_bits, _type

if TYPE_CHECKING:
    from .sim import _Cta


#: NaN results of f32 arithmetic and of narrowing cvt, as the hardware writes them (H100, CUDA 13:
#: add/mul/div.rn.f32 give 0x7fffffff, cvt.rn.f16.f32 and cvt.rn.bf16.f32 give 0x7fff), not
#: numpy's payload-preserving NaN. min/max, copies and sign operations keep their input bits.
#: cvt.rna.tf32.f32 keeps the sign and clears the payload (H200, CUDA 13: 0x7fc00123 ->
#: 0x7fc00000, 0xffc00000 -> 0xffc00000; NaNs with payload bits above bit 12 were not recorded).
CANONICAL_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF, "tf32": 0x7FC00000}
_NAN_F32 = np.uint32(CANONICAL_NAN["f32"]).view(np.float32)


def _narrow_bits(v: np.ndarray, t: str, n: int) -> np.ndarray:
    """Bits of f32 values ``v`` rounded to f16/bf16, NaN as the canonical NaN."""
    return np.where(np.isnan(np.broadcast_to(v, (n,))), _U64(CANONICAL_NAN[t]), _to_bits(v, t, n))


_WRAPPING = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "mad": np.multiply}


def _arith(c: _Cta, ins: Instr, exe) -> None:
    op, t = ins.op, _type(ins)
    mods = ins.mods
    d = ins.ops[0]
    if T.is_float(t):
        if any(m in ("rz", "rm", "rp") for m in mods):
            c.fail(ins, "float rounding other than .rn is not supported by the simulator")
        if t in ("f16x2", "bf16x2", "bf16"):
            c.fail(ins, f"{op}.{t} is not supported by the simulator")
        a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
        with np.errstate(all="ignore"):
            if op == "add":
                r = a + b
            elif op == "sub":
                r = a - b
            elif op == "mul":
                r = a * b
            elif op == "min":
                r = np.fmin(a, b)
            elif op == "max":
                r = np.fmax(a, b)
            elif op == "div":
                if "rn" not in mods:
                    c.fail(ins, "div.approx/div.full are not supported by the simulator (div.rn is)")
                r = a / b
            elif op in ("fma", "mad"):
                cc = c.get(ins, ins.ops[3], t, exe)
                r = (a.astype(np.float64) * b + cc).astype(a.dtype) if t != "f64" else a * b + cc
            else:
                c.fail(ins, f"{op}.{t} is not supported")
        if t == "f32" and op not in ("min", "max"):
            r = np.where(np.isnan(r), _NAN_F32, r)
        if "sat" in mods:
            r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
        c.put(d.name, r, t, exe)
        return
    mode = next((m for m in mods if m in ("lo", "hi", "wide")), None)
    if op in _WRAPPING and mode in (None, "lo") and T.kind(t) != "pred" and ("sat" not in mods or t != "s32"):
        # wrapping integer arithmetic on the raw bits: the low bits of a sum or product depend
        # only on the low bits of the operands, whatever their signedness
        r = _WRAPPING[op](c.raw(ins, ins.ops[1], t, exe), c.raw(ins, ins.ops[2], t, exe))
        if op == "mad":
            r = r + c.raw(ins, ins.ops[3], t, exe)
        c.put_raw(d.name, r & _U64(_MASK[T.bits(t)]), exe)
        return
    if mode == "wide":
        a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
        dt = ("s" if T.kind(t) == "s" else "u") + str(2 * T.bits(t))
        if T.kind(t) == "s":
            r = a.astype(np.int64) * b.astype(np.int64)
        else:
            r = a.astype(_U64) * b.astype(_U64)
        if op == "mad":
            cc = c.get(ins, ins.ops[3], dt, exe)
            r = r + cc
        c.put(d.name, r, dt, exe)
        return
    a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
    w = T.bits(t)
    with np.errstate(over="ignore"):
        if op == "add":
            r = a + b
        elif op == "sub":
            r = a - b
        elif op in ("mul", "mad"):
            if mode == "hi" and w == 64:  # the 128-bit product in Python integers
                r = np.array([(x * y) >> 64 for x, y in zip(a.tolist(), b.tolist(), strict=True)], dtype=a.dtype)
            elif mode == "hi":
                wide = np.int64 if T.kind(t) == "s" else _U64
                r = (a.astype(wide) * b.astype(wide)) >> wide(w)
            else:
                r = a * b
            if op == "mad":
                r = r + c.get(ins, ins.ops[3], t, exe)
        elif op == "min":
            r = np.minimum(a, b)
        elif op == "max":
            r = np.maximum(a, b)
        elif op == "div":  # truncating; the result of a division by zero is unspecified: reported
            if (b[exe] == 0).any():
                c.fail(ins, "integer division by zero", exe & (b == 0))
            q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
            r = np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
        else:
            c.fail(ins, f"{op}.{t} is not supported")
    if "sat" in mods and t == "s32":
        r = np.clip(r, -(2**31), 2**31 - 1)
    c.put(d.name, r, t, exe)


def _logic(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d = ins.ops[0]
    if t == "pred":
        vals = [c.get(ins, o, "pred", exe) for o in ins.ops[1:]]
        r = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(ins.op)
        c.put(d.name, np.logical_not(vals[0]) if ins.op == "not" else r(*vals), "pred", exe)
        return
    vals = [c.raw(ins, o, t, exe) for o in ins.ops[1:]]
    if ins.op == "not":
        r = ~vals[0]
    else:
        r = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[ins.op](*vals)
    c.put(d.name, r, t, exe)


def _shift(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a, b = ins.ops
    w = T.bits(t)
    if b.kind == "imm":  # a constant shift: Python ints
        k = min(b.value & _MASK[32], w)
        if ins.op == "shl":
            v = c.raw(ins, a, t, exe)
            c.put(d.name, np.zeros(c.n, _U64) if k >= w else v << _U64(k), t, exe)
            return
        if T.kind(t) != "s":  # logical shift of the raw bits: the low w bits, shifted
            v = c.raw(ins, a, t, exe)
            c.put_raw(d.name, np.zeros(c.n, _U64) if k >= w else (v & _U64(_MASK[w])) >> _U64(k), exe)
            return
        v = c.get(ins, a, t, exe)
        c.put(d.name, v >> v.dtype.type(min(k, w - 1)), t, exe)
        return
    n = np.minimum(c.get(ins, b, "u32", exe), w).astype(np.int64)
    if ins.op == "shl":
        v = c.raw(ins, a, t, exe)
        r = np.where(n >= w, _U64(0), v << np.minimum(n, w - 1).astype(_U64))
        c.put(d.name, r, t, exe)
        return
    v = c.get(ins, a, t, exe)
    if T.kind(t) == "s":
        r = v >> np.minimum(n, w - 1).astype(v.dtype)
    else:
        r = np.where(n >= w, 0, v >> np.minimum(n, w - 1).astype(v.dtype)).astype(v.dtype)
    c.put(d.name, r, t, exe)


_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lo": np.less,
    "ls": np.less_equal,
    "hi": np.greater,
    "hs": np.greater_equal,
}


def _setp(c: _Cta, ins: Instr, exe) -> None:
    cmp, t = ins.mods[0], _type(ins)
    p, a, b = ins.ops
    x, y = c.get(ins, a, t, exe), c.get(ins, b, t, exe)
    if T.kind(t) == "b":
        x, y = c.raw(ins, a, t, exe), c.raw(ins, b, t, exe)
    with np.errstate(invalid="ignore"):
        if cmp in _CMP:
            r = _CMP[cmp](x, y)
            if cmp == "ne" and T.is_float(t):
                r = r & ~(np.isnan(x) | np.isnan(y))
        elif cmp == "num":
            r = ~(np.isnan(x) | np.isnan(y))
        elif cmp == "nan":
            r = np.isnan(x) | np.isnan(y)
        elif cmp.endswith("u") and cmp[:-1] in _CMP:
            r = _CMP[cmp[:-1]](x, y) | np.isnan(x) | np.isnan(y)
        else:
            c.fail(ins, f"comparison {cmp} is not supported")
    c.put(p.name, r, "pred", exe)


def _selp(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a, b, p = ins.ops
    sel = c.get(ins, p, "pred", exe)
    c.put_raw(d.name, np.where(sel, c.raw(ins, a, t, exe), c.raw(ins, b, t, exe)), exe)


def _cvt(c: _Cta, ins: Instr, exe) -> None:
    mods = ins.mods
    dt, at = mods[-2], mods[-1]
    rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi")), None)
    d = ins.ops[0]
    srcs = ins.ops[1:]
    if dt in ("f16x2", "bf16x2"):
        if rnd != "rn":
            c.fail(ins, "packing cvt with rounding other than .rn is not supported by the simulator")
        hi, lo = (c.get(ins, o, "f32", exe) for o in srcs)
        if "relu" in mods:
            hi, lo = (np.where(np.isnan(v), v, np.maximum(v, 0)) for v in (hi, lo))
        one = "f16" if dt == "f16x2" else "bf16"
        bh, bl = _narrow_bits(hi, one, c.n), _narrow_bits(lo, one, c.n)
        c.put(d.name, (bh << _U64(16)) | bl, "b32", exe)
        return
    v = c.get(ins, srcs[0], at, exe)
    if dt == "tf32":
        u = np.asarray(v, np.float32).view(np.uint32)
        special = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
        nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        canon = (u & np.uint32(0x80000000)) | np.uint32(CANONICAL_NAN["tf32"])
        r = np.where(nan, canon, np.where(special, u, _mma.round_tf32(v).view(np.uint32)))
        c.put(d.name, r.astype(_U64), "b32", exe)
        return
    if T.is_float(dt) and T.is_float(at):
        if T.bits(dt) < T.bits(at) and rnd != "rn":
            c.fail(ins, "narrowing float cvt with rounding other than .rn is not supported")
        r = np.asarray(v, np.float32 if at != "f64" else np.float64)
        if "sat" in mods:
            r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
        if dt in ("f16", "bf16") and at == "f32":
            c.put_raw(d.name, _narrow_bits(r, dt, c.n), exe)
            return
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(at):  # float -> int: round, saturate, NaN -> 0
        fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}.get(rnd)
        if fn is None:
            c.fail(ins, f"float -> int cvt needs rni/rzi/rmi/rpi, got {rnd}")
        lo, hi = T.int_range(dt)
        f = np.nan_to_num(fn(np.asarray(v, np.float64)), nan=0.0)
        r = np.clip(f, lo, hi)
        r = r.astype(np.int64) if T.kind(dt) == "s" or T.bits(dt) < 64 else r.astype(_U64)
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(dt):  # int -> float
        if rnd != "rn":
            c.fail(ins, "int -> float cvt with rounding other than .rn is not supported")
        c.put(d.name, np.asarray(v, np.float64), dt, exe)
        return
    # int -> int: sign/zero extension comes from the source type, truncation from _to_bits
    if "sat" in mods:
        lo, hi = T.int_range(dt)
        v = np.clip(v, lo, hi)
    c.put(d.name, v, dt, exe)
