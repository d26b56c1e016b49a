"""Register values: typed <-> raw-bit conversion, immediates, thread selections."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import mma as _mma
from . import types as T
from .sim_memory import _MASK, _U64
from .sim_parse import Instr, Operand

if TYPE_CHECKING:
    from .sim import _Cta


# --------------------------------------------------------------------------- value conversion


def _width(t: str) -> int:
    return 1 if t == "pred" else T.bits(t)


def _from_bits_fn(t: str):
    """The conversion of raw register bits (uint64) to typed values of type ``t``."""
    k, w = T.kind(t), _width(t)
    if t == "pred":
        return lambda raw: (raw & _U64(1)).astype(bool)
    if t == "f32" or t == "tf32":  # uint64 -> uint32 keeps the low 32 bits
        return lambda raw: raw.astype(np.uint32).view(np.float32)
    if t == "f64":
        return lambda raw: raw.view(np.float64)
    if t == "f16":
        return lambda raw: raw.astype(np.uint16).view(np.float16)
    if t == "bf16":
        return lambda raw: _mma.bf16_bits_to_f32(raw.astype(np.uint16))
    if w == 64:
        return (lambda raw: raw.view(np.int64)) if k == "s" else (lambda raw: raw)
    narrow = np.dtype(f"uint{w}")
    if k == "s":  # sign-extend: the low w bits as a signed w-bit integer
        signed = np.dtype(f"int{w}")
        return lambda raw: raw.astype(narrow).view(signed).astype(np.int64)
    return lambda raw: raw.astype(narrow).astype(np.int64)


def _to_bits_fn(t: str):
    """The conversion of typed values (an array) of type ``t`` to raw bits (uint64)."""
    w = _width(t)
    if t == "pred":
        return lambda v: v.astype(_U64)
    if t in ("f32", "tf32"):
        return lambda v: np.asarray(v, np.float32).view(np.uint32).astype(_U64)
    if t == "f64":
        return lambda v: np.asarray(v, np.float64).view(_U64)
    if t == "f16":

        def f16(v):
            with np.errstate(over="ignore"):  # out of range rounds to inf, as cvt.rn.f16.f32 does
                return np.asarray(v, np.float16).view(np.uint16).astype(_U64)

        return f16
    if t == "bf16":
        return lambda v: _mma.f32_to_bf16_bits(v).astype(_U64)
    mask = _U64(_MASK[w])
    if w == 64:  # no bits to clear
        return lambda v: v if v.dtype == _U64 else v.astype(np.int64).view(_U64)
    return lambda v: (v if v.dtype == _U64 else v.astype(np.int64).view(_U64)) & mask


_FROM_BITS = {t: _from_bits_fn(t) for t in T.TYPES if t != "b128"}
_TO_BITS = {t: _to_bits_fn(t) for t in T.TYPES if t != "b128"}


def _to_bits(v, t: str, n: int) -> np.ndarray:
    """Raw bits (uint64, length n) of typed values ``v``."""
    out = _TO_BITS[t](np.asarray(v))
    return out if out.shape == (n,) else np.broadcast_to(out, (n,))


def _misaligned(a: np.ndarray, width: int) -> np.ndarray:
    """Nonzero where address ``a`` is not a multiple of ``width``."""
    return a & (width - 1) if width & (width - 1) == 0 else a % width


def _sel(c: _Cta, a: np.ndarray, exe: np.ndarray) -> np.ndarray:
    """a[exe] (``a`` itself when every thread executes: do not change it in place)."""
    return a if exe is c.ones else a[exe]


def _tids(c: _Cta, exe: np.ndarray) -> np.ndarray:
    """np.flatnonzero(exe)."""
    return c.tids if exe is c.ones else np.flatnonzero(exe)


def _imm_bits(o: Operand, t: str, n: int) -> np.ndarray:
    """Raw bits (uint64, length n, read-only) of an immediate operand read as type ``t``."""
    if o.float_bits == 32 and t == "f64":
        v = np.float64(np.uint32(o.value).view(np.float32))
        out = np.full(n, np.float64(v).view(_U64), _U64)
    elif o.float_bits is not None:
        out = np.full(n, o.value, _U64)
    elif T.is_float(t) and t != "tf32":
        out = _to_bits(np.full(n, float(o.value)), t, n).copy()
    else:
        out = np.full(n, o.value & _MASK[64], _U64)
    out.flags.writeable = False
    return out


def _type(ins: Instr) -> str:
    return ins.mods[-1]
