"""Hopper (sm_90a) GEMM: TMA loads, an mbarrier pipeline, warp-specialized wgmma consumers.

Computes one GEMM per launch, or one per ``blockIdx.z`` (batched), optionally summed over a
reduction index ``r`` (BRGEMM), in mini_jit's column-major layouts (as :mod:`minijit.cuda.gemm`)::

    C_z = last_touch(first_touch(C_z) + sum_r A_zr B_zr)      C: c[m + n*ldc] (fp32, M-contiguous)

Operand layouts (``Sm90Spec.a_major`` / ``b_major``, as ``GemmSpec``; the C^T trick of
:mod:`minijit.cuda.operation` turns an N-contiguous C into these, so 4 variants cover all 8
orientations): A is ``a[m + k*lda]`` ("m") or ``a[k + m*lda]`` ("k"); B is ``b[k + n*ldb]`` ("k")
or ``b[n + k*ldb]`` ("n"); ``lda``/``ldb`` in bytes.

Input types: f16, bf16 (all four variants) and tf32 (fp32 inputs, **A and B K-major only**:
``wgmma`` has no transpose for tf32; the other tf32 orientations run on the mma.sync family, see
``CudaTensorOperation.family_for``). fp32 accumulation. tf32 operands go to shared memory as raw
fp32 (the tensor core ignores the low mantissa bits).

Mapping onto ``wgmma`` (D = X Y, X 64 x K rows, Y K x N columns): X is B^T (64 rows n per
consumer warpgroup), Y is A (``bm`` columns m), so each accumulator register pair holds two
neighbouring m of one n. Shared tiles keep each operand's global orientation, written by TMA with
the 128-byte swizzle; a K-tile ``bk`` is one 128-byte swizzle row (64 16-bit or 32 fp32 elements):

========  ===============================  ==========================  =====================
operand   TMA box (innermost first)        shared layout (128 B rows)  wgmma (imm-trans, LBO)
========  ===============================  ==========================  =====================
A "m"     bm/64 boxes (64 m, bk k)         rows k, box j at 8 KB * j   MN-major: 1, 8 KB
A "k"     one box (bk k, bm m)             rows m                      K-major: 0, (16)
B "k"     one box (bk k, bn n)             rows n                      K-major: 0, (16)
B "n"     bn/64 boxes (64 n, bk k)         rows k, box j at 8 KB * j   MN-major: 1, 8 KB
========  ===============================  ==========================  =====================

(SBO is 1024 bytes, 8 rows, in every case; a K-major descriptor advances 32 bytes per wgmma K
step, an MN-major one 16 rows = 2048 bytes; see :mod:`ptx.wgmma` for the canonical layouts.)

Batches and reductions go into the tensor maps as extra dimensions (no per-CTA address tables for
A and B, which TMA could not use): the reduction index ``r`` (``R`` values, uniform byte stride per
operand) then the batch index ``z = blockIdx.z`` (uniform byte stride per operand). An operand
whose stride is 0 (the same matrix for every r or z) has no such dimension
(``Sm90Spec.reduce``/``batch`` name the operands that do). C's offset comes from a batch table,
as in :mod:`minijit.cuda.gemm`: row z holds three s64 byte offsets (A, B, C), only C's is read.
Non-uniform A/B batch or reduction offsets are not expressible: those GEMMs run on mma.sync.

Inside a CTA (tile ``bm`` x ``bn`` of C, ``threads = 128 * (1 + consumers)``):

- warpgroup 0 is the producer (``setmaxnreg.dec`` to 40); one thread streams the ``R * ceil(K/bk)``
  K tiles through ``stages`` shared buffers: wait on the stage's *empty* mbarrier,
  ``arrive.expect_tx`` its *full* barrier with the stage's bytes, and issue the TMA loads.
  Out-of-range rows/columns (also the K tail of every r) arrive as zeros, so any M, N, K works;
- warpgroups 1..consumers (``setmaxnreg.inc`` to 232) own 64 n-rows each: wait on *full*, issue
  ``bk/kw`` wgmma ``m64n{bm}k{kw}`` (kw = 16, 8 for tf32) from the stage through matrix
  descriptors and commit them as one group; one group stays in flight (``wgmma.wait_group 1``),
  so the stage released on its *empty* barrier is the previous one, whose group has retired (the
  last stage after ``wait_group 0``, before the epilogue reads the accumulators);
- the epilogue applies the first touch (zero, load, relu-of-load) and last touch (none, relu) and
  stores with predicates m < M, n < N.

Persistent (``Sm90Spec.persistent``): a grid of ``(ctas, 1, 1)`` walks the ``tiles_m * tiles_n *
Z`` output tiles, CTA ``c`` taking tiles ``c, c + ctas, ...``; within one batch entry the order is
grouped, ``GROUP_M`` tiles of m for each tile of n before the next group (consecutive tiles share
B tiles and nearby A tiles in L2). The producer and the consumers walk the same sequence; the stage
ring and the mbarrier phases run on across tiles, so the producer loads the next tile's first
stages while the consumers store this one's C.

Kernel parameters: ``tmap_a, tmap_b`` (128-byte tensor maps from :func:`tensor_maps`), ``C``
(u64), ``batch_table`` (u64; only when ``spec.batch``), ``M, N, K`` (s32), ``R`` (s32; only when
``spec.reduce``), ``Z`` (s32, the batch count; only when ``spec.persistent``), ``ldc`` (s64,
bytes). Grid ``(ceil(M/bm), ceil(N/bn), batch)`` (persistent: :meth:`Sm90Kernel.grid` with the
CTA count), block ``(threads,)``, dynamic shared memory :attr:`Sm90Spec.smem_bytes` (above 48 KB:
the launch sets the function's limit). TMA needs A and B 16-byte aligned and lda, ldb and the batch/reduction
strides multiples of 16 bytes.
"""

from __future__ import annotations

from ptx import Module, addr, sreg
from ptx.wgmma import make_descriptor, wgmma_k

from .gemm import store_touched

# the spec, tensor maps and planning live in gemm_sm90_spec; gemm_sm90 keeps every name it had
from .gemm_sm90_spec import (  # noqa: F401
    BATCH_OPS,
    BK,
    ESIZE,
    GROUP_M,
    MN_BOX,
    REDUCE_OPS,
    ROW,
    SWIZZLE,
    TMAP_DTYPE,
    Sm90Kernel,
    Sm90Plan,
    Sm90Spec,
    fits,
    plan,
    tensor_maps,
    uniform_strides,
)


def generate(spec: Sm90Spec) -> Sm90Kernel:
    """Emit the kernel for ``spec`` (see the module docstring for its parameters)."""
    g = _Sm90Emitter(spec)
    g.scheduler_setup()  # tile scheduler: the grid-stride walk over output tiles (persistent)
    g.shared_layout()  # stage ring and its full/empty mbarriers
    consumer = g.k.label("consumer")
    is_cons = g.k.reg("pred")
    g.k.setp("ne", is_cons, g.wg, 0)
    g.k.bra(consumer, pred=is_cons, uni=True)
    g.producer()  # warpgroup 0: one thread issues the TMA loads
    g.k.place(consumer)
    acc, lt, gidx = g.consumer_mainloop()  # warpgroups 1..: wgmma from the stages
    g.epilogue(acc, lt, gidx)  # touches and stores of the accumulators
    return Sm90Kernel(spec, g.mod, g.k)


class _Sm90Emitter:
    """The stages of the sm_90a kernel, emitted in order into one PTX kernel: the tile scheduler,
    the shared stage ring, the TMA producer, the wgmma consumer main loop and the epilogue.
    Registers shared between stages are attributes."""

    def __init__(self, spec: Sm90Spec) -> None:
        S = self.S = spec
        self.mod = Module()
        k = self.k = self.mod.kernel(S.name, maxntid=S.threads, minnctapersm=1)
        # tiling decisions
        self.kw = kw = wgmma_k(S.dtype)  # K of one wgmma
        self.ks_per_stage = S.bk // kw
        self.box_bytes = S.bk * ROW  # one MN-major box: 64 mn x bk rows of 128 bytes (LBO between boxes)
        kmajor_step, mnmajor_step = kw * S.es, kw * ROW  # descriptor advance per wgmma K step (bytes)
        # wgmma operands: X = B^T (wgmma A), Y = A (wgmma B); transpose immediate 1 = MN-major
        self.x_trans, self.y_trans = x_trans, y_trans = int(S.b_major == "n"), int(S.a_major == "m")
        self.x_bits = make_descriptor(0, self.box_bytes if x_trans else 16, 1024, SWIZZLE)
        self.y_bits = make_descriptor(0, self.box_bytes if y_trans else 16, 1024, SWIZZLE)
        self.x_step = mnmajor_step if x_trans else kmajor_step
        self.y_step = mnmajor_step if y_trans else kmajor_step

        self.p_ta, self.p_tb = k.tensormap_param("tmap_a"), k.tensormap_param("tmap_b")
        self.p_c = k.param("u64", "C")
        self.p_bt = k.param("u64", "batch_table") if S.batch else None
        self.p_m, self.p_n, self.p_k = (k.param("s32", x) for x in "MNK")
        self.p_r = k.param("s32", "R") if S.reduce else None
        self.p_z = k.param("s32", "Z") if S.persistent else None
        self.p_ldc = k.param("s64", "ldc")
        self.dsmem = k.extern_shared("dsmem", align=1024)

    def reg(self, t, src=None):
        r = self.k.reg(t)
        if src is not None:
            self.k.mov(r, src)
        return r

    # ---- tile scheduler

    def scheduler_setup(self) -> None:
        """CTA coordinates, the problem size and (persistent) the tile count and group width."""
        k, S, reg = self.k, self.S, self.reg
        self.tid = tid = reg("u32", sreg.tid.x)
        self.wg = k.reg("u32")
        k.shr(self.wg, tid, 7)
        self.m0, self.n0, self.zc = k.reg("s32"), k.reg("s32"), k.reg("s32")
        M, N, K = (reg("s32") for _ in range(3))
        self.M, self.N, self.K = M, N, K
        for r, p in ((M, self.p_m), (N, self.p_n), (K, self.p_k)):
            k.ld_param(r, p)
        if S.persistent:  # tiles t = ctaid.x, + nctaid.x, ... of tiles_m * tiles_n * Z
            tiles_m, tiles_n, per_z, total, tile, width = (k.reg("s32") for _ in range(6))
            k.add(tiles_m, M, S.bm - 1)
            k.div(tiles_m, tiles_m, S.bm, rnd=None)
            k.add(tiles_n, N, S.bn - 1)
            k.div(tiles_n, tiles_n, S.bn, rnd=None)
            k.mul(per_z, tiles_m, tiles_n, mode="lo")
            k.ld_param(total, self.p_z)
            k.mul(total, total, per_z, mode="lo")
            k.mul(width, tiles_n, GROUP_M, mode="lo")
            k.mov(tile, sreg.ctaid.x)
            self.tiles_m, self.per_z, self.total, self.tile, self.width = tiles_m, per_z, total, tile, width

    def coords(self) -> None:
        """This tile's m0, n0 and batch index zc (persistent: grouped order, GROUP_M tiles of m per sweep of n)."""
        k, S, m0, n0, zc = self.k, self.S, self.m0, self.n0, self.zc
        if not S.persistent:
            k.mov(m0, sreg.ctaid.x)
            k.mul(m0, m0, S.bm, mode="lo")
            k.mov(n0, sreg.ctaid.y)
            k.mul(n0, n0, S.bn, mode="lo")
            k.mov(zc, sreg.ctaid.z)
            return
        r, grp, first, gsize, w, q = (k.reg("s32") for _ in range(6))
        k.div(zc, self.tile, self.per_z, rnd=None)
        k.mul(r, zc, self.per_z, mode="lo")
        k.sub(r, self.tile, r)
        k.div(grp, r, self.width, rnd=None)
        k.mul(first, grp, GROUP_M, mode="lo")
        k.sub(gsize, self.tiles_m, first)
        k.min(gsize, gsize, GROUP_M)
        k.mul(w, grp, self.width, mode="lo")
        k.sub(w, r, w)  # position inside the group: m fastest
        k.div(q, w, gsize, rnd=None)  # the n tile
        k.mul(n0, q, S.bn, mode="lo")
        k.mul(q, q, gsize, mode="lo")
        k.sub(q, w, q)
        k.add(q, q, first)  # the m tile
        k.mul(m0, q, S.bm, mode="lo")

    def next_tile(self, top, out) -> None:
        """Persistent: on to tile + nctaid.x (back to ``top``); one tile per CTA otherwise."""
        k = self.k
        if self.S.persistent:
            step = k.reg("s32")
            k.mov(step, sreg.nctaid.x)
            k.add(self.tile, self.tile, step)
            k.bra(top, uni=True)
        k.place(out)

    def tile_start(self, top, out) -> None:
        """Persistent: leave through ``out`` once past the last tile; then this tile's coordinates."""
        k = self.k
        if self.S.persistent:
            k.place(top)
            past = k.reg("pred")
            k.setp("ge", past, self.tile, self.total)
            k.bra(out, pred=past, uni=True)
            self.coords()

    # ---- shared memory: the stage ring

    def shared_layout(self) -> None:
        """K tile counts, 1024-aligned stages then full[s], empty[s] barriers, initialised by thread 0."""
        k, S, reg = self.k, self.S, self.reg
        if not S.persistent:
            self.coords()
        self.ktiles = ktiles = k.reg("s32")
        k.add(ktiles, self.K, S.bk - 1)
        k.shr(ktiles, ktiles, S.bk.bit_length() - 1)
        self.ntiles = ktiles  # K tiles of all reduction steps
        if S.reduce:
            rr = k.reg("s32")
            k.ld_param(rr, self.p_r)
            self.ntiles = k.reg("s32")
            k.mul(self.ntiles, ktiles, rr, mode="lo")
        self.base = base = reg("u32", self.dsmem)
        k.add(base, base, 1023)
        k.and_(base, base, 0xFFFFFC00)
        self.bars = bars = reg("u32")
        k.add(bars, base, S.stages * S.stage_bytes)

        # barrier init by thread 0: full[s] waits for 1 arrival + the stage's bytes, empty[s] for the consumers
        self.t0 = t0 = k.reg("pred")
        k.setp("eq", t0, self.tid, 0)
        for s in range(S.stages):
            k.mbarrier_init(addr(bars, 16 * s), 1, pred=t0)
            k.mbarrier_init(addr(bars, 16 * s + 8), S.consumers, pred=t0)
        k.fence_mbarrier_init()
        k.bar_sync(0)

        self.kt, self.stage, self.phase, self.sa, self.sb, self.fb, self.eb = (
            reg("s32" if i < 1 else "u32", 0) for i in range(7)
        )
        self.ok = k.reg("pred")

    def advance(self) -> None:
        """Next stage of the ring; the phase bit flips when the ring wraps."""
        k = self.k
        k.add(self.kt, self.kt, 1)
        k.add(self.stage, self.stage, 1)
        wrap = k.reg("pred")
        k.setp("eq", wrap, self.stage, self.S.stages)
        k.mov(self.stage, 0, pred=wrap)
        k.xor(self.phase, self.phase, 1, pred=wrap)

    def stage_addrs(self) -> None:
        """sb, sa: this stage's B and A tiles; fb, eb: its full and empty barriers."""
        k, S = self.k, self.S
        k.mad(self.sb, self.stage, S.stage_bytes, self.base, mode="lo")  # B tile, then A tile
        k.add(self.sa, self.sb, S.b_bytes)
        k.mad(self.fb, self.stage, 16, self.bars, mode="lo")
        k.add(self.eb, self.fb, 8)

    # ---- producer warpgroup

    def producer(self) -> None:
        """Warpgroup 0: thread 0 waits for a free stage and loads its B and A tiles with TMA."""
        k, S, reg, ok, kt = self.k, self.S, self.reg, self.ok, self.kt
        k.setmaxnreg(40, inc=False)
        done = k.label("producer_done")
        k.bra(done, pred=~self.t0)
        tma, tmb = k.reg("u64"), k.reg("u64")
        k.param_address(tma, self.p_ta)
        k.param_address(tmb, self.p_tb)
        kc, mc, kin, ri = k.reg("s32"), k.reg("s32"), reg("s32", 0), reg("s32", 0)
        extra = {op: ([ri] if op in S.reduce else []) + ([self.zc] if op in S.batch else []) for op in "ab"}
        ptile, pdone = k.label("produce_tile"), k.label("produce_tiles_done")
        self.tile_start(ptile, pdone)
        for r in (kt, kin, ri):  # a new tile: K tiles from the first (the stage ring goes on)
            k.mov(r, 0)
        ploop, pwait, pend = k.label("produce"), k.label("wait_empty"), k.label("produce_end")
        k.setp("ge", ok, kt, self.ntiles)
        k.bra(pend, pred=ok, uni=True)
        k.place(ploop)
        self.stage_addrs()
        epar = k.reg("u32")
        k.xor(epar, self.phase, 1)  # a fresh empty barrier counts as released
        k.place(pwait)
        k.mbarrier_try_wait_parity(ok, self.eb, epar)
        k.bra(pwait, pred=~ok)
        k.mbarrier_arrive_expect_tx(self.fb, S.stage_bytes)
        k.shl(kc, kin, S.bk.bit_length() - 1)
        for op, k_major, smem, tmap, row0, rows in (
            ("b", S.b_major == "k", self.sb, tmb, self.n0, S.bn),
            ("a", S.a_major == "k", self.sa, tma, self.m0, S.bm),
        ):
            if k_major:  # one box: the K tile x all rows
                k.cp_async_bulk_tensor(smem, tmap, [kc, row0, *extra[op]], self.fb)
                continue
            for j in range(rows // MN_BOX):  # MN-major: boxes of MN_BOX rows (one 128-byte swizzle span)
                k.add(mc, row0, MN_BOX * j)
                k.cp_async_bulk_tensor(addr(smem, j * self.box_bytes), tmap, [mc, kc, *extra[op]], self.fb)
        k.add(kin, kin, 1)
        if S.reduce:  # next reduction step after the last K tile
            wrap_k = k.reg("pred")
            k.setp("eq", wrap_k, kin, self.ktiles)
            k.mov(kin, 0, pred=wrap_k)
            k.add(ri, ri, 1, pred=wrap_k)
        self.advance()
        k.setp("lt", ok, kt, self.ntiles)
        k.bra(ploop, pred=ok, uni=True)
        k.place(pend)
        self.next_tile(ptile, pdone)
        k.place(done)
        k.ret()

    # ---- consumer warpgroups: the MMA main loop

    def consumer_mainloop(self):
        """Warpgroups 1..: wait for a full stage, wgmma over its K steps, free the previous stage.
        Returns the accumulators, the thread's index in its warpgroup and the consumer index."""
        k, S, reg, ok, kt = self.k, self.S, self.reg, self.ok, self.kt
        k.setmaxnreg(232, inc=True)
        g = k.reg("u32")
        k.sub(g, self.wg, 1)
        acc = k.regs("f32", S.bm // 2)
        self.lead = lead = k.reg("pred")
        lt = k.reg("u32")
        k.and_(lt, self.tid, 127)
        k.setp("eq", lead, lt, 0)
        yes = k.reg("pred")
        k.setp("eq", yes, self.tid, self.tid)
        gofs = k.reg("u32")
        k.mul(gofs, g, 64 * ROW, mode="lo")  # this warpgroup's 64 n of the B tile (64 rows, or box g)
        dx, dy, t64 = k.reg("b64"), k.reg("b64"), k.reg("u64")
        prev_eb = reg("u32", 0)  # the empty barrier of the stage whose wgmma group may still run
        self.ctile, self.cdone = k.label("consume_tile"), k.label("consume_tiles_done")
        self.tile_start(self.ctile, self.cdone)
        for r in acc:
            k.mov(r, 0.0)
        k.mov(kt, 0)
        cloop, cwait, cend = k.label("consume"), k.label("wait_full"), k.label("consume_end")
        k.setp("ge", ok, kt, self.ntiles)
        k.bra(cend, pred=ok, uni=True)
        k.place(cloop)
        self.stage_addrs()
        k.place(cwait)
        k.mbarrier_try_wait_parity(ok, self.fb, self.phase)
        k.bra(cwait, pred=~ok)
        xaddr = k.reg("u32")
        k.add(xaddr, self.sb, gofs)
        for d, a_, bits in ((dx, xaddr, self.x_bits), (dy, self.sa, self.y_bits)):
            k.cvt(t64, a_)
            k.shr(t64, t64, 4)
            k.or_(d, t64, bits)
        self.wgmma_stage(acc, dx, dy, yes)
        # one group stays in flight: once the previous stage's group has retired, that stage is free
        k.wgmma_wait(1)
        not_first = k.reg("pred")
        k.setp("ne", not_first, kt, 0)
        k.and_(not_first, not_first, lead)
        k.mbarrier_arrive(prev_eb, pred=not_first)
        k.mov(prev_eb, self.eb)
        self.advance()
        k.setp("lt", ok, kt, self.ntiles)
        k.bra(cloop, pred=ok, uni=True)
        k.place(cend)
        # the last group: wait for it before the epilogue reads the accumulators, then free its stage
        k.wgmma_wait(0)
        last = k.reg("pred")
        k.setp("gt", last, kt, 0)
        k.and_(last, last, lead)
        k.mbarrier_arrive(prev_eb, pred=last)
        return acc, lt, g

    def wgmma_stage(self, acc, dx, dy, yes) -> None:
        """The wgmma group of one stage: ``ks_per_stage`` K steps, descriptors advanced per step."""
        k, S = self.k, self.S
        k.wgmma_fence()
        for s in range(self.ks_per_stage):
            ddx, ddy = (dx, dy) if s == 0 else (k.reg("b64"), k.reg("b64"))
            if s:
                k.add(ddx, dx, (s * self.x_step) >> 4, type="u64")
                k.add(ddy, dy, (s * self.y_step) >> 4, type="u64")
            k.wgmma(f"m64n{S.bm}k{self.kw}", S.dtype, acc, ddx, ddy, yes, trans_a=self.x_trans, trans_b=self.y_trans)
        k.wgmma_commit()

    # ---- epilogue

    def epilogue(self, acc, lt, g) -> None:
        """Register i of lane l -> n = n0 + 64g + 16w + l/4 + 8((i%4)/2), m = m0 + 8(i/4) + 2(l%4) + i%2;
        first and last touch, predicated stores to C, then the next tile."""
        k, S = self.k, self.S
        lane, w = k.reg("u32"), k.reg("u32")
        k.and_(lane, self.tid, 31)
        k.shr(w, lt, 5)
        nrow, mcol = k.reg("s32"), k.reg("s32")
        q = k.reg("u32")
        k.shr(q, lane, 2)
        k.mad(nrow, w, 16, q, mode="lo")
        k.mad(nrow, g, 64, nrow, mode="lo")
        k.add(nrow, nrow, self.n0)
        k.and_(q, lane, 3)
        k.mad(mcol, q, 2, self.m0, mode="lo")
        rowp, ldc = self.c_rows(nrow, mcol)
        zero_f = self.reg("f32", 0.0)
        row_ok = []
        for h in range(2):
            p = k.reg("pred")
            nh = k.reg("s32")
            k.add(nh, nrow, 8 * h)
            k.setp("lt", p, nh, self.N)
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
            k.setp("lt", p, mi, self.M)
            k.and_(p, p, row_ok[h])
            store_touched(k, S.first, S.last, v, addr(rowp8 if h else rowp, 4 * dm), p, zero_f)
        self.next_tile(self.ctile, self.cdone)
        k.ret()

    def c_rows(self, nrow, mcol):
        """The address of C[mcol, nrow] (batch offset from the table) and ldc, in bytes."""
        k = self.k
        cptr, ldc, rowp = k.reg("s64"), k.reg("s64"), k.reg("s64")
        k.ld_param(cptr, self.p_c)
        k.cvta(cptr, cptr)
        if self.S.batch:  # C's byte offset: column 2 of batch-table row z
            bt, coff = k.reg("s64"), k.reg("s64")
            k.ld_param(bt, self.p_bt)
            k.cvta(bt, bt)
            k.mad(bt, self.zc, 24, bt, mode="wide")
            k.ld("global", coff, addr(bt, 16))
            k.add(cptr, cptr, coff)
        k.ld_param(ldc, self.p_ldc)
        t = k.reg("s64")
        k.cvt(t, nrow)
        k.mad(rowp, t, ldc, cptr, mode="lo")
        k.cvt(t, mcol)
        k.mad(rowp, t, 4, rowp, mode="lo")
        return rowp, ldc


__all__ = [
    "BATCH_OPS",
    "BK",
    "ESIZE",
    "REDUCE_OPS",
    "Sm90Kernel",
    "Sm90Plan",
    "Sm90Spec",
    "fits",
    "generate",
    "plan",
    "tensor_maps",
    "uniform_strides",
]
