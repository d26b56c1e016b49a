"""x86-64 GEMV: the BRGEMM of one column, ``c += sum_br A_br b_br`` (column-major, strides in elements).

``generate(m, k, br_size, ...)`` returns a Kernel with `minijit.kernels.x86_64.brgemm`'s signature
for N = 1: ``void(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc,
int64_t br_stride_a, int64_t br_stride_b)``, with A M x K (``a[m + k*lda]``, or ``a[k + m*lda]``
with ``trans_a``), x the K-vector ``b[k]`` (``b[k*ldb]`` with ``trans_b``), y = ``c[m]`` (``ldc``
is not read; ``c[m*ldc]`` with ``trans_c``, a strided y) and ``A_br = a + br*br_stride_a``.
Every element of A is used once, so the kernel is a stream over A: what it must do is keep the
loads of A sequential and every vector lane busy, which a GEMM register block of one column does
not (2 FMA chains of 8 rows on AVX2 for the column-major form, one scalar chain per element for
the transposed one).

Column form (``trans_a`` false; y += A x, the axpy order): y is walked in M blocks of
`M_BLOCK_BYTES` (which stay in L1 over all of K); for each block, each BR step and each group of
`COLS` columns of A, the group's x elements are broadcast once and a pass down the block's rows
adds ``COLS`` columns into ``ROW_VECTORS`` vectors of y at a time (``COLS`` sequential streams of
A, y loaded and stored once per group). Then the K remainder columns, one pass.

Row form (``trans_a``; y[m] += dot(A row m, x), the dot order): `DOT_ROWS` rows at a time, each
with `DOT_VECTORS` vector accumulators, walk K (every BR step) together, loading each x vector
once for all rows; the K tail is one masked vector; each row's accumulators are then summed
across lanes into y[m]. The x vectors must be contiguous: with ``trans_b`` (a strided x) the
kernel first copies x, every BR step's, into a stack buffer (at most `X_COPY_MAX_BYTES`), K
elements per step, read by every row group. A longer x runs in chunks (`x_chunks`: whole BR
steps, or one step's K in pieces): each chunk is copied, then every row group adds its part into
y (zeroed first with ``zero_c``, relu'd after the last chunk with ``relu_c``).

Strided y (``trans_c``): the row form stores each y[m] at its stride; the column form copies each
M block of y into a stack buffer (`M_BLOCK_BYTES`), runs its passes there and copies it back, so
the passes keep their contiguous vector loads and stores (with ``zero_c`` the block is not read).

The last partial vector (of M in the column form, of K in the row form) is loaded and stored
under an opmask (AVX-512) or with vmaskmov (AVX2), so nothing outside the operands is touched.
Fused touches: ``zero_c`` (y = A x: y is not read) and ``relu_c`` (y = relu(y + A x), applied
before the last store of each element).
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.x86_64 import Assembler, ptr
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import LOG2, Frame, Partial, Target, build, check_flag, check_size, counted_loop
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
#: vectors of y per step. Measured on a Zen 3 core, fp32, the kernel alone (A column-major in L3 or
#: memory): 8 x 4 against 4 x 8 1024^2 0.97x, 2048^2 1.26x, 4096 x 1024 1.34x, 4096^2 0.99x (the y
#: round trips halve; 4 chains of FMAs are enough for data that comes from L3 or memory); 8 x 6
#: between them; a prefetch 512 B ahead in each column changed nothing
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
    relu_c: bool = False,
) -> Kernel:
    """Generate the GEMV kernel (see the module docstring); bad arguments raise ValueError."""
    check_size("m", m, 1, MAX_SIZE)
    check_size("k", k, 1, MAX_SIZE)
    check_size("br_size", br_size, 1, 1 << 24)
    trans_a, trans_b, trans_c = (
        check_flag(n, v) for n, v in (("trans_a", trans_a), ("trans_b", trans_b), ("trans_c", trans_c))
    )
    zero_c, relu_c = check_flag("zero_c", zero_c), check_flag("relu_c", relu_c)
    t = Target.of(dtype, isa)
    a = Assembler(name="gemv")
    frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
    tail = Partial.column_tail(a, t, k if trans_a else m, t.vregs[15])
    form = Form(m, k, br_size, trans_b, trans_c, zero_c, relu_c)
    (_emit_rows if trans_a else _emit_columns)(a, t, frame, form, tail)
    if tail is not None:
        tail.emit_data(a)
    flags = "".join(
        f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c), ("_z", zero_c), ("_r", relu_c)) if on
    )
    return build(a, signature(t.ctype), f"gemv_{dtype}_{isa}_{m}x{k}_br{br_size}{flags}")


@dataclass(frozen=True)
class Form:
    """What one kernel computes: sizes (elements), the strided x / y flags and the fused touches."""

    m: int
    k: int
    br: int
    trans_b: bool
    trans_c: bool
    zero_c: bool
    relu_c: bool


def _strided_copy(a: Assembler, t: Target, count: int, strided, contig, step, step3, counter, tmp, gather: bool):
    """Copy ``count`` elements between a strided run (pointer ``strided``, ``step`` / ``step3``:
    registers holding its stride and 3 strides in bytes) and a contiguous one (``contig``):
    strided -> contiguous with ``gather``, else back. Both pointers end past their runs."""
    mov = getattr(a, t.s("vmov"))
    offsets = (None, (step, 1), (step, 2), (step3, 1))

    def one(j: int, disp: int) -> None:
        off = offsets[j]
        far = t.smem(strided if off is None else strided + off[0] * off[1])
        near = t.smem(contig + disp)
        mov(tmp, far if gather else near)
        mov(near if gather else far, tmp)

    def four() -> None:
        for j in range(4):
            one(j, j * t.es)
        a.lea(strided, ptr(strided + step * 4))
        a.add(contig, 4 * t.es)

    counted_loop(a, counter, count // 4, four, "copy")
    for _ in range(count % 4):
        one(0, 0)
        a.add(strided, step)
        a.add(contig, t.es)


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


def _relu(a: Assembler, t: Target, x, zero, scalar: bool = False) -> None:
    """x = max(0, x) + 0 (-0 -> +0, NaN kept), as the unary relu kernel."""
    name = t.s if scalar else t.v
    getattr(a, name("vmax"))(x, zero, x)
    getattr(a, name("vadd"))(x, x, zero)


# -- column form: y += A x, COLS columns per pass over an L1 block of y ---------------------------
def _emit_columns(a: Assembler, t: Target, frame: Frame, form: Form, tail: Partial | None) -> None:
    m, k, br, trans_b, zero_c, relu_c = form.m, form.k, form.br, form.trans_b, form.zero_c, form.relu_c
    es, vb = t.es, t.vbytes
    s_blocks, s_br, s_a, s_x = (frame.slot(x) for x in ("m_blocks", "br", "a_br", "x_br"))
    s_bsa, s_bsb = frame.slot("bsa"), frame.slot("bsb")
    block_rows = M_BLOCK_BYTES // es  # a multiple of every vector length
    if form.trans_c:  # strided y: each block runs in a buffer; the caller's y and its stride in slots
        s_ybuf, s_y, s_ldc = frame.buffer("y", min(m, block_rows) * es), frame.slot("y"), frame.slot("ldc")
    regs = t.vregs
    acc, xs, tmp = regs[:ROW_VECTORS], regs[ROW_VECTORS : ROW_VECTORS + COLS], regs[ROW_VECTORS + COLS]
    zero = xs[0]  # the zero / relu passes run while no x is held
    # column j of the group: ROWS_A + col[j]; x element j: PX + x_at[j % 4] (PX on by 4 after 4)
    col = (None, LDA, (LDA, 2), LDA3, (LDA, 4), LDA5, (LDA3, 2), LDA7)
    x_at = (None, INCX, (INCX, 2), INCX3) if trans_b else tuple(j * es for j in range(4))
    _prologue(a, t, frame, br, trans_b, tail, (s_bsa, s_bsb))
    if form.trans_c:
        a.mov(s_y, Y)
        a.mov(rax, LDC)
        a.shl(rax, LOG2[es])
        a.mov(s_ldc, rax)
    if COLS == 8:
        a.lea(LDA5, ptr(LDA + LDA * 4))
        a.lea(LDA7, ptr(LDA3 + LDA * 4))

    def at(base, off, disp: int = 0):
        if off is None:
            return base + disp
        if isinstance(off, int):
            return base + (off + disp)
        reg, scale = off if isinstance(off, tuple) else (off, 1)
        return base + reg * scale + disp

    def load(dst, addr, part: Partial | None) -> None:
        if part is None:
            getattr(a, t.v("vmovu"))(dst, t.vmem(addr))
        else:
            part.load(a, dst, addr)

    def store(addr, src, part: Partial | None) -> None:
        if part is None:
            getattr(a, t.v("vmovu"))(t.vmem(addr), src)
        else:
            part.store(a, addr, src)

    def walk_rows(rows: int, step) -> None:
        """``step(nv, part)`` over ``rows`` rows of y from ROWS_Y / A from ROWS_A: groups of
        ROW_VECTORS vectors in a loop, then the rest (the last one partial)."""
        full, last = divmod(rows, t.vl)
        groups, rem = divmod(full, ROW_VECTORS)

        def group() -> None:
            step(ROW_VECTORS, None)
            a.add(ROWS_A, ROW_VECTORS * vb)
            a.add(ROWS_Y, ROW_VECTORS * vb)

        counted_loop(a, CNT, groups, group, "rows")
        if rem or last:
            step(rem + (1 if last else 0), tail if last else None)

    def columns(cols: int):
        def step(nv: int, part: Partial | None) -> None:
            """y[nv vectors] += the group's ``cols`` columns x their x elements."""
            for u in range(nv):
                load(acc[u], ROWS_Y + u * vb, part if u == nv - 1 else None)
            for j in range(cols):
                for u in range(nv):
                    if u == nv - 1 and part is not None:
                        part.load(a, tmp, at(ROWS_A, col[j], u * vb))
                        getattr(a, t.v("vfmadd231"))(acc[u], xs[j], tmp)
                    else:
                        getattr(a, t.v("vfmadd231"))(acc[u], xs[j], t.vmem(at(ROWS_A, col[j], u * vb)))
            for u in range(nv):
                store(ROWS_Y + u * vb, acc[u], part if u == nv - 1 else None)

        return step

    def group_pass(rows: int, cols: int) -> None:
        """Broadcast x[k .. k+cols), one pass down the block, A and x on by ``cols`` columns."""

        def x_on(count: int) -> None:
            if trans_b:
                a.lea(PX, ptr(PX + INCX * count))
            else:
                a.add(PX, count * es)

        for j in range(cols):
            if j == 4:
                x_on(4)
            getattr(a, "vbroadcastss" if es == 4 else "vbroadcastsd")(xs[j], t.smem(at(PX, x_at[j % 4])))
        a.mov(ROWS_A, PA)
        a.mov(ROWS_Y, Y)
        walk_rows(rows, columns(cols))
        if cols == COLS:
            a.lea(PA, ptr(PA + LDA * COLS))
            x_on(4)

    def elementwise(rows: int, op, read: bool) -> None:
        """``op(vector)`` on every vector of the block's y in place (``read``: y is loaded first)."""

        def step(nv: int, part: Partial | None) -> None:
            for u in range(nv):
                p = part if u == nv - 1 else None
                if read:
                    load(acc[u], ROWS_Y + u * vb, p)
                op(acc[u])
                store(ROWS_Y + u * vb, acc[u], p)

        a.mov(ROWS_Y, Y)
        walk_rows(rows, step)

    def y_copy(rows: int, gather: bool) -> None:
        """Strided y: the block's ``rows`` elements from the caller's y into the buffer, or back
        (then the caller's y pointer moves on by ``rows`` strides)."""
        a.mov(PX, s_y)
        a.mov(ROWS_Y, s_ybuf)
        a.mov(KCNT, s_ldc)
        a.lea(ROWS_A, ptr(KCNT + KCNT * 2))
        _strided_copy(a, t, rows, PX, ROWS_Y, KCNT, ROWS_A, CNT, tmp.xmm, gather)
        if not gather:
            a.mov(s_y, PX)

    def block(rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y."""
        if form.trans_c:
            if not zero_c:
                y_copy(rows, gather=True)
            a.mov(Y, s_ybuf)
        if zero_c:  # first touch zero: y = 0 before the passes
            getattr(a, t.v("vxor"))(zero, zero, zero)
            elementwise(rows, lambda v: getattr(a, t.v("vmova"))(v, zero), read=False)
        a.mov(s_a, A)
        a.mov(s_x, X)

        def br_step() -> None:
            a.mov(PA, s_a)
            a.mov(PX, s_x)
            counted_loop(a, KCNT, k // COLS, lambda: group_pass(rows, COLS), "cols")
            if k % COLS:
                group_pass(rows, k % COLS)
            if br > 1:
                for slot, stride in ((s_a, s_bsa), (s_x, s_bsb)):
                    a.mov(ROWS_A, stride)
                    a.add(slot, ROWS_A)

        counted_loop(a, s_br, br, br_step, "br")
        if relu_c:  # last touch relu, once every column is in
            getattr(a, t.v("vxor"))(zero, zero, zero)
            elementwise(rows, lambda v: _relu(a, t, v, zero), read=True)
        a.add(A, rows * es)
        if form.trans_c:
            y_copy(rows, gather=False)
        else:
            a.add(Y, rows * es)

    full, rem = divmod(m, block_rows)
    counted_loop(a, s_blocks, full, lambda: block(block_rows), "m_blocks")
    if rem:
        block(rem)
    frame.leave(a)


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


def _emit_rows(a: Assembler, t: Target, frame: Frame, form: Form, tail: Partial | None) -> None:
    m, k, br, trans_b, zero_c, relu_c = form.m, form.k, form.br, form.trans_b, form.zero_c, form.relu_c
    es, vb = t.es, t.vbytes
    s_groups, s_br = frame.slot("row_groups"), frame.slot("br")
    bc, kc = x_chunks(k, br, es) if trans_b else (br, k)
    chunked = (bc, kc) != (br, k)
    s_xbuf = frame.buffer("x", bc * kc * es) if trans_b else None
    if chunked:  # x in chunks: A, x and y at the chunk, the BR strides (bytes), the chunk counters
        s_a, s_x, s_y, s_bsb = (frame.slot(x) for x in ("a_chunk", "x_chunk", "y", "bsb"))
        s_chunks, s_pieces = frame.slot("x_chunks"), frame.slot("k_pieces")
        s_a_br, s_x_br = frame.slot("a_br"), frame.slot("x_br")  # K pieces: the BR step's start
    regs = t.vregs
    acc = [regs[r * DOT_VECTORS : (r + 1) * DOT_VECTORS] for r in range(DOT_ROWS)]
    base = DOT_ROWS * DOT_VECTORS
    xv, tmp = regs[base : base + DOT_VECTORS], regs[base + DOT_VECTORS]
    zero, red = xv[0], tmp  # after the K loop: the relu's zero and the reduction's scratch
    row = (None, LDA, (LDA, 2), LDA3)  # row r of the group: PA + row[r]
    # y[r] of the group: Y + y_at[r] (strided y: LDC_R, LDC3_R hold its stride and 3 strides, bytes)
    y_at = (None, (LDC_R, 1), (LDC_R, 2), (LDC3_R, 1)) if form.trans_c else tuple(r * es for r in range(4))
    _prologue(a, t, frame, br, trans_b, tail, (BSA, BSB))
    if form.trans_c:
        a.mov(LDC_R, LDC)
        a.shl(LDC_R, LOG2[es])

    def copy_x(steps: int, count: int, x_step) -> None:
        """x's ``count`` elements of each of ``steps`` BR steps (``x_step`` bytes apart) from X
        into the buffer, which X then points to (BSB: one step's elements there)."""
        a.mov(rax, s_xbuf)
        a.mov(X_BR, X)
        if chunked and form.trans_c:  # INCX3 is LDC3_R between the copies
            a.lea(INCX3, ptr(INCX + INCX * 2))

        def copy_step() -> None:
            a.mov(PX, X_BR)
            _strided_copy(a, t, count, PX, rax, INCX, INCX3, CNT, regs[0].xmm, gather=True)
            if steps > 1:
                a.add(X_BR, x_step)

        counted_loop(a, A_BR, steps, copy_step, "copy_br")
        a.mov(X, s_xbuf)
        if steps > 1:
            a.mov(BSB, count * es)

    def at(r: int, disp: int):
        off = row[r]
        if off is None:
            return PA + disp
        reg, scale = off if isinstance(off, tuple) else (off, 1)
        return PA + reg * scale + disp

    def k_step(rows: int, nv: int, part: Partial | None) -> None:
        """``nv`` vectors of K (the last one partial): x loaded once, one FMA per row and vector."""
        for v in range(nv):
            if v == nv - 1 and part is not None:
                part.load(a, xv[v], PX + v * vb)
            else:
                getattr(a, t.v("vmovu"))(xv[v], t.vmem(PX + v * vb))
        for v in range(nv):
            for r in range(rows):
                if v == nv - 1 and part is not None:
                    part.load(a, tmp, at(r, v * vb))
                    getattr(a, t.v("vfmadd231"))(acc[r][v], xv[v], tmp)
                else:
                    getattr(a, t.v("vfmadd231"))(acc[r][v], xv[v], t.vmem(at(r, v * vb)))

    def y_addr(r: int):
        off = y_at[r]
        return Y if off is None else Y + off if isinstance(off, int) else Y + off[0] * off[1]

    def reduce_into_y(r: int, zero_y: bool, relu: bool) -> None:
        """y[r] (+)= the lanes of row r's accumulators summed (then relu)."""
        s = acc[r][0]
        for v in range(1, DOT_VECTORS):
            getattr(a, t.v("vadd"))(s, s, acc[r][v])
        if t.isa == "avx512":
            a.vextractf64x4(red.ymm, s, 1)
            getattr(a, t.v("vadd"))(s.ymm, s.ymm, red.ymm)
        a.vextractf128(red.xmm, s.ymm, 1)
        getattr(a, t.v("vadd"))(s.xmm, s.xmm, red.xmm)
        if es == 4:
            a.vshufps(red.xmm, s.xmm, s.xmm, 0x0E)
            a.vaddps(s.xmm, s.xmm, red.xmm)
            a.vshufps(red.xmm, s.xmm, s.xmm, 0x01)
        else:
            a.vshufpd(red.xmm, s.xmm, s.xmm, 0x01)
        getattr(a, t.s("vadd"))(s.xmm, s.xmm, red.xmm)
        if not zero_y:
            getattr(a, t.s("vadd"))(s.xmm, s.xmm, t.smem(y_addr(r)))
        if relu:
            _relu(a, t, s.xmm, zero.xmm, scalar=True)
        getattr(a, t.s("vmov"))(t.smem(y_addr(r)), s.xmm)

    def row_pass(kk: int, steps: int, zero_y: bool, relu: bool) -> None:
        """Every row group over ``steps`` BR steps of ``kk`` elements of K from A and X (A and Y
        move on past the rows)."""
        full_steps, rest = divmod(kk, DOT_VECTORS * t.vl)
        rest_vectors = -(-rest // t.vl)

        def group(rows: int) -> None:
            """``rows`` rows of A (every BR step) into ``rows`` elements of y."""
            for r in range(rows):
                for v in range(DOT_VECTORS):
                    getattr(a, t.v("vxor"))(acc[r][v], acc[r][v], acc[r][v])
            a.mov(A_BR, A)
            a.mov(X_BR, X)

            def k_loop() -> None:
                k_step(rows, DOT_VECTORS, None)
                a.add(PA, DOT_VECTORS * vb)
                a.add(PX, DOT_VECTORS * vb)

            def br_step() -> None:
                a.mov(PA, A_BR)
                a.mov(PX, X_BR)
                counted_loop(a, CNT, full_steps, k_loop, "k")
                if rest_vectors:  # only the last piece of K has a tail (kc is whole vectors)
                    k_step(rows, rest_vectors, tail if kk % t.vl else None)
                if steps > 1:
                    a.add(A_BR, BSA)
                    a.add(X_BR, BSB)

            counted_loop(a, s_br, steps, br_step, "br")
            if relu:
                getattr(a, t.v("vxor"))(zero, zero, zero)
            for r in range(rows):
                reduce_into_y(r, zero_y, relu)
            if rows == DOT_ROWS:
                a.lea(A, ptr(A + LDA * 4))
                if form.trans_c:
                    a.lea(Y, ptr(Y + LDC_R * 4))
                else:
                    a.add(Y, DOT_ROWS * es)

        counted_loop(a, s_groups, m // DOT_ROWS, lambda: group(DOT_ROWS), "row_groups")
        if m % DOT_ROWS:
            group(m % DOT_ROWS)

    def y_pass(op, read: bool) -> None:
        """``op(element)`` on each y[m] in place (``read``: loaded first), one at a time."""
        a.mov(Y, s_y)

        def one() -> None:
            if read:
                getattr(a, t.s("vmov"))(tmp.xmm, t.smem(Y))
            op(tmp.xmm)
            getattr(a, t.s("vmov"))(t.smem(Y), tmp.xmm)
            if form.trans_c:
                a.add(Y, LDC_R)
            else:
                a.add(Y, es)

        counted_loop(a, s_groups, m, one, "y_pass")

    if not chunked:
        if trans_b:  # strided x: every BR step's K elements into the buffer, which the rows then read
            copy_x(br, k, BSB)
        if form.trans_c:
            a.lea(LDC3_R, ptr(LDC_R + LDC_R * 2))
        row_pass(k, br, zero_c, relu_c)
        frame.leave(a)
        return

    # x too long for the buffer: chunks of (bc BR steps) x (kc K elements), each copied and then
    # added into y by every row group; y is zeroed before the first chunk and relu'd after the last
    a.mov(s_a, A)
    a.mov(s_x, X)
    a.mov(s_y, Y)
    if br > 1:
        a.mov(s_bsb, BSB)
    if zero_c:
        y_pass(lambda v: getattr(a, t.v("vxor"))(v, v, v), read=False)

    def chunk(steps: int, kk: int) -> None:
        """One chunk: its x into the buffer, then every row group (A, x and y from the slots)."""
        a.mov(A, s_a)
        a.mov(X, s_x)
        copy_x(steps, kk, s_bsb)
        a.mov(Y, s_y)
        if form.trans_c:
            a.lea(LDC3_R, ptr(LDC_R + LDC_R * 2))
        row_pass(kk, steps, False, False)

    if kc == k:  # whole BR steps per chunk: A and x move on by bc steps

        def steps_chunk() -> None:
            chunk(bc, k)
            for slot, stride in ((s_a, BSA), (s_x, s_bsb)):
                a.imul(rax, stride, bc)
                a.add(slot, rax)

        counted_loop(a, s_chunks, br // bc, steps_chunk, "x_chunks")
        if br % bc:
            chunk(br % bc, k)
    else:  # one BR step at a time, its K in pieces of kc: A on by kc elements, x by kc strides

        def piece(kk: int) -> None:
            chunk(1, kk)
            a.add(s_a, kk * es)
            a.imul(rax, INCX, kk)
            a.add(s_x, rax)

        def br_step() -> None:
            a.mov(rax, s_a)
            a.mov(s_a_br, rax)
            a.mov(rax, s_x)
            a.mov(s_x_br, rax)
            counted_loop(a, s_pieces, k // kc, lambda: piece(kc), "k_pieces")
            if k % kc:
                chunk(1, k % kc)
            if br > 1:  # the next step from this one's start
                for slot, start, stride in ((s_a, s_a_br, BSA), (s_x, s_x_br, s_bsb)):
                    a.mov(rax, start)
                    a.add(rax, stride)
                    a.mov(slot, rax)

        counted_loop(a, s_chunks, br, br_step, "br_steps")
    if relu_c:
        getattr(a, t.v("vxor"))(zero, zero, zero)
        y_pass(lambda v: _relu(a, t, v, zero.xmm, scalar=True), read=True)
    frame.leave(a)
