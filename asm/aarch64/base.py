"""AArch64 base instructions: data processing, branches, loads and stores.

Loads and stores of SIMD&FP scalars (``ldr q0``, ``ldp d8, d9``) share their
encoding classes with the general purpose forms and live here too.
"""

from __future__ import annotations

from asm.aarch64.memory import Mem
from asm.aarch64.operands import fail, gpr, imm, same_sf, xreg
from asm.aarch64.registers import ScalarReg, WReg, XReg
from asm.errors import EncodingError

CONDITIONS = {
    "eq": 0,
    "ne": 1,
    "cs": 2,
    "hs": 2,
    "cc": 3,
    "lo": 3,
    "mi": 4,
    "pl": 5,
    "vs": 6,
    "vc": 7,
    "hi": 8,
    "ls": 9,
    "ge": 10,
    "lt": 11,
    "gt": 12,
    "le": 13,
    "al": 14,
    "nv": 15,
    # SVE condition aliases (flags set by ptest, while*, ...)
    "none": 0,
    "any": 1,
    "nlast": 2,
    "last": 3,
    "first": 4,
    "nfrst": 5,
    "pmore": 8,
    "plast": 9,
    "tcont": 10,
    "tstop": 11,
}

SHIFTS = {"lsl": 0, "lsr": 1, "asr": 2, "ror": 3}
EXTENDS = {"uxtb": 0, "uxth": 1, "uxtw": 2, "uxtx": 3, "sxtb": 4, "sxth": 5, "sxtw": 6, "sxtx": 7}
PRFOPS = {
    f"{kind}l{level}{policy}": (8 if kind == "pli" else 16 if kind == "pst" else 0) + 2 * (level - 1) + p
    for kind in ("pld", "pli", "pst")
    for level in (1, 2, 3)
    for p, policy in enumerate(("keep", "strm"))
}

# (size, V, opc for load, opc for store, log2 bytes) per register kind for LDR/STR
_LDST_KIND = {
    "x": (3, 0, 1, 0, 3),
    "w": (2, 0, 1, 0, 2),
    "bw": (0, 0, 1, 0, 0),  # ldrb/strb
    "b": (0, 1, 1, 0, 0),
    "h": (1, 1, 1, 0, 1),
    "s": (2, 1, 1, 0, 2),
    "d": (3, 1, 1, 0, 3),
    "q": (0, 1, 3, 2, 4),
}
# (opc, V, log2 bytes) per register kind for LDP/STP
_PAIR_KIND = {"w": (0, 0, 2), "x": (2, 0, 3), "s": (0, 1, 2), "d": (1, 1, 3), "q": (2, 1, 4)}


def _kind(reg: object) -> str:
    if isinstance(reg, XReg):
        return "x"
    if isinstance(reg, WReg):
        return "w"
    if isinstance(reg, ScalarReg):
        return reg.esize
    return "?"


class BaseMixin:
    """Base mnemonics; mixed into `Assembler` (which provides `emit`)."""

    # -- move wide ------------------------------------------------------------
    def _move_wide(self, mn: str, opc: int, rd: XReg | WReg, imm16: int, shift: int) -> None:
        """Move wide (immediate): MOVN/MOVZ/MOVK."""
        d, sf = gpr(mn, "rd", rd)
        imm(mn, "imm16", imm16, 0, 0xFFFF)
        imm(mn, "shift", shift, 0, 48 if sf else 16, 16)
        text = f"{mn} {rd}, #{imm16:#x}" + (f", lsl #{shift}" if shift else "")
        self.emit(sf << 31 | opc << 29 | 0b100101 << 23 | (shift // 16) << 21 | imm16 << 5 | d, text)

    def movz(self, rd: XReg | WReg, imm16: int, shift: int = 0) -> None:
        """rd = imm16 << shift (other bits zero)."""
        self._move_wide("movz", 2, rd, imm16, shift)

    def movk(self, rd: XReg | WReg, imm16: int, shift: int = 0) -> None:
        """Insert imm16 at bit ``shift`` of rd, keeping the other bits."""
        self._move_wide("movk", 3, rd, imm16, shift)

    def movn(self, rd: XReg | WReg, imm16: int, shift: int = 0) -> None:
        """rd = ~(imm16 << shift)."""
        self._move_wide("movn", 0, rd, imm16, shift)

    def mov(self, rd, src) -> None:
        """Register move (``mov x0, x1``; ``mov sp, x0``) or any constant.

        A constant (signed or unsigned, fitting the register width) becomes the
        shortest movz/movn + movk sequence.
        """
        if isinstance(src, int):
            self.mov_imm(rd, src)
            return
        sf = same_sf("mov", rd=rd, rn=src)
        if rd.sp or src.sp:
            self.add(rd, src, 0)
            return
        d, _ = gpr("mov", "rd", rd)
        m, _ = gpr("mov", "rm", src)
        self.emit(sf << 31 | 1 << 29 | 0b01010 << 24 | m << 16 | 31 << 5 | d, f"mov {rd}, {src}")

    def mov_imm(self, rd: XReg | WReg, value: int) -> None:
        """Load any constant that fits the register (as movz/movn + movk)."""
        _, sf = gpr("mov", "rd", rd)
        bits = 64 if sf else 32
        if not isinstance(value, int) or not -(1 << (bits - 1)) <= value < 1 << bits:
            raise fail("mov", "imm", f"an int in {-(1 << (bits - 1))}..{(1 << bits) - 1}", value)
        value &= (1 << bits) - 1
        chunks = [(value >> s) & 0xFFFF for s in range(0, bits, 16)]
        zeros = sum(c == 0 for c in chunks)
        ones = sum(c == 0xFFFF for c in chunks)
        if ones > zeros:  # start from all ones
            first = next((i for i, c in enumerate(chunks) if c != 0xFFFF), 0)
            self.movn(rd, ~chunks[first] & 0xFFFF, 16 * first)
            rest = [i for i, c in enumerate(chunks) if c != 0xFFFF and i != first]
        else:
            first = next((i for i, c in enumerate(chunks) if c != 0), 0)
            self.movz(rd, chunks[first], 16 * first)
            rest = [i for i, c in enumerate(chunks) if c != 0 and i != first]
        for i in rest:
            self.movk(rd, chunks[i], 16 * i)

    # -- add/sub ---------------------------------------------------------------
    def _add_sub(self, mn: str, op: int, s: int, rd, rn, op2, shift: str | None, amount: int) -> None:
        """Add/subtract: immediate, shifted register or extended register."""
        sf = same_sf(mn, rd=rd, rn=rn)
        if isinstance(op2, int):
            # immediate: Rn may be SP; Rd may be SP unless flags are set
            d, _ = gpr(mn, "rd", rd, sp=not s, zr=bool(s))
            n, _ = gpr(mn, "rn", rn, sp=True)
            if shift not in (None, "lsl"):
                raise fail(mn, "shift", "lsl #0 or lsl #12 for an immediate", shift)
            imm(mn, "imm", op2, 0, 4095)
            imm(mn, "shift amount", amount, 0, 12, 12)
            text = f"{mn} {rd}, {rn}, #{op2}" + (f", lsl #{amount}" if amount else "")
            word = sf << 31 | op << 30 | s << 29 | 0b100010 << 23 | (amount // 12) << 22 | op2 << 10 | n << 5 | d
            self.emit(word, text)
            return
        if not isinstance(op2, (XReg, WReg)):
            raise fail(mn, "operand 2", "an immediate or a register", op2)
        uses_sp = rd.idx == 31 and rd.sp or rn.idx == 31 and rn.sp
        if shift in EXTENDS or (uses_sp and shift in (None, "lsl")):
            ext = shift or ("uxtx" if sf else "uxtw")
            if shift == "lsl" or shift is None:
                ext = "uxtx" if sf else "uxtw"
            option = EXTENDS[ext]
            wide = option & 3 == 3
            if sf and wide != isinstance(op2, XReg) or not sf and not isinstance(op2, WReg):
                raise fail(mn, "rm", "an X register for uxtx/sxtx, else a W register", op2)
            d, _ = gpr(mn, "rd", rd, sp=not s, zr=bool(s))
            n, _ = gpr(mn, "rn", rn, sp=True)
            m, _ = gpr(mn, "rm", op2)
            imm(mn, "extend amount", amount, 0, 4)
            shown = "lsl" if shift == "lsl" else ext
            text = f"{mn} {rd}, {rn}, {op2}" + (f", {shown} #{amount}" if amount or shift else "")
            word = sf << 31 | op << 30 | s << 29 | 0b01011001 << 21 | m << 16 | option << 13 | amount << 10
            self.emit(word | n << 5 | d, text)
            return
        shift = shift or "lsl"
        if shift not in ("lsl", "lsr", "asr"):
            raise fail(mn, "shift", "lsl/lsr/asr or an extend (uxtb..sxtx)", shift)
        same_sf(mn, rd=rd, rm=op2)
        d, _ = gpr(mn, "rd", rd)
        n, _ = gpr(mn, "rn", rn)
        m, _ = gpr(mn, "rm", op2)
        imm(mn, "shift amount", amount, 0, 63 if sf else 31)
        text = f"{mn} {rd}, {rn}, {op2}" + (f", {shift} #{amount}" if amount or shift != "lsl" else "")
        word = sf << 31 | op << 30 | s << 29 | 0b01011 << 24 | SHIFTS[shift] << 22 | m << 16 | amount << 10
        self.emit(word | n << 5 | d, text)

    def add(self, rd, rn, op2, shift: str | None = None, amount: int = 0) -> None:
        """rd = rn + op2; op2 is imm12 (``shift="lsl", amount=12`` allowed), a
        shifted register (lsl/lsr/asr) or an extended register (uxtb..sxtx)."""
        self._add_sub("add", 0, 0, rd, rn, op2, shift, amount)

    def adds(self, rd, rn, op2, shift: str | None = None, amount: int = 0) -> None:
        """rd = rn + op2, setting NZCV."""
        self._add_sub("adds", 0, 1, rd, rn, op2, shift, amount)

    def sub(self, rd, rn, op2, shift: str | None = None, amount: int = 0) -> None:
        """rd = rn - op2 (forms as `add`)."""
        self._add_sub("sub", 1, 0, rd, rn, op2, shift, amount)

    def subs(self, rd, rn, op2, shift: str | None = None, amount: int = 0) -> None:
        """rd = rn - op2, setting NZCV."""
        self._add_sub("subs", 1, 1, rd, rn, op2, shift, amount)

    def cmp(self, rn, op2, shift: str | None = None, amount: int = 0) -> None:
        """Compare: subs zr, rn, op2 (listed as ``subs xzr, ...``)."""
        zr = XReg(31) if isinstance(rn, XReg) else WReg(31)
        self._add_sub("subs", 1, 1, zr, rn, op2, shift, amount)

    # -- multiply ----------------------------------------------------------------
    def _mul_add(self, mn: str, o0: int, rd, rn, rm, ra, text: str) -> None:
        """Data processing (3 source): MADD/MSUB."""
        sf = same_sf(mn, rd=rd, rn=rn, rm=rm, ra=ra)
        d, n, m, a = (gpr(mn, nm, r)[0] for nm, r in (("rd", rd), ("rn", rn), ("rm", rm), ("ra", ra)))
        self.emit(sf << 31 | 0b0011011000 << 21 | m << 16 | o0 << 15 | a << 10 | n << 5 | d, text)

    def madd(self, rd, rn, rm, ra) -> None:
        """rd = ra + rn * rm."""
        self._mul_add("madd", 0, rd, rn, rm, ra, f"madd {rd}, {rn}, {rm}, {ra}")

    def msub(self, rd, rn, rm, ra) -> None:
        """rd = ra - rn * rm."""
        self._mul_add("msub", 1, rd, rn, rm, ra, f"msub {rd}, {rn}, {rm}, {ra}")

    def mul(self, rd, rn, rm) -> None:
        """rd = rn * rm."""
        zr = XReg(31) if isinstance(rd, XReg) else WReg(31)
        self._mul_add("mul", 0, rd, rn, rm, zr, f"mul {rd}, {rn}, {rm}")

    def _div(self, mn: str, o1: int, rd, rn, rm) -> None:
        """Data processing (2 source): UDIV/SDIV (division by zero gives 0)."""
        sf = same_sf(mn, rd=rd, rn=rn, rm=rm)
        d, n, m = (gpr(mn, nm, r)[0] for nm, r in (("rd", rd), ("rn", rn), ("rm", rm)))
        self.emit(sf << 31 | 0b11010110 << 21 | m << 16 | (0b10 | o1) << 10 | n << 5 | d, f"{mn} {rd}, {rn}, {rm}")

    def udiv(self, rd, rn, rm) -> None:
        """rd = rn / rm, unsigned."""
        self._div("udiv", 0, rd, rn, rm)

    def sdiv(self, rd, rn, rm) -> None:
        """rd = rn / rm, signed."""
        self._div("sdiv", 1, rd, rn, rm)

    # -- shifts ------------------------------------------------------------------
    def _shift(self, mn: str, op2: int, rd, rn, amount) -> None:
        """Immediate shifts as bitfield moves (UBFM/SBFM) or variable shifts (LSLV...)."""
        sf = same_sf(mn, rd=rd, rn=rn)
        d, _ = gpr(mn, "rd", rd)
        n, _ = gpr(mn, "rn", rn)
        if isinstance(amount, (XReg, WReg)):
            same_sf(mn, rd=rd, rm=amount)
            m, _ = gpr(mn, "rm", amount)
            word = sf << 31 | 0b11010110 << 21 | m << 16 | 0b0010 << 12 | op2 << 10 | n << 5 | d
            self.emit(word, f"{mn} {rd}, {rn}, {amount}")
            return
        size = 64 if sf else 32
        imm(mn, "shift", amount, 0, size - 1)
        if mn == "lsl":
            opc, immr, imms = 2, (-amount) % size, size - 1 - amount
        else:
            opc, immr, imms = (2 if mn == "lsr" else 0), amount, size - 1
        word = sf << 31 | opc << 29 | 0b100110 << 23 | sf << 22 | immr << 16 | imms << 10 | n << 5 | d
        self.emit(word, f"{mn} {rd}, {rn}, #{amount}")

    def lsl(self, rd, rn, amount) -> None:
        """Logical shift left by an immediate or a register."""
        self._shift("lsl", 0, rd, rn, amount)

    def lsr(self, rd, rn, amount) -> None:
        """Logical shift right by an immediate or a register."""
        self._shift("lsr", 1, rd, rn, amount)

    def asr(self, rd, rn, amount) -> None:
        """Arithmetic shift right by an immediate or a register."""
        self._shift("asr", 2, rd, rn, amount)

    # -- logical -------------------------------------------------------------------
    def _logical(self, mn: str, opc: int, rd, rn, rm, shift: str, amount: int) -> None:
        """Logical (shifted register): AND/ORR/EOR/ANDS."""
        sf = same_sf(mn, rd=rd, rn=rn, rm=rm)
        d, n, m = (gpr(mn, nm, r)[0] for nm, r in (("rd", rd), ("rn", rn), ("rm", rm)))
        if shift not in SHIFTS:
            raise fail(mn, "shift", "lsl/lsr/asr/ror", shift)
        imm(mn, "shift amount", amount, 0, 63 if sf else 31)
        text = f"{mn} {rd}, {rn}, {rm}" + (f", {shift} #{amount}" if amount or shift != "lsl" else "")
        word = sf << 31 | opc << 29 | 0b01010 << 24 | SHIFTS[shift] << 22 | m << 16 | amount << 10 | n << 5 | d
        self.emit(word, text)

    def and_(self, rd, rn, rm, shift: str = "lsl", amount: int = 0) -> None:
        """Bitwise AND (``and``) of registers."""
        self._logical("and", 0, rd, rn, rm, shift, amount)

    def orr(self, rd, rn, rm, shift: str = "lsl", amount: int = 0) -> None:
        """Bitwise OR of registers."""
        self._logical("orr", 1, rd, rn, rm, shift, amount)

    def eor(self, rd, rn, rm, shift: str = "lsl", amount: int = 0) -> None:
        """Bitwise exclusive OR of registers."""
        self._logical("eor", 2, rd, rn, rm, shift, amount)

    def ands(self, rd, rn, rm, shift: str = "lsl", amount: int = 0) -> None:
        """Bitwise AND setting NZCV."""
        self._logical("ands", 3, rd, rn, rm, shift, amount)

    def csel(self, rd, rn, rm, cond: str) -> None:
        """rd = cond ? rn : rm."""
        sf = same_sf("csel", rd=rd, rn=rn, rm=rm)
        d, n, m = (gpr("csel", nm, r)[0] for nm, r in (("rd", rd), ("rn", rn), ("rm", rm)))
        c = _cond("csel", cond, plain=True)
        self.emit(sf << 31 | 0b11010100 << 21 | m << 16 | c << 12 | n << 5 | d, f"csel {rd}, {rn}, {rm}, {cond}")

    # -- branches --------------------------------------------------------------------
    def b(self, target) -> None:
        """Unconditional branch to a Label or a byte offset (±128 MiB)."""
        self.emit_branch(0b000101 << 26, "b {target}", target, "imm26", "b")

    def bl(self, target) -> None:
        """Branch with link (call) to a Label or a byte offset."""
        self.emit_branch(0b100101 << 26, "bl {target}", target, "imm26", "bl")

    def b_cond(self, cond: str, target) -> None:
        """Conditional branch ``b.<cond>`` (also SVE aliases such as ``none``, ``first``)."""
        c = _cond("b.cond", cond)
        self.emit_branch(0b01010100 << 24 | c, f"b.{cond} {{target}}", target, "imm19", f"b.{cond}")

    def adr(self, rd: XReg, target) -> None:
        """rd = address of a Label (or pc + byte offset), within ±1 MiB."""
        d = xreg("adr", "rd", rd)
        self.emit_branch(0b10000 << 24 | d, f"adr {rd}, {{target}}", target, "adr", "adr")

    def _cb(self, mn: str, op: int, rt, target) -> None:
        """Compare and branch: CBZ/CBNZ."""
        t, sf = gpr(mn, "rt", rt)
        self.emit_branch(sf << 31 | 0b011010 << 25 | op << 24 | t, f"{mn} {rt}, {{target}}", target, "imm19", mn)

    def cbz(self, rt, target) -> None:
        """Branch if rt == 0."""
        self._cb("cbz", 0, rt, target)

    def cbnz(self, rt, target) -> None:
        """Branch if rt != 0."""
        self._cb("cbnz", 1, rt, target)

    def _tb(self, mn: str, op: int, rt, bit: int, target) -> None:
        """Test bit and branch: TBZ/TBNZ."""
        t, sf = gpr(mn, "rt", rt)
        imm(mn, "bit", bit, 0, 63 if sf else 31)
        word = (bit >> 5) << 31 | 0b011011 << 25 | op << 24 | (bit & 31) << 19 | t
        self.emit_branch(word, f"{mn} {rt}, #{bit}, {{target}}", target, "imm14", mn)

    def tbz(self, rt, bit: int, target) -> None:
        """Branch if bit ``bit`` of rt is zero (±32 KiB)."""
        self._tb("tbz", 0, rt, bit, target)

    def tbnz(self, rt, bit: int, target) -> None:
        """Branch if bit ``bit`` of rt is one (±32 KiB)."""
        self._tb("tbnz", 1, rt, bit, target)

    def _branch_reg(self, mn: str, opc: int, rn: XReg, text: str) -> None:
        """Unconditional branch (register): BR/BLR/RET."""
        n = xreg(mn, "rn", rn)
        self.emit(0b1101011 << 25 | opc << 21 | 0b11111 << 16 | n << 5, text)

    def br(self, rn: XReg) -> None:
        """Branch to the address in rn."""
        self._branch_reg("br", 0, rn, f"br {rn}")

    def blr(self, rn: XReg) -> None:
        """Call the address in rn."""
        self._branch_reg("blr", 1, rn, f"blr {rn}")

    def ret(self, rn: XReg | None = None) -> None:
        """Return (to x30 unless ``rn`` is given)."""
        rn = rn or XReg(30)
        self._branch_reg("ret", 2, rn, "ret" if rn.idx == 30 else f"ret {rn}")

    def nop(self) -> None:
        """No operation."""
        self.emit(0xD503201F, "nop")

    def svc(self, imm16: int = 0) -> None:
        """Supervisor call (Linux: syscall number in x8)."""
        imm("svc", "imm16", imm16, 0, 0xFFFF)
        self.emit(0xD4000001 | imm16 << 5, f"svc #{imm16:#x}")

    # -- loads and stores ------------------------------------------------------------
    def _ldst(self, mn: str, kind: str, load: bool, rt, addr: Mem) -> None:
        """Load/store register: unsigned offset, unscaled (ldur), pre/post-index, register offset."""
        if not isinstance(addr, Mem) or addr.mul_vl:
            raise fail(mn, "address", "a memory operand mem()/pre()/post()", addr)
        size, v, opc_ld, opc_st, log2 = _LDST_KIND[kind]
        opc = opc_ld if load else opc_st
        t = rt.idx
        if v == 0:
            t, _ = gpr(mn, "rt", rt)
        n = xreg(mn, "base", addr.base, sp=True)
        head = size << 30 | 0b111 << 27 | v << 26 | opc << 22
        if addr.reg_offset:
            m, msf = gpr(mn, "index", addr.offset)
            ext = addr.extend or "lsl"
            options = {"uxtw": 2, "lsl": 3, "sxtw": 6, "sxtx": 7}
            if ext not in options or (options[ext] & 1) != msf:
                raise fail(mn, "index extend", "lsl/sxtx with an X index or uxtw/sxtw with a W index", ext)
            if addr.amount not in (None, log2) and not (addr.amount == 0 and log2 == 0):
                raise fail(mn, "index shift", f"0 or {log2}", addr.amount)
            s = 0 if addr.amount is None else 1
            word = head | 1 << 21 | m << 16 | options[ext] << 13 | s << 12 | 0b10 << 10 | n << 5 | t
            self.emit(word, f"{mn} {rt}, {addr}")
            return
        off = addr.offset
        if addr.mode in ("pre", "post"):
            if v == 0 and t == n:
                raise fail(mn, "rt", "a register other than the written-back base (unpredictable)", rt)
            imm(mn, "offset", off, -256, 255)
            idx = 3 if addr.mode == "pre" else 1
            self.emit(head | (off & 0x1FF) << 12 | idx << 10 | n << 5 | t, f"{mn} {rt}, {addr}")
            return
        scale = 1 << log2
        if 0 <= off <= 4095 * scale and off % scale == 0:
            self.emit(head | 1 << 24 | (off // scale) << 10 | n << 5 | t, f"{mn} {rt}, {addr}")
            return
        if -256 <= off <= 255:  # unscaled offset: LDUR/STUR
            mnu = mn.replace("ldr", "ldur").replace("str", "stur")
            self.emit(head | (off & 0x1FF) << 12 | n << 5 | t, f"{mnu} {rt}, {addr}")
            return
        raise fail(mn, "offset", f"a multiple of {scale} in 0..{4095 * scale} or in -256..255", off)

    def _ldst_any(self, mn: str, load: bool, rt, addr: Mem) -> None:
        kind = _kind(rt)
        if kind not in _LDST_KIND or kind == "bw":
            raise fail(mn, "rt", "an X/W register or a b/h/s/d/q register", rt)
        self._ldst(mn, kind, load, rt, addr)

    def ldr(self, rt, addr: Mem) -> None:
        """Load X/W or b/h/s/d/q register from ``addr`` (offsets in bytes)."""
        self._ldst_any("ldr", True, rt, addr)

    def str(self, rt, addr: Mem) -> None:
        """Store X/W or b/h/s/d/q register to ``addr`` (offsets in bytes)."""
        self._ldst_any("str", False, rt, addr)

    def ldrb(self, rt: WReg, addr: Mem) -> None:
        """Load one byte, zero-extended into a W register."""
        if not isinstance(rt, WReg):
            raise fail("ldrb", "rt", "a W register", rt)
        self._ldst("ldrb", "bw", True, rt, addr)

    def strb(self, rt: WReg, addr: Mem) -> None:
        """Store the low byte of a W register."""
        if not isinstance(rt, WReg):
            raise fail("strb", "rt", "a W register", rt)
        self._ldst("strb", "bw", False, rt, addr)

    def _pair(self, mn: str, load: int, rt, rt2, addr: Mem) -> None:
        """Load/store pair: signed offset, pre-index, post-index (imm7 scaled)."""
        kind = _kind(rt)
        if kind not in _PAIR_KIND or _kind(rt2) != kind:
            raise fail(mn, "rt, rt2", "two registers of one kind: X, W, s, d or q", f"{rt}, {rt2}")
        opc, v, log2 = _PAIR_KIND[kind]
        t, t2 = rt.idx, rt2.idx
        if v == 0:
            t, _ = gpr(mn, "rt", rt)
            t2, _ = gpr(mn, "rt2", rt2)
        if not isinstance(addr, Mem) or addr.reg_offset or addr.mul_vl:
            raise fail(mn, "address", "[xn, #imm], [xn, #imm]! or [xn], #imm", addr)
        n = xreg(mn, "base", addr.base, sp=True)
        if load and t == t2:
            raise fail(mn, "rt2", f"a register other than rt={rt} (unpredictable)", rt2)
        if v == 0 and addr.mode != "offset" and n in (t, t2):
            raise fail(mn, "rt, rt2", "registers other than the written-back base (unpredictable)", f"{rt}, {rt2}")
        scale = 1 << log2
        imm(mn, "offset", addr.offset, -64 * scale, 63 * scale, scale)
        idx = {"post": 1, "offset": 2, "pre": 3}[addr.mode]
        word = opc << 30 | 0b101 << 27 | v << 26 | idx << 23 | load << 22 | ((addr.offset // scale) & 0x7F) << 15
        self.emit(word | t2 << 10 | n << 5 | t, f"{mn} {rt}, {rt2}, {addr}")

    def ldp(self, rt, rt2, addr: Mem) -> None:
        """Load a pair of X/W or s/d/q registers."""
        self._pair("ldp", 1, rt, rt2, addr)

    def stp(self, rt, rt2, addr: Mem) -> None:
        """Store a pair of X/W or s/d/q registers."""
        self._pair("stp", 0, rt, rt2, addr)

    def prfm(self, op: str, addr: Mem) -> None:
        """Prefetch (``pldl1keep`` ... ``pstl3strm``) at an unsigned offset or register offset."""
        if op not in PRFOPS:
            raise fail("prfm", "prfop", "one of " + ", ".join(PRFOPS), op)
        if not isinstance(addr, Mem) or addr.mode != "offset" or addr.mul_vl:
            raise fail("prfm", "address", "[xn, #imm] or [xn, xm{, lsl #3}]", addr)
        n = xreg("prfm", "base", addr.base, sp=True)
        if addr.reg_offset:
            m, msf = gpr("prfm", "index", addr.offset)
            options = {"uxtw": 2, "lsl": 3, "sxtw": 6, "sxtx": 7}
            ext = addr.extend or "lsl"
            if ext not in options or (options[ext] & 1) != msf or addr.amount not in (None, 3):
                raise fail("prfm", "index", "xm{, lsl #3}, wm, uxtw|sxtw {#3}", addr)
            s = 0 if addr.amount is None else 1
            word = 0xF8A00800 | m << 16 | options[ext] << 13 | s << 12 | n << 5 | PRFOPS[op]
            self.emit(word, f"prfm {op}, {addr}")
            return
        imm("prfm", "offset", addr.offset, 0, 32760, 8)
        self.emit(0xF9800000 | (addr.offset // 8) << 10 | n << 5 | PRFOPS[op], f"prfm {op}, {addr}")

    def __getattr__(self, name: str):
        # b_eq, b_ne, ..., b_none, b_first: conditional branch shorthands
        if name.startswith("b_") and name[2:] in CONDITIONS:
            cond = name[2:]
            return lambda target: self.b_cond(cond, target)
        raise AttributeError(name)


def _cond(mn: str, cond: str, plain: bool = False) -> int:
    table = CONDITIONS if not plain else {k: v for k, v in CONDITIONS.items() if len(k) == 2}
    if cond not in table:
        raise EncodingError(f"{mn}: condition must be one of {', '.join(table)}, got {cond!r}")
    return table[cond]
