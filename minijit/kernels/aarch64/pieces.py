"""Register pieces of the NEON kernels: a run of rows (or columns) cut into full q vectors, then
d and s pieces (2 and 1 elements), so that no load or store reaches past the operand, and their
loads and stores (neighbours of one width as ldp/stp). Shared by `neon_brgemm`, `neon_gemv` and
`neon_unary`."""

from __future__ import annotations

from dataclasses import dataclass

from asm.aarch64 import Assembler, mem
from asm.aarch64.registers import ScalarReg, XReg
from minijit.kernels.aarch64.common import DType

__all__ = ["Piece", "ldst_pieces", "piece_reg", "split"]


@dataclass(frozen=True)
class Piece:
    """A run of ``width`` consecutive rows (or columns) from ``off`` held in one register."""

    off: int
    width: int


def split(count: int, lanes: int, max_pieces: int) -> list[list[Piece]]:
    """Cut ``count`` rows into register pieces (full vectors, then 2 and 1) grouped into blocks.

    A block holds at most ``max_pieces`` pieces; a tail of half/single pieces
    that does not fit with the full vectors becomes its own block.
    """
    pieces, off = [], 0
    for width in (lanes, 2, 1):
        while count - off >= width and width <= lanes:
            pieces.append(Piece(off, width))
            off += width
    blocks: list[list[Piece]] = []
    while pieces:
        take = pieces[:max_pieces]
        if len(pieces) > max_pieces:  # keep the narrow tail together
            full = [p for p in take if p.width == lanes]
            take = full or take
        blocks.append(take)
        pieces = pieces[len(take) :]
    return blocks


_LETTER = {16: "q", 8: "d", 4: "s"}


def piece_reg(t: DType, idx: int, width: int) -> ScalarReg:
    """The scalar view (q/d/s) that loads or stores ``width`` elements."""
    return ScalarReg(idx, _LETTER[width * t.size])


def ldst_pieces(a: Assembler, t: DType, store: bool, regs: list[int], pieces: list[Piece], base: XReg) -> None:
    """Load/store pieces at ``base + off``; neighbours of one width go as ldp/stp."""
    i = 0
    while i < len(pieces):
        p, r = pieces[i], piece_reg(t, regs[i], pieces[i].width)
        if i + 1 < len(pieces) and pieces[i + 1].width == p.width and pieces[i + 1].off == p.off + p.width:
            r2 = piece_reg(t, regs[i + 1], p.width)
            (a.stp if store else a.ldp)(r, r2, mem(base, p.off * t.size))
            i += 2
            continue
        (a.str if store else a.ldr)(r, mem(base, p.off * t.size))
        i += 1
