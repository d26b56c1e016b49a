"""AArch64 Advanced SIMD (NEON) encoders.

One private helper per encoding class of the Arm ARM (C4.1.96 "Advanced SIMD
..." and "Advanced SIMD load/store ..."), thin mnemonic methods on top:

    a.fmla(v0.s4, v1.s4, v2.s4)            # vector
    a.fmla(v0.s4, v1.s4, v2.s[3])          # by element
    a.ld1([v0.s4, v1.s4], post(x0, 32))    # multiple structures, post-index
    a.ld1r(v3.s4, mem(x1))                 # load one element and replicate
    a.movi(v0.d2, 0)
    a.mov(v0.s[1], w2)                     # ins (general)

Register lists are a single register or a sequence of consecutive registers
(modulo 32, ``[v31.s4, v0.s4]`` is legal). A lane list is a VElem or a sequence
of VElems with one index (``[v0.s[1], v1.s[1]]`` is ``{ v0.s, v1.s }[1]``).

Mnemonics that the base module also knows for general/scalar registers
(``mov``, ``and_``, ``orr``, ``eor``, ``bic``, ``orn``, ``fadd`` ...) encode the
NEON form for vector operands and otherwise defer to the next class in the
method resolution order (``super()``).
"""

from __future__ import annotations

from collections.abc import Sequence

from asm.aarch64.memory import Mem
from asm.aarch64.operands import SIZE_BITS, fail, gpr, imm, same_arrangement, scalar, vec, velem
from asm.aarch64.registers import ELEM_BYTES, ScalarReg, VecReg, VElem, VElemGroup, WReg, XReg

ALL = ("8b", "16b", "4h", "8h", "2s", "4s", "1d", "2d")
NO_1D = ("8b", "16b", "4h", "8h", "2s", "4s", "2d")
FP = ("2s", "4s", "2d")
BYTES = ("8b", "16b")
INT_ARRS = ("8b", "16b", "4h", "8h", "2s", "4s")  # integer arithmetic (no .2d multiply)

# number of registers -> opcode of LD1/ST1 (multiple structures); LDn/STn for n > 1
_LD1_OPCODE = {1: 0b0111, 2: 0b1010, 3: 0b0110, 4: 0b0010}
_LDN_OPCODE = {2: 0b1000, 3: 0b0100, 4: 0b0000}

_SHIFT = {"b": 0, "h": 1, "s": 2, "d": 3}


def _consecutive(mn: str, regs: Sequence) -> None:
    for a, b in zip(regs, regs[1:], strict=False):
        if b.idx != (a.idx + 1) % 32:
            raise fail(mn, "registers", "consecutive (modulo 32)", ", ".join(map(str, regs)))


class NeonMixin:
    """NEON mnemonics; mixed into `Assembler` (which provides `emit`)."""

    # -- dispatch -----------------------------------------------------------
    def _defer(self, name: str, want: str, args: tuple, kwargs: dict):
        """Non-vector operands: hand over to the next mixin (base) or fail."""
        other = getattr(super(), name, None)
        if other is None:
            raise fail(name.rstrip("_"), "rd", want, args[0] if args else None)
        return other(*args, **kwargs)

    # == Advanced SIMD three same ===========================================
    def _simd_three_same(
        self,
        mn: str,
        u: int,
        size: int | None,
        opcode: int,
        rd: VecReg,
        rn: VecReg,
        rm: VecReg,
        arrangements: tuple[str, ...],
        fp_a: int = 0,
    ) -> None:
        """``0 Q U 01110 size 1 Rm opcode 1 Rn Rd``.

        ``size`` None: floating point, size is ``a:sz`` with ``a = fp_a`` and
        ``sz`` from the arrangement (0 for .2s/.4s, 1 for .2d).
        """
        vec(mn, "rd", rd, arrangements)
        vec(mn, "rn", rn, arrangements)
        vec(mn, "rm", rm, arrangements)
        same_arrangement(mn, rd=rd, rn=rn, rm=rm)
        if size is None:
            size = fp_a << 1 | (rd.esize == "d")
        word = (
            rd.q << 30
            | u << 29
            | 0b01110 << 24
            | size << 22
            | 1 << 21
            | rm.idx << 16
            | opcode << 11
            | 1 << 10
            | rn.idx << 5
            | rd.idx
        )
        self.emit(word, f"{mn} {rd}, {rn}, {rm}")

    def _fp_three_same(self, name: str, u: int, a: int, opcode: int, args: tuple, kwargs: dict) -> None:
        rd = args[0] if args else None
        if not isinstance(rd, VecReg):
            return self._defer(name, "a vector with arrangement 2s/4s/2d", args, kwargs)
        return self._simd_three_same(name, u, None, opcode, *args, arrangements=FP, fp_a=a, **kwargs)

    def _logic_three_same(self, name: str, u: int, size: int, args: tuple, kwargs: dict) -> None:
        rd = args[0] if args else None
        if not isinstance(rd, VecReg):
            return self._defer(name, "a vector with arrangement 8b/16b", args, kwargs)
        return self._simd_three_same(name.rstrip("_"), u, size, 0b00011, *args, arrangements=BYTES, **kwargs)

    def fadd(self, *args, **kwargs) -> None:
        """``fadd vd.T, vn.T, vm.T`` (T = 2s/4s/2d)."""
        self._fp_three_same("fadd", 0, 0, 0b11010, args, kwargs)

    def fsub(self, *args, **kwargs) -> None:
        """``fsub vd.T, vn.T, vm.T``."""
        self._fp_three_same("fsub", 0, 1, 0b11010, args, kwargs)

    def fdiv(self, *args, **kwargs) -> None:
        """``fdiv vd.T, vn.T, vm.T``."""
        self._fp_three_same("fdiv", 1, 0, 0b11111, args, kwargs)

    def fmax(self, *args, **kwargs) -> None:
        """``fmax vd.T, vn.T, vm.T``."""
        self._fp_three_same("fmax", 0, 0, 0b11110, args, kwargs)

    def fmin(self, *args, **kwargs) -> None:
        """``fmin vd.T, vn.T, vm.T``."""
        self._fp_three_same("fmin", 0, 1, 0b11110, args, kwargs)

    def fmaxnm(self, *args, **kwargs) -> None:
        """``fmaxnm vd.T, vn.T, vm.T``."""
        self._fp_three_same("fmaxnm", 0, 0, 0b11000, args, kwargs)

    def fminnm(self, *args, **kwargs) -> None:
        """``fminnm vd.T, vn.T, vm.T``."""
        self._fp_three_same("fminnm", 0, 1, 0b11000, args, kwargs)

    def fmul(self, *args, **kwargs) -> None:
        """``fmul vd.T, vn.T, vm.T`` or by element ``fmul vd.T, vn.T, vm.s[i]`` (or scalar ``fmul s0, s1, v2.s[i]``)."""
        if len(args) == 3 and isinstance(args[2], VElem):
            return self._fp_by_element("fmul", 0, 0b1001, *args)
        self._fp_three_same("fmul", 1, 0, 0b11011, args, kwargs)

    def fmla(self, *args, **kwargs) -> None:
        """``fmla vd.T, vn.T, vm.T`` or by element ``fmla vd.T, vn.T, vm.s[i]`` / ``vm.d[i]``."""
        if len(args) == 3 and isinstance(args[2], VElem):
            return self._fp_by_element("fmla", 0, 0b0001, *args)
        self._fp_three_same("fmla", 0, 0, 0b11001, args, kwargs)

    def mla(self, *args, **kwargs) -> None:
        """Integer multiply-add (wrapping): ``mla vd.T, vn.T, vm.T`` (T = 8b/16b/4h/8h/2s/4s) or by
        element ``mla vd.T, vn.T, vm.h[i]`` (T = 4h/8h, vm v0..v15) / ``vm.s[i]`` (T = 2s/4s)."""
        if len(args) == 3 and isinstance(args[2], VElem):
            return self._int_by_element("mla", 1, 0b0000, *args)
        rd = args[0] if args else None
        if not isinstance(rd, VecReg):
            return self._defer("mla", "a vector with arrangement 8b/16b/4h/8h/2s/4s", args, kwargs)
        size = _SHIFT.get(rd.esize, 0)
        self._simd_three_same("mla", 0, size, 0b10010, *args, arrangements=INT_ARRS, **kwargs)

    def _int_by_element(self, mn: str, u: int, opcode: int, rd: object, rn: object, rm: object) -> None:
        """MLA/MUL-style integer ops (by element), halfwords and words: the index in H:L:M (h,
        Rm v0..v15) or H:L (s)."""
        el = velem(mn, "rm", rm, ("h", "s"))
        arrs = ("4h", "8h") if el.esize == "h" else ("2s", "4s")
        vec(mn, "rd", rd, arrs)
        vec(mn, "rn", rn, arrs)
        same_arrangement(mn, rd=rd, rn=rn)
        if el.esize == "h":
            if el.idx > 15:
                raise fail(mn, "rm", "v0..v15 for a halfword element", el)
            size, h, l, rm_field = 1, el.index >> 2, (el.index >> 1) & 1, (el.index & 1) << 4 | el.idx
        else:
            size, h, l, rm_field = 2, el.index >> 1, el.index & 1, el.idx
        self._simd_by_element(f"{mn} {rd}, {rn}, {el}", False, rd.q, u, size, opcode, rd.idx, rn.idx, rm_field, h, l)

    def fmls(self, *args, **kwargs) -> None:
        """``fmls vd.T, vn.T, vm.T`` or by element."""
        if len(args) == 3 and isinstance(args[2], VElem):
            return self._fp_by_element("fmls", 0, 0b0101, *args)
        self._fp_three_same("fmls", 0, 1, 0b11001, args, kwargs)

    def faddp(self, *args, **kwargs) -> None:
        """``faddp vd.T, vn.T, vm.T`` or scalar pairwise ``faddp s0, v1.2s`` / ``faddp d0, v1.2d``."""
        if len(args) == 2 and isinstance(args[0], ScalarReg):
            return self._simd_scalar_pairwise("faddp", 1, 0b01101, *args)
        self._fp_three_same("faddp", 1, 0, 0b11010, args, kwargs)

    def and_(self, *args, **kwargs) -> None:
        """``and vd.T, vn.T, vm.T`` (T = 8b/16b)."""
        self._logic_three_same("and_", 0, 0b00, args, kwargs)

    def bic(self, *args, **kwargs) -> None:
        """``bic vd.T, vn.T, vm.T`` (register form)."""
        self._logic_three_same("bic", 0, 0b01, args, kwargs)

    def orr(self, *args, **kwargs) -> None:
        """``orr vd.T, vn.T, vm.T``."""
        self._logic_three_same("orr", 0, 0b10, args, kwargs)

    def orn(self, *args, **kwargs) -> None:
        """``orn vd.T, vn.T, vm.T``."""
        self._logic_three_same("orn", 0, 0b11, args, kwargs)

    def eor(self, *args, **kwargs) -> None:
        """``eor vd.T, vn.T, vm.T``."""
        self._logic_three_same("eor", 1, 0b00, args, kwargs)

    def bsl(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bsl vd.T, vn.T, vm.T`` (bitwise select)."""
        self._simd_three_same("bsl", 1, 0b01, 0b00011, rd, rn, rm, BYTES)

    def bit(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bit vd.T, vn.T, vm.T`` (insert if true)."""
        self._simd_three_same("bit", 1, 0b10, 0b00011, rd, rn, rm, BYTES)

    def bif(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bif vd.T, vn.T, vm.T`` (insert if false)."""
        self._simd_three_same("bif", 1, 0b11, 0b00011, rd, rn, rm, BYTES)

    # == Advanced SIMD (scalar) x indexed element ===========================
    def _simd_by_element(
        self,
        text: str,
        is_scalar: bool,
        q: int,
        u: int,
        size: int,
        opcode: int,
        rd: int,
        rn: int,
        rm: int,
        h: int,
        l: int,
    ) -> None:
        """``0 Q U 01111 size L M Rm opcode H 0 Rn Rd`` (scalar: ``01 U 11111 ...``).

        ``rm`` is the full 5-bit register number (M:Rm); the caller splits
        the element index into H:L.
        """
        word = (
            (1 << 30 | 1 << 28 if is_scalar else q << 30)
            | u << 29
            | 0b01111 << 24
            | size << 22
            | l << 21
            | rm << 16
            | opcode << 12
            | h << 11
            | rn << 5
            | rd
        )
        self.emit(word, text)

    def _fp_by_element(self, mn: str, u: int, opcode: int, rd: object, rn: object, rm: object) -> None:
        """FMLA/FMLS/FMUL (by element), single and double precision, vector or scalar."""
        el = velem(mn, "rm", rm, ("s", "d"))
        if isinstance(rd, ScalarReg):
            scalar(mn, "rd", rd, (el.esize,))
            scalar(mn, "rn", rn, (el.esize,))
            is_scalar, q = True, 1
        else:
            arrs = ("2s", "4s") if el.esize == "s" else ("2d",)
            vec(mn, "rd", rd, arrs)
            vec(mn, "rn", rn, arrs)
            same_arrangement(mn, rd=rd, rn=rn)
            is_scalar, q = False, rd.q
        if el.esize == "s":
            sz, h, l = 0, el.index >> 1, el.index & 1
        else:
            sz, h, l = 1, el.index, 0
        self._simd_by_element(
            f"{mn} {rd}, {rn}, {el}", is_scalar, q, u, 0b10 | sz, opcode, rd.idx, rn.idx, el.idx, h, l
        )

    # == Advanced SIMD two-register miscellaneous ===========================
    def _simd_two_reg_misc(self, text: str, q: int, u: int, size: int, opcode: int, rd: int, rn: int) -> None:
        """``0 Q U 01110 size 10000 opcode 10 Rn Rd``."""
        word = q << 30 | u << 29 | 0b01110 << 24 | size << 22 | 0b10000 << 17 | opcode << 12 | 0b10 << 10 | rn << 5 | rd
        self.emit(word, text)

    def _fp_two_reg_misc(self, name: str, u: int, a: int, opcode: int, args: tuple, kwargs: dict) -> None:
        rd = args[0] if args else None
        if not isinstance(rd, VecReg):
            return self._defer(name, "a vector with arrangement 2s/4s/2d", args, kwargs)
        rd, rn = args
        vec(name, "rd", rd, FP)
        vec(name, "rn", rn, FP)
        same_arrangement(name, rd=rd, rn=rn)
        size = a << 1 | (rd.esize == "d")
        self._simd_two_reg_misc(f"{name} {rd}, {rn}", rd.q, u, size, opcode, rd.idx, rn.idx)

    def fabs(self, *args, **kwargs) -> None:
        """``fabs vd.T, vn.T`` (T = 2s/4s/2d)."""
        self._fp_two_reg_misc("fabs", 0, 1, 0b01111, args, kwargs)

    def fneg(self, *args, **kwargs) -> None:
        """``fneg vd.T, vn.T``."""
        self._fp_two_reg_misc("fneg", 1, 1, 0b01111, args, kwargs)

    def fsqrt(self, *args, **kwargs) -> None:
        """``fsqrt vd.T, vn.T``."""
        self._fp_two_reg_misc("fsqrt", 1, 1, 0b11111, args, kwargs)

    def _fcvt_long(self, mn: str, q: int, rd: VecReg, rn: VecReg) -> None:
        narrow = {"4s": ("4h", "8h"), "2d": ("2s", "4s")}
        vec(mn, "rd", rd, ("4s", "2d"))
        want = narrow[rd.arrangement][q]
        vec(mn, "rn", rn, (want,))
        self._simd_two_reg_misc(f"{mn} {rd}, {rn}", q, 0, rd.esize == "d", 0b10111, rd.idx, rn.idx)

    def _fcvt_narrow(self, mn: str, q: int, rd: VecReg, rn: VecReg) -> None:
        narrow = {"4s": ("4h", "8h"), "2d": ("2s", "4s")}
        vec(mn, "rn", rn, ("4s", "2d"))
        want = narrow[rn.arrangement][q]
        vec(mn, "rd", rd, (want,))
        self._simd_two_reg_misc(f"{mn} {rd}, {rn}", q, 0, rn.esize == "d", 0b10110, rd.idx, rn.idx)

    def fcvtl(self, rd: VecReg, rn: VecReg) -> None:
        """``fcvtl vd.4s, vn.4h`` / ``fcvtl vd.2d, vn.2s`` (widen the lower half)."""
        self._fcvt_long("fcvtl", 0, rd, rn)

    def fcvtl2(self, rd: VecReg, rn: VecReg) -> None:
        """``fcvtl2 vd.4s, vn.8h`` / ``fcvtl2 vd.2d, vn.4s`` (widen the upper half)."""
        self._fcvt_long("fcvtl2", 1, rd, rn)

    def fcvtn(self, rd: VecReg, rn: VecReg) -> None:
        """``fcvtn vd.4h, vn.4s`` / ``fcvtn vd.2s, vn.2d`` (narrow into the lower half)."""
        self._fcvt_narrow("fcvtn", 0, rd, rn)

    def fcvtn2(self, rd: VecReg, rn: VecReg) -> None:
        """``fcvtn2 vd.8h, vn.4s`` / ``fcvtn2 vd.4s, vn.2d`` (narrow into the upper half)."""
        self._fcvt_narrow("fcvtn2", 1, rd, rn)

    def fcvt(self, rd: ScalarReg, rn: ScalarReg) -> None:
        """``fcvt`` between scalar h/s/d registers (two different sizes): ``fcvt s0, h1`` widens
        exactly, ``fcvt h0, s1`` rounds by FPCR (floating-point data-processing, 1 source:
        ``0 0 0 11110 ftype 1 0001 opc 10000 Rn Rd``, ftype = the source's size, opc = the result's)."""
        code = {"s": 0b00, "d": 0b01, "h": 0b11}
        scalar("fcvt", "rd", rd, ("h", "s", "d"))
        scalar("fcvt", "rn", rn, ("h", "s", "d"))
        if rd.esize == rn.esize:
            raise fail("fcvt", "rd", f"a size other than rn's ({rn.esize})", rd)
        word = 0b11110 << 24 | code[rn.esize] << 22 | 1 << 21 | 0b0001 << 17 | code[rd.esize] << 15 | 0b10000 << 10
        self.emit(word | rn.idx << 5 | rd.idx, f"fcvt {rd}, {rn}")

    def bfcvtn(self, rd: VecReg, rn: VecReg) -> None:
        """``bfcvtn vd.4h, vn.4s`` (fp32 -> bf16, lower half; FEAT_BF16)."""
        vec("bfcvtn", "rd", rd, ("4h",))
        vec("bfcvtn", "rn", rn, ("4s",))
        self._simd_two_reg_misc(f"bfcvtn {rd}, {rn}", 0, 0, 0b10, 0b10110, rd.idx, rn.idx)

    def bfcvtn2(self, rd: VecReg, rn: VecReg) -> None:
        """``bfcvtn2 vd.8h, vn.4s`` (fp32 -> bf16, upper half)."""
        vec("bfcvtn2", "rd", rd, ("8h",))
        vec("bfcvtn2", "rn", rn, ("4s",))
        self._simd_two_reg_misc(f"bfcvtn2 {rd}, {rn}", 1, 0, 0b10, 0b10110, rd.idx, rn.idx)

    # == Advanced SIMD shift by immediate ===================================
    def _simd_shift_imm(self, text: str, q: int, u: int, immhb: int, opcode: int, rd: int, rn: int) -> None:
        """``0 Q U 011110 immh immb opcode 1 Rn Rd`` (immh != 0)."""
        word = q << 30 | u << 29 | 0b011110 << 23 | immhb << 16 | opcode << 11 | 1 << 10 | rn << 5 | rd
        self.emit(word, text)

    def shl(self, rd: VecReg, rn: VecReg, shift: int) -> None:
        """``shl vd.T, vn.T, #shift`` (T = 8b/16b/4h/8h/2s/4s/2d; shift 0..element bits - 1): each
        element shifted left, as an integer."""
        vec("shl", "rd", rd, NO_1D)
        vec("shl", "rn", rn, NO_1D)
        same_arrangement("shl", rd=rd, rn=rn)
        bits = 8 * ELEM_BYTES[rd.esize]
        imm("shl", "shift", shift, 0, bits - 1)
        self._simd_shift_imm(f"shl {rd}, {rn}, #{shift}", rd.q, 0, bits + shift, 0b01010, rd.idx, rn.idx)

    # == Advanced SIMD scalar pairwise ======================================
    def _simd_scalar_pairwise(self, mn: str, u: int, opcode: int, rd: ScalarReg, rn: VecReg) -> None:
        """``01 U 11110 size 11000 opcode 10 Rn Rd`` (FP: size = 0:sz)."""
        scalar(mn, "rd", rd, ("s", "d"))
        vec(mn, "rn", rn, ("2s",) if rd.esize == "s" else ("2d",))
        size = rd.esize == "d"
        word = (
            1 << 30
            | u << 29
            | 0b11110 << 24
            | size << 22
            | 0b11000 << 17
            | opcode << 12
            | 0b10 << 10
            | rn.idx << 5
            | rd.idx
        )
        self.emit(word, f"{mn} {rd}, {rn}")

    # == Advanced SIMD permute and extract ==================================
    def _simd_permute(self, mn: str, opcode: int, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``0 Q 001110 size 0 Rm 0 opcode 10 Rn Rd``."""
        for name, r in (("rd", rd), ("rn", rn), ("rm", rm)):
            vec(mn, name, r, NO_1D)
        same_arrangement(mn, rd=rd, rn=rn, rm=rm)
        size = SIZE_BITS[rd.esize]
        word = (
            rd.q << 30 | 0b001110 << 24 | size << 22 | rm.idx << 16 | opcode << 12 | 0b10 << 10 | rn.idx << 5 | rd.idx
        )
        self.emit(word, f"{mn} {rd}, {rn}, {rm}")

    def uzp1(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``uzp1 vd.T, vn.T, vm.T`` (even elements)."""
        self._simd_permute("uzp1", 0b001, rd, rn, rm)

    def trn1(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``trn1 vd.T, vn.T, vm.T``."""
        self._simd_permute("trn1", 0b010, rd, rn, rm)

    def zip1(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``zip1 vd.T, vn.T, vm.T`` (interleave lower halves)."""
        self._simd_permute("zip1", 0b011, rd, rn, rm)

    def uzp2(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``uzp2 vd.T, vn.T, vm.T`` (odd elements)."""
        self._simd_permute("uzp2", 0b101, rd, rn, rm)

    def trn2(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``trn2 vd.T, vn.T, vm.T``."""
        self._simd_permute("trn2", 0b110, rd, rn, rm)

    def zip2(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``zip2 vd.T, vn.T, vm.T`` (interleave upper halves)."""
        self._simd_permute("zip2", 0b111, rd, rn, rm)

    def ext(self, rd: VecReg, rn: VecReg, rm: VecReg, index: int) -> None:
        """``ext vd.T, vn.T, vm.T, #index`` (T = 8b: 0..7, 16b: 0..15); Advanced SIMD extract."""
        for name, r in (("rd", rd), ("rn", rn), ("rm", rm)):
            vec("ext", name, r, BYTES)
        same_arrangement("ext", rd=rd, rn=rn, rm=rm)
        imm("ext", "index", index, 0, rd.lanes - 1)
        word = rd.q << 30 | 0b101110 << 24 | rm.idx << 16 | index << 11 | rn.idx << 5 | rd.idx
        self.emit(word, f"ext {rd}, {rn}, {rm}, #{index}")

    # == Advanced SIMD copy =================================================
    def _simd_copy(
        self, text: str, q: int, op: int, imm5: int, imm4: int, rd: int, rn: int, is_scalar: bool = False
    ) -> None:
        """``0 Q op 01110000 imm5 0 imm4 1 Rn Rd`` (scalar: ``01 op 11110000 ...``)."""
        word = (
            (1 << 30 | 1 << 28 if is_scalar else q << 30)
            | op << 29
            | 0b01110000 << 21
            | imm5 << 16
            | imm4 << 11
            | 1 << 10
            | rn << 5
            | rd
        )
        self.emit(word, text)

    @staticmethod
    def _imm5(el: VElem) -> int:
        shift = _SHIFT[el.esize]
        return el.index << (shift + 1) | 1 << shift

    def dup(self, rd: VecReg | ScalarReg, rn: VElem | WReg | XReg) -> None:
        """``dup vd.T, vn.Ts[i]``, ``dup vd.T, wn|xn`` (general) or scalar ``dup s0, v1.s[i]``."""
        if isinstance(rd, ScalarReg):
            scalar("dup", "rd", rd, ("b", "h", "s", "d"))
            el = velem("dup", "rn", rn, (rd.esize,))
            return self._simd_copy(f"dup {rd}, {el}", 1, 0, self._imm5(el), 0b0000, rd.idx, el.idx, True)
        vec("dup", "rd", rd, NO_1D)
        if isinstance(rn, VElem):
            el = velem("dup", "rn", rn, (rd.esize,))
            return self._simd_copy(f"dup {rd}, {el}", rd.q, 0, self._imm5(el), 0b0000, rd.idx, el.idx)
        want = "an X register" if rd.esize == "d" else "a W register"
        if not isinstance(rn, XReg if rd.esize == "d" else WReg):
            raise fail("dup", "rn", f"an indexed element of size {rd.esize} or {want}", rn)
        n, _ = gpr("dup", "rn", rn)
        imm5 = 1 << _SHIFT[rd.esize]
        self._simd_copy(f"dup {rd}, {rn}", rd.q, 0, imm5, 0b0001, rd.idx, n)

    def ins(self, rd: VElem, rn: VElem | WReg | XReg, *, _mn: str = "ins") -> None:
        """``ins vd.Ts[i], vn.Ts[j]`` (element) or ``ins vd.Ts[i], wn|xn`` (general, X for .d)."""
        velem(_mn, "rd", rd, ("b", "h", "s", "d"))
        if isinstance(rn, VElem):
            el = velem(_mn, "rn", rn, (rd.esize,))
            imm4 = el.index << _SHIFT[rd.esize]
            return self._simd_copy(f"{_mn} {rd}, {el}", 1, 1, self._imm5(rd), imm4, rd.idx, el.idx)
        want = "an X register" if rd.esize == "d" else "a W register"
        if not isinstance(rn, XReg if rd.esize == "d" else WReg):
            raise fail(_mn, "rn", f"an indexed element of size {rd.esize} or {want}", rn)
        n, _ = gpr(_mn, "rn", rn)
        self._simd_copy(f"{_mn} {rd}, {rn}", 1, 0, self._imm5(rd), 0b0011, rd.idx, n)

    def _mov_to_general(self, mn: str, imm4: int, rd: WReg | XReg, rn: VElem, sizes: dict) -> None:
        """UMOV/SMOV: ``sizes`` maps W/X to the legal element sizes."""
        kind = "X" if isinstance(rd, XReg) else "W"
        if not isinstance(rd, (WReg, XReg)):
            raise fail(mn, "rd", "a W or X register", rd)
        n, sf = gpr(mn, "rd", rd)
        el = velem(mn, "rn", rn, sizes[kind])
        self._simd_copy(f"{mn} {rd}, {el}", sf, 0, self._imm5(el), imm4, n, el.idx)

    def umov(self, rd: WReg | XReg, rn: VElem) -> None:
        """``umov wd, vn.b/h/s[i]`` or ``umov xd, vn.d[i]``."""
        self._mov_to_general("umov", 0b0111, rd, rn, {"W": ("b", "h", "s"), "X": ("d",)})

    def smov(self, rd: WReg | XReg, rn: VElem) -> None:
        """``smov wd, vn.b/h[i]`` or ``smov xd, vn.b/h/s[i]`` (sign extend)."""
        self._mov_to_general("smov", 0b0101, rd, rn, {"W": ("b", "h"), "X": ("b", "h", "s")})

    def mov(self, *args, **kwargs) -> None:
        """NEON aliases of ``mov``.

        ``mov vd.Ts[i], vn.Ts[j]`` / ``mov vd.Ts[i], wn|xn`` (INS),
        ``mov wd, vn.s[i]`` / ``mov xd, vn.d[i]`` (UMOV), ``mov s0, v1.s[i]``
        (DUP scalar), ``mov vd.16b, vn.16b`` (ORR). Anything else goes to the
        base module.
        """
        if len(args) == 2 and not kwargs:
            rd, rn = args
            if isinstance(rd, VElem):
                return self.ins(rd, rn, _mn="mov")
            if isinstance(rd, VecReg):
                vec("mov", "rd", rd, BYTES)
                vec("mov", "rn", rn, BYTES)
                same_arrangement("mov", rd=rd, rn=rn)
                word = rd.q << 30 | 0b01110 << 24 | 0b10 << 22 | 1 << 21 | rn.idx << 16 | 0b000111 << 10 | rn.idx << 5
                return self.emit(word | rd.idx, f"mov {rd}, {rn}")
            if isinstance(rn, VElem) and isinstance(rd, (WReg, XReg)):
                return self._mov_to_general("mov", 0b0111, rd, rn, {"W": ("s",), "X": ("d",)})
            if isinstance(rn, VElem) and isinstance(rd, ScalarReg):
                scalar("mov", "rd", rd, ("b", "h", "s", "d"))
                el = velem("mov", "rn", rn, (rd.esize,))
                return self._simd_copy(f"mov {rd}, {el}", 1, 0, self._imm5(el), 0b0000, rd.idx, el.idx, True)
        return self._defer("mov", "a vector, an indexed element or a general register", args, kwargs)

    # == Advanced SIMD modified immediate ===================================
    def _simd_modified_imm(self, text: str, q: int, op: int, cmode: int, imm8: int, rd: int) -> None:
        """``0 Q op 0111100000 abc cmode o2=0 1 defgh Rd``."""
        word = (
            q << 30
            | op << 29
            | 0b0111100000 << 19
            | (imm8 >> 5) << 16
            | cmode << 12
            | 1 << 10
            | (imm8 & 0x1F) << 5
            | rd
        )
        self.emit(word, text)

    def _movi_shifted(self, mn: str, op: int, rd: VecReg, value: int, lsl: int | None, msl: int | None) -> None:
        imm(mn, "imm", value, 0, 255)
        if rd.esize == "h":
            if msl is not None:
                raise fail(mn, "msl", "absent for .4h/.8h", msl)
            shift = imm(mn, "lsl", lsl or 0, 0, 8, 8)
            cmode, suffix = 0b1000 | shift >> 2, f", lsl #{shift}" if shift else ""
        elif msl is not None:
            if lsl is not None:
                raise fail(mn, "lsl", "absent when msl is given", lsl)
            shift = imm(mn, "msl", msl, 8, 16, 8)
            cmode, suffix = 0b1100 | shift >> 4, f", msl #{shift}"
        else:
            shift = imm(mn, "lsl", lsl or 0, 0, 24, 8)
            cmode, suffix = shift >> 2, f", lsl #{shift}" if shift else ""
        self._simd_modified_imm(f"{mn} {rd}, #{value}{suffix}", rd.q, op, cmode, value, rd.idx)

    def movi(self, rd: VecReg | ScalarReg, value: int, lsl: int | None = None, msl: int | None = None) -> None:
        """``movi``: vector immediate.

        ``movi vd.8b/16b, #imm8``; ``movi vd.4h/8h, #imm8{, lsl #0/8}``;
        ``movi vd.2s/4s, #imm8{, lsl #0/8/16/24}`` or ``, msl #8/16``;
        ``movi vd.2d, #imm64`` / ``movi dd, #imm64`` where every byte of imm64 is
        0x00 or 0xff (``movi v0.2d, #0`` zeroes a register).
        """
        if isinstance(rd, ScalarReg) or (isinstance(rd, VecReg) and rd.esize == "d"):
            if isinstance(rd, ScalarReg):
                scalar("movi", "rd", rd, ("d",))
            else:
                vec("movi", "rd", rd, ("2d",))
            if lsl is not None or msl is not None:
                raise fail("movi", "shift", "absent for a 64-bit immediate", lsl if lsl is not None else msl)
            imm("movi", "imm", value, 0, (1 << 64) - 1)
            octets = [(value >> (8 * i)) & 0xFF for i in range(8)]
            if any(o not in (0, 0xFF) for o in octets):
                raise fail("movi", "imm", "a 64-bit value whose bytes are each 0x00 or 0xff", hex(value))
            imm8 = sum(1 << i for i, o in enumerate(octets) if o)
            q = 1 if isinstance(rd, VecReg) else 0
            return self._simd_modified_imm(f"movi {rd}, #{value:#x}", q, 1, 0b1110, imm8, rd.idx)
        vec("movi", "rd", rd, ("8b", "16b", "4h", "8h", "2s", "4s"))
        if rd.esize == "b":
            if lsl is not None or msl is not None:
                raise fail("movi", "shift", "absent for .8b/.16b", lsl if lsl is not None else msl)
            imm("movi", "imm", value, 0, 255)
            return self._simd_modified_imm(f"movi {rd}, #{value}", rd.q, 0, 0b1110, value, rd.idx)
        self._movi_shifted("movi", 0, rd, value, lsl, msl)

    def mvni(self, rd: VecReg, value: int, lsl: int | None = None, msl: int | None = None) -> None:
        """``mvni vd.4h/8h/2s/4s, #imm8{, lsl #n | msl #n}`` (move inverted immediate)."""
        vec("mvni", "rd", rd, ("4h", "8h", "2s", "4s"))
        self._movi_shifted("mvni", 1, rd, value, lsl, msl)

    # == Advanced SIMD three-register extension (BF16) ======================
    def _simd_three_same_extra(self, text: str, q: int, u: int, size: int, opcode: int, rd: int, rn: int, rm: int):
        """``0 Q U 01110 size 0 Rm 1 opcode 1 Rn Rd``."""
        word = (
            q << 30 | u << 29 | 0b01110 << 24 | size << 22 | rm << 16 | 1 << 15 | opcode << 11 | 1 << 10 | rn << 5 | rd
        )
        self.emit(word, text)

    def bfdot(self, rd: VecReg, rn: VecReg, rm: VecReg | VElemGroup) -> None:
        """``bfdot vd.2s/4s, vn.4h/8h, vm.4h/8h`` or by element ``bfdot vd.4s, vn.8h, vm.2h[i]``."""
        vec("bfdot", "rd", rd, ("2s", "4s"))
        half = "8h" if rd.q else "4h"
        vec("bfdot", "rn", rn, (half,))
        if isinstance(rm, VElemGroup):
            if rm.group != "2h":
                raise fail("bfdot", "rm", "an element group vm.2h[0..3]", rm)
            text = f"bfdot {rd}, {rn}, {rm}"
            return self._simd_by_element(
                text, False, rd.q, 0, 0b01, 0b1111, rd.idx, rn.idx, rm.idx, rm.index >> 1, rm.index & 1
            )
        if not isinstance(rm, VecReg) or rm.arrangement != half:
            raise fail("bfdot", "rm", f"a vector with arrangement {half} or an element group vm.2h[0..3]", rm)
        self._simd_three_same_extra(f"bfdot {rd}, {rn}, {rm}", rd.q, 1, 0b01, 0b1111, rd.idx, rn.idx, rm.idx)

    def _bf16_widening(self, mn: str, q: int, size: int, opcode: int, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        vec(mn, "rd", rd, ("4s",))
        vec(mn, "rn", rn, ("8h",))
        vec(mn, "rm", rm, ("8h",))
        self._simd_three_same_extra(f"{mn} {rd}, {rn}, {rm}", q, 1, size, opcode, rd.idx, rn.idx, rm.idx)

    def bfmmla(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bfmmla vd.4s, vn.8h, vm.8h``: 2x4 bf16 times 4x2 bf16 into 2x2 fp32."""
        self._bf16_widening("bfmmla", 1, 0b01, 0b1101, rd, rn, rm)

    def bfmlalb(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bfmlalb vd.4s, vn.8h, vm.8h`` (even bf16 elements)."""
        self._bf16_widening("bfmlalb", 0, 0b11, 0b1111, rd, rn, rm)

    def bfmlalt(self, rd: VecReg, rn: VecReg, rm: VecReg) -> None:
        """``bfmlalt vd.4s, vn.8h, vm.8h`` (odd bf16 elements)."""
        self._bf16_widening("bfmlalt", 1, 0b11, 0b1111, rd, rn, rm)

    # == Advanced SIMD load/store ===========================================
    @staticmethod
    def _reglist(mn: str, regs: object, kind: type, counts: tuple[int, ...]) -> list:
        """A register list: one register of ``kind`` or a sequence of consecutive ones."""
        items = [regs] if isinstance(regs, kind) else list(regs) if isinstance(regs, (list, tuple)) else [regs]
        what = "vector registers" if kind is VecReg else "indexed elements"
        if not all(isinstance(r, kind) for r in items):
            raise fail(mn, "registers", f"{what} (one or a list)", ", ".join(map(str, items)))
        if len(items) not in counts:
            want = "/".join(map(str, counts))
            raise fail(mn, "registers", f"a list of {want} {what}", f"{len(items)}: " + ", ".join(map(str, items)))
        _consecutive(mn, items)
        return items

    @staticmethod
    def _ldst_address(mn: str, addr: object, transfer: int) -> tuple[bool, int, int, str]:
        """``[xn|sp]``, ``[xn|sp], #transfer`` or ``[xn|sp], xm``: (post, Rn, Rm, text)."""
        want = f"[xn|sp], [xn|sp], #{transfer} or [xn|sp], xm"
        if not isinstance(addr, Mem) or addr.mul_vl or addr.extend is not None:
            raise fail(mn, "address", want, addr)
        if not isinstance(addr.base, XReg):
            raise fail(mn, "address base", "x0..x30 or sp", addr.base)
        rn, _ = gpr(mn, "address base", addr.base, sp=True)
        if addr.mode == "offset":
            if addr.reg_offset or addr.offset != 0:
                raise fail(mn, "address", want + " (no offset)", addr)
            return False, rn, 0, str(addr)
        if addr.mode != "post":
            raise fail(mn, "address", want + " (no pre-index)", addr)
        if isinstance(addr.offset, XReg):
            rm, _ = gpr(mn, "post-index register", addr.offset, zr=False)
            return True, rn, rm, str(addr)
        if isinstance(addr.offset, WReg) or addr.offset != transfer:
            raise fail(mn, "post-index", f"#{transfer} (the transfer size) or x0..x30", addr.offset)
        return True, rn, 31, str(addr)

    def _ldst_multiple(self, mn: str, load: int, opcode_for: dict, regs: object, addr: object, arrs: tuple) -> None:
        """Load/store multiple structures (post-indexed when ``addr`` is):

        ``0 Q 0011000 L 000000 opcode size Rn Rt`` / ``0 Q 0011001 L 0 Rm opcode size Rn Rt``.
        """
        items = self._reglist(mn, regs, VecReg, tuple(opcode_for))
        for i, r in enumerate(items):
            vec(mn, f"register {i}", r, arrs)
        same_arrangement(mn, **{f"reg{i}": r for i, r in enumerate(items)})
        first = items[0]
        post, rn, rm, addr_text = self._ldst_address(mn, addr, len(items) * (16 if first.q else 8))
        word = (
            first.q << 30
            | 0b0011000 << 23
            | post << 23
            | load << 22
            | rm << 16
            | opcode_for[len(items)] << 12
            | SIZE_BITS[first.esize] << 10
            | rn << 5
            | first.idx
        )
        self.emit(word, f"{mn} {{ {', '.join(map(str, items))} }}, {addr_text}")

    def _ldst_single(self, mn: str, load: int, regs: object, addr: object, replicate: bool) -> None:
        """Load/store single structure (one lane, or load-and-replicate):

        ``0 Q 0011010 L R 00000 opcode S size Rn Rt`` / ``0 Q 0011011 L R Rm opcode S size Rn Rt``.
        """
        n = int(mn[2])
        if replicate:
            items = self._reglist(mn, regs, VecReg, (n,))
            for i, r in enumerate(items):
                vec(mn, f"register {i}", r, ALL)
            same_arrangement(mn, **{f"reg{i}": r for i, r in enumerate(items)})
            first = items[0]
            esize = first.esize
            q, s, size, opcode = first.q, 0, SIZE_BITS[esize], 0b110 | (n - 1) >> 1
            list_text = f"{{ {', '.join(map(str, items))} }}"
        else:
            items = self._reglist(mn, regs, VElem, (n,))
            first = items[0]
            esize, index = first.esize, first.index
            for i, r in enumerate(items):
                if r.esize != esize or r.index != index:
                    raise fail(mn, f"register {i}", f"v<n>.{esize}[{index}] like the first", r)
            low = (n - 1) >> 1
            if esize == "b":
                q, s, size, opcode = index >> 3, index >> 2 & 1, index & 3, 0b000 | low
            elif esize == "h":
                q, s, size, opcode = index >> 2, index >> 1 & 1, (index & 1) << 1, 0b010 | low
            elif esize == "s":
                q, s, size, opcode = index >> 1, index & 1, 0b00, 0b100 | low
            else:
                q, s, size, opcode = index, 0, 0b01, 0b100 | low
            list_text = f"{{ {', '.join(f'v{r.idx}.{esize}' for r in items)} }}[{index}]"
        post, rn, rm, addr_text = self._ldst_address(mn, addr, n * ELEM_BYTES[esize])
        word = (
            q << 30
            | 0b0011010 << 23
            | post << 23
            | load << 22
            | (n - 1 & 1) << 21
            | rm << 16
            | opcode << 13
            | s << 12
            | size << 10
            | rn << 5
            | first.idx
        )
        self.emit(word, f"{mn} {list_text}, {addr_text}")

    def _ld_st(self, mn: str, load: int, regs: object, addr: object) -> None:
        if isinstance(regs, VElem) or (isinstance(regs, (list, tuple)) and regs and isinstance(regs[0], VElem)):
            return self._ldst_single(mn, load, regs, addr, replicate=False)
        n = int(mn[2])
        if n == 1:
            return self._ldst_multiple(mn, load, _LD1_OPCODE, regs, addr, ALL)
        return self._ldst_multiple(mn, load, {n: _LDN_OPCODE[n]}, regs, addr, NO_1D)

    def ld1(self, regs: VecReg | VElem | Sequence, addr: Mem) -> None:
        """``ld1 { 1..4 consecutive vt.T }, addr`` or one lane ``ld1 { vt.S }[i], addr``.

        ``addr`` is ``mem(xn)``, ``post(xn, <bytes transferred>)`` or ``post(xn, xm)``.
        """
        self._ld_st("ld1", 1, regs, addr)

    def st1(self, regs: VecReg | VElem | Sequence, addr: Mem) -> None:
        """``st1 { 1..4 consecutive vt.T }, addr`` or one lane ``st1 { vt.S }[i], addr``."""
        self._ld_st("st1", 0, regs, addr)

    def ld2(self, regs: Sequence, addr: Mem) -> None:
        """``ld2 { vt.T, vt2.T }, addr`` (de-interleave pairs) or a lane."""
        self._ld_st("ld2", 1, regs, addr)

    def st2(self, regs: Sequence, addr: Mem) -> None:
        """``st2 { vt.T, vt2.T }, addr`` or a lane."""
        self._ld_st("st2", 0, regs, addr)

    def ld3(self, regs: Sequence, addr: Mem) -> None:
        """``ld3 { vt.T, vt2.T, vt3.T }, addr`` or a lane."""
        self._ld_st("ld3", 1, regs, addr)

    def st3(self, regs: Sequence, addr: Mem) -> None:
        """``st3 { vt.T, vt2.T, vt3.T }, addr`` or a lane."""
        self._ld_st("st3", 0, regs, addr)

    def ld4(self, regs: Sequence, addr: Mem) -> None:
        """``ld4 { vt.T .. vt4.T }, addr`` or a lane."""
        self._ld_st("ld4", 1, regs, addr)

    def st4(self, regs: Sequence, addr: Mem) -> None:
        """``st4 { vt.T .. vt4.T }, addr`` or a lane."""
        self._ld_st("st4", 0, regs, addr)

    def ld1r(self, regs: VecReg | Sequence, addr: Mem) -> None:
        """``ld1r { vt.T }, addr``: load one element and replicate it to all lanes (post-index = element size)."""
        self._ldst_single("ld1r", 1, regs, addr, replicate=True)

    def ld2r(self, regs: Sequence, addr: Mem) -> None:
        """``ld2r { vt.T, vt2.T }, addr``."""
        self._ldst_single("ld2r", 1, regs, addr, replicate=True)

    def ld3r(self, regs: Sequence, addr: Mem) -> None:
        """``ld3r { vt.T, vt2.T, vt3.T }, addr``."""
        self._ldst_single("ld3r", 1, regs, addr, replicate=True)

    def ld4r(self, regs: Sequence, addr: Mem) -> None:
        """``ld4r { vt.T .. vt4.T }, addr``."""
        self._ldst_single("ld4r", 1, regs, addr, replicate=True)
