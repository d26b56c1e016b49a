"""AArch64 memory operands.

``mem(x0)`` is ``[x0]``, ``mem(x0, 16)`` is ``[x0, #16]`` (byte offset),
``mem(x0, x1, "lsl", 3)`` is ``[x0, x1, lsl #3]``, ``mem(x0, w1, "sxtw")`` is
``[x0, w1, sxtw]``, ``mem(x0, vl=-2)`` is ``[x0, #-2, mul vl]`` (SVE),
``mem(x0, z1.s, "sxtw")`` is ``[x0, z1.s, sxtw]`` (SVE gather/scatter vector offsets),
``pre(x0, 16)`` is ``[x0, #16]!``, ``post(x0, 16)`` is ``[x0], #16`` and
``post(x0, x2)`` is ``[x0], x2``.
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.aarch64.registers import WReg, XReg, ZVec


@dataclass(frozen=True)
class Mem:
    """A memory operand. ``mode`` is "offset", "pre" or "post".

    ``offset`` is a byte offset (int), a register index (offset mode) or a
    post-increment register (post mode). ``extend``/``amount`` qualify a
    register offset; ``mul_vl`` marks an SVE vector-length-scaled immediate
    (then ``offset`` counts vectors, not bytes).
    """

    base: XReg
    offset: int | XReg | WReg | ZVec = 0
    mode: str = "offset"
    extend: str | None = None
    amount: int | None = None
    mul_vl: bool = False

    @property
    def reg_offset(self) -> bool:
        return isinstance(self.offset, (XReg, WReg))

    @property
    def vec_offset(self) -> bool:
        """The offset is an SVE vector (gather/scatter: one offset per lane)."""
        return isinstance(self.offset, ZVec)

    def __str__(self) -> str:
        b = self.base.name
        if self.mode == "post":
            off = self.offset.name if self.reg_offset else f"#{self.offset}"
            return f"[{b}], {off}"
        if self.reg_offset or self.vec_offset:
            ext = ""
            if self.extend is not None and not (self.extend == "lsl" and self.amount is None):
                ext = f", {self.extend}" + (f" #{self.amount}" if self.amount is not None else "")
            off = str(self.offset) if self.vec_offset else self.offset.name
            return f"[{b}, {off}{ext}]"
        if self.mul_vl:
            inner = f"[{b}, #{self.offset}, mul vl]" if self.offset else f"[{b}]"
        else:
            inner = f"[{b}, #{self.offset}]" if self.offset or self.mode == "pre" else f"[{b}]"
        return inner + ("!" if self.mode == "pre" else "")


def mem(
    base: XReg,
    offset: int | XReg | WReg | ZVec = 0,
    extend: str | None = None,
    amount: int | None = None,
    *,
    vl: int | None = None,
) -> Mem:
    """Base plus byte offset, base plus (extended/shifted) register or SVE vector, or base plus ``vl`` vectors."""
    if vl is not None:
        return Mem(base, vl, "offset", mul_vl=True)
    if isinstance(offset, (XReg, WReg, ZVec)) and extend is None and amount is not None:
        extend = "lsl"
    return Mem(base, offset, "offset", extend, amount)


def pre(base: XReg, offset: int) -> Mem:
    """Pre-indexed: ``[base, #offset]!`` (base is updated before the access)."""
    return Mem(base, offset, "pre")


def post(base: XReg, offset: int | XReg) -> Mem:
    """Post-indexed: ``[base], #offset`` or ``[base], xm`` (base updated after)."""
    return Mem(base, offset, "post")
