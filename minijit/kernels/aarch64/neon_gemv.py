"""NEON GEMV: the BRGEMM of one column, ``c += sum_br A_br b_br`` (column-major, strides in elements).

``generate(m, k, br_size, ...)`` returns a Kernel with `neon_brgemm`'s signature for N = 1:
``void(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc, int64_t br_stride_a,
int64_t br_stride_b)``, with A M x K (``a[m + k*lda]``, or ``a[k + m*lda]`` with ``trans_a``), x
the K-vector ``b[k]`` (``b[k*ldb]`` with ``trans_b``; ``ldb`` is not read without it), y = ``c[m]``
(``ldc`` is not read; ``c[m*ldc]`` with ``trans_c``, a strided y) and ``A_br = a + br*br_stride_a``
(``b`` likewise). Every element of A is used once, so the kernel is a stream over A that must keep
every q register lane busy, which the BRGEMM's 16 x 1 register block (4 FMA chains) and its 4 x 4
tile transposes for ``trans_a`` do not. Sizes are elements; the pointer registers hold bytes.

Column form (``trans_a`` false; y += A x, the axpy order): y is walked in M blocks of
`M_BLOCK_BYTES` (which stay in L1 over all of K); for each block, each BR step and each group of
`COLS` columns of A, the group's x elements are broadcast once (``ld1r``, post-incremented by x's
stride, so any stride works) and a pass down the block adds the ``COLS`` columns into
`ROW_VECTORS` q registers of y at a time (``COLS`` sequential streams of A, y loaded and stored
once per group). Then the K remainder columns, one pass. Rows left over (M % (ROW_VECTORS x
lanes)) run as q/d/s pieces (`pieces.split`), so nothing outside the operands is touched.

Row form (``trans_a``; y[m] += dot(A row m, x), the dot order): `DOT_ROWS` rows at a time, each
with `DOT_VECTORS` q accumulators, walk K (every BR step) together, loading each x vector once
for all rows. The K remainder is full q registers, then d/s pieces (scalar loads zero the upper
lanes, so full-width ``fmla`` adds 0 there). y[m] starts in lane 0 of the row's first
accumulator; each row's accumulators are then summed (``fadd``, ``faddp``) and stored. The x
vectors must be contiguous: with ``trans_b`` (a strided x) the kernel first copies x, every BR
step's K elements, into a stack buffer (at most `X_COPY_MAX_BYTES`), read by every row group. A
longer x runs in chunks (`x_chunks`: whole BR steps, or one step's K in pieces of whole K steps, so
only the last piece has the d/s tail): each chunk is copied, then every row group adds its part
of the dot products into y (`common.gemv_row_passes` keeps A, x and y at the chunk on the stack).

Strided y (``trans_c``): the row form stores each y[m] at its stride; the column form copies each
M block of y into a stack buffer (`M_BLOCK_BYTES`), runs its passes there and copies it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from asm.aarch64 import Assembler, X, mem, post, sp
from asm.aarch64.registers import ScalarReg, VecReg, VElem, XReg
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
from minijit.kernels.aarch64.pieces import Piece, ldst_pieces, split

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
MAX_BR_SIZE = 1 << 20
#: column form: bytes of y per M block (it stays in L1 while every column of A streams past it)
M_BLOCK_BYTES = 16 * 1024
#: row form with a strided x (``trans_b``): the largest stack buffer x is copied into (bytes); a
#: longer x (every BR step's K elements) runs in chunks (`x_chunks`)
X_COPY_MAX_BYTES = 64 * 1024
#: column form: columns of A per pass over the block (COLS sequential streams, COLS x elements)
#: and q registers of y per step (ROW_VECTORS chains, each COLS FMAs deep). llvm-mca (LLVM 19),
#: fp32 elements of A per cycle on neoverse-v2 / -v1 / apple-m4: 8 x 12 10.1 / 9.7 / 9.4,
#: 8 x 8 9.6 / 6.6 / 9.1 (chains too few to hide the FMA latency on v1), 6 x 12 9.6 / 9.2 / 9.0,
#: 4 x 16 8.7 / 8.6 / 8.5 (y's round trips); the ldp loads of A and y are the bound. The FMAs take
#: x by element (as neon_brgemm's): LLVM's apple-m4 (Cyclone) model issues the vector form on 2
#: units, the by-element form on 3 (6.6 elements per cycle instead of 9.4); Neoverse: the same
COLS = 8
ROW_VECTORS = 12
#: row form: rows per group and q accumulators per row (DOT_ROWS x DOT_VECTORS chains), each x
#: vector feeding DOT_ROWS FMAs. llvm-mca as above: 8 x 2 10.6 / 10.6 / 7.9, 4 x 4 9.5 / 9.5 / 7.9,
#: 6 x 4 10.2 / 10.2 / 7.4 (8 rows is what the row pointers allow)
DOT_ROWS = 8
DOT_VECTORS = 2

# -- registers ----------------------------------------------------------------------
A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes; LDB / LDC: x / y steps)
BLK_CNT, BR_CNT, GRP_CNT, CNT = X[8:12]  # loops: M blocks (x chunks), BR steps, column / row groups, rows / K steps
A_BR, B_BR, PA, PB, YB, YP = X[12:18]  # A, x at the BR step; A, x at the group; y block (chunk scratch), walking y
PTR = tuple(X[19:27])  # column (column form) or row (row form) pointers of A
TMP, YS = X[27], X[28]  # scratch; the caller's walking y (strided y copies)
# vector registers: column form
XS = tuple(range(COLS))  # x broadcasts
COL_ACC = tuple(range(32 - ROW_VECTORS, 32))  # y
COL_TMP = tuple(range(COLS, 32 - ROW_VECTORS))  # A loads (pairs, round robin)
# vector registers: row form
XV = tuple(range(DOT_VECTORS))  # x vectors
ROW_ACC = tuple(
    tuple(range(32 - (DOT_ROWS - r) * DOT_VECTORS, 32 - (DOT_ROWS - r - 1) * DOT_VECTORS)) for r in range(DOT_ROWS)
)
ROW_TMP = tuple(range(DOT_VECTORS, 32 - DOT_ROWS * DOT_VECTORS))  # A loads (pairs, round robin)
assert ROW_VECTORS % 2 == 0 and len(COL_TMP) >= 4 and len(COL_TMP) % 2 == 0 and COLS <= len(PTR)
assert (
    DOT_VECTORS in (2, 4, 8) and len(ROW_TMP) >= max(4, DOT_VECTORS) and len(ROW_TMP) % 2 == 0 and DOT_ROWS <= len(PTR)
)

signature = brgemm_signature


def x_chunks(k: int, br: int, es: int) -> tuple[int, int]:
    """Row form with a strided x: the (BR steps, K elements) of x copied into the stack buffer at
    a time (``es``-byte elements; `common.gemv_x_chunks` at `X_COPY_MAX_BYTES`): all of x when it
    fits, else whole BR steps per chunk, else one step's K in pieces of whole K steps (DOT_VECTORS
    q registers)."""
    return gemv_x_chunks(k, br, es, X_COPY_MAX_BYTES, 16 * DOT_VECTORS)


# -- small emitters --------------------------------------------------------------------
def _q(idx: int) -> ScalarReg:
    return ScalarReg(idx, "q")


def _loop(a: Assembler, cnt: XReg, count: int, body: Callable[[], None], name: str) -> None:
    """``body`` ``count`` times: inline for 0 or 1, else a loop counting ``cnt`` down."""
    if count == 1:
        body()
    elif count > 1:
        a.mov(cnt, count)
        top = a.label(name)
        body()
        a.subs(cnt, cnt, 1)
        a.b_ne(top)


def _add_const(a: Assembler, rd: XReg, rn: XReg, value: int) -> None:
    """rd = rn + value (bytes, >= 0): an immediate (or one shifted by 12), else through TMP."""
    if value < 4096:
        a.add(rd, rn, value)
    elif value % 4096 == 0 and value >> 12 < 4096:
        a.add(rd, rn, value >> 12, "lsl", 12)
    else:
        a.mov(TMP, value)
        a.add(rd, rn, TMP)


def _stack(a: Assembler, size: int, alloc: bool) -> None:
    """sp -= size (``alloc``) or += size; ``size`` a multiple of 16 below 16 MiB."""
    op = a.sub if alloc else a.add
    if size >> 12:
        op(sp, sp, size >> 12, "lsl", 12)
    if size & 0xFFF:
        op(sp, sp, size & 0xFFF)


def _sp_plus(a: Assembler, rd: XReg, offset: int) -> None:
    """rd = sp + ``offset`` (a 12-bit immediate)."""
    if offset:
        a.add(rd, sp, offset)
    else:
        a.mov(rd, sp)


def _pair_loads(a: Assembler, regs: tuple[int, ...], base: XReg, span: int) -> list[Callable[[], None]]:
    """ldp of ``regs`` (q, consecutive 16-byte slots) from ``base``, the first post-incrementing
    it by ``span`` bytes and the others at negative offsets from there."""
    return [
        partial(a.ldp, _q(regs[u]), _q(regs[u + 1]), post(base, span) if u == 0 else mem(base, 16 * u - span))
        for u in range(0, len(regs), 2)
    ]


def _stream(a: Assembler, t: DType, units: list[tuple], pool: tuple[int, ...], span: int) -> None:
    """Loads of A and their FMAs, software pipelined. A unit ``(pointer, u, accs, muls)`` is one
    ldp of the q slots u, u + 1 of a ``span``-byte step at ``pointer`` (a pointer's unit 0
    post-increments it by ``span``) and the FMAs ``accs[h] += slot h x muls[h]`` (vector or element operands). Loads run
    ``len(pool) // 2 - 1`` units ahead of their FMAs, unit i in pair i of ``pool`` (round robin)."""
    slots = len(pool) // 2
    ahead = slots - 1
    for i in range(len(units) + ahead):
        if i < len(units):  # the load of unit i
            ptr, u, _, _ = units[i]
            r0, r1 = pool[2 * (i % slots)], pool[2 * (i % slots) + 1]
            a.ldp(_q(r0), _q(r1), post(ptr, span) if u == 0 else mem(ptr, 16 * u - span))
        j = i - ahead
        if j >= 0:  # the FMAs of unit i - ahead
            _, _, accs, muls = units[j]
            for h in range(2):
                a.fmla(t.vec(accs[h]), t.vec(pool[2 * (j % slots) + h]), muls[h])


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

    def _fma(self, a: Assembler, acc: int, src: int, width: int, x: int) -> None:
        """acc += src * x on ``width`` lanes (x broadcast; one lane: the scalar by-element form)."""
        t = self.t
        if width == 1:
            a.fmla(t.scalar(acc), t.scalar(src), VElem(x, t.es, 0))
        else:
            a.fmla(t.vec(acc, width), t.vec(src, width), t.vec(x, width))

    # -- column form: y += A x, COLS columns per pass over an L1 block of y --------------
    def col_step(self, a: Assembler, cols: int) -> None:
        """ROW_VECTORS q registers of y at YP += ``cols`` columns at PTR x their broadcasts
        (the loop body; YP and the column pointers move on by the step)."""
        t, span = self.t, 16 * ROW_VECTORS
        for u in range(0, ROW_VECTORS, 2):  # y
            a.ldp(_q(COL_ACC[u]), _q(COL_ACC[u + 1]), mem(YP, 16 * u))
        x = [VElem(XS[j], t.es, 0) for j in range(cols)]  # by element: fmla's form in neon_brgemm
        units = [(PTR[j], u, COL_ACC[u : u + 2], (x[j], x[j])) for j in range(cols) for u in range(0, ROW_VECTORS, 2)]
        _stream(a, t, units, COL_TMP, span)  # columns of A x their x elements into y
        for u in range(0, ROW_VECTORS, 2):  # y back
            addr = post(YP, span) if u == 0 else mem(YP, 16 * u - span)
            a.stp(_q(COL_ACC[u]), _q(COL_ACC[u + 1]), addr)

    def col_pieces(self, a: Assembler, cols: int, pieces: list[Piece]) -> None:
        """The rows left over: ``pieces`` (q/d/s, offsets from YP and the column pointers)."""
        acc, src = list(COL_ACC[: len(pieces)]), list(COL_TMP[: len(pieces)])
        ldst_pieces(a, self.t, False, acc, pieces, YP)
        for j in range(cols):
            ldst_pieces(a, self.t, False, src, pieces, PTR[j])
            for i, p in enumerate(pieces):
                self._fma(a, acc[i], src[i], p.width, XS[j])
        ldst_pieces(a, self.t, True, acc, pieces, YP)

    def col_pass(self, a: Assembler, rows: int, cols: int) -> None:
        """Broadcast x[k .. k+cols) (PB on by ``cols`` steps), one pass down the ``rows`` rows of y
        at YB, PA on by ``cols`` columns."""
        t = self.t
        for j in range(cols):  # x broadcasts
            a.ld1r(t.vec(XS[j]), post(PB, LDB))
        a.mov(PTR[0], PA)  # column pointers, PA to the next group
        for j in range(1, cols):
            a.add(PTR[j], PTR[j - 1], LDA)
        a.add(PA, PTR[cols - 1], LDA)
        a.mov(YP, YB)
        steps, left = divmod(rows, ROW_VECTORS * t.lanes)
        _loop(a, CNT, steps, lambda: self.col_step(a, cols), "rows")  # full steps
        for pieces in split(left, t.lanes, min(ROW_VECTORS, len(COL_TMP))):  # the rest, in pieces
            self.col_pieces(a, cols, pieces)

    def y_copy(self, a: Assembler, rows: int, gather: bool) -> None:
        """Strided y: the block's ``rows`` elements from the caller's y (C) into the stack buffer,
        or back (then C moves on by ``rows`` strides)."""
        t = self.t
        a.mov(YS, C)
        a.mov(YP, sp)

        def one(r: int) -> None:
            reg = t.scalar(r)
            if gather:
                a.ldr(reg, mem(YS))
                a.str(reg, post(YP, t.size))
            else:
                a.ldr(reg, post(YP, t.size))
                a.str(reg, mem(YS))
            a.add(YS, YS, LDC)

        _loop(a, CNT, rows // 4, lambda: [one(r) for r in range(4)], "ycopy")  # 4 per iteration
        for r in range(rows % 4):
            one(r)
        if not gather:
            a.mov(C, YS)

    def col_block(self, a: Assembler, rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y; A (and C) move on."""
        t, k = self.t, self.k
        if self.trans_c:  # strided y: the block runs in the stack buffer
            self.y_copy(a, rows, gather=True)
            a.mov(YB, sp)
        else:
            a.mov(YB, C)
        a.mov(A_BR, A)
        a.mov(B_BR, B)

        def br_step() -> None:
            a.mov(PA, A_BR)
            a.mov(PB, B_BR)
            _loop(a, GRP_CNT, k // COLS, lambda: self.col_pass(a, rows, COLS), "cols")
            if k % COLS:
                self.col_pass(a, rows, k % COLS)
            if self.br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        _loop(a, BR_CNT, self.br, br_step, "br")
        _add_const(a, A, A, rows * t.size)
        if self.trans_c:
            self.y_copy(a, rows, gather=False)
        else:
            _add_const(a, C, C, rows * t.size)

    def columns(self, a: Assembler) -> None:
        t = self.t
        block_rows = M_BLOCK_BYTES // t.size
        buf = -(-min(self.m, block_rows) * t.size // 16) * 16
        a.lsl(LDA, LDA, t.shift)
        if self.trans_b:
            a.lsl(LDB, LDB, t.shift)
        else:
            a.mov(LDB, t.size)
        if self.trans_c:
            a.lsl(LDC, LDC, t.shift)
            _stack(a, buf, alloc=True)
        if self.br > 1:
            a.lsl(BR_A, BR_A, t.shift)
            a.lsl(BR_B, BR_B, t.shift)
        full, rest = divmod(self.m, block_rows)
        _loop(a, BLK_CNT, full, lambda: self.col_block(a, block_rows), "m_blocks")
        if rest:
            self.col_block(a, rest)
        if self.trans_c:
            _stack(a, buf, alloc=False)

    # -- row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time ---------------------
    def row_step(self, a: Assembler, rows: int) -> None:
        """DOT_VECTORS q registers of x at PB, and of each row at PTR: one FMA per row and vector
        (the loop body; PB and the row pointers move on by the step)."""
        t, span = self.t, 16 * DOT_VECTORS
        for op in _pair_loads(a, XV, PB, span):  # x
            op()
        units = [
            (PTR[r], v, ROW_ACC[r][v : v + 2], (t.vec(XV[v]), t.vec(XV[v + 1])))
            for r in range(rows)
            for v in range(0, DOT_VECTORS, 2)
        ]
        _stream(a, t, units, ROW_TMP, span)  # rows of A x x into the accumulators

    def row_tail(self, a: Assembler, rows: int, rest: int) -> None:
        """The last ``rest`` elements of K: q, then d/s pieces (upper lanes zero), full-width FMAs."""
        t = self.t
        pieces = split(rest, t.lanes, 99)[0]
        for c in range(0, len(pieces), DOT_VECTORS):
            chunk = pieces[c : c + DOT_VECTORS]
            ldst_pieces(a, t, False, list(XV[: len(chunk)]), chunk, PB)
            for r in range(rows):
                src = [ROW_TMP[(r * DOT_VECTORS + i) % len(ROW_TMP)] for i in range(len(chunk))]
                ldst_pieces(a, t, False, src, chunk, PTR[r])
                for i in range(len(chunk)):
                    a.fmla(t.vec(ROW_ACC[r][i]), t.vec(src[i]), t.vec(XV[i]))

    def row_group(self, a: Assembler, rows: int, br: int, k: int) -> None:
        """``rows`` rows of A (``br`` BR steps of ``k`` elements) into ``rows`` elements of y; A and
        C move on."""
        t = self.t
        a.mov(YP, C)  # y[r] into lane 0 of the row's first accumulator (ldr zeroes the rest)
        for r in range(rows):
            a.ldr(t.scalar(ROW_ACC[r][0]), mem(YP))
            if r + 1 < rows:
                a.add(YP, YP, LDC)
            for v in range(1, DOT_VECTORS):
                a.movi(VecReg(ROW_ACC[r][v], "d", 2), 0)
        a.mov(A_BR, A)
        a.mov(B_BR, B)
        steps, rest = divmod(k, DOT_VECTORS * t.lanes)

        def br_step() -> None:
            a.mov(PTR[0], A_BR)  # row pointers
            for r in range(1, rows):
                a.add(PTR[r], PTR[r - 1], LDA)
            a.mov(PB, B_BR)
            _loop(a, CNT, steps, lambda: self.row_step(a, rows), "k")
            if rest:
                self.row_tail(a, rows, rest)
            if br > 1:
                a.add(A_BR, A_BR, BR_A)
                a.add(B_BR, B_BR, BR_B)

        _loop(a, BR_CNT, br, br_step, "br")
        a.mov(YP, C)  # sum each row's lanes into y[r]
        for r in range(rows):
            acc = ROW_ACC[r]
            width = DOT_VECTORS
            while width > 1:  # pairwise vector sums
                width //= 2
                for v in range(width):
                    a.fadd(t.vec(acc[v]), t.vec(acc[v]), t.vec(acc[v + width]))
            if t.size == 4:
                a.faddp(t.vec(acc[0]), t.vec(acc[0]), t.vec(acc[0]))
                a.faddp(t.scalar(acc[0]), t.vec(acc[0], 2))
            else:
                a.faddp(t.scalar(acc[0]), t.vec(acc[0]))
            a.str(t.scalar(acc[0]), mem(YP))
            if r + 1 < rows:
                a.add(YP, YP, LDC)
        a.mov(TMP, rows)
        a.madd(A, TMP, LDA, A)
        a.madd(C, TMP, LDC, C)

    def row_groups(self, a: Assembler, br: int, k: int) -> None:
        """Every row group over ``br`` BR steps of ``k`` elements of K; A and C move on past the rows."""
        _loop(a, GRP_CNT, self.m // DOT_ROWS, lambda: self.row_group(a, DOT_ROWS, br, k), "row_groups")
        if self.m % DOT_ROWS:
            self.row_group(a, self.m % DOT_ROWS, br, k)

    def x_copy(self, a: Assembler, br: int, k: int, at: int) -> None:
        """Strided x: ``k`` elements of each of ``br`` BR steps into the stack buffer at sp + ``at``;
        B and BR_B then name it."""
        t = self.t
        _sp_plus(a, YP, at)
        a.mov(B_BR, B)

        def one(r: int) -> None:
            reg = t.scalar(r)
            a.ldr(reg, mem(PB))
            a.add(PB, PB, LDB)
            a.str(reg, post(YP, t.size))

        def br_step() -> None:
            a.mov(PB, B_BR)
            _loop(a, CNT, k // 4, lambda: [one(r) for r in range(4)], "xcopy")  # 4 per iteration
            for r in range(k % 4):
                one(r)
            if br > 1:
                a.add(B_BR, B_BR, BR_B)

        _loop(a, BR_CNT, br, br_step, "copy_br")
        _sp_plus(a, B, at)
        a.mov(BR_B, k * t.size)

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
            _stack(a, buf, alloc=True)

        copy = partial(self.x_copy, a, at=at) if self.trans_b else None  # a strided x into the buffer
        gemv_row_passes(a, self.k, self.br, t.size, (bc, kc), copy, partial(self.row_groups, a), BLK_CNT, (TMP, YB))
        if self.trans_b:
            _stack(a, buf, alloc=False)

    def emit(self) -> Assembler:
        """The whole kernel: prologue, the form, epilogue."""
        a = Assembler(name="neon_gemv")
        xregs = [r.idx for r in (*PTR, TMP, YS)]
        frame = prologue(a, xregs, range(32))
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
    loop (column form: ROW_VECTORS q registers of y x COLS columns) or of the K loop (row form:
    DOT_ROWS rows x DOT_VECTORS q registers)."""
    check_positive(m=m, k=k)
    check_positive(MAX_BR_SIZE, br_size=br_size)
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
    return f"neon_gemv_{m}x{k}_br{br_size}_{dtype}{flags}"


generate = generator(program, signature, "JIT a GEMV kernel (see the module docstring).", _name)
