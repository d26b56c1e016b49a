"""AArch64 SME encoders: the ZA array, its tiles and slices, outer products, streaming mode.

Typed ZA operands print as llvm-mc reads them: ``za`` (the whole array), ``za0.s`` (tile 0 of
32-bit elements), ``za1h.s[w12, 0]`` / ``za1v.s[w12, 0]`` (a horizontal / vertical slice of tile 1:
its row / column ``(w12 + 0) mod (SVL / 32)``). Tile and slice ranges depend on the element size
(tiles: b 1, h 2, s 4, d 8; slice offsets: b 0..15, h 0..7, s 0..3, d 0..1) and are checked by the
instruction, so an error names the mnemonic and the operand. One private helper per encoding
class of the Arm ARM (named in its docstring), thin mnemonic methods on top. ``ld1w``/``st1w``/
``ld1d``/``st1d`` with a ZA slice go here, with a Z register to the SVE forms.

    a.smstart()
    a.zero(za)
    a.ld1w(za0v.s[w12, 0], p1.z, mem(x0, x1, "lsl", 2))
    a.fmopa(za0.s, p1.m, p2.m, z0.s, z1.s)
    a.mova(z2.s, p0.m, za3h.s[w13, 1])
    a.st1w(za0v.s[w12, 0], p1, mem(x2, x3, "lsl", 2))
    a.smstop()

What is legal in streaming mode (no NEON, no SVE gathers without FEAT_SME_FA64) is the kernel's
business: these encoders emit any form, as llvm-mc does.
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.aarch64.memory import Mem
from asm.aarch64.operands import SIZE_BITS, fail, imm, xreg, zvec
from asm.aarch64.registers import PElem, PQual, PReg, WReg, XReg, ZVec
from asm.errors import EncodingError

#: tiles per element size (ZA holds SVL/8 x SVL/8 bytes)
TILES = {"b": 1, "h": 2, "s": 4, "d": 8, "q": 16}
#: slices addressable by the immediate of a tile-slice operand: 0 .. SLICE_IMM - 1
SLICE_IMM = {"b": 16, "h": 8, "s": 4, "d": 2, "q": 1}
_SIZES = ("b", "h", "s", "d", "q")


@dataclass(frozen=True)
class ZA:
    """The whole ZA array, ``za`` (``zero {za}``)."""

    def __str__(self) -> str:
        return "za"


@dataclass(frozen=True)
class ZaReg:
    """``za<idx>``: a tile number; ``za1.s`` is the tile with element size, ``za1h``/``za1v`` via
    `ZaDir`. The number's range depends on the size and is checked by the instruction."""

    idx: int

    def __getattr__(self, attr: str) -> ZaTile:
        if attr in _SIZES:
            return ZaTile(self.idx, attr)
        raise AttributeError(attr)

    def __str__(self) -> str:
        return f"za{self.idx}"


@dataclass(frozen=True)
class ZaTile:
    """A ZA tile with element size, e.g. ``za3.s``."""

    idx: int
    esize: str

    def __post_init__(self) -> None:
        if self.esize not in _SIZES:
            raise EncodingError(f"ZA tile element size must be one of {', '.join(_SIZES)}, got {self.esize!r}")

    def __str__(self) -> str:
        return f"za{self.idx}.{self.esize}"


@dataclass(frozen=True)
class ZaDir:
    """``za<idx>h`` / ``za<idx>v``: a tile read by rows (horizontal) or columns (vertical);
    ``za1h.s`` sizes it, ``za1h.s[w12, 0]`` is one slice."""

    idx: int
    vertical: bool

    def __getattr__(self, attr: str) -> ZaSliceOf:
        if attr in _SIZES:
            return ZaSliceOf(self.idx, self.vertical, attr)
        raise AttributeError(attr)

    def __str__(self) -> str:
        return f"za{self.idx}{'v' if self.vertical else 'h'}"


@dataclass(frozen=True)
class ZaSliceOf:
    """``za1h.s``: the slices of a tile in one direction, to be indexed ``[ws, offset]``."""

    idx: int
    vertical: bool
    esize: str

    def __getitem__(self, index: tuple[WReg, int]) -> ZaSlice:
        if not isinstance(index, tuple) or len(index) != 2:
            raise EncodingError(f"a ZA slice is indexed [w12..w15, offset], got {index!r}")
        return ZaSlice(self.idx, self.vertical, self.esize, index[0], index[1])

    def __str__(self) -> str:
        return f"za{self.idx}{'v' if self.vertical else 'h'}.{self.esize}"


@dataclass(frozen=True)
class ZaSlice:
    """One slice of a tile: row (``h``) or column (``v``) number ``(ws + offset) mod (SVL / esize
    bits)``; prints ``za1h.s[w12, 0]``. Ranges are checked by the instruction."""

    idx: int
    vertical: bool
    esize: str
    ws: WReg
    offset: int

    def __str__(self) -> str:
        return f"za{self.idx}{'v' if self.vertical else 'h'}.{self.esize}[{self.ws}, {self.offset}]"


def _export() -> dict:
    regs: dict = {"za": ZA()}
    for i in range(8):
        regs[f"za{i}"] = ZaReg(i)
        regs[f"za{i}h"] = ZaDir(i, False)
        regs[f"za{i}v"] = ZaDir(i, True)
    return regs


ZA_REGISTERS = _export()
globals().update(ZA_REGISTERS)
__all__ = ["SmeMixin", "ZA", "ZA_REGISTERS", "ZaDir", "ZaReg", "ZaSlice", "ZaSliceOf", "ZaTile", *ZA_REGISTERS]


# -- SME operand checks ----------------------------------------------------------------
def _tile(mn: str, operand: str, t: object, sizes: tuple[str, ...]) -> ZaTile:
    """A tile ``za<n>.<T>`` with T in ``sizes`` and n < TILES[T]."""
    if not isinstance(t, ZaTile) or t.esize not in sizes:
        want = " or ".join(f"za0.{s}..za{TILES[s] - 1}.{s}" for s in sizes)
        raise fail(mn, operand, f"a ZA tile {want}", t)
    imm(mn, f"{operand} tile number", t.idx, 0, TILES[t.esize] - 1)
    return t


def _slice_reg(mn: str, operand: str, ws: object) -> int:
    """The slice index register w12..w15; returns 0..3."""
    if not isinstance(ws, WReg) or ws.sp or not 12 <= ws.idx <= 15:
        raise fail(mn, f"{operand} slice index register", "w12..w15", ws)
    return ws.idx - 12


def _slice(mn: str, operand: str, s: object, sizes: tuple[str, ...]) -> tuple[ZaSlice, int, int]:
    """A tile slice ``za<n><h|v>.<T>[w12..w15, off]``; returns (slice, Rs 0..3, tile:offset field)."""
    if not isinstance(s, ZaSlice) or s.esize not in sizes:
        raise fail(mn, operand, "a ZA tile slice za<n><h|v>.<" + "|".join(sizes) + ">[w12..w15, offset]", s)
    imm(mn, f"{operand} tile number", s.idx, 0, TILES[s.esize] - 1)
    rs = _slice_reg(mn, operand, s.ws)
    imm(mn, f"{operand} slice offset", s.offset, 0, SLICE_IMM[s.esize] - 1)
    return s, rs, s.idx * SLICE_IMM[s.esize] + s.offset


def _pmerge(mn: str, operand: str, p: object) -> int:
    """A merging predicate ``p0/m..p7/m``."""
    if not isinstance(p, PQual) or p.qual != "m" or p.idx > 7:
        raise fail(mn, operand, "a predicate p0/m..p7/m", p)
    return p.idx


def _same_z(mn: str, zn: object, zm: object, sizes: tuple[str, ...]) -> str:
    zvec(mn, "Zn", zn, sizes)
    zvec(mn, "Zm", zm, sizes)
    if zn.esize != zm.esize:
        raise EncodingError(f"{mn}: element sizes must match, got Zn={zn}, Zm={zm}")
    return zn.esize


# outer products: (mnemonic, tile size, source size) -> base word; bit 4 is S (subtract)
_FP_OUTER = {
    ("fmopa", "s", "s"): 0x80800000,
    ("fmopa", "d", "d"): 0x80C00000,
    ("fmopa", "s", "h"): 0x81A00000,  # widening fp16 -> fp32
    ("bfmopa", "s", "h"): 0x81800000,  # widening bf16 -> fp32
}
# SVCR field of SMSTART/SMSTOP: None (both) / "sm" / "za" -> CRm<3:1>
_SVCR = {None: 0b011, "sm": 0b001, "za": 0b010}
_LDST = {"ld1w": ("s", 0xE0800000), "ld1d": ("d", 0xE0C00000), "st1w": ("s", 0xE0A00000), "st1d": ("d", 0xE0E00000)}


class SmeMixin:
    """SME mnemonics; mixed into `Assembler` before `SveMixin` (SME ``ld1w``... fall through to SVE
    for Z-register operands)."""

    # == mode changes ==========================================================
    def _sme_mode(self, mn: str, which: str | None, start: int) -> None:
        """MSR (immediate) to SVCR: SMSTART / SMSTOP {SM | ZA}."""
        if which not in _SVCR:
            raise fail(mn, "mode", "None (both), 'sm' or 'za'", repr(which))
        crm = _SVCR[which] << 1 | start
        self.emit(0xD503407F | crm << 8, mn + ("" if which is None else f" {which}"))

    def smstart(self, which: str | None = None) -> None:
        """``smstart {sm|za}``: enter streaming mode (``sm``), enable ZA (``za``) or both (None).
        Entering streaming mode zeroes Z0-Z31 (so d8-d15), P0-P15 and FFR; enabling ZA zeroes ZA."""
        self._sme_mode("smstart", which, 1)

    def smstop(self, which: str | None = None) -> None:
        """``smstop {sm|za}``: leave streaming mode (``sm``; zeroes Z, P), disable ZA or both."""
        self._sme_mode("smstop", which, 0)

    def rdsvl(self, rd: XReg, value: int) -> None:
        """``rdsvl xd, #imm``: xd = imm x streaming vector length in bytes (imm -32..31)."""
        d = xreg("rdsvl", "Rd", rd)
        imm("rdsvl", "imm", value, -32, 31)
        self.emit(0x04BF5800 | (value & 0x3F) << 5 | d, f"rdsvl {rd}, #{value}")

    # == zero ==================================================================
    def zero(self, *tiles: ZA | ZaTile) -> None:
        """``zero {za}`` / ``zero {za0.s, za2.s}``: SME zero matrix (tiles of one element size; no
        tiles: an empty list)."""
        mask, sizes = 0, set()
        for i, t in enumerate(tiles):
            if isinstance(t, ZA):
                mask, esize = 0xFF, "za"
            else:
                t = _tile("zero", f"tile {i}", t, ("b", "h", "s", "d"))
                esize = t.esize
                step = 8 // TILES[t.esize]  # 64-bit tiles per tile of this size
                mask |= sum(1 << (t.idx + j * TILES[t.esize]) for j in range(step))
            sizes.add(esize)
        if len(sizes) > 1:
            raise fail("zero", "tiles", "tiles of one element size (or za alone)", ", ".join(map(str, tiles)))
        self.emit(0xC0080000 | mask, "zero {" + ", ".join(map(str, tiles)) + "}")

    # == outer products ========================================================
    def _sme_fp_outer(self, mn: str, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, zm: ZVec, sub: int) -> None:
        """SME floating-point outer product (FMOPA/FMOPS non-widening and widening, BFMOPA/BFMOPS):
        ``zada += / -= zn (x) zm`` over the active rows (pn) and columns (pm)."""
        name = mn[:-1] + "a"  # the table is keyed by the accumulating form
        tsizes = ("s", "d") if name == "fmopa" else ("s",)
        zsizes = ("s", "d", "h") if name == "fmopa" else ("h",)
        t = _tile(mn, "ZAda", zada, tsizes)
        es = _same_z(mn, zn, zm, zsizes)
        if (name, t.esize, es) not in _FP_OUTER:
            legal = "za.s with .s or .h sources, za.d with .d sources" if name == "fmopa" else "za.s with .h sources"
            raise fail(mn, "operands", legal, f"{zada}, {zn}, {zm}")
        n, m = _pmerge(mn, "Pn", pn), _pmerge(mn, "Pm", pm)
        word = _FP_OUTER[name, t.esize, es] | zm.idx << 16 | m << 13 | n << 10 | zn.idx << 5 | sub << 4 | t.idx
        self.emit(word, f"{mn} {zada}, {pn}, {pm}, {zn}, {zm}")

    def fmopa(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fmopa za<n>.s|d, pn/m, pm/m, zn, zm``: tile += outer product of zn (rows) and zm
        (columns); ``.s`` tile with ``.s`` or (widening) ``.h`` sources, ``.d`` tile with ``.d``."""
        self._sme_fp_outer("fmopa", zada, pn, pm, zn, zm, 0)

    def fmops(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fmops``: as `fmopa`, subtracting the outer product."""
        self._sme_fp_outer("fmops", zada, pn, pm, zn, zm, 1)

    def bfmopa(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, zm: ZVec) -> None:
        """``bfmopa za<n>.s, pn/m, pm/m, zn.h, zm.h``: fp32 tile += outer product of bf16 pairs."""
        self._sme_fp_outer("bfmopa", zada, pn, pm, zn, zm, 0)

    def bfmops(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, zm: ZVec) -> None:
        """``bfmops``: as `bfmopa`, subtracting."""
        self._sme_fp_outer("bfmops", zada, pn, pm, zn, zm, 1)

    # == add vector to array ===================================================
    def _sme_add_vector(self, mn: str, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec, vertical: int) -> None:
        """SME add vector to array (ADDHA, ADDVA; .d needs FEAT_SME_I16I64): every row (ADDHA) or
        column (ADDVA) of the integer tile += zn, under pn (rows) and pm (columns)."""
        t = _tile(mn, "ZAda", zada, ("s", "d"))
        zvec(mn, "Zn", zn, (t.esize,))
        n, m = _pmerge(mn, "Pn", pn), _pmerge(mn, "Pm", pm)
        base = 0xC0900000 if t.esize == "s" else 0xC0D00000
        word = base | vertical << 16 | m << 13 | n << 10 | zn.idx << 5 | t.idx
        self.emit(word, f"{mn} {zada}, {pn}, {pm}, {zn}")

    def addha(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec) -> None:
        """``addha za<n>.s|d, pn/m, pm/m, zn``: add zn to each row (horizontal slice) of the tile."""
        self._sme_add_vector("addha", zada, pn, pm, zn, 0)

    def addva(self, zada: ZaTile, pn: PQual, pm: PQual, zn: ZVec) -> None:
        """``addva za<n>.s|d, pn/m, pm/m, zn``: add zn to each column (vertical slice) of the tile."""
        self._sme_add_vector("addva", zada, pn, pm, zn, 1)

    # == tile slices to and from memory ========================================
    def _sme_ldst_slice(self, mn: str, za_slice: ZaSlice, pg: PQual | PReg, m: Mem) -> None:
        """SME load/store tile slice (LD1W/LD1D/ST1W/ST1D (scalar plus scalar)): one horizontal or
        vertical slice from / to ``[Xn|SP{, Xm, lsl #size}]`` (Xm omitted: xzr)."""
        es, base = _LDST[mn]
        s, rs, field = _slice(mn, "ZAt", za_slice, (es,))
        load = mn.startswith("ld")
        if load:
            if not isinstance(pg, PQual) or pg.qual != "z" or pg.idx > 7:
                raise fail(mn, "Pg", "a predicate p0/z..p7/z", pg)
        elif not isinstance(pg, PReg) or pg.idx > 7:
            raise fail(mn, "Pg", "a predicate p0..p7", pg)
        shift = SIZE_BITS[es]
        legal = f"[Xn|SP] or [Xn|SP, Xm, lsl #{shift}]"
        if not isinstance(m, Mem) or m.mode != "offset" or m.mul_vl:
            raise fail(mn, "address", legal, m)
        rn = xreg(mn, "address base", m.base, sp=True)
        if m.reg_offset:
            if not isinstance(m.offset, XReg) or m.extend != "lsl" or m.amount != shift:
                raise fail(mn, "address", legal, m)
            rm = xreg(mn, "address index Xm", m.offset)
        elif m.offset != 0:
            raise fail(mn, "address", legal, m)
        else:
            rm = 31
        word = base | rm << 16 | s.vertical << 15 | rs << 13 | pg.idx << 10 | rn << 5 | field
        self.emit(word, f"{mn} {{{s}}}, {pg}, {m}")

    def _sme_or_sve_ldst(self, mn: str, first: object, pg: object, m: Mem) -> None:
        if isinstance(first, ZaSlice):
            self._sme_ldst_slice(mn, first, pg, m)
        else:
            getattr(super(), mn)(first, pg, m)  # SVE form

    def ld1w(self, zt: ZaSlice | ZVec, pg: PQual, m: Mem) -> None:
        """``ld1w {za<n><h|v>.s[ws, off]}, pg/z, [xn{, xm, lsl #2}]`` (SME), else the SVE form."""
        self._sme_or_sve_ldst("ld1w", zt, pg, m)

    def ld1d(self, zt: ZaSlice | ZVec, pg: PQual, m: Mem) -> None:
        """``ld1d {za<n><h|v>.d[ws, off]}, pg/z, [xn{, xm, lsl #3}]`` (SME), else the SVE form."""
        self._sme_or_sve_ldst("ld1d", zt, pg, m)

    def st1w(self, zt: ZaSlice | ZVec, pg: PReg, m: Mem) -> None:
        """``st1w {za<n><h|v>.s[ws, off]}, pg, [xn{, xm, lsl #2}]`` (SME), else the SVE form."""
        self._sme_or_sve_ldst("st1w", zt, pg, m)

    def st1d(self, zt: ZaSlice | ZVec, pg: PReg, m: Mem) -> None:
        """``st1d {za<n><h|v>.d[ws, off]}, pg, [xn{, xm, lsl #3}]`` (SME), else the SVE form."""
        self._sme_or_sve_ldst("st1d", zt, pg, m)

    # == moves between Z and tile slices =======================================
    def mova(self, dst: ZVec | ZaSlice, pg: PQual, src: ZaSlice | ZVec) -> None:
        """``mova zd.<T>, pg/m, za<n><h|v>.<T>[ws, off]`` (tile slice to vector) or ``mova
        za<n><h|v>.<T>[ws, off], pg/m, zn.<T>`` (vector to tile slice); T in b/h/s/d."""
        g = _pmerge("mova", "Pg", pg)
        if isinstance(dst, ZVec):  # SME extract row or column (MOVA tile to vector)
            zvec("mova", "Zd", dst, ("b", "h", "s", "d"))
            s, rs, field = _slice("mova", "ZAn", src, (dst.esize,))
            word = 0xC0020000 | SIZE_BITS[s.esize] << 22 | s.vertical << 15 | rs << 13 | g << 10 | field << 5
            self.emit(word | dst.idx, f"mova {dst}, {pg}, {s}")
            return
        s, rs, field = _slice("mova", "ZAd", dst, ("b", "h", "s", "d"))  # SME insert row or column
        zvec("mova", "Zn", src, (s.esize,))
        word = 0xC0000000 | SIZE_BITS[s.esize] << 22 | s.vertical << 15 | rs << 13 | g << 10 | src.idx << 5 | field
        self.emit(word, f"mova {s}, {pg}, {src}")

    # == predicate select ======================================================
    def psel(self, pd: PReg, pn: PReg, pm: PElem) -> None:
        """``psel pd, pn, pm.<T>[wv, imm]``: pd = pn when element ``(wv + imm) mod elements`` of pm
        is active, else all false (wv w12..w15; imm b 0..15, h 0..7, s 0..3, d 0..1)."""
        for name, r in (("Pd", pd), ("Pn", pn)):
            if not isinstance(r, PReg):
                raise fail("psel", name, "a predicate p0..p15", r)
        if not isinstance(pm, PElem):
            raise fail("psel", "Pm", "an indexed predicate p0..p15.<b|h|s|d>[w12..w15, imm]", pm)
        rv = _slice_reg("psel", "Pm", pm.wv)
        lg = SIZE_BITS[pm.esize]
        imm("psel", "Pm index", pm.index, 0, (16 >> lg) - 1)
        tsz = pm.index << (lg + 1) | 1 << lg  # i1:tszh:tszl
        word = 0x25204000 | (tsz >> 3) << 22 | (tsz & 7) << 18 | rv << 16 | pn.idx << 10 | pm.idx << 5 | pd.idx
        self.emit(word, f"psel {pd}, {pn}, {pm}")
