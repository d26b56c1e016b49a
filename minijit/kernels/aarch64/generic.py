"""The generic-tier GEMM kernel on AArch64 (NEON): every size, stride and the batch count are
run-time arguments (`minijit.kernels.generic`: ``f(a, b, c, args)``), so one kernel per dtype
and epilogue serves every shape.

Register block: C in 16 x 4 (fp32) or 8 x 4 (fp64), four q registers of rows per column in
v16..v31; per k the A column in four q registers (v0..v3) and each of the block's B elements
broadcast with ``ld1r`` (v4..v7, the pointer post-incremented by the K stride in bytes), one
``fmla`` by element per accumulator and k (`pieces.fma_elem`), in K order: each output element is
one FMA chain over K, started from zero (``movi``) or from C (``accumulate`` = 1). Before the
store, the block's epilogue (`minijit.kernels.epilogue`, elementwise: relu is ``fmax`` with a zero
in v4, free after the K loop) on every accumulator.

Columns run in blocks of 4, then the last 1-3 as one narrower block (3, 2 or 1 columns, chosen by
comparing the count left). Rows run in blocks of 4 q registers, then the rows left (M mod 16, fp32;
M mod 8, fp64) as at most two narrower blocks, each selected at run time from bits of M: 1-3 q
registers (M >> log2(lanes) mod 4), then the rows below one vector (fp32: a d piece of 2 rows, an
s piece of 1, or both; fp64: a d piece of 1 row). Every load and store covers rows of the matrix
only (`pieces.ldst_pieces`), so nothing past the last row of A or C is touched, not even inside a
vector. M, N, K or batch 0: nothing is read; K = 0 stores zeros (or C unchanged with accumulate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asm.aarch64 import Assembler, X, mem, post
from asm.aarch64.registers import VecReg, VElem
from minijit.kernels import generic as spec
from minijit.kernels.aarch64.common import (
    DType,
    EpilogueCode,
    check_epilogue,
    dtype_info,
    load_kernel,
    prologue,
)
from minijit.kernels.aarch64.common import epilogue as leave  # the frame's restore and return
from minijit.kernels.aarch64.pieces import Piece, fma_elem, ldst_pieces, split
from minijit.kernels.epilogue import Epilogue

__all__ = ["BLOCK_COLS", "BLOCK_VECTORS", "generate", "name", "program", "signature"]

BLOCK_VECTORS = 4  # q registers of rows in the full block
BLOCK_COLS = 4  # columns in the full block

# general purpose registers; x3 (the args pointer) holds `accumulate` once the args are read
A, B, C, ARGP = X[0:4]  # batch bases of A, B, C; the args array
ACCUM = X[3]
M, N, K, LDA, LDB_K, LDB_N, LDC, BATCH, BATCH_A, BATCH_B, BATCH_C = X[4:15]  # strides in bytes
N_LEFT, B_N, C_N = X[15], X[16], X[17]  # columns left; B and C at the current column block
M_CNT, A_M, C_M, XA, K_CNT, XT = X[19:25]  # row blocks left; A, C at the row block; A walk; K left; scratch
B_COL = tuple(X[25:29])  # B walk of each column of the block (by the K stride)
ARG_REGS = dict(zip(spec.ARGS, (M, N, K, LDA, LDB_K, LDB_N, LDC, BATCH, BATCH_A, BATCH_B, BATCH_C, ACCUM), strict=True))
# vector registers: A pieces, B broadcasts, accumulators (none callee-saved)
V_A, V_B, V_ACC = 0, BLOCK_VECTORS, 16


def signature(dtype: str) -> str:
    """The C signature of the kernel for ``dtype`` ("fp32", "fp64")."""
    return spec.signature(dtype_info(dtype).ctype)


def name(dtype: str, epilogue: Epilogue | str | None = None) -> str:
    """The kernel's name: ``neon_generic_gemm_<dtype>`` and the epilogue's tag (``_r``: relu)."""
    return f"neon_generic_gemm_{dtype}{check_epilogue(epilogue, 'generic GEMM').tag}"


class NeonGeneric:
    """One generic kernel being emitted: the loops (batch, N, M, K) are methods."""

    def __init__(self, a: Assembler, t: DType, epilogue: Epilogue = Epilogue.NONE) -> None:
        self.a, self.t, self.epilogue = a, t, epilogue
        self.shift_lanes = t.lanes.bit_length() - 1  # log2(lanes)
        self.rows = BLOCK_VECTORS * t.lanes  # rows of the full block

    def emit(self) -> None:
        """Prologue, arguments, the batch loop, the frame restored."""
        a, t = self.a, self.t
        frame = prologue(a, [r.idx for r in (M_CNT, A_M, C_M, XA, K_CNT, XT, *B_COL)])
        # the args array in pairs of neighbours; `accumulate` last, over the args pointer
        for first, second in zip(spec.ARGS[::2], spec.ARGS[1::2], strict=True):
            a.ldp(ARG_REGS[first], ARG_REGS[second], mem(ARGP, spec.OFFSET[first]))
        for r in (LDA, LDB_K, LDB_N, LDC, BATCH_A, BATCH_B, BATCH_C):  # elements -> bytes
            a.lsl(r, r, t.shift)
        done = a.new_label("done")
        for r in (BATCH, M, N):  # nothing to do
            a.cbz(r, done)
        top = a.label("batch")
        self.columns()
        for base, step in ((A, BATCH_A), (B, BATCH_B), (C, BATCH_C)):
            a.add(base, base, step)
        a.subs(BATCH, BATCH, 1)
        a.b_ne(top)
        a.bind(done)
        leave(a, frame)

    def columns(self) -> None:
        """Blocks of BLOCK_COLS columns while that many are left, then one block of the 1-3 left."""
        a = self.a
        a.mov(B_N, B)
        a.mov(C_N, C)
        a.mov(N_LEFT, N)
        check, rest, end = a.new_label("ncheck"), a.new_label("nrest"), a.new_label("nend")
        a.bind(check)
        a.cmp(N_LEFT, BLOCK_COLS)
        a.b_lt(rest)
        self.row_sweep(BLOCK_COLS)
        shift = BLOCK_COLS.bit_length() - 1
        a.add(B_N, B_N, LDB_N, "lsl", shift)  # next column block
        a.add(C_N, C_N, LDC, "lsl", shift)
        a.sub(N_LEFT, N_LEFT, BLOCK_COLS)
        a.b(check)
        a.bind(rest)
        self.switch(N_LEFT, {cols: lambda cols=cols: self.row_sweep(cols) for cols in range(1, BLOCK_COLS)}, end, "n")
        a.bind(end)

    def row_sweep(self, cols: int) -> None:
        """All rows of one column block: full row blocks, then the q registers of rows left
        (1..BLOCK_VECTORS - 1), then the rows below one vector."""
        a, t = self.a, self.t
        a.mov(A_M, A)
        a.mov(C_M, C_N)
        full = [Piece(i * t.lanes, t.lanes) for i in range(BLOCK_VECTORS)]
        rest = a.new_label("mrest")
        a.lsr(M_CNT, M, self.shift_lanes + BLOCK_VECTORS.bit_length() - 1)  # M // rows
        a.cbz(M_CNT, rest)
        top = a.label("m")
        self.block(full, cols)
        self.next_rows(self.rows)
        a.subs(M_CNT, M_CNT, 1)
        a.b_ne(top)
        a.bind(rest)
        # q registers left: bits log2(lanes) .. log2(lanes) + 1 of M
        vec_end = a.new_label("mvec_end")
        a.lsl(XT, M, 62 - self.shift_lanes)
        a.lsr(XT, XT, 62)

        def vectors(v: int) -> None:
            self.block(full[:v], cols)
            self.next_rows(v * t.lanes)

        self.switch(XT, {v: lambda v=v: vectors(v) for v in range(1, BLOCK_VECTORS)}, vec_end, "mv")
        a.bind(vec_end)
        if t.lanes > 1:  # rows below one vector: the low log2(lanes) bits of M
            tail_end = a.new_label("mtail_end")
            a.lsl(XT, M, 64 - self.shift_lanes)
            a.lsr(XT, XT, 64 - self.shift_lanes)
            tails = {r: lambda r=r: self.block(split(r, t.lanes, 99)[0], cols) for r in range(1, t.lanes)}
            self.switch(XT, tails, tail_end, "mt")
            a.bind(tail_end)

    def next_rows(self, rows: int) -> None:
        """A and C past ``rows`` rows."""
        self.a.add(A_M, A_M, rows * self.t.size)
        self.a.add(C_M, C_M, rows * self.t.size)

    def switch(self, reg: Any, cases: dict[int, Callable[[], None]], end: Any, name: str) -> None:
        """Run the case of the value in ``reg`` (none for a value not among ``cases``), then go to
        ``end``: one ``cmp``/``b.eq`` per case, the bodies after them."""
        a = self.a
        labels = {v: a.new_label(f"{name}{v}") for v in cases}
        for v in sorted(cases, reverse=True):
            a.cmp(reg, v)
            a.b_eq(labels[v])
        a.b(end)
        for i, v in enumerate(sorted(cases, reverse=True)):
            a.bind(labels[v])
            cases[v]()
            if i + 1 < len(cases):
                a.b(end)

    def block(self, pieces: list[Piece], cols: int) -> None:
        """C[rows of ``pieces`` at C_M, ``cols`` columns at C_N] = epilogue((C or 0) + A B over K)."""
        a = self.a
        accs = [[V_ACC + j * BLOCK_VECTORS + i for i in range(len(pieces))] for j in range(cols)]  # [column][piece]
        zero, kstart, store = a.new_label("zero"), a.new_label("kstart"), a.new_label("store")
        a.cbz(ACCUM, zero)
        self.c_tile(pieces, accs, store=False)
        a.b(kstart)
        a.bind(zero)
        for col in accs:
            for r in col:
                a.movi(VecReg(r, "d", 2), 0)
        a.bind(kstart)
        a.mov(XA, A_M)
        a.mov(B_COL[0], B_N)
        for j in range(1, cols):
            a.add(B_COL[j], B_COL[j - 1], LDB_N)
        a.cbz(K, store)
        a.mov(K_CNT, K)
        top = a.label("k")
        self.k_step(pieces, accs)
        a.subs(K_CNT, K_CNT, 1)
        a.b_ne(top)
        a.bind(store)
        EpilogueCode(a, self.t, self.epilogue, V_B).emit(r for col in accs for r in col)  # v4: free after K
        self.c_tile(pieces, accs, store=True)

    def k_step(self, pieces: list[Piece], accs: list[list[int]]) -> None:
        """One k: the A pieces at XA (then XA += lda), per column its B element broadcast (then
        that column's pointer += ldb_k) and one FMA per piece."""
        a, t = self.a, self.t
        src = [V_A + i for i in range(len(pieces))]
        ldst_pieces(a, t, False, src, pieces, XA)
        a.add(XA, XA, LDA)
        for j, col in enumerate(accs):
            a.ld1r(VecReg(V_B + j, t.es, t.lanes), post(B_COL[j], LDB_K))
            for i, p in enumerate(pieces):
                fma_elem(a, t, col[i], src[i], p.width, VElem(V_B + j, t.es, 0))

    def c_tile(self, pieces: list[Piece], accs: list[list[int]], store: bool) -> None:
        """Load or store the block's accumulators, column by column from C_M."""
        a = self.a
        a.mov(XT, C_M)
        for j, col in enumerate(accs):
            ldst_pieces(a, self.t, store, col, pieces, XT)
            if j + 1 < len(accs):
                a.add(XT, XT, LDC)


def program(dtype: str = "fp32", epilogue: Epilogue | str | None = None) -> Assembler:
    """The generic GEMM kernel for ``dtype`` ("fp32", "fp64") and ``epilogue`` (an
    elementwise `Epilogue` or its text; None: none) as an `Assembler` (``code()``,
    ``listing()``); ValueError for another dtype or epilogue."""
    t = dtype_info(dtype)
    ep = check_epilogue(epilogue, "generic GEMM")
    a = Assembler(name=name(dtype, ep))
    NeonGeneric(a, t, ep).emit()
    return a


def generate(dtype: str = "fp32", epilogue: Epilogue | str | None = None) -> Any:
    """The generic GEMM kernel (`minijit.kernels.generic`) for ``dtype`` and
    ``epilogue``: native on an AArch64 host, else run by the emulator (`minijit.runtime.load`)."""
    return load_kernel(program(dtype, epilogue), signature(dtype), name(dtype, epilogue))
