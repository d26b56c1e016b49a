"""Typed AArch64 registers.

General purpose: ``x0``..``x30``, ``sp``, ``xzr`` and their 32-bit views
``w0``..``w30``, ``wsp``, ``wzr`` (register number 31 is SP or ZR depending on
the instruction; the types keep them apart).

SIMD&FP: ``v0``..``v31``. An arrangement is an attribute: ``v3.s4`` is
``v3.4s``, ``v3.b16`` is ``v3.16b``, ``v3.d1`` is ``v3.1d``. An element is
indexed from its size view: ``v2.s[3]``. Scalar views: ``b0``, ``h0``, ``s0``,
``d0``, ``q0`` (or ``v0.S``...).

SVE: ``z0``..``z31`` with element size views ``z1.b/.h/.s/.d/.q`` and indexed
elements ``z2.s[1]``; predicates ``p0``..``p15`` with ``p0.z``/``p0.m``
qualifiers (governing predicates) and element views ``p0.s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.errors import EncodingError

# element size name -> bytes
ELEM_BYTES = {"b": 1, "h": 2, "s": 4, "d": 8, "q": 16}


@dataclass(frozen=True)
class XReg:
    """64-bit general purpose register. ``idx`` 31 is SP when ``sp`` else XZR."""

    idx: int
    sp: bool = False

    @property
    def name(self) -> str:
        if self.idx == 31:
            return "sp" if self.sp else "xzr"
        return f"x{self.idx}"

    @property
    def w(self) -> WReg:
        return WReg(self.idx, self.sp)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class WReg:
    """32-bit general purpose register. ``idx`` 31 is WSP when ``sp`` else WZR."""

    idx: int
    sp: bool = False

    @property
    def name(self) -> str:
        if self.idx == 31:
            return "wsp" if self.sp else "wzr"
        return f"w{self.idx}"

    @property
    def x(self) -> XReg:
        return XReg(self.idx, self.sp)

    def __str__(self) -> str:
        return self.name


GpReg = XReg | WReg

# arrangement attribute -> (text, element size, lanes)
_ARRANGEMENTS = {
    "b8": ("8b", "b", 8),
    "b16": ("16b", "b", 16),
    "h4": ("4h", "h", 4),
    "h8": ("8h", "h", 8),
    "s2": ("2s", "s", 2),
    "s4": ("4s", "s", 4),
    "d1": ("1d", "d", 1),
    "d2": ("2d", "d", 2),
}


@dataclass(frozen=True)
class VReg:
    """SIMD&FP register ``v<idx>``; attributes give arrangements and views."""

    idx: int

    def __getattr__(self, attr: str):
        if attr in _ARRANGEMENTS:
            text, es, lanes = _ARRANGEMENTS[attr]
            return VecReg(self.idx, es, lanes)
        if attr in ("b", "h", "s", "d"):
            return VElemSize(self.idx, attr)
        if attr in ("B", "H", "S", "D", "Q"):
            return ScalarReg(self.idx, attr.lower())
        raise AttributeError(attr)

    def __str__(self) -> str:
        return f"v{self.idx}"


@dataclass(frozen=True)
class VecReg:
    """A SIMD register with an arrangement, e.g. ``v3.4s``."""

    idx: int
    esize: str
    lanes: int

    @property
    def arrangement(self) -> str:
        return f"{self.lanes}{self.esize}"

    @property
    def q(self) -> int:
        """1 for a 128-bit arrangement, 0 for a 64-bit one."""
        return 1 if self.lanes * ELEM_BYTES[self.esize] == 16 else 0

    def __str__(self) -> str:
        return f"v{self.idx}.{self.arrangement}"


@dataclass(frozen=True)
class VElemSize:
    """``v2.s``: an element size view, to be indexed (``v2.s[3]``)."""

    idx: int
    esize: str

    def __getitem__(self, index: int) -> VElem:
        return VElem(self.idx, self.esize, index)

    def __str__(self) -> str:
        return f"v{self.idx}.{self.esize}"


@dataclass(frozen=True)
class VElem:
    """One element of a SIMD register, e.g. ``v2.s[3]``."""

    idx: int
    esize: str
    index: int

    def __post_init__(self) -> None:
        lanes = 16 // ELEM_BYTES[self.esize]
        if not isinstance(self.index, int) or not 0 <= self.index < lanes:
            raise EncodingError(
                f"element index of v{self.idx}.{self.esize} must be in 0..{lanes - 1}, got {self.index!r}"
            )

    def __str__(self) -> str:
        return f"v{self.idx}.{self.esize}[{self.index}]"


@dataclass(frozen=True)
class ScalarReg:
    """Scalar SIMD&FP register ``b/h/s/d/q<idx>``."""

    idx: int
    esize: str

    def __str__(self) -> str:
        return f"{self.esize}{self.idx}"


@dataclass(frozen=True)
class ZReg:
    """SVE vector register ``z<idx>``; ``z1.s`` gives the element size view."""

    idx: int

    def __getattr__(self, attr: str):
        if attr in ELEM_BYTES:
            return ZVec(self.idx, attr)
        raise AttributeError(attr)

    def __str__(self) -> str:
        return f"z{self.idx}"


@dataclass(frozen=True)
class ZVec:
    """SVE vector with element size, e.g. ``z1.s``; ``z1.s[2]`` is an indexed element."""

    idx: int
    esize: str

    def __getitem__(self, index: int) -> ZElem:
        return ZElem(self.idx, self.esize, index)

    def __str__(self) -> str:
        return f"z{self.idx}.{self.esize}"


@dataclass(frozen=True)
class ZElem:
    """Indexed SVE element (range checked by the instruction that uses it)."""

    idx: int
    esize: str
    index: int

    def __str__(self) -> str:
        return f"z{self.idx}.{self.esize}[{self.index}]"


@dataclass(frozen=True)
class PReg:
    """SVE predicate ``p<idx>``; ``p0.z``/``p0.m`` qualify, ``p0.s`` sizes."""

    idx: int

    @property
    def z(self) -> PQual:
        return PQual(self.idx, "z")

    @property
    def m(self) -> PQual:
        return PQual(self.idx, "m")

    def __getattr__(self, attr: str):
        if attr in ("b", "h", "s", "d"):
            return PVec(self.idx, attr)
        raise AttributeError(attr)

    def __str__(self) -> str:
        return f"p{self.idx}"


@dataclass(frozen=True)
class PQual:
    """Governing predicate with zeroing (``/z``) or merging (``/m``) qualifier."""

    idx: int
    qual: str

    def __str__(self) -> str:
        return f"p{self.idx}/{self.qual}"


@dataclass(frozen=True)
class PVec:
    """Predicate with element size, e.g. ``p0.s``."""

    idx: int
    esize: str

    def __getitem__(self, index: tuple[WReg, int]) -> PElem:
        """``p2.s[w12, 1]``: an element selected by a register and an immediate (SME ``psel``)."""
        if not isinstance(index, tuple) or len(index) != 2:
            raise EncodingError(f"p{self.idx}.{self.esize} is indexed [w12..w15, imm], got {index!r}")
        return PElem(self.idx, self.esize, index[0], index[1])

    def __str__(self) -> str:
        return f"p{self.idx}.{self.esize}"


@dataclass(frozen=True)
class PElem:
    """A predicate element ``p<idx>.<T>[wv, index]`` (ranges checked by the instruction)."""

    idx: int
    esize: str
    wv: WReg
    index: int

    def __str__(self) -> str:
        return f"p{self.idx}.{self.esize}[{self.wv}, {self.index}]"


def _export() -> dict:
    regs: dict = {}
    for i in range(31):
        regs[f"x{i}"] = XReg(i)
        regs[f"w{i}"] = WReg(i)
    regs["sp"] = XReg(31, sp=True)
    regs["wsp"] = WReg(31, sp=True)
    regs["xzr"] = XReg(31)
    regs["wzr"] = WReg(31)
    for i in range(32):
        regs[f"v{i}"] = VReg(i)
        regs[f"z{i}"] = ZReg(i)
        for es in ("b", "h", "s", "d", "q"):
            regs[f"{es}{i}"] = ScalarReg(i, es)
    for i in range(16):
        regs[f"p{i}"] = PReg(i)
    return regs


REGISTERS = _export()
globals().update(REGISTERS)

X = [REGISTERS[f"x{i}"] for i in range(31)]
W = [REGISTERS[f"w{i}"] for i in range(31)]
V = [REGISTERS[f"v{i}"] for i in range(32)]
Z = [REGISTERS[f"z{i}"] for i in range(32)]
P = [REGISTERS[f"p{i}"] for i in range(16)]


@dataclass(frozen=True)
class VElemGroup:
    """A 32-bit group of elements used as one indexed element, e.g. ``v2.2h[3]``.

    ``group`` is "2h" (BFDOT) or "4b" (SDOT/UDOT); ``index`` selects the
    32-bit group, 0..3. Build it as ``VElemGroup(2, "2h", 3)``.
    """

    idx: int
    group: str
    index: int

    def __post_init__(self) -> None:
        if self.group not in ("2h", "4b"):
            raise EncodingError(f"element group of v{self.idx} must be 2h or 4b, got {self.group!r}")
        if not isinstance(self.index, int) or not 0 <= self.index < 4:
            raise EncodingError(f"element index of v{self.idx}.{self.group} must be in 0..3, got {self.index!r}")

    def __str__(self) -> str:
        return f"v{self.idx}.{self.group}[{self.index}]"
