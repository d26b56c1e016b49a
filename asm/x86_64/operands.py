"""Operand checks shared by the x86-64 encoders.

Each check takes the mnemonic and the operand's name so that an
`EncodingError` says which operand is wrong and what would be legal.
"""

from __future__ import annotations

from asm.errors import EncodingError, check_range
from asm.x86_64.memory import SIZE_NAMES, Mem
from asm.x86_64.registers import Gpr, KReg, Masked, Vec

VNAMES = {128: "xmm", 256: "ymm", 512: "zmm"}


def fail(mnemonic: str, operand: str, expected: str, got: object) -> EncodingError:
    """Build the standard error: ``<mn>: <operand> must be <expected>, got <got>``."""
    return EncodingError(f"{mnemonic}: {operand} must be {expected}, got {got}")


def imm(mnemonic: str, operand: str, value: object, lo: int, hi: int) -> int:
    """Range-checked immediate."""
    return check_range(mnemonic, operand, value, lo, hi)


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def gpr(mnemonic: str, operand: str, reg: object, widths: tuple[int, ...] = (64, 32)) -> Gpr:
    """A general purpose register of one of ``widths`` bits."""
    if not isinstance(reg, Gpr) or reg.bits not in widths:
        want = " or ".join({64: "rax..r15", 32: "eax..r15d"}[w] for w in widths)
        raise fail(mnemonic, operand, f"a register {want}", reg)
    return reg


def same_width(mnemonic: str, **regs: Gpr) -> int:
    """All named GPR operands have one width; returns it."""
    widths = {r.bits for r in regs.values()}
    if len(widths) != 1:
        desc = ", ".join(f"{n}={r}" for n, r in regs.items())
        raise EncodingError(f"{mnemonic}: operands must all be 64-bit or all 32-bit registers, got {desc}")
    return widths.pop()


def memop(mnemonic: str, operand: str, m: object, size: int | None, *, sizes: tuple[int, ...] | None = None) -> Mem:
    """A memory operand (no broadcast) whose declared size, if any, is ``size`` (or one of ``sizes``).

    Returns the operand with its size filled in. ``size`` None with ``sizes``
    None means the operand needs an explicit size from the caller.
    """
    if not isinstance(m, Mem):
        raise fail(mnemonic, operand, "a memory operand", m)
    if m.bcst:
        raise fail(mnemonic, operand, "a memory operand without broadcast", m)
    allowed = sizes if sizes is not None else ((size,) if size is not None else None)
    if m.size is None:
        if size is None:
            names = "/".join(SIZE_NAMES[s] for s in (allowed or (4, 8)))
            raise fail(mnemonic, operand, f"a sized memory operand ({names} ptr)", m)
        return m.sized(size)
    if allowed is not None and m.size not in allowed:
        names = "/".join(SIZE_NAMES[s] for s in allowed)
        raise fail(mnemonic, operand, f"a {names} ptr memory operand", m)
    return m


def vec(mnemonic: str, operand: str, reg: object, widths: tuple[int, ...], max_idx: int = 31) -> Vec:
    """A vector register of one of ``widths`` bits with number <= ``max_idx``."""
    if not isinstance(reg, Vec) or reg.bits not in widths or reg.idx > max_idx:
        want = "/".join(f"{VNAMES[w]}0..{VNAMES[w]}{max_idx}" for w in widths)
        raise fail(mnemonic, operand, want, reg)
    return reg


def kreg(mnemonic: str, operand: str, reg: object) -> KReg:
    if not isinstance(reg, KReg):
        raise fail(mnemonic, operand, "an opmask register k0..k7", reg)
    return reg


def unmask(mnemonic: str, operand: str, x: object, *, zero_ok: bool = True) -> tuple[object, int, int]:
    """Split ``op {k} {z}`` into ``(op, k number or 0, z)``; k0 cannot be a write mask."""
    if not isinstance(x, Masked):
        return x, 0, 0
    k = kreg(mnemonic, f"{operand} mask", x.k)
    if k.idx == 0:
        raise fail(mnemonic, f"{operand} mask", "k1..k7 (k0 means no mask)", k)
    if x.zero and not zero_ok:
        raise fail(mnemonic, f"{operand} mask", "merging {k1}..{k7} (no {z} here)", x)
    return x.op, k.idx, int(x.zero)
