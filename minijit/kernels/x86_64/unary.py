"""x86-64 unary primitives: ``B = op(A)`` or ``B = op(A)^T`` (column-major, strides in elements).

``generate(m, n, trans_b, dtype, ptype, isa)`` returns a Kernel
``void(const T* a, T* b, int64_t lda, int64_t ldb)``; A is M x N
(``a[m + n*lda]``), B is M x N (``b[m + n*ldb]``) or, with ``trans_b``,
N x M (``b[n + m*ldb]``). ``a`` is not read for ptype "zero" (pass any array).

ptype: "zero", "copy" (= "identity"), "relu" (``np.maximum(x, 0)`` exactly:
NaN stays NaN, -0.0 becomes +0.0; computed as ``vmax(0, x) + 0``).

Without transposition each column is covered by vectors (groups of four in a
loop, then single vectors, then one masked partial vector; with ``dense_b`` a whole
vector whose spill the next columns overwrite). With
transposition the main part is tiled in register transposes (fp32 8x8,
fp64 4x4 ymm blocks: vunpck, vshuf, vperm2f128); the edge rows and columns
are done element by element.
"""

from __future__ import annotations

from asm.x86_64 import YMM, Assembler, ptr
from asm.x86_64.registers import r8, r9, r10, r11, rax, rbx, rcx, rdi, rdx, rsi, xmm0, xmm1
from minijit.kernels.x86_64.common import (
    LOG2,
    Frame,
    Partial,
    Target,
    build,
    check_choice,
    check_flag,
    check_size,
    counted_loop,
    element_loops,
    emit_column,
    relu,
)
from minijit.runtime.kernel import Kernel

__all__ = ["generate", "PTYPES"]

PTYPES = ("zero", "copy", "identity", "relu")
MAX_SIZE = 1 << 16


def signature(ctype: str) -> str:
    return f"void(const {ctype}* a, {ctype}* b, int64_t lda, int64_t ldb)"


def generate(
    m: int,
    n: int,
    trans_b: bool = False,
    dtype: str = "fp32",
    ptype: str = "copy",
    isa: str = "avx512",
    dense_b: bool = False,
) -> Kernel:
    """Generate the unary kernel (see the module docstring). Bad arguments raise ValueError.

    ``dense_b`` with ``trans_b``: B's rows are exactly ``n`` elements apart (a packed micro-panel:
    the whole N x M block is one contiguous run); the kernel then ignores the ``ldb`` argument and,
    when ``n`` is narrower than a register tile, stores each tile's rows with full vectors in
    increasing address order where the spill stays inside the tile (later rows' stores overwrite
    it; the rows a spill would leave the tile from are stored exactly) instead of masked stores (vmaskmov stores are
    microcoded on AMD Zen 2/3).
    ``dense_b`` without ``trans_b``: B's columns are exactly ``m`` elements apart (``ldb`` = m at the
    call: the M x N block is one contiguous run, e.g. 6-column rows of a packed B panel), and B
    does not overlap A. Each column's partial last vector is then stored whole: its spill lands in
    the next columns, which are written later; the columns whose spill would leave the block are
    stored under the mask."""
    check_size("m", m, 1, MAX_SIZE)
    check_size("n", n, 1, MAX_SIZE)
    trans_b = check_flag("trans_b", trans_b)
    dense_b = check_flag("dense_b", dense_b)
    ptype = check_choice("ptype", ptype, PTYPES)
    t = Target.of(dtype, isa)
    a = Assembler(name="unary")
    op = "copy" if ptype == "identity" else ptype
    if trans_b:
        _emit_transposed(a, t, m, n, op, dense_b)
    else:
        _emit_plain(a, t, m, n, op, dense_b)
    name = f"unary_{ptype}_{dtype}_{isa}_{m}x{n}{'_t' if trans_b else ''}{'_dense' if dense_b else ''}"
    return build(a, signature(t.ctype), name)


def _op(a: Assembler, t: Target, ptype: str, x, zero, scalar: bool = False) -> None:
    """``x = op(x)`` in place (copy: nothing; relu: vmax(0, x) + 0)."""
    if ptype == "relu":
        relu(a, t, x, zero, scalar)


def _emit_plain(a: Assembler, t: Target, m: int, n: int, ptype: str, dense_b: bool = False) -> None:
    """Column by column: b[:, j] = op(a[:, j]) (``dense_b``: see `generate`)."""
    lda, ldb, pa, pb = rdx, rcx, rax, r10
    regs = t.vregs
    zero = regs[4]
    part = Partial.column_tail(a, t, m, maskreg=regs[15])
    a.shl(lda, LOG2[t.es])
    a.shl(ldb, LOG2[t.es])
    getattr(a, t.v("vxor"))(zero, zero, zero)
    if part is not None:
        part.setup(a, r11)

    def vector(u: int, disp: int, p: Partial | None, spill: bool = False) -> None:
        x = zero if ptype == "zero" else regs[u]
        if ptype != "zero":
            if p is not None:
                p.load(a, x, pa + disp)
            else:
                getattr(a, t.v("vmovu"))(x, t.vmem(pa + disp))
            _op(a, t, ptype, x, zero)
        if p is not None and not spill:
            p.store(a, pb + disp, x)
        else:
            getattr(a, t.v("vmovu"))(t.vmem(pb + disp), x)

    def column(spill: bool = False) -> None:
        a.mov(pa, rdi)
        a.mov(pb, rsi)
        body = (lambda u, disp, p: vector(u, disp, p, spill=True)) if spill else vector
        emit_column(a, t, m, [pa, pb], r9, body, part)
        a.add(rdi, lda)
        a.add(rsi, ldb)

    # dense B: column j's whole last vector ends at j*m + ceil(m/vl)*vl, inside the block (n*m) for
    # the first `spilling` columns; the later columns (and every column without dense_b) store exactly
    reach = -(-m // t.vl) * t.vl
    spilling = min(n, max(0, (n * m - reach) // m + 1)) if dense_b and part is not None else 0
    counted_loop(a, r8, spilling, lambda: column(spill=True), "n_dense")
    counted_loop(a, r8, n - spilling, column, "n")
    a.vzeroupper()
    a.ret()
    if part is not None:
        part.emit_data(a)


def _transpose8x8_ps(a: Assembler, r: list, s: list) -> list:
    """Transpose the 8x8 fp32 block in ``r`` (rows) using ``s`` as scratch; returns the output rows."""
    for i in range(4):
        a.vunpcklps(s[2 * i], r[2 * i], r[2 * i + 1])
        a.vunpckhps(s[2 * i + 1], r[2 * i], r[2 * i + 1])
    for h in range(2):  # s[4h..4h+3] -> r[4h..4h+3]
        t0, t1, t2, t3 = s[4 * h : 4 * h + 4]
        a.vshufps(r[4 * h + 0], t0, t2, 0x44)
        a.vshufps(r[4 * h + 1], t0, t2, 0xEE)
        a.vshufps(r[4 * h + 2], t1, t3, 0x44)
        a.vshufps(r[4 * h + 3], t1, t3, 0xEE)
    for i in range(4):
        a.vperm2f128(s[i], r[i], r[4 + i], 0x20)
        a.vperm2f128(s[4 + i], r[i], r[4 + i], 0x31)
    return s


def _transpose4x4_pd(a: Assembler, r: list, s: list) -> list:
    """Transpose the 4x4 fp64 block in ``r`` using ``s`` as scratch; returns the output rows."""
    a.vunpcklpd(s[0], r[0], r[1])
    a.vunpckhpd(s[1], r[0], r[1])
    a.vunpcklpd(s[2], r[2], r[3])
    a.vunpckhpd(s[3], r[2], r[3])
    a.vperm2f128(r[0], s[0], s[2], 0x20)
    a.vperm2f128(r[1], s[1], s[3], 0x20)
    a.vperm2f128(r[2], s[0], s[2], 0x31)
    a.vperm2f128(r[3], s[1], s[3], 0x31)
    return r[:4]


def _store_exact(a: Assembler, es: int, addr, src, count: int, spare) -> None:
    """Store the first ``count`` lanes of ymm ``src`` at ``addr`` with unmasked xmm/scalar stores
    (``spare``: a free ymm register)."""
    lo, hi = src.xmm, spare.xmm
    half = 16 // es  # lanes per xmm
    part, rest, disp = lo, count, 0
    if count >= half:
        a.vmovups(ptr(addr), lo) if es == 4 else a.vmovupd(ptr(addr), lo)
        rest, disp = count - half, 16
        if rest:
            a.vextractf128(hi, src, 1)
            part = hi
    if not rest:
        return
    if es == 8:  # one double left
        a.vmovsd(ptr(addr + disp), part)
        return
    if rest >= 2:
        a.vmovsd(ptr(addr + disp), part)  # two floats: the low 64 bits, bit for bit
    if rest != 2:
        if rest == 3:
            a.vshufps(hi, part, part, 2)  # lane 2 -> lane 0
            a.vmovss(ptr(addr + disp + 8), hi)
        else:
            a.vmovss(ptr(addr + disp), part)


def _emit_transposed(a: Assembler, t: Target, m: int, n: int, ptype: str, dense_b: bool = False) -> None:
    """b[j + i*ldb] = op(a[i + j*lda]): T x T register transposes, element-wise edges."""
    T = 8 if t.es == 4 else 4  # ymm block edge
    lda, ldb = rdx, rcx
    es = t.es
    ymm = list(YMM[:16])
    rows, scratch = ymm[:T], ymm[8 : 8 + T]
    zero = scratch[T - 1]  # free until the first unpack writes it
    mf, nf = m - m % T, n - n % T
    spare = ymm[4] if T == 4 else rows[0]  # free once a block is transposed
    frame = Frame(saved=[rbx])
    frame.enter(a)
    a.shl(lda, LOG2[es])
    if dense_b:
        a.mov(ldb, n * es)  # B's rows are n elements apart, whatever the argument says
    else:
        a.shl(ldb, LOG2[es])
    vmov = "vmovups" if es == 4 else "vmovupd"

    def tile(cols: int = T, part: Partial | None = None, spill: bool = False) -> None:
        # ``cols`` columns of A (T rows each) at r10 -> registers, op, transposed
        if ptype != "zero":
            a.vxorps(zero, zero, zero)
        a.mov(rax, r10)
        for j in range(cols):
            if ptype == "zero":
                a.vxorps(rows[j], rows[j], rows[j])
            else:
                getattr(a, vmov)(rows[j], ptr(rax))
                _op(a, t, ptype, rows[j], zero)
            if j < cols - 1:
                a.add(rax, lda)
        out = _transpose8x8_ps(a, rows, scratch) if T == 8 else _transpose4x4_pd(a, rows, scratch)
        if part is not None:  # the mask register is free once the block is transposed
            part.setup(a, rax)
        # T rows of B at r11 (``cols`` lanes each under ``part``)
        a.mov(rax, r11)
        for i in range(T):
            if spill and i * cols + T <= T * cols:  # full vector: it spills into later rows of this tile
                getattr(a, vmov)(ptr(rax), out[i])
            elif spill:  # a spill would leave the tile: exactly ``cols`` lanes
                _store_exact(a, es, rax, out[i], cols, spare)
            elif part is not None:
                part.store(a, rax, out[i])
            else:
                getattr(a, vmov)(ptr(rax), out[i])
            a.add(rax, ldb)
        a.mov(r11, rax)  # next tile of B: T rows down
        a.add(r10, T * es)  # next tile of A: T elements down

    def tile_row() -> None:  # all M tiles of T columns of A
        a.mov(r10, rdi)
        a.mov(r11, rsi)
        counted_loop(a, r9, mf // T, tile, "mt")
        a.lea(rdi, ptr(rdi + lda * T))
        a.add(rsi, T * es)

    if mf and nf:
        a.push(rdi)  # keep the bases: the edges start from them
        a.push(rsi)
        counted_loop(a, r8, nf // T, tile_row, "nt")
        a.pop(rsi)
        a.pop(rdi)

    def rect(m0: int, mr: int, n0: int, nr: int) -> None:
        """Element-wise over rows m0..m0+mr-1, columns n0..n0+nr-1."""
        if not mr or not nr:
            return
        # r10 = &a[m0 + n0*lda], r11 = &b[n0 + m0*ldb]
        a.imul(r10, lda, n0) if n0 else a.xor(r10.r32, r10.r32)
        a.add(r10, rdi)
        if m0:
            a.add(r10, m0 * es)
        a.imul(r11, ldb, m0) if m0 else a.xor(r11.r32, r11.r32)
        a.add(r11, rsi)
        if n0:
            a.add(r11, n0 * es)
        getattr(a, t.v("vxor"))(xmm1, xmm1, xmm1)

        def element() -> None:
            if ptype == "zero":
                getattr(a, t.s("vmov"))(t.smem(rbx), xmm1)
            else:
                getattr(a, t.s("vmov"))(xmm0, t.smem(rax))
                _op(a, t, ptype, xmm0, xmm1, scalar=True)
                getattr(a, t.s("vmov"))(t.smem(rbx), xmm0)

        # rax, rbx walk down the column of A and the row of B; r10, r11 move on by a column
        walk = [(rax, r10, es), (rbx, r11, ldb)]
        element_loops(a, (r9, mr, "em"), (r8, nr, "en"), element, walk, advance=[(r10, lda), (r11, es)])

    rem = n - nf
    part = None
    if mf and rem and dense_b and not nf:  # rows of B back to back: overlapping full stores
        a.mov(r10, rdi)
        a.mov(r11, rsi)
        counted_loop(a, r9, mf // T, lambda: tile(rem, spill=True), "et")
        rect(mf, m - mf, 0, n)  # bottom rows, every column
    elif mf and rem:  # the last columns: T x rem tiles, rows of B stored under a rem-lane mask
        # (a packed B micro-panel is 6 columns wide: without this every element went one by one)
        maskreg = ymm[4] if T == 4 else rows[0]  # free once the block is transposed
        part = Partial(Target.of(t.dtype, "avx2"), rem, maskreg=maskreg, table=a.new_label("mask"))

        # r10 = &a[nf*lda] (column nf), r11 = &b[nf]
        if nf:
            a.imul(r10, lda, nf)
            a.add(r10, rdi)
        else:
            a.mov(r10, rdi)
        a.lea(r11, ptr(rsi + nf * es))
        counted_loop(a, r9, mf // T, lambda: tile(rem, part), "et")
        rect(mf, m - mf, 0, n)  # bottom rows, every column
    else:
        rect(mf, m - mf, 0, nf)  # bottom rows of the tiled columns
        rect(0, m, nf, n - nf)  # the remaining columns
    frame.leave(a)
    if part is not None:
        part.emit_data(a)
