"""AArch64 GEMV, NEON and SVE: the BRGEMM of one column, ``c += sum_br A_br b_br``.

`NeonGemv` and `SveGemv` give ``program(m, k, br_size, trans_a, trans_b, trans_c, dtype)`` and
``generate(..., sve_vl)``, a kernel with the BRGEMM signature for N = 1 (`common.brgemm_signature`):
A M x K (``a[m + k*lda]``; ``a[k + m*lda]`` with ``trans_a``), x = ``b[k]`` (``b[k*ldb]`` with
``trans_b``), y = ``c[m]`` (``c[m*ldc]`` with ``trans_c``), ``A_br = a + br*br_stride_a`` (``b``
likewise); strides in elements. Every element of A is used once: the kernel streams A and keeps
every FMA pipe busy, which the BRGEMM's one-column block does not. Nothing outside the operands is
read or written (NEON: q/d/s pieces; SVE: ``whilelt`` predicates, any vector length).

Column form (``trans_a`` false; y += A x): y in M blocks of ``M_BLOCK_BYTES`` (they stay in L1);
per block, BR step and group of ``COLS`` columns, the x elements are broadcast once and a pass down
the block adds the columns into ``ROW_VECTORS`` vectors of y at a time (``COLS`` streams of A, y
loaded and stored once per group). A strided y (``trans_c``) is copied into a stack buffer per
block and back (SVE: gathers of y inside the passes would sit in the stream of A; LLVM 19's
Neoverse models give a 32-bit gather 2-5 micro-ops, a scatter 4-8, a contiguous ``ld1w`` 1).

Row form (``trans_a``; y[m] += dot(A row m, x)): ``DOT_ROWS`` rows with ``DOT_VECTORS``
accumulators each walk K together, each x vector loaded once for all rows; then each row's lanes
are summed into y[m]. A strided x (``trans_b``) is first copied into a stack buffer of at most
``X_COPY_MAX_BYTES``, a longer one in chunks (`Gemv.x_chunks`, `common.gemv_row_passes`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from asm.aarch64 import Assembler, P, X, mem, post, sp
from asm.aarch64.registers import VecReg, VElem, XReg
from minijit.kernels.aarch64.common import (
    GEMV_X_SLOTS,
    DType,
    KernelKind,
    add_imm,
    brgemm_signature,
    check_args,
    epilogue,
    gemv_row_passes,
    gemv_x_chunks,
    kernel_name,
    loop,
    prologue,
    sp_adjust,
    sp_plus,
)
from minijit.kernels.aarch64.pieces import Piece, ldp_stream, ldst_pieces, q, split
from minijit.kernels.aarch64.pieces import strided_copy as neon_copy
from minijit.kernels.aarch64.predicated import counted, remainder, stream
from minijit.kernels.aarch64.predicated import strided_copy as sve_copy

__all__ = ["Gemv", "NeonGemv", "SveGemv"]

# -- registers ----------------------------------------------------------------------
A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes; LDB / LDC: x / y steps)
BLK_CNT, BR_CNT, GRP_CNT, CNT = X[8:12]  # loops: M blocks (x chunks), BR steps, column / row groups, rows / K
A_BR, B_BR, PA, PB = X[12:16]  # A, x at the BR step; A, x at the group
AUX, YP = X[16], X[17]  # NEON: the y block; SVE: the copy index; both: chunk scratch. Walking y
PTR = tuple(X[19:27])  # column (column form) or row (row form) pointers of A
TMP = X[27]  # scratch
YS = STEP = X[28]  # NEON: the caller's walking y (strided y copies); SVE: elements per full step
COPY_REGS = (PA, PB, AUX, GRP_CNT)  # SVE: the strided copies' scratch


class Gemv(KernelKind):
    """One GEMV kernel being emitted: the loops both ISAs share. A subclass gives the ISA's
    blocking (class attributes) and its stages (loads, FMAs, remainders, copies, reductions)."""

    #: largest m, k, br_size (None: any)
    MAX_SIZE: ClassVar[int | None]
    #: column form: bytes of y per M block (it stays in L1 while every column of A streams past it)
    M_BLOCK_BYTES: ClassVar[int] = 16 * 1024
    #: row form with a strided x: the largest stack buffer x is copied into (bytes)
    X_COPY_MAX_BYTES: ClassVar[int] = 64 * 1024
    X_PIECE_BYTES: ClassVar[int]  # pieces of a chunked x: whole multiples of this many bytes
    #: column form: columns of A per pass (sequential streams) and vectors of y per step (chains)
    COLS: ClassVar[int]
    ROW_VECTORS: ClassVar[int]
    #: row form: rows per group and vector accumulators per row (DOT_ROWS x DOT_VECTORS chains, each
    #: x vector feeding DOT_ROWS FMAs; 8 rows is what the row pointers allow)
    DOT_ROWS: ClassVar[int] = 8
    DOT_VECTORS: ClassVar[int] = 2

    def __init_subclass__(cls) -> None:
        """The vector registers of the blocking: x broadcasts XS, y COL_ACC and A loads COL_TMP of
        the column form; x vectors XV, accumulators ROW_ACC[r] and A loads ROW_TMP of the row form."""
        super().__init_subclass__()
        rv, dr, dv = cls.ROW_VECTORS, cls.DOT_ROWS, cls.DOT_VECTORS
        cls.XS, cls.XV = tuple(range(cls.COLS)), tuple(range(dv))
        cls.COL_ACC, cls.COL_TMP = tuple(range(32 - rv, 32)), tuple(range(cls.COLS, 32 - rv))
        cls.ROW_TMP = tuple(range(dv, 32 - dr * dv))
        cls.ROW_ACC = tuple(tuple(range(32 - (dr - r) * dv, 32 - (dr - r - 1) * dv)) for r in range(dr))
        assert cls.COLS <= len(PTR) and dr <= len(PTR)

    def __init__(self, t: DType, m: int, k: int, br: int, trans_a: bool, trans_b: bool, trans_c: bool) -> None:
        self.t, self.m, self.k, self.br = t, m, k, br
        self.trans_a, self.trans_b, self.trans_c = trans_a, trans_b, trans_c

    # -- the public face ----------------------------------------------------------------
    signature = staticmethod(brgemm_signature)

    @classmethod
    def x_chunks(cls, k: int, br: int, es: int) -> tuple[int, int]:
        """Row form with a strided x: the (BR steps, K elements) of x copied into the stack buffer
        at a time (``es``-byte elements; `common.gemv_x_chunks` at ``X_COPY_MAX_BYTES``, pieces of
        whole ``X_PIECE_BYTES``)."""
        return gemv_x_chunks(k, br, es, cls.X_COPY_MAX_BYTES, cls.X_PIECE_BYTES)

    @classmethod
    def program(
        cls,
        m: int,
        k: int,
        br_size: int = 1,
        trans_a: bool = False,
        trans_b: bool = False,
        trans_c: bool = False,
        dtype: str = "fp32",
    ) -> tuple[Assembler, str]:
        """The kernel's `Assembler` and the listing of its innermost loop body: one step of the
        rows loop (column form: ROW_VECTORS vectors of y x COLS columns) or of the K loop (row
        form: DOT_ROWS rows x DOT_VECTORS vectors). Bad arguments raise ValueError."""
        t = check_args(
            cls.MAX_SIZE, dtype, {"trans_a": trans_a, "trans_b": trans_b, "trans_c": trans_c}, m=m, k=k, br_size=br_size
        )
        kern = cls(t, m, k, br_size, trans_a, trans_b, trans_c)
        a = kern.emit()
        body = Assembler(name="kloop")
        if trans_a:
            kern.row_step(body, cls.DOT_ROWS)
        else:
            kern.col_step(body, cls.COLS)
        return a, body.listing()

    @classmethod
    def name(cls, m: int, k: int, br_size: int, trans_a: bool, trans_b: bool, trans_c: bool, dtype: str) -> str:
        flags = {"trans_a": trans_a, "trans_b": trans_b, "trans_c": trans_c}
        return kernel_name(f"{cls.ISA}_gemv", f"{m}x{k}_br{br_size}", dtype, **flags)

    # -- the kernel ----------------------------------------------------------------------
    def emit(self) -> Assembler:  # the whole kernel: prologue, the form, epilogue
        a = Assembler(name=f"{self.ISA}_gemv")
        frame = prologue(a, [r.idx for r in (*PTR, TMP, YS)], range(32))
        self.entry(a)
        (self.rows if self.trans_a else self.columns)(a)
        epilogue(a, frame)
        return a

    # -- column form: y += A x, COLS columns per pass over an L1 block of y ----------------
    def columns(self, a: Assembler) -> None:
        """Strides to bytes, then every M block of y (the last one shorter)."""
        t = self.t
        block_rows = self.M_BLOCK_BYTES // t.size
        buf = -(-min(self.m, block_rows) * t.size // 16) * 16
        a.lsl(LDA, LDA, t.shift)
        self.x_stride(a)
        if self.trans_c:
            a.lsl(LDC, LDC, t.shift)
            self.stack(a, buf, alloc=True)
        if self.br > 1:
            a.lsl(BR_A, BR_A, t.shift)
            a.lsl(BR_B, BR_B, t.shift)
        self.count_step(a, self.ROW_VECTORS)
        full, rest = divmod(self.m, block_rows)
        loop(a, BLK_CNT, full, lambda: self.col_block(a, block_rows), "m_blocks")
        if rest:
            self.col_block(a, rest)
        if self.trans_c:
            self.stack(a, buf, alloc=False)

    def col_block(self, a: Assembler, rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y; A (and C) move on."""
        k, cols = self.k, self.COLS
        self.y_in(a, rows)
        a.mov(A_BR, A)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PA, A_BR)
            a.mov(PB, B_BR)
            loop(a, GRP_CNT, k // cols, lambda: self.col_pass(a, rows, cols), "cols")
            if k % cols:
                self.col_pass(a, rows, k % cols)
            if self.br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        loop(a, BR_CNT, self.br, br_step, "br")
        self.add_bytes(a, A, rows * self.t.size)
        self.y_out(a, rows)

    def col_pass(self, a: Assembler, rows: int, cols: int) -> None:
        """Broadcast x[k .. k+cols) (PB on by ``cols`` steps), then one pass down the ``rows`` rows
        of y; PA on by ``cols`` columns."""
        self.x_broadcasts(a, cols)
        a.mov(PTR[0], PA)  # column pointers, PA to the next group
        for j in range(1, cols):
            a.add(PTR[j], PTR[j - 1], LDA)
        a.add(PA, PTR[cols - 1], LDA)
        self.col_rows(a, rows, cols)

    # -- row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time ---------------------
    def rows(self, a: Assembler) -> None:
        """Strides to bytes, then the row groups over x (copied in chunks when strided)."""
        t = self.t
        bc, kc = self.x_chunks(self.k, self.br, t.size) if self.trans_b else (self.br, self.k)
        chunked = (bc, kc) != (self.br, self.k)
        at = GEMV_X_SLOTS if chunked else 0  # the chunk state below the buffer
        buf = at + -(-bc * kc * t.size // 16) * 16
        a.lsl(LDA, LDA, t.shift)
        if self.trans_c:
            a.lsl(LDC, LDC, t.shift)
        else:
            a.mov(LDC, t.size)
        if self.br > 1:
            a.lsl(BR_A, BR_A, t.shift)
            a.lsl(BR_B, BR_B, t.shift)
        if self.trans_b:
            a.lsl(LDB, LDB, t.shift)
            self.stack(a, buf, alloc=True)
        copy = partial(self.x_copy, a, at=at) if self.trans_b else None  # a strided x into the buffer
        gemv_row_passes(a, self.k, self.br, t.size, (bc, kc), copy, partial(self.row_groups, a), BLK_CNT, (TMP, AUX))
        if self.trans_b:
            self.stack(a, buf, alloc=False)

    def row_groups(self, a: Assembler, br: int, k: int) -> None:
        """Every row group over ``br`` BR steps of ``k`` elements of K; A and C move on past the rows."""
        self.count_step(a, self.DOT_VECTORS)
        loop(a, GRP_CNT, self.m // self.DOT_ROWS, lambda: self.row_group(a, self.DOT_ROWS, br, k), "row_groups")
        if self.m % self.DOT_ROWS:
            self.row_group(a, self.m % self.DOT_ROWS, br, k)

    def row_group(self, a: Assembler, rows: int, br: int, k: int) -> None:
        """``rows`` rows of A (``br`` BR steps of ``k`` elements) into ``rows`` elements of y; A and
        C move on."""
        t = self.t
        self.acc_init(a, rows)
        a.mov(A_BR, A)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PTR[0], A_BR)  # row pointers
            for r in range(1, rows):
                a.add(PTR[r], PTR[r - 1], LDA)
            a.mov(PB, B_BR)
            self.k_walk(a, rows, k)
            if br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        loop(a, BR_CNT, br, br_step, "br")
        a.mov(YP, C)  # sum each row's lanes into y[r]
        for r in range(rows):
            acc = self.ROW_ACC[r]
            width = self.DOT_VECTORS
            while width > 1:  # pairwise vector sums
                width //= 2
                for v in range(width):
                    a.fadd(self.vreg(acc[v]), self.vreg(acc[v]), self.vreg(acc[v + width]))
            self.lane_sum(a, acc[0])
            a.str(t.scalar(acc[0]), mem(YP))
            if r + 1 < rows:
                a.add(YP, YP, LDC)
        a.mov(TMP, rows)
        a.madd(A, TMP, LDA, A)
        a.madd(C, TMP, LDC, C)

    # -- the ISA's stages ----------------------------------------------------------------
    def entry(self, a: Assembler) -> None: ...  # after the prologue (SVE: the all-true p0)
    def count_step(self, a: Assembler, vectors: int) -> None: ...  # SVE: STEP = vectors' elements
    def vreg(self, idx: int) -> Any: ...  # vector register idx, all lanes
    def stack(self, a: Assembler, size: int, alloc: bool) -> None: ...  # sp -= size (alloc) or += size
    def add_bytes(self, a: Assembler, rd: XReg, value: int) -> None: ...  # rd += value
    def x_stride(self, a: Assembler) -> None: ...  # column form: LDB, the step of x
    def x_broadcasts(self, a: Assembler, cols: int) -> None: ...  # x[k .. k+cols) into XS, PB on
    def col_rows(self, a: Assembler, rows: int, cols: int) -> None: ...  # a pass down y at YP
    def col_step(self, a: Assembler, cols: int) -> None: ...  # the column form's loop body
    def y_in(self, a: Assembler, rows: int) -> None: ...  # the block of y, copied in if strided
    def y_out(self, a: Assembler, rows: int) -> None: ...  # C past the block (copied back)
    def acc_init(self, a: Assembler, rows: int) -> None: ...  # the row form's accumulators
    def k_walk(self, a: Assembler, rows: int, k: int) -> None: ...  # one BR step's K of the rows
    def row_step(self, a: Assembler, rows: int) -> None: ...  # the row form's loop body
    def lane_sum(self, a: Assembler, acc: int) -> None: ...  # the row's sum (and y) into lane 0
    def x_copy(self, a: Assembler, br: int, k: int, at: int) -> None: ...  # strided x to sp + at


# -- NEON -------------------------------------------------------------------------------
class NeonGemv(Gemv):
    """NEON: q registers loaded in pairs (ldp/stp), remainders as q/d/s pieces.

    Column form, llvm-mca (LLVM 19), fp32 elements of A per cycle on neoverse-v2 / -v1 / apple-m4
    for COLS x ROW_VECTORS: 8 x 12 10.1 / 9.7 / 9.4, 8 x 8 9.6 / 6.6 / 9.1 (chains too few to hide
    the FMA latency on v1), 6 x 12 9.6 / 9.2 / 9.0, 4 x 16 8.7 / 8.6 / 8.5 (y's round trips); the
    ldp loads are the bound. The FMAs take x by element: LLVM's apple-m4 (Cyclone) model issues the
    vector form on 2 units, the by-element form on 3. Row form, DOT_ROWS x DOT_VECTORS, as above:
    8 x 2 10.6 / 10.6 / 7.9, 4 x 4 9.5 / 9.5 / 7.9, 6 x 4 10.2 / 10.2 / 7.4."""

    ISA = "neon"
    MAX_SIZE = 1 << 20
    COLS = 8
    ROW_VECTORS = 12
    X_PIECE_BYTES = 16 * Gemv.DOT_VECTORS  # whole q-register K steps

    def vreg(self, idx: int) -> VecReg:
        return self.t.vec(idx)

    def stack(self, a: Assembler, size: int, alloc: bool) -> None:
        sp_adjust(a, size, alloc)

    def add_bytes(self, a: Assembler, rd: XReg, value: int) -> None:
        add_imm(a, rd, value, TMP)

    def x_stride(self, a: Assembler) -> None:  # bytes between x elements: ld1r post-increments by it
        if self.trans_b:
            a.lsl(LDB, LDB, self.t.shift)
        else:
            a.mov(LDB, self.t.size)

    # -- column form ---------------------------------------------------------------------
    def x_broadcasts(self, a: Assembler, cols: int) -> None:
        for j in range(cols):
            a.ld1r(self.t.vec(self.XS[j]), post(PB, LDB))

    def col_rows(self, a: Assembler, rows: int, cols: int) -> None:
        """Full steps of ROW_VECTORS q registers, then the rows left over in pieces."""
        t = self.t
        a.mov(YP, AUX)
        steps, left = divmod(rows, self.ROW_VECTORS * t.lanes)
        loop(a, CNT, steps, lambda: self.col_step(a, cols), "rows")
        for pieces in split(left, t.lanes, min(self.ROW_VECTORS, len(self.COL_TMP))):
            self.col_pieces(a, cols, pieces)

    def col_step(self, a: Assembler, cols: int) -> None:
        """ROW_VECTORS q registers of y at YP += ``cols`` columns at PTR x their broadcasts
        (the loop body; YP and the column pointers move on by the step)."""
        t, acc, span = self.t, self.COL_ACC, 16 * self.ROW_VECTORS
        for u in range(0, self.ROW_VECTORS, 2):  # y
            a.ldp(q(acc[u]), q(acc[u + 1]), mem(YP, 16 * u))
        x = [VElem(self.XS[j], t.es, 0) for j in range(cols)]  # by element, as the BRGEMM's fmla
        units = [(PTR[j], u, acc[u : u + 2], (x[j], x[j])) for j in range(cols) for u in range(0, self.ROW_VECTORS, 2)]
        ldp_stream(a, t, units, self.COL_TMP, span)  # columns of A x their x elements into y
        for u in range(0, self.ROW_VECTORS, 2):  # y back
            a.stp(q(acc[u]), q(acc[u + 1]), post(YP, span) if u == 0 else mem(YP, 16 * u - span))

    def col_pieces(self, a: Assembler, cols: int, pieces: list[Piece]) -> None:
        """The rows left over: ``pieces`` (q/d/s, offsets from YP and the column pointers)."""
        t = self.t
        acc, src = list(self.COL_ACC[: len(pieces)]), list(self.COL_TMP[: len(pieces)])
        ldst_pieces(a, t, False, acc, pieces, YP)
        for j in range(cols):
            ldst_pieces(a, t, False, src, pieces, PTR[j])
            for i, p in enumerate(pieces):  # one lane: the scalar by-element form
                if p.width == 1:
                    a.fmla(t.scalar(acc[i]), t.scalar(src[i]), VElem(self.XS[j], t.es, 0))
                else:
                    a.fmla(t.vec(acc[i], p.width), t.vec(src[i], p.width), t.vec(self.XS[j], p.width))
        ldst_pieces(a, t, True, acc, pieces, YP)

    def y_in(self, a: Assembler, rows: int) -> None:
        """AUX = the block's y: the caller's, or (strided y) the stack buffer it is copied into."""
        if self.trans_c:
            self.y_copy(a, rows, gather=True)
            a.mov(AUX, sp)
        else:
            a.mov(AUX, C)

    def y_out(self, a: Assembler, rows: int) -> None:
        """C on past the block (strided y: copied back from the buffer first)."""
        if self.trans_c:
            self.y_copy(a, rows, gather=False)
        else:
            self.add_bytes(a, C, rows * self.t.size)

    def y_copy(self, a: Assembler, rows: int, gather: bool) -> None:
        """Strided y: the block's ``rows`` elements from the caller's y (C) into the stack buffer,
        or back (then C moves on by ``rows`` strides)."""
        a.mov(YS, C)
        a.mov(YP, sp)
        neon_copy(a, self.t, YS, LDC, YP, rows, gather, CNT, "ycopy")
        if not gather:
            a.mov(C, YS)

    # -- row form ------------------------------------------------------------------------
    def acc_init(self, a: Assembler, rows: int) -> None:
        """y[r] into lane 0 of row r's first accumulator (ldr zeroes the rest), the others zero."""
        a.mov(YP, C)
        for r in range(rows):
            a.ldr(self.t.scalar(self.ROW_ACC[r][0]), mem(YP))
            if r + 1 < rows:
                a.add(YP, YP, LDC)
            for v in range(1, self.DOT_VECTORS):
                a.movi(VecReg(self.ROW_ACC[r][v], "d", 2), 0)

    def k_walk(self, a: Assembler, rows: int, k: int) -> None:
        """One BR step's K: full steps, then the tail."""
        steps, rest = divmod(k, self.DOT_VECTORS * self.t.lanes)
        loop(a, CNT, steps, lambda: self.row_step(a, rows), "k")
        if rest:
            self.row_tail(a, rows, rest)

    def row_step(self, a: Assembler, rows: int) -> None:
        """DOT_VECTORS q registers of x at PB, and of each row at PTR: one FMA per row and vector
        (the loop body; PB and the row pointers move on by the step)."""
        t, xv, span = self.t, self.XV, 16 * self.DOT_VECTORS
        for u in range(0, len(xv), 2):  # x
            a.ldp(q(xv[u]), q(xv[u + 1]), post(PB, span) if u == 0 else mem(PB, 16 * u - span))
        units = [
            (PTR[r], v, self.ROW_ACC[r][v : v + 2], (t.vec(xv[v]), t.vec(xv[v + 1])))
            for r in range(rows)
            for v in range(0, self.DOT_VECTORS, 2)
        ]
        ldp_stream(a, t, units, self.ROW_TMP, span)  # rows of A x x into the accumulators

    def row_tail(self, a: Assembler, rows: int, rest: int) -> None:
        """The last ``rest`` elements of K: q, then d/s pieces (upper lanes zero), full-width FMAs."""
        t, dv, tmp = self.t, self.DOT_VECTORS, self.ROW_TMP
        pieces = split(rest, t.lanes, 99)[0]
        for c in range(0, len(pieces), dv):
            chunk = pieces[c : c + dv]
            ldst_pieces(a, t, False, list(self.XV[: len(chunk)]), chunk, PB)
            for r in range(rows):
                src = [tmp[(r * dv + i) % len(tmp)] for i in range(len(chunk))]
                ldst_pieces(a, t, False, src, chunk, PTR[r])
                for i in range(len(chunk)):
                    a.fmla(t.vec(self.ROW_ACC[r][i]), t.vec(src[i]), t.vec(self.XV[i]))

    def lane_sum(self, a: Assembler, acc: int) -> None:
        """The lanes of v<acc> (y[r] among them) into its lane 0."""
        t = self.t
        if t.size == 4:
            a.faddp(t.vec(acc), t.vec(acc), t.vec(acc))
            a.faddp(t.scalar(acc), t.vec(acc, 2))
        else:
            a.faddp(t.scalar(acc), t.vec(acc))

    def x_copy(self, a: Assembler, br: int, k: int, at: int) -> None:
        """Strided x: ``k`` elements of each of ``br`` BR steps into the stack buffer at sp + ``at``;
        B and BR_B then name it."""
        sp_plus(a, YP, at)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PB, B_BR)
            neon_copy(a, self.t, PB, LDB, YP, k, True, CNT, "xcopy")
            if br > 1:
                a.add(B_BR, B_BR, BR_B)

        loop(a, BR_CNT, br, br_step, "copy_br")
        sp_plus(a, B, at)
        a.mov(BR_B, k * self.t.size)


# -- SVE --------------------------------------------------------------------------------
class SveGemv(Gemv):
    """SVE: one vector per load (no ldp), ``addvl`` steps, ``whilelt`` remainders.

    Column form, llvm-mca (LLVM 19), fp32 elements of A per cycle on neoverse-v2 (128-bit) /
    neoverse-v1 (256-bit) for COLS x ROW_VECTORS: 8 x 8 9.6 / 12.8, 8 x 4 9.6 / 12.8, 6 x 8
    9.0 / 12.0, 4 x 8 8.0 / 10.7; the loads are the bound (at 128 bits NEON's ldp stream, 10.1,
    stays ahead). ROW_VECTORS is at most 8, the reach of ``[xn, #imm, mul vl]``; 8 x 8 keeps twice
    8 x 4's chains in flight. Row form, DOT_ROWS x DOT_VECTORS, as above: 8 x 2 10.6 / 14.2, 8 x 3
    10.6 / 14.2, 6 x 2 10.2 / 13.6, 4 x 4 9.5 / 12.8 (loads again: DOT_ROWS + 1 per DOT_ROWS FMAs).
    The y and x copies use 64-bit vector offsets (lane i at i x stride bytes, any int64 stride),
    ``cntd`` elements a step."""

    ISA = "sve"
    MAX_SIZE = None  # no caps: the BRGEMM hands it any one column
    COLS = 8
    ROW_VECTORS = 8
    #: bytes of the longest SVE vector (2048 bits): pieces of K are whole K steps at every length
    MAX_VL_BYTES = 256
    X_PIECE_BYTES = Gemv.DOT_VECTORS * MAX_VL_BYTES

    def z(self, idx: int) -> Any:
        return self.t.z(idx)

    vreg = z

    def entry(self, a: Assembler) -> None:
        a.ptrue(getattr(P[0], self.t.es))

    def count_step(self, a: Assembler, vectors: int) -> None:
        getattr(a, "cnt" + self.t.suffix)(STEP, "all", vectors)

    def stack(self, a: Assembler, size: int, alloc: bool) -> None:  # through TMP
        a.mov(TMP, size)
        (a.sub if alloc else a.add)(sp, sp, TMP)

    def add_bytes(self, a: Assembler, rd: XReg, value: int) -> None:
        a.mov(TMP, value)
        a.add(rd, rd, TMP)

    def x_stride(self, a: Assembler) -> None:
        if self.trans_b:
            a.lsl(LDB, LDB, self.t.shift)

    # -- column form ---------------------------------------------------------------------
    def x_broadcasts(self, a: Assembler, cols: int) -> None:
        t = self.t
        for j in range(cols):
            if self.trans_b:
                t.ld1r(a, self.z(self.XS[j]), P[0].z, mem(PB))
                a.add(PB, PB, LDB)
            else:
                t.ld1r(a, self.z(self.XS[j]), P[0].z, mem(PB, j * t.size))
        if not self.trans_b:
            a.add(PB, PB, cols * t.size)

    def col_rows(self, a: Assembler, rows: int, cols: int) -> None:
        """Full steps of ROW_VECTORS vectors, then the rows left over vector by vector."""
        a.mov(YP, sp if self.trans_c else C)
        counted(a, self.t, CNT, STEP, rows, self.ROW_VECTORS, lambda: self.col_step(a, cols), "rows")
        remainder(a, self.t, CNT, rows, self.ROW_VECTORS, lambda v, pred: self.col_vector(a, cols, v, pred))

    def col_step(self, a: Assembler, cols: int) -> None:
        """ROW_VECTORS vectors of y at YP += ``cols`` columns at PTR x their broadcasts (the loop
        body; YP and the column pointers move on by the step)."""
        t, acc, rv = self.t, self.COL_ACC, self.ROW_VECTORS
        for u in range(rv):  # y
            t.ld1(a, self.z(acc[u]), P[0].z, mem(YP, vl=u))
        units = [(PTR[j], u, acc[u], self.XS[j]) for j in range(cols) for u in range(rv)]
        stream(a, t, units, self.COL_TMP, rv)  # columns of A x their x elements into y
        for u in range(rv):  # y back
            t.st1(a, self.z(acc[u]), P[0], mem(YP, vl=u))
        a.addvl(YP, YP, rv)

    def col_vector(self, a: Assembler, cols: int, v: int, pred: Any) -> None:
        """Vector v of the rows left over, under ``pred``: y, ``cols`` columns of A, y back."""
        t, acc, tmp = self.t, self.z(self.COL_ACC[v]), self.COL_TMP
        t.ld1(a, acc, pred.z, mem(YP, vl=v))
        for j in range(cols):
            src = self.z(tmp[(v * cols + j) % len(tmp)])
            t.ld1(a, src, pred.z, mem(PTR[j], vl=v))
            a.fmla(acc, pred.m, src, self.z(self.XS[j]))
        t.st1(a, acc, pred, mem(YP, vl=v))

    def y_in(self, a: Assembler, rows: int) -> None:
        if self.trans_c:
            sve_copy(a, self.t, C, LDC, sp, rows, True, COPY_REGS)

    def y_out(self, a: Assembler, rows: int) -> None:
        if self.trans_c:
            sve_copy(a, self.t, C, LDC, sp, rows, False, COPY_REGS)
            a.mov(TMP, rows)
            a.madd(C, TMP, LDC, C)
        else:
            self.add_bytes(a, C, rows * self.t.size)

    # -- row form ------------------------------------------------------------------------
    def acc_init(self, a: Assembler, rows: int) -> None:
        for r in range(rows):
            for v in range(self.DOT_VECTORS):
                a.dup(self.z(self.ROW_ACC[r][v]), 0)

    def k_walk(self, a: Assembler, rows: int, k: int) -> None:
        """One BR step's K: full steps, then the predicated remainder (inactive lanes keep their sums)."""
        counted(a, self.t, CNT, STEP, k, self.DOT_VECTORS, lambda: self.row_step(a, rows), "k")
        remainder(a, self.t, CNT, k, self.DOT_VECTORS, lambda v, pred: self.row_vector(a, rows, v, pred))

    def row_step(self, a: Assembler, rows: int) -> None:
        """DOT_VECTORS vectors of x at PB, and of each row at PTR: one FMA per row and vector (the
        loop body; PB and the row pointers move on by the step)."""
        t, dv = self.t, self.DOT_VECTORS
        for v in range(dv):  # x
            t.ld1(a, self.z(self.XV[v]), P[0].z, mem(PB, vl=v))
        a.addvl(PB, PB, dv)
        units = [(PTR[r], v, self.ROW_ACC[r][v], self.XV[v]) for r in range(rows) for v in range(dv)]
        stream(a, t, units, self.ROW_TMP, dv)  # rows of A x x into the accumulators

    def row_vector(self, a: Assembler, rows: int, v: int, pred: Any) -> None:
        """Vector v of the K elements left over, under ``pred``: x, then each row's FMA."""
        t, xv, tmp = self.t, self.z(self.XV[v]), self.ROW_TMP
        t.ld1(a, xv, pred.z, mem(PB, vl=v))
        for r in range(rows):
            src = self.z(tmp[(v * rows + r) % len(tmp)])
            t.ld1(a, src, pred.z, mem(PTR[r], vl=v))
            a.fmla(self.z(self.ROW_ACC[r][v]), pred.m, src, xv)

    def lane_sum(self, a: Assembler, acc: int) -> None:  # then + y[r], from YP
        t, y = self.t, self.ROW_TMP[0]
        a.faddv(t.scalar(acc), P[0], self.z(acc))
        a.ldr(t.scalar(y), mem(YP))  # faddv and ldr zero the other lanes: a 2-lane fadd
        a.fadd(t.vec(acc, 1), t.vec(acc, 1), t.vec(y, 1))

    def x_copy(self, a: Assembler, br: int, k: int, at: int) -> None:
        a.mov(B_BR, B)
        sp_plus(a, YP, at)

        def br_step() -> None:
            sve_copy(a, self.t, B_BR, LDB, YP, k, True, COPY_REGS)
            if br > 1:
                a.add(B_BR, B_BR, BR_B)
                self.add_bytes(a, YP, k * self.t.size)

        loop(a, BR_CNT, br, br_step, "copy_br")
        sp_plus(a, B, at)
        a.mov(BR_B, k * self.t.size)
