"""Operands of the PTX builder: registers, predicates, special registers, parameters, shared
arrays, addresses and labels, and the checks the instruction emitters share."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from . import types as T
from .errors import PtxTypeError
from .types import Req

if TYPE_CHECKING:
    from .builder import Kernel


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
#: cvta with the .param state space (the generic address of a kernel parameter): PTX ISA 7.7, sm_70
CVTA_PARAM = Req((7, 7), 70, "cvta.param")

_PREFIX = {
    "pred": "p",
    "b16": "hb",
    "b32": "b",
    "b64": "bd",
    "b128": "bq",
    "u16": "hu",
    "u32": "r",
    "u64": "rd",
    "s16": "hs",
    "s32": "ri",
    "s64": "rl",
    "f16": "h",
    "f16x2": "hh",
    "bf16": "bh",
    "bf16x2": "bhh",
    "f32": "f",
    "f64": "fd",
}
_AUTO_NAME = re.compile(r"^({})\d+$".format("|".join(sorted(_PREFIX.values(), key=len, reverse=True))))


# --------------------------------------------------------------------------- operands


class Reg:
    """A typed virtual register of one kernel. ``~p`` negates a predicate."""

    __slots__ = ("name", "type", "kernel")

    def __init__(self, name: str, type: str, kernel: Kernel):
        self.name = name
        self.type = type
        self.kernel = kernel

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Reg({self.name} .{self.type})"

    def __invert__(self) -> NotPred:
        if self.type != "pred":
            raise PtxTypeError(f"~{self.name}: only .pred registers can be negated, this one is .{self.type}")
        return NotPred(self)


class NotPred:
    """A negated predicate, as in ``@!p bra L;``."""

    __slots__ = ("reg",)

    def __init__(self, reg: Reg):
        self.reg = reg

    def __str__(self) -> str:
        return "!" + self.reg.name

    def __invert__(self) -> Reg:
        return self.reg


class Special:
    """A read-only special register such as ``%tid.x``."""

    __slots__ = ("name", "type", "req")

    def __init__(self, name: str, type: str = "u32", req: Req = T.BASE):
        self.name = name
        self.type = type
        self.req = req

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Special({self.name} .{self.type})"


class _Vec3:
    def __init__(self, base: str):
        self.x = Special(f"%{base}.x")
        self.y = Special(f"%{base}.y")
        self.z = Special(f"%{base}.z")


class sreg:
    """Special registers: ``sreg.tid.x``, ``sreg.ctaid.y``, ``sreg.laneid`` ..."""

    tid = _Vec3("tid")
    ntid = _Vec3("ntid")
    ctaid = _Vec3("ctaid")
    nctaid = _Vec3("nctaid")
    laneid = Special("%laneid")
    warpid = Special("%warpid")
    nwarpid = Special("%nwarpid")
    smid = Special("%smid")
    nsmid = Special("%nsmid")
    gridid = Special("%gridid", "u64")
    lanemask_eq = Special("%lanemask_eq")
    lanemask_lt = Special("%lanemask_lt")
    lanemask_le = Special("%lanemask_le")
    lanemask_gt = Special("%lanemask_gt")
    lanemask_ge = Special("%lanemask_ge")
    clock = Special("%clock")
    clock64 = Special("%clock64", "u64")
    globaltimer = Special("%globaltimer", "u64")


class Param:
    """A kernel parameter (``.param .u64 name``; type "tensormap": ``.param .align 64 .b8 name[128]``)."""

    __slots__ = ("name", "type", "kernel")

    def __init__(self, name: str, type: str, kernel: Kernel):
        self.name, self.type, self.kernel = name, type, kernel

    def decl(self) -> str:
        if self.type == "tensormap":
            return f".param .align 64 .b8 {self.name}[128]"
        return f".param .{self.type} {self.name}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Param({self.name} .{self.type})"


class Shared:
    """A ``.shared`` array of a kernel; ``nbytes`` is its size."""

    __slots__ = ("name", "type", "count", "align", "kernel")

    def __init__(self, name: str, type: str, count: int, align: int, kernel: Kernel):
        self.name, self.type, self.count, self.align, self.kernel = name, type, count, align, kernel

    @property
    def nbytes(self) -> int:
        return self.count * T.bits(self.type) // 8

    def __add__(self, offset: int) -> Addr:
        return Addr(self, offset)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Shared({self.name} .{self.type}[{self.count}] align {self.align})"


class Addr:
    """A memory operand ``[base+offset]``; base is a register, a Param or a Shared array."""

    __slots__ = ("base", "offset")

    def __init__(self, base, offset: int = 0):
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise PtxTypeError(f"address offset must be an int, got {offset!r}")
        if not isinstance(base, Reg | Param | Shared):
            raise PtxTypeError(f"address base must be a register, a Param or a Shared array, got {base!r}")
        self.base = base
        self.offset = offset

    def __str__(self) -> str:
        if self.offset > 0:
            return f"[{self.base}+{self.offset}]"
        if self.offset < 0:
            return f"[{self.base}{self.offset}]"
        return f"[{self.base}]"


def addr(base, offset: int = 0) -> Addr:
    """``[base+offset]``."""
    return Addr(base, offset)


class Label:
    __slots__ = ("name", "placed")

    def __init__(self, name: str):
        self.name = name
        self.placed = False

    def __str__(self) -> str:
        return self.name


# --------------------------------------------------------------------------- helpers

_CMP_INT = ("eq", "ne", "lt", "le", "gt", "ge")
_CMP_UNSIGNED = _CMP_INT + ("lo", "ls", "hi", "hs")
_CMP_FLOAT = _CMP_INT + ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
_FRND = ("rn", "rz", "rm", "rp")
_IRND = ("rni", "rzi", "rmi", "rpi")
_SPACES = ("global", "shared", "param", "local", "const", None)


def _mem_type(t: str) -> str:
    """ld/st/mov have no .f16/.bf16 forms: use the bit type of the same size."""
    if t in ("f16", "bf16"):
        return "b16"
    if t in ("f16x2", "bf16x2"):
        return "b32"
    return t


def _fail(ins: str, msg: str):
    raise PtxTypeError(f"{ins}: {msg}")


def _as_list(x) -> list:
    return list(x) if isinstance(x, list | tuple) else [x]
