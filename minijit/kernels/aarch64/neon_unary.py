"""NEON unary primitives: B = op(A) or B = op(A)^T (column-major, strides in elements).

    void f(const T* a, T* b, int64_t lda, int64_t ldb)

A is M x N (``a[m + n*lda]``); B is M x N (``b[m + n*ldb]``) or, with
``trans_b``, N x M (``b[n + m*ldb]``). ``ptype``: ``zero``, ``copy`` (alias
``identity``), ``relu`` (``fmax(x, 0)``: NaN stays NaN, -0.0 gives +0.0 as
``np.maximum(x, 0)``).

Plain form (`column_sweep`, shared with the binary kernels): per column a loop
of 4 q registers (16 fp32 / 8 fp64 rows) with post-indexed ldp/stp, then the
rest of the column as q/d/s pieces. Transposed form: 4 x 4 (fp32) / 2 x 2
(fp64) tiles, one q register per column of A, transposed in registers with
``trn1``/``trn2`` on .s then .d elements, stored as rows of B; edge tiles load
and store only the elements inside the matrices (3 elements: d + s with ins).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from asm.aarch64 import Assembler, mem, post, x0, x1, x2, x3, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17
from asm.aarch64.registers import ScalarReg, VecReg, VElem, XReg
from minijit.kernels.aarch64.common import (
    DType,
    check_bools,
    check_choice,
    check_positive,
    dtype_info,
    generator,
    unary_signature,
)
from minijit.kernels.aarch64.pieces import Piece, ldst_pieces, split

__all__ = ["PTYPES", "column_sweep", "generate", "program", "signature"]

PTYPES = ("zero", "copy", "identity", "relu")
VECS = 4  # q registers per step of the column loop
V_ZERO, V_TMP = 16, 17  # a zero vector; scratch for partial loads/stores and transposes (v17..v21)

# -- registers ----------------------------------------------------------------------
COL_CNT, ROW_CNT, XT = x8, x9, x10  # loop counters, scratch pointer
WALK = (x11, x12, x13)  # walking pointers of sources and destination (column sweep)
A_N, B_N, A_T, B_T = x14, x15, x16, x17  # transposed: column block of A/B, tile of A/B

# op(regs of every source, width) -> registers to store (None: in place in the first source)
Op = Callable[[Assembler, DType, list[list[int]], int], list[int]]


signature = unary_signature


def column_sweep(
    a: Assembler,
    t: DType,
    rows: int,
    cols: int,
    srcs: Sequence[tuple[XReg, XReg]],
    dst: tuple[XReg, XReg],
    op: Op,
) -> None:
    """out[:, j] = op(srcs[:, j]) for every column; ``srcs``/``dst`` are (pointer, byte stride) registers."""
    full, rest = divmod(rows, VECS * t.lanes)
    blocks = split(rest, t.lanes, VECS) if rest else []  # at most VECS pieces at a time
    ins = [[VECS * s + i for i in range(VECS)] for s in range(len(srcs))]
    ptrs = [*srcs, dst]
    a.mov(COL_CNT, cols)
    top = a.label("col")
    for (base, _), w in zip(ptrs, WALK, strict=False):
        a.mov(w, base)
    if full:  # 4 q registers of rows per iteration
        if full > 1:
            a.mov(ROW_CNT, full)
            rows_top = a.label("rows")
        for s in range(len(srcs)):
            for i in range(0, VECS, 2):
                a.ldp(ScalarReg(ins[s][i], "q"), ScalarReg(ins[s][i + 1], "q"), post(WALK[s], 32))
        out = op(a, t, ins, t.lanes)
        for i in range(0, VECS, 2):
            a.stp(ScalarReg(out[i], "q"), ScalarReg(out[i + 1], "q"), post(WALK[len(srcs)], 32))
        if full > 1:
            a.subs(ROW_CNT, ROW_CNT, 1)
            a.b_ne(rows_top)
    for pieces in blocks:  # the rest of the column: q/d/s pieces
        for s in range(len(srcs)):
            ldst_pieces(a, t, False, ins[s][: len(pieces)], pieces, WALK[s])
        outs = [op(a, t, [[ins[s][i]] for s in range(len(srcs))], p.width)[0] for i, p in enumerate(pieces)]
        ldst_pieces(a, t, True, outs, pieces, WALK[len(srcs)])
    for base, ld in ptrs:  # next column
        a.add(base, base, ld)
    a.subs(COL_CNT, COL_CNT, 1)
    a.b_ne(top)


def _unary_op(ptype: str) -> Op:
    def op(a: Assembler, t: DType, ins: list[list[int]], width: int) -> list[int]:
        if ptype == "zero":
            return [V_ZERO] * VECS
        if ptype == "relu":
            for r in ins[0]:
                a.fmax(t.vec(r, width), t.vec(r, width), t.vec(V_ZERO, width))
        return ins[0]

    return op


# -- partial vectors (edge tiles) ------------------------------------------------------
def _load_n(a: Assembler, t: DType, reg: int, count: int, base: XReg) -> None:
    """Load ``count`` <= lanes elements at ``base`` into v<reg> (3 fp32: ldr d, ldr s, ins)."""
    if count == 3:
        a.ldr(ScalarReg(reg, "d"), mem(base))
        a.ldr(ScalarReg(V_TMP, "s"), mem(base, 8))
        a.ins(VElem(reg, "s", 2), VElem(V_TMP, "s", 0))
        return
    ldst_pieces(a, t, False, [reg], [Piece(0, count)], base)


def _store_n(a: Assembler, t: DType, reg: int, count: int, base: XReg) -> None:
    """Store the first ``count`` elements of v<reg> at ``base``."""
    if count == 3:
        a.str(ScalarReg(reg, "d"), mem(base))
        a.mov(ScalarReg(V_TMP, "s"), VElem(reg, "s", 2))
        a.str(ScalarReg(V_TMP, "s"), mem(base, 8))
        return
    ldst_pieces(a, t, True, [reg], [Piece(0, count)], base)


def transpose(a: Assembler, t: DType, regs: list[int]) -> list[int]:
    """Transpose the lanes x lanes tile in v<regs> (row i = register i); returns the output registers."""
    v = [VecReg(r, t.es, t.lanes) for r in regs]
    w = [VecReg(V_TMP + 1 + i, t.es, t.lanes) for i in range(t.lanes)]
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


def _tile(a: Assembler, t: DType, ptype: str, rows: int, cols: int, lda: XReg, ldb: XReg) -> None:
    """B tile (cols x rows, at B_T) = op(A tile (rows x cols, at A_T))^T."""
    regs = list(range(t.lanes))
    a.mov(XT, A_T)
    for c in range(cols):  # column c of A: `rows` elements
        _load_n(a, t, regs[c], rows, XT)
        if c + 1 < cols:
            a.add(XT, XT, lda)
    if ptype == "relu":
        for r in regs[:cols]:
            a.fmax(t.vec(r), t.vec(r), t.vec(V_ZERO))
    out = transpose(a, t, regs)
    a.mov(XT, B_T)
    for i in range(rows):  # row i of the tile is column m0 + i of B: `cols` elements
        _store_n(a, t, out[i], cols, XT)
        if i + 1 < rows:
            a.add(XT, XT, ldb)


def _transposed(a: Assembler, t: DType, ptype: str, m: int, n: int, lda: XReg, ldb: XReg) -> None:
    """Tiles over N (outer) and M (inner); full tiles in counted loops, edge tiles after them."""
    L = t.lanes
    a.mov(A_N, x0)
    a.mov(B_N, x1)

    def m_sweep(cols: int) -> None:
        a.mov(A_T, A_N)
        a.mov(B_T, B_N)
        full, rest = divmod(m, L)
        if full:
            a.mov(ROW_CNT, full)
            top = a.label("m")
            _tile(a, t, ptype, L, cols, lda, ldb)
            a.add(A_T, A_T, L * t.size)  # next rows of A, next columns of B
            a.mov(XT, L)
            a.madd(B_T, XT, ldb, B_T)
            a.subs(ROW_CNT, ROW_CNT, 1)
            a.b_ne(top)
        if rest:
            _tile(a, t, ptype, rest, cols, lda, ldb)

    full, rest = divmod(n, L)
    if full:
        a.mov(COL_CNT, full)
        top = a.label("n")
        m_sweep(L)
        a.mov(XT, L)
        a.madd(A_N, XT, lda, A_N)
        a.add(B_N, B_N, L * t.size)
        a.subs(COL_CNT, COL_CNT, 1)
        a.b_ne(top)
    if rest:
        m_sweep(rest)


def _check(m: int, n: int, trans_b: bool, dtype: str, ptype: str) -> DType:
    check_positive(m=m, n=n)
    t = dtype_info(dtype)
    check_choice("ptype", ptype, PTYPES)
    check_bools(trans_b=trans_b)
    return t


def program(m: int, n: int, trans_b: bool = False, dtype: str = "fp32", ptype: str = "copy") -> Assembler:
    """The unary kernel as an `Assembler` (no callee-saved registers are used)."""
    t = _check(m, n, trans_b, dtype, ptype)
    a = Assembler(name=f"neon_unary_{ptype}")
    lda, ldb = x2, x3
    a.lsl(lda, lda, t.shift)  # element strides -> bytes
    a.lsl(ldb, ldb, t.shift)
    if ptype in ("zero", "relu"):
        a.movi(VecReg(V_ZERO, "d", 2), 0)
    if not trans_b:
        column_sweep(a, t, m, n, [] if ptype == "zero" else [(x0, lda)], (x1, ldb), _unary_op(ptype))
    elif ptype == "zero":  # B is N x M: zero it column by column
        column_sweep(a, t, n, m, [], (x1, ldb), _unary_op(ptype))
    else:
        _transposed(a, t, ptype, m, n, lda, ldb)
    a.ret()
    return a


def _name(m: int, n: int, trans_b: bool, dtype: str, ptype: str) -> str:
    return f"neon_unary_{ptype}_{m}x{n}{'_t' if trans_b else ''}_{dtype}"


generate = generator(program, signature, "JIT a unary kernel; returns the callable from `minijit.runtime.load`.", _name)
