"""An IEEE 754 softfloat written from the standard with `fractions.Fraction`: the oracle that
`ptx.sim`'s float instructions are held to (tests/ptx/test_sim_oracle.py). It shares no code
with `ptx` (nor numpy's float arithmetic): every operand is decoded to an exact rational, the
operation is done exactly, and the result rounded by comparing it with its two neighbours on
the target's grid.

PTX rules it encodes (PTX ISA, "Floating-Point Instructions" and "cvt"):

- ``.rn`` to nearest, ties to even; ``.rna`` ties away from zero; ``.rz``/``.rm``/``.rp`` toward
  zero / -inf / +inf, overflow to the largest finite value where the mode points away from it;
- ``fma``/``mad`` round ``a * b + c`` once;
- ``.ftz``: subnormal f32/f16 inputs and (rounded) results become a zero of the same sign;
- ``.sat``: the result clamped to [0, 1], NaN to +0;
- an exact zero sum of operands of opposite signs is +0 (-0 under ``.rm``);
- float -> integer saturates, NaN gives 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache

NAN = "nan"


@dataclass(frozen=True)
class Fmt:
    """A binary interchange format: exponent and stored-fraction widths."""

    e: int
    f: int

    @property
    def bias(self) -> int:
        return 2 ** (self.e - 1) - 1

    @property
    def p(self) -> int:
        return self.f + 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return self.bias

    @property
    def nbits(self) -> int:
        return 1 + self.e + self.f

    @property
    def max_finite(self) -> Fraction:
        return (2 - Fraction(1, 2**self.f)) * p2(self.emax)


FMTS = {"f16": Fmt(5, 10), "bf16": Fmt(8, 7), "tf32": Fmt(8, 10), "f32": Fmt(8, 23), "f64": Fmt(11, 52)}
#: tf32 is stored in 32 bits: the f32 layout with the low 13 fraction bits zero
STORAGE = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64}


@dataclass(frozen=True)
class Val:
    """A decoded float: ``kind`` "num" (``x`` exact; zeros keep ``neg``), "inf" or NAN."""

    kind: str
    neg: bool
    x: Fraction = Fraction(0)


@cache
def p2(k: int) -> Fraction:
    """2**k as a Fraction (cached: the oracle asks for few distinct powers)."""
    return Fraction(2) ** k


@lru_cache(maxsize=1 << 16)
def decode(bits: int, t: str) -> Val:
    """The value of ``bits`` in format ``t`` (tf32 read as the f32 it is stored as)."""
    fm = FMTS["f32" if t == "tf32" else t]
    neg = bool(bits >> (fm.nbits - 1) & 1)
    ex = (bits >> fm.f) & (2**fm.e - 1)
    fr = bits & (2**fm.f - 1)
    if ex == 2**fm.e - 1:
        return Val(NAN if fr else "inf", neg)
    if ex == 0:
        mag = Fraction(fr) * p2(fm.emin - fm.f)
    else:
        mag = (1 + Fraction(fr, 2**fm.f)) * p2(ex - fm.bias)
    return Val("num", neg, -mag if neg else mag)


def _floor_log2(a: Fraction) -> int:
    k = a.numerator.bit_length() - a.denominator.bit_length()
    while p2(k) > a:
        k -= 1
    while p2(k + 1) <= a:
        k += 1
    return k


def _encode_mag(neg: bool, m: Fraction, fm: Fmt) -> int:
    """Bits of the representable magnitude ``m`` (or infinity when ``m`` is None)."""
    s = int(neg) << (fm.nbits - 1)
    if m is None:
        return s | ((2**fm.e - 1) << fm.f)
    if m == 0:
        return s
    k = _floor_log2(m)
    if k < fm.emin:
        q = m / p2(fm.emin - fm.f)
        assert q.denominator == 1
        return s | int(q)
    q = m / p2(k - fm.f)
    assert q.denominator == 1 and 2**fm.f <= q < 2**fm.p
    return s | ((k + fm.bias) << fm.f) | (int(q) - 2**fm.f)


def round_to(x: Fraction, t: str, mode: str, neg_zero: bool = False) -> int:
    """Bits of the exact ``x`` rounded to format ``t`` in ``mode`` (rn, rna, rz, rm, rp); a zero
    ``x`` gives -0 when ``neg_zero``."""
    fm = FMTS[t]
    if x == 0:
        return _encode_mag(neg_zero, Fraction(0), fm)
    neg, a = x < 0, abs(x)
    k = max(_floor_log2(a), fm.emin)
    quantum = p2(k - fm.f)
    lo = (a // quantum) * quantum
    hi = lo + quantum
    if lo == a:
        m = lo
    elif mode == "rn":
        d = (a - lo) - (hi - a)
        m = lo if d < 0 else hi if d > 0 else (lo if (lo / quantum) % 2 == 0 else hi)
    elif mode == "rna":
        m = lo if (a - lo) < (hi - a) else hi
    elif mode == "rz":
        m = lo
    elif mode == "rp":
        m = lo if neg else hi
    elif mode == "rm":
        m = hi if neg else lo
    else:
        raise ValueError(mode)
    if m > fm.max_finite:
        to_inf = mode in ("rn", "rna") or (mode == "rp" and not neg) or (mode == "rm" and neg)
        return _encode_mag(neg, None if to_inf else fm.max_finite, fm)
    return _encode_mag(neg, m, fm)


def tf32_bits(x: Fraction, mode: str, neg_zero: bool = False) -> int:
    """cvt.<mode>.tf32.f32 of finite ``x``: rounded to 10 fraction bits, stored as f32 bits."""
    b = round_to(x, "tf32", mode, neg_zero)
    return ((b >> 18) << 31) | (((b >> 10) & 0xFF) << 23) | ((b & 0x3FF) << 13)


# --------------------------------------------------------------------------- operations


def _is_sub(v: Val, t: str) -> bool:
    fm = FMTS[t]
    return v.kind == "num" and v.x != 0 and abs(v.x) < p2(fm.emin)


def flush(v: Val, t: str) -> Val:
    """.ftz on an input: a subnormal becomes a zero of its sign."""
    return Val("num", v.neg, Fraction(0)) if _is_sub(v, t) else v


def flush_bits(bits: int, t: str) -> int:
    """.ftz on a result: a subnormal pattern becomes a zero of its sign."""
    fm = FMTS[t]
    if (bits >> fm.f) & (2**fm.e - 1) == 0:
        return bits & (1 << (fm.nbits - 1))
    return bits


def _zero(neg: bool) -> Val:
    return Val("num", neg, Fraction(0))


def _add(a: Val, b: Val, mode: str) -> Val | tuple[Fraction, bool]:
    """a + b: a special `Val`, or (exact sum, sign of an exact zero)."""
    if NAN in (a.kind, b.kind):
        return Val(NAN, False)
    if a.kind == "inf" and b.kind == "inf":
        return a if a.neg == b.neg else Val(NAN, False)
    if a.kind == "inf" or b.kind == "inf":
        return a if a.kind == "inf" else b
    s = a.x + b.x
    if s == 0:
        same = a.x == 0 and b.x == 0 and a.neg == b.neg
        return s, (a.neg if same else mode == "rm")
    return s, False


def _mul(a: Val, b: Val) -> Val:
    neg = a.neg != b.neg
    if NAN in (a.kind, b.kind):
        return Val(NAN, False)
    if "inf" in (a.kind, b.kind):
        other = b if a.kind == "inf" else a
        return Val(NAN, False) if other.kind == "num" and other.x == 0 else Val("inf", neg)
    return Val("num", neg, a.x * b.x)


def _div(a: Val, b: Val) -> Val:
    neg = a.neg != b.neg
    if NAN in (a.kind, b.kind):
        return Val(NAN, False)
    if a.kind == "inf":
        return Val(NAN, False) if b.kind == "inf" else Val("inf", neg)
    if b.kind == "inf":
        return _zero(neg)
    if b.x == 0:
        return Val(NAN, False) if a.x == 0 else Val("inf", neg)
    return Val("num", neg, a.x / b.x)


def _finish(r, t: str, mode: str) -> int | str:
    """Bits of an operation's outcome (a `Val` or (exact, zero sign)); NAN for a NaN."""
    if isinstance(r, tuple):
        x, zneg = r
        return round_to(x, t, mode, zneg)
    if r.kind == NAN:
        return NAN
    if r.kind == "inf":
        return _encode_mag(r.neg, None, FMTS[t])
    if r.x == 0:
        return _encode_mag(r.neg, Fraction(0), FMTS[t])
    return round_to(r.x, t, mode)


def arith(op: str, t: str, mode: str, vals: list[Val]) -> int | str:
    """Bits (or NAN) of add/sub/mul/div/fma/mad of decoded operands, rounded once."""
    if op == "add":
        return _finish(_add(vals[0], vals[1], mode), t, mode)
    if op == "sub":
        b = vals[1]
        return _finish(_add(vals[0], Val(b.kind, not b.neg, -b.x), mode), t, mode)
    if op == "mul":
        return _finish(_mul(vals[0], vals[1]), t, mode)
    if op == "div":
        return _finish(_div(vals[0], vals[1]), t, mode)
    if op in ("fma", "mad"):
        return _finish(_add(_mul(vals[0], vals[1]), vals[2], mode), t, mode)
    raise ValueError(op)


def less(a: Val, b: Val) -> bool:
    """a < b for non-NaN values."""
    ka = (-1 if a.neg else 1) * (2 if a.kind == "inf" else 0)
    kb = (-1 if b.neg else 1) * (2 if b.kind == "inf" else 0)
    if ka or kb:
        return ka < kb or (ka == kb == 0 and a.x < b.x)
    return a.x < b.x


def equal(a: Val, b: Val) -> bool:
    return not less(a, b) and not less(b, a)


def compare(cmp: str, a: Val, b: Val) -> bool:
    """setp's comparison ``cmp`` (eq, ne, lt, le, gt, ge, their ``u`` forms, num, nan)."""
    unordered = NAN in (a.kind, b.kind)
    if cmp == "num":
        return not unordered
    if cmp == "nan":
        return unordered
    base, u = (cmp[:-1], True) if cmp.endswith("u") and cmp not in ("nu",) else (cmp, False)
    if unordered:
        return u
    lt, gt = less(a, b), less(b, a)
    return {"eq": not lt and not gt, "ne": lt or gt, "lt": lt, "le": not gt, "gt": gt, "ge": not lt}[base]


def to_int(v: Val, rnd: str, bits: int, signed: bool) -> int:
    """cvt.rXi.<int>.<float>: the integer (two's complement bits), saturated, NaN 0."""
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if v.kind == NAN:
        n = 0
    elif v.kind == "inf":
        n = lo if v.neg else hi
    else:
        x = v.x
        fl = x.numerator // x.denominator
        if rnd == "rzi":
            n = fl if x >= 0 else -((-x.numerator) // x.denominator)
        elif rnd == "rmi":
            n = fl
        elif rnd == "rpi":
            n = fl if fl == x else fl + 1
        elif rnd == "rni":
            d = x - fl
            n = fl if d < Fraction(1, 2) else fl + 1 if d > Fraction(1, 2) else fl + (fl % 2)
        else:
            raise ValueError(rnd)
        n = min(max(n, lo), hi)
    return n % (2**bits)
