"""x86-64 encoding classes (Intel SDM Vol. 2, chapter 2), one builder each.

* `rex`            -- REX prefix (2.2.1)
* `modrm_sib_disp` -- ModR/M, SIB and displacement for a register or memory r/m
                      operand, including RIP-relative and EVEX compressed disp8*N (2.1.5, 2.7.5)
* `vex`            -- 2- and 3-byte VEX prefixes (2.3)
* `evex`           -- the 4-byte EVEX prefix (2.7)

The builders know nothing of mnemonics; they return bytes plus, for a
RIP-relative label, where the disp32 lies so that the Assembler can patch it.
"""

from __future__ import annotations

from typing import NamedTuple

from asm.x86_64.memory import Addr

# SIMD prefix (pp) and opcode map (mmmmm) field values
PP = {None: 0, 0x66: 1, 0xF3: 2, 0xF2: 3}
MAP = {"0F": 1, "0F38": 2, "0F3A": 3}
SS = {1: 0, 2: 1, 4: 2, 8: 3}  # SIB scale field
#: ModR/M bytes of the register forms (mod = 11): ``REG_MODRM[reg & 7][rm & 7]``
REG_MODRM = [[bytes([0xC0 | r << 3 | m]) for m in range(8)] for r in range(8)]


class RmEnc(NamedTuple):
    """Encoded r/m operand: ModR/M(+SIB)(+disp), the X and B extension bits, and a label fixup.

    ``x`` is REX.X/VEX.X (index bit 3) for memory, or bit 4 of the register for
    an EVEX register r/m. ``fixup`` is ``(offset of disp32 within body, label, addend)``.
    """

    body: bytes
    x: int
    b: int
    fixup: tuple[int, object, int] | None = None


def rex(w: int, r: int, x: int, b: int, force: bool = False) -> bytes:
    """``0100WRXB``, or nothing when all bits are clear and ``force`` is false."""
    if not (w or r or x or b or force):
        return b""
    return bytes([0x40 | w << 3 | r << 2 | x << 1 | b])


def _disp8(disp: int, n: int) -> int | None:
    """Compressed disp8 (disp / n) if ``disp`` is a multiple of ``n`` that fits, else None."""
    if disp % n == 0 and -128 <= disp // n <= 127:
        return disp // n
    return None


def modrm_sib_disp(reg: int, rm: int | Addr, n: int = 1) -> RmEnc:
    """ModR/M with ``reg`` (any width; its low 3 bits go in the reg field) and ``rm``.

    ``rm`` is a register number (mod = 11) or an `Addr`. ``n`` is the EVEX
    disp8 scale (1 for legacy and VEX encodings). The shortest displacement
    is chosen exactly as llvm-mc does: none, disp8 (compressed by ``n``) or disp32.
    """
    if isinstance(rm, int):
        return RmEnc(REG_MODRM[reg & 7][rm & 7], (rm >> 4) & 1, (rm >> 3) & 1)
    r3 = (reg & 7) << 3
    a = rm
    if a.rip:
        fix = (1, a.label, a.disp) if a.label is not None else None
        return RmEnc(bytes([0x05 | r3]) + (a.disp & 0xFFFFFFFF).to_bytes(4, "little"), 0, 0, fix)
    if a.base is None:
        idx = a.index.idx if a.index is not None else 4
        sib = SS[a.scale] << 6 | (idx & 7) << 3 | 5
        d32 = (a.disp & 0xFFFFFFFF).to_bytes(4, "little")
        return RmEnc(bytes([0x04 | r3, sib]) + d32, (idx >> 3) & 1 if a.index is not None else 0, 0)
    base = a.base.idx
    disp = a.disp
    if disp == 0 and base & 7 != 5:
        mod, dbytes = 0, b""
    elif disp % n == 0 and -128 <= disp // n <= 127:  # (compressed) disp8, as `_disp8`
        mod, dbytes = 1, ((disp // n) & 0xFF).to_bytes(1, "little")
    else:
        mod, dbytes = 2, (disp & 0xFFFFFFFF).to_bytes(4, "little")
    index = a.index
    if index is not None:
        idx = index.idx
        head = bytes([mod << 6 | r3 | 4, SS[a.scale] << 6 | (idx & 7) << 3 | (base & 7)])
        return RmEnc(head + dbytes, (idx >> 3) & 1, (base >> 3) & 1)
    if base & 7 == 4:  # rsp/r12 as a base need a SIB (no index)
        head = bytes([mod << 6 | r3 | 4, SS[a.scale] << 6 | 4 << 3 | (base & 7)])
    else:
        head = bytes([mod << 6 | r3 | (base & 7)])
    return RmEnc(head + dbytes, 0, (base >> 3) & 1)


def vex(r: int, x: int, b: int, mmmmm: int, w: int, vvvv: int, l256: int, pp: int) -> bytes:
    """VEX prefix; the 2-byte form (C5) when X, B and W are clear and the map is 0F."""
    tail = (vvvv ^ 15) << 3 | l256 << 2 | pp
    if not x and not b and not w and mmmmm == 1:
        return bytes([0xC5, (r ^ 1) << 7 | tail])
    return bytes([0xC4, (r ^ 1) << 7 | (x ^ 1) << 6 | (b ^ 1) << 5 | mmmmm, w << 7 | tail])


def evex(
    reg: int, rm_x: int, rm_b: int, mm: int, w: int, vvvv: int, pp: int, z: int, ll: int, bcst: int, aaa: int
) -> bytes:
    """EVEX prefix. ``reg`` and ``vvvv`` are full register numbers 0..31 (R/R' and vvvv/V' are derived)."""
    r, r2 = (reg >> 3) & 1, (reg >> 4) & 1
    v4 = (vvvv >> 4) & 1
    p0 = (r ^ 1) << 7 | (rm_x ^ 1) << 6 | (rm_b ^ 1) << 5 | (r2 ^ 1) << 4 | mm
    p1 = w << 7 | ((vvvv & 15) ^ 15) << 3 | 4 | pp
    p2 = z << 7 | ll << 5 | bcst << 4 | (v4 ^ 1) << 3 | aaa
    return bytes([0x62, p0, p1, p2])
