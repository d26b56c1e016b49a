"""x86-64 GEMV: the BRGEMM of one column, ``c += sum_br A_br b_br`` (column-major, strides in elements).

``generate(m, k, br_size, ...)`` returns a Kernel with `minijit.kernels.x86_64.brgemm`'s signature
for N = 1: ``void(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc,
int64_t br_stride_a, int64_t br_stride_b)``, with A M x K (``a[m + k*lda]``, or ``a[k + m*lda]``
with ``trans_a``), x the K-vector ``b[k]`` (``b[k*ldb]`` with ``trans_b``), y = ``c[m]`` (``ldc``
is not read) and ``A_br = a + br*br_stride_a``. Every element of A is used once, so the kernel is
a stream over A: what it must do is keep the loads of A sequential and every vector lane busy,
which a GEMM register block of one column does not (2 FMA chains of 8 rows on AVX2 for the
column-major form, one scalar chain per element for the transposed one).

Column form (``trans_a`` false; y += A x, the axpy order): y is walked in M blocks of
`M_BLOCK_BYTES` (which stay in L1 over all of K); for each block, each BR step and each group of
`COLS` columns of A, the group's x elements are broadcast once and a pass down the block's rows
adds ``COLS`` columns into ``ROW_VECTORS`` vectors of y at a time (``COLS`` sequential streams of
A, y loaded and stored once per group). Then the K remainder columns, one pass.

Row form (``trans_a``; y[m] += dot(A row m, x), the dot order; x must be contiguous, so not with
``trans_b``): `DOT_ROWS` rows at a time, each with `DOT_VECTORS` vector accumulators, walk K
(every BR step) together, loading each x vector once for all rows; the K tail is one masked
vector; each row's accumulators are then summed across lanes into y[m].

The last partial vector (of M in the column form, of K in the row form) is loaded and stored
under an opmask (AVX-512) or with vmaskmov (AVX2), so nothing outside the operands is touched.
Fused touches: ``zero_c`` (y = A x: y is not read) and ``relu_c`` (y = relu(y + A x), applied
before the last store of each element).
"""

from __future__ import annotations

from asm.x86_64 import Assembler, ptr
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import LOG2, Frame, Partial, Target, build, check_flag, check_size, counted_loop
from minijit.kernels.x86_64.common import brgemm_signature as signature
from minijit.runtime.kernel import Kernel

__all__ = ["generate", "M_BLOCK_BYTES", "COLS", "ROW_VECTORS", "DOT_ROWS", "DOT_VECTORS"]

MAX_SIZE = 1 << 16
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

A, X, Y, LDA, INCX = rdi, rsi, rdx, rcx, r8  # arguments (A at the M block / row group)
LDA3, INCX3, BSA, BSB = r10, r11, r12, r13  # 3*lda, 3*incx, BR strides (bytes; row form)
LDA5, LDA7 = r12, r13  # column form: 5*lda, 7*lda (its BR strides live in stack slots)
PA, PX, ROWS_A, ROWS_Y, CNT, KCNT = rax, rbx, r14, r15, r9, rbp  # walking pointers and counters
A_BR, X_BR = r14, r15  # row form: A and x at the BR step
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
    zero_c: bool = False,
    relu_c: bool = False,
) -> Kernel:
    """Generate the GEMV kernel (see the module docstring); bad arguments raise ValueError."""
    check_size("m", m, 1, MAX_SIZE)
    check_size("k", k, 1, MAX_SIZE)
    check_size("br_size", br_size, 1, 1 << 24)
    trans_a, trans_b = check_flag("trans_a", trans_a), check_flag("trans_b", trans_b)
    zero_c, relu_c = check_flag("zero_c", zero_c), check_flag("relu_c", relu_c)
    t = Target.of(dtype, isa)
    if trans_a and trans_b:
        raise ValueError("the row form (trans_a) needs a contiguous x (trans_b=False)")
    a = Assembler(name="gemv")
    frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
    tail = Partial.column_tail(a, t, k if trans_a else m, t.vregs[15])
    (_emit_rows if trans_a else _emit_columns)(a, t, frame, m, k, br_size, trans_b, zero_c, relu_c, tail)
    if tail is not None:
        tail.emit_data(a)
    flags = (
        ("_ta" if trans_a else "") + ("_tb" if trans_b else "") + ("_z" if zero_c else "") + ("_r" if relu_c else "")
    )
    return build(a, signature(t.ctype), f"gemv_{dtype}_{isa}_{m}x{k}_br{br_size}{flags}")


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
def _emit_columns(
    a: Assembler, t: Target, frame: Frame, m: int, k: int, br: int, trans_b: bool, zero_c, relu_c, tail
) -> None:
    es, vb = t.es, t.vbytes
    s_blocks, s_br, s_a, s_x = (frame.slot(x) for x in ("m_blocks", "br", "a_br", "x_br"))
    s_bsa, s_bsb = frame.slot("bsa"), frame.slot("bsb")
    regs = t.vregs
    acc, xs, tmp = regs[:ROW_VECTORS], regs[ROW_VECTORS : ROW_VECTORS + COLS], regs[ROW_VECTORS + COLS]
    zero = xs[0]  # the zero / relu passes run while no x is held
    # column j of the group: ROWS_A + col[j]; x element j: PX + x_at[j % 4] (PX on by 4 after 4)
    col = (None, LDA, (LDA, 2), LDA3, (LDA, 4), LDA5, (LDA3, 2), LDA7)
    x_at = (None, INCX, (INCX, 2), INCX3) if trans_b else tuple(j * es for j in range(4))
    block_rows = M_BLOCK_BYTES // es  # a multiple of every vector length
    _prologue(a, t, frame, br, trans_b, tail, (s_bsa, s_bsb))
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

    def block(rows: int) -> None:
        """One M block: every BR step's columns into its ``rows`` rows of y."""
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
        a.add(Y, rows * es)

    full, rem = divmod(m, block_rows)
    counted_loop(a, s_blocks, full, lambda: block(block_rows), "m_blocks")
    if rem:
        block(rem)
    frame.leave(a)


# -- row form: y[m] += dot(A row m, x), DOT_ROWS rows at a time -----------------------------------
def _emit_rows(a: Assembler, t: Target, frame: Frame, m: int, k: int, br: int, trans_b, zero_c, relu_c, tail) -> None:
    es, vb = t.es, t.vbytes
    s_groups, s_br = frame.slot("row_groups"), frame.slot("br")
    regs = t.vregs
    acc = [regs[r * DOT_VECTORS : (r + 1) * DOT_VECTORS] for r in range(DOT_ROWS)]
    base = DOT_ROWS * DOT_VECTORS
    xv, tmp = regs[base : base + DOT_VECTORS], regs[base + DOT_VECTORS]
    zero, red = xv[0], tmp  # after the K loop: the relu's zero and the reduction's scratch
    row = (None, LDA, (LDA, 2), LDA3)  # row r of the group: PA + row[r]
    _prologue(a, t, frame, br, trans_b, tail, (BSA, BSB))

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

    def reduce_into_y(r: int) -> None:
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
        if not zero_c:
            getattr(a, t.s("vadd"))(s.xmm, s.xmm, t.smem(Y + r * es))
        if relu_c:
            _relu(a, t, s.xmm, zero.xmm, scalar=True)
        getattr(a, t.s("vmov"))(t.smem(Y + r * es), s.xmm)

    full_steps, rest = divmod(k, DOT_VECTORS * t.vl)
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
            if rest_vectors:
                k_step(rows, rest_vectors, tail)
            if br > 1:
                a.add(A_BR, BSA)
                a.add(X_BR, BSB)

        counted_loop(a, s_br, br, br_step, "br")
        if relu_c:
            getattr(a, t.v("vxor"))(zero, zero, zero)
        for r in range(rows):
            reduce_into_y(r)
        if rows == DOT_ROWS:
            a.lea(A, ptr(A + LDA * 4))
            a.add(Y, DOT_ROWS * es)

    counted_loop(a, s_groups, m // DOT_ROWS, lambda: group(DOT_ROWS), "row_groups")
    if m % DOT_ROWS:
        group(m % DOT_ROWS)
    frame.leave(a)
