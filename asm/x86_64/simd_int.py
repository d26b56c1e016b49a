"""AVX2 and AVX-512 integer vector instructions (VEX and EVEX encodings) for the integer kernels.

Encoding classes (each one helper; the VEX/EVEX choice and disp8*N as in `asm.x86_64.simd`):

* three-operand arithmetic ``dst, src1, src2/mem/{1toN}`` (`INT3`: ``vpaddd``, ``vpaddq``,
  ``vpmulld``, ``vpmullq`` (AVX512DQ, EVEX only), ``vpmuludq``, ``vpxor`` (VEX only),
  ``vpxord``/``vpxorq`` (EVEX only), ``vpand``, ``vpcmpeqq``, ``vpcmpgtq`` (VEX only: their EVEX
  forms write a mask register)) -- `asm.x86_64.simd.SimdMixin._arith3`;
* shifts by an immediate ``dst, src/mem/{1toN}, imm8`` (`SHIFT_IMM`: ``vpsllq``, ``vpsrlq``; the
  opcode extension in ModR/M.reg, the destination in VEX/EVEX.vvvv; a memory source is EVEX only);
* ``vpshufd dst, src/mem/{1toN}, imm8`` (two-operand with an immediate);
* ``vpbroadcastd`` / ``vpbroadcastq dst, xmm/m32/m64`` (VEX.W0 for both; EVEX.W0 / W1).

VEX.WIG instructions are encoded with W0, as llvm-mc does.
"""

from __future__ import annotations

from asm.x86_64.operands import fail, imm, memop, unmask, vec
from asm.x86_64.registers import Vec
from asm.x86_64.simd import ALL, Op, SimdMixin, _make3

__all__ = ["BROADCASTS", "INT3", "SHIFT_IMM", "IntSimdMixin"]

# three-operand integer forms (VEX.66.0F/0F38; EVEX W by element size); ``commutable``: the 0F-map
# forms llvm-mc swaps for a 2-byte VEX prefix
INT3: dict[str, Op] = {
    "vpaddd": Op(0x66, "0F", 0xFE, 0, 0, 4, True),
    "vpaddq": Op(0x66, "0F", 0xD4, 0, 1, 8, True),
    "vpmuludq": Op(0x66, "0F", 0xF4, 0, 1, 8, True),
    "vpmulld": Op(0x66, "0F38", 0x40, 0, 0, 4),
    "vpmullq": Op(0x66, "0F38", 0x40, None, 1, 8),
    "vpxor": Op(0x66, "0F", 0xEF, 0, None, 0, True),
    "vpxord": Op(0x66, "0F", 0xEF, None, 0, 4),
    "vpxorq": Op(0x66, "0F", 0xEF, None, 1, 8),
    "vpand": Op(0x66, "0F", 0xDB, 0, None, 0, True),
    "vpcmpeqq": Op(0x66, "0F38", 0x29, 0, None, 0),
    "vpcmpgtq": Op(0x66, "0F38", 0x37, 0, None, 0),
}
#: shifts by an immediate: (opcode op, ModR/M.reg extension)
SHIFT_IMM: dict[str, tuple[Op, int]] = {
    "vpsllq": (Op(0x66, "0F", 0x73, 0, 1, 8), 6),
    "vpsrlq": (Op(0x66, "0F", 0x73, 0, 1, 8), 2),
}
PSHUFD = Op(0x66, "0F", 0x70, 0, 0, 4)
#: vpbroadcastd / vpbroadcastq: (op, element bytes)
BROADCASTS: dict[str, tuple[Op, int]] = {
    "vpbroadcastd": (Op(0x66, "0F38", 0x58, 0, 0, 4), 4),
    "vpbroadcastq": (Op(0x66, "0F38", 0x59, 0, 1, 8), 8),
}


class IntSimdMixin:
    """Integer VEX/EVEX instructions; mixed into `Assembler` after `SimdMixin` (uses its helpers)."""

    def _src_imm(self, mn: str, op: Op, ext: int | None, dst, src, imm8: int) -> None:
        """``mn dst, src, imm8``: ``ext`` None -> dst in ModR/M.reg (vpshufd), else dst in vvvv
        and ``ext`` in ModR/M.reg (shifts by an immediate)."""
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        bits = d.bits
        rm, stext, b, n = SimdMixin._vsrc(mn, "src", src, bits, op.esize)
        imm(mn, "imm", imm8, 0, 255)
        text = f"{mn} {dst}, {stext}, {imm8}"
        regs = [d, src]
        reg, vvvv = (d.idx, 0) if ext is None else (ext, d.idx)
        if ext is not None and not isinstance(src, Vec):  # the shifts' memory forms are EVEX only
            return self._evex(mn, text, op, bits=bits, reg=reg, vvvv=vvvv, rm=rm, k=k, z=z, b=b, n=n, imm8=imm8)
        self._vex_or_evex(mn, text, op, regs, bits=bits, reg=reg, vvvv=vvvv, rm=rm, k=k, z=z, b=b, n=n, imm8=imm8)

    def vpsllq(self, dst, src, imm8: int) -> None:
        """``vpsllq dst, src/mem/{1toN}, imm8`` (VEX; EVEX for zmm, 16..31, masks, broadcast)."""
        op, ext = SHIFT_IMM["vpsllq"]
        self._src_imm("vpsllq", op, ext, dst, src, imm8)

    def vpsrlq(self, dst, src, imm8: int) -> None:
        """``vpsrlq dst, src/mem/{1toN}, imm8`` (VEX; EVEX for zmm, 16..31, masks, broadcast)."""
        op, ext = SHIFT_IMM["vpsrlq"]
        self._src_imm("vpsrlq", op, ext, dst, src, imm8)

    def vpshufd(self, dst, src, imm8: int) -> None:
        """``vpshufd dst, src/mem/{1toN}, imm8``: dwords of each 128-bit lane by ``imm8``."""
        self._src_imm("vpshufd", PSHUFD, None, dst, src, imm8)

    def _vpbroadcast(self, mn: str, dst, src) -> None:
        op, esize = BROADCASTS[mn]
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        if isinstance(src, Vec):
            vec(mn, "src", src, (128,))
            rm, stext = src.idx, str(src)
        else:
            if getattr(src, "bcst", False):
                raise fail(mn, "src", "an xmm register or a memory operand", src)
            m = memop(mn, "src", src, esize)
            rm, stext = m.addr, str(m)
        text = f"{mn} {dst}, {stext}"
        self._vex_or_evex(mn, text, op, [d, src], bits=d.bits, reg=d.idx, vvvv=0, rm=rm, k=k, z=z, n=esize)

    def vpbroadcastd(self, dst, src) -> None:
        """``vpbroadcastd dst, xmm/m32`` (every dword lane)."""
        self._vpbroadcast("vpbroadcastd", dst, src)

    def vpbroadcastq(self, dst, src) -> None:
        """``vpbroadcastq dst, xmm/m64`` (every qword lane)."""
        self._vpbroadcast("vpbroadcastq", dst, src)


for _mn, _op in INT3.items():
    setattr(IntSimdMixin, _mn, _make3(_mn, _op))
