"""Simulated arithmetic, logic, shifts, compares, selects and conversions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import mma as _mma
from . import sim_float as _sf
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


#: NaN results of arithmetic that the simulator canonicalises (f64 keeps numpy's NaN: not recorded)
_ARITH_NAN = {"f32": _NAN_F32, "f16": np.uint16(CANONICAL_NAN["f16"]).view(np.float16)}
_DIRECTED = ("rz", "rm", "rp")


def _float_arith(c: _Cta, ins: Instr, op: str, t: str, exe) -> None:
    """add/sub/mul/div/min/max/fma/mad in f16/f32/f64, correctly rounded in the instruction's
    rounding mode (one rounding for fma/mad), .ftz flushing subnormal inputs and results of f32
    and f16 to a zero of the same sign, .sat clamping to [0, 1] (NaN to 0)."""
    mods = ins.mods
    rnd = next((m for m in mods if m in ("rn", *_DIRECTED)), "rn")
    if t in ("f16x2", "bf16x2", "bf16"):
        c.fail(ins, f"{op}.{t} is not supported by the simulator")
    ftz = "ftz" in mods and t != "f64"
    srcs = ins.ops[1:4] if op in ("fma", "mad") else ins.ops[1:3]
    vals = [c.get(ins, o, t, exe) for o in srcs]
    if ftz:
        vals = [_sf.flush(v) for v in vals]
    a, b = vals[0], vals[1]
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
            if not any(m in ("rn", *_DIRECTED) for m in mods):
                c.fail(ins, "div.approx/div.full are not supported by the simulator (div.rn/rz/rm/rp are)")
            r = a / b
        elif op in ("fma", "mad"):
            if t == "f64":
                r = _sf.exact_arith("fma", t, "rn", a * b + vals[2], *vals)
            else:
                r = _sf.fma_rn_small(a, b, vals[2])
        else:
            c.fail(ins, f"{op}.{t} is not supported")
    if rnd != "rn":
        if op in ("min", "max"):
            c.fail(ins, f"{op} takes no rounding modifier")
        r = _sf.exact_arith(op, t, rnd, r, *vals)
    if ftz:
        r = _sf.flush(r)
    if t in _ARITH_NAN and op not in ("min", "max"):
        r = np.where(np.isnan(r), _ARITH_NAN[t], r)
    if "sat" in mods:
        r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
    c.put(ins.ops[0].name, r, t, exe)


_WRAPPING = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "mad": np.multiply}


def _arith(c: _Cta, ins: Instr, exe) -> None:
    op, t = ins.op, _type(ins)
    mods = ins.mods
    d = ins.ops[0]
    if T.is_float(t):
        _float_arith(c, ins, op, t, exe)
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
    elif "ftz" in ins.mods and t in ("f32", "f16"):
        x, y = _sf.flush(x), _sf.flush(y)
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
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and out-of-range casts: handled below
        _cvt_values(c, ins, exe)


def _cvt_values(c: _Cta, ins: Instr, exe) -> None:
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
    ftz = "ftz" in mods
    if ftz and at == "f32":
        v = _sf.flush(np.asarray(v, np.float32))
    if T.is_float(dt) and T.is_float(at):
        r = np.asarray(v, np.float32 if at != "f64" else np.float64)
        narrowing = T.bits(dt) < T.bits(at) or {dt, at} == {"f16", "bf16"}  # f16 <-> bf16: range or precision
        if narrowing and rnd not in ("rn", *_DIRECTED):
            c.fail(ins, f"narrowing float cvt needs .rn/.rz/.rm/.rp, got {rnd}")
        if "sat" in mods:
            r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
        if narrowing and (rnd != "rn" or (dt == "bf16" and at == "f64")):  # exactly, per lane
            bits = _sf.narrow_bits(r, dt, rnd)
            if dt in ("f16", "bf16"):
                bits = np.where(np.isnan(r), _U64(CANONICAL_NAN[dt]), bits)
            if ftz and dt == "f32":
                bits = _to_bits(_sf.flush(bits.astype(np.uint32).view(np.float32)), "f32", c.n)
            c.put_raw(d.name, np.broadcast_to(bits, (c.n,)), exe)
            return
        if dt in ("f16", "bf16"):  # f32 -> bf16, f32/f64 -> f16: one rounding; the canonical NaN
            c.put_raw(d.name, _narrow_bits(r, dt, c.n), exe)
            return
        if ftz and dt == "f32":
            r = _sf.flush(np.asarray(r, np.float32))
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(at):  # float -> int: round, saturate, NaN -> 0
        fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}.get(rnd)
        if fn is None:
            c.fail(ins, f"float -> int cvt needs rni/rzi/rmi/rpi, got {rnd}")
        lo, hi = T.int_range(dt)
        f = np.nan_to_num(fn(np.asarray(v, np.float64)), nan=0.0)
        top = f >= float(hi)  # float(hi) of a 64-bit type is 2^63 or 2^64: no integer of numpy's
        r = np.clip(np.where(top, 0.0, f), lo, hi)
        idt = np.int64 if T.kind(dt) == "s" or T.bits(dt) < 64 else _U64
        r = np.where(top, idt(hi), r.astype(idt))
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(dt):  # int -> float: one rounding
        if rnd not in ("rn", *_DIRECTED):
            c.fail(ins, f"int -> float cvt needs .rn/.rz/.rm/.rp, got {rnd}")
        if rnd == "rn" and dt in ("f16", "f32", "f64"):
            r = _sf.int_to_float(v, {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dt])
            c.put(d.name, np.asarray(r), dt, exe)
        else:
            c.put_raw(d.name, np.broadcast_to(_sf.int_to_bits(v, dt, rnd), (c.n,)), exe)
        return
    # int -> int: sign/zero extension comes from the source type, truncation from _to_bits
    if "sat" in mods:
        lo, hi = T.int_range(dt)
        v = np.clip(v, lo, hi)
    c.put(d.name, v, dt, exe)
