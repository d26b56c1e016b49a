"""SVE batch-reduce GEMM, vector-length agnostic: C += sum over br of A_br B_br.

Column-major, strides in elements: A is M x K (``a[m + k*lda]``), B is K x N
(``b[k + n*ldb]``), C is M x N (``c[m + n*ldc]``); batch ``br`` reads
``a + br*br_stride_a`` and ``b + br*br_stride_b``. The kernel

    void f(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc,
           int64_t br_stride_a, int64_t br_stride_b)

makes no assumption about the SVE vector length: the M loop reads the lane
count with ``cntw``/``cntd`` and builds one ``whilelt`` predicate per vector,
so the same bytes run at 128 ... 2048 bits. Per M step the number of vectors
(1..4) is chosen at run time from the predicates (the first all-false one
branches to the narrower variant), and each variant has its own N blocking:

    vectors of M  columns of N  accumulators
         4             6             24
         3             8             24
         2             8             16
         1             8              8

A registers z24..z27, broadcast B (``ld1rw``/``ld1rd``) rotates through
z28..z31, accumulators z0..z23 (z8..z15 make d8..d15 saved). N remainders use
a narrower block; K is unrolled by 4. Loads and stores are predicated, so no
byte outside the matrices is read or written.

Transposed operands: ``trans_a`` reads ``a[k + m*lda]``, ``trans_b``
``b[n + k*ldb]``, ``trans_c`` writes ``c[n + m*ldc]`` (the x86-64 semantics).
Since Cᵀ = Bᵀ·Aᵀ, the kernel for (m, n, ta, tb, tc) is the kernel for
(n, m, not tb, not ta, not tc) with a and b (lda/ldb, br strides) swapped in
its first instructions; every combination is run as one of four forms:

    form        B element                          A vector                  C tile
    plain       ld1r from its column pointer       contiguous ld1            contiguous ld1/st1
    trans_b     ld1r from one row pointer (+j)     contiguous ld1            contiguous ld1/st1
    trans_c     ld1r from its column pointer       contiguous ld1            gather/scatter (z31 = lane*ldc)
    trans_a     ld1r (rotating z28..z30)           gather (z31 = lane*lda)   contiguous ld1/st1

(plain: ta=tb=tc=False and (T,T,T); trans_b: (F,T,F) and (F,T,T); trans_c:
(F,F,T) and (T,T,F); trans_a: (T,F,F) and (T,F,T).) Gathers and scatters
take 32-bit signed byte offsets for fp32 (|ld| * 4 * (lanes - 1) < 2**31,
i.e. |ld| < 2**25 elements at 2048-bit vectors), 64-bit ones for fp64. The
gather in the K loop makes ``trans_a`` the slow form; `minijit.packing`
packs a transposed A before it reaches the kernel.

`generate` (not `program`) hands one column (n = 1) to the GEMV kernel
`minijit.kernels.aarch64.sve_gemv` (every transpose and stride): one
column leaves this kernel at most 4 FMA chains, and ``trans_a`` a gather per K step.

``kloop_body`` gives one unrolled K iteration as text: llvm-mca -mcpu=neoverse-v1
puts the 4-, 3- and 2-vector blocks at their FMA bound (48/48/32 cycles for
96/96/64 FMAs on two SVE pipes); the 1-vector block is load-bound (18 vs 16).
"""

from __future__ import annotations

from typing import Any

from asm.aarch64 import Assembler, P, X, mem
from asm.aarch64.registers import ZVec
from minijit.kernels.aarch64.common import (
    DType,
    brgemm_signature,
    check_bools,
    check_positive,
    dtype_info,
    epilogue,
    generator,
    prologue,
)
from minijit.kernels.aarch64.gemv import Sve as sve_gemv

__all__ = ["BLOCKING", "UNROLL_K", "generate", "kloop_body", "max_vectors", "orientation", "program", "signature"]

# -- blocking decisions ---------------------------------------------------------
BLOCKING = {4: 6, 3: 8, 2: 8, 1: 8}  # vectors of M -> columns of N per micro-block
UNROLL_K = 4  # K steps per loop iteration
MIN_VL_BITS = 128  # narrowest SVE vector: bounds the variants a given m can need

# -- registers ------------------------------------------------------------------
A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes)
I, LANES, TMP = X[8], X[9], X[10]  # M offset (elements), lanes per vector, scratch
A_M, C_M = X[11], X[12]  # A and C at row I
N_CNT, B_N, C_N = X[13], X[14], X[15]  # N-block counter, B and C at the current column block
BR_CNT, K_CNT = X[16], X[17]
M_REG, XA = X[19], X[20]  # m, A pointer walking K (x18 is left alone: platform register)
XB = tuple(X[21:29])  # B column pointers walking K
Z_A, Z_B = 24, 28  # first A register, first of 4 rotating B registers
Z_IDX = 31  # trans_a / trans_c: byte offsets lane*lda / lane*ldc (then B rotates through 3)

signature = brgemm_signature


def _check(m: int, n: int, k: int, br_size: int, trans_a: bool, trans_b: bool, trans_c: bool, dtype: str) -> DType:
    check_positive(None, m=m, n=n, k=k, br_size=br_size)
    check_bools(trans_a=trans_a, trans_b=trans_b, trans_c=trans_c)
    return dtype_info(dtype)


#: cost of a form: a gather in the K loop (trans_a) far above a gathered C tile (trans_c)
_COST_A, _COST_C = 10, 1


def orientation(trans_a: bool, trans_b: bool, trans_c: bool) -> tuple[bool, tuple[bool, bool, bool]]:
    """Whether to run Cᵀ = Bᵀ·Aᵀ (a/b swapped), and the (trans_a, trans_b, trans_c) then emitted."""
    swapped = (not trans_b, not trans_a, not trans_c)

    def cost(f: tuple[bool, bool, bool]) -> int:
        return _COST_A * f[0] + _COST_C * f[2]

    flags = (trans_a, trans_b, trans_c)
    return (True, swapped) if cost(swapped) < cost(flags) else (False, flags)


def max_vectors(m: int, t: DType) -> int:
    """Vectors of M a block can need: at 128 bits ``m`` fills at most ceil(m / lanes) (capped at 4)."""
    lanes = MIN_VL_BITS // (8 * t.size)
    return min(4, -(-m // lanes))


def _pairs(first: int, count: int) -> range:
    """``count`` registers from ``first``, rounded up to whole pairs (the frame stores pairs only)."""
    return range(first, first + count + count % 2)


# -- the kernel -------------------------------------------------------------------
class _Brgemm:
    """Emits one BRGEMM kernel; the methods mirror its loops (M, N, BR, K)."""

    def __init__(
        self,
        a: Assembler,
        m: int,
        n: int,
        k: int,
        br_size: int,
        t: DType,
        form: tuple[bool, bool, bool] = (False, False, False),
        swap: bool = False,
    ) -> None:
        self.a, self.m, self.n, self.k, self.br, self.t = a, m, n, k, br_size, t
        self.ta, self.tb, self.tc = form
        if (self.ta + self.tb + self.tc) > 1:
            raise ValueError(f"form must have at most one transposition, got {form}")
        self.swap = swap
        self.b_regs = 3 if self.ta else 4  # rotating broadcast registers (z31 holds lane*lda)
        self.mvs = range(max_vectors(m, t), 0, -1)  # variants, widest first
        self.nbs = {mv: min(BLOCKING[mv], n) for mv in self.mvs}

    def acc(self, mv: int, v: int, j: int) -> ZVec:
        return self.t.z(j * mv + v)

    def kernel(self) -> None:
        a, t = self.a, self.t
        widest = max(self.nbs.values())
        used_x = 2 + widest  # x19..: M_REG, XA, XB
        used_d = max(0, max(mv * self.nbs[mv] for mv in self.mvs) - 8)  # accumulators from z8 (d8..d15)
        frame = prologue(a, _pairs(19, used_x), _pairs(8, used_d), writeback=True)
        if self.swap:  # Cᵀ = Bᵀ·Aᵀ: the caller's b is this kernel's A
            for x, y in ((A, B), (LDA, LDB), (BR_A, BR_B)):
                a.mov(TMP, x)
                a.mov(x, y)
                a.mov(y, TMP)
        # strides to bytes; per-batch pointer steps net of the K walk
        for r in (LDA, LDB, LDC, BR_A, BR_B):
            a.lsl(r, r, t.shift)
        if self.br > 1:
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
        # M loop: predicates p1..p4 for the vectors at I; the first empty one picks the variant
        done = a.new_label("done")
        variants = {mv: a.new_label(f"m{mv}v") for mv in self.mvs}
        mloop = a.label("mloop")
        a.whilelt(self.p(1), I, M_REG)
        a.b_none(done)
        if self.ta:  # row I of A (rows lda apart) and of C (rows ldc apart with trans_c)
            a.madd(A_M, I, LDA, A)
        else:
            a.add(A_M, A, I, "lsl", t.shift)
        if self.tc:
            a.madd(C_M, I, LDC, C)
        else:
            a.add(C_M, C, I, "lsl", t.shift)
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

    def p(self, v: int) -> Any:
        return getattr(P[v], self.t.es)

    def n_loop(self, mv: int) -> None:
        """N blocks of ``nbs[mv]`` columns, then one narrower remainder block."""
        a, nb = self.a, self.nbs[mv]
        n_full, n_rem = divmod(self.n, nb)
        a.mov(B_N, B)
        a.mov(C_N, C_M)
        if n_full:
            if n_full > 1:
                a.mov(N_CNT, n_full)
            nloop = a.label(f"n{mv}v") if n_full > 1 else None
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
            if n_full > 1:
                a.subs(N_CNT, N_CNT, 1)
                a.b_ne(nloop)
        if n_rem:
            self.block(mv, n_rem)

    def block(self, mv: int, nb: int) -> None:
        """One mv-vector x nb-column block of C: load, batch-reduce over K, store."""
        a = self.a
        self.c_tile(mv, nb, store=False)
        a.mov(XA, A_M)
        a.mov(XB[0], B_N)
        if self.br > 1:
            a.mov(BR_CNT, self.br)
        brloop = a.label("br") if self.br > 1 else None
        for j in range(1, 1 if self.tb else nb):  # column pointers of this batch (trans_b: one row pointer)
            a.add(XB[j], XB[j - 1], LDB)
        self.k_loop(mv, nb)
        if self.br > 1:
            a.add(XA, XA, BR_A)  # next batch: A and B net of the K walk
            a.add(XB[0], XB[0], BR_B)
            a.subs(BR_CNT, BR_CNT, 1)
            a.b_ne(brloop)
        self.c_tile(mv, nb, store=True)

    def c_tile(self, mv: int, nb: int, store: bool) -> None:
        """Load (zeroing inactive lanes) or store the accumulators, column by column."""
        a, t = self.a, self.t
        if self.tc:
            self.c_tile_transposed(mv, nb, store)
            return
        a.mov(TMP, C_N)
        for j in range(nb):
            for v in range(mv):
                if store:
                    t.st1(a, self.acc(mv, v, j), P[v + 1], mem(TMP, vl=v))
                else:
                    t.ld1(a, self.acc(mv, v, j), P[v + 1].z, mem(TMP, vl=v))
            if j < nb - 1:
                a.add(TMP, TMP, LDC)

    def c_tile_transposed(self, mv: int, nb: int, store: bool) -> None:
        """trans_c: column j of the tile is ``c[j + m*ldc]``: one gather/scatter per vector."""
        a, t = self.a, self.t
        z_idx = t.z(Z_IDX)
        a.index(z_idx, 0, LDC if t.es == "d" else LDC.w)  # lane i: i*ldc bytes
        ext = (None,) if t.es == "d" else ("sxtw",)
        for j in range(nb):
            if j:
                a.add(TMP, C_N, j * t.size)
            else:
                a.mov(TMP, C_N)
            for v in range(mv):  # vector v starts v*lanes rows (v*lanes*ldc bytes) further
                if v:
                    a.madd(TMP, LANES, LDC, TMP)
                if store:
                    t.st1(a, self.acc(mv, v, j), P[v + 1], mem(TMP, z_idx, *ext))
                else:
                    t.ld1(a, self.acc(mv, v, j), P[v + 1].z, mem(TMP, z_idx, *ext))

    def k_loop(self, mv: int, nb: int) -> None:
        """K in steps of UNROLL_K (a counted loop when more than one), then the remainder."""
        a, t = self.a, self.t
        iters, rem = divmod(self.k, UNROLL_K)
        if iters:
            if iters > 1:
                a.mov(K_CNT, iters)
            kloop = a.label("k") if iters > 1 else None
            for u in range(UNROLL_K):
                self.k_step(mv, nb, u)
            for j in range(0 if self.tb else nb):  # trans_b: the row pointer moved in each step
                a.add(XB[j], XB[j], UNROLL_K * t.size)
            if iters > 1:
                a.subs(K_CNT, K_CNT, 1)
                a.b_ne(kloop)
        for u in range(rem):
            self.k_step(mv, nb, u)
        if rem and self.br > 1 and not self.tb:
            a.add(XB[0], XB[0], rem * t.size)

    def k_step(self, mv: int, nb: int, u: int) -> None:
        """One k: mv A vectors, then per column a broadcast B element and mv FMAs."""
        a, t = self.a, self.t
        if self.ta:  # A vectors gathered: lane i at row i (i*lda bytes), vector v v*lanes rows on
            ext = (None,) if t.es == "d" else ("sxtw",)
            for v in range(mv):
                if v:
                    a.madd(TMP, LANES, LDA, XA if v == 1 else TMP)
                t.ld1(a, t.z(Z_A + v), P[v + 1].z, mem(XA if v == 0 else TMP, t.z(Z_IDX), *ext))
            a.add(XA, XA, t.size)
        else:
            for v in range(mv):
                t.ld1(a, t.z(Z_A + v), P[v + 1].z, mem(XA, vl=v))
            a.add(XA, XA, LDA)
        for j in range(nb):
            zb = t.z(Z_B + j % self.b_regs)
            if self.tb:  # row k of B: column j is element j
                t.ld1r(a, zb, P[0].z, mem(XB[0], j * t.size))
            else:
                t.ld1r(a, zb, P[0].z, mem(XB[j], u * t.size))
            for v in range(mv):
                a.fmla(self.acc(mv, v, j), P[0].m, t.z(Z_A + v), zb)
        if self.tb:
            a.add(XB[0], XB[0], LDB)


def program(
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
    t = _check(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)
    flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c)) if on)
    a = Assembler(name=f"sve_brgemm_{dtype}_{m}x{n}x{k}_br{br_size}{flags}")
    swap, form = orientation(trans_a, trans_b, trans_c)
    rows, cols = (n, m) if swap else (m, n)
    _Brgemm(a, rows, cols, k, br_size, t, form, swap).kernel()
    return a


_generate = generator(
    program, signature, "A callable BRGEMM kernel (native on AArch64, else emulated at SVE length ``sve_vl`` bits)."
)


def generate(*args: Any, **kwargs: Any) -> Any:
    """A callable BRGEMM kernel (native on AArch64, else emulated at SVE length ``sve_vl`` bits).
    One column (n = 1) runs `sve_gemv`'s kernel (any transposes)."""
    bound = _generate.__signature__.bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    _check(p["m"], p["n"], p["k"], p["br_size"], p["trans_a"], p["trans_b"], p["trans_c"], p["dtype"])
    if p["n"] == 1:
        flags = (p["trans_a"], p["trans_b"], p["trans_c"])
        return sve_gemv.generate(p["m"], p["k"], p["br_size"], *flags, p["dtype"], sve_vl=p["sve_vl"])
    return _generate(*args, **kwargs)


generate.__signature__ = _generate.__signature__  # type: ignore[attr-defined]


def kloop_body(dtype: str = "fp32", vectors: int = 4) -> str:
    """Listing of one unrolled K-loop iteration of the ``vectors``-wide micro-block (for llvm-mca)."""
    t = dtype_info(dtype)
    if vectors not in BLOCKING:
        raise ValueError(f"vectors must be one of {sorted(BLOCKING)}, got {vectors!r}")
    a = Assembler(name="kloop")
    g = _Brgemm(a, 4 * 64, BLOCKING[vectors], UNROLL_K, 1, t)
    for u in range(UNROLL_K):
        g.k_step(vectors, BLOCKING[vectors], u)
    for j in range(BLOCKING[vectors]):
        a.add(XB[j], XB[j], UNROLL_K * t.size)
    return a.listing()
