"""Correctly rounded float arithmetic for :mod:`ptx.sim` where numpy alone rounds differently
from the PTX ISA: fused multiply-adds, 64-bit integer -> float conversions, flush-to-zero and
the directed rounding modes.

Vectorised paths (numpy):

- ``fma.rn`` in f16/f32: the product of two f16/f32 values is exact in float64; the float64 sum
  ``s`` rounds once and TwoSum gives its exact error ``e``. Rounding ``s`` to the target again
  is then correct except where ``s`` lies exactly on a tie of the target and ``e != 0`` (the
  exact value is off the tie on ``e``'s side): those lanes take the neighbour on ``e``'s side.
- integer -> f16/f32 (``cvt.rn``): integers of 53 bits or fewer are exact in float64; wider ones
  are shifted right to 53 bits with the shifted-out bits OR-ed into the lowest kept bit (a sticky
  bit, far below the target's rounding position), then converted exactly and rounded once.

Exact path (Python integers, per lane): :func:`round_scaled` rounds ``n * 2**e`` (plus a sticky
fraction) to a format in any PTX rounding mode. ``fma.f64`` and every arithmetic form with
``.rz/.rm/.rp`` use it for their finite lanes (no kernel of this repository emits them on a
hot path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "FORMATS",
    "FloatFormat",
    "exact_arith",
    "flush",
    "fma_rn_small",
    "int_to_bits",
    "int_to_float",
    "narrow_bits",
    "round_scaled",
]


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE binary format: ``exp_bits`` exponent bits, ``frac_bits`` stored fraction bits."""

    name: str
    exp_bits: int
    frac_bits: int

    def __post_init__(self) -> None:
        if not (2 <= self.exp_bits <= 15 and 1 <= self.frac_bits <= 112):
            raise ValueError(f"format {self.name}: exp_bits {self.exp_bits}, frac_bits {self.frac_bits}")

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def prec(self) -> int:
        """Significand bits, the hidden one included."""
        return self.frac_bits + 1

    @property
    def emax(self) -> int:
        return self.bias

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.frac_bits


FORMATS = {
    "f16": FloatFormat("f16", 5, 10),
    "bf16": FloatFormat("bf16", 8, 7),
    "f32": FloatFormat("f32", 8, 23),
    "f64": FloatFormat("f64", 11, 52),
}
_NP = {"f16": (np.float16, np.uint16), "f32": (np.float32, np.uint32), "f64": (np.float64, np.uint64)}


# --------------------------------------------------------------------------- flush to zero


def flush(x: np.ndarray) -> np.ndarray:
    """``x`` (float16/float32 array) with subnormals replaced by a zero of the same sign (.ftz)."""
    x = np.asarray(x)
    ut = np.uint16 if x.dtype == np.float16 else np.uint32
    fmt = FORMATS["f16" if x.dtype == np.float16 else "f32"]
    u = x.view(ut)
    exp_mask = ut(((1 << fmt.exp_bits) - 1) << fmt.frac_bits)
    sub = (u & exp_mask) == 0
    if not np.count_nonzero(sub):
        return x
    return np.where(sub, u & ut(1 << (fmt.width - 1)), u).astype(ut).view(x.dtype)


# --------------------------------------------------------------------------- vectorised fma


def _round_sum(s: np.ndarray, e: np.ndarray, dt) -> np.ndarray:
    """The target-``dt`` rounding to nearest even of ``s + e``, where ``s`` (float64) is the
    float64 rounding of the exact value and ``e`` its exact error (float64)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = s.astype(dt)
        rb = r.astype(np.float64)
        off = (rb != s) & (e != 0) & np.isfinite(s) & np.isfinite(e)
        if not np.count_nonzero(off):
            return r
        fmt = FORMATS["f16" if dt == np.float16 else "f32"]
        # a finite s that rounded to infinity sits at or past the tie of the largest finite value
        # and 2^(emax+1), the next value of an unbounded exponent range
        rv = np.where(np.isinf(rb), np.copysign(2.0 ** (fmt.emax + 1), s), rb)
        nb = np.nextafter(r, np.where(s > rv, dt(np.inf), dt(-np.inf)).astype(dt))  # s's other neighbour
        tie = off & ((rv + nb.astype(np.float64)) * 0.5 == s)
        away = tie & (np.sign(e) != np.sign(rv - s))  # the exact value lies on nb's side of the tie
        return np.where(away, nb, r)


def fma_rn_small(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once to nearest even, for float16 or float32 arrays (one dtype)."""
    dt = a.dtype.type
    a64, b64, c64 = (np.asarray(v, np.float64) for v in (a, b, c))
    with np.errstate(all="ignore"):
        p = a64 * b64  # exact: 2 x 24 significant bits, exponents far inside float64's range
        s = p + c64
        bb = s - p  # TwoSum (Knuth): e = exact(p + c) - s
        e = (p - (s - bb)) + (c64 - bb)
    return _round_sum(s, e, dt)


# --------------------------------------------------------------------------- integers -> float


def int_to_float(v: np.ndarray, dt) -> np.ndarray:
    """Integers ``v`` (int64 or uint64 array) rounded once to nearest even in ``dt`` (float16,
    float32 or float64)."""
    v = np.asarray(v)
    if dt == np.float64:  # one rounding: numpy's int64/uint64 -> float64 conversion is the C one
        return v.astype(np.float64)
    neg = v < 0 if v.dtype.kind == "i" else np.zeros(v.shape, bool)
    m = np.where(neg, (~v.view(np.uint64)) + np.uint64(1), v.view(np.uint64)) if v.dtype.kind == "i" else v
    m = m.astype(np.uint64)
    big = m >= np.uint64(1 << 53)
    if np.count_nonzero(big):
        sticky = (m & np.uint64((1 << 11) - 1)) != 0
        m = np.where(big, (m >> np.uint64(11)) | sticky.astype(np.uint64), m)
        f = m.astype(np.float64) * np.where(big, 2.0**11, 1.0)  # exact: at most 53 bits
    else:
        f = m.astype(np.float64)
    with np.errstate(over="ignore"):
        return np.where(neg, -f, f).astype(dt)


# --------------------------------------------------------------------------- exact per lane


def round_scaled(sign: int, n: int, e: int, fmt: FloatFormat, mode: str, sticky: bool = False) -> int:
    """Bits of ``(-1)**sign * (n + t) * 2**e`` rounded to ``fmt`` in ``mode`` ("rn", "rz", "rm",
    "rp", "rna"), where ``n >= 0`` and ``0 < t < 1`` when ``sticky`` (else ``t = 0``; with
    ``sticky``, ``n`` holds more bits than the format keeps). The caller gives an exact zero its
    sign."""
    p = fmt.prec
    if n == 0 and not sticky:
        return sign << (fmt.width - 1)
    lead = e + n.bit_length() - 1 if n else e - 1  # exponent of the leading bit
    q = max(lead - (p - 1), fmt.emin - (p - 1))  # the quantum's exponent
    shift = q - e
    if shift > 0:
        kept, rem = n >> shift, n & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        above, at, inexact = rem > half or (rem == half and sticky), rem == half and not sticky, rem or sticky
    elif sticky:  # the fraction t would reach above the quantum: the caller keeps more bits
        raise ValueError("round_scaled: a sticky fraction needs n to hold more bits than the format keeps")
    else:
        kept, above, at, inexact = n << -shift, False, False, False
    inexact = bool(inexact)
    if mode == "rn":
        up = above or (at and kept & 1)
    elif mode == "rna":
        up = above or at
    elif mode == "rz":
        up = False
    elif mode == "rp":
        up = inexact and not sign
    elif mode == "rm":
        up = inexact and bool(sign)
    else:
        raise ValueError(f"rounding mode {mode!r}: one of rn, rna, rz, rm, rp")
    kept += int(bool(up))
    if kept == 1 << p:
        kept, q = kept >> 1, q + 1
    top = (sign << (fmt.width - 1)) | (((1 << fmt.exp_bits) - 1) << fmt.frac_bits)  # infinity
    if kept >= 1 << (p - 1) and q + p - 1 > fmt.emax:  # overflow
        to_inf = mode in ("rn", "rna") or (mode == "rp" and not sign) or (mode == "rm" and sign)
        return top if to_inf else top - 1
    if kept < 1 << (p - 1):  # subnormal (or zero)
        return (sign << (fmt.width - 1)) | kept
    biased = q + p - 1 + fmt.bias
    return (sign << (fmt.width - 1)) | (biased << fmt.frac_bits) | (kept - (1 << (p - 1)))


def _decode(u: int, fmt: FloatFormat) -> tuple[int, int, int]:
    """(sign, n, e) of a finite ``u``: the value is ``(-1)**sign * n * 2**e``."""
    sign = u >> (fmt.width - 1)
    biased = (u >> fmt.frac_bits) & ((1 << fmt.exp_bits) - 1)
    frac = u & ((1 << fmt.frac_bits) - 1)
    if biased == 0:
        return sign, frac, fmt.emin - fmt.frac_bits
    return sign, frac | (1 << fmt.frac_bits), biased - fmt.bias - fmt.frac_bits


def _signed_sum(terms: list[tuple[int, int, int]], mode: str, fmt: FloatFormat) -> int:
    """Bits of the exactly rounded sum of ``(sign, n, e)`` terms (IEEE signs of exact zeros)."""
    lo = min(e for _, _, e in terms)
    total = sum((-1) ** s * (n << (e - lo)) for s, n, e in terms)
    if total == 0:
        signs = {s for s, _, _ in terms}
        sign = signs.pop() if len(signs) == 1 else int(mode == "rm")
        return sign << (fmt.width - 1)
    return round_scaled(int(total < 0), abs(total), lo, fmt, mode)


def _exact_lane(op: str, us: tuple[int, ...], fmt: FloatFormat, mode: str) -> int:
    """Bits of one finite lane of ``op`` (add, sub, mul, div, fma) over operand bits ``us``."""
    xs = [_decode(u, fmt) for u in us]
    if op == "add":
        return _signed_sum(xs, mode, fmt)
    if op == "sub":
        s, n, e = xs[1]
        return _signed_sum([xs[0], (1 - s, n, e)], mode, fmt)
    if op in ("mul", "fma", "mad"):
        (sa, na, ea), (sb, nb, eb) = xs[0], xs[1]
        prod = (sa ^ sb, na * nb, ea + eb)
        if op == "mul":
            return round_scaled(prod[0], prod[1], prod[2], fmt, mode) if prod[1] else prod[0] << (fmt.width - 1)
        return _signed_sum([prod, xs[2]], mode, fmt)
    if op == "div":  # finite / nonzero finite
        (sa, na, ea), (sb, nb, eb) = xs
        sign = sa ^ sb
        if na == 0:
            return sign << (fmt.width - 1)
        extra = fmt.prec + 3 + nb.bit_length() - na.bit_length()
        extra = max(extra, 0)
        quo, rem = divmod(na << extra, nb)
        return round_scaled(sign, quo, ea - eb - extra, fmt, mode, sticky=rem != 0)
    raise ValueError(f"exact arithmetic for {op!r} is not implemented")


def exact_arith(op: str, t: str, mode: str, nearest: np.ndarray, *ops: np.ndarray) -> np.ndarray:
    """``op`` (add, sub, mul, div, fma/mad) in format ``t`` (f16, f32, f64) rounded in ``mode``:
    ``nearest`` is numpy's result (any rounding; it decides lanes with an infinite or NaN operand
    and divisions by zero), every other lane is recomputed exactly with Python integers."""
    fdt, udt = _NP[t]
    fmt = FORMATS[t]
    vals = [np.asarray(v, fdt) for v in ops]
    if op in ("fma", "mad"):  # finite a * b plus an infinite c is c, even where numpy's a * b overflowed
        fin = np.isfinite(vals[0]) & np.isfinite(vals[1])
        nearest = np.where(fin & np.isinf(vals[2]), vals[2], nearest)
    lanes = np.ones(np.shape(nearest), bool)
    for v in vals:
        lanes &= np.isfinite(v)
    if op == "div":
        lanes &= vals[1] != 0
    idx = np.flatnonzero(lanes)
    if not idx.size:
        return nearest
    out = np.array(nearest, fdt, copy=True).view(udt)
    bits = [v.view(udt) for v in vals]
    out[idx] = [_exact_lane(op, tuple(int(b[i]) for b in bits), fmt, mode) for i in idx.tolist()]
    return out.view(fdt)


def int_to_bits(v: np.ndarray, t: str, mode: str) -> np.ndarray:
    """Bit patterns (uint64) of integers ``v`` (int64 or uint64) rounded to ``t`` (f16, bf16,
    f32, f64) in ``mode``, exactly, per lane."""
    fmt = FORMATS[t]
    return np.array(
        [round_scaled(int(x < 0), abs(x), 0, fmt, mode) for x in np.asarray(v).tolist()], np.uint64
    ).reshape(np.shape(v))


def narrow_bits(x: np.ndarray, t: str, mode: str) -> np.ndarray:
    """Bit patterns (uint64) of finite float values ``x`` (float32/float64) rounded to ``t`` in
    ``mode``, exactly, per lane; infinities keep their sign, NaNs give the source's bits shifted
    into ``t``'s quiet NaN (callers replace them by the form's NaN)."""
    x = np.asarray(x)
    src = "f64" if x.dtype == np.float64 else "f32"
    sfmt, fmt = FORMATS[src], FORMATS[t]
    u = x.view(_NP[src][1]).tolist()
    out = []
    inf = ((1 << fmt.exp_bits) - 1) << fmt.frac_bits
    for ui, xi in zip(u, x.tolist(), strict=True):
        sign = ui >> (sfmt.width - 1)
        if xi != xi:
            out.append((sign << (fmt.width - 1)) | inf | (1 << (fmt.frac_bits - 1)))
        elif xi in (float("inf"), float("-inf")):
            out.append((sign << (fmt.width - 1)) | inf)
        else:
            s, n, e = _decode(ui, sfmt)
            out.append(round_scaled(s, n, e, fmt, mode))
    return np.array(out, np.uint64).reshape(x.shape)
