"""AArch64 batch-reduce GEMM, NEON and SVE: C += sum over br of A_br B_br.

`NeonBrgemm` and `SveBrgemm` give ``program(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)``
and ``generate(..., sve_vl)``, a kernel of `common.brgemm_signature`. Column-major, strides in
elements: A is M x K (``a[m + k*lda]``; ``a[k + m*lda]`` with ``trans_a``), B is K x N (``b[k + n*ldb]``;
``b[n + k*ldb]`` with ``trans_b``), C is M x N (``c[m + n*ldc]``; ``c[n + m*ldc]`` with
``trans_c``); batch ``br`` reads ``a + br*br_stride_a`` and ``b + br*br_stride_b``. Nothing
outside the matrices is read or written. Since Cᵀ = Bᵀ·Aᵀ, a kernel may run the transposed
problem (n, m, not trans_b, not trans_a, not trans_c) with a and b (lda/ldb, the BR strides)
swapped in its first instructions. `Brgemm.generate` (not ``program``) hands one column (n = 1)
to the GEMV kernel (`minijit.kernels.aarch64.gemv`, every transpose and stride).

NEON (`NeonBrgemm`; fp32 and s32 (int32, wrapping: ``mla`` by element), fp64 halves the rows):
C in 16 x 4 register blocks, A columns loaded as
4 q registers per k, every B column one q register of 4 consecutive k consumed by ``fmla`` by
element, so K is unrolled by the vector length (64 FMAs per 20 loads). Rows left over run as
smaller blocks of q/d/s pieces, columns left over as narrower blocks, K % 4 as single steps.
``trans_b`` loads rows of B; ``trans_a`` loads rows of A and transposes 4 x 4 (2 x 2) tiles with
``trn1``/``trn2``. ``trans_c`` always runs the transposed problem; ``block`` names its block.

SVE (`SveBrgemm`, vector-length agnostic; fp32, fp64, and s32/s64 with ``mla`` in place of
``fmla``): the M loop counts lanes with ``cntw``/``cntd`` and
builds one ``whilelt`` predicate per vector; the first all-false one picks a narrower variant:

    vectors of M  columns of N  accumulators
         4             6             24
         3             8             24
         2             8             16
         1             8              8

A in z24..z27, broadcast B (``ld1rw``/``ld1rd``) rotating through z28..z31, accumulators
z0..z23; K unrolled by 4. `SveBrgemm.orientation` runs each flag combination as one of four
forms: plain, ``trans_b`` (B elements from one row pointer), ``trans_c`` (C tile gathered and
scattered, z31 = lane*ldc) and ``trans_a`` (A gathered, z31 = lane*lda: the slow form, which
`minijit.packing` avoids by packing a transposed A). Gathers take 32-bit signed byte offsets for
fp32 (|ld| < 2**25 elements at 2048-bit vectors), 64-bit ones for fp64. llvm-mca -mcpu=neoverse-v1
puts one K iteration of the 4-, 3- and 2-vector blocks at their FMA bound (48/48/32 cycles for
96/96/64 FMAs on two SVE pipes); the 1-vector block is load-bound (18 vs 16).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from asm.aarch64 import Assembler, P, X, mem, post
from asm.aarch64.registers import VElem, ZVec
from minijit.kernels.aarch64.common import (
    DType,
    KernelKind,
    brgemm_signature,
    check_args,
    dtype_info,
    epilogue,
    kernel_name,
    loop,
    prologue,
    swap_operands,
)
from minijit.kernels.aarch64.gemv import Gemv, NeonGemv, SveGemv
from minijit.kernels.aarch64.pieces import Piece, fma_elem, ldst_pieces, piece_reg, split, transpose
from minijit.kernels.aarch64.predicated import max_vectors

__all__ = ["Brgemm", "NeonBrgemm", "SveBrgemm"]

A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes)


class Brgemm(KernelKind):
    """What the BRGEMM kernels of both ISAs share: argument checks, names, the entry (operands
    swapped for Cᵀ = Bᵀ·Aᵀ, strides to bytes) and one column run by the GEMV kernel."""

    MAX_SIZE: ClassVar[int | None]  # largest m, n, k, br_size (None: any)
    GEMV: ClassVar[type[Gemv]]  # the ISA's GEMV kernel, for n = 1 (float dtypes)
    INTS: ClassVar[tuple[str, ...]] = ()  # the integer dtypes it takes (`common.INT_DTYPES`)
    signature = staticmethod(brgemm_signature)

    @classmethod
    def check(cls, m: int, n: int, k: int, br_size: int, ta: bool, tb: bool, tc: bool, dtype: str) -> DType:
        """The dtype of valid arguments; ValueError naming the first bad one."""
        flags = {"trans_a": ta, "trans_b": tb, "trans_c": tc}
        return check_args(cls.MAX_SIZE, dtype, flags, cls.INTS, m=m, n=n, k=k, br_size=br_size)

    @classmethod
    def name(
        cls, m: int, n: int, k: int, br_size: int, trans_a: bool, trans_b: bool, trans_c: bool, dtype: str, **_: Any
    ) -> str:
        flags = {"trans_a": trans_a, "trans_b": trans_b, "trans_c": trans_c}
        return kernel_name(f"{cls.ISA}_brgemm", f"{m}x{n}x{k}_br{br_size}", dtype, **flags)

    @classmethod
    def generate(cls, *args: Any, sve_vl: int = 128, **kwargs: Any) -> Any:
        """JIT the kernel of ``program(*args, **kwargs)`` (native on AArch64, else emulated at SVE
        length ``sve_vl`` bits); one column (n = 1, no explicit ``block``) runs the GEMV kernel
        (float dtypes; integers run one-column blocks)."""
        p = inspect.signature(cls.program).bind(*args, **kwargs)
        p.apply_defaults()
        m, n, k, br, ta, tb, tc, dtype = (p.arguments[f] for f in list(p.arguments)[:8])
        t = cls.check(m, n, k, br, ta, tb, tc, dtype)
        if n == 1 and p.arguments.get("block") is None and not t.is_int:
            return cls.GEMV.generate(m, k, br, ta, tb, tc, dtype, sve_vl=sve_vl)
        return super().generate(*args, sve_vl=sve_vl, **kwargs)

    @staticmethod
    def entry(a: Assembler, t: DType, swap: bool, tmp: Any) -> None:
        """Cᵀ = Bᵀ·Aᵀ (``swap``): the caller's b is this kernel's A; then element strides -> bytes."""
        if swap:
            swap_operands(a, tmp)
        for r in (LDA, LDB, LDC, BR_A, BR_B):
            a.lsl(r, r, t.shift)


# -- NEON -------------------------------------------------------------------------------
N_CNT, M_CNT, BR_CNT, K_CNT = X[8:12]  # loop counters
A_M, C_M, A_BR, B_BR, XA, XT = X[12:18]  # block / br / walking pointers
B_COL = tuple(X[19:27])  # B column pointers (or B_COL[0]: B row pointer)
B_STEP = X[27]  # bytes from one N block of B to the next
ROW_OFF = tuple(X[24:27])  # trans_a: byte offsets of rows 1..3 of an A tile (blocks have <= 4 columns)


def _interleave(fmas: list[Callable[[], None]], loads: list[Callable[[], None]]) -> None:
    """Emit ``fmas`` with ``loads`` spread evenly between them (first load after the first FMA)."""
    every = max(1, len(fmas) // len(loads)) if loads else 0
    for i, f in enumerate(fmas):
        f()
        if loads and i % every == 0:
            loads.pop(0)()
    for ld in loads:
        ld()


class NeonBrgemm(Brgemm):
    """One NEON BRGEMM kernel being emitted: register blocks of q/d/s pieces; the loops are methods."""

    ISA = "neon"
    MAX_SIZE = 1 << 20
    GEMV = NeonGemv
    INTS = ("s32",)  # int32: ``mla`` by element (NEON has no 64-bit integer multiply)
    #: (rows, columns) of C
    BLOCK: ClassVar[dict[str, tuple[int, int]]] = {"fp32": (16, 4), "fp64": (8, 4), "s32": (16, 4)}

    def __init__(
        self, t: DType, m: int, n: int, k: int, br_size: int, ta: bool, tb: bool, mb: int, nb: int, swap: bool
    ) -> None:
        self.t, self.m, self.n, self.k, self.br_size = t, m, n, k, br_size
        self.trans_a, self.trans_b, self.mb, self.nb, self.swap = ta, tb, mb, nb, swap
        self.lanes = self.unroll = t.lanes  # k per B q register (normal B) or per A tile (trans_a)
        # vector register map: B first, then two A sets, then accumulators
        self.max_pieces = 1 if ta else mb // t.lanes
        widest = max(len(split(c, t.lanes, 99)[0]) for c in range(1, nb + 1))  # B row pieces
        self.vb, self.va = 0, self.unroll * widest if tb else nb
        self.vc = self.va + (2 * self.lanes if ta else 2 * self.max_pieces)
        if self.vc + self.max_pieces * nb > 32:
            raise ValueError(f"block {mb}x{nb} needs more than 32 vector registers")

    @classmethod
    def program(
        cls,
        m: int,
        n: int,
        k: int,
        br_size: int = 1,
        trans_a: bool = False,
        trans_b: bool = False,
        trans_c: bool = False,
        dtype: str = "fp32",
        block: tuple[int, int] | None = None,
    ) -> tuple[Assembler, str]:
        """The kernel's `Assembler` and the listing of its innermost K-loop body (one unrolled group)."""
        t = cls.check(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)
        if trans_c:  # Cᵀ = Bᵀ·Aᵀ: the column-major kernel of the transposed problem
            m, n, trans_a, trans_b = n, m, not trans_b, not trans_a
        mb, nb = block or ((t.lanes, 4) if trans_a else cls.BLOCK[dtype])
        if mb % t.lanes or not 1 <= nb <= len(B_COL) or mb < t.lanes:
            raise ValueError(f"block must be (rows: a multiple of {t.lanes}, columns: 1..{len(B_COL)}), got {block}")
        if trans_a and (mb != t.lanes or nb > 4):
            raise ValueError(f"block must be ({t.lanes}, 1..4) with trans_a, got {block}")
        kern = cls(t, m, n, k, br_size, trans_a, trans_b, mb, nb, swap=trans_c)
        a = kern.emit()
        body = Assembler(name="kloop")
        kern.k_group(body, split(mb, t.lanes, kern.max_pieces)[0], nb, kern.unroll)
        return a, body.listing()

    def emit(self) -> Assembler:
        """The whole kernel: prologue, N sweep (full column blocks, then the rest), epilogue."""
        t, a = self.t, Assembler(name="neon_brgemm")
        xregs = [r.idx for r in (*B_COL[: self.nb], B_STEP, *(ROW_OFF if self.trans_a else ()))]
        frame = prologue(a, xregs, range(self.vc + self.max_pieces * self.nb))
        self.entry(a, t, self.swap, XT)
        if self.trans_a:  # row offsets 1..lanes-1 of an A tile
            a.mov(ROW_OFF[0], LDA)
            for i in range(1, self.lanes - 1):
                a.add(ROW_OFF[i], ROW_OFF[i - 1], LDA)
        full, rest = divmod(self.n, self.nb)
        if not self.trans_b:
            a.mov(XT, self.nb)
            a.mul(B_STEP, XT, LDB)

        def column_block() -> None:
            self.m_sweep(a, self.nb)
            self.next_columns(a, self.nb)

        loop(a, N_CNT, full, column_block, "n")
        if rest:  # the last, narrower column block
            self.m_sweep(a, rest)
        epilogue(a, frame)
        return a

    def next_columns(self, a: Assembler, cols: int) -> None:
        """Advance B and C by ``cols`` columns."""
        if self.trans_b:
            a.add(B, B, cols * self.t.size)
        elif cols == self.nb:
            a.add(B, B, B_STEP)
        else:
            a.mov(XT, cols)
            a.madd(B, XT, LDB, B)
        a.mov(XT, cols)
        a.madd(C, XT, LDC, C)

    def m_sweep(self, a: Assembler, cols: int) -> None:
        """All rows for one column block: a loop over full row blocks, then the remainder blocks."""
        full, rest = divmod(self.m, self.mb)
        a.mov(A_M, A)
        a.mov(C_M, C)
        blocks = split(self.mb, self.lanes, self.max_pieces)
        loop(a, M_CNT, full, lambda: [self.block_at(a, pieces, cols) for pieces in blocks], "m")
        for pieces in split(rest, self.lanes, self.max_pieces):
            self.block_at(a, pieces, cols)

    def block_at(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """Run `block` for ``pieces`` at the current A_M/C_M, then step both past its rows."""
        rows = sum(p.width for p in pieces)
        self.block(a, [Piece(p.off - pieces[0].off, p.width) for p in pieces], cols)
        a.add(C_M, C_M, rows * self.t.size)
        if self.trans_a:  # next tile of rows: rows * lda bytes
            a.mov(XT, rows)
            a.madd(A_M, XT, LDA, A_M)
        else:
            a.add(A_M, A_M, rows * self.t.size)

    def block(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """C[A_M rows, cols] += sum_br A_br B_br for one block at C_M / A_M / B (column block)."""
        self.c_tile(a, pieces, cols, store=False)
        if self.br_size > 1:
            a.mov(A_BR, A_M)
            a.mov(B_BR, B)
            a.mov(BR_CNT, self.br_size)
            top = a.label("br")
        a_src, b_src = (A_BR, B_BR) if self.br_size > 1 else (A_M, B)
        a.mov(XA, a_src)  # A at (row block, k = 0) of this br
        a.mov(B_COL[0], b_src)
        if not self.trans_b:
            for j in range(1, cols):
                a.add(B_COL[j], B_COL[j - 1], LDB)
        self.k_loop(a, pieces, cols)
        if self.br_size > 1:
            a.add(A_BR, A_BR, BR_A)
            a.add(B_BR, B_BR, BR_B)
            a.subs(BR_CNT, BR_CNT, 1)
            a.b_ne(top)
        self.c_tile(a, pieces, cols, store=True)

    def c_tile(self, a: Assembler, pieces: list[Piece], cols: int, store: bool) -> None:
        """Load or store the block of C at C_M, column by column."""
        a.mov(XT, C_M)
        for j in range(cols):
            ldst_pieces(a, self.t, store, [self.vc + j * len(pieces) + i for i in range(len(pieces))], pieces, XT)
            if j + 1 < cols:
                a.add(XT, XT, LDC)

    def k_loop(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """All K: a counted loop of unrolled groups, then single steps."""
        loops, rest = divmod(self.k, self.unroll)
        loop(a, K_CNT, loops, lambda: self.k_group(a, pieces, cols, self.unroll), "k")
        for _ in range(rest):
            self.k_group(a, pieces, cols, 1)

    def k_group(self, a: Assembler, pieces: list[Piece], cols: int, steps: int) -> None:
        """``steps`` k (1 or the unroll): B loads, then per k the A loads interleaved with the FMAs."""
        t, nset = self.t, len(pieces)
        elem = self.b_loads(a, cols, steps)
        acc = {(i, j): self.vc + j * nset + i for i in range(nset) for j in range(cols)}
        if self.trans_a:
            cols_a = self.a_columns(a, pieces, steps)
            for kk in range(steps):
                for j in range(cols):
                    fma_elem(a, t, acc[0, j], cols_a[kk], pieces[0].width, elem(kk, j))
            return

        def a_loads(kk: int) -> list[Callable[[], None]]:
            regs = [self.va + (kk % 2) * self.max_pieces + i for i in range(nset)]
            ops: list[Callable[[], None]] = []
            i = 0
            while i < nset:  # one op per ldr/ldp, then the pointer bump
                pair = i + 1 < nset and pieces[i + 1].width == pieces[i].width
                sub = pieces[i : i + 2] if pair else pieces[i : i + 1]
                ops.append(partial(ldst_pieces, a, t, False, regs[i : i + len(sub)], sub, XA))
                i += len(sub)
            ops.append(partial(a.add, XA, XA, LDA))
            return ops

        for op in a_loads(0):
            op()
        for kk in range(steps):
            src = [self.va + (kk % 2) * self.max_pieces + i for i in range(nset)]
            fmas = [
                partial(fma_elem, a, t, acc[i, j], src[i], pieces[i].width, elem(kk, j))
                for j in range(cols)
                for i in range(nset)
            ]
            _interleave(fmas, a_loads(kk + 1) if kk + 1 < steps else [])

    def b_loads(self, a: Assembler, cols: int, steps: int) -> Callable[[int, int], VElem]:
        """Load B for ``steps`` k of ``cols`` columns; returns (kk, j) -> element register."""
        t = self.t
        if not self.trans_b:  # column j: `steps` consecutive k in one register
            for j in range(cols):
                reg = piece_reg(t, self.vb + j, steps) if steps > 1 else t.scalar(self.vb + j)
                a.ldr(reg, post(B_COL[j], steps * t.size))
            return lambda kk, j: VElem(self.vb + j, t.es, kk)
        pieces = split(cols, self.lanes, 99)[0]  # row kk of B: pieces of columns
        regs = {}
        for kk in range(steps):
            idx = [self.vb + kk * len(pieces) + i for i in range(len(pieces))]
            ldst_pieces(a, t, False, idx, pieces, B_COL[0])
            a.add(B_COL[0], B_COL[0], LDB)
            for i, p in enumerate(pieces):
                for j in range(p.off, p.off + p.width):
                    regs[kk, j] = VElem(idx[i], t.es, j - p.off)
        return lambda kk, j: regs[kk, j]

    def a_columns(self, a: Assembler, pieces: list[Piece], steps: int) -> list[int]:
        """trans_a: load the tile rows (k contiguous), transpose; the registers of A columns k."""
        t, base = self.t, self.va
        for r in range(pieces[0].width):
            reg = piece_reg(t, base + r, steps) if steps > 1 else t.scalar(base + r)
            a.ldr(reg, mem(XA) if r == 0 else mem(XA, ROW_OFF[r - 1]))
        a.add(XA, XA, steps * t.size)
        return transpose(a, t, list(range(base, base + self.lanes)), base + self.lanes)


# -- SVE --------------------------------------------------------------------------------
I, LANES, TMP = X[8], X[9], X[10]  # M offset (elements), lanes per vector, scratch
A_I, C_I = X[11], X[12]  # A and C at row I
NB_CNT, B_N, C_N = X[13], X[14], X[15]  # N-block counter, B and C at the current column block
BR_LEFT, K_LEFT = X[16], X[17]  # BR and K loop counters
M_REG, A_K = X[19], X[20]  # m, A pointer walking K (x18 is left alone: platform register)
B_K = tuple(X[21:29])  # B column pointers walking K
Z_A, Z_B = 24, 28  # first A register, first of 4 rotating B registers
Z_IDX = 31  # trans_a / trans_c: byte offsets lane*lda / lane*ldc (then B rotates through 3)
#: cost of a form: a gather in the K loop (trans_a) far above a gathered C tile (trans_c)
_COST_A, _COST_C = 10, 1


class SveBrgemm(Brgemm):
    """One SVE BRGEMM kernel being emitted; the methods mirror its loops (M, N, BR, K)."""

    ISA = "sve"
    MAX_SIZE = None
    GEMV = SveGemv
    INTS = ("s32", "s64")  # predicated ``mla`` (wrapping) in place of ``fmla``
    BLOCKING: ClassVar[dict[int, int]] = {4: 6, 3: 8, 2: 8, 1: 8}  # vectors of M -> columns of N
    UNROLL_K = 4  # K steps per loop iteration

    def __init__(
        self,
        a: Assembler,
        m: int,
        n: int,
        k: int,
        br: int,
        t: DType,
        form: tuple[bool, bool, bool] = (False, False, False),
        swap: bool = False,
    ) -> None:
        self.a, self.m, self.n, self.k, self.br, self.t = a, m, n, k, br, t
        self.ta, self.tb, self.tc = form
        if (self.ta + self.tb + self.tc) > 1:
            raise ValueError(f"form must have at most one transposition, got {form}")
        self.swap = swap
        self.b_regs = 3 if self.ta else 4  # rotating broadcast registers (z31 holds lane*lda)
        self.mvs = range(max_vectors(m, t), 0, -1)  # variants, widest first
        self.nbs = {mv: min(self.BLOCKING[mv], n) for mv in self.mvs}

    @classmethod
    def program(
        cls,
        m: int,
        n: int,
        k: int,
        br_size: int = 1,
        trans_a: bool = False,
        trans_b: bool = False,
        trans_c: bool = False,
        dtype: str = "fp32",
    ) -> Assembler:
        """The BRGEMM kernel as an `Assembler` (``code()``, ``listing()``). Bad arguments raise ValueError."""
        t = cls.check(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)
        flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c)) if on)
        a = Assembler(name=f"sve_brgemm_{dtype}_{m}x{n}x{k}_br{br_size}{flags}")
        swap, form = cls.orientation(trans_a, trans_b, trans_c)
        rows, cols = (n, m) if swap else (m, n)
        cls(a, rows, cols, k, br_size, t, form, swap).kernel()
        return a

    @classmethod
    def kloop_body(cls, dtype: str = "fp32", vectors: int = 4) -> str:
        """Listing of one unrolled K-loop iteration of the ``vectors``-wide micro-block (for llvm-mca)."""
        t = dtype_info(dtype)
        if vectors not in cls.BLOCKING:
            raise ValueError(f"vectors must be one of {sorted(cls.BLOCKING)}, got {vectors!r}")
        a = Assembler(name="kloop")
        g = cls(a, 4 * 64, cls.BLOCKING[vectors], cls.UNROLL_K, 1, t)
        for u in range(cls.UNROLL_K):
            g.k_step(vectors, cls.BLOCKING[vectors], u)
        for j in range(cls.BLOCKING[vectors]):
            a.add(B_K[j], B_K[j], cls.UNROLL_K * t.size)
        return a.listing()

    @staticmethod
    def orientation(trans_a: bool, trans_b: bool, trans_c: bool) -> tuple[bool, tuple[bool, bool, bool]]:
        """Whether to run Cᵀ = Bᵀ·Aᵀ (a/b swapped), and the (trans_a, trans_b, trans_c) then emitted."""
        swapped = (not trans_b, not trans_a, not trans_c)

        def cost(f: tuple[bool, bool, bool]) -> int:
            return _COST_A * f[0] + _COST_C * f[2]

        flags = (trans_a, trans_b, trans_c)
        return (True, swapped) if cost(swapped) < cost(flags) else (False, flags)

    def acc(self, mv: int, v: int, j: int) -> ZVec:
        return self.t.z(j * mv + v)

    def p(self, v: int) -> Any:
        return getattr(P[v], self.t.es)

    def kernel(self) -> None:
        """Prologue; the M loop (predicates p1..p4 for the vectors at I, the first empty one picks
        the variant); epilogue."""
        a, t = self.a, self.t
        used_x = 2 + max(self.nbs.values())  # x19..: M_REG, A_K, B_K
        used_d = max(0, max(mv * self.nbs[mv] for mv in self.mvs) - 8)  # accumulators from z8 (d8..d15)
        pairs = range(19, 19 + used_x + used_x % 2), range(8, 8 + used_d + used_d % 2)  # the frame stores pairs
        frame = prologue(a, *pairs, writeback=True)
        self.entry(a, t, self.swap, TMP)
        if self.br > 1:  # per-batch pointer steps net of the K walk
            for br_reg, ld, walks in ((BR_A, LDA, not self.ta), (BR_B, LDB, self.tb)):
                if walks:  # the K walk steps by the leading dimension
                    a.mov(TMP, self.k)
                    a.msub(br_reg, TMP, ld, br_reg)  # br_stride - k*ld
                else:  # the K walk steps by one element
                    a.mov(TMP, self.k * t.size)
                    a.sub(br_reg, br_reg, TMP)  # br_stride - k
        if self.ta:  # lane i of an A vector lies i*lda bytes after lane 0
            a.index(self.t.z(Z_IDX), 0, LDA if t.es == "d" else LDA.w)
        a.ptrue(getattr(P[0], t.es))
        t.cnt(a, LANES)
        a.mov(I, 0)
        a.mov(M_REG, self.m)
        done = a.new_label("done")
        variants = {mv: a.new_label(f"m{mv}v") for mv in self.mvs}
        mloop = a.label("mloop")
        a.whilelt(self.p(1), I, M_REG)
        a.b_none(done)
        if self.ta:  # row I of A (rows lda apart) and of C (rows ldc apart with trans_c)
            a.madd(A_I, I, LDA, A)
        else:
            a.add(A_I, A, I, "lsl", t.shift)
        if self.tc:
            a.madd(C_I, I, LDC, C)
        else:
            a.add(C_I, C, I, "lsl", t.shift)
        for v in range(2, self.mvs[0] + 1):
            a.add(TMP, I if v == 2 else TMP, LANES)
            a.whilelt(self.p(v), TMP, M_REG)
            a.b_none(variants[v - 1])
        for mv in self.mvs:
            a.bind(variants[mv])
            self.n_loop(mv)
            t.inc(a, I, mv)  # I += mv vectors
            a.b(mloop)
        a.bind(done)
        epilogue(a, frame)

    def n_loop(self, mv: int) -> None:
        """N blocks of ``nbs[mv]`` columns, then one narrower remainder block."""
        a, nb = self.a, self.nbs[mv]
        n_full, n_rem = divmod(self.n, nb)
        a.mov(B_N, B)
        a.mov(C_N, C_I)

        def column_block() -> None:
            self.block(mv, nb)
            if n_full > 1 or n_rem:  # next column block
                a.mov(TMP, nb)
                if self.tb:
                    a.add(B_N, B_N, nb * self.t.size)
                else:
                    a.madd(B_N, TMP, LDB, B_N)
                if self.tc:
                    a.add(C_N, C_N, nb * self.t.size)
                else:
                    a.madd(C_N, TMP, LDC, C_N)

        loop(a, NB_CNT, n_full, column_block, f"n{mv}v")
        if n_rem:
            self.block(mv, n_rem)

    def block(self, mv: int, nb: int) -> None:
        """One mv-vector x nb-column block of C: load, batch-reduce over K, store."""
        a = self.a
        self.c_tile(mv, nb, store=False)
        a.mov(A_K, A_I)
        a.mov(B_K[0], B_N)

        def br_step() -> None:
            for j in range(1, 1 if self.tb else nb):  # column pointers (trans_b: one row pointer)
                a.add(B_K[j], B_K[j - 1], LDB)
            self.k_loop(mv, nb)
            if self.br > 1:  # next batch: A and B net of the K walk
                a.add(A_K, A_K, BR_A)
                a.add(B_K[0], B_K[0], BR_B)

        loop(a, BR_LEFT, self.br, br_step, "br")
        self.c_tile(mv, nb, store=True)

    def c_tile(self, mv: int, nb: int, store: bool) -> None:
        """Load (zeroing inactive lanes) or store the accumulators, column by column; trans_c:
        column j of the tile is ``c[j + m*ldc]``, one gather/scatter per vector."""
        a, t = self.a, self.t
        z_idx, ext = t.z(Z_IDX), ((None,) if t.es == "d" else ("sxtw",))
        if self.tc:
            a.index(z_idx, 0, LDC if t.es == "d" else LDC.w)  # lane i: i*ldc bytes
        for j in range(nb):
            if j == 0:
                a.mov(TMP, C_N)
            elif self.tc:  # column j: element j of every row
                a.add(TMP, C_N, j * t.size)
            else:
                a.add(TMP, TMP, LDC)
            for v in range(mv):
                if self.tc and v:  # vector v starts v*lanes rows (v*lanes*ldc bytes) further
                    a.madd(TMP, LANES, LDC, TMP)
                addr = mem(TMP, z_idx, *ext) if self.tc else mem(TMP, vl=v)
                if store:
                    t.st1(a, self.acc(mv, v, j), P[v + 1], addr)
                else:
                    t.ld1(a, self.acc(mv, v, j), P[v + 1].z, addr)

    def k_loop(self, mv: int, nb: int) -> None:
        """K in steps of UNROLL_K (a counted loop when more than one), then the remainder."""
        a, t, unroll = self.a, self.t, self.UNROLL_K
        iters, rem = divmod(self.k, unroll)

        def k_iteration() -> None:
            for u in range(unroll):
                self.k_step(mv, nb, u)
            for j in range(0 if self.tb else nb):  # trans_b: the row pointer moved in each step
                a.add(B_K[j], B_K[j], unroll * t.size)

        loop(a, K_LEFT, iters, k_iteration, "k")
        for u in range(rem):
            self.k_step(mv, nb, u)
        if rem and self.br > 1 and not self.tb:
            a.add(B_K[0], B_K[0], rem * t.size)

    def k_step(self, mv: int, nb: int, u: int) -> None:
        """One k: mv A vectors, then per column a broadcast B element and mv FMAs (integers: mla)."""
        a, t = self.a, self.t
        mla = a.mla if t.is_int else a.fmla
        if self.ta:  # A vectors gathered: lane i at row i (i*lda bytes), vector v v*lanes rows on
            ext = (None,) if t.es == "d" else ("sxtw",)
            for v in range(mv):
                if v:
                    a.madd(TMP, LANES, LDA, A_K if v == 1 else TMP)
                t.ld1(a, t.z(Z_A + v), P[v + 1].z, mem(A_K if v == 0 else TMP, t.z(Z_IDX), *ext))
            a.add(A_K, A_K, t.size)
        else:
            for v in range(mv):
                t.ld1(a, t.z(Z_A + v), P[v + 1].z, mem(A_K, vl=v))
            a.add(A_K, A_K, LDA)
        for j in range(nb):
            zb = t.z(Z_B + j % self.b_regs)
            if self.tb:  # row k of B: column j is element j
                t.ld1r(a, zb, P[0].z, mem(B_K[0], j * t.size))
            else:
                t.ld1r(a, zb, P[0].z, mem(B_K[j], u * t.size))
            for v in range(mv):
                mla(self.acc(mv, v, j), P[0].m, t.z(Z_A + v), zb)
        if self.tb:
            a.add(B_K[0], B_K[0], LDB)
