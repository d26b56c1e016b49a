"""x86-64 GEMV: the BRGEMM of one column, ``c += sum_br A_br b_br`` (column-major, strides in elements).

``generate(m, k, br_size, ...)`` returns a Kernel with the BRGEMM signature (`common.brgemm_signature`)
for N = 1: A M x K (``a[m + k*lda]``, or ``a[k + m*lda]`` with ``trans_a``), x the K-vector
``b[k]`` (``b[k*ldb]`` with ``trans_b``), y = ``c[m]`` (``c[m*ldc]`` with ``trans_c``, a strided
y) and ``A_br = a + br*br_stride_a``. Every element of A is used once, so the kernel is a stream
over A that keeps the loads of A sequential and every vector lane busy, which a GEMM register
block of one column does not (2 FMA chains of 8 rows on AVX2 column-major, one scalar chain per
element transposed). The last partial vector (of M or of K) is loaded and stored under an opmask
(AVX-512) or with vmaskmov (AVX2): nothing outside the operands is touched. Fused touches:
``zero_c`` (y = A x: y is not read), ``epilogue`` (an elementwise `minijit.kernels.epilogue.Epilogue`:
y = relu(y + A x) with relu, applied before the last store).

Column form (`_Columns`, ``trans_a`` false; y += A x): y in M blocks of `M_BLOCK_BYTES` (they
stay in L1 over all of K); per block, BR step and group of `COLS` columns the x elements are
broadcast once and a pass down the block adds the columns into ``ROW_VECTORS`` vectors of y at a
time (``COLS`` sequential streams of A, y loaded and stored once per group), then the K remainder
columns. A strided y is copied into a stack buffer per block and back, so the passes keep their
contiguous vector loads and stores (with ``zero_c`` the block is not read).

Row form (`_Rows`, ``trans_a``; y[m] += dot(A row m, x)): `DOT_ROWS` rows with `DOT_VECTORS`
accumulators each walk K together, each x vector loaded once for all rows, the K tail one masked
vector; each row's lanes are then summed into y[m] (stored at its stride with ``trans_c``). A
strided x (``trans_b``) is first copied into a stack buffer (at most `X_COPY_MAX_BYTES`); a longer
one runs in chunks (`x_chunks`: whole BR steps, or one step's K in pieces), each copied, then added
into y by every row group (zeroed first with ``zero_c``, the epilogue applied after the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asm.x86_64 import Assembler, ptr
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.epilogue import Epilogue
from minijit.kernels.x86_64.common import (
    LOG2,
    EpilogueCode,
    Frame,
    Partial,
    Target,
    build,
    check_epilogue,
    check_flag,
    check_size,
    counted_loop,
    strided_copy,
)
from minijit.kernels.x86_64.common import brgemm_signature as signature
from minijit.runtime.kernel import Kernel

__all__ = [
    "generate",
    "x_chunks",
    "M_BLOCK_BYTES",
    "X_COPY_MAX_BYTES",
    "COLS",
    "ROW_VECTORS",
    "DOT_ROWS",
    "DOT_VECTORS",
]

MAX_SIZE = 1 << 16
#: row form with a strided x (``trans_b``): the largest stack buffer x is copied into (bytes); a
#: longer x (every BR step's K elements) runs in chunks (`x_chunks`)
X_COPY_MAX_BYTES = 256 * 1024
#: column form: bytes of y per M block (it stays in L1 while every column of A streams past it)
M_BLOCK_BYTES = 16 * 1024
#: column form: columns of A per pass over the block (sequential streams; x broadcasts held) and
#: vectors of y per step (8 columns halve y's round trips; 4 chains of FMAs are enough for data
#: that comes from L3 or memory: bench/results/model_constants_measurements.md)
COLS = 8
ROW_VECTORS = 4
#: row form: rows per group, and vector accumulators per row (DOT_ROWS x DOT_VECTORS chains)
DOT_ROWS = 4
DOT_VECTORS = 2

A, X, Y, LDA, INCX, LDC = rdi, rsi, rdx, rcx, r8, r9  # arguments (A at the M block / row group)
LDA3, INCX3, BSA, BSB = r10, r11, r12, r13  # 3*lda, 3*incx, BR strides (bytes; row form)
LDA5, LDA7 = r12, r13  # column form: 5*lda, 7*lda (its BR strides live in stack slots)
PA, PX, ROWS_A, ROWS_Y, CNT, KCNT = rax, rbx, r14, r15, r9, rbp  # walking pointers and counters
A_BR, X_BR = r14, r15  # row form: A and x at the BR step
LDC_R, LDC3_R = rbp, r11  # row form, strided y: its stride and 3 strides (bytes; r11 is free once x is copied)
assert COLS in (4, 8) and DOT_ROWS == 4  # the pointer steps below are lea ..[reg + 4*ld]
assert ROW_VECTORS + COLS + 2 <= 16  # AVX2: y vectors, x broadcasts, a masked A load, the mask
assert (DOT_ROWS + 1) * DOT_VECTORS + 2 <= 16  # AVX2: accumulators, x vectors, a masked A load, the mask


def generate(
    m: int,
    k: int,
    br_size: int = 1,
    trans_a: bool = False,
    trans_b: bool = False,
    dtype: str = "fp32",
    isa: str = "avx512",
    *,
    trans_c: bool = False,
    zero_c: bool = False,
    epilogue: Epilogue | str | None = Epilogue.NONE,
) -> Kernel:
    """Generate the GEMV kernel (see the module docstring); bad arguments raise ValueError."""
    check_size("m", m, 1, MAX_SIZE)
    check_size("k", k, 1, MAX_SIZE)
    check_size("br_size", br_size, 1, 1 << 24)
    trans_a, trans_b, trans_c = (
        check_flag(n, v) for n, v in (("trans_a", trans_a), ("trans_b", trans_b), ("trans_c", trans_c))
    )
    zero_c, epilogue = check_flag("zero_c", zero_c), check_epilogue(epilogue, "gemv")
    t = Target.of(dtype, isa)
    a = Assembler(name="gemv")
    frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
    tail = Partial.column_tail(a, t, k if trans_a else m, t.vregs[15])
    form = Form(m, k, br_size, trans_b, trans_c, zero_c, epilogue)
    (_Rows if trans_a else _Columns)(a, t, frame, form, tail).emit()
    if tail is not None:
        tail.emit_data(a)
    flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c), ("_z", zero_c)) if on)
    flags += epilogue.tag
    return build(a, signature(t.ctype), f"gemv_{dtype}_{isa}_{m}x{k}_br{br_size}{flags}")


@dataclass(frozen=True)
class Form:
    """What one kernel computes: sizes (elements), the strided x / y flags and the fused touches
    (a first touch zero, an elementwise epilogue)."""

    m: int
    k: int
    br: int
    trans_b: bool
    trans_c: bool
    zero_c: bool
    epilogue: Epilogue


def _prologue(a: Assembler, t: Target, frame: Frame, br: int, trans_b: bool, tail: Partial | None, strides) -> None:
    """Save registers; lda (and incx with ``trans_b``) and the BR strides to bytes (into
    ``strides``: registers or slots); the tail mask."""
    frame.enter(a)
    a.shl(LDA, LOG2[t.es])
    a.lea(LDA3, ptr(LDA + LDA * 2))
    if trans_b:
        a.shl(INCX, LOG2[t.es])
        a.lea(INCX3, ptr(INCX + INCX * 2))
    if br > 1:
        for dst, i in zip(strides, (0, 1), strict=True):
            a.mov(rax, frame.arg(i))
            a.shl(rax, LOG2[t.es])
            a.mov(dst, rax)
    if tail is not None:
        tail.setup(a, rax)


# -- column form: y += A x, COLS columns per pass over an L1 block of y ---------------------------
class _Form:
    """What both forms share: the assembler, the target, the frame, the kernel's `Form` and the
    partial vector (of M in the column form, of K in the row form; None: none)."""

    def __init__(self, a: Assembler, t: Target, frame: Frame, form: Form, tail: Partial | None) -> None:
        self.a, self.t, self.frame, self.form, self.tail = a, t, frame, form, tail
        self.es, self.vb = t.es, t.vbytes

    def vop(self, name: str, *ops: Any) -> None:
        """The packed instruction ``name`` + ps/pd."""
        getattr(self.a, self.t.v(name))(*ops)

    def load(self, dst: Any, addr: Any, part: Partial | None) -> None:
        if part is None:
            self.vop("vmovu", dst, self.t.vmem(addr))
        else:
            part.load(self.a, dst, addr)

    def store(self, addr: Any, src: Any, part: Partial | None) -> None:
        if part is None:
            self.vop("vmovu", self.t.vmem(addr), src)
        else:
            part.store(self.a, addr, src)


class _Columns(_Form):
    """The column form: y += A x, COLS columns per pass over an L1 block of y."""

    def __init__(self, a: Assembler, t: Target, frame: Frame, form: Form, tail: Partial | None) -> None:
        super().__init__(a, t, frame, form, tail)
        self.s_blocks, self.s_br, self.s_a, self.s_x = (frame.slot(x) for x in ("m_blocks", "br", "a_br", "x_br"))
        self.s_bsa, self.s_bsb = frame.slot("bsa"), frame.slot("bsb")
        self.block_rows = M_BLOCK_BYTES // t.es  # a multiple of every vector length
        if form.trans_c:  # strided y: each block runs in a buffer; the caller's y and its stride in slots
            self.s_ybuf = frame.buffer("y", min(form.m, self.block_rows) * t.es)
            self.s_y, self.s_ldc = frame.slot("y"), frame.slot("ldc")
        regs = t.vregs
        self.acc, self.xs = regs[:ROW_VECTORS], regs[ROW_VECTORS : ROW_VECTORS + COLS]
        self.tmp = regs[ROW_VECTORS + COLS]
        self.zero = self.xs[0]  # the zero / epilogue passes run while no x is held
        # column j of the group: ROWS_A + col[j]; x element j: PX + x_at[j % 4] (PX on by 4 after 4)
        self.col = (None, LDA, (LDA, 2), LDA3, (LDA, 4), LDA5, (LDA3, 2), LDA7)
        self.x_at = (None, INCX, (INCX, 2), INCX3) if form.trans_b else tuple(j * t.es for j in range(4))

    def emit(self) -> None:
        """Prologue (the strided y's pointer and stride into slots), every M block, epilogue."""
        a, form = self.a, self.form
        _prologue(a, self.t, self.frame, form.br, form.trans_b, self.tail, (self.s_bsa, self.s_bsb))
        if form.trans_c:
            a.mov(self.s_y, Y)
            a.mov(rax, LDC)
            a.shl(rax, LOG2[self.es])
            a.mov(self.s_ldc, rax)
        if COLS == 8:
            a.lea(LDA5, ptr(LDA + LDA * 4))
            a.lea(LDA7, ptr(LDA3 + LDA * 4))
        full, rem = divmod(form.m, self.block_rows)
        counted_loop(a, self.s_blocks, full, lambda: self.block(self.block_rows), "m_blocks")
        if rem:
            self.block(rem)
        self.frame.leave(a)

    @staticmethod
    def at(base: Any, off: Any, disp: int = 0) -> Any:
        if off is None:
            return base + disp
        if isinstance(off, int):
            return base + (off + disp)
        reg, scale = off if isinstance(off, tuple) else (off, 1)
        return base + reg * scale + disp

    def block(self, rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y."""
        a, form, t = self.a, self.form, self.t
        if form.trans_c:
            if not form.zero_c:
                self.y_copy(rows, gather=True)
            a.mov(Y, self.s_ybuf)
        if form.zero_c:  # first touch zero: y = 0 before the passes
            self.vop("vxor", self.zero, self.zero, self.zero)
            self.elementwise(rows, lambda v: self.vop("vmova", v, self.zero), read=False)
        a.mov(self.s_a, A)
        a.mov(self.s_x, X)
        counted_loop(a, self.s_br, form.br, lambda: self.br_step(rows), "br")
        if form.epilogue:  # the epilogue (a last touch relu), once every column is in
            code = EpilogueCode(a, t, form.epilogue, self.zero)
            code.setup()
            self.elementwise(rows, code.apply, read=True)
        a.add(A, rows * self.es)
        if form.trans_c:
            self.y_copy(rows, gather=False)
        else:
            a.add(Y, rows * self.es)

    def br_step(self, rows: int) -> None:
        """One BR step: the column groups, the K remainder columns, A and x on to the next step."""
        a, k = self.a, self.form.k
        a.mov(PA, self.s_a)
        a.mov(PX, self.s_x)
        counted_loop(a, KCNT, k // COLS, lambda: self.group_pass(rows, COLS), "cols")
        if k % COLS:
            self.group_pass(rows, k % COLS)
        if self.form.br > 1:
            for slot, stride in ((self.s_a, self.s_bsa), (self.s_x, self.s_bsb)):
                a.mov(ROWS_A, stride)
                a.add(slot, ROWS_A)

    def group_pass(self, rows: int, cols: int) -> None:
        """Broadcast x[k .. k+cols), one pass down the block, A and x on by ``cols`` columns."""
        a, t = self.a, self.t
        for j in range(cols):
            if j == 4:
                self.x_on(4)
            bcast = "vbroadcastss" if t.es == 4 else "vbroadcastsd"
            getattr(a, bcast)(self.xs[j], t.smem(self.at(PX, self.x_at[j % 4])))
        a.mov(ROWS_A, PA)
        a.mov(ROWS_Y, Y)
        self.walk_rows(rows, lambda nv, part: self.pass_step(cols, nv, part))
        if cols == COLS:
            a.lea(PA, ptr(PA + LDA * COLS))
            self.x_on(4)

    def x_on(self, count: int) -> None:
        """PX on by ``count`` elements of x."""
        if self.form.trans_b:
            self.a.lea(PX, ptr(PX + INCX * count))
        else:
            self.a.add(PX, count * self.es)

    def walk_rows(self, rows: int, step: Any) -> None:
        """``step(nv, part)`` over ``rows`` rows of y from ROWS_Y / A from ROWS_A: groups of
        ROW_VECTORS vectors in a loop, then the rest (the last one partial)."""
        a, t = self.a, self.t
        full, last = divmod(rows, t.vl)
        groups, rem = divmod(full, ROW_VECTORS)

        def group() -> None:
            step(ROW_VECTORS, None)
            a.add(ROWS_A, ROW_VECTORS * self.vb)
            a.add(ROWS_Y, ROW_VECTORS * self.vb)

        counted_loop(a, CNT, groups, group, "rows")
        if rem or last:
            step(rem + (1 if last else 0), self.tail if last else None)

    def pass_step(self, cols: int, nv: int, part: Partial | None) -> None:
        """y[nv vectors] += the group's ``cols`` columns x their x elements."""
        vb = self.vb
        for u in range(nv):
            self.load(self.acc[u], ROWS_Y + u * vb, part if u == nv - 1 else None)
        for j in range(cols):
            for u in range(nv):
                if u == nv - 1 and part is not None:
                    part.load(self.a, self.tmp, self.at(ROWS_A, self.col[j], u * vb))
                    self.vop("vfmadd231", self.acc[u], self.xs[j], self.tmp)
                else:
                    self.vop("vfmadd231", self.acc[u], self.xs[j], self.t.vmem(self.at(ROWS_A, self.col[j], u * vb)))
        for u in range(nv):
            self.store(ROWS_Y + u * vb, self.acc[u], part if u == nv - 1 else None)

    def elementwise(self, rows: int, op: Any, read: bool) -> None:
        """``op(vector)`` on every vector of the block's y in place (``read``: y is loaded first)."""

        def step(nv: int, part: Partial | None) -> None:
            for u in range(nv):
                p = part if u == nv - 1 else None
                if read:
                    self.load(self.acc[u], ROWS_Y + u * self.vb, p)
                op(self.acc[u])
                self.store(ROWS_Y + u * self.vb, self.acc[u], p)

        self.a.mov(ROWS_Y, Y)
        self.walk_rows(rows, step)

    def y_copy(self, rows: int, gather: bool) -> None:
        """Strided y: the block's ``rows`` elements from the caller's y into the buffer, or back
        (then the caller's y pointer moves on by ``rows`` strides)."""
        a = self.a
        a.mov(PX, self.s_y)
        a.mov(ROWS_Y, self.s_ybuf)
        a.mov(KCNT, self.s_ldc)
        a.lea(ROWS_A, ptr(KCNT + KCNT * 2))
        strided_copy(a, self.t, rows, PX, ROWS_Y, KCNT, ROWS_A, CNT, self.tmp.xmm, gather)
        if not gather:
            a.mov(self.s_y, PX)


# -- row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time -----------------------------------
def x_chunks(k: int, br: int, es: int) -> tuple[int, int]:
    """Row form with a strided x: the (BR steps, K elements) of x copied into the stack buffer at
    a time; all of x (``(br, k)``) when it fits `X_COPY_MAX_BYTES`, else whole BR steps per chunk,
    else one step's K in pieces."""
    cap = X_COPY_MAX_BYTES // es // 16 * 16  # pieces of K are whole vectors (16 elements: any ISA)
    if br * k <= cap:
        return br, k
    if k <= cap:
        return cap // k, k
    return 1, cap


class _Rows(_Form):
    """The row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time; a strided x is copied into a
    stack buffer first (in chunks when longer than it)."""

    def __init__(self, a: Assembler, t: Target, frame: Frame, form: Form, tail: Partial | None) -> None:
        super().__init__(a, t, frame, form, tail)
        self.s_groups, self.s_br = frame.slot("row_groups"), frame.slot("br")
        self.bc, self.kc = x_chunks(form.k, form.br, t.es) if form.trans_b else (form.br, form.k)
        self.chunked = (self.bc, self.kc) != (form.br, form.k)
        self.s_xbuf = frame.buffer("x", self.bc * self.kc * t.es) if form.trans_b else None
        if self.chunked:  # x in chunks: A, x and y at the chunk, the BR strides (bytes), the chunk counters
            self.s_a, self.s_x, self.s_y, self.s_bsb = (frame.slot(x) for x in ("a_chunk", "x_chunk", "y", "bsb"))
            self.s_chunks, self.s_pieces = frame.slot("x_chunks"), frame.slot("k_pieces")
            self.s_a_br, self.s_x_br = frame.slot("a_br"), frame.slot("x_br")  # K pieces: the BR step's start
        regs = t.vregs
        self.acc = [regs[r * DOT_VECTORS : (r + 1) * DOT_VECTORS] for r in range(DOT_ROWS)]
        base = DOT_ROWS * DOT_VECTORS
        self.xv, self.tmp = regs[base : base + DOT_VECTORS], regs[base + DOT_VECTORS]
        self.zero, self.red = self.xv[0], self.tmp  # after the K loop: the epilogue's constant, the reduction's scratch
        self.row = (None, LDA, (LDA, 2), LDA3)  # row r of the group: PA + row[r]
        # y[r] of the group: Y + y_at[r] (strided y: LDC_R, LDC3_R hold its stride and 3 strides, bytes)
        self.y_at = (None, (LDC_R, 1), (LDC_R, 2), (LDC3_R, 1)) if form.trans_c else tuple(r * t.es for r in range(4))

    def emit(self) -> None:
        """Prologue, then the row passes over all of x (copied first when strided) or over its
        chunks, epilogue."""
        a, form = self.a, self.form
        _prologue(a, self.t, self.frame, form.br, form.trans_b, self.tail, (BSA, BSB))
        if form.trans_c:
            a.mov(LDC_R, LDC)
            a.shl(LDC_R, LOG2[self.es])
        if self.chunked:
            self.chunk_passes()
        else:
            if form.trans_b:  # strided x: every BR step's K elements into the buffer, which the rows then read
                self.copy_x(form.br, form.k, BSB)
            if form.trans_c:
                a.lea(LDC3_R, ptr(LDC_R + LDC_R * 2))
            self.row_pass(form.k, form.br, form.zero_c, form.epilogue)
        self.frame.leave(a)

    def copy_x(self, steps: int, count: int, x_step: Any) -> None:
        """x's ``count`` elements of each of ``steps`` BR steps (``x_step`` bytes apart) from X
        into the buffer, which X then points to (BSB: one step's elements there)."""
        a = self.a
        a.mov(rax, self.s_xbuf)
        a.mov(X_BR, X)
        if self.chunked and self.form.trans_c:  # INCX3 is LDC3_R between the copies
            a.lea(INCX3, ptr(INCX + INCX * 2))

        def copy_step() -> None:
            a.mov(PX, X_BR)
            strided_copy(a, self.t, count, PX, rax, INCX, INCX3, CNT, self.t.vregs[0].xmm, gather=True)
            if steps > 1:
                a.add(X_BR, x_step)

        counted_loop(a, A_BR, steps, copy_step, "copy_br")
        a.mov(X, self.s_xbuf)
        if steps > 1:
            a.mov(BSB, count * self.es)

    def at(self, r: int, disp: int) -> Any:
        """Row r of the group, ``disp`` bytes on."""
        off = self.row[r]
        if off is None:
            return PA + disp
        reg, scale = off if isinstance(off, tuple) else (off, 1)
        return PA + reg * scale + disp

    def y_addr(self, r: int) -> Any:
        off = self.y_at[r]
        return Y if off is None else Y + off if isinstance(off, int) else Y + off[0] * off[1]

    def row_pass(self, kk: int, steps: int, zero_y: bool, epilogue: Epilogue) -> None:
        """Every row group over ``steps`` BR steps of ``kk`` elements of K from A and X (A and Y
        move on past the rows)."""
        m = self.form.m
        group = lambda: self.group(DOT_ROWS, kk, steps, zero_y, epilogue)  # noqa: E731
        counted_loop(self.a, self.s_groups, m // DOT_ROWS, group, "row_groups")
        if m % DOT_ROWS:
            self.group(m % DOT_ROWS, kk, steps, zero_y, epilogue)

    def group(self, rows: int, kk: int, steps: int, zero_y: bool, epilogue: Epilogue) -> None:
        """``rows`` rows of A (every BR step) into ``rows`` elements of y."""
        a, t = self.a, self.t
        for r in range(rows):
            for v in range(DOT_VECTORS):
                self.vop("vxor", self.acc[r][v], self.acc[r][v], self.acc[r][v])
        a.mov(A_BR, A)
        a.mov(X_BR, X)
        counted_loop(a, self.s_br, steps, lambda: self.br_step(rows, kk, steps), "br")
        code = EpilogueCode(a, t, epilogue, self.zero)
        if epilogue:
            code.setup()
        for r in range(rows):
            self.reduce_into_y(r, zero_y, code)
        if rows == DOT_ROWS:
            a.lea(A, ptr(A + LDA * 4))
            if self.form.trans_c:
                a.lea(Y, ptr(Y + LDC_R * 4))
            else:
                a.add(Y, DOT_ROWS * t.es)

    def br_step(self, rows: int, kk: int, steps: int) -> None:
        """One BR step of the group: full K steps, then the tail vectors (only the last piece of K
        has a partial one: kc is whole vectors); A and x on to the next step."""
        a, vb = self.a, self.vb
        full_steps, rest = divmod(kk, DOT_VECTORS * self.t.vl)
        rest_vectors = -(-rest // self.t.vl)

        def k_loop() -> None:
            self.k_step(rows, DOT_VECTORS, None)
            a.add(PA, DOT_VECTORS * vb)
            a.add(PX, DOT_VECTORS * vb)

        a.mov(PA, A_BR)
        a.mov(PX, X_BR)
        counted_loop(a, CNT, full_steps, k_loop, "k")
        if rest_vectors:
            self.k_step(rows, rest_vectors, self.tail if kk % self.t.vl else None)
        if steps > 1:
            a.add(A_BR, BSA)
            a.add(X_BR, BSB)

    def k_step(self, rows: int, nv: int, part: Partial | None) -> None:
        """``nv`` vectors of K (the last one partial): x loaded once, one FMA per row and vector."""
        a, t, vb = self.a, self.t, self.vb
        for v in range(nv):
            if v == nv - 1 and part is not None:
                part.load(a, self.xv[v], PX + v * vb)
            else:
                self.vop("vmovu", self.xv[v], t.vmem(PX + v * vb))
        for v in range(nv):
            for r in range(rows):
                if v == nv - 1 and part is not None:
                    part.load(a, self.tmp, self.at(r, v * vb))
                    self.vop("vfmadd231", self.acc[r][v], self.xv[v], self.tmp)
                else:
                    self.vop("vfmadd231", self.acc[r][v], self.xv[v], t.vmem(self.at(r, v * vb)))

    def reduce_into_y(self, r: int, zero_y: bool, code: EpilogueCode) -> None:
        """y[r] (+)= the lanes of row r's accumulators summed (then the epilogue ``code``, set up)."""
        a, t, red = self.a, self.t, self.red
        s = self.acc[r][0]
        for v in range(1, DOT_VECTORS):
            self.vop("vadd", s, s, self.acc[r][v])
        if t.isa == "avx512":
            a.vextractf64x4(red.ymm, s, 1)
            self.vop("vadd", s.ymm, s.ymm, red.ymm)
        a.vextractf128(red.xmm, s.ymm, 1)
        self.vop("vadd", s.xmm, s.xmm, red.xmm)
        if t.es == 4:
            a.vshufps(red.xmm, s.xmm, s.xmm, 0x0E)
            a.vaddps(s.xmm, s.xmm, red.xmm)
            a.vshufps(red.xmm, s.xmm, s.xmm, 0x01)
        else:
            a.vshufpd(red.xmm, s.xmm, s.xmm, 0x01)
        getattr(a, t.s("vadd"))(s.xmm, s.xmm, red.xmm)
        if not zero_y:
            getattr(a, t.s("vadd"))(s.xmm, s.xmm, t.smem(self.y_addr(r)))
        code.apply(s.xmm, scalar=True)
        getattr(a, t.s("vmov"))(t.smem(self.y_addr(r)), s.xmm)

    def y_pass(self, op: Any, read: bool) -> None:
        """``op(element)`` on each y[m] in place (``read``: loaded first), one at a time."""
        a, t, tmp = self.a, self.t, self.tmp
        a.mov(Y, self.s_y)

        def one() -> None:
            if read:
                getattr(a, t.s("vmov"))(tmp.xmm, t.smem(Y))
            op(tmp.xmm)
            getattr(a, t.s("vmov"))(t.smem(Y), tmp.xmm)
            if self.form.trans_c:
                a.add(Y, LDC_R)
            else:
                a.add(Y, self.es)

        counted_loop(a, self.s_groups, self.form.m, one, "y_pass")

    # -- x too long for the buffer -------------------------------------------------------------
    def chunk_passes(self) -> None:
        """Chunks of (bc BR steps) x (kc K elements), each copied and then added into y by every row
        group; y is zeroed before the first chunk and gets the epilogue after the last."""
        a, t, form = self.a, self.t, self.form
        a.mov(self.s_a, A)
        a.mov(self.s_x, X)
        a.mov(self.s_y, Y)
        if form.br > 1:
            a.mov(self.s_bsb, BSB)
        if form.zero_c:
            self.y_pass(lambda v: self.vop("vxor", v, v, v), read=False)
        if self.kc == form.k:  # whole BR steps per chunk: A and x move on by bc steps
            counted_loop(a, self.s_chunks, form.br // self.bc, self.steps_chunk, "x_chunks")
            if form.br % self.bc:
                self.chunk(form.br % self.bc, form.k)
        else:  # one BR step at a time, its K in pieces of kc: A on by kc elements, x by kc strides
            counted_loop(a, self.s_chunks, form.br, self.pieces_step, "br_steps")
        if form.epilogue:
            code = EpilogueCode(a, t, form.epilogue, self.zero)
            code.setup()
            self.y_pass(lambda v: code.apply(v, scalar=True), read=True)

    def chunk(self, steps: int, kk: int) -> None:
        """One chunk: its x into the buffer, then every row group (A, x and y from the slots)."""
        a = self.a
        a.mov(A, self.s_a)
        a.mov(X, self.s_x)
        self.copy_x(steps, kk, self.s_bsb)
        a.mov(Y, self.s_y)
        if self.form.trans_c:
            a.lea(LDC3_R, ptr(LDC_R + LDC_R * 2))
        self.row_pass(kk, steps, False, Epilogue.NONE)

    def steps_chunk(self) -> None:
        """bc whole BR steps, then A and x on by them."""
        self.chunk(self.bc, self.form.k)
        for slot, stride in ((self.s_a, BSA), (self.s_x, self.s_bsb)):
            self.a.imul(rax, stride, self.bc)
            self.a.add(slot, rax)

    def pieces_step(self) -> None:
        """One BR step's K in pieces of kc, then the next step from this one's start."""
        a, k, kc = self.a, self.form.k, self.kc

        def piece(kk: int) -> None:
            self.chunk(1, kk)
            a.add(self.s_a, kk * self.es)
            a.imul(rax, INCX, kk)
            a.add(self.s_x, rax)

        a.mov(rax, self.s_a)
        a.mov(self.s_a_br, rax)
        a.mov(rax, self.s_x)
        a.mov(self.s_x_br, rax)
        counted_loop(a, self.s_pieces, k // kc, lambda: piece(kc), "k_pieces")
        if k % kc:
            self.chunk(1, k % kc)
        if self.form.br > 1:  # the next step from this one's start
            for slot, start, stride in ((self.s_a, self.s_a_br, BSA), (self.s_x, self.s_x_br, self.s_bsb)):
                a.mov(rax, start)
                a.add(rax, stride)
                a.mov(slot, rax)
