"""Register pieces of the NEON kernels: a run of rows (or columns) cut into full q vectors, then
d and s pieces (2 and 1 elements), so that no load or store reaches past the operand, and their
loads and stores (neighbours of one width as ldp/stp); `ldp_stream`, q-register pairs of a stream
loaded ahead of their FMAs; `strided_copy`, elements between a strided and a contiguous run;
`transpose`, a 4 x 4 (2 x 2) tile in registers; `column_sweep`, an element-wise op down every
column (the unary and binary kernels)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from asm.aarch64 import Assembler, mem, post, x8, x9, x11, x12, x13
from asm.aarch64.registers import ScalarReg, VecReg, VElem, XReg
from minijit.kernels.aarch64.common import DType, loop

__all__ = [
    "Op",
    "Piece",
    "column_sweep",
    "fma_elem",
    "ldp_stream",
    "ldst_pieces",
    "piece_reg",
    "q",
    "split",
    "strided_copy",
    "transpose",
]


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


def fma_elem(a: Assembler, t: DType, acc: int, src: int, width: int, elem: VElem) -> None:
    """v<acc> += v<src> * ``elem`` on the ``width`` lanes of a piece (the scalar form for one;
    integers: ``mla`` by element, .2s for one lane: the lane above is never stored)."""
    if t.is_int:
        a.mla(t.vec(acc, width), t.vec(src, width), elem)
    elif width == 1:
        a.fmla(t.scalar(acc), t.scalar(src), elem)
    else:
        a.fmla(t.vec(acc, width), t.vec(src, width), elem)


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


def q(idx: int) -> ScalarReg:
    """The 128-bit scalar view ``q<idx>`` (ldp/stp of whole vectors)."""
    return ScalarReg(idx, "q")


def ldp_stream(a: Assembler, t: DType, units: list[tuple], pool: tuple[int, ...], span: int) -> None:
    """Loads and their FMAs, software pipelined. A unit ``(pointer, u, accs, muls)`` is one ldp of
    the q slots u, u + 1 of a ``span``-byte step at ``pointer`` (a pointer's unit 0 post-increments
    it by ``span``) and the FMAs ``accs[h] += slot h x muls[h]``. Loads run ``len(pool) // 2 - 1``
    units ahead of their FMAs, unit i in pair i of ``pool`` (round robin)."""
    slots = len(pool) // 2
    ahead = slots - 1
    for i in range(len(units) + ahead):
        if i < len(units):  # the load of unit i
            ptr, u, _, _ = units[i]
            r0, r1 = pool[2 * (i % slots)], pool[2 * (i % slots) + 1]
            a.ldp(q(r0), q(r1), post(ptr, span) if u == 0 else mem(ptr, 16 * u - span))
        j = i - ahead
        if j >= 0:  # the FMAs of unit i - ahead
            _, _, accs, muls = units[j]
            for h in range(2):
                a.fmla(t.vec(accs[h]), t.vec(pool[2 * (j % slots) + h]), muls[h])


def strided_copy(
    a: Assembler, t: DType, strided: XReg, stride: XReg, contig: XReg, count: int, gather: bool, cnt: XReg, name: str
) -> None:
    """``count`` elements between ``strided`` (``stride`` bytes apart) and ``contig``: into
    ``contig`` (``gather``) or back, one scalar at a time, 4 per iteration of a loop labelled
    ``name`` (counting ``cnt``). Both pointers end past their runs; uses v0..v3."""

    def one(r: int) -> None:
        reg = t.scalar(r)
        if gather:
            a.ldr(reg, mem(strided))
            a.str(reg, post(contig, t.size))
        else:
            a.ldr(reg, post(contig, t.size))
            a.str(reg, mem(strided))
        a.add(strided, strided, stride)

    loop(a, cnt, count // 4, lambda: [one(r) for r in range(4)], name)
    for r in range(count % 4):
        one(r)


def transpose(a: Assembler, t: DType, regs: list[int], tmp: int) -> list[int]:
    """Transpose the lanes x lanes tile in v<regs> (row i in register i) with trn1/trn2 on the
    elements, then (4 x 4) on .d pairs, through v<tmp>..; returns the registers of its columns."""
    v = [VecReg(r, t.es, t.lanes) for r in regs]
    w = [VecReg(tmp + i, t.es, t.lanes) for i in range(t.lanes)]
    if t.lanes == 2:
        a.trn1(w[0], v[0], v[1])
        a.trn2(w[1], v[0], v[1])
        return [w[0].idx, w[1].idx]
    a.trn1(w[0], v[0], v[1])  # [00 10 02 12]
    a.trn2(w[1], v[0], v[1])  # [01 11 03 13]
    a.trn1(w[2], v[2], v[3])  # [20 30 22 32]
    a.trn2(w[3], v[2], v[3])  # [21 31 23 33]
    d = [VecReg(x.idx, "d", 2) for x in w]
    out = [VecReg(r, "d", 2) for r in regs]
    a.trn1(out[0], d[0], d[2])  # [00 10 20 30]
    a.trn1(out[1], d[1], d[3])
    a.trn2(out[2], d[0], d[2])
    a.trn2(out[3], d[1], d[3])
    return list(regs)


#: op(a, t, registers of every source, width) -> the registers to store (in place in a source, or not)
Op = Callable[[Assembler, DType, list[list[int]], int], list[int]]
SWEEP_VECS = 4  # q registers per step of `column_sweep`
COL_CNT, ROW_CNT = x8, x9  # `column_sweep`'s loop counters
WALK = (x11, x12, x13)  # `column_sweep`'s walking pointers of the sources and the destination


def column_sweep(
    a: Assembler,
    t: DType,
    rows: int,
    cols: int,
    srcs: Sequence[tuple[XReg, XReg]],
    dst: tuple[XReg, XReg],
    op: Op,
) -> None:
    """out[:, j] = op(srcs[:, j]) for every column; ``srcs``/``dst`` are (pointer, byte stride)
    registers. Per column a loop of 4 q registers of rows (post-indexed ldp/stp), then the rest
    as q/d/s pieces; sources in v0.. (4 registers each)."""
    full, rest = divmod(rows, SWEEP_VECS * t.lanes)
    blocks = split(rest, t.lanes, SWEEP_VECS) if rest else []  # at most SWEEP_VECS pieces at a time
    ins = [[SWEEP_VECS * s + i for i in range(SWEEP_VECS)] for s in range(len(srcs))]
    out = WALK[len(srcs)]

    def step() -> None:  # 4 q registers of rows
        for s in range(len(srcs)):
            for i in range(0, SWEEP_VECS, 2):
                a.ldp(q(ins[s][i]), q(ins[s][i + 1]), post(WALK[s], 32))
        res = op(a, t, ins, t.lanes)
        for i in range(0, SWEEP_VECS, 2):
            a.stp(q(res[i]), q(res[i + 1]), post(out, 32))

    a.mov(COL_CNT, cols)
    top = a.label("col")
    for (base, _), w in zip([*srcs, dst], WALK, strict=False):
        a.mov(w, base)
    loop(a, ROW_CNT, full, step, "rows")
    for pieces in blocks:  # the rest of the column: q/d/s pieces
        for s in range(len(srcs)):
            ldst_pieces(a, t, False, ins[s][: len(pieces)], pieces, WALK[s])
        outs = [op(a, t, [[ins[s][i]] for s in range(len(srcs))], p.width)[0] for i, p in enumerate(pieces)]
        ldst_pieces(a, t, True, outs, pieces, out)
    for base, ld in [*srcs, dst]:  # next column
        a.add(base, base, ld)
    a.subs(COL_CNT, COL_CNT, 1)
    a.b_ne(top)
