"""AArch64 SME batch-reduce GEMM: C += sum over br of A_br B_br as outer products into ZA tiles.

`SmeBrgemm` gives ``program(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)`` and
``generate(..., sme_vl)``, a kernel of `common.brgemm_signature` with the layouts and strides of
`minijit.kernels.aarch64.brgemm` (column-major, strides in elements; ``trans_*`` as there). The
kernel is streaming-vector-length agnostic: it reads L = SVL / element bits (``cntw``/``cntd`` in
streaming mode) and walks M, N and K with ``whilelt`` predicates, so every edge is predicated.

Blocking (T = ZA tiles of the element size: fp32 4, fp64 8):

    C block     mt tiles stacked along M (mt = 3 fp32, 6 fp64: rows mt*L, columns L)
    transpose   the last tile (za3.s / za7.d) turns L columns of B (contiguous in k) into L rows
                of B (contiguous in n): columns loaded as vertical slices, rows read back as
                horizontal ones (``mova``) -- no gathers, which streaming mode lacks
    per k       mt A vectors (``ld1w``/``ld1d`` of column k), one B row, mt ``fmopa``

Predicates: p0..p(mt-1) rows of the tiles, P_N the block's columns, P_K the K chunk (and the
scratch of ``psel`` for row-wise C with ``trans_c``); fmopa takes p0..p7, so mt + 2 <= 8. The first
empty row predicate picks a narrower variant (fewer tiles), as in `brgemm.SveBrgemm`.

Forms: plain; ``trans_b`` reads B rows directly (no transpose tile); ``trans_c`` loads and stores
C by rows (horizontal slices, each row guarded by ``psel`` on its tile's row predicate);
``trans_a`` with ``trans_b`` runs Cᵀ = Bᵀ·Aᵀ (the plain form, a/b swapped, ``trans_c`` flipped).
``trans_a`` alone (A columns strided as well as B rows) turns A through ZA too: each accumulating
tile has a transpose tile of A (rows loaded as horizontal slices under ``psel``, columns read back
as vertical ones), so fewer tiles accumulate (fp32: 1 + 1 A + 1 B of 4; fp64: 3 + 3 + 1 of 8) and
P_T, the ``psel`` result, takes the predicate after P_K.

Streaming mode and ZA are entered after the prologue (``smstart``) and left before the epilogue
(``smstop``); nothing is called in between. A change of streaming mode zeroes Z0-Z31, so the
callee-saved d8-d15 are saved with x19-x28 (AAPCS64). C is loaded into ZA before the batch loop
(first touch) and stored after it (last touch).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from asm.aarch64 import Assembler, P, X, mem, w12, w13
from asm.aarch64.sme import ZaDir, ZaReg
from minijit.kernels.aarch64.brgemm import Brgemm
from minijit.kernels.aarch64.common import DType, brgemm_signature, epilogue, prologue

__all__ = ["SME_CORES", "SmeBrgemm", "model"]

A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes)
L, N0, M0, NCOLS = X[8:12]  # lanes per streaming vector, block origin (elements), columns in the block
J, KK = X[12], X[13]  # slice indices (w12: C column / B column / C row, w13: k within a chunk)
M_REG, N_REG, K_REG = X[14], X[15], X[16]  # m, n, k
B_N, C_N, C_M = X[17], X[19], X[20]  # B and C at column N0, C at (M0, N0)  (x18: platform register)
A_BR, B_BR, BR_CNT = X[21], X[22], X[23]  # A and B of the current batch, batches left
K0, KC, A_K, PTR, TMP = X[24], X[25], X[26], X[27], X[28]  # K chunk origin and size, walking pointers
Z_B = 31  # the B row of one k


class SmeBrgemm(Brgemm):
    """One SME BRGEMM kernel being emitted; the methods mirror its loops (N, M, BR, K)."""

    ISA = "sme"
    MAX_SIZE = None
    #: tiles stacked along M per element size (row predicates p0..mt-1, then P_N, P_K)
    TILES_M: ClassVar[dict[str, int]] = {"s": 3, "d": 6}
    #: ``trans_a`` alone: accumulating tiles, each with a transpose tile of A (and P_T for psel)
    TILES_M_TA: ClassVar[dict[str, int]] = {"s": 1, "d": 3}

    def __init__(
        self, a: Assembler, m: int, n: int, k: int, br: int, t: DType, tb: bool, tc: bool, ta: bool = False
    ) -> None:
        self.a, self.m, self.n, self.k, self.br, self.t, self.tb, self.tc = a, m, n, k, br, t, tb, tc
        self.ta = ta
        self.mt = (self.TILES_M_TA if ta else self.TILES_M)[t.es]
        self.p_n, self.p_k, self.p_t = P[self.mt], P[self.mt + 1], P[self.mt + 2]
        self.transpose_tile = {"s": 3, "d": 7}[t.es]

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
        """The BRGEMM kernel as an `Assembler`. Bad arguments raise ValueError."""
        t = cls.check(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)
        swap = trans_a and trans_b
        flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c)) if on)
        a = Assembler(name=f"sme_brgemm_{dtype}_{m}x{n}x{k}_br{br_size}{flags}")
        if swap:  # Cᵀ = Bᵀ·Aᵀ: (n, m), neither transposed, trans_c flipped
            cls(a, n, m, k, br_size, t, False, not trans_c).kernel(swap=True)
        else:
            cls(a, m, n, k, br_size, t, trans_b, trans_c, trans_a).kernel(swap=False)
        return a

    @classmethod
    def generate(cls, *args: Any, sme_vl: int | None = None, sve_vl: int = 128, **kwargs: Any) -> Any:
        """JIT the kernel of ``program(*args, **kwargs)``: native on an AArch64 host (with SME), else
        emulated at streaming vector length ``sme_vl`` bits (None: qemu's default, 256) in the worker
        of SVE length ``sve_vl`` (the kernel uses none; it picks the worker its callers share)."""
        from minijit.runtime import load

        p = inspect.signature(cls.program).bind(*args, **kwargs)
        p.apply_defaults()
        a = cls.program(*p.args, **p.kwargs)
        sig = brgemm_signature(p.arguments["dtype"])
        return load(
            a.code(),
            sig,
            isa="aarch64",
            name=cls.name(**p.arguments),
            listing=a.listing(),
            sve_vl=sve_vl,
            sme_vl=sme_vl,
        )

    @classmethod
    def kloop_body(cls, dtype: str = "fp32") -> str:
        """Listing of one K step of the widest block (B row from the transpose tile, mt A vectors,
        mt outer products, the step's counters and branch): what a cost model or llvm-mca reads."""
        t = cls.check(1, 1, 1, 1, False, False, False, dtype)
        a = Assembler(name="sme_kstep")
        kern = cls(a, 1, 1, 1, 1, t, False, False)
        top = a.label("k")
        a.mova(kern.z(Z_B), kern.p_n.m, kern.slice(kern.transpose_tile, False, w13))
        kern.k_step(kern.mt, top)
        return a.listing()

    # -- operands ------------------------------------------------------------------------
    def tile(self, v: int) -> Any:
        return getattr(ZaReg(v), self.t.es)

    def slice(self, v: int, vertical: bool, ws: Any) -> Any:
        return getattr(ZaDir(v, vertical), self.t.es)[ws, 0]

    def z(self, idx: int) -> Any:
        return self.t.z(idx)

    def p(self, idx: int) -> Any:
        return getattr(P[idx], self.t.es)

    # -- kernel --------------------------------------------------------------------------
    def kernel(self, swap: bool) -> None:
        """Prologue (x19-x28, d8-d15), smstart, the N loop, smstop, epilogue."""
        a, t = self.a, self.t
        frame = prologue(a, range(19, 29), range(8, 16), writeback=True)
        self.entry(a, t, swap, TMP)
        a.smstart()  # streaming mode and ZA on (Z, P and ZA zeroed)
        t.cnt(a, L)  # lanes per streaming vector
        for reg, value in ((M_REG, self.m), (N_REG, self.n), (K_REG, self.k)):
            a.mov(reg, value)
        self.n_loop()
        a.smstop()
        epilogue(a, frame)

    def min_l(self, rd: Any, hi: Any, lo: Any) -> None:
        """rd = min(L, hi - lo)."""
        a = self.a
        a.sub(rd, hi, lo)
        a.cmp(rd, L)
        a.csel(rd, L, rd, "gt")

    def n_loop(self) -> None:
        """Column blocks of L: P_N, NCOLS, B and C at column N0, then the M loop."""
        a, t = self.a, self.t
        a.mov(N0, 0)
        done = a.new_label("n_done")
        top = a.label("n")
        a.whilelt(self.p(self.mt), N0, N_REG)
        a.b_none(done)
        self.min_l(NCOLS, N_REG, N0)
        if self.tb:  # row k of B: columns N0.. are elements N0..
            a.add(B_N, B, N0, "lsl", t.shift)
        else:
            a.madd(B_N, N0, LDB, B)
        if self.tc:  # row-major C: column N0 is element N0 of each row
            a.add(C_N, C, N0, "lsl", t.shift)
        else:
            a.madd(C_N, N0, LDC, C)
        self.m_loop()
        a.add(N0, N0, L)
        a.b(top)
        a.bind(done)

    def m_loop(self) -> None:
        """Row blocks of mt*L: row predicates p0.. (the first empty one picks the variant), blocks."""
        a, t = self.a, self.t
        a.mov(M0, 0)
        done = a.new_label("m_done")
        variants = {mv: a.new_label(f"m{mv}t") for mv in range(1, self.mt + 1)}
        top = a.label("m")
        a.whilelt(self.p(0), M0, M_REG)
        a.b_none(done)
        a.mov(TMP, M0)
        for v in range(1, self.mt):
            a.add(TMP, TMP, L)
            a.whilelt(self.p(v), TMP, M_REG)
            a.b_none(variants[v])
        for mv in range(self.mt, 0, -1):
            a.bind(variants[mv])
            self.block(mv)
            t.inc(a, M0, mv)
            a.b(top)
        a.bind(done)

    def block(self, mv: int) -> None:
        """One block of mv tiles: C into ZA, the batch loop of K loops, ZA back into C."""
        a, t = self.a, self.t
        if self.tc:  # row-major C: row M0 starts M0*ldc bytes on
            a.madd(C_M, M0, LDC, C_N)
        else:
            a.add(C_M, C_N, M0, "lsl", t.shift)
        self.c_tiles(mv, store=False)
        if self.ta:  # row-major A: row M0 starts M0*lda bytes on
            a.madd(A_BR, M0, LDA, A)
        else:
            a.add(A_BR, A, M0, "lsl", t.shift)  # A column 0 at row M0
        a.mov(B_BR, B_N)
        a.mov(BR_CNT, self.br)
        top = a.label("br")
        self.k_loop(mv)
        a.add(A_BR, A_BR, BR_A)
        a.add(B_BR, B_BR, BR_B)
        a.subs(BR_CNT, BR_CNT, 1)
        a.b_ne(top)
        self.c_tiles(mv, store=True)

    def c_tiles(self, mv: int, store: bool) -> None:
        """Load or store the mv tiles of C at C_M: column j of every tile (vertical slice j) for
        j < NCOLS; ``trans_c``: row i of every tile (horizontal slice i, L rows, each under
        ``psel`` of the tile's row predicate and P_N) at C_M + (v*L + i)*ldc."""
        a, t = self.a, self.t
        ldst = t.st1 if store else t.ld1
        a.mov(J, 0)
        a.mov(PTR, C_M)
        top = a.label("c_st" if store else "c_ld")
        if self.tc:
            a.mul(KC, L, LDC)  # bytes from one tile's rows to the next's
            a.mov(TMP, PTR)
            for v in range(mv):
                a.psel(self.p_k, self.p_n, self.p(v)[w12, 0])
                ldst(a, self.slice(v, False, w12), self.p_k if store else self.p_k.z, mem(TMP))
                if v + 1 < mv:
                    a.add(TMP, TMP, KC)
            a.add(PTR, PTR, LDC)
            a.add(J, J, 1)
            a.cmp(J, L)
        else:
            a.mov(TMP, PTR)
            for v in range(mv):
                ldst(a, self.slice(v, True, w12), P[v] if store else P[v].z, mem(TMP))
                if v + 1 < mv:
                    a.addvl(TMP, TMP, 1)
            a.add(PTR, PTR, LDC)
            a.add(J, J, 1)
            a.cmp(J, NCOLS)
        a.b_lt(top)

    def k_loop(self, mv: int) -> None:
        """All K of one batch: chunks of L k (P_K, KC), each B chunk turned into rows in the
        transpose tile, then KC outer-product steps; ``trans_b``: K steps on B rows directly."""
        a, t = self.a, self.t
        a.mov(A_K, A_BR)
        if self.tb:
            a.mov(PTR, B_BR)
            a.mov(KC, K_REG)
            a.mov(KK, 0)
            top = a.label("k")
            t.ld1(a, self.z(Z_B), self.p_n.z, mem(PTR))  # row k of B
            a.add(PTR, PTR, LDB)
            self.k_step(mv, top)
            return
        a.mov(K0, 0)
        done = a.new_label("k_done")
        chunk = a.label("k_chunk")
        a.whilelt(self.p(self.mt + 1), K0, K_REG)
        a.b_none(done)
        self.min_l(KC, K_REG, K0)
        # B[K0.., N0 + j] (column j, contiguous in k) -> vertical slice j of the transpose tile
        a.add(PTR, B_BR, K0, "lsl", t.shift)
        a.mov(J, 0)
        cols = a.label("b_cols")
        t.ld1(a, self.slice(self.transpose_tile, True, w12), self.p_k.z, mem(PTR))
        a.add(PTR, PTR, LDB)
        a.add(J, J, 1)
        a.cmp(J, NCOLS)
        a.b_lt(cols)
        if self.ta:
            self.a_rows(mv)
        a.mov(KK, 0)
        top = a.label("k")
        a.mova(self.z(Z_B), self.p_n.m, self.slice(self.transpose_tile, False, w13))  # row K0 + kk of B
        self.k_step(mv, top)
        a.add(K0, K0, L)
        a.b(chunk)
        a.bind(done)

    def a_rows(self, mv: int) -> None:
        """``trans_a``: A[row, K0..] (row i of tile v, contiguous in k) -> horizontal slice i of
        transpose tile mt + v, for the rows of the tile inside M (``psel`` of its row predicate)."""
        a, t = self.a, self.t
        a.add(PTR, A_BR, K0, "lsl", t.shift)  # tile v's rows follow tile v-1's: PTR runs on
        for v in range(mv):
            a.mov(J, 0)
            rows = a.label("a_rows")
            a.psel(self.p_t, self.p_k, self.p(v)[w12, 0])
            t.ld1(a, self.slice(self.mt + v, False, w12), self.p_t.z, mem(PTR))
            a.add(PTR, PTR, LDA)
            a.add(J, J, 1)
            a.cmp(J, L)
            a.b_lt(rows)

    def k_step(self, mv: int, top: Any) -> None:
        """One k (B row in Z_B): mv A vectors of column k (``trans_a``: vertical slices kk of the A
        transpose tiles), mv outer products; back to ``top`` while kk < KC."""
        a, t = self.a, self.t
        for v in range(mv):
            if self.ta:
                a.mova(self.z(v), P[v].m, self.slice(self.mt + v, True, w13))
            else:
                t.ld1(a, self.z(v), P[v].z, mem(A_K, vl=v))
        for v in range(mv):
            a.fmopa(self.tile(v), P[v].m, self.p_n.m, self.z(v), self.z(Z_B))
        if not self.ta:
            a.add(A_K, A_K, LDA)
        a.add(KK, KK, 1)
        a.cmp(KK, KC)
        a.b_lt(top)


# -- a stated performance model (no SME hardware was reached: nothing here is a measurement) ---------
#: public figures of SME cores, as written in bench/results/aarch64_sme_2026-11-28.md (section 3):
#: "apple-m4": a little over 2.3 fp32 TFLOPS with ``fmopa`` on one P-core thread at SVL 512 (Remke
#: and Breuer, "Hello SME!", arXiv:2409.18779), at the P-core's ~4.4 GHz; the NEON comparison runs
#: llvm-mca on LLVM's ``apple-m4`` model (`minijit.kernels.aarch64.mca`). Keys: fp32 peak (GFLOPS)
#: at ``svl`` bits, clock (GHz), the llvm-mca -mcpu, the source in words.
SME_CORES: dict[str, tuple[float, int, float, str, str]] = {
    "apple-m4": (2300.0, 512, 4.4, "apple-m4", "Remke and Breuer, 'Hello SME!', arXiv:2409.18779"),
}
_MODEL_SVLS = (128, 256, 512, 1024, 2048)


def _neon_mca(mcpu: str, dtype: str, ghz: float) -> str:
    """The NEON BRGEMM's llvm-mca line on ``mcpu`` (32x32x32, its default block), or why there is none."""
    from asm import llvm
    from minijit.kernels.aarch64 import mca

    try:
        e = mca.estimate(isa="neon", mcpu=mcpu, dtype=dtype, iterations=100)
    except (llvm.LlvmError, OSError, ValueError) as err:
        return f"NEON kernel, llvm-mca -mcpu={mcpu}: unavailable ({str(err).splitlines()[0]})"
    return (
        f"NEON kernel, llvm-mca -mcpu={mcpu} ({e.shape}): {e.cycles:.2f} cycles per K group of {e.fmas} FMAs, "
        f"{e.flops_per_cycle:.1f} flops/cycle = {e.flops_per_cycle * ghz:.0f} GFLOPS at {ghz} GHz (an estimate)"
    )


def model(m: int, n: int, k: int, dtype: str = "fp32", sme_vl: int = 512, core: str = "apple-m4") -> str:
    """A throughput model of the SME BRGEMM of one ``m`` x ``n`` x ``k`` prim (elements) at streaming
    vector length ``sme_vl`` bits, from the public figures of ``core`` (`SME_CORES`), as text: outer
    products per cycle per SVL, the Z-register load bandwidth the K step needs, predicted cycles per
    K step and GFLOPS at the stated clock, next to the NEON kernel's llvm-mca estimate on the same
    core model ("unavailable" without llvm-mca). A model, not a measurement. ValueError naming the
    argument for a bad one."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if dtype not in ("fp32", "fp64"):
        raise ValueError(f"dtype must be 'fp32' or 'fp64', got {dtype!r}")
    if sme_vl not in _MODEL_SVLS:
        raise ValueError(f"sme_vl must be one of {', '.join(map(str, _MODEL_SVLS))} (bits), got {sme_vl!r}")
    if core not in SME_CORES:
        raise ValueError(f"core must be one of {', '.join(SME_CORES)}, got {core!r}")
    peak, svl0, ghz, mcpu, source = SME_CORES[core]
    mt = SmeBrgemm.TILES_M["s"]
    lines = [f"// SME BRGEMM performance model ({core}, {m}x{n}x{k} {dtype}, SVL {sme_vl}): a model, not a measurement"]
    if dtype == "fp64":
        lines.append("//   fp64: not modelled (no public fp64 fmopa rate was checked)")
    else:
        per_cycle = peak / (2 * (svl0 // 32) ** 2) / ghz  # fp32 outer products of one SVL per cycle
        lanes = sme_vl // 32
        step_cycles = mt / per_cycle  # a full block's K step: mt fmopa
        step_bytes = (mt + 1) * sme_vl // 8  # mt A vectors + (amortised) one B column into ZA
        fmopas = -(-m // lanes) * -(-n // lanes) * k  # every edge tile is a whole outer product
        gflops = 2 * m * n * k * per_cycle * ghz / fmopas
        if sme_vl != svl0:
            lines.append(f"//   the rate is {core}'s at SVL {svl0}, assumed per outer product at SVL {sme_vl}")
        lines += [
            f"//   outer products per cycle per SVL: {per_cycle:.2f} ({peak / 1000:.1f} fp32 TFLOPS at SVL {svl0}"
            f" / (2*{svl0 // 32}^2 flops) / {ghz} GHz; {source})",
            f"//   K step ({mt} fmopa of {lanes}x{lanes}, {mt} A loads, 1 mova, 1 B column): {step_cycles:.2f} "
            f"cycles predicted if one fmopa issues per cycle whatever its tile; {4 / per_cycle:.2f} if the peak "
            "needs 4 tiles in flight (3 of 4 used)",
            f"//   Z-register load bandwidth needed: {step_bytes} B per K step = {step_bytes / step_cycles:.1f} B/cycle"
            " (no public load-bandwidth figure was checked: not compared)",
            f"//   predicted at {ghz} GHz: {gflops:.0f} GFLOPS for this prim ({gflops * 3 / 4:.0f} under the"
            f" 4-tile assumption; edge tiles counted whole)",
        ]
    lines.append("//   " + _neon_mca(mcpu, dtype, ghz))
    return "\n".join(lines)
