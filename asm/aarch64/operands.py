"""Operand checks shared by the AArch64 encoding classes.

Each check takes the mnemonic and the operand's name so that an
`EncodingError` says which operand is wrong and what would be legal.
"""

from __future__ import annotations

from asm.aarch64.registers import (
    PQual,
    PReg,
    PVec,
    ScalarReg,
    VecReg,
    VElem,
    WReg,
    XReg,
    ZElem,
    ZVec,
)
from asm.errors import EncodingError, check_range

SIZE_BITS = {"b": 0, "h": 1, "s": 2, "d": 3}


def fail(mnemonic: str, operand: str, expected: str, got: object) -> EncodingError:
    """Build the standard error: ``<mn>: <operand> must be <expected>, got <got>``."""
    return EncodingError(f"{mnemonic}: {operand} must be {expected}, got {got}")


def imm(mnemonic: str, operand: str, value: int, lo: int, hi: int, step: int = 1) -> int:
    """Range-checked immediate."""
    return check_range(mnemonic, operand, value, lo, hi, step)


def gpr(mnemonic: str, operand: str, reg: object, *, sp: bool = False, zr: bool = True) -> tuple[int, int]:
    """A general purpose register; returns ``(number, sf)`` with sf=1 for X.

    ``sp``: register 31 must be SP/WSP (and SP is legal); otherwise register 31
    must be XZR/WZR (legal when ``zr``).
    """
    if not isinstance(reg, (XReg, WReg)):
        raise fail(mnemonic, operand, "an X or W register", reg)
    sf = 1 if isinstance(reg, XReg) else 0
    if reg.idx == 31:
        if reg.sp and not sp:
            raise fail(mnemonic, operand, "a register other than sp/wsp", reg)
        if not reg.sp and (sp or not zr):
            raise fail(mnemonic, operand, "a register other than xzr/wzr", reg)
    return reg.idx, sf


def xreg(mnemonic: str, operand: str, reg: object, *, sp: bool = False, zr: bool = True) -> int:
    """A 64-bit general purpose register; returns its number."""
    if not isinstance(reg, XReg):
        raise fail(mnemonic, operand, "an X register", reg)
    return gpr(mnemonic, operand, reg, sp=sp, zr=zr)[0]


def same_sf(mnemonic: str, **regs: object) -> int:
    """All named registers are X or all are W; returns sf."""
    for name, r in regs.items():
        if not isinstance(r, (XReg, WReg)):
            raise fail(mnemonic, name, "an X or W register", repr(r) if isinstance(r, str) else r)
    kinds = {name: isinstance(r, XReg) for name, r in regs.items()}
    if len(set(kinds.values())) != 1:
        desc = ", ".join(f"{n}={r}" for n, r in regs.items())
        raise EncodingError(f"{mnemonic}: operands must all be X or all be W registers, got {desc}")
    return 1 if next(iter(kinds.values())) else 0


def vec(mnemonic: str, operand: str, reg: object, arrangements: tuple[str, ...]) -> VecReg:
    """A vector register with one of the given arrangements (e.g. ``("4s", "2d")``)."""
    if not isinstance(reg, VecReg) or reg.arrangement not in arrangements:
        raise fail(mnemonic, operand, "a vector with arrangement " + "/".join(arrangements), reg)
    return reg


def same_arrangement(mnemonic: str, **regs: VecReg) -> None:
    """All named vector operands share one arrangement."""
    arr = {r.arrangement for r in regs.values()}
    if len(arr) != 1:
        desc = ", ".join(f"{n}={r}" for n, r in regs.items())
        raise EncodingError(f"{mnemonic}: arrangements must match, got {desc}")


def velem(mnemonic: str, operand: str, reg: object, sizes: tuple[str, ...]) -> VElem:
    """An indexed vector element (``v2.s[3]``) of one of the given sizes."""
    if not isinstance(reg, VElem) or reg.esize not in sizes:
        raise fail(mnemonic, operand, "an indexed element of size " + "/".join(sizes), reg)
    return reg


def scalar(mnemonic: str, operand: str, reg: object, sizes: tuple[str, ...]) -> ScalarReg:
    """A scalar SIMD&FP register (``s0``, ``d1``, ``q2``) of one of the given sizes."""
    if not isinstance(reg, ScalarReg) or reg.esize not in sizes:
        raise fail(mnemonic, operand, "a scalar register " + "/".join(f"{s}0..{s}31" for s in sizes), reg)
    return reg


def zvec(mnemonic: str, operand: str, reg: object, sizes: tuple[str, ...]) -> ZVec:
    """An SVE vector with one of the given element sizes."""
    if not isinstance(reg, ZVec) or reg.esize not in sizes:
        raise fail(mnemonic, operand, "an SVE vector z0..z31 with element size ." + "/.".join(sizes), reg)
    return reg


def zelem(mnemonic: str, operand: str, reg: object, size: str, max_reg: int, max_index: int) -> ZElem:
    """An indexed SVE element ``z<n>.<size>[i]`` with n <= max_reg and i <= max_index."""
    if not isinstance(reg, ZElem) or reg.esize != size:
        raise fail(mnemonic, operand, f"an indexed element z0..z{max_reg}.{size}[0..{max_index}]", reg)
    imm(mnemonic, f"{operand} register", reg.idx, 0, max_reg)
    imm(mnemonic, f"{operand} index", reg.index, 0, max_index)
    return reg


def same_esize(mnemonic: str, **regs: object) -> str:
    """All named sized operands (Z or P views) share one element size."""
    sizes = {getattr(r, "esize", None) for r in regs.values()}
    if len(sizes) != 1:
        desc = ", ".join(f"{n}={r}" for n, r in regs.items())
        raise EncodingError(f"{mnemonic}: element sizes must match, got {desc}")
    return sizes.pop()


def pgov(mnemonic: str, operand: str, reg: object, qual: str | None, max_reg: int = 7) -> int:
    """A governing predicate ``p<n>/z`` or ``p<n>/m`` (``qual`` None: bare ``p<n>``)."""
    if qual is None:
        ok = isinstance(reg, PReg)
        want = f"a predicate p0..p{max_reg}"
    else:
        ok = isinstance(reg, PQual) and reg.qual == qual
        want = f"a predicate p0..p{max_reg}/{qual}"
    if not ok or reg.idx > max_reg:
        raise fail(mnemonic, operand, want, reg)
    return reg.idx


def pvec(mnemonic: str, operand: str, reg: object, sizes: tuple[str, ...] = ("b", "h", "s", "d")) -> PVec:
    """A predicate with element size (``p0.s``)."""
    if not isinstance(reg, PVec) or reg.esize not in sizes:
        raise fail(mnemonic, operand, "a predicate p0..p15 with element size ." + "/.".join(sizes), reg)
    return reg
