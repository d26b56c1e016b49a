"""General purpose instructions (legacy encoding: [66] [REX] opcode ModR/M [SIB] [disp] [imm]).

Operand forms follow Intel syntax, destination first: ``a.add(rax, rbx)``,
``a.add(rax, qword(rsi + 8))``, ``a.add(dword(rsp + 4), 7)``. Where the
width cannot be read from a register (memory with an immediate, ``inc``,
shifts) the memory operand needs a size: ``qword(...)`` or ``dword(...)``.
Encodings are chosen exactly as llvm-mc does (imm8 forms when the value fits,
the accumulator forms for rax/eax, ``mov`` to ``movabs`` for 64-bit values).
"""

from __future__ import annotations

from asm.errors import EncodingError
from asm.x86_64.encoding import RmEnc, modrm_sib_disp, rex
from asm.x86_64.labels import Fixup, Label
from asm.x86_64.memory import Addr, Mem
from asm.x86_64.operands import fail, gpr, imm, is_int, memop, same_width
from asm.x86_64.registers import Gpr

# group-1 ALU extension numbers (opcode base = ext * 8)
ALU = {"add": 0, "or": 1, "and": 4, "sub": 5, "xor": 6, "cmp": 7}
SHIFT = {"shl": 4, "shr": 5, "sar": 7}
COND = {
    "o": 0x0, "no": 0x1, "b": 0x2, "c": 0x2, "nae": 0x2, "ae": 0x3, "nb": 0x3, "nc": 0x3,
    "e": 0x4, "z": 0x4, "ne": 0x5, "nz": 0x5, "be": 0x6, "na": 0x6, "a": 0x7, "nbe": 0x7,
    "s": 0x8, "ns": 0x9, "p": 0xA, "pe": 0xA, "np": 0xB, "po": 0xB,
    "l": 0xC, "nge": 0xC, "ge": 0xD, "nl": 0xD, "le": 0xE, "ng": 0xE, "g": 0xF, "nle": 0xF,
}  # fmt: skip
INT8 = (-128, 127)
INT32 = (-(1 << 31), (1 << 31) - 1)


def _s32(value: int) -> int:
    """A 32-bit immediate as a signed value (0xFFFFFFFF -> -1)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _fits8(value: int) -> bool:
    return -128 <= value <= 127


def _imm_bytes(value: int, n: int) -> bytes:
    return (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


class BaseMixin:
    """General purpose instructions; mixed into `Assembler`."""

    # -- encoding class: legacy opcode with ModR/M -------------------------------
    def _emit_rm(self, mn: str, text: str, head: bytes, enc: RmEnc, tail: bytes = b"") -> None:
        """Emit ``head + ModR/M... + tail``; a RIP-relative label becomes a disp32 fixup."""
        fix = None
        if enc.fixup is not None:
            off, label, addend = enc.fixup
            fix = Fixup(len(head) + off, 4, label, addend, mn)
        self.emit(head + enc.body + tail, text, fix)

    def _legacy(
        self,
        mn: str,
        text: str,
        opcode: bytes,
        reg: int,
        rm: int | Addr,
        *,
        w: int = 0,
        prefix: bytes = b"",
        imm: bytes = b"",
    ) -> None:
        """``[prefix] [REX] opcode ModR/M(reg, rm) [imm]``; ``reg`` is a register number or /digit."""
        enc = modrm_sib_disp(reg, rm)
        head = prefix + rex(w, (reg >> 3) & 1, enc.x, enc.b) + opcode
        self._emit_rm(mn, text, head, enc, imm)

    def _short(self, mn: str, text: str, opcode: int, reg: Gpr, *, w: int = 0, imm: bytes = b"") -> None:
        """Register in the low 3 opcode bits (``push r``, ``mov r, imm``): ``[REX] opcode+r [imm]``."""
        self.emit(rex(w, 0, 0, reg.idx >> 3) + bytes([opcode + (reg.idx & 7)]) + imm, text)

    # -- operand helpers ------------------------------------------------------
    @staticmethod
    def _width_of(mn: str, operand: str, x: object) -> int:
        if isinstance(x, Gpr):
            return gpr(mn, operand, x).bits
        m = memop(mn, operand, x, None, sizes=(4, 8))
        return m.size * 8

    @staticmethod
    def _imm_for(mn: str, width: int, value: object, *, full64: bool = False) -> int:
        """Check an immediate for a ``width``-bit operation; 32-bit values are returned signed."""
        if width == 64:
            if full64:
                return imm(mn, "imm", value, -(1 << 63), (1 << 64) - 1)
            return imm(mn, "imm", value, *INT32)
        return _s32(imm(mn, "imm", value, -(1 << 31), (1 << 32) - 1))

    # -- ALU: add/or/and/sub/xor/cmp -------------------------------------------
    def _alu(self, mn: str, dst: object, src: object) -> None:
        ext = ALU[mn.rstrip("_")]
        mn = mn.rstrip("_")
        base = ext * 8
        if isinstance(dst, Gpr):
            gpr(mn, "dst", dst)
            w = int(dst.bits == 64)
            if isinstance(src, Gpr):
                gpr(mn, "src", src)
                same_width(mn, dst=dst, src=src)
                return self._legacy(mn, f"{mn} {dst}, {src}", bytes([base + 1]), src.idx, dst.idx, w=w)
            if isinstance(src, Mem):
                m = memop(mn, "src", src, dst.bits // 8)
                return self._legacy(mn, f"{mn} {dst}, {m}", bytes([base + 3]), dst.idx, m.addr, w=w)
            if is_int(src):
                v = self._imm_for(mn, dst.bits, src)
                text = f"{mn} {dst}, {src}"
                if _fits8(v):
                    return self._legacy(mn, text, b"\x83", ext, dst.idx, w=w, imm=_imm_bytes(v, 1))
                if dst.idx == 0:
                    return self.emit(rex(w, 0, 0, 0) + bytes([base + 5]) + _imm_bytes(v, 4), text)
                return self._legacy(mn, text, b"\x81", ext, dst.idx, w=w, imm=_imm_bytes(v, 4))
            raise fail(mn, "src", "a register rax..r15/eax..r15d, a memory operand or an int", src)
        if isinstance(dst, Mem):
            if isinstance(src, Gpr):
                gpr(mn, "src", src)
                m = memop(mn, "dst", dst, src.bits // 8)
                w = int(src.bits == 64)
                return self._legacy(mn, f"{mn} {m}, {src}", bytes([base + 1]), src.idx, m.addr, w=w)
            if is_int(src):
                m = memop(mn, "dst", dst, None, sizes=(4, 8))
                v = self._imm_for(mn, m.size * 8, src)
                w = int(m.size == 8)
                text = f"{mn} {m}, {src}"
                if _fits8(v):
                    return self._legacy(mn, text, b"\x83", ext, m.addr, w=w, imm=_imm_bytes(v, 1))
                return self._legacy(mn, text, b"\x81", ext, m.addr, w=w, imm=_imm_bytes(v, 4))
            raise fail(mn, "src", "a register rax..r15/eax..r15d or an int", src)
        raise fail(mn, "dst", "a register rax..r15/eax..r15d or a memory operand", dst)

    def add(self, dst, src) -> None:
        """``add dst, src`` (reg/mem, reg/mem/imm32)."""
        self._alu("add", dst, src)

    def sub(self, dst, src) -> None:
        """``sub dst, src``."""
        self._alu("sub", dst, src)

    def and_(self, dst, src) -> None:
        """``and dst, src``."""
        self._alu("and", dst, src)

    def or_(self, dst, src) -> None:
        """``or dst, src``."""
        self._alu("or", dst, src)

    def xor(self, dst, src) -> None:
        """``xor dst, src``."""
        self._alu("xor", dst, src)

    def cmp(self, dst, src) -> None:
        """``cmp dst, src``."""
        self._alu("cmp", dst, src)

    # -- test -----------------------------------------------------------------------
    def test(self, dst, src) -> None:
        """``test r/m, reg`` (also ``test reg, mem``) or ``test r/m, imm32``."""
        mn = "test"
        if is_int(src):
            width = self._width_of(mn, "dst", dst)
            v = self._imm_for(mn, width, src)
            w = int(width == 64)
            if isinstance(dst, Gpr):
                text = f"{mn} {dst}, {src}"
                if dst.idx == 0:
                    return self.emit(rex(w, 0, 0, 0) + b"\xa9" + _imm_bytes(v, 4), text)
                return self._legacy(mn, text, b"\xf7", 0, dst.idx, w=w, imm=_imm_bytes(v, 4))
            m = memop(mn, "dst", dst, width // 8)
            return self._legacy(mn, f"{mn} {m}, {src}", b"\xf7", 0, m.addr, w=w, imm=_imm_bytes(v, 4))
        if isinstance(dst, Gpr) and isinstance(src, Gpr):
            gpr(mn, "dst", dst)
            gpr(mn, "src", src)
            same_width(mn, dst=dst, src=src)
            return self._legacy(mn, f"{mn} {dst}, {src}", b"\x85", src.idx, dst.idx, w=int(dst.bits == 64))
        if isinstance(dst, Mem) or isinstance(src, Mem):
            mem_, reg = (dst, src) if isinstance(dst, Mem) else (src, dst)
            regname = "src" if isinstance(dst, Mem) else "dst"
            gpr(mn, regname, reg)
            m = memop(mn, "dst" if regname == "src" else "src", mem_, reg.bits // 8)
            text = f"{mn} {m}, {reg}" if isinstance(dst, Mem) else f"{mn} {reg}, {m}"
            return self._legacy(mn, text, b"\x85", reg.idx, m.addr, w=int(reg.bits == 64))
        raise fail(mn, "operands", "reg/mem with reg, or reg/mem with an int", (dst, src))

    # -- mov / lea ------------------------------------------------------------------
    def mov(self, dst, src) -> None:
        """``mov``: reg<-reg/mem/imm, mem<-reg/imm32. 64-bit values beyond int32 use ``movabs``."""
        mn = "mov"
        if isinstance(dst, Gpr):
            gpr(mn, "dst", dst)
            w = int(dst.bits == 64)
            if isinstance(src, Gpr):
                gpr(mn, "src", src)
                same_width(mn, dst=dst, src=src)
                return self._legacy(mn, f"{mn} {dst}, {src}", b"\x89", src.idx, dst.idx, w=w)
            if isinstance(src, Mem):
                m = memop(mn, "src", src, dst.bits // 8)
                return self._legacy(mn, f"{mn} {dst}, {m}", b"\x8b", dst.idx, m.addr, w=w)
            if is_int(src):
                text = f"{mn} {dst}, {src}"
                if dst.bits == 32:
                    v = self._imm_for(mn, 32, src)
                    return self._short(mn, text, 0xB8, dst, imm=_imm_bytes(v, 4))
                v = self._imm_for(mn, 64, src, full64=True)
                v = v - (1 << 64) if v >= 1 << 63 else v
                if INT32[0] <= v <= INT32[1]:
                    return self._legacy(mn, text, b"\xc7", 0, dst.idx, w=1, imm=_imm_bytes(v, 4))
                return self._short(mn, text, 0xB8, dst, w=1, imm=_imm_bytes(v, 8))
            raise fail(mn, "src", "a register, a memory operand or an int", src)
        if isinstance(dst, Mem):
            if isinstance(src, Gpr):
                gpr(mn, "src", src)
                m = memop(mn, "dst", dst, src.bits // 8)
                return self._legacy(mn, f"{mn} {m}, {src}", b"\x89", src.idx, m.addr, w=int(src.bits == 64))
            if is_int(src):
                m = memop(mn, "dst", dst, None, sizes=(4, 8))
                v = self._imm_for(mn, m.size * 8, src)
                return self._legacy(
                    mn, f"{mn} {m}, {src}", b"\xc7", 0, m.addr, w=int(m.size == 8), imm=_imm_bytes(v, 4)
                )
            raise fail(mn, "src", "a register rax..r15/eax..r15d or an int", src)
        raise fail(mn, "dst", "a register rax..r15/eax..r15d or a memory operand", dst)

    def lea(self, dst: Gpr, src: Mem) -> None:
        """``lea dst, [addr]`` (64- or 32-bit destination, 64-bit address)."""
        mn = "lea"
        gpr(mn, "dst", dst)
        if not isinstance(src, Mem) or src.bcst:
            raise fail(mn, "src", "a memory operand", src)
        w = int(dst.bits == 64)
        self._legacy(mn, f"{mn} {dst}, {src.addr}", b"\x8d", dst.idx, src.addr, w=w)

    # -- imul -------------------------------------------------------------------------
    def imul(self, dst: Gpr, src, value: int | None = None) -> None:
        """``imul dst, src`` or ``imul dst, src, imm32`` (src: register or memory)."""
        mn = "imul"
        gpr(mn, "dst", dst)
        w = int(dst.bits == 64)
        if isinstance(src, Gpr):
            gpr(mn, "src", src)
            same_width(mn, dst=dst, src=src)
            rm, stext = src.idx, str(src)
        else:
            m = memop(mn, "src", src, dst.bits // 8)
            rm, stext = m.addr, str(m)
        if value is None:
            return self._legacy(mn, f"{mn} {dst}, {stext}", b"\x0f\xaf", dst.idx, rm, w=w)
        v = self._imm_for(mn, dst.bits, value)
        text = f"{mn} {dst}, {stext}, {value}"
        if _fits8(v):
            return self._legacy(mn, text, b"\x6b", dst.idx, rm, w=w, imm=_imm_bytes(v, 1))
        return self._legacy(mn, text, b"\x69", dst.idx, rm, w=w, imm=_imm_bytes(v, 4))

    # -- inc / dec ----------------------------------------------------------------------
    def _unary(self, mn: str, ext: int, dst, opcode: bytes = b"\xff") -> None:
        width = self._width_of(mn, "dst", dst)
        rm = dst.idx if isinstance(dst, Gpr) else dst.addr
        self._legacy(mn, f"{mn} {dst}", opcode, ext, rm, w=int(width == 64))

    def div(self, src) -> None:
        """``div r/m``: unsigned rdx:rax / src -> quotient rax, remainder rdx."""
        self._unary("div", 6, src, b"\xf7")

    def neg(self, dst) -> None:
        """``neg r/m``: two's complement negation."""
        self._unary("neg", 3, dst, b"\xf7")

    def inc(self, dst) -> None:
        """``inc r/m`` (memory needs dword/qword)."""
        self._unary("inc", 0, dst)

    def dec(self, dst) -> None:
        """``dec r/m`` (memory needs dword/qword)."""
        self._unary("dec", 1, dst)

    # -- shifts -------------------------------------------------------------------------
    def _shift(self, mn: str, dst, count) -> None:
        ext = SHIFT[mn]
        width = self._width_of(mn, "dst", dst)
        rm = dst.idx if isinstance(dst, Gpr) else dst.addr
        w = int(width == 64)
        text = f"{mn} {dst}, {count}"
        if isinstance(count, Gpr):
            if count.bits != 8 or count.idx != 1:
                raise fail(mn, "count", "cl or an int in 0..255", count)
            return self._legacy(mn, text, b"\xd3", ext, rm, w=w)
        v = imm(mn, "count", count, 0, 255)
        if v == 1:
            return self._legacy(mn, text, b"\xd1", ext, rm, w=w)
        self._legacy(mn, text, b"\xc1", ext, rm, w=w, imm=bytes([v]))

    def shl(self, dst, count) -> None:
        """``shl r/m, imm8|cl``."""
        self._shift("shl", dst, count)

    def shr(self, dst, count) -> None:
        """``shr r/m, imm8|cl``."""
        self._shift("shr", dst, count)

    def sar(self, dst, count) -> None:
        """``sar r/m, imm8|cl``."""
        self._shift("sar", dst, count)

    # -- stack ----------------------------------------------------------------------------
    def push(self, src) -> None:
        """``push r64`` or ``push qword ptr [..]``."""
        if isinstance(src, Mem):
            m = memop("push", "src", src, 8)
            return self._legacy("push", f"push {m}", b"\xff", 6, m.addr)
        self._short("push", f"push {gpr('push', 'src', src, (64,))}", 0x50, src)

    def pop(self, dst) -> None:
        """``pop r64`` or ``pop qword ptr [..]``."""
        if isinstance(dst, Mem):
            m = memop("pop", "dst", dst, 8)
            return self._legacy("pop", f"pop {m}", b"\x8f", 0, m.addr)
        self._short("pop", f"pop {gpr('pop', 'dst', dst, (64,))}", 0x58, dst)

    # -- control flow ---------------------------------------------------------------------
    def _branch(self, mn: str, target: object, short: bool, near: bytes, rel8: bytes | None) -> None:
        if not isinstance(target, Label):
            raise fail(mn, "target", "a Label", target)
        if short:
            if rel8 is None:
                raise EncodingError(f"{mn}: has no short (rel8) form")
            return self.emit(rel8 + b"\0", f"{mn} {target}", Fixup(len(rel8), 1, target, 0, mn))
        self.emit(near + b"\0\0\0\0", f"{{disp32}} {mn} {target}", Fixup(len(near), 4, target, 0, mn))

    def _indirect(self, mn: str, ext: int, target: object) -> None:
        if isinstance(target, Mem):
            m = memop(mn, "target", target, 8)
            return self._legacy(mn, f"{mn} {m}", b"\xff", ext, m.addr)
        gpr(mn, "target", target, (64,))
        self._legacy(mn, f"{mn} {target}", b"\xff", ext, target.idx)

    def jmp(self, target, short: bool = False) -> None:
        """``jmp label`` (near rel32 unless ``short``), ``jmp r64`` or ``jmp qword ptr [..]``."""
        if isinstance(target, (Gpr, Mem)):
            return self._indirect("jmp", 4, target)
        self._branch("jmp", target, short, b"\xe9", b"\xeb")

    def call(self, target) -> None:
        """``call label`` (rel32), ``call r64`` or ``call qword ptr [..]``."""
        if isinstance(target, (Gpr, Mem)):
            return self._indirect("call", 2, target)
        self._branch("call", target, False, b"\xe8", None)

    def jcc(self, cond: str, target: Label, short: bool = False) -> None:
        """``j<cond> label``; ``cond`` is one of `COND` (e, ne, l, ge, b, ae, ...)."""
        if cond not in COND:
            raise fail("jcc", "cond", "one of " + "/".join(COND), cond)
        cc = COND[cond]
        self._branch(f"j{cond}", target, short, bytes([0x0F, 0x80 + cc]), bytes([0x70 + cc]))

    def ret(self, pop: int | None = None) -> None:
        """``ret`` or ``ret imm16``."""
        if pop is None:
            return self.emit(b"\xc3", "ret")
        v = imm("ret", "imm", pop, 0, 0xFFFF)
        self.emit(b"\xc2" + _imm_bytes(v, 2), f"ret {v}")

    def nop(self) -> None:
        """``nop`` (one byte)."""
        self.emit(b"\x90", "nop")

    def int3(self) -> None:
        """``int3`` (breakpoint)."""
        self.emit(b"\xcc", "int3")

    # -- prefetch -----------------------------------------------------------------------
    def _prefetch(self, mn: str, ext: int, src) -> None:
        m = memop(mn, "src", src, 1)
        self._legacy(mn, f"{mn} {m}", b"\x0f\x18", ext, m.addr)

    def prefetcht0(self, src) -> None:
        """``prefetcht0 byte ptr [..]``."""
        self._prefetch("prefetcht0", 1, src)

    def prefetcht1(self, src) -> None:
        """``prefetcht1 byte ptr [..]``."""
        self._prefetch("prefetcht1", 2, src)

    def prefetcht2(self, src) -> None:
        """``prefetcht2 byte ptr [..]``."""
        self._prefetch("prefetcht2", 3, src)

    def prefetchnta(self, src) -> None:
        """``prefetchnta byte ptr [..]``."""
        self._prefetch("prefetchnta", 0, src)

    # -- atomics and synchronization -------------------------------------------------------
    def _rmw(self, mn: str, opcode: bytes, dst, src, lock: bool) -> None:
        """``[lock] mn r/m, reg`` (``xadd``, ``cmpxchg``): src in ModR/M.reg, dst in r/m.

        ``lock`` needs a memory destination (a locked register form raises #UD)."""
        gpr(mn, "src", src)
        w = int(src.bits == 64)
        if isinstance(dst, Gpr):
            if lock:
                raise fail(f"lock {mn}", "dst", "a memory operand (lock needs memory)", dst)
            gpr(mn, "dst", dst)
            same_width(mn, dst=dst, src=src)
            return self._legacy(mn, f"{mn} {dst}, {src}", opcode, src.idx, dst.idx, w=w)
        if not isinstance(dst, Mem):
            raise fail(mn, "dst", "a register rax..r15/eax..r15d or a memory operand", dst)
        m = memop(mn, "dst", dst, src.bits // 8)
        prefix = b"\xf0" if lock else b""
        text = f"{'lock ' if lock else ''}{mn} {m}, {src}"
        self._legacy(mn, text, opcode, src.idx, m.addr, w=w, prefix=prefix)

    def xadd(self, dst, src: Gpr, *, lock: bool = False) -> None:
        """``[lock] xadd r/m, reg``: ``tmp = dst; dst += src; src = tmp`` (atomic with ``lock``)."""
        self._rmw("xadd", b"\x0f\xc1", dst, src, lock)

    def cmpxchg(self, dst, src: Gpr, *, lock: bool = False) -> None:
        """``[lock] cmpxchg r/m, reg``: if ``rax/eax == dst`` then ``dst = src`` (ZF=1) else ``rax/eax = dst``."""
        self._rmw("cmpxchg", b"\x0f\xb1", dst, src, lock)

    def xchg(self, dst, src) -> None:
        """``xchg``: reg<->reg or reg<->mem (a memory form is implicitly locked: a full barrier).

        Encoded as llvm-mc does: ``90+r`` when one register is rax/eax (``xchg rax, rax`` is
        ``nop``; ``xchg eax, eax`` keeps ``87 /r`` because ``90`` would not zero-extend)."""
        mn = "xchg"
        if isinstance(dst, Mem) or isinstance(src, Mem):
            mem_, reg = (dst, src) if isinstance(dst, Mem) else (src, dst)
            gpr(mn, "src" if isinstance(dst, Mem) else "dst", reg)
            m = memop(mn, "dst" if isinstance(dst, Mem) else "src", mem_, reg.bits // 8)
            text = f"{mn} {m}, {reg}" if isinstance(dst, Mem) else f"{mn} {reg}, {m}"
            return self._legacy(mn, text, b"\x87", reg.idx, m.addr, w=int(reg.bits == 64))
        gpr(mn, "dst", dst)
        gpr(mn, "src", src)
        same_width(mn, dst=dst, src=src)
        text = f"{mn} {dst}, {src}"
        w = int(dst.bits == 64)
        if dst.idx == 0 or src.idx == 0:
            other = src if dst.idx == 0 else dst
            if other.idx == 0:
                if w:
                    return self.emit(b"\x90", text)
                return self._legacy(mn, text, b"\x87", 0, 0)
            return self._short(mn, text, 0x90, other, w=w)
        self._legacy(mn, text, b"\x87", dst.idx, src.idx, w=w)

    def pause(self) -> None:
        """``pause``: spin-wait hint."""
        self.emit(b"\xf3\x90", "pause")

    def mfence(self) -> None:
        """``mfence``: full memory barrier (orders earlier stores before later loads)."""
        self.emit(b"\x0f\xae\xf0", "mfence")

    def sfence(self) -> None:
        """``sfence``: store barrier (orders earlier stores, non-temporal ones too, before later ones)."""
        self.emit(b"\x0f\xae\xf8", "sfence")

    def syscall(self) -> None:
        """``syscall``: number in rax, arguments rdi, rsi, rdx, r10, r8, r9; clobbers rcx and r11."""
        self.emit(b"\x0f\x05", "syscall")


def _make_jcc(cond: str):
    def jcc(self, target: Label, short: bool = False) -> None:
        self.jcc(cond, target, short)

    jcc.__name__ = f"j{cond}"
    jcc.__doc__ = f"``j{cond} label`` (near rel32 unless ``short``)."
    return jcc


for _cond in COND:
    setattr(BaseMixin, f"j{_cond}", _make_jcc(_cond))
