"""SVE unary primitives, vector-length agnostic: B = op(A) or B = op(A)^T.

Column-major, strides in elements: A is M x N (``a[m + n*lda]``); B is M x N
(``b[m + n*ldb]``) or, transposed, N x M (``b[n + m*ldb]``). The kernel

    void f(const T* a, T* b, int64_t lda, int64_t ldb)

applies ``zero``, ``copy`` (alias ``identity``) or ``relu`` (``np.maximum(x,
0)``: NaN stays NaN, -0.0 becomes +0.0 as in numpy).

Plain form: per column, up to 4 vectors of M per step, one ``whilelt``
predicate each (lanes counted with ``cntw``/``cntd`` at run time). Zero
transposed is the plain zero kernel over B's N x M shape.

Transposed form: 128-bit tiles (4 x 4 fp32, 2 x 2 fp64), loaded column by
column with a ``ptrue vl4``/``vl2`` predicate (``vl<r>`` at the edges) and
transposed with ``trn1``/``trn2`` on .s then .d elements. TRN works on
neighbouring element pairs, so the low 128 bits hold the same tile at every
vector length; the stores write only those lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from asm.aarch64 import Assembler, P, Z, mem, x0, x1, x2, x3, x8, x9, x10, x11, x12, x13, x14, x15
from asm.aarch64.registers import XReg
from minijit.kernels.aarch64.brgemm import SveBrgemm
from minijit.kernels.aarch64.common import DType, check_choice, check_positive, dtype_info, generator, unary_signature

__all__ = ["PTYPES", "column_sweep", "generate", "program", "signature"]

PTYPES = ("zero", "copy", "identity", "relu")
A, B, LDA, LDB = x0, x1, x2, x3
I, M_REG, COUNT, TMP = x8, x9, x10, x11  # row offset (elements), m, column counter, scratch
XA, XB, WA, WB = x12, x13, x14, x15  # tile pointers and column walkers


signature = unary_signature


def _check(m: int, n: int, dtype: str, ptype: str) -> DType:
    check_positive(None, m=m, n=n)
    check_choice("ptype", ptype, PTYPES, show=str)
    return dtype_info(dtype)


def column_sweep(
    a: Assembler,
    t: DType,
    rows: int,
    cols: int,
    columns: Sequence[tuple[XReg, XReg, XReg]],
    step: Callable[[int], None],
) -> None:
    """Column by column, up to 4 predicated vectors (p1..p4) of ``rows`` per step (shared with sve_binary).

    ``columns``: (column pointer, byte stride, walker) per matrix; each step sets
    the walker to the column pointer + I elements, each column moves the pointer
    by the stride. ``step(nv)`` loads, transforms and stores the ``nv`` vectors
    at the walkers.
    """
    nv = SveBrgemm.max_vectors(rows, t)
    preds = [getattr(P[v + 1], t.es) for v in range(nv)]
    a.mov(M_REG, rows)
    a.mov(COUNT, cols)
    col = a.label("col")
    a.mov(I, 0)
    row = a.label("row")
    end = a.new_label("col_end")
    # predicates of the nv vectors at I; none active: column done
    a.whilelt(preds[0], I, M_REG)
    a.b_none(end)
    for v in range(1, nv):
        if v == 1:
            a.mov(TMP, I)
        t.inc(a, TMP)
        a.whilelt(preds[v], TMP, M_REG)
    for base, _, walker in columns:
        a.add(walker, base, I, "lsl", t.shift)
    step(nv)
    t.inc(a, I, nv)
    a.b(row)
    a.bind(end)
    for base, stride, _ in columns:  # next column
        a.add(base, base, stride)
    a.subs(COUNT, COUNT, 1)
    a.b_ne(col)


def _op(a: Assembler, t: DType, ptype: str, z: Any) -> None:
    """Apply the element-wise op in place (copy: nothing)."""
    if ptype == "relu":
        a.fmax(z, P[0].m, z, 0.0)


def _plain_step(a: Assembler, t: DType, ptype: str, nv: int) -> None:
    """Load and transform ``nv`` vectors at XA, store them at XB (zero: store z0)."""
    zs = [t.z(v) for v in range(nv)]
    for v in range(nv):  # load and transform
        if ptype != "zero":
            t.ld1(a, zs[v], P[v + 1].z, mem(XA, vl=v))
            _op(a, t, ptype, zs[v])
    for v in range(nv):  # store
        t.st1(a, zs[0] if ptype == "zero" else zs[v], P[v + 1], mem(XB, vl=v))


def _plain(a: Assembler, t: DType, rows: int, cols: int, ptype: str) -> None:
    """Column by column: up to 4 predicated vectors of rows per step."""
    if ptype == "zero":
        a.mov(t.z(0), 0)
    column_sweep(a, t, rows, cols, [(A, LDA, XA), (B, LDB, XB)], partial(_plain_step, a, t, ptype))


def _transposed(a: Assembler, t: DType, m: int, n: int, ptype: str) -> None:
    """128-bit tiles: load q columns of A, transpose with trn1/trn2, store q columns of B."""
    q = 16 // t.size  # tile edge: lanes in 128 bits
    lg = q.bit_length() - 1
    mi, mr = divmod(m, q)
    nj, nr = divmod(n, q)
    full, m_edge, n_edge = (getattr(P[i], t.es) for i in (1, 2, 3))
    a.ptrue(full, f"vl{q}")
    if mr:
        a.ptrue(m_edge, f"vl{mr}")
    if nr:
        a.ptrue(n_edge, f"vl{nr}")

    def tile(rows: int, cols: int) -> None:
        # A columns j..j+cols (rows i..i+rows) -> z0..z(cols-1)
        load = full if rows == q else m_edge
        a.mov(WA, XA)
        for c in range(cols):
            t.ld1(a, t.z(c), P[load.idx].z, mem(WA))
            if c < cols - 1:
                a.add(WA, WA, LDA)
        # transpose in the low 128 bits (pairs z16..z19, rows z4..z7; z8..z15 stay untouched)
        if q == 4:
            a.trn1(t.z(16), t.z(0), t.z(1))
            a.trn2(t.z(17), t.z(0), t.z(1))
            a.trn1(t.z(18), t.z(2), t.z(3))
            a.trn2(t.z(19), t.z(2), t.z(3))
            a.trn1(Z[4].d, Z[16].d, Z[18].d)  # row 0
            a.trn1(Z[5].d, Z[17].d, Z[19].d)  # row 1
            a.trn2(Z[6].d, Z[16].d, Z[18].d)  # row 2
            a.trn2(Z[7].d, Z[17].d, Z[19].d)  # row 3
        else:
            a.trn1(Z[4].d, Z[0].d, Z[1].d)
            a.trn2(Z[5].d, Z[0].d, Z[1].d)
        # B columns i..i+rows, elements j..j+cols
        store = full if cols == q else n_edge
        a.mov(WB, XB)
        for r in range(rows):
            _op(a, t, ptype, t.z(4 + r))
            t.st1(a, t.z(4 + r), P[store.idx], mem(WB))
            if r < rows - 1:
                a.add(WB, WB, LDB)

    def column_block(cols: int) -> None:
        # tiles down the rows of A: XA steps q elements, XB steps q columns of B
        a.mov(XA, A)
        a.mov(XB, B)
        if mi:
            if mi > 1:
                a.mov(COUNT, mi)
            row = a.label("tiles") if mi > 1 else None
            tile(q, cols)
            if mi > 1 or mr:
                a.add(XA, XA, q * t.size)
                a.add(XB, XB, LDB, "lsl", lg)
            if mi > 1:
                a.subs(COUNT, COUNT, 1)
                a.b_ne(row)
        if mr:
            tile(mr, cols)

    # column blocks of q columns of A (rows of B), then the remainder
    if nj:
        if nj > 1:
            a.mov(I, nj)
        cols = a.label("cols") if nj > 1 else None
        column_block(q)
        if nj > 1 or nr:
            a.add(A, A, LDA, "lsl", lg)
            a.add(B, B, q * t.size)
        if nj > 1:
            a.subs(I, I, 1)
            a.b_ne(cols)
    if nr:
        column_block(nr)


def program(m: int, n: int, trans_b: bool = False, dtype: str = "fp32", ptype: str = "copy") -> Assembler:
    """The unary kernel as an `Assembler` (``code()``, ``listing()``). Raises ValueError."""
    t = _check(m, n, dtype, ptype)
    a = Assembler(name=f"sve_unary_{ptype}_{dtype}_{m}x{n}{'_t' if trans_b else ''}")
    a.lsl(LDA, LDA, t.shift)  # strides to bytes
    a.lsl(LDB, LDB, t.shift)
    a.ptrue(getattr(P[0], t.es))
    if not trans_b:
        _plain(a, t, m, n, ptype)
    elif ptype == "zero":
        _plain(a, t, n, m, ptype)  # B is N x M
    else:
        _transposed(a, t, m, n, ptype)
    a.ret()
    return a


generate = generator(
    program, signature, "A callable unary kernel (native on AArch64, else emulated at SVE length ``sve_vl`` bits)."
)
