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


def _interned(cls, table: dict, key: tuple, fields: dict, name):
    """The one instance of ``cls`` with these field values (registers compare and hash by identity,
    which `Assembler`'s encoding cache relies on: value equality without Python-level hashing)."""
    try:
        return table[key]
    except KeyError:
        pass
    except TypeError:  # unhashable field values: a one-off instance (encoders reject it)
        key = None
    self = object.__new__(cls)
    for f, v in fields.items():
        object.__setattr__(self, f, v)
    try:
        text = name(self)
    except (IndexError, KeyError, TypeError):  # not a real register: `name` raises as before
        text = None
    object.__setattr__(self, "_name", text)
    if key is not None:
        self = table.setdefault(key, self)
    return self


_GPRS: dict = {}
_VECS: dict = {}
_KREGS: dict = {}


@dataclass(frozen=True, eq=False, init=False)
class Gpr:
    """General purpose register number ``idx`` (0..15) viewed as ``bits`` (64, 32 or 8) wide.

    One instance per (idx, bits): ``Gpr(0, 64) is rax``; equality and hashing are by identity."""

    idx: int
    bits: int = 64

    def __new__(cls, idx: int, bits: int = 64) -> Gpr:
        return _interned(cls, _GPRS, (cls, idx, bits), {"idx": idx, "bits": bits}, Gpr._compute_name)

    def __reduce__(self):
        return (type(self), (self.idx, self.bits))

    def _compute_name(self) -> str:
        if self.bits == 64:
            return _GPR64[self.idx]
        if self.bits == 32:
            return _GPR32[self.idx]
        return _GPR8[self.idx]

    @property
    def name(self) -> str:
        return self._name if self._name is not None else self._compute_name()

    @property
    def r64(self) -> Gpr:
        return Gpr(self.idx, 64)

    @property
    def r32(self) -> Gpr:
        return Gpr(self.idx, 32)

    def __str__(self) -> str:
        return self._name or self.name

    def __repr__(self) -> str:
        return self._name or self.name

    # address arithmetic (64-bit registers only; checked by Addr)
    def __add__(self, other):
        addr = _ADDR or _addr()
        if self.bits == 64:  # the common ``reg + disp`` and ``reg + index*scale (+ disp)``
            if type(other) is int:
                return addr(self, None, 1, other)
            if type(other) is addr and other.base is None and not other.rip and other.label is None:
                if other.index is None:
                    return addr(self, None, 1, other.disp)
                return addr(self, other.index, other.scale, other.disp)
        return addr.of(self) + other

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        return (_ADDR or _addr()).of(self) - other

    def __mul__(self, scale):
        return (_ADDR or _addr()).scaled(self, scale)

    __rmul__ = __mul__


def _addr():
    """`asm.x86_64.memory.Addr` (imported on first use: memory imports this module)."""
    global _ADDR
    if _ADDR is None:
        from asm.x86_64.memory import Addr

        _ADDR = Addr
    return _ADDR


_ADDR = None


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


@dataclass(frozen=True, eq=False, init=False)
class Vec:
    """Vector register ``idx`` (0..31), ``bits`` 128 (xmm), 256 (ymm) or 512 (zmm).

    One instance per (idx, bits): ``Vec(1, 256) is ymm1``; equality and hashing are by identity."""

    idx: int
    bits: int

    def __new__(cls, idx: int, bits: int) -> Vec:
        return _interned(cls, _VECS, (cls, idx, bits), {"idx": idx, "bits": bits}, Vec._compute_name)

    def __reduce__(self):
        return (type(self), (self.idx, self.bits))

    def _compute_name(self) -> str:
        return f"{_VPREFIX[self.bits]}{self.idx}"

    @property
    def name(self) -> str:
        return self._name if self._name is not None else self._compute_name()

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
        return self._name or self.name

    def __repr__(self) -> str:
        return self._name or self.name


@dataclass(frozen=True, eq=False, init=False)
class KReg:
    """AVX-512 opmask register ``k0``..``k7`` (one instance per number: ``KReg(1) is k1``)."""

    idx: int

    def __new__(cls, idx: int) -> KReg:
        return _interned(cls, _KREGS, (cls, idx), {"idx": idx}, KReg._compute_name)

    def __reduce__(self):
        return (type(self), (self.idx,))

    def _compute_name(self) -> str:
        return f"k{self.idx}"

    @property
    def name(self) -> str:
        return self._name if self._name is not None else self._compute_name()

    def mask(self, k: KReg) -> Masked:
        """``k_dst {k}`` (a compare writing a mask under a mask)."""
        return Masked(self, k, False)

    def __str__(self) -> str:
        return self._name or self.name

    def __repr__(self) -> str:
        return self._name or self.name


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
