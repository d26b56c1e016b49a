"""Hopper (sm_90a) GEMM: TMA loads, an mbarrier pipeline, warp-specialized wgmma consumers.

Computes one GEMM per launch, in mini_jit's column-major layouts (as :mod:`minijit.cuda.gemm`)::

    C = last_touch(first_touch(C) + A B)      A: a[m + k*lda], B: b[k + n*ldb], C: c[m + n*ldc] (fp32)

with f16 or bf16 inputs and fp32 accumulation. Mapping onto ``wgmma`` (D = X Y, X 64 x K rows,
Y K x N columns): X is B^T (rows n, K-major: imm-trans-a 0), Y is A (columns m, M-major:
imm-trans-b 1), so each accumulator register pair holds two neighbouring m of one n.

Inside a CTA (tile ``bm`` x ``bn`` of C, ``threads = 128 * (1 + consumers)``):

- warpgroup 0 is the producer (``setmaxnreg.dec`` to 40); one thread streams the K tiles
  (``bk`` = 64 elements = one 128-byte swizzle row) through ``stages`` shared buffers: wait on the
  stage's *empty* mbarrier, ``arrive.expect_tx`` its *full* barrier with the stage's bytes, and
  issue TMA loads: one box (64 k x ``bn`` n) of B, ``bm/64`` boxes (64 m x 64 k) of A, all
  128-byte swizzled. Out-of-range rows/columns arrive as zeros, so any M, N, K works;
- warpgroups 1..consumers (``setmaxnreg.inc`` to 232) own 64 n-rows each: wait on *full*, issue
  ``bk/16`` wgmma ``m64n{bm}k16`` from the stage through matrix descriptors, commit, wait, and
  arrive on *empty*;
- the epilogue applies the first touch (zero, load, relu-of-load) and last touch (none, relu) and
  stores with predicates m < M, n < N.

Kernel parameters: ``tmap_a, tmap_b`` (128-byte tensor maps from :func:`tensor_maps`), ``C``
(u64), ``M, N, K`` (s32), ``ldc`` (s64, bytes). Grid ``(ceil(M/bm), ceil(N/bn), 1)``, block
``(threads,)``, dynamic shared memory :attr:`Sm90Spec.smem_bytes` (above 48 KB: the launch sets
the function's limit). TMA needs A and B 16-byte aligned and lda, ldb multiples of 16 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptx import Module, addr, sreg
from ptx.tensormap import SWIZZLE_128B
from ptx.wgmma import make_descriptor

from .gemm import FIRST_TOUCH, LAST_TOUCH, GemmKernel, store_touched

ESIZE = {"f16": 2, "bf16": 2}
TMAP_DTYPE = {"f16": "float16", "bf16": "bfloat16"}
MUTATIONS = ("", "no_wgmma_fence", "wrong_swizzle", "expect_tx_plus16")
BK = 64  #: K elements per stage: one 128-byte swizzle row of 16-bit elements
SWIZZLE = 128


@dataclass(frozen=True)
class Sm90Spec:
    """One generated sm_90a kernel.

    ``bm``: C tile extent in m (wgmma N: 64, 128 or 256, a multiple of 64); ``bn``: extent in n,
    64 per consumer warpgroup (64 or 128); ``stages``: shared buffers (2..8); ``first``/``last``
    touches as in :class:`minijit.cuda.gemm.GemmSpec`; ``mutate``: a deliberate bug for tests
    (one of :data:`MUTATIONS`, "" for the real kernel).
    """

    dtype: str = "f16"
    bm: int = 256
    bn: int = 128
    stages: int = 4
    first: str = "zero"
    last: str = "none"
    mutate: str = ""

    def __post_init__(self) -> None:
        def bad(msg: str):
            raise ValueError(f"Sm90Spec {self}: {msg}")

        if self.dtype not in ESIZE:
            bad(f"dtype {self.dtype!r}; one of {sorted(ESIZE)}")
        if self.bm not in (64, 128, 192, 256):
            bad("bm must be 64, 128, 192 or 256 (wgmma N)")
        if self.bn not in (64, 128):
            bad("bn must be 64 or 128 (one or two consumer warpgroups)")
        if not 2 <= self.stages <= 8:
            bad("stages must be in 2..8")
        if self.first not in FIRST_TOUCH or self.last not in LAST_TOUCH:
            bad(f"first touch in {FIRST_TOUCH}, last touch in {LAST_TOUCH}")
        if self.mutate not in MUTATIONS:
            bad(f"mutate in {MUTATIONS}")
        if self.smem_bytes > 227 * 1024:
            bad(f"{self.smem_bytes} bytes of shared memory (max 232448)")

    # derived -------------------------------------------------------------------------------------
    @property
    def consumers(self) -> int:
        return self.bn // 64

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def b_bytes(self) -> int:
        """Shared bytes of one stage's B tile: bn rows (n) of 128 bytes (64 k)."""
        return self.bn * BK * 2

    @property
    def a_bytes(self) -> int:
        """Shared bytes of one stage's A tile: bm/64 boxes of 64 rows (k) of 128 bytes (64 m)."""
        return self.bm * BK * 2

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: 1024 bytes of alignment slack, the stages, 2 mbarriers per stage."""
        return 1024 + self.stages * self.stage_bytes + 16 * self.stages

    @property
    def name(self) -> str:
        tail = f"_{self.mutate}" if self.mutate else ""
        return f"gemm90_{self.dtype}_{self.bm}x{self.bn}x{BK}_s{self.stages}_{self.first}_{self.last}{tail}"


@dataclass
class Sm90Kernel(GemmKernel):
    """A generated kernel: PTX module, kernel and launch geometry (``grid(m, n)``: one batch)."""

    spec: Sm90Spec

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory the launch must grant (bytes)."""
        return self.spec.smem_bytes


def tensor_maps(spec: Sm90Spec, a: int, b: int, m: int, n: int, k: int, lda: int, ldb: int) -> tuple[dict, dict]:
    """``cuTensorMapEncodeTiled`` arguments (keyword dicts) for A at device address ``a`` (M x K,
    ``lda`` bytes between k) and B at ``b`` (K x N, ``ldb`` bytes between n)."""
    dt = TMAP_DTYPE[spec.dtype]
    common = dict(dtype=dt, rank=2, element_strides=(1, 1), swizzle=SWIZZLE_128B)
    ta = dict(global_address=a, global_dim=(m, k), global_strides=(lda,), box_dim=(64, BK), **common)
    tb = dict(global_address=b, global_dim=(k, n), global_strides=(ldb,), box_dim=(BK, spec.bn), **common)
    return ta, tb


def generate(spec: Sm90Spec) -> Sm90Kernel:
    """Emit the kernel for ``spec`` (see the module docstring for its parameters)."""
    S = spec
    mod = Module()
    k = mod.kernel(S.name, maxntid=S.threads, minnctapersm=1)
    # tiling decisions
    ks_per_stage = BK // 16
    a_kstep, b_kstep = 16 * 128, 32  # descriptor advance per k16: 16 rows of A, 32 bytes of a B row
    a_box_bytes = BK * 128  # one 64 m x 64 k box of A (LBO between boxes)
    tx_bytes = S.stage_bytes + (16 if S.mutate == "expect_tx_plus16" else 0)
    span = 64 if S.mutate == "wrong_swizzle" else SWIZZLE

    p_ta, p_tb = k.tensormap_param("tmap_a"), k.tensormap_param("tmap_b")
    p_c = k.param("u64", "C")
    p_m, p_n, p_k = (k.param("s32", x) for x in "MNK")
    p_ldc = k.param("s64", "ldc")
    dsmem = k.extern_shared("dsmem", align=1024)

    def reg(t, src=None):
        r = k.reg(t)
        if src is not None:
            k.mov(r, src)
        return r

    # CTA coordinates, shared layout (1024-aligned stages, then full[s], empty[s] barriers)
    tid = reg("u32", sreg.tid.x)
    wg = k.reg("u32")
    k.shr(wg, tid, 7)
    m0, n0 = k.reg("s32"), k.reg("s32")
    k.mov(m0, sreg.ctaid.x)
    k.mul(m0, m0, S.bm, mode="lo")
    k.mov(n0, sreg.ctaid.y)
    k.mul(n0, n0, S.bn, mode="lo")
    M, N, K = (reg("s32") for _ in range(3))
    for r, p in ((M, p_m), (N, p_n), (K, p_k)):
        k.ld_param(r, p)
    ktiles = k.reg("s32")
    k.add(ktiles, K, BK - 1)
    k.shr(ktiles, ktiles, 6)
    base = reg("u32", dsmem)
    k.add(base, base, 1023)
    k.and_(base, base, 0xFFFFFC00)
    bars = reg("u32")
    k.add(bars, base, S.stages * S.stage_bytes)

    # barrier init by thread 0: full[s] waits for 1 arrival + the stage's bytes, empty[s] for the consumers
    t0 = k.reg("pred")
    k.setp("eq", t0, tid, 0)
    for s in range(S.stages):
        k.mbarrier_init(addr(bars, 16 * s), 1, pred=t0)
        k.mbarrier_init(addr(bars, 16 * s + 8), S.consumers, pred=t0)
    k.fence_mbarrier_init()
    k.bar_sync(0)

    kt, stage, phase, sa, sb, fb, eb = (reg("s32" if i < 1 else "u32", 0) for i in range(7))
    ok = k.reg("pred")

    def advance():
        # next stage of the ring; the phase bit flips when the ring wraps
        k.add(kt, kt, 1)
        k.add(stage, stage, 1)
        wrap = k.reg("pred")
        k.setp("eq", wrap, stage, S.stages)
        k.mov(stage, 0, pred=wrap)
        k.xor(phase, phase, 1, pred=wrap)

    def stage_addrs():
        k.mad(sb, stage, S.stage_bytes, base, mode="lo")  # B tile, then A tile
        k.add(sa, sb, S.b_bytes)
        k.mad(fb, stage, 16, bars, mode="lo")
        k.add(eb, fb, 8)

    consumer = k.label("consumer")
    is_cons = k.reg("pred")
    k.setp("ne", is_cons, wg, 0)
    k.bra(consumer, pred=is_cons, uni=True)

    # ---- producer warpgroup: one thread issues the TMA loads
    k.setmaxnreg(40, inc=False)
    done = k.label("producer_done")
    k.bra(done, pred=~t0)
    tma, tmb = k.reg("u64"), k.reg("u64")
    k.param_address(tma, p_ta)
    k.param_address(tmb, p_tb)
    kc, mc = k.reg("s32"), k.reg("s32")
    ploop, pwait, pend = k.label("produce"), k.label("wait_empty"), k.label("produce_end")
    k.setp("ge", ok, kt, ktiles)
    k.bra(pend, pred=ok, uni=True)
    k.place(ploop)
    stage_addrs()
    epar = k.reg("u32")
    k.xor(epar, phase, 1)  # a fresh empty barrier counts as released
    k.place(pwait)
    k.mbarrier_try_wait_parity(ok, eb, epar)
    k.bra(pwait, pred=~ok)
    k.mbarrier_arrive_expect_tx(fb, tx_bytes)
    k.shl(kc, kt, 6)
    k.cp_async_bulk_tensor(sb, tmb, [kc, n0], fb)
    for j in range(S.bm // 64):
        k.add(mc, m0, 64 * j)
        k.cp_async_bulk_tensor(addr(sa, j * a_box_bytes), tma, [mc, kc], fb)
    advance()
    k.setp("lt", ok, kt, ktiles)
    k.bra(ploop, pred=ok, uni=True)
    k.place(pend)
    k.place(done)
    k.ret()

    # ---- consumer warpgroups: wgmma from the stages
    k.place(consumer)
    k.setmaxnreg(232, inc=True)
    g = k.reg("u32")
    k.sub(g, wg, 1)
    acc = k.regs("f32", S.bm // 2)
    for r in acc:
        k.mov(r, 0.0)
    lead = k.reg("pred")
    lt = k.reg("u32")
    k.and_(lt, tid, 127)
    k.setp("eq", lead, lt, 0)
    yes = k.reg("pred")
    k.setp("eq", yes, tid, tid)
    # constant descriptor bits: A (wgmma B operand, MN-major) and B (wgmma A operand, K-major)
    ya_bits = make_descriptor(0, a_box_bytes, 1024, span)
    xb_bits = make_descriptor(0, 16, 1024, span)
    gofs = k.reg("u32")
    k.mul(gofs, g, 64 * 128, mode="lo")  # this warpgroup's 64 n-rows of the B tile
    dx, dy, t64 = k.reg("b64"), k.reg("b64"), k.reg("u64")
    cloop, cwait, cend = k.label("consume"), k.label("wait_full"), k.label("consume_end")
    k.setp("ge", ok, kt, ktiles)
    k.bra(cend, pred=ok, uni=True)
    k.place(cloop)
    stage_addrs()
    k.place(cwait)
    k.mbarrier_try_wait_parity(ok, fb, phase)
    k.bra(cwait, pred=~ok)
    xaddr = k.reg("u32")
    k.add(xaddr, sb, gofs)
    for d, a_, bits in ((dx, xaddr, xb_bits), (dy, sa, ya_bits)):
        k.cvt(t64, a_)
        k.shr(t64, t64, 4)
        k.or_(d, t64, bits)
    if S.mutate != "no_wgmma_fence":
        k.wgmma_fence()
    for s in range(ks_per_stage):
        ddx, ddy = (dx, dy) if s == 0 else (k.reg("b64"), k.reg("b64"))
        if s:
            k.add(ddx, dx, (s * b_kstep) >> 4, type="u64")
            k.add(ddy, dy, (s * a_kstep) >> 4, type="u64")
        k.wgmma(f"m64n{S.bm}k16", S.dtype, acc, ddx, ddy, yes, trans_a=0, trans_b=1)
    k.wgmma_commit()
    k.wgmma_wait(0)
    k.mbarrier_arrive(eb, pred=lead)  # the stage is free again
    advance()
    k.setp("lt", ok, kt, ktiles)
    k.bra(cloop, pred=ok, uni=True)
    k.place(cend)

    # ---- epilogue: register i of lane l -> n = n0 + 64g + 16w + l/4 + 8((i%4)/2), m = m0 + 8(i/4) + 2(l%4) + i%2
    lane, w = k.reg("u32"), k.reg("u32")
    k.and_(lane, tid, 31)
    k.shr(w, lt, 5)
    nrow, mcol = k.reg("s32"), k.reg("s32")
    q = k.reg("u32")
    k.shr(q, lane, 2)
    k.mad(nrow, w, 16, q, mode="lo")
    k.mad(nrow, g, 64, nrow, mode="lo")
    k.add(nrow, nrow, n0)
    k.and_(q, lane, 3)
    k.mad(mcol, q, 2, m0, mode="lo")
    cptr, ldc, rowp = k.reg("s64"), k.reg("s64"), k.reg("s64")
    k.ld_param(cptr, p_c)
    k.cvta(cptr, cptr)
    k.ld_param(ldc, p_ldc)
    t = k.reg("s64")
    k.cvt(t, nrow)
    k.mad(rowp, t, ldc, cptr, mode="lo")
    k.cvt(t, mcol)
    k.mad(rowp, t, 4, rowp, mode="lo")
    zero_f = reg("f32", 0.0)
    row_ok = []
    for h in range(2):
        p = k.reg("pred")
        nh = k.reg("s32")
        k.add(nh, nrow, 8 * h)
        k.setp("lt", p, nh, N)
        row_ok.append(p)
    row8 = k.reg("s64")
    k.mul(row8, ldc, 8, mode="lo")
    rowp8 = k.reg("s64")
    k.add(rowp8, rowp, row8)
    for i, v in enumerate(acc):
        dm = 8 * (i // 4) + i % 2
        h = (i % 4) // 2
        p, mi = k.reg("pred"), k.reg("s32")
        k.add(mi, mcol, dm)
        k.setp("lt", p, mi, M)
        k.and_(p, p, row_ok[h])
        store_touched(k, S.first, S.last, v, addr(rowp8 if h else rowp, 4 * dm), p, zero_f)
    k.ret()
    return Sm90Kernel(S, mod, k)


def fits(dtype: str, m: int, n: int, k: int, ptr_a: int, ptr_b: int, lda: int, ldb: int) -> bool:
    """Can the sm_90a kernel run this GEMM (16-bit inputs, TMA alignment: base addresses and
    leading dimensions in bytes multiples of 16, sizes in the tensor map's range)?"""
    if dtype not in ESIZE:
        return False
    return all(x % 16 == 0 for x in (ptr_a, ptr_b, lda, ldb)) and min(m, n, k) >= 1 and max(m, n, k) < 1 << 31


__all__ = ["BK", "ESIZE", "MUTATIONS", "Sm90Kernel", "Sm90Spec", "fits", "generate", "tensor_maps"]
