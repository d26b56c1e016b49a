"""AArch64 unary primitives, NEON and SVE: B = op(A) or B = op(A)^T (column-major, strides in elements).

`NeonUnary` and `SveUnary` give ``program(m, n, trans_b, dtype, ptype)`` and ``generate(...,
sve_vl)``, a kernel ``void(const T* a, T* b, int64_t lda, int64_t ldb)``. A is M x N (``a[m +
n*lda]``); B is M x N (``b[m + n*ldb]``) or, with ``trans_b``, N x M (``b[n + m*ldb]``).
``ptype``: ``zero``, ``copy`` (alias ``identity``), ``relu`` (``np.maximum(x, 0)``: NaN stays
NaN, -0.0 gives +0.0). Nothing outside the matrices is read or written.

Plain form: an element-wise sweep down every column (NEON: 4 q registers a step, then q/d/s
pieces, `pieces.column_sweep`; SVE: up to 4 ``whilelt``-predicated vectors a step,
`predicated.column_sweep`). Zero transposed is the plain zero kernel over B's N x M shape.

Transposed form: 128-bit tiles (4 x 4 fp32, 2 x 2 fp64), one register per column of A,
transposed with ``trn1``/``trn2`` on the elements then on .d pairs, stored as rows of B. NEON edge
tiles load and store only the elements inside the matrices (3 elements: d + s with ``ins``); SVE
loads columns under ``ptrue vl4``/``vl2`` (``vl<r>`` at the edges): TRN works on neighbouring
element pairs, so the low 128 bits hold the same tile at every vector length, and the stores
write only those lanes.
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from asm.aarch64 import Assembler, P, Z, mem, x0, x1, x2, x3, x8, x9, x10, x12, x13, x14, x15, x16, x17
from asm.aarch64.registers import ScalarReg, VecReg, VElem, XReg
from minijit.kernels.aarch64.common import DType, KernelKind, check_args, check_choice, loop, unary_signature
from minijit.kernels.aarch64.pieces import Piece, ldst_pieces, transpose
from minijit.kernels.aarch64.pieces import column_sweep as neon_sweep
from minijit.kernels.aarch64.predicated import column_sweep as sve_sweep

__all__ = ["NeonUnary", "SveUnary", "Unary"]

A, B, LDA, LDB = x0, x1, x2, x3  # arguments (strides -> bytes)


class Unary(KernelKind):
    """One unary kernel being emitted: what both ISAs share (checks, names, the entry and the
    choice of form); a subclass gives the ISA's plain and transposed forms."""

    MAX_SIZE: ClassVar[int | None]  # largest m, n (None: any)
    PTYPES = ("zero", "copy", "identity", "relu")
    signature = staticmethod(unary_signature)

    def __init__(self, a: Assembler, t: DType, ptype: str) -> None:
        self.a, self.t, self.ptype = a, t, ptype

    @classmethod
    def program(cls, m: int, n: int, trans_b: bool = False, dtype: str = "fp32", ptype: str = "copy") -> Assembler:
        """The unary kernel as an `Assembler` (``code()``, ``listing()``). Bad arguments raise ValueError."""
        t = check_args(cls.MAX_SIZE, dtype, {"trans_b": trans_b}, m=m, n=n)
        check_choice("ptype", ptype, cls.PTYPES)
        a = Assembler(name=cls.name(m, n, trans_b, dtype, ptype))
        kern = cls(a, t, ptype)
        a.lsl(LDA, LDA, t.shift)  # element strides -> bytes
        a.lsl(LDB, LDB, t.shift)
        kern.entry()
        if not trans_b:
            kern.plain(m, n)
        elif ptype == "zero":  # B is N x M: zero it column by column
            kern.plain(n, m)
        else:
            kern.transposed(m, n)
        a.ret()
        return a

    @classmethod
    def name(cls, m: int, n: int, trans_b: bool, dtype: str, ptype: str) -> str:
        return f"{cls.ISA}_unary_{ptype}_{m}x{n}{'_t' if trans_b else ''}_{dtype}"

    def entry(self) -> None: ...  # after the strides: constants
    def plain(self, rows: int, cols: int) -> None: ...  # B (rows x cols) = op(A), column by column
    def transposed(self, m: int, n: int) -> None: ...  # B = op(A)^T in tiles


# -- NEON -------------------------------------------------------------------------------
V_ZERO, V_TMP = 16, 17  # a zero vector; scratch for partial loads/stores and transposes (v17..v21)
COL_CNT, ROW_CNT, XT = x8, x9, x10  # loop counters, scratch pointer
A_N, B_N, A_T, B_T = x14, x15, x16, x17  # transposed: column block of A/B, tile of A/B


class NeonUnary(Unary):
    """NEON: q registers, q/d/s pieces at the edges."""

    ISA = "neon"
    MAX_SIZE = 1 << 20

    def entry(self) -> None:
        if self.ptype in ("zero", "relu"):
            self.a.movi(VecReg(V_ZERO, "d", 2), 0)

    def op(self, a: Assembler, t: DType, ins: list[list[int]], width: int) -> list[int]:
        """The `pieces.Op` of the sweep: zero stores v16, relu is in place."""
        if self.ptype == "zero":
            return [V_ZERO] * 4
        if self.ptype == "relu":
            for r in ins[0]:
                a.fmax(t.vec(r, width), t.vec(r, width), t.vec(V_ZERO, width))
        return ins[0]

    def plain(self, rows: int, cols: int) -> None:
        neon_sweep(self.a, self.t, rows, cols, [] if self.ptype == "zero" else [(A, LDA)], (B, LDB), self.op)

    def transposed(self, m: int, n: int) -> None:
        """Tiles over N (outer) and M (inner); full tiles in counted loops, edge tiles after them."""
        a, t = self.a, self.t
        lanes = t.lanes
        a.mov(A_N, A)
        a.mov(B_N, B)

        def tile_row(cols: int) -> None:  # full tiles down the rows of A, next rows of A / columns of B
            self.tile(lanes, cols)
            a.add(A_T, A_T, lanes * t.size)
            a.mov(XT, lanes)
            a.madd(B_T, XT, LDB, B_T)

        def m_sweep(cols: int) -> None:
            a.mov(A_T, A_N)
            a.mov(B_T, B_N)
            full, rest = divmod(m, lanes)
            loop(a, ROW_CNT, full, lambda: tile_row(cols), "m", inline_one=False)
            if rest:
                self.tile(rest, cols)

        def column_block() -> None:
            m_sweep(lanes)
            a.mov(XT, lanes)
            a.madd(A_N, XT, LDA, A_N)
            a.add(B_N, B_N, lanes * t.size)

        full, rest = divmod(n, lanes)
        loop(a, COL_CNT, full, column_block, "n", inline_one=False)
        if rest:
            m_sweep(rest)

    def tile(self, rows: int, cols: int) -> None:
        """B tile (cols x rows, at B_T) = op(A tile (rows x cols, at A_T))^T."""
        a, t = self.a, self.t
        regs = list(range(t.lanes))
        a.mov(XT, A_T)
        for c in range(cols):  # column c of A: `rows` elements
            self.load_n(regs[c], rows, XT)
            if c + 1 < cols:
                a.add(XT, XT, LDA)
        if self.ptype == "relu":
            for r in regs[:cols]:
                a.fmax(t.vec(r), t.vec(r), t.vec(V_ZERO))
        out = transpose(a, t, regs, V_TMP + 1)
        a.mov(XT, B_T)
        for i in range(rows):  # row i of the tile is column m0 + i of B: `cols` elements
            self.store_n(out[i], cols, XT)
            if i + 1 < rows:
                a.add(XT, XT, LDB)

    def load_n(self, reg: int, count: int, base: XReg) -> None:
        """Load ``count`` <= lanes elements at ``base`` into v<reg> (3 fp32: ldr d, ldr s, ins)."""
        a = self.a
        if count == 3:
            a.ldr(ScalarReg(reg, "d"), mem(base))
            a.ldr(ScalarReg(V_TMP, "s"), mem(base, 8))
            a.ins(VElem(reg, "s", 2), VElem(V_TMP, "s", 0))
            return
        ldst_pieces(a, self.t, False, [reg], [Piece(0, count)], base)

    def store_n(self, reg: int, count: int, base: XReg) -> None:
        """Store the first ``count`` elements of v<reg> at ``base``."""
        a = self.a
        if count == 3:
            a.str(ScalarReg(reg, "d"), mem(base))
            a.mov(ScalarReg(V_TMP, "s"), VElem(reg, "s", 2))
            a.str(ScalarReg(V_TMP, "s"), mem(base, 8))
            return
        ldst_pieces(a, self.t, True, [reg], [Piece(0, count)], base)


# -- SVE --------------------------------------------------------------------------------
N_LEFT, TILES = x8, x10  # transposed: column blocks, tiles left
XA, XB, WA, WB = x12, x13, x14, x15  # tile pointers and column walkers


class SveUnary(Unary):
    """SVE: predicated vectors, any vector length."""

    ISA = "sve"
    MAX_SIZE = None

    def entry(self) -> None:
        self.a.ptrue(getattr(P[0], self.t.es))

    def op(self, z: Any) -> None:
        """Apply the element-wise op in place (copy: nothing)."""
        if self.ptype == "relu":
            self.a.fmax(z, P[0].m, z, 0.0)

    def plain(self, rows: int, cols: int) -> None:
        """Column by column: up to 4 predicated vectors of rows per step."""
        if self.ptype == "zero":
            self.a.mov(self.t.z(0), 0)
        sve_sweep(self.a, self.t, rows, cols, [(A, LDA, XA), (B, LDB, XB)], self.plain_step)

    def plain_step(self, nv: int) -> None:
        """Load and transform ``nv`` vectors at XA, store them at XB (zero: store z0)."""
        a, t = self.a, self.t
        zs = [t.z(v) for v in range(nv)]
        for v in range(nv):  # load and transform
            if self.ptype != "zero":
                t.ld1(a, zs[v], P[v + 1].z, mem(XA, vl=v))
                self.op(zs[v])
        for v in range(nv):  # store
            t.st1(a, zs[0] if self.ptype == "zero" else zs[v], P[v + 1], mem(XB, vl=v))

    def transposed(self, m: int, n: int) -> None:
        """128-bit tiles: load q columns of A, transpose with trn1/trn2, store q columns of B."""
        a, t = self.a, self.t
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
        tile = partial(self.tile, q, full, m_edge, n_edge)

        def column_block(cols: int) -> None:  # tiles down the rows of A: XA on q elements, XB q columns of B
            a.mov(XA, A)
            a.mov(XB, B)

            def tiles() -> None:
                tile(q, cols)
                if mi > 1 or mr:
                    a.add(XA, XA, q * t.size)
                    a.add(XB, XB, LDB, "lsl", lg)

            loop(a, TILES, mi, tiles, "tiles")
            if mr:
                tile(mr, cols)

        def full_block() -> None:  # q columns of A (rows of B)
            column_block(q)
            if nj > 1 or nr:
                a.add(A, A, LDA, "lsl", lg)
                a.add(B, B, q * t.size)

        loop(a, N_LEFT, nj, full_block, "cols")
        if nr:
            column_block(nr)

    def tile(self, q: int, full: Any, m_edge: Any, n_edge: Any, rows: int, cols: int) -> None:
        """A columns (``rows`` rows, ``cols`` columns at XA) -> z0..; transposed in the low 128 bits
        (pairs z16..z19, rows z4..z7; z8..z15 stay untouched); stored as B columns at XB."""
        a, t = self.a, self.t
        load = full if rows == q else m_edge
        a.mov(WA, XA)
        for c in range(cols):
            t.ld1(a, t.z(c), P[load.idx].z, mem(WA))
            if c < cols - 1:
                a.add(WA, WA, LDA)
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
        store = full if cols == q else n_edge  # B columns i..i+rows, elements j..j+cols
        a.mov(WB, XB)
        for r in range(rows):
            self.op(t.z(4 + r))
            t.st1(a, t.z(4 + r), P[store.idx], mem(WB))
            if r < rows - 1:
                a.add(WB, WB, LDB)
