"""AVX, AVX2, FMA and AVX-512 instructions (VEX and EVEX encodings).

An instruction that exists in both encodings is VEX-encoded whenever its
operands allow it (xmm/ymm 0..15, no write mask, no embedded broadcast) and
EVEX-encoded otherwise (zmm, registers 16..31, ``{k}``/``{z}``, ``{1toN}``),
the same choice llvm-mc makes. EVEX memory operands use compressed disp8*N
(N = vector bytes for full-vector forms, the element size with broadcast or
for scalar tuples, 16/32 for the 128/256-bit tuple forms).

Operands, destination first (Intel order):

    a.vaddps(zmm0.maskz(k1), zmm1, zmmword(rax + 64))
    a.vfmadd231ps(zmm0, zmm1, bcst(rsi + 4))        # dword ptr [rsi + 4]{1to16}
    a.vmovups(zmmword(rdi).mask(k2), zmm3)           # masked store
    a.vcmpps(k1.mask(k2), zmm0, zmm1, 1)             # predicate 0..31
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from asm.errors import EncodingError
from asm.x86_64.encoding import MAP, PP, evex, modrm_sib_disp, vex
from asm.x86_64.memory import Addr, Mem
from asm.x86_64.operands import fail, gpr, imm, kreg, memop, unmask, vec
from asm.x86_64.registers import Gpr, KReg, Masked, Vec

ALL = (128, 256, 512)


@dataclass(frozen=True)
class Op:
    """Opcode and prefix fields of one VEX/EVEX instruction.

    ``wv``/``we``: W bit in the VEX/EVEX form (None: that encoding does not exist).
    ``esize``: element bytes for broadcast (0: no broadcast form).
    ``commutable``: llvm-mc swaps the sources of the VEX register form when
    that allows the 2-byte VEX prefix (src1 in xmm0..7, src2 in xmm8..15).
    """

    pp: int | None
    mp: str
    opcode: int
    wv: int | None
    we: int | None
    esize: int = 4
    commutable: bool = False


def _ps_pd(pp_ps, mp: str, opcode: int, *, fma: bool = False, vex_ok: bool = True, comm: bool = False) -> dict[str, Op]:
    """The ps/pd pair of an opcode: pd adds 66 (unless fma) and EVEX.W1 (VEX.W1 too for FMA)."""
    ps = Op(pp_ps, mp, opcode, 0 if vex_ok else None, 0, 4, comm)
    pd_pp = pp_ps if fma else 0x66
    pd = Op(pd_pp, mp, opcode, (1 if fma else 0) if vex_ok else None, 1, 8, comm)
    return {"ps": ps, "pd": pd}


# three-operand full-vector forms: dst, src1, src2 (vector / memory / broadcast)
ARITH3: dict[str, Op] = {}
for _name, _opc in {"vadd": 0x58, "vmul": 0x59, "vxor": 0x57}.items():
    for _sfx, _op in _ps_pd(None, "0F", _opc, comm=True).items():
        ARITH3[_name + _sfx] = _op
for _name, _opc in {"vsub": 0x5C, "vmin": 0x5D, "vdiv": 0x5E, "vmax": 0x5F, "vunpckl": 0x14, "vunpckh": 0x15}.items():
    for _sfx, _op in _ps_pd(None, "0F", _opc).items():
        ARITH3[_name + _sfx] = _op
for _name, _opc in {
    "vfmadd132": 0x98,
    "vfmadd213": 0xA8,
    "vfmadd231": 0xB8,
    "vfnmadd132": 0x9C,
    "vfnmadd213": 0xAC,
    "vfnmadd231": 0xBC,
}.items():
    for _sfx, _op in _ps_pd(0x66, "0F38", _opc, fma=True).items():
        ARITH3[_name + _sfx] = _op
for _sfx, _op in _ps_pd(0x66, "0F38", 0x7F, fma=True, vex_ok=False).items():
    ARITH3["vpermt2" + _sfx] = _op
for _sfx, _op in _ps_pd(0x66, "0F38", 0x77, fma=True, vex_ok=False).items():
    ARITH3["vpermi2" + _sfx] = _op

# with an imm8: dst, src1, src2, imm
ARITH3_IMM: dict[str, Op] = {}
for _sfx, _op in _ps_pd(None, "0F", 0xC6).items():
    ARITH3_IMM["vshuf" + _sfx] = _op

# moves: (load opcode, store opcode)
MOVES = {
    "vmovups": (Op(None, "0F", 0x10, 0, 0), 0x11),
    "vmovupd": (Op(0x66, "0F", 0x10, 0, 1), 0x11),
    "vmovaps": (Op(None, "0F", 0x28, 0, 0), 0x29),
    "vmovapd": (Op(0x66, "0F", 0x28, 0, 1), 0x29),
}
#: the store form of each move
STORE_OPS = {mn: Op(op.pp, op.mp, store, op.wv, op.we) for mn, (op, store) in MOVES.items()}
#: vbroadcastss / vbroadcastsd by element bytes
BROADCAST_OPS = {4: Op(0x66, "0F38", 0x18, 0, 0), 8: Op(0x66, "0F38", 0x19, 0, 1)}


@lru_cache(maxsize=None, typed=True)
def _opcode(*fields) -> Op:
    """``Op(*fields)``, one shared instance per distinct fields (the encoders of the rarer forms
    name their opcode fields inline; building the dataclass on every call would cost more than
    encoding the instruction)."""
    return Op(*fields)


def _high(regs) -> bool:
    """Whether a vector register among ``regs`` is one of 16..31 (EVEX only)."""
    for r in regs:
        if isinstance(r, Vec) and r.idx > 15:
            return True
    return False


class SimdMixin:
    """VEX/EVEX instructions; mixed into `Assembler` (uses `BaseMixin._emit_rm`)."""

    # -- encoding classes ------------------------------------------------------------
    def _vex(self, mn: str, text: str, op: Op, *, l256: int, reg: int, vvvv: int, rm: int | Addr, imm8=None) -> None:
        """VEX prefix + opcode + ModR/M [+ imm8]."""
        if op.wv is None:
            raise EncodingError(f"{mn}: has no VEX form")
        enc = modrm_sib_disp(reg, rm)
        head = vex((reg >> 3) & 1, enc.x, enc.b, MAP[op.mp], op.wv, vvvv, l256, PP[op.pp]) + bytes([op.opcode])
        self._emit_rm(mn, text, head, enc, b"" if imm8 is None else bytes([imm8]))

    def _evex(
        self,
        mn: str,
        text: str,
        op: Op,
        *,
        bits: int,
        reg: int,
        vvvv: int,
        rm: int | Addr,
        k: int = 0,
        z: int = 0,
        b: int = 0,
        n: int = 1,
        imm8=None,
    ) -> None:
        """EVEX prefix + opcode + ModR/M with disp8*N [+ imm8]."""
        if op.we is None:
            raise EncodingError(f"{mn}: has no EVEX form")
        enc = modrm_sib_disp(reg, rm, n)
        ll = {128: 0, 256: 1, 512: 2}[bits]
        head = evex(reg, enc.x, enc.b, MAP[op.mp], op.we, vvvv, PP[op.pp], z, ll, b, k) + bytes([op.opcode])
        self._emit_rm(mn, text, head, enc, b"" if imm8 is None else bytes([imm8]))

    def _vex_or_evex(
        self,
        mn: str,
        text: str,
        op: Op,
        regs: list,
        *,
        bits: int,
        reg: int,
        vvvv: int,
        rm,
        k=0,
        z=0,
        b=0,
        n=1,
        imm8=None,
    ) -> None:
        """VEX when the operands allow it and the instruction has a VEX form, else EVEX."""
        need_evex = bits == 512 or bool(k) or bool(b) or _high(regs)
        if need_evex and op.we is None:
            raise EncodingError(f"{mn}: VEX-only instruction: operands must be xmm/ymm 0..15 without mask, got {text}")
        if not need_evex and op.wv is not None:
            return self._vex(mn, text, op, l256=int(bits == 256), reg=reg, vvvv=vvvv, rm=rm, imm8=imm8)
        self._evex(mn, text, op, bits=bits, reg=reg, vvvv=vvvv, rm=rm, k=k, z=z, b=b, n=n, imm8=imm8)

    # -- operand helpers ------------------------------------------------------------------
    @staticmethod
    def _vsrc(mn: str, operand: str, x: object, bits: int, esize: int, max_idx: int = 31):
        """A full-vector source: register, memory or (``esize``) broadcast.

        Returns ``(rm, text, bcst bit, disp8 scale N)``.
        """
        if isinstance(x, Vec):
            vec(mn, operand, x, (bits,), max_idx)
            return x.idx, str(x), 0, 1
        if isinstance(x, Mem) and x.bcst:
            if not esize:
                raise fail(mn, operand, "a register or memory operand without broadcast", x)
            if x.size not in (None, esize):
                raise fail(mn, operand, f"a {'dword' if esize == 4 else 'qword'} broadcast", x)
            return x.addr, x.text(esize, bits // 8 // esize), 1, esize
        if isinstance(x, Mem):
            m = memop(mn, operand, x, bits // 8)
            return m.addr, str(m), 0, bits // 8
        w = {128: "xmm", 256: "ymm", 512: "zmm"}[bits]
        raise fail(mn, operand, f"a {w} register or a memory operand", x)

    @staticmethod
    def _nomask(mn: str, operand: str, x: object) -> object:
        if isinstance(x, Masked):
            raise fail(mn, operand, "unmasked (this form has no EVEX encoding)", x)
        return x

    # -- full-vector three-operand forms -------------------------------------------------
    def _arith3(self, mn: str, op: Op, dst, src1, src2, imm8=None) -> None:
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        bits = d.bits
        vec(mn, "src1", src1, (bits,))
        rm, stext, b, n = self._vsrc(mn, "src2", src2, bits, op.esize if op.we is not None else 0)
        if imm8 is not None:
            imm(mn, "imm", imm8, 0, 255)
        text = f"{mn} {dst}, {src1}, {stext}" + (f", {imm8}" if imm8 is not None else "")
        # `_vex_or_evex`'s choice, inline
        need_evex = bits == 512 or k or b or d.idx > 15 or src1.idx > 15 or (isinstance(src2, Vec) and src2.idx > 15)
        if need_evex and op.we is None:
            raise EncodingError(f"{mn}: VEX-only instruction: operands must be xmm/ymm 0..15 without mask, got {text}")
        if not need_evex and op.wv is not None:
            if op.commutable and isinstance(src2, Vec) and src1.idx < 8 <= src2.idx:
                return self._vex(mn, text, op, l256=int(bits == 256), reg=d.idx, vvvv=src2.idx, rm=src1.idx, imm8=imm8)
            return self._vex(mn, text, op, l256=int(bits == 256), reg=d.idx, vvvv=src1.idx, rm=rm, imm8=imm8)
        self._evex(mn, text, op, bits=bits, reg=d.idx, vvvv=src1.idx, rm=rm, k=k, z=z, b=b, n=n, imm8=imm8)

    # -- moves ----------------------------------------------------------------------------
    def _vmov(self, mn: str, dst, src) -> None:
        op, sop = MOVES[mn][0], STORE_OPS[mn]
        inner = dst.op if isinstance(dst, Masked) else dst
        if isinstance(inner, Mem):
            m, k, _ = unmask(mn, "dst", dst, zero_ok=False)
            s = vec(mn, "src", src, ALL)
            m = memop(mn, "dst", m, s.bits // 8)
            dtext = m.text() + (f" {{k{k}}}" if k else "")
            text = f"{mn} {dtext}, {s}"
            n = s.bits // 8
            return self._vex_or_evex(mn, text, sop, [s], bits=s.bits, reg=s.idx, vvvv=0, rm=m.addr, k=k, n=n)
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        rm, stext, _, n = self._vsrc(mn, "src", src, d.bits, 0)
        text = f"{mn} {dst}, {stext}"
        regs = [d, src]
        evex_needed = d.bits == 512 or k or _high(regs)
        if isinstance(src, Vec) and not evex_needed and d.idx < 8 <= src.idx:
            # llvm-mc prefers the store form here: the extended register goes in ModR/M.reg (2-byte VEX)
            return self._vex(mn, text, sop, l256=int(d.bits == 256), reg=src.idx, vvvv=0, rm=d.idx)
        self._vex_or_evex(mn, text, op, regs, bits=d.bits, reg=d.idx, vvvv=0, rm=rm, k=k, z=z, n=n)

    # -- broadcasts -----------------------------------------------------------------------
    def _vbroadcast(self, mn: str, dst, src, esize: int) -> None:
        op = BROADCAST_OPS[esize]
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL if esize == 4 else (256, 512))
        if isinstance(src, Vec):
            vec(mn, "src", src, (128,))
            rm, stext = src.idx, str(src)
        else:
            m = memop(mn, "src", src, esize)
            rm, stext = m.addr, str(m)
        text = f"{mn} {dst}, {stext}"
        self._vex_or_evex(mn, text, op, [d, src], bits=d.bits, reg=d.idx, vvvv=0, rm=rm, k=k, z=z, n=esize)

    def vbroadcastss(self, dst, src) -> None:
        """``vbroadcastss xmm/ymm/zmm{k}{z}, xmm/m32``."""
        self._vbroadcast("vbroadcastss", dst, src, 4)

    def vbroadcastsd(self, dst, src) -> None:
        """``vbroadcastsd ymm/zmm{k}{z}, xmm/m64``."""
        self._vbroadcast("vbroadcastsd", dst, src, 8)

    # -- compare into a mask --------------------------------------------------------------
    def _vcmp(self, mn: str, dst, src1, src2, pred: int) -> None:
        op = _opcode(
            None if mn == "vcmpps" else 0x66, "0F", 0xC2, None, 0 if mn == "vcmpps" else 1, 4 if mn == "vcmpps" else 8
        )
        if isinstance(dst, Vec):
            return _vcmp_vec(self, mn, dst, src1, src2, pred)
        kd, k, _ = unmask(mn, "dst", dst, zero_ok=False)
        kreg(mn, "dst", kd)
        s1 = vec(mn, "src1", src1, ALL)
        rm, stext, b, n = self._vsrc(mn, "src2", src2, s1.bits, op.esize)
        imm(mn, "predicate", pred, 0, 31)
        text = f"{mn} {dst}, {s1}, {stext}, {pred}"
        self._evex(mn, text, op, bits=s1.bits, reg=kd.idx, vvvv=s1.idx, rm=rm, k=k, b=b, n=n, imm8=pred)

    def vcmpps(self, dst, src1, src2, pred: int) -> None:
        """``vcmpps k{k}, src1, src2/mem/bcst, pred`` (EVEX) or ``xmm/ymm, src1, src2/mem, pred`` (VEX)."""
        self._vcmp("vcmpps", dst, src1, src2, pred)

    def vcmppd(self, dst, src1, src2, pred: int) -> None:
        """``vcmppd k{k}, src1, src2/mem/bcst, pred`` (EVEX) or ``xmm/ymm, src1, src2/mem, pred`` (VEX)."""
        self._vcmp("vcmppd", dst, src1, src2, pred)

    # -- 128-bit lane permutes and inserts (VEX, AVX) -------------------------------------
    def vperm2f128(self, dst, src1, src2, sel: int) -> None:
        """``vperm2f128 ymm, ymm, ymm/m256, imm8`` (VEX only: ymm0..15)."""
        mn = "vperm2f128"
        d = vec(mn, "dst", self._nomask(mn, "dst", dst), (256,), 15)
        vec(mn, "src1", src1, (256,), 15)
        rm, stext, _, _ = self._vsrc(mn, "src2", src2, 256, 0, 15)
        imm(mn, "imm", sel, 0, 255)
        op = _opcode(0x66, "0F3A", 0x06, 0, None)
        self._vex(mn, f"{mn} {d}, {src1}, {stext}, {sel}", op, l256=1, reg=d.idx, vvvv=src1.idx, rm=rm, imm8=sel)

    def vpslld(self, dst, src, imm8: int) -> None:
        """``vpslld dst, src, imm8``: each dword shifted left by ``imm8`` (0 past 31). VEX for
        xmm/ymm 0..15 register sources; EVEX for zmm, registers 16..31, ``{k}{z}`` and memory or
        ``{1to N}`` sources (the VEX form has none). Destination in vvvv, /6 in ModR/M.reg."""
        mn = "vpslld"
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        rm, stext, b, n = self._vsrc(mn, "src", src, d.bits, 4)
        imm(mn, "imm", imm8, 0, 255)
        text = f"{mn} {dst}, {stext}, {imm8}"
        op = _opcode(0x66, "0F", 0x72, 0, 0, 4)
        if d.bits == 512 or k or b or not isinstance(src, Vec) or _high([d, src]):
            return self._evex(mn, text, op, bits=d.bits, reg=6, vvvv=d.idx, rm=rm, k=k, z=z, b=b, n=n, imm8=imm8)
        self._vex(mn, text, op, l256=int(d.bits == 256), reg=6, vvvv=d.idx, rm=rm, imm8=imm8)

    def vinsertf128(self, dst, src1, src2, lane: int) -> None:
        """``vinsertf128 ymm, ymm, xmm/m128, 0..1`` (VEX only: registers 0..15)."""
        mn = "vinsertf128"
        d = vec(mn, "dst", self._nomask(mn, "dst", dst), (256,), 15)
        vec(mn, "src1", src1, (256,), 15)
        rm, stext, _, _ = self._vsrc(mn, "src2", src2, 128, 0, 15)
        imm(mn, "imm", lane, 0, 1)
        op = _opcode(0x66, "0F3A", 0x18, 0, None)
        self._vex(mn, f"{mn} {d}, {src1}, {stext}, {lane}", op, l256=1, reg=d.idx, vvvv=src1.idx, rm=rm, imm8=lane)

    def vextractf128(self, dst, src, lane: int) -> None:
        """``vextractf128 xmm/m128, ymm, 0..1`` (VEX only: registers 0..15)."""
        mn = "vextractf128"
        s = vec(mn, "src", src, (256,), 15)
        rm, dtext, _, _ = self._vsrc(mn, "dst", self._nomask(mn, "dst", dst), 128, 0, 15)
        imm(mn, "imm", lane, 0, 1)
        op = _opcode(0x66, "0F3A", 0x19, 0, None)
        self._vex(mn, f"{mn} {dtext}, {s}, {lane}", op, l256=1, reg=s.idx, vvvv=0, rm=rm, imm8=lane)

    # -- AVX-512 tuple inserts / extracts ---------------------------------------------------
    def _vinsert(self, mn: str, dst, src1, src2, lane: int, *, part: int, dwidths, opcode: int, w: int) -> None:
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, dwidths)
        vec(mn, "src1", src1, (d.bits,))
        rm, stext, _, _ = self._vsrc(mn, "src2", src2, part, 0)
        imm(mn, "imm", lane, 0, d.bits // part - 1)
        op = _opcode(0x66, "0F3A", opcode, None, w)
        text = f"{mn} {dst}, {src1}, {stext}, {lane}"
        self._evex(mn, text, op, bits=d.bits, reg=d.idx, vvvv=src1.idx, rm=rm, k=k, z=z, n=part // 8, imm8=lane)

    def _vextract(self, mn: str, dst, src, lane: int, *, part: int, swidths, opcode: int, w: int) -> None:
        s = vec(mn, "src", src, swidths)
        inner = dst.op if isinstance(dst, Masked) else dst
        d, k, z = unmask(mn, "dst", dst, zero_ok=not isinstance(inner, Mem))
        rm, dtext, _, _ = self._vsrc(mn, "dst", d, part, 0)
        if k:
            dtext += f" {{k{k}}}" + (" {z}" if z else "")
        imm(mn, "imm", lane, 0, s.bits // part - 1)
        op = _opcode(0x66, "0F3A", opcode, None, w)
        text = f"{mn} {dtext}, {s}, {lane}"
        self._evex(mn, text, op, bits=s.bits, reg=s.idx, vvvv=0, rm=rm, k=k, z=z, n=part // 8, imm8=lane)

    def vinsertf32x4(self, dst, src1, src2, lane: int) -> None:
        """``vinsertf32x4 ymm/zmm{k}{z}, ymm/zmm, xmm/m128, lane`` (lane 0..1 / 0..3)."""
        self._vinsert("vinsertf32x4", dst, src1, src2, lane, part=128, dwidths=(256, 512), opcode=0x18, w=0)

    def vinsertf32x8(self, dst, src1, src2, lane: int) -> None:
        """``vinsertf32x8 zmm{k}{z}, zmm, ymm/m256, 0..1`` (AVX512DQ)."""
        self._vinsert("vinsertf32x8", dst, src1, src2, lane, part=256, dwidths=(512,), opcode=0x1A, w=0)

    def vinsertf64x4(self, dst, src1, src2, lane: int) -> None:
        """``vinsertf64x4 zmm{k}{z}, zmm, ymm/m256, 0..1``."""
        self._vinsert("vinsertf64x4", dst, src1, src2, lane, part=256, dwidths=(512,), opcode=0x1A, w=1)

    def vextractf32x4(self, dst, src, lane: int) -> None:
        """``vextractf32x4 xmm{k}{z}/m128{k}, ymm/zmm, lane`` (lane 0..1 / 0..3)."""
        self._vextract("vextractf32x4", dst, src, lane, part=128, swidths=(256, 512), opcode=0x19, w=0)

    def vextractf32x8(self, dst, src, lane: int) -> None:
        """``vextractf32x8 ymm{k}{z}/m256{k}, zmm, 0..1`` (AVX512DQ)."""
        self._vextract("vextractf32x8", dst, src, lane, part=256, swidths=(512,), opcode=0x1B, w=0)

    def vextractf64x4(self, dst, src, lane: int) -> None:
        """``vextractf64x4 ymm{k}{z}/m256{k}, zmm, 0..1``."""
        self._vextract("vextractf64x4", dst, src, lane, part=256, swidths=(512,), opcode=0x1B, w=1)

    # -- opmask moves (VEX) ------------------------------------------------------------------
    def _kmov(self, mn: str, pp: int | None, msize: int, dst, src) -> None:
        def go(opcode: int, reg: int, rm, text: str) -> None:
            self._vex(mn, text, _opcode(pp, "0F", opcode, 0, None), l256=0, reg=reg, vvvv=0, rm=rm)

        if isinstance(dst, KReg):
            if isinstance(src, Gpr):
                gpr(mn, "src", src, (32,))
                return go(0x92, dst.idx, src.idx, f"{mn} {dst}, {src}")
            if isinstance(src, KReg):
                return go(0x90, dst.idx, src.idx, f"{mn} {dst}, {src}")
            m = memop(mn, "src", src, msize)
            return go(0x90, dst.idx, m.addr, f"{mn} {dst}, {m}")
        if isinstance(dst, Gpr):
            gpr(mn, "dst", dst, (32,))
            kreg(mn, "src", src)
            return go(0x93, dst.idx, src.idx, f"{mn} {dst}, {src}")
        if isinstance(dst, Mem):
            kreg(mn, "src", src)
            m = memop(mn, "dst", dst, msize)
            return go(0x91, src.idx, m.addr, f"{mn} {m}, {src}")
        raise fail(mn, "dst", "k0..k7, eax..r15d or a memory operand", dst)

    def kmovw(self, dst, src) -> None:
        """``kmovw``: k<-r32/k/m16, r32<-k, m16<-k."""
        self._kmov("kmovw", None, 2, dst, src)

    def kmovb(self, dst, src) -> None:
        """``kmovb``: k<-r32/k/m8, r32<-k, m8<-k (AVX512DQ)."""
        self._kmov("kmovb", 0x66, 1, dst, src)

    # -- non-temporal stores ------------------------------------------------------------------
    def _vmovnt(self, mn: str, dst, src) -> None:
        pd = mn == "vmovntpd"
        op = _opcode(0x66 if pd else None, "0F", 0x2B, 0, int(pd))
        s = vec(mn, "src", src, ALL)
        m = memop(mn, "dst", dst, s.bits // 8)
        text = f"{mn} {m.text()}, {s}"
        self._vex_or_evex(mn, text, op, [s], bits=s.bits, reg=s.idx, vvvv=0, rm=m.addr, n=s.bits // 8)

    def vmovntps(self, dst, src) -> None:
        """``vmovntps m128/m256/m512, xmm/ymm/zmm``: a non-temporal store (no masking; the address
        must be aligned to the vector's size, else #GP)."""
        self._vmovnt("vmovntps", dst, src)

    def vmovntpd(self, dst, src) -> None:
        """``vmovntpd m128/m256/m512, xmm/ymm/zmm``: a non-temporal store (as `vmovntps`)."""
        self._vmovnt("vmovntpd", dst, src)

    # -- half-precision conversions (F16C; AVX-512F/VL) ----------------------------------------
    def vcvtph2ps(self, dst, src) -> None:
        """``vcvtph2ps xmm/ymm/zmm{k}{z}, xmm/m64 | xmm/m128 | ymm/m256``: fp16 -> fp32 (exact).

        The source is half the destination's width (an xmm register for an xmm destination).
        VEX (F16C) for xmm/ymm 0..15 without a mask; EVEX (AVX-512F, VL for xmm/ymm) for zmm,
        registers 16..31 and ``{k}{z}``; EVEX disp8*N with N = the source bytes (Half Mem)."""
        mn = "vcvtph2ps"
        d, k, z = unmask(mn, "dst", dst)
        vec(mn, "dst", d, ALL)
        half = d.bits // 2
        if isinstance(src, Vec):
            vec(mn, "src", src, (max(half, 128),))
            rm, stext = src.idx, str(src)
        else:
            m = memop(mn, "src", src, half // 8)
            rm, stext = m.addr, str(m)
        op = _opcode(0x66, "0F38", 0x13, 0, 0, 0)
        text = f"{mn} {dst}, {stext}"
        self._vex_or_evex(mn, text, op, [d, src], bits=d.bits, reg=d.idx, vvvv=0, rm=rm, k=k, z=z, n=half // 8)

    def vcvtps2ph(self, dst, src, imm8: int) -> None:
        """``vcvtps2ph xmm/m64 | xmm/m128 | ymm/m256 {k}{z}, xmm/ymm/zmm, imm8``: fp32 -> fp16.

        ``imm8`` bits 1:0 pick the rounding (0: to nearest even), bit 2 set means MXCSR.RC
        instead. The destination is half the source's width (xmm for an xmm source); a memory
        destination takes ``{k}`` but not ``{z}``. VEX (F16C) for xmm/ymm 0..15 without a mask,
        EVEX otherwise (disp8*N with N = the destination bytes)."""
        mn = "vcvtps2ph"
        s = vec(mn, "src", src, ALL)
        half = s.bits // 2
        inner = dst.op if isinstance(dst, Masked) else dst
        d, k, z = unmask(mn, "dst", dst, zero_ok=not isinstance(inner, Mem))
        if isinstance(d, Vec):
            vec(mn, "dst", d, (max(half, 128),))
            rm, dtext = d.idx, str(d)
        else:
            m = memop(mn, "dst", d, half // 8)
            rm, dtext = m.addr, str(m)
        if k:
            dtext += f" {{k{k}}}" + (" {z}" if z else "")
        imm(mn, "imm", imm8, 0, 255)
        op = _opcode(0x66, "0F3A", 0x1D, 0, 0, 0)
        text = f"{mn} {dtext}, {s}, {imm8}"
        regs = [d, s]
        self._vex_or_evex(mn, text, op, regs, bits=s.bits, reg=s.idx, vvvv=0, rm=rm, k=k, z=z, n=half // 8, imm8=imm8)

    # -- word inserts / extracts (AVX, VEX only) ----------------------------------------------
    def vpinsrw(self, dst, src1, src2, index: int) -> None:
        """``vpinsrw xmm, xmm, r32/m16, imm8``: ``src1`` with word ``imm8 & 7`` replaced by the low
        word of ``src2`` (VEX only: xmm0..15)."""
        mn = "vpinsrw"
        d = vec(mn, "dst", self._nomask(mn, "dst", dst), (128,), 15)
        vec(mn, "src1", src1, (128,), 15)
        if isinstance(src2, Gpr):
            rm, stext = gpr(mn, "src2", src2, (32,)).idx, str(src2)
        else:
            m = memop(mn, "src2", src2, 2)
            rm, stext = m.addr, str(m)
        imm(mn, "imm", index, 0, 255)
        op = _opcode(0x66, "0F", 0xC4, 0, None)
        self._vex(mn, f"{mn} {d}, {src1}, {stext}, {index}", op, l256=0, reg=d.idx, vvvv=src1.idx, rm=rm, imm8=index)

    def vpextrw(self, dst, src, index: int) -> None:
        """``vpextrw r32/m16, xmm, imm8``: word ``imm8 & 7`` of ``src`` (zero-extended into a
        register; VEX only: xmm0..15; the register form is 0F C5, the memory form 0F3A 15)."""
        mn = "vpextrw"
        s = vec(mn, "src", src, (128,), 15)
        imm(mn, "imm", index, 0, 255)
        if isinstance(dst, Gpr):
            d = gpr(mn, "dst", dst, (32,))
            op = _opcode(0x66, "0F", 0xC5, 0, None)
            return self._vex(mn, f"{mn} {d}, {s}, {index}", op, l256=0, reg=d.idx, vvvv=0, rm=s.idx, imm8=index)
        m = memop(mn, "dst", dst, 2)
        op = _opcode(0x66, "0F3A", 0x15, 0, None)
        self._vex(mn, f"{mn} {m}, {s}, {index}", op, l256=0, reg=s.idx, vvvv=0, rm=m.addr, imm8=index)

    def vzeroupper(self) -> None:
        """``vzeroupper``."""
        self.emit(b"\xc5\xf8\x77", "vzeroupper")


def _make3(mn: str, op: Op):
    def method(self, dst, src1, src2) -> None:
        self._arith3(mn, op, dst, src1, src2)

    forms = "xmm/ymm (VEX) or xmm/ymm/zmm{k}{z} with m/{1toN} (EVEX)" if op.wv is not None else "EVEX only"
    method.__name__ = mn
    method.__doc__ = f"``{mn} dst, src1, src2`` -- {forms}."
    return method


def _make3i(mn: str, op: Op):
    def method(self, dst, src1, src2, imm8: int) -> None:
        self._arith3(mn, op, dst, src1, src2, imm8)

    method.__name__ = mn
    method.__doc__ = f"``{mn} dst, src1, src2, imm8``."
    return method


def _makemov(mn: str):
    def method(self, dst, src) -> None:
        self._vmov(mn, dst, src)

    method.__name__ = mn
    method.__doc__ = f"``{mn}`` load (``reg{{k}}{{z}}, reg/mem``) or store (``mem{{k}}, reg``)."
    return method


for _mn, _op in ARITH3.items():
    setattr(SimdMixin, _mn, _make3(_mn, _op))
for _mn, _op in ARITH3_IMM.items():
    setattr(SimdMixin, _mn, _make3i(_mn, _op))
for _mn in MOVES:
    setattr(SimdMixin, _mn, _makemov(_mn))


# scalar (ss/sd) arithmetic: dst xmm, src1 xmm, src2 xmm/m32/m64 (VEX, EVEX for xmm16..31)
SCALAR3: dict[str, Op] = {}
for _name, _opc in {"vadd": 0x58, "vmul": 0x59, "vsub": 0x5C, "vmin": 0x5D, "vdiv": 0x5E, "vmax": 0x5F}.items():
    SCALAR3[_name + "ss"] = Op(0xF3, "0F", _opc, 0, 0, 4)
    SCALAR3[_name + "sd"] = Op(0xF2, "0F", _opc, 0, 1, 8)
for _name, _opc in {"vfmadd231": 0xB9, "vfnmadd231": 0xBD}.items():
    SCALAR3[_name + "ss"] = Op(0x66, "0F38", _opc, 0, 0, 4)
    SCALAR3[_name + "sd"] = Op(0x66, "0F38", _opc, 1, 1, 8)

# VEX-only masked moves: (load opcode, store opcode, W)
MASKMOVES = {"vmaskmovps": (0x2C, 0x2E), "vmaskmovpd": (0x2D, 0x2F)}
# VEX-only variable blends with the selector register in imm8[7:4]
BLENDV = {"vblendvps": 0x4A, "vblendvpd": 0x4B}


def _scalar_src(mn: str, operand: str, x: object, esize: int):
    """An xmm register or an ``esize``-byte memory operand: ``(rm, text)``."""
    if isinstance(x, Vec):
        vec(mn, operand, x, (128,))
        return x.idx, str(x)
    m = memop(mn, operand, x, esize)
    return m.addr, str(m)


def _scalar3(self, mn: str, dst, src1, src2) -> None:
    op = SCALAR3[mn]
    d = vec(mn, "dst", self._nomask(mn, "dst", dst), (128,))
    vec(mn, "src1", src1, (128,))
    rm, stext = _scalar_src(mn, "src2", src2, op.esize)
    text = f"{mn} {d}, {src1}, {stext}"
    self._vex_or_evex(mn, text, op, [d, src1, src2], bits=128, reg=d.idx, vvvv=src1.idx, rm=rm, n=op.esize)


def _vmovs(self, mn: str, dst, src) -> None:
    """``vmovss/vmovsd xmm, m32/m64`` (load) or ``m32/m64, xmm`` (store)."""
    esize = 4 if mn == "vmovss" else 8
    pp, w = (0xF3, 0) if esize == 4 else (0xF2, 1)
    if isinstance(dst, Mem):
        s = vec(mn, "src", src, (128,))
        m = memop(mn, "dst", dst, esize)
        op = _opcode(pp, "0F", 0x11, 0, w, esize)
        return self._vex_or_evex(mn, f"{mn} {m}, {s}", op, [s], bits=128, reg=s.idx, vvvv=0, rm=m.addr, n=esize)
    d = vec(mn, "dst", self._nomask(mn, "dst", dst), (128,))
    m = memop(mn, "src", src, esize)
    op = _opcode(pp, "0F", 0x10, 0, w, esize)
    self._vex_or_evex(mn, f"{mn} {d}, {m}", op, [d], bits=128, reg=d.idx, vvvv=0, rm=m.addr, n=esize)


def _vmaskmov(self, mn: str, dst, mask, src) -> None:
    """``vmaskmovps/pd xmm/ymm, mask, mem`` (load) or ``mem, mask, xmm/ymm`` (store); VEX only."""
    load, store = MASKMOVES[mn]
    if isinstance(dst, Mem):
        s = vec(mn, "src", src, (128, 256), 15)
        vec(mn, "mask", mask, (s.bits,), 15)
        m = memop(mn, "dst", dst, s.bits // 8)
        op = _opcode(0x66, "0F38", store, 0, None)
        text = f"{mn} {m}, {mask}, {s}"
        return self._vex(mn, text, op, l256=int(s.bits == 256), reg=s.idx, vvvv=mask.idx, rm=m.addr)
    d = vec(mn, "dst", self._nomask(mn, "dst", dst), (128, 256), 15)
    vec(mn, "mask", mask, (d.bits,), 15)
    m = memop(mn, "src", src, d.bits // 8)
    op = _opcode(0x66, "0F38", load, 0, None)
    self._vex(mn, f"{mn} {d}, {mask}, {m}", op, l256=int(d.bits == 256), reg=d.idx, vvvv=mask.idx, rm=m.addr)


def _vblendv(self, mn: str, dst, src1, src2, sel) -> None:
    """``vblendvps/pd xmm/ymm, src1, src2/mem, selector``: lanes from src2 where the selector's sign is set."""
    d = vec(mn, "dst", self._nomask(mn, "dst", dst), (128, 256), 15)
    vec(mn, "src1", src1, (d.bits,), 15)
    rm, stext, _, _ = self._vsrc(mn, "src2", src2, d.bits, 0, 15)
    vec(mn, "selector", sel, (d.bits,), 15)
    op = _opcode(0x66, "0F3A", BLENDV[mn], 0, None)
    text = f"{mn} {d}, {src1}, {stext}, {sel}"
    self._vex(mn, text, op, l256=int(d.bits == 256), reg=d.idx, vvvv=src1.idx, rm=rm, imm8=sel.idx << 4)


def _vcmp_vec(self, mn: str, dst, src1, src2, pred: int) -> None:
    """``vcmpps/pd xmm/ymm, src1, src2/mem, pred`` (VEX; all-ones lanes where the predicate holds)."""
    if dst.bits == 512 or dst.idx > 15:
        raise fail(mn, "dst", "an opmask register k0..k7 or (VEX) xmm0..xmm15/ymm0..ymm15", dst)
    d = vec(mn, "dst", dst, (128, 256), 15)
    vec(mn, "src1", src1, (d.bits,), 15)
    rm, stext, _, _ = self._vsrc(mn, "src2", src2, d.bits, 0, 15)
    imm(mn, "predicate", pred, 0, 31)
    op = _opcode(None if mn == "vcmpps" else 0x66, "0F", 0xC2, 0, None)
    text = f"{mn} {d}, {src1}, {stext}, {pred}"
    if isinstance(src2, Vec) and src1.idx < 8 <= src2.idx and pred & 7 in (0, 3, 4, 7):
        # symmetric predicate: llvm-mc swaps the sources for the 2-byte VEX prefix
        src1, rm = src2, src1.idx
    self._vex(mn, text, op, l256=int(d.bits == 256), reg=d.idx, vvvv=src1.idx, rm=rm, imm8=pred)


def _mnemonic(mn: str, encode, doc: str):
    """A thin mnemonic method ``mn`` that passes its operands to ``encode(self, mn, ...)``."""

    def method(self, *operands) -> None:
        encode(self, mn, *operands)

    method.__name__ = mn
    method.__doc__ = doc
    return method


for _mn in SCALAR3:
    _doc = f"``{_mn} xmm, xmm, xmm/m{SCALAR3[_mn].esize * 8}`` (VEX; EVEX for xmm16..31)."
    setattr(SimdMixin, _mn, _mnemonic(_mn, _scalar3, _doc))
for _mn in ("vmovss", "vmovsd"):
    setattr(SimdMixin, _mn, _mnemonic(_mn, _vmovs, f"``{_mn}`` scalar load (``xmm, mem``) or store (``mem, xmm``)."))
for _mn in MASKMOVES:
    _doc = f"``{_mn}`` masked load (``v, mask, mem``) or store (``mem, mask, v``); VEX only."
    setattr(SimdMixin, _mn, _mnemonic(_mn, _vmaskmov, _doc))
for _mn in BLENDV:
    setattr(SimdMixin, _mn, _mnemonic(_mn, _vblendv, f"``{_mn} v, v, v/mem, v_selector`` (VEX only)."))
