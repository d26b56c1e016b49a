"""AArch64 SVE encoders.

One private helper per encoding class of the Arm ARM (the class name is in
its docstring), thin mnemonic methods on top. Mnemonics that SVE shares with
NEON or the base ISA (``fmla``, ``fadd``, ``dup``, ``mov``, ``zip1``,
``ldr``...) are spelled ``sve_<mnemonic>`` here; the listing text is always
the real mnemonic.

    a.ptrue(p0.s)
    a.ld1w(z0.s, p0.z, mem(x0, vl=-8))
    a.sve_fmla(z0.s, p0.m, z1.s, z2.s)
    a.sve_fmla(z0.s, z1.s, z2.s[3])
    a.st1w(z0.s, p0, mem(x1, x2, "lsl", 2))
"""

from __future__ import annotations

from asm.aarch64.memory import Mem
from asm.aarch64.operands import (
    SIZE_BITS,
    fail,
    gpr,
    imm,
    pgov,
    pvec,
    same_esize,
    same_sf,
    scalar,
    xreg,
    zelem,
    zvec,
)
from asm.aarch64.registers import PQual, PReg, PVec, ScalarReg, WReg, XReg, ZElem, ZReg, ZVec
from asm.errors import EncodingError

# predicate constraint patterns (PTRUE, CNT*, INC*): name -> code; 14..28 have no name
PATTERNS = {
    "pow2": 0,
    "vl1": 1,
    "vl2": 2,
    "vl3": 3,
    "vl4": 4,
    "vl5": 5,
    "vl6": 6,
    "vl7": 7,
    "vl8": 8,
    "vl16": 9,
    "vl32": 10,
    "vl64": 11,
    "vl128": 12,
    "vl256": 13,
    "mul4": 29,
    "mul3": 30,
    "all": 31,
}
PATTERN_NAMES = {v: k for k, v in PATTERNS.items()}

FP_SIZES = ("h", "s", "d")
ALL_SIZES = ("b", "h", "s", "d")
_MSZ = {"b": 0, "h": 1, "w": 2, "d": 3}  # memory element size (ld1b/h/w/d)

# SVE floating-point arithmetic (predicated): opc
_FP_PRED_OPC = {
    "fadd": 0b0000,
    "fsub": 0b0001,
    "fmul": 0b0010,
    "fsubr": 0b0011,
    "fmaxnm": 0b0100,
    "fminnm": 0b0101,
    "fmax": 0b0110,
    "fmin": 0b0111,
    "fdivr": 0b1100,
    "fdiv": 0b1101,
}
# SVE floating-point arithmetic with immediate (predicated): opc, (imm for i1=0, imm for i1=1)
_FP_IMM = {
    "fadd": (0b000, (0.5, 1.0)),
    "fsub": (0b001, (0.5, 1.0)),
    "fmul": (0b010, (0.5, 2.0)),
    "fsubr": (0b011, (0.5, 1.0)),
    "fmaxnm": (0b100, (0.0, 1.0)),
    "fminnm": (0b101, (0.0, 1.0)),
    "fmax": (0b110, (0.0, 1.0)),
    "fmin": (0b111, (0.0, 1.0)),
}
# SVE floating-point arithmetic (unpredicated): opc
_FP_UNPRED_OPC = {"fadd": 0b000, "fsub": 0b001, "fmul": 0b010}
# SVE floating-point recursive reduction: opc
_FP_REDUCE_OPC = {"faddv": 0b000, "fmaxnmv": 0b100, "fminnmv": 0b101, "fmaxv": 0b110, "fminv": 0b111}
# SVE permute vector / predicate elements: opc (predicate form: opc<1:0>:H)
_PERMUTE_OPC = {"zip1": 0, "zip2": 1, "uzp1": 2, "uzp2": 3, "trn1": 4, "trn2": 5}
# SVE bitwise logical operations (unpredicated): opc
_LOGICAL_OPC = {"and": 0, "orr": 1, "eor": 2, "bic": 3}
# SVE integer compare scalar count and limit: mnemonic -> (U, lt, eq)
_WHILE = {
    "whilelt": (0, 1, 0),
    "whilele": (0, 1, 1),
    "whilelo": (1, 1, 0),
    "whilels": (1, 1, 1),
    "whilege": (0, 0, 0),
    "whilegt": (0, 0, 1),
    "whilehs": (1, 0, 0),
    "whilehi": (1, 0, 1),
}


# -- SVE operand checks --------------------------------------------------------
def _pattern(mn: str, pattern: str | int) -> int:
    """A predicate constraint: a name (``"vl8"``, ``"all"``...) or ``#imm`` 0..31."""
    if isinstance(pattern, str):
        if pattern.lower() not in PATTERNS:
            raise fail(mn, "pattern", "one of " + ", ".join(PATTERNS) + " or an int 0..31", repr(pattern))
        return PATTERNS[pattern.lower()]
    return imm(mn, "pattern", pattern, 0, 31)


def _pattern_text(code: int) -> str:
    return PATTERN_NAMES.get(code, f"#{code}")


def _count_suffix(code: int, mul: int) -> str:
    """``, <pattern>, mul #<imm>`` with LLVM's defaults (all, 1) left out."""
    if code == 31 and mul == 1:
        return ""
    return f", {_pattern_text(code)}" + (f", mul #{mul}" if mul != 1 else "")


def _zt(mn: str, zt: object, sizes: tuple[str, ...]) -> ZVec:
    """The transfer register of a load/store: ``z0.s`` or ``[z0.s]``."""
    if isinstance(zt, (list, tuple)):
        if len(zt) != 1:
            raise fail(mn, "Zt", "a single SVE vector (list of one)", zt)
        zt = zt[0]
    return zvec(mn, "Zt", zt, sizes)


def _base(mn: str, m: object) -> int:
    """The base of an SVE memory operand: X0..X30 or SP; returns its number."""
    if not isinstance(m, Mem) or m.mode != "offset":
        raise fail(mn, "address", "a memory operand mem(...) without writeback", m)
    return xreg(mn, "address base", m.base, sp=True)


def _mem_vl(mn: str, m: object, lo: int, hi: int) -> tuple[int, int]:
    """``[Xn|SP{, #imm, mul vl}]``; returns (Rn, imm)."""
    rn = _base(mn, m)
    if m.reg_offset or (m.offset != 0 and not m.mul_vl):
        raise fail(mn, "address", f"[Xn|SP, #imm, mul vl] with imm in {lo}..{hi} (mem(xn, vl=imm))", m)
    return rn, imm(mn, "address offset (mul vl)", m.offset, lo, hi)


def _mem_imm(mn: str, m: object, lo: int, hi: int, step: int) -> tuple[int, int]:
    """``[Xn|SP{, #imm}]`` with a byte offset; returns (Rn, imm // step)."""
    rn = _base(mn, m)
    if m.reg_offset or m.mul_vl:
        raise fail(mn, "address", f"[Xn|SP, #imm] with imm in {lo}..{hi} in steps of {step}", m)
    return rn, imm(mn, "address offset", m.offset, lo, hi, step) // step


def _mem_rr(mn: str, m: object, shift: int) -> tuple[int, int]:
    """``[Xn|SP, Xm{, lsl #shift}]``; returns (Rn, Rm)."""
    rn = _base(mn, m)
    want_ext = "lsl" if shift else None
    want_amt = shift if shift else None
    ok = m.reg_offset and isinstance(m.offset, XReg) and m.extend == want_ext and m.amount == want_amt
    if not ok:
        sh = f", lsl #{shift}" if shift else ""
        raise fail(mn, "address", f"[Xn|SP, Xm{sh}]", m)
    return rn, xreg(mn, "address index Xm", m.offset, zr=False)


def _mem_zoff(mn: str, m: Mem, esize: str, msz: int) -> tuple[int, int, int, int]:
    """``[Xn|SP, Zm.s, uxtw|sxtw{ #msz}]`` (``.s`` data) or ``[Xn|SP, Zm.d{, lsl #msz}]`` (``.d``);
    returns (Rn, Zm, xs: 1 for sxtw, scaled)."""
    rn = _base(mn, m)
    zm, ext, amount = m.offset, m.extend, m.amount
    if esize == "s":
        legal = "[Xn|SP, Zm.s, uxtw|sxtw" + (f"{{ #{msz}}}]" if msz else "]")
        ok = zm.esize == "s" and ext in ("uxtw", "sxtw") and amount in ((None, msz) if msz else (None,))
        xs = int(ext == "sxtw")
    else:
        legal = "[Xn|SP, Zm.d" + (f"{{, lsl #{msz}}}]" if msz else "]")
        ok = zm.esize == "d" and (ext is None or (msz and ext == "lsl" and amount == msz))
        xs = 0
    if not ok:
        raise fail(mn, "address", legal, m)
    return rn, zm.idx, xs, int(amount is not None)


def _same(mn: str, what: str, a: object, b: object) -> None:
    if a != b:
        raise EncodingError(f"{mn}: {what} must be the same register (destructive form), got {a} and {b}")


def _fp_imm(mn: str, value: object, allowed: tuple[float, float]) -> int:
    """An FP immediate from a two-value set; returns i1."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value in allowed:
        return allowed.index(value)
    raise fail(mn, "imm", "#" + " or #".join(f"{v:.1f}" for v in allowed), value)


def _preg(mn: str, operand: str, reg: object) -> int:
    """A bare predicate p0..p15."""
    if not isinstance(reg, PReg):
        raise fail(mn, operand, "a predicate p0..p15", reg)
    return reg.idx


class SveMixin:
    """SVE mnemonics; mixed into `Assembler` (which provides `emit`)."""

    # == predicates ==========================================================
    def _sve_pred_init(self, mn: str, pd: PVec, pattern: str | int, s: int) -> None:
        """SVE predicate initialize (PTRUE, PTRUES)."""
        pvec(mn, "Pd", pd)
        code = _pattern(mn, pattern)
        word = 0x2518E000 | SIZE_BITS[pd.esize] << 22 | s << 16 | code << 5 | pd.idx
        suffix = "" if code == 31 else f", {_pattern_text(code)}"
        self.emit(word, f"{mn} {pd}{suffix}")

    def ptrue(self, pd: PVec, pattern: str | int = "all") -> None:
        """``ptrue pd.<T>{, pattern}``: set the elements selected by ``pattern``."""
        self._sve_pred_init("ptrue", pd, pattern, 0)

    def ptrues(self, pd: PVec, pattern: str | int = "all") -> None:
        """``ptrues pd.<T>{, pattern}``: ptrue that also sets the flags."""
        self._sve_pred_init("ptrues", pd, pattern, 1)

    def pfalse(self, pd: PVec) -> None:
        """``pfalse pd.b``: SVE predicate zero."""
        pvec("pfalse", "Pd", pd, ("b",))
        self.emit(0x2518E400 | pd.idx, f"pfalse {pd}")

    def _sve_while(self, mn: str, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """SVE integer compare scalar count and limit (WHILE*)."""
        pvec(mn, "Pd", pd)
        n, _ = gpr(mn, "Rn", rn)
        m, _ = gpr(mn, "Rm", rm)
        sf = same_sf(mn, Rn=rn, Rm=rm)
        u, lt, eq = _WHILE[mn]
        word = 0x25200000 | SIZE_BITS[pd.esize] << 22 | m << 16 | sf << 12 | u << 11 | lt << 10 | n << 5 | eq << 4
        self.emit(word | pd.idx, f"{mn} {pd}, {rn}, {rm}")

    def whilelt(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilelt pd.<T>, rn, rm`` (signed <)."""
        self._sve_while("whilelt", pd, rn, rm)

    def whilele(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilele pd.<T>, rn, rm`` (signed <=)."""
        self._sve_while("whilele", pd, rn, rm)

    def whilelo(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilelo pd.<T>, rn, rm`` (unsigned <)."""
        self._sve_while("whilelo", pd, rn, rm)

    def whilels(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilels pd.<T>, rn, rm`` (unsigned <=)."""
        self._sve_while("whilels", pd, rn, rm)

    def whilege(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilege pd.<T>, rn, rm`` (SVE2, signed >=, decrementing)."""
        self._sve_while("whilege", pd, rn, rm)

    def whilegt(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilegt pd.<T>, rn, rm`` (SVE2, signed >, decrementing)."""
        self._sve_while("whilegt", pd, rn, rm)

    def whilehs(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilehs pd.<T>, rn, rm`` (SVE2, unsigned >=, decrementing)."""
        self._sve_while("whilehs", pd, rn, rm)

    def whilehi(self, pd: PVec, rn: XReg | WReg, rm: XReg | WReg) -> None:
        """``whilehi pd.<T>, rn, rm`` (SVE2, unsigned >, decrementing)."""
        self._sve_while("whilehi", pd, rn, rm)

    def ptest(self, pg: PReg, pn: PVec) -> None:
        """``ptest pg, pn.b``: SVE predicate test (sets NZCV)."""
        g = _preg("ptest", "Pg", pg)
        pvec("ptest", "Pn", pn, ("b",))
        self.emit(0x2550C000 | g << 10 | pn.idx << 5, f"ptest {pg}, {pn}")

    def cntp(self, rd: XReg, pg: PReg, pn: PVec) -> None:
        """``cntp xd, pg, pn.<T>``: SVE predicate count (active elements of pn under pg)."""
        d = xreg("cntp", "Rd", rd)
        g = _preg("cntp", "Pg", pg)
        pvec("cntp", "Pn", pn)
        word = 0x25208000 | SIZE_BITS[pn.esize] << 22 | g << 10 | pn.idx << 5 | d
        self.emit(word, f"cntp {rd}, {pg}, {pn}")

    def _sve_pred_logical(self, mn: str, text: str, pd: int, pg: int, pn: int, pm: int, op: int, o2: int) -> None:
        """SVE predicate logical operations (AND, ORR, SEL ... on .b predicates)."""
        word = 0x25004000 | op << 23 | pm << 16 | pg << 10 | o2 << 9 | pn << 5 | o2 << 4 | pd
        self.emit(word, text)

    def _sve_sel_p(self, pd: PVec, pg: PReg, pn: PVec, pm: PVec) -> None:
        for name, r in (("Pd", pd), ("Pn", pn), ("Pm", pm)):
            pvec("sel", name, r, ("b",))
        g = _preg("sel", "Pg", pg)
        self._sve_pred_logical("sel", f"sel {pd}, {pg}, {pn}, {pm}", pd.idx, g, pn.idx, pm.idx, 0, 1)

    # == element count =======================================================
    def _sve_elem_count(self, mn: str, rd: XReg, pattern: str | int, mul: int) -> None:
        """SVE element count (CNTB/H/W/D)."""
        d = xreg(mn, "Rd", rd)
        code = _pattern(mn, pattern)
        imm(mn, "mul", mul, 1, 16)
        word = 0x0420E000 | _MSZ[mn[-1]] << 22 | (mul - 1) << 16 | code << 5 | d
        self.emit(word, f"{mn} {rd}{_count_suffix(code, mul)}")

    def cntb(self, rd: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``cntb xd{, pattern{, mul #imm}}``: number of bytes in a vector."""
        self._sve_elem_count("cntb", rd, pattern, mul)

    def cnth(self, rd: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``cnth xd{, pattern{, mul #imm}}``: number of halfwords in a vector."""
        self._sve_elem_count("cnth", rd, pattern, mul)

    def cntw(self, rd: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``cntw xd{, pattern{, mul #imm}}``: number of words in a vector."""
        self._sve_elem_count("cntw", rd, pattern, mul)

    def cntd(self, rd: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``cntd xd{, pattern{, mul #imm}}``: number of doublewords in a vector."""
        self._sve_elem_count("cntd", rd, pattern, mul)

    def _sve_incdec_scalar(self, mn: str, rdn: XReg, pattern: str | int, mul: int) -> None:
        """SVE inc/dec register by element count (INC*/DEC* Xdn)."""
        d = xreg(mn, "Rdn", rdn)
        code = _pattern(mn, pattern)
        imm(mn, "mul", mul, 1, 16)
        dec = 1 if mn.startswith("dec") else 0
        word = 0x0430E000 | _MSZ[mn[-1]] << 22 | (mul - 1) << 16 | dec << 10 | code << 5 | d
        self.emit(word, f"{mn} {rdn}{_count_suffix(code, mul)}")

    def incb(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``incb xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("incb", rdn, pattern, mul)

    def inch(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``inch xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("inch", rdn, pattern, mul)

    def incw(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``incw xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("incw", rdn, pattern, mul)

    def incd(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``incd xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("incd", rdn, pattern, mul)

    def decb(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``decb xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("decb", rdn, pattern, mul)

    def dech(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``dech xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("dech", rdn, pattern, mul)

    def decw(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``decw xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("decw", rdn, pattern, mul)

    def decd(self, rdn: XReg, pattern: str | int = "all", mul: int = 1) -> None:
        """``decd xdn{, pattern{, mul #imm}}``."""
        self._sve_incdec_scalar("decd", rdn, pattern, mul)

    # == stack frame =========================================================
    def _sve_stack_alloc(self, mn: str, rd: XReg, rn: XReg, value: int, op: int) -> None:
        """SVE stack frame adjustment (ADDVL, ADDPL)."""
        d = xreg(mn, "Rd", rd, sp=True)
        n = xreg(mn, "Rn", rn, sp=True)
        imm(mn, "imm", value, -32, 31)
        word = 0x04205000 | op << 22 | n << 16 | (value & 0x3F) << 5 | d
        self.emit(word, f"{mn} {rd}, {rn}, #{value}")

    def addvl(self, rd: XReg, rn: XReg, value: int) -> None:
        """``addvl xd|sp, xn|sp, #imm``: add ``imm`` (-32..31) times the vector length in bytes."""
        self._sve_stack_alloc("addvl", rd, rn, value, 0)

    def addpl(self, rd: XReg, rn: XReg, value: int) -> None:
        """``addpl xd|sp, xn|sp, #imm``: add ``imm`` (-32..31) times the predicate length in bytes."""
        self._sve_stack_alloc("addpl", rd, rn, value, 1)

    def rdvl(self, rd: XReg, value: int) -> None:
        """``rdvl xd, #imm``: SVE stack frame size, ``imm`` (-32..31) times the vector length."""
        d = xreg("rdvl", "Rd", rd)
        imm("rdvl", "imm", value, -32, 31)
        self.emit(0x04BF5000 | (value & 0x3F) << 5 | d, f"rdvl {rd}, #{value}")

    # == loads and stores ====================================================
    def _sve_ld_si(self, mn: str, zt: ZVec, pg: int, rn: int, offset: int, dtype: int, text: str) -> None:
        """SVE contiguous load (scalar plus immediate)."""
        word = 0xA400A000 | dtype << 21 | (offset & 0xF) << 16 | pg << 10 | rn << 5 | zt.idx
        self.emit(word, text)

    def _sve_ld_ss(self, mn: str, zt: ZVec, pg: int, rn: int, rm: int, dtype: int, text: str) -> None:
        """SVE contiguous load (scalar plus scalar)."""
        word = 0xA4004000 | dtype << 21 | rm << 16 | pg << 10 | rn << 5 | zt.idx
        self.emit(word, text)

    def _sve_ldst1(self, mn: str, zt: ZVec, pg: PQual | PReg, m: Mem, load: bool) -> None:
        """``ld1*``/``st1*``: the addressing mode picks the encoding class (vector offsets: gather
        or scatter; ``[xn, xm]``: scalar plus scalar; else scalar plus immediate, -8..7 VL)."""
        msz = _MSZ[mn[-1]]
        zt = _zt(mn, zt, ALL_SIZES[msz:])
        g = pgov(mn, "Pg", pg, "z" if load else None)
        field = msz << 2 | SIZE_BITS[zt.esize] if load else msz  # loads encode dtype, stores msz
        text = f"{mn} {{{zt}}}, {pg}, {m}"
        if isinstance(m, Mem) and m.vec_offset:
            (self._sve_gather if load else self._sve_scatter)(mn, zt, g, m, msz, text)
        elif isinstance(m, Mem) and m.reg_offset:
            rn, rm = _mem_rr(mn, m, msz)
            (self._sve_ld_ss if load else self._sve_st_ss)(mn, zt, g, rn, rm, field, text)
        else:
            rn, off = _mem_vl(mn, m, -8, 7)
            (self._sve_ld_si if load else self._sve_st_si)(mn, zt, g, rn, off, field, text)

    def ld1b(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1b {zt.<T>}, pg/z, [xn, #imm, mul vl]`` or ``[xn, xm]``."""
        self._sve_ldst1("ld1b", zt, pg, m, load=True)

    def ld1h(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1h {zt.<T>}, pg/z, [xn, #imm, mul vl]`` or ``[xn, xm, lsl #1]``."""
        self._sve_ldst1("ld1h", zt, pg, m, load=True)

    def ld1w(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1w {zt.s|d}, pg/z, [xn, #imm, mul vl]`` (imm -8..7) or ``[xn, xm, lsl #2]``."""
        self._sve_ldst1("ld1w", zt, pg, m, load=True)

    def ld1d(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1d {zt.d}, pg/z, [xn, #imm, mul vl]`` (imm -8..7) or ``[xn, xm, lsl #3]``."""
        self._sve_ldst1("ld1d", zt, pg, m, load=True)

    def _sve_st_si(self, mn: str, zt: ZVec, pg: int, rn: int, offset: int, msz: int, text: str) -> None:
        """SVE contiguous store (scalar plus immediate)."""
        word = 0xE400E000 | msz << 23 | SIZE_BITS[zt.esize] << 21 | (offset & 0xF) << 16 | pg << 10 | rn << 5
        self.emit(word | zt.idx, text)

    def _sve_st_ss(self, mn: str, zt: ZVec, pg: int, rn: int, rm: int, msz: int, text: str) -> None:
        """SVE contiguous store (scalar plus scalar)."""
        word = 0xE4004000 | msz << 23 | SIZE_BITS[zt.esize] << 21 | rm << 16 | pg << 10 | rn << 5
        self.emit(word | zt.idx, text)

    def st1b(self, zt: ZVec, pg: PReg, m: Mem) -> None:
        """``st1b {zt.<T>}, pg, [xn, #imm, mul vl]`` or ``[xn, xm]``."""
        self._sve_ldst1("st1b", zt, pg, m, load=False)

    def st1h(self, zt: ZVec, pg: PReg, m: Mem) -> None:
        """``st1h {zt.<T>}, pg, [xn, #imm, mul vl]`` or ``[xn, xm, lsl #1]``."""
        self._sve_ldst1("st1h", zt, pg, m, load=False)

    def st1w(self, zt: ZVec, pg: PReg, m: Mem) -> None:
        """``st1w {zt.s|d}, pg, [xn, #imm, mul vl]`` (imm -8..7) or ``[xn, xm, lsl #2]``."""
        self._sve_ldst1("st1w", zt, pg, m, load=False)

    def st1d(self, zt: ZVec, pg: PReg, m: Mem) -> None:
        """``st1d {zt.d}, pg, [xn, #imm, mul vl]`` (imm -8..7) or ``[xn, xm, lsl #3]``."""
        self._sve_ldst1("st1d", zt, pg, m, load=False)

    def _sve_gather(self, mn: str, zt: ZVec, pg: int, m: Mem, msz: int, text: str) -> None:
        """SVE 32-bit gather load (scalar plus 32-bit unscaled/scaled offsets) for ``.s``;
        SVE 64-bit gather load (scalar plus 64-bit unscaled/scaled offsets) for ``.d``."""
        rn, zm, xs, scaled = _mem_zoff(mn, m, zt.esize, msz)
        if zt.esize == "s":
            word = 0x84004000 | msz << 23 | xs << 22 | scaled << 21
        else:
            word = 0xC440C000 | msz << 23 | scaled << 21
        self.emit(word | zm << 16 | pg << 10 | rn << 5 | zt.idx, text)

    def _sve_scatter(self, mn: str, zt: ZVec, pg: int, m: Mem, msz: int, text: str) -> None:
        """SVE 32-bit scatter store (scalar plus 32-bit unscaled/scaled offsets) for ``.s``;
        SVE 64-bit scatter store (scalar plus 64-bit unscaled/scaled offsets) for ``.d``."""
        rn, zm, xs, scaled = _mem_zoff(mn, m, zt.esize, msz)
        if zt.esize == "s":
            word = 0xE4408000 | msz << 23 | scaled << 21 | xs << 14
        else:
            word = 0xE400A000 | msz << 23 | scaled << 21
        self.emit(word | zm << 16 | pg << 10 | rn << 5 | zt.idx, text)

    def _sve_ld1r(self, mn: str, zt: ZVec, pg: PQual, m: Mem) -> None:
        """SVE load and broadcast element (LD1RB/H/W/D)."""
        msz = _MSZ[mn[-1]]
        zt = _zt(mn, zt, ALL_SIZES[msz:])
        g = pgov(mn, "Pg", pg, "z")
        rn, off = _mem_imm(mn, m, 0, 63 << msz, 1 << msz)
        dtype = msz << 2 | SIZE_BITS[zt.esize]
        word = 0x84408000 | (dtype >> 2) << 23 | off << 16 | (dtype & 3) << 13 | g << 10 | rn << 5 | zt.idx
        self.emit(word, f"{mn} {{{zt}}}, {pg}, {m}")

    def ld1rb(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rb {zt.<T>}, pg/z, [xn, #imm]`` (imm 0..63): broadcast one byte."""
        self._sve_ld1r("ld1rb", zt, pg, m)

    def ld1rh(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rh {zt.<T>}, pg/z, [xn, #imm]`` (imm 0..126 step 2): broadcast one halfword."""
        self._sve_ld1r("ld1rh", zt, pg, m)

    def ld1rw(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rw {zt.s|d}, pg/z, [xn, #imm]`` (imm 0..252 step 4): broadcast one word."""
        self._sve_ld1r("ld1rw", zt, pg, m)

    def ld1rd(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rd {zt.d}, pg/z, [xn, #imm]`` (imm 0..504 step 8): broadcast one doubleword."""
        self._sve_ld1r("ld1rd", zt, pg, m)

    def _sve_ld1rq_si(self, msz: int, zt: ZVec, pg: int, rn: int, offset: int, text: str) -> None:
        """SVE load and broadcast quadword (scalar plus immediate)."""
        word = 0xA4002000 | msz << 23 | (offset & 0xF) << 16 | pg << 10 | rn << 5 | zt.idx
        self.emit(word, text)

    def _sve_ld1rq_ss(self, msz: int, zt: ZVec, pg: int, rn: int, rm: int, text: str) -> None:
        """SVE load and broadcast quadword (scalar plus scalar)."""
        self.emit(0xA4000000 | msz << 23 | rm << 16 | pg << 10 | rn << 5 | zt.idx, text)

    def _sve_ld1rq(self, mn: str, zt: ZVec, pg: PQual, m: Mem) -> None:
        msz = _MSZ[mn[-1]]
        zt = _zt(mn, zt, (ALL_SIZES[msz],))
        g = pgov(mn, "Pg", pg, "z")
        text = f"{mn} {{{zt}}}, {pg}, {m}"
        if isinstance(m, Mem) and m.reg_offset:
            rn, rm = _mem_rr(mn, m, msz)
            self._sve_ld1rq_ss(msz, zt, g, rn, rm, text)
        else:
            rn, off = _mem_imm(mn, m, -128, 112, 16)
            self._sve_ld1rq_si(msz, zt, g, rn, off, text)

    def ld1rqb(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rqb {zt.b}, pg/z, [xn, #imm]`` (imm -128..112 step 16) or ``[xn, xm]``."""
        self._sve_ld1rq("ld1rqb", zt, pg, m)

    def ld1rqh(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rqh {zt.h}, pg/z, [xn, #imm]`` (imm -128..112 step 16) or ``[xn, xm, lsl #1]``."""
        self._sve_ld1rq("ld1rqh", zt, pg, m)

    def ld1rqw(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rqw {zt.s}, pg/z, [xn, #imm]`` (imm -128..112 step 16) or ``[xn, xm, lsl #2]``."""
        self._sve_ld1rq("ld1rqw", zt, pg, m)

    def ld1rqd(self, zt: ZVec, pg: PQual, m: Mem) -> None:
        """``ld1rqd {zt.d}, pg/z, [xn, #imm]`` (imm -128..112 step 16) or ``[xn, xm, lsl #3]``."""
        self._sve_ld1rq("ld1rqd", zt, pg, m)

    def _sve_ldr_str(self, mn: str, rt: ZReg | PReg, m: Mem, store: int) -> None:
        """SVE load/store vector or predicate register (LDR/STR Zt|Pt, [Xn{, #imm, mul vl}])."""
        if isinstance(rt, ZReg):
            vector = 1
        elif isinstance(rt, PReg):
            vector = 0
        else:
            raise fail(mn, "Rt", "a bare SVE vector z0..z31 or predicate p0..p15", rt)
        rn, off = _mem_vl(mn, m, -256, 255)
        off &= 0x1FF
        word = 0x85800000 | store * 0x60000000 | (off >> 3) << 16 | vector << 14 | (off & 7) << 10 | rn << 5 | rt.idx
        self.emit(word, f"{mn} {rt}, {m}")

    def sve_ldr(self, rt: ZReg | PReg, m: Mem) -> None:
        """``ldr zt|pt, [xn{, #imm, mul vl}]`` (imm -256..255): load a whole register."""
        self._sve_ldr_str("ldr", rt, m, 0)

    def sve_str(self, rt: ZReg | PReg, m: Mem) -> None:
        """``str zt|pt, [xn{, #imm, mul vl}]`` (imm -256..255): store a whole register."""
        self._sve_ldr_str("str", rt, m, 1)

    # == floating-point multiply-add =========================================
    def _sve_fp_mla_pred(self, mn: str, zda: ZVec, pg: PQual, zn: ZVec, zm: ZVec, opc: int) -> None:
        """SVE floating-point multiply-accumulate writing addend (FMLA, FMLS, FNMLA, FNMLS)."""
        zvec(mn, "Zda", zda, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        zvec(mn, "Zm", zm, FP_SIZES)
        es = same_esize(mn, Zda=zda, Zn=zn, Zm=zm)
        g = pgov(mn, "Pg", pg, "m")
        word = 0x65200000 | SIZE_BITS[es] << 22 | zm.idx << 16 | opc << 13 | g << 10 | zn.idx << 5 | zda.idx
        self.emit(word, f"{mn} {zda}, {pg}, {zn}, {zm}")

    def _sve_fp_mad_pred(self, mn: str, zdn: ZVec, pg: PQual, zm: ZVec, za: ZVec, opc: int) -> None:
        """SVE floating-point multiply-accumulate writing multiplicand (FMAD, FMSB, FNMAD, FNMSB)."""
        zvec(mn, "Zdn", zdn, FP_SIZES)
        zvec(mn, "Zm", zm, FP_SIZES)
        zvec(mn, "Za", za, FP_SIZES)
        es = same_esize(mn, Zdn=zdn, Zm=zm, Za=za)
        g = pgov(mn, "Pg", pg, "m")
        word = 0x65208000 | SIZE_BITS[es] << 22 | za.idx << 16 | opc << 13 | g << 10 | zm.idx << 5 | zdn.idx
        self.emit(word, f"{mn} {zdn}, {pg}, {zm}, {za}")

    @staticmethod
    def _sve_fp_index_fields(mn: str, zd: ZVec, zn: ZVec, zm: ZElem) -> int:
        """Size, index and Zm fields shared by the FP indexed classes (bits 23..16)."""
        zvec(mn, "Zd", zd, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        es = same_esize(mn, Zd=zd, Zn=zn)
        if es == "h":
            zelem(mn, "Zm", zm, "h", 7, 7)
            return (zm.index >> 2) << 22 | 1 << 21 | (zm.index & 3) << 19 | zm.idx << 16
        if es == "s":
            zelem(mn, "Zm", zm, "s", 7, 3)
            return 0b101 << 21 | zm.index << 19 | zm.idx << 16
        zelem(mn, "Zm", zm, "d", 15, 1)
        return 0b111 << 21 | zm.index << 20 | zm.idx << 16

    def _sve_fp_mla_idx(self, mn: str, zda: ZVec, zn: ZVec, zm: ZElem, op: int) -> None:
        """SVE floating-point multiply-add (indexed) (FMLA, FMLS)."""
        fields = self._sve_fp_index_fields(mn, zda, zn, zm)
        self.emit(0x64000000 | fields | op << 10 | zn.idx << 5 | zda.idx, f"{mn} {zda}, {zn}, {zm}")

    def _sve_fp_mul_idx(self, mn: str, zd: ZVec, zn: ZVec, zm: ZElem) -> None:
        """SVE floating-point multiply (indexed) (FMUL)."""
        fields = self._sve_fp_index_fields(mn, zd, zn, zm)
        self.emit(0x64002000 | fields | zn.idx << 5 | zd.idx, f"{mn} {zd}, {zn}, {zm}")

    def _sve_fma(self, mn: str, zda: ZVec, a: object, b: object, c: object, opc: int) -> None:
        if c is None:
            if isinstance(a, PQual):
                raise fail(mn, "operands", "zda, pg/m, zn, zm or zda, zn, zm.<T>[i]", f"{zda}, {a}, {b}")
            self._sve_fp_mla_idx(mn, zda, a, b, opc)
        else:
            self._sve_fp_mla_pred(mn, zda, a, b, c, opc)

    def sve_fmla(self, zda: ZVec, a: PQual | ZVec, b: ZVec | ZElem, c: ZVec | None = None) -> None:
        """``fmla zda, pg/m, zn, zm`` or, indexed, ``fmla zda, zn, zm.<T>[i]``: zda += zn * zm."""
        self._sve_fma("fmla", zda, a, b, c, 0)

    def sve_fmls(self, zda: ZVec, a: PQual | ZVec, b: ZVec | ZElem, c: ZVec | None = None) -> None:
        """``fmls zda, pg/m, zn, zm`` or, indexed, ``fmls zda, zn, zm.<T>[i]``: zda -= zn * zm."""
        self._sve_fma("fmls", zda, a, b, c, 1)

    def sve_mla(self, zda: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """``mla zda, pg/m, zn, zm``: zda += zn * zm, integers of any size (wrapping)."""
        zvec("mla", "Zda", zda, ("b", "h", "s", "d"))
        zvec("mla", "Zn", zn, ("b", "h", "s", "d"))
        zvec("mla", "Zm", zm, ("b", "h", "s", "d"))
        es = same_esize("mla", Zda=zda, Zn=zn, Zm=zm)
        g = pgov("mla", "Pg", pg, "m")
        word = 0x04004000 | SIZE_BITS[es] << 22 | zm.idx << 16 | g << 10 | zn.idx << 5 | zda.idx
        self.emit(word, f"mla {zda}, {pg}, {zn}, {zm}")

    def fnmla(self, zda: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fnmla zda, pg/m, zn, zm``: zda = -zda - zn * zm."""
        self._sve_fp_mla_pred("fnmla", zda, pg, zn, zm, 2)

    def fnmls(self, zda: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fnmls zda, pg/m, zn, zm``: zda = -zda + zn * zm."""
        self._sve_fp_mla_pred("fnmls", zda, pg, zn, zm, 3)

    def fmad(self, zdn: ZVec, pg: PQual, zm: ZVec, za: ZVec) -> None:
        """``fmad zdn, pg/m, zm, za``: zdn = za + zdn * zm."""
        self._sve_fp_mad_pred("fmad", zdn, pg, zm, za, 0)

    def fmsb(self, zdn: ZVec, pg: PQual, zm: ZVec, za: ZVec) -> None:
        """``fmsb zdn, pg/m, zm, za``: zdn = za - zdn * zm."""
        self._sve_fp_mad_pred("fmsb", zdn, pg, zm, za, 1)

    # == floating-point arithmetic ===========================================
    def _sve_fp_arith_pred(self, mn: str, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """SVE floating-point arithmetic (predicated), destructive: ``zdn, pg/m, zdn, zm``."""
        zvec(mn, "Zdn", zdn, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        zvec(mn, "Zm", zm, FP_SIZES)
        es = same_esize(mn, Zdn=zdn, Zn=zn, Zm=zm)
        _same(mn, "Zdn and Zn", zdn, zn)
        g = pgov(mn, "Pg", pg, "m")
        word = 0x65008000 | SIZE_BITS[es] << 22 | _FP_PRED_OPC[mn] << 16 | g << 10 | zm.idx << 5 | zdn.idx
        self.emit(word, f"{mn} {zdn}, {pg}, {zn}, {zm}")

    def _sve_fp_arith_imm_pred(self, mn: str, zdn: ZVec, pg: PQual, zn: ZVec, value: float) -> None:
        """SVE floating-point arithmetic with immediate (predicated): ``zdn, pg/m, zdn, #imm``."""
        zvec(mn, "Zdn", zdn, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        es = same_esize(mn, Zdn=zdn, Zn=zn)
        _same(mn, "Zdn and Zn", zdn, zn)
        g = pgov(mn, "Pg", pg, "m")
        opc, allowed = _FP_IMM[mn]
        i1 = _fp_imm(mn, value, allowed)
        word = 0x65188000 | SIZE_BITS[es] << 22 | opc << 16 | g << 10 | i1 << 5 | zdn.idx
        self.emit(word, f"{mn} {zdn}, {pg}, {zn}, #{allowed[i1]:.1f}")

    def _sve_fp_arith_unpred(self, mn: str, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """SVE floating-point arithmetic (unpredicated): ``zd, zn, zm``."""
        zvec(mn, "Zd", zd, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        zvec(mn, "Zm", zm, FP_SIZES)
        es = same_esize(mn, Zd=zd, Zn=zn, Zm=zm)
        word = 0x65000000 | SIZE_BITS[es] << 22 | zm.idx << 16 | _FP_UNPRED_OPC[mn] << 10 | zn.idx << 5 | zd.idx
        self.emit(word, f"{mn} {zd}, {zn}, {zm}")

    def _sve_fp_binop(self, mn: str, zd: ZVec, a: object, b: object, c: object) -> None:
        """Dispatch ``zd, zn, zm`` / ``zdn, pg/m, zdn, zm`` / ``zdn, pg/m, zdn, #imm``."""
        if c is None:
            if mn not in _FP_UNPRED_OPC:
                raise fail(mn, "operands", "zdn, pg/m, zdn, zm (predicated form only)", f"{zd}, {a}, {b}")
            self._sve_fp_arith_unpred(mn, zd, a, b)
        elif isinstance(c, (int, float)) and not isinstance(c, bool):
            if mn not in _FP_IMM:
                raise fail(mn, "Zm", "an SVE vector (no immediate form)", c)
            self._sve_fp_arith_imm_pred(mn, zd, a, b, c)
        else:
            self._sve_fp_arith_pred(mn, zd, a, b, c)

    def sve_fadd(self, zd: ZVec, a: ZVec | PQual, b: ZVec, c: ZVec | float | None = None) -> None:
        """``fadd zd, zn, zm``, ``fadd zdn, pg/m, zdn, zm`` or ``fadd zdn, pg/m, zdn, #0.5|#1.0``."""
        self._sve_fp_binop("fadd", zd, a, b, c)

    def sve_fsub(self, zd: ZVec, a: ZVec | PQual, b: ZVec, c: ZVec | float | None = None) -> None:
        """``fsub zd, zn, zm``, ``fsub zdn, pg/m, zdn, zm`` or ``fsub zdn, pg/m, zdn, #0.5|#1.0``."""
        self._sve_fp_binop("fsub", zd, a, b, c)

    def fsubr(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec | float) -> None:
        """``fsubr zdn, pg/m, zdn, zm|#0.5|#1.0``: zdn = zm - zdn."""
        self._sve_fp_binop("fsubr", zdn, pg, zn, zm)

    def sve_fmul(self, zd: ZVec, a: ZVec | PQual, b: ZVec | ZElem, c: ZVec | float | None = None) -> None:
        """``fmul zd, zn, zm``, ``fmul zd, zn, zm.<T>[i]``, ``fmul zdn, pg/m, zdn, zm|#0.5|#2.0``."""
        if c is None and isinstance(b, ZElem):
            self._sve_fp_mul_idx("fmul", zd, a, b)
        else:
            self._sve_fp_binop("fmul", zd, a, b, c)

    def sve_fdiv(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fdiv zdn, pg/m, zdn, zm``."""
        self._sve_fp_binop("fdiv", zdn, pg, zn, zm)

    def fdivr(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec) -> None:
        """``fdivr zdn, pg/m, zdn, zm``: zdn = zm / zdn."""
        self._sve_fp_binop("fdivr", zdn, pg, zn, zm)

    def sve_fmax(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec | float) -> None:
        """``fmax zdn, pg/m, zdn, zm|#0.0|#1.0``."""
        self._sve_fp_binop("fmax", zdn, pg, zn, zm)

    def sve_fmin(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec | float) -> None:
        """``fmin zdn, pg/m, zdn, zm|#0.0|#1.0``."""
        self._sve_fp_binop("fmin", zdn, pg, zn, zm)

    def sve_fmaxnm(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec | float) -> None:
        """``fmaxnm zdn, pg/m, zdn, zm|#0.0|#1.0``."""
        self._sve_fp_binop("fmaxnm", zdn, pg, zn, zm)

    def sve_fminnm(self, zdn: ZVec, pg: PQual, zn: ZVec, zm: ZVec | float) -> None:
        """``fminnm zdn, pg/m, zdn, zm|#0.0|#1.0``."""
        self._sve_fp_binop("fminnm", zdn, pg, zn, zm)

    # == floating-point reductions ===========================================
    def _sve_fp_reduce(self, mn: str, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """SVE floating-point recursive reduction (FADDV, FMAXNMV, FMAXV, FMINNMV, FMINV):
        ``vd, pg, zn`` with vd the scalar h/s/d register of zn's element size, pg p0..p7."""
        scalar(mn, "Vd", vd, FP_SIZES)
        zvec(mn, "Zn", zn, FP_SIZES)
        es = same_esize(mn, Vd=vd, Zn=zn)
        g = pgov(mn, "Pg", pg, None)
        word = 0x65002000 | SIZE_BITS[es] << 22 | _FP_REDUCE_OPC[mn] << 16 | g << 10 | zn.idx << 5 | vd.idx
        self.emit(word, f"{mn} {vd}, {pg}, {zn}")

    def faddv(self, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """``faddv <h|s|d>d, pg, zn.<T>``: the sum of zn's active lanes, added in recursive pairwise
        order (inactive lanes count as +0.0)."""
        self._sve_fp_reduce("faddv", vd, pg, zn)

    def sve_fmaxv(self, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """``fmaxv <h|s|d>d, pg, zn.<T>``: the maximum of zn's active lanes (inactive lanes count as -inf)."""
        self._sve_fp_reduce("fmaxv", vd, pg, zn)

    def sve_fminv(self, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """``fminv <h|s|d>d, pg, zn.<T>``: the minimum of zn's active lanes (inactive lanes count as +inf)."""
        self._sve_fp_reduce("fminv", vd, pg, zn)

    def sve_fmaxnmv(self, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """``fmaxnmv <h|s|d>d, pg, zn.<T>``: fmaxv ignoring quiet NaNs (inactive lanes count as the default NaN)."""
        self._sve_fp_reduce("fmaxnmv", vd, pg, zn)

    def sve_fminnmv(self, vd: ScalarReg, pg: PReg, zn: ZVec) -> None:
        """``fminnmv <h|s|d>d, pg, zn.<T>``: fminv ignoring quiet NaNs (inactive lanes count as the default NaN)."""
        self._sve_fp_reduce("fminnmv", vd, pg, zn)

    # == broadcast, move, select =============================================
    def _sve_dup_imm(self, mn: str, zd: ZVec, value: int) -> None:
        """SVE broadcast integer immediate (unpredicated): DUP Zd.<T>, #imm{, lsl #8}."""
        zvec(mn, "Zd", zd, ALL_SIZES)
        if isinstance(value, int) and not isinstance(value, bool) and -128 <= value <= 127:
            sh, imm8 = 0, value & 0xFF
        elif zd.esize != "b" and isinstance(value, int) and value % 256 == 0 and -32768 <= value <= 32512:
            sh, imm8 = 1, (value >> 8) & 0xFF
        else:
            rng = "-128..127" + ("" if zd.esize == "b" else " or a multiple of 256 in -32768..32512")
            raise fail(mn, "imm", rng, value)
        word = 0x2538C000 | SIZE_BITS[zd.esize] << 22 | sh << 13 | imm8 << 5 | zd.idx
        self.emit(word, f"{mn} {zd}, #{value}")

    def _sve_dup_gpr(self, mn: str, zd: ZVec, rn: XReg | WReg) -> None:
        """SVE broadcast general register: DUP Zd.<T>, Wn|WSP (Xn|SP for .d)."""
        zvec(mn, "Zd", zd, ALL_SIZES)
        want, desc = (XReg, "an X register or sp") if zd.esize == "d" else (WReg, "a W register or wsp")
        if not isinstance(rn, want):
            raise fail(mn, "Rn", desc, rn)
        n, _ = gpr(mn, "Rn", rn, sp=True)
        self.emit(0x05203800 | SIZE_BITS[zd.esize] << 22 | n << 5 | zd.idx, f"{mn} {zd}, {rn}")

    def _sve_dup_idx(self, mn: str, zd: ZVec, zn: ZElem) -> None:
        """SVE broadcast indexed element: DUP Zd.<T>, Zn.<T>[imm]."""
        zvec(mn, "Zd", zd, ALL_SIZES + ("q",))
        lg = "bhsdq".index(zd.esize)
        zelem(mn, "Zn", zn, zd.esize, 31, (64 >> lg) - 1)
        imm7 = zn.index << (lg + 1) | 1 << lg
        word = 0x05202000 | (imm7 >> 5) << 22 | (imm7 & 0x1F) << 16 | zn.idx << 5 | zd.idx
        self.emit(word, f"{mn} {zd}, {zn}")

    def _sve_logical_unpred(self, mn: str, zd: ZVec, zn: ZVec, zm: ZVec, text: str | None = None) -> None:
        """SVE bitwise logical operations (unpredicated): AND/ORR/EOR/BIC Zd.D, Zn.D, Zm.D."""
        for name, r in (("Zd", zd), ("Zn", zn), ("Zm", zm)):
            zvec(mn if text is None else "mov", name, r, ("d",))
        word = 0x04203000 | _LOGICAL_OPC[mn] << 22 | zm.idx << 16 | zn.idx << 5 | zd.idx
        self.emit(word, text or f"{mn} {zd}, {zn}, {zm}")

    def sve_and(self, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """``and zd.d, zn.d, zm.d``."""
        self._sve_logical_unpred("and", zd, zn, zm)

    def sve_orr(self, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """``orr zd.d, zn.d, zm.d``."""
        self._sve_logical_unpred("orr", zd, zn, zm)

    def sve_eor(self, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """``eor zd.d, zn.d, zm.d``."""
        self._sve_logical_unpred("eor", zd, zn, zm)

    def sve_bic(self, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """``bic zd.d, zn.d, zm.d``."""
        self._sve_logical_unpred("bic", zd, zn, zm)

    def _sve_sel_z(self, mn: str, zd: ZVec, pg: int, zn: ZVec, zm: ZVec, text: str) -> None:
        """SVE select vector elements (SEL Zd, Pg, Zn, Zm)."""
        es = same_esize(mn, Zd=zd, Zn=zn, Zm=zm)
        word = 0x0520C000 | SIZE_BITS[es] << 22 | zm.idx << 16 | pg << 10 | zn.idx << 5 | zd.idx
        self.emit(word, text)

    def sel(self, d: ZVec | PVec, pg: PReg, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``sel zd.<T>, pg, zn.<T>, zm.<T>`` (pg p0..p15) or ``sel pd.b, pg, pn.b, pm.b``."""
        if isinstance(d, PVec):
            self._sve_sel_p(d, pg, n, m)
            return
        for name, r in (("Zd", d), ("Zn", n), ("Zm", m)):
            zvec("sel", name, r, ALL_SIZES)
        g = _preg("sel", "Pg", pg)
        self._sve_sel_z("sel", d, g, n, m, f"sel {d}, {pg}, {n}, {m}")

    # == shifts ===============================================================
    def _sve_shift_imm_unpred(self, mn: str, zd: ZVec, zn: ZVec, shift: int, opc: int, left: bool) -> None:
        """SVE bitwise shift by immediate (unpredicated) (ASR, LSR, LSL): ``zd, zn, #shift``."""
        zvec(mn, "Zd", zd, ALL_SIZES)
        zvec(mn, "Zn", zn, ALL_SIZES)
        es = same_esize(mn, Zd=zd, Zn=zn)
        bits = 8 << SIZE_BITS[es]
        if left:
            imm(mn, "shift", shift, 0, bits - 1)
            value = bits + shift
        else:
            imm(mn, "shift", shift, 1, bits)
            value = 2 * bits - shift
        word = 0x04209000 | (value >> 5) << 22 | (value & 0x1F) << 16 | opc << 10 | zn.idx << 5 | zd.idx
        self.emit(word, f"{mn} {zd}, {zn}, #{shift}")

    def sve_lsl(self, zd: ZVec, zn: ZVec, shift: int) -> None:
        """``lsl zd.<T>, zn.<T>, #shift`` (shift 0..element bits - 1), unpredicated."""
        self._sve_shift_imm_unpred("lsl", zd, zn, shift, 0b11, True)

    # == index generation =====================================================
    def _sve_index(self, zd: ZVec, start: int | XReg | WReg, step: int | XReg | WReg) -> None:
        """SVE index generation: INDEX (immediates), (immediate, scalar), (scalar, immediate), (scalars)."""
        zvec("index", "Zd", zd, ALL_SIZES)
        want, desc = (XReg, "an X register") if zd.esize == "d" else (WReg, "a W register")
        fields, text = [], []
        for name, v in (("start", start), ("step", step)):
            if isinstance(v, int) and not isinstance(v, bool):
                fields.append((0, imm("index", name, v, -16, 15) & 0x1F))
                text.append(f"#{v}")
            elif isinstance(v, want):
                fields.append((1, gpr("index", name, v)[0]))
                text.append(v.name)
            else:
                raise fail("index", name, f"an immediate -16..15 or {desc}", v)
        (r_start, start_f), (r_step, step_f) = fields
        word = 0x04204000 | SIZE_BITS[zd.esize] << 22 | step_f << 16 | r_step << 11 | r_start << 10 | start_f << 5
        self.emit(word | zd.idx, f"index {zd}, {text[0]}, {text[1]}")

    def index(self, zd: ZVec, start: int | XReg | WReg, step: int | XReg | WReg) -> None:
        """``index zd.<T>, start, step``: lane i = start + i*step (each an immediate -16..15 or
        a register: W for .b/.h/.s, X for .d)."""
        self._sve_index(zd, start, step)

    def sve_dup(self, zd: ZVec, src: int | XReg | WReg | ZElem) -> None:
        """``dup zd.<T>, #imm`` (-128..127 or multiples of 256 to 32512), ``dup zd.<T>, wn|xn`` or ``zn.<T>[i]``."""
        self._sve_dup("dup", zd, src)

    def _sve_dup(self, mn: str, zd: ZVec, src: object) -> None:
        if isinstance(src, (XReg, WReg)):
            self._sve_dup_gpr(mn, zd, src)
        elif isinstance(src, ZElem):
            self._sve_dup_idx(mn, zd, src)
        else:
            self._sve_dup_imm(mn, zd, src)

    def sve_mov(self, d: ZVec | PVec, a: object, b: ZVec | None = None) -> None:
        """SVE ``mov`` aliases.

        ``mov zd.<T>, #imm|wn|xn|zn.<T>[i]`` (DUP), ``mov zd.d, zn.d`` (ORR),
        ``mov zd.<T>, pg/m, zn.<T>`` (SEL, pg p0..p15) and ``mov pd.b, pn.b`` (ORR).
        """
        if b is not None:
            if not isinstance(a, PQual) or a.qual != "m":
                raise fail("mov", "Pg", "a predicate p0..p15/m", a)
            zvec("mov", "Zd", d, ALL_SIZES)
            zvec("mov", "Zn", b, ALL_SIZES)
            self._sve_sel_z("mov", d, a.idx, b, d, f"mov {d}, {a}, {b}")
        elif isinstance(d, PVec):
            pvec("mov", "Pd", d, ("b",))
            pvec("mov", "Pn", a, ("b",))
            self._sve_pred_logical("orr", f"mov {d}, {a}", d.idx, a.idx, a.idx, a.idx, 1, 0)
        elif isinstance(a, ZVec):
            self._sve_logical_unpred("orr", d, a, a, f"mov {d}, {a}")
        else:
            self._sve_dup("mov", d, a)

    # == permutes ============================================================
    def _sve_permute_z(self, mn: str, zd: ZVec, zn: ZVec, zm: ZVec) -> None:
        """SVE permute vector elements (ZIP1/2, UZP1/2, TRN1/2)."""
        for name, r in (("Zd", zd), ("Zn", zn), ("Zm", zm)):
            zvec(mn, name, r, ALL_SIZES)
        es = same_esize(mn, Zd=zd, Zn=zn, Zm=zm)
        word = 0x05206000 | SIZE_BITS[es] << 22 | zm.idx << 16 | _PERMUTE_OPC[mn] << 10 | zn.idx << 5 | zd.idx
        self.emit(word, f"{mn} {zd}, {zn}, {zm}")

    def _sve_permute_p(self, mn: str, pd: PVec, pn: PVec, pm: PVec) -> None:
        """SVE permute predicate elements (ZIP1/2, UZP1/2, TRN1/2)."""
        for name, r in (("Pd", pd), ("Pn", pn), ("Pm", pm)):
            pvec(mn, name, r)
        es = same_esize(mn, Pd=pd, Pn=pn, Pm=pm)
        word = 0x05204000 | SIZE_BITS[es] << 22 | pm.idx << 16 | _PERMUTE_OPC[mn] << 10 | pn.idx << 5 | pd.idx
        self.emit(word, f"{mn} {pd}, {pn}, {pm}")

    def _sve_permute(self, mn: str, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        if isinstance(d, PVec):
            self._sve_permute_p(mn, d, n, m)
        else:
            self._sve_permute_z(mn, d, n, m)

    def sve_zip1(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``zip1 zd, zn, zm`` or ``zip1 pd, pn, pm``: interleave the low halves."""
        self._sve_permute("zip1", d, n, m)

    def sve_zip2(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``zip2 zd, zn, zm`` or ``zip2 pd, pn, pm``: interleave the high halves."""
        self._sve_permute("zip2", d, n, m)

    def sve_uzp1(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``uzp1 zd, zn, zm`` or ``uzp1 pd, pn, pm``: even elements."""
        self._sve_permute("uzp1", d, n, m)

    def sve_uzp2(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``uzp2 zd, zn, zm`` or ``uzp2 pd, pn, pm``: odd elements."""
        self._sve_permute("uzp2", d, n, m)

    def sve_trn1(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``trn1 zd, zn, zm`` or ``trn1 pd, pn, pm``: even elements, transposed pairs."""
        self._sve_permute("trn1", d, n, m)

    def sve_trn2(self, d: ZVec | PVec, n: ZVec | PVec, m: ZVec | PVec) -> None:
        """``trn2 zd, zn, zm`` or ``trn2 pd, pn, pm``: odd elements, transposed pairs."""
        self._sve_permute("trn2", d, n, m)
