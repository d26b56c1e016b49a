"""Typed x86-64 registers.

General purpose: ``rax``..``r15`` (64-bit) and their 32-bit views
``eax``..``r15d``; ``cl`` (only as a shift count). Vector: ``xmm0``..``xmm31``,
``ymm0``..``ymm31``, ``zmm0``..``zmm31``. Opmasks: ``k0``..``k7``. ``rip`` is
only for RIP-relative memory operands (``qword(rip + 16)``, ``qword(rip + lbl)``).

64-bit registers build addresses with ``+``, ``-`` and ``*``:
``rax + rbx * 8 - 16`` is an `Addr` (see `asm.x86_64.memory`).

EVEX write masks: ``zmm0.mask(k1)`` is ``zmm0 {k1}``, ``zmm0.maskz(k1)`` is
``zmm0 {k1} {z}``; ``k1.mask(k2)`` is ``k1 {k2}`` (compare into a mask).
"""

from __future__ import annotations

from dataclasses import dataclass

_GPR64 = ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"] + [f"r{i}" for i in range(8, 16)]
_GPR32 = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"] + [f"r{i}d" for i in range(8, 16)]
_GPR8 = ["al", "cl", "dl", "bl"]


@dataclass(frozen=True)
class Gpr:
    """General purpose register number ``idx`` (0..15) viewed as ``bits`` (64, 32 or 8) wide."""

    idx: int
    bits: int = 64

    @property
    def name(self) -> str:
        if self.bits == 64:
            return _GPR64[self.idx]
        if self.bits == 32:
            return _GPR32[self.idx]
        return _GPR8[self.idx]

    @property
    def r64(self) -> Gpr:
        return Gpr(self.idx, 64)

    @property
    def r32(self) -> Gpr:
        return Gpr(self.idx, 32)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name

    # address arithmetic (64-bit registers only; checked by Addr)
    def __add__(self, other):
        from asm.x86_64.memory import Addr

        return Addr.of(self) + other

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        from asm.x86_64.memory import Addr

        return Addr.of(self) - other

    def __mul__(self, scale):
        from asm.x86_64.memory import Addr

        return Addr.scaled(self, scale)

    __rmul__ = __mul__


@dataclass(frozen=True)
class Rip:
    """The instruction pointer, usable only as the base of a memory operand."""

    name: str = "rip"

    def __str__(self) -> str:
        return "rip"

    def __add__(self, other):
        from asm.x86_64.memory import Addr

        return Addr(rip=True) + other

    __radd__ = __add__

    def __sub__(self, other):
        from asm.x86_64.memory import Addr

        return Addr(rip=True) - other


_VPREFIX = {128: "xmm", 256: "ymm", 512: "zmm"}


@dataclass(frozen=True)
class Vec:
    """Vector register ``idx`` (0..31), ``bits`` 128 (xmm), 256 (ymm) or 512 (zmm)."""

    idx: int
    bits: int

    @property
    def name(self) -> str:
        return f"{_VPREFIX[self.bits]}{self.idx}"

    @property
    def xmm(self) -> Vec:
        return Vec(self.idx, 128)

    @property
    def ymm(self) -> Vec:
        return Vec(self.idx, 256)

    @property
    def zmm(self) -> Vec:
        return Vec(self.idx, 512)

    def mask(self, k: KReg, zero: bool = False) -> Masked:
        """``reg {k}`` (merging) or, with ``zero``, ``reg {k} {z}``."""
        return Masked(self, k, zero)

    def maskz(self, k: KReg) -> Masked:
        """``reg {k} {z}`` (zeroing)."""
        return Masked(self, k, True)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class KReg:
    """AVX-512 opmask register ``k0``..``k7``."""

    idx: int

    @property
    def name(self) -> str:
        return f"k{self.idx}"

    def mask(self, k: KReg) -> Masked:
        """``k_dst {k}`` (a compare writing a mask under a mask)."""
        return Masked(self, k, False)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Masked:
    """An operand under an opmask: ``op {k}`` or ``op {k} {z}``."""

    op: object
    k: KReg
    zero: bool = False

    def __str__(self) -> str:
        return f"{self.op} {{{self.k}}}" + (" {z}" if self.zero else "")


GPR64 = [Gpr(i, 64) for i in range(16)]
GPR32 = [Gpr(i, 32) for i in range(16)]
XMM = [Vec(i, 128) for i in range(32)]
YMM = [Vec(i, 256) for i in range(32)]
ZMM = [Vec(i, 512) for i in range(32)]
KREGS = [KReg(i) for i in range(8)]
rip = Rip()
cl = Gpr(1, 8)

REGISTERS: dict[str, object] = {r.name: r for r in GPR64 + GPR32 + XMM + YMM + ZMM + KREGS}
REGISTERS["rip"] = rip
REGISTERS["cl"] = cl
globals().update(REGISTERS)

__all__ = ["Gpr", "Vec", "KReg", "Masked", "Rip", "GPR64", "GPR32", "XMM", "YMM", "ZMM", "KREGS", "REGISTERS"]
__all__ += list(REGISTERS)
