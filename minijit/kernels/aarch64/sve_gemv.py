"""SVE GEMV, vector-length agnostic: the BRGEMM of one column, ``c += sum_br A_br b_br``
(column-major, strides in elements).

``generate(m, k, br_size, ...)`` returns a Kernel with `sve_brgemm`'s signature for N = 1:
``void(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc, int64_t br_stride_a,
int64_t br_stride_b)``, with A M x K (``a[m + k*lda]``, or ``a[k + m*lda]`` with ``trans_a``), x
the K-vector ``b[k]`` (``b[k*ldb]`` with ``trans_b``; ``ldb`` is not read without it), y = ``c[m]``
(``ldc`` is not read; ``c[m*ldc]`` with ``trans_c``, a strided y) and ``A_br = a + br*br_stride_a``
(``b`` likewise). Every element of A is used once, so the kernel is a stream over A that must keep
every FMA pipe busy, which the BRGEMM's one-column block (at most 4 vectors of M, so 4 FMA chains)
and its gathered A vectors for ``trans_a`` do not. Sizes are elements; the pointer registers hold
bytes. The same bytes run at any vector length (128 ... 2048 bits): steps count their elements with
``cntw``/``cntd``, pointers move with ``addvl``, and every remainder is a ``whilelt`` predicate, so
no byte outside the operands is read or written.

Column form (``trans_a`` false; y += A x, the axpy order): y is walked in M blocks of
`M_BLOCK_BYTES` (which stay in L1 over all of K); for each block, each BR step and each group of
`COLS` columns of A, the group's x elements are broadcast once (``ld1rw``/``ld1rd``, any x
stride) and a pass down the block adds the ``COLS`` columns into `ROW_VECTORS` vectors of y at a
time (``COLS`` sequential streams of A, ``ROW_VECTORS`` FMA chains, y loaded and stored once per
group). Then the K remainder columns, one pass. The rows left over (fewer than ``ROW_VECTORS``
vectors, the last partial) run vector by vector under ``whilelt`` predicates.

Row form (``trans_a``; y[m] += dot(A row m, x), the dot order): `DOT_ROWS` rows at a time, each
with `DOT_VECTORS` vector accumulators, walk K (every BR step) together, loading each x vector
once for all rows; the K remainder runs vector by vector under ``whilelt`` predicates (inactive
lanes keep their sums). Each row's accumulators are then summed (``fadd``, ``faddv``), added to
y[m] and stored. The x vectors must be contiguous: with ``trans_b`` (a strided x) the kernel first
copies x, every BR step's K elements, into a stack buffer (at most `X_COPY_MAX_BYTES`), read by
every row group. A longer x runs in chunks (`x_chunks`: whole BR steps, or one step's K in pieces
that are whole K steps at every length up to 2048 bits, so only the last piece has a ``whilelt``
remainder, at any length): each chunk is copied, then every row group adds its part of the dot
products into y (`common.gemv_row_passes` keeps A, x and y at the chunk on the stack).

Strided y (``trans_c``): the row form stores each y[m] at its stride; the column form copies each
M block of y into a stack buffer (`M_BLOCK_BYTES`), runs its passes there and copies it back.
The passes load and store y once per ``COLS`` columns of every BR step, so gathers and scatters of
y there would sit in the stream of A (LLVM 19's Neoverse V1/V2 models: 2-5 micro-ops per 32-bit
gather, 4-8 per scatter, 1 per contiguous ``ld1w``/``st1w``; the step has 80 loads and stores),
where the buffer costs one gather and one scatter per vector of y for the whole of K. The copies
(y, and x for the row form) use ``ld1w``/``ld1d``/``st1w``/``st1d`` with 64-bit vector offsets
(lane i at i x stride bytes, so any int64 stride) and contiguous stores or loads, ``cntd``
elements a step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from asm.aarch64 import Assembler, P, X, Z, mem, sp
from asm.aarch64.registers import XReg
from minijit.kernels.aarch64.common import (
    GEMV_X_SLOTS,
    DType,
    brgemm_signature,
    check_bools,
    check_positive,
    dtype_info,
    epilogue,
    gemv_row_passes,
    gemv_x_chunks,
    generator,
    prologue,
)

__all__ = [
    "COLS",
    "DOT_ROWS",
    "DOT_VECTORS",
    "M_BLOCK_BYTES",
    "ROW_VECTORS",
    "X_COPY_MAX_BYTES",
    "generate",
    "program",
    "signature",
    "x_chunks",
]

# -- blocking decisions -----------------------------------------------------------
#: column form: bytes of y per M block (it stays in L1 while every column of A streams past it)
M_BLOCK_BYTES = 16 * 1024
#: row form with a strided x (``trans_b``): the largest stack buffer x is copied into (bytes); a
#: longer x (every BR step's K elements) runs in chunks (`x_chunks`)
X_COPY_MAX_BYTES = 64 * 1024
#: bytes of the longest SVE vector (2048 bits): pieces of K are whole K steps at every length
MAX_VL_BYTES = 256
#: column form: columns of A per pass over the block (COLS sequential streams, COLS x broadcasts)
#: and vectors of y per step (ROW_VECTORS chains, each COLS FMAs deep; at most 8, the reach of
#: ``[xn, #imm, mul vl]``). llvm-mca (LLVM 19), fp32 elements of A per cycle on neoverse-v2 (128-bit
#: vectors) / neoverse-v1 (256-bit): 8 x 8 9.6 / 12.8, 8 x 4 9.6 / 12.8, 6 x 8 9.0 / 12.0, 4 x 8
#: 8.0 / 10.7. The loads are the bound (one per element of A, y loaded and stored once per COLS
#: columns; SVE has no ldp, so at 128 bits NEON's ldp stream, 10.1, stays ahead); more columns need
#: more pointer and x registers than are left. 8 x 8 keeps twice 8 x 4's chains in flight.
COLS = 8
ROW_VECTORS = 8
#: row form: rows per group and vector accumulators per row (DOT_ROWS x DOT_VECTORS chains), each x
#: vector feeding DOT_ROWS FMAs. llvm-mca as above: 8 x 2 10.6 / 14.2, 8 x 3 10.6 / 14.2, 6 x 2
#: 10.2 / 13.6, 4 x 4 9.5 / 12.8 (loads again: DOT_ROWS + 1 per DOT_ROWS FMAs)
DOT_ROWS = 8
DOT_VECTORS = 2

# -- registers ----------------------------------------------------------------------
A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes; LDB / LDC: x / y steps)
BLK_CNT, BR_CNT, GRP_CNT, CNT = X[8:12]  # loops: M blocks (x chunks), BR steps, column / row groups, rows / K left
A_BR, B_BR, PA, PB, IDX, YP = X[12:18]  # A, x at the BR step; A, x at the group; copy index (chunk scratch), walking y
PTR = tuple(X[19:27])  # column (column form) or row (row form) pointers of A
TMP, STEP = X[27], X[28]  # scratch; elements per full step (cntw/cntd x vectors)
XZR = XReg(31)  # whilelt from 0
# vector registers: column form
XS = tuple(range(COLS))  # x broadcasts
COL_ACC = tuple(range(32 - ROW_VECTORS, 32))  # y
COL_TMP = tuple(range(COLS, 32 - ROW_VECTORS))  # A loads (round robin)
# vector registers: row form
XV = tuple(range(DOT_VECTORS))  # x vectors
ROW_ACC = tuple(
    tuple(range(32 - (DOT_ROWS - r) * DOT_VECTORS, 32 - (DOT_ROWS - r - 1) * DOT_VECTORS)) for r in range(DOT_ROWS)
)
ROW_TMP = tuple(range(DOT_VECTORS, 32 - DOT_ROWS * DOT_VECTORS))  # A loads (round robin)
TAIL_P = tuple(P[1:8])  # remainder predicates (rotating; loads and stores take p0..p7)
assert ROW_VECTORS <= 8 and len(COL_TMP) >= 2 and COLS <= len(PTR)
assert DOT_VECTORS <= 8 and len(ROW_TMP) >= 2 and DOT_ROWS <= len(PTR)

signature = brgemm_signature


def x_chunks(k: int, br: int, es: int) -> tuple[int, int]:
    """Row form with a strided x: the (BR steps, K elements) of x copied into the stack buffer at
    a time (``es``-byte elements; `common.gemv_x_chunks` at `X_COPY_MAX_BYTES`): all of x when it
    fits, else whole BR steps per chunk, else one step's K in pieces of whole K steps (DOT_VECTORS
    vectors) at the longest vector length (`MAX_VL_BYTES`), so at every length."""
    return gemv_x_chunks(k, br, es, X_COPY_MAX_BYTES, DOT_VECTORS * MAX_VL_BYTES)


# -- small emitters --------------------------------------------------------------------
def _repeat(a: Assembler, cnt: XReg, count: int, body: Callable[[], None], name: str) -> None:
    """``body`` ``count`` times: once inline, or a loop counting ``cnt`` down from ``count``."""
    if count <= 1:
        if count:
            body()
        return
    a.mov(cnt, count)
    top = a.label(name)
    body()
    a.subs(cnt, cnt, 1)
    a.b_ne(top)


def _sp_move(a: Assembler, size: int, alloc: bool) -> None:
    """sp -= size (``alloc``) or += size, through TMP; ``size`` a multiple of 16."""
    a.mov(TMP, size)
    (a.sub if alloc else a.add)(sp, sp, TMP)


def _sp_plus(a: Assembler, rd: XReg, offset: int) -> None:
    """rd = sp + ``offset`` (a 12-bit immediate)."""
    if offset:
        a.add(rd, sp, offset)
    else:
        a.mov(rd, sp)


@dataclass
class _Gemv:
    """Emits one GEMV kernel; the form's loops are methods."""

    t: DType
    m: int
    k: int
    br: int
    trans_a: bool
    trans_b: bool
    trans_c: bool

    def z(self, idx: int):
        return self.t.z(idx)

    def p(self, idx: int):
        return getattr(P[idx], self.t.es)

    def stream(self, a: Assembler, units: list[tuple], pool: tuple[int, ...], advance: int) -> None:
        """Loads of A and their FMAs, software pipelined. A unit ``(pointer, v, acc, mul)`` is the
        load of vector v at ``pointer`` and ``acc += it x mul``; a pointer moves on by ``advance``
        vectors after its last load. Loads run ``len(pool) - 1`` units ahead of their FMAs, unit i
        in ``pool[i % len(pool)]``."""
        t, ahead = self.t, len(pool) - 1
        last = {u[0].idx: i for i, u in enumerate(units)}
        for i in range(len(units) + ahead):
            if i < len(units):
                ptr, v = units[i][:2]
                t.ld1(a, self.z(pool[i % len(pool)]), P[0].z, mem(ptr, vl=v))
                if last[ptr.idx] == i:
                    a.addvl(ptr, ptr, advance)
            j = i - ahead
            if j >= 0:
                _, _, acc, mul = units[j]
                a.fmla(self.z(acc), P[0].m, self.z(pool[j % len(pool)]), self.z(mul))

    def counted(self, a: Assembler, count: int, vectors: int, step: Callable[[], None], name: str) -> None:
        """CNT = ``count`` elements; full steps of ``vectors`` vectors (STEP elements) while they
        fit (a loop labelled ``name``, emitted when one fits at 128 bits), then CNT = what is left."""
        a.mov(CNT, count)
        if count < vectors * self.t.lanes:
            return
        rest = a.new_label(name + "_rest")
        a.subs(CNT, CNT, STEP)
        a.b_lt(rest)
        top = a.label(name)
        step()
        a.subs(CNT, CNT, STEP)
        a.b_ge(top)
        a.bind(rest)
        a.add(CNT, CNT, STEP)

    def remainder(self, a: Assembler, count: int, vectors: int, body: Callable[[int, object], None]) -> None:
        """The CNT elements left (fewer than ``vectors`` vectors): ``body(v, pred)`` for vector v
        under ``whilelt`` (CNT counts down by the vector length), ending at the first empty one."""
        t = self.t
        done = a.new_label("rem_done")
        used = min(vectors, -(-count // t.lanes))  # at 128 bits ``count`` fills at most this many
        for v in range(used):
            pred = TAIL_P[v % len(TAIL_P)]
            a.whilelt(getattr(pred, t.es), XZR, CNT)
            a.b_none(done)
            body(v, pred)
            if v + 1 < used:
                getattr(a, "dec" + t.suffix)(CNT)
        a.bind(done)

    def strided_copy(self, a: Assembler, strided: XReg, stride: XReg, buf: XReg, count: int, gather: bool) -> None:
        """``count`` elements between ``strided`` (``stride`` bytes apart) and the contiguous
        ``buf``: into ``buf`` (``gather``) or back. 64-bit lanes (ld1w/st1w widen fp32 to them), a
        vector offset of lane x stride; uses z0, z1, p1, PA, PB, IDX, GRP_CNT."""
        t = self.t
        data, offs, pred = Z[0].d, Z[1].d, P[1]
        a.index(offs, 0, stride)
        a.cntd(PB)
        a.mul(PB, PB, stride)  # bytes per step of the strided run
        a.mov(PA, strided)
        a.mov(IDX, 0)
        a.mov(GRP_CNT, count)
        done = a.new_label("copy_done")
        top = a.label("copy")
        a.whilelt(pred.d, IDX, GRP_CNT)
        a.b_none(done)
        near = mem(buf, IDX, "lsl", t.shift)
        if gather:
            t.ld1(a, data, pred.z, mem(PA, offs))
            t.st1(a, data, pred, near)
        else:
            t.ld1(a, data, pred.z, near)
            t.st1(a, data, pred, mem(PA, offs))
        a.add(PA, PA, PB)
        a.incd(IDX)
        a.b(top)
        a.bind(done)

    # -- column form: y += A x, COLS columns per pass over an L1 block of y --------------
    def col_step(self, a: Assembler, cols: int) -> None:
        """ROW_VECTORS vectors of y at YP += ``cols`` columns at PTR x their broadcasts (the loop
        body; YP and the column pointers move on by the step)."""
        for u in range(ROW_VECTORS):  # y
            self.t.ld1(a, self.z(COL_ACC[u]), P[0].z, mem(YP, vl=u))
        units = [(PTR[j], u, COL_ACC[u], XS[j]) for j in range(cols) for u in range(ROW_VECTORS)]
        self.stream(a, units, COL_TMP, ROW_VECTORS)  # columns of A x their x elements into y
        for u in range(ROW_VECTORS):  # y back
            self.t.st1(a, self.z(COL_ACC[u]), P[0], mem(YP, vl=u))
        a.addvl(YP, YP, ROW_VECTORS)

    def col_vector(self, a: Assembler, cols: int, v: int, pred) -> None:
        """Vector v of the rows left over, under ``pred``: y, ``cols`` columns of A, y back."""
        t, acc = self.t, self.z(COL_ACC[v])
        t.ld1(a, acc, pred.z, mem(YP, vl=v))
        for j in range(cols):
            src = self.z(COL_TMP[(v * cols + j) % len(COL_TMP)])
            t.ld1(a, src, pred.z, mem(PTR[j], vl=v))
            a.fmla(acc, pred.m, src, self.z(XS[j]))
        t.st1(a, acc, pred, mem(YP, vl=v))

    def col_pass(self, a: Assembler, rows: int, cols: int) -> None:
        """Broadcast x[k .. k+cols) (PB on by ``cols`` steps), one pass down the ``rows`` rows of y
        (the caller's or the stack buffer), PA on by ``cols`` columns."""
        t = self.t
        for j in range(cols):  # x broadcasts
            if self.trans_b:
                t.ld1r(a, self.z(XS[j]), P[0].z, mem(PB))
                a.add(PB, PB, LDB)
            else:
                t.ld1r(a, self.z(XS[j]), P[0].z, mem(PB, j * t.size))
        if not self.trans_b:
            a.add(PB, PB, cols * t.size)
        a.mov(PTR[0], PA)  # column pointers, PA to the next group
        for j in range(1, cols):
            a.add(PTR[j], PTR[j - 1], LDA)
        a.add(PA, PTR[cols - 1], LDA)
        a.mov(YP, sp if self.trans_c else C)
        self.counted(a, rows, ROW_VECTORS, lambda: self.col_step(a, cols), "rows")
        self.remainder(a, rows, ROW_VECTORS, lambda v, pred: self.col_vector(a, cols, v, pred))

    def col_block(self, a: Assembler, rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y; A (and C) move on."""
        t, k = self.t, self.k
        if self.trans_c:  # strided y: the block runs in the stack buffer
            self.strided_copy(a, C, LDC, sp, rows, gather=True)
        a.mov(A_BR, A)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PA, A_BR)
            a.mov(PB, B_BR)
            _repeat(a, GRP_CNT, k // COLS, lambda: self.col_pass(a, rows, COLS), "cols")
            if k % COLS:
                self.col_pass(a, rows, k % COLS)
            if self.br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        _repeat(a, BR_CNT, self.br, br_step, "br")
        a.mov(TMP, rows * t.size)
        a.add(A, A, TMP)
        if self.trans_c:
            self.strided_copy(a, C, LDC, sp, rows, gather=False)
            a.mov(TMP, rows)
            a.madd(C, TMP, LDC, C)
        else:
            a.mov(TMP, rows * t.size)
            a.add(C, C, TMP)

    def columns(self, a: Assembler) -> None:
        t = self.t
        block_rows = M_BLOCK_BYTES // t.size
        buf = -(-min(self.m, block_rows) * t.size // 16) * 16
        a.lsl(LDA, LDA, t.shift)
        if self.trans_b:
            a.lsl(LDB, LDB, t.shift)
        if self.trans_c:
            a.lsl(LDC, LDC, t.shift)
            _sp_move(a, buf, alloc=True)
        if self.br > 1:
            a.lsl(BR_A, BR_A, t.shift)
            a.lsl(BR_B, BR_B, t.shift)
        getattr(a, "cnt" + t.suffix)(STEP, "all", ROW_VECTORS)
        full, rest = divmod(self.m, block_rows)
        _repeat(a, BLK_CNT, full, lambda: self.col_block(a, block_rows), "m_blocks")
        if rest:
            self.col_block(a, rest)
        if self.trans_c:
            _sp_move(a, buf, alloc=False)

    # -- row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time ---------------------
    def row_step(self, a: Assembler, rows: int) -> None:
        """DOT_VECTORS vectors of x at PB, and of each row at PTR: one FMA per row and vector (the
        loop body; PB and the row pointers move on by the step)."""
        for v in range(DOT_VECTORS):  # x
            self.t.ld1(a, self.z(XV[v]), P[0].z, mem(PB, vl=v))
        a.addvl(PB, PB, DOT_VECTORS)
        units = [(PTR[r], v, ROW_ACC[r][v], XV[v]) for r in range(rows) for v in range(DOT_VECTORS)]
        self.stream(a, units, ROW_TMP, DOT_VECTORS)  # rows of A x x into the accumulators

    def row_vector(self, a: Assembler, rows: int, v: int, pred) -> None:
        """Vector v of the K elements left over, under ``pred``: x, then each row's FMA."""
        t, xv = self.t, self.z(XV[v])
        t.ld1(a, xv, pred.z, mem(PB, vl=v))
        for r in range(rows):
            src = self.z(ROW_TMP[(v * rows + r) % len(ROW_TMP)])
            t.ld1(a, src, pred.z, mem(PTR[r], vl=v))
            a.fmla(self.z(ROW_ACC[r][v]), pred.m, src, xv)

    def row_group(self, a: Assembler, rows: int, br: int, k: int) -> None:
        """``rows`` rows of A (``br`` BR steps of ``k`` elements) into ``rows`` elements of y; A and
        C move on."""
        t = self.t
        for r in range(rows):
            for v in range(DOT_VECTORS):
                a.dup(self.z(ROW_ACC[r][v]), 0)
        a.mov(A_BR, A)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PTR[0], A_BR)  # row pointers
            for r in range(1, rows):
                a.add(PTR[r], PTR[r - 1], LDA)
            a.mov(PB, B_BR)
            self.counted(a, k, DOT_VECTORS, lambda: self.row_step(a, rows), "k")
            self.remainder(a, k, DOT_VECTORS, lambda v, pred: self.row_vector(a, rows, v, pred))
            if br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        _repeat(a, BR_CNT, br, br_step, "br")
        a.mov(YP, C)  # sum each row's lanes into y[r]
        y = ROW_TMP[0]
        for r in range(rows):
            acc = ROW_ACC[r]
            width = DOT_VECTORS
            while width > 1:  # pairwise vector sums
                width //= 2
                for v in range(width):
                    a.fadd(self.z(acc[v]), self.z(acc[v]), self.z(acc[v + width]))
            a.faddv(t.scalar(acc[0]), P[0], self.z(acc[0]))
            a.ldr(t.scalar(y), mem(YP))  # faddv and ldr zero the other lanes: a 2-lane fadd
            a.fadd(t.vec(acc[0], 1), t.vec(acc[0], 1), t.vec(y, 1))
            a.str(t.scalar(acc[0]), mem(YP))
            if r + 1 < rows:
                a.add(YP, YP, LDC)
        a.mov(TMP, rows)
        a.madd(A, TMP, LDA, A)
        a.madd(C, TMP, LDC, C)

    def row_groups(self, a: Assembler, br: int, k: int) -> None:
        """Every row group over ``br`` BR steps of ``k`` elements of K; A and C move on past the rows."""
        getattr(a, "cnt" + self.t.suffix)(STEP, "all", DOT_VECTORS)
        _repeat(a, GRP_CNT, self.m // DOT_ROWS, lambda: self.row_group(a, DOT_ROWS, br, k), "row_groups")
        if self.m % DOT_ROWS:
            self.row_group(a, self.m % DOT_ROWS, br, k)

    def x_copy(self, a: Assembler, br: int, k: int, at: int) -> None:
        """Strided x: ``k`` elements of each of ``br`` BR steps into the stack buffer at sp + ``at``;
        B and BR_B then name it."""
        a.mov(B_BR, B)
        _sp_plus(a, YP, at)

        def br_step() -> None:
            self.strided_copy(a, B_BR, LDB, YP, k, gather=True)
            if br > 1:
                a.add(B_BR, B_BR, BR_B)
                a.mov(TMP, k * self.t.size)
                a.add(YP, YP, TMP)

        _repeat(a, BR_CNT, br, br_step, "copy_br")
        _sp_plus(a, B, at)
        a.mov(BR_B, k * self.t.size)

    def rows(self, a: Assembler) -> None:
        t = self.t
        bc, kc = x_chunks(self.k, self.br, t.size) if self.trans_b else (self.br, self.k)
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
            _sp_move(a, buf, alloc=True)

        copy = partial(self.x_copy, a, at=at) if self.trans_b else None  # a strided x into the buffer
        gemv_row_passes(a, self.k, self.br, t.size, (bc, kc), copy, partial(self.row_groups, a), BLK_CNT, (TMP, IDX))
        if self.trans_b:
            _sp_move(a, buf, alloc=False)

    def emit(self) -> Assembler:
        """The whole kernel: prologue, the form, epilogue."""
        a = Assembler(name="sve_gemv")
        xregs = [r.idx for r in (*PTR, TMP, STEP)]
        frame = prologue(a, xregs, range(32))
        a.ptrue(self.p(0))
        (self.rows if self.trans_a else self.columns)(a)
        epilogue(a, frame)
        return a


def program(
    m: int,
    k: int,
    br_size: int = 1,
    trans_a: bool = False,
    trans_b: bool = False,
    trans_c: bool = False,
    dtype: str = "fp32",
) -> tuple[Assembler, str]:
    """The kernel's `Assembler` and the listing of its innermost loop body: one step of the rows
    loop (column form: ROW_VECTORS vectors of y x COLS columns) or of the K loop (row form:
    DOT_ROWS rows x DOT_VECTORS vectors)."""
    check_positive(None, m=m, k=k, br_size=br_size)  # no caps: sve_brgemm hands it any one column
    t = dtype_info(dtype)
    check_bools(trans_a=trans_a, trans_b=trans_b, trans_c=trans_c)
    kern = _Gemv(t, m, k, br_size, trans_a, trans_b, trans_c)
    a = kern.emit()
    body = Assembler(name="kloop")
    if trans_a:
        kern.row_step(body, DOT_ROWS)
    else:
        kern.col_step(body, COLS)
    return a, body.listing()


def _name(m: int, k: int, br_size: int, dtype: str, **kw: bool) -> str:
    flags = "".join(f"_{f[0]}{f[-1]}" for f in ("trans_a", "trans_b", "trans_c") if kw.get(f))
    return f"sve_gemv_{m}x{k}_br{br_size}_{dtype}{flags}"


generate = generator(
    program, signature, "JIT a GEMV kernel (see the module docstring); emulated at SVE length ``sve_vl`` bits.", _name
)
