"""x86-64 memory operands.

An address is built from 64-bit registers: ``rax + rbx * 4 + 64`` (base,
index, scale 1/2/4/8, signed 32-bit displacement), ``rbx * 8 - 16`` (no base),
``rip + 16`` or ``rip + label`` (RIP-relative, also ``rip + label + 8``).
A memory operand wraps an address with its access size, which is printed as
``<size> ptr [...]``:

    ptr(rax + 8)        # size taken from the instruction
    qword(rax + 8)      # qword ptr [rax + 8]; also byte, word, dword, xmmword, ymmword, zmmword
    bcst(rax + 64)      # EVEX embedded broadcast: dword ptr [rax + 64]{1to16} (size from the instruction)
    zmmword(rax).mask(k1)   # masked store destination: zmmword ptr [rax] {k1}

A `Label` alone is accepted wherever an address is (``ptr(label)`` is
``[rip + label]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.errors import EncodingError
from asm.x86_64.labels import Label
from asm.x86_64.registers import Gpr, KReg, Masked, Rip

SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "xmmword": 16, "ymmword": 32, "zmmword": 64}
SIZE_NAMES = {v: k for k, v in SIZES.items()}
DISP_MIN, DISP_MAX = -(1 << 31), (1 << 31) - 1


def _addr_reg(reg: object, operand: str) -> Gpr:
    if not isinstance(reg, Gpr) or reg.bits != 64:
        raise EncodingError(f"address: {operand} must be a 64-bit register rax..r15, got {reg}")
    return reg


@dataclass(frozen=True, init=False)
class Addr:
    """``[base + index*scale + disp]`` or ``[rip + label + disp]``; built with ``+``, ``-``, ``*``."""

    base: Gpr | None = None
    index: Gpr | None = None
    scale: int = 1
    disp: int = 0
    rip: bool = False
    label: object | None = None  # a Label (RIP-relative)

    def __init__(
        self,
        base: Gpr | None = None,
        index: Gpr | None = None,
        scale: int = 1,
        disp: int = 0,
        rip: bool = False,
        label: object | None = None,
    ) -> None:
        # the fields straight into the instance dict: the frozen dataclass __init__ (one
        # object.__setattr__ per field) is twice as slow, and addresses are built per operand
        d = self.__dict__
        d["base"] = base
        d["index"] = index
        d["scale"] = scale
        d["disp"] = disp
        d["rip"] = rip
        d["label"] = label

    def __hash__(self) -> int:
        # computed once (memory operands key `Assembler`'s encoding cache)
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash((self.base, self.index, self.scale, self.disp, self.rip, self.label))
            return h

    def __reduce__(self):
        return (Addr, (self.base, self.index, self.scale, self.disp, self.rip, self.label))

    @staticmethod
    def of(reg: Gpr) -> Addr:
        return Addr(base=_addr_reg(reg, "base"))

    @staticmethod
    def scaled(reg: Gpr, scale: int) -> Addr:
        _addr_reg(reg, "index")
        if scale not in (1, 2, 4, 8) or isinstance(scale, bool):
            raise EncodingError(f"address: scale must be 1, 2, 4 or 8, got {scale}")
        if reg.idx == 4:
            raise EncodingError(f"address: index must be a register other than rsp (rax..r15 except rsp), got {reg}")
        return Addr(index=reg, scale=scale)

    def __add__(self, other) -> Addr:
        if isinstance(other, bool):
            raise EncodingError(f"address: cannot add {other!r}")
        if isinstance(other, int):
            return Addr(self.base, self.index, self.scale, self.disp + other, self.rip, self.label)
        if isinstance(other, Label):
            if not self.rip or self.label is not None:
                raise EncodingError(f"address: a label {other} needs rip as base: rip + label")
            return Addr(self.base, self.index, self.scale, self.disp, self.rip, other)
        if isinstance(other, Gpr):
            other = Addr.of(other) if self.base is None and not self.rip else Addr.scaled(other, 1)
        if isinstance(other, Addr):
            if other.rip or other.label is not None:
                raise EncodingError("address: rip can only be added to a displacement or a label")
            if self.rip and (other.base or other.index):
                raise EncodingError("address: rip-relative addresses take no base or index register")
            base, index, scale = self.base, self.index, self.scale
            if other.base is not None:
                if base is None:
                    base = other.base
                elif index is None:
                    index, scale = Addr.scaled(other.base, 1).index, 1
                else:
                    raise EncodingError("address: at most one base and one index register")
            if other.index is not None:
                if index is not None:
                    raise EncodingError("address: at most one index register")
                index, scale = other.index, other.scale
            return Addr(base, index, scale, self.disp + other.disp, self.rip, self.label)
        raise EncodingError(f"address: cannot add {other!r}")

    __radd__ = __add__

    def __sub__(self, other) -> Addr:
        if not isinstance(other, int) or isinstance(other, bool):
            raise EncodingError(f"address: only an integer displacement can be subtracted, got {other!r}")
        return Addr(self.base, self.index, self.scale, self.disp - other, self.rip, self.label)

    def check(self) -> None:
        """Raise unless the displacement fits a signed 32-bit field."""
        if not DISP_MIN <= self.disp <= DISP_MAX:
            raise EncodingError(f"address: displacement must be in {DISP_MIN}..{DISP_MAX}, got {self.disp}")

    def __str__(self) -> str:
        try:
            return self.__dict__["_text"]
        except KeyError:
            pass
        parts = []
        if self.rip:
            parts.append("rip")
            if self.label is not None:
                parts.append(str(self.label))
        if self.base is not None:
            parts.append(self.base.name)
        if self.index is not None:
            parts.append(f"{self.index.name}*{self.scale}")
        text = " + ".join(parts)
        if self.disp or not parts:
            if not parts:
                text = str(self.disp)
            elif self.disp < 0:
                text += f" - {-self.disp}"
            else:
                text += f" + {self.disp}"
        text = f"[{text}]"
        if self.label is None:  # kept for the next listing of this address (a label is an object of its own)
            self.__dict__["_text"] = text
        return text


def to_addr(x: object) -> Addr:
    """An `Addr` from an address expression, a 64-bit register, a Label (RIP-relative) or an int (absolute)."""
    if isinstance(x, Addr):
        return x
    if isinstance(x, Gpr):
        return Addr.of(x)
    if isinstance(x, Label):
        return Addr(rip=True, label=x)
    if isinstance(x, Rip):
        return Addr(rip=True)
    if isinstance(x, int) and not isinstance(x, bool):
        return Addr(disp=x)
    raise EncodingError(f"address: expected a register, address expression, label or int, got {x!r}")


@dataclass(frozen=True, init=False)
class Mem:
    """A memory operand: an address, an access size in bytes (None: from the instruction), broadcast flag."""

    addr: Addr
    size: int | None = None
    bcst: bool = False

    def __init__(self, addr: Addr, size: int | None = None, bcst: bool = False) -> None:
        d = self.__dict__  # as `Addr.__init__`
        d["addr"] = addr
        d["size"] = size
        d["bcst"] = bcst

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash((self.addr, self.size, self.bcst))
            return h

    def __reduce__(self):
        return (Mem, (self.addr, self.size, self.bcst))

    def mask(self, k: KReg, zero: bool = False) -> Masked:
        """``mem {k}``: a masked store destination (``zero`` is rejected by the encoders)."""
        return Masked(self, k, zero)

    def sized(self, size: int) -> Mem:
        return Mem(self.addr, size, self.bcst)

    def text(self, size: int | None = None, lanes: int | None = None) -> str:
        """Intel syntax with ``size`` (bytes) printed as ``<name> ptr``; ``lanes`` adds ``{1toN}``."""
        size = self.size if size is None else size
        prefix = f"{SIZE_NAMES[size]} ptr " if size else ""
        return prefix + str(self.addr) + (f"{{1to{lanes}}}" if lanes else "")

    def __str__(self) -> str:
        return self.text()


def ptr(addr: object) -> Mem:
    """A memory operand whose size follows from the instruction."""
    a = addr if type(addr) is Addr else to_addr(addr)
    if not DISP_MIN <= a.disp <= DISP_MAX:
        a.check()
    return Mem(a)


def _sized(name: str):
    size = SIZES[name]

    def make(addr: object) -> Mem:
        a = addr if type(addr) is Addr else to_addr(addr)
        if not DISP_MIN <= a.disp <= DISP_MAX:
            a.check()
        return Mem(a, size)

    make.__name__ = name
    make.__doc__ = f"``{name} ptr [addr]`` ({size} bytes)."
    return make


byte = _sized("byte")
word = _sized("word")
dword = _sized("dword")
qword = _sized("qword")
xmmword = _sized("xmmword")
ymmword = _sized("ymmword")
zmmword = _sized("zmmword")


def bcst(addr: object) -> Mem:
    """EVEX embedded broadcast of one element at ``addr`` (``dword/qword ptr [..]{1toN}``)."""
    a = to_addr(addr)
    a.check()
    return Mem(a, None, True)


def mem(
    base: Gpr | None = None, index: Gpr | None = None, scale: int = 1, disp: int = 0, size: int | None = None
) -> Mem:
    """Functional constructor: ``mem(rax, rbx, 8, 16, size=8)`` is ``qword ptr [rax + rbx*8 + 16]``."""
    a = Addr(base=_addr_reg(base, "base")) if base is not None else Addr()
    if index is not None:
        a = a + Addr.scaled(index, scale)
    elif scale != 1:
        raise EncodingError(f"address: scale {scale} needs an index register")
    a = a + disp
    a.check()
    if size is not None and size not in SIZE_NAMES:
        raise EncodingError(f"address: size must be one of {sorted(SIZE_NAMES)} bytes, got {size}")
    return Mem(a, size)
