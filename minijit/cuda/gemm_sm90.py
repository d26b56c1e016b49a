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

from dataclasses import dataclass

from ptx import Module, addr, sreg
from ptx.tensormap import SWIZZLE_128B
from ptx.wgmma import make_descriptor, wgmma_k

from .gemm import FIRST_TOUCH, LAST_TOUCH, GeneratedKernel, store_touched

ESIZE = {"f16": 2, "bf16": 2, "tf32": 4}
TMAP_DTYPE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}
BK = 64  #: K elements per stage of 16-bit inputs: one 128-byte swizzle row (tf32: 32)
SWIZZLE = 128
ROW = 128  #: bytes of one shared tile row (the swizzle span)
MN_BOX = 64  #: MN elements of one box of an MN-major operand (one 128-byte row of 16-bit elements)
BATCH_OPS = ("", "c", "ac", "bc", "abc")
GROUP_M = 8  #: persistent tile order: groups of this many tiles along m, swept over n (L2 reuse)
REDUCE_OPS = ("", "a", "b", "ab")


@dataclass(frozen=True)
class Sm90Spec:
    """One generated sm_90a kernel.

    ``dtype``: input type (f16, bf16, tf32); ``bm``: C tile extent in m (wgmma N: 64, 128, 192 or
    256); ``bn``: extent in n, 64 per consumer warpgroup (64 or 128); ``stages``: shared buffers
    (2..8); ``first``/``last`` touches as in :class:`minijit.cuda.gemm.GemmSpec`; ``a_major``:
    A's contiguous dim, "m" (``a[m + k*lda]``) or "k" (``a[k + m*lda]``); ``b_major``: B's, "k"
    (``b[k + n*ldb]``) or "n" (``b[n + k*ldb]``); tf32 needs both "k". ``batch``: "" for one
    GEMM per launch, else the operands that differ between ``blockIdx.z``: C always (its offset
    from the batch table, so "c" is in it) and "a"/"b" (a batch dim in their tensor maps), one of
    :data:`BATCH_OPS`; ``reduce``: the operands whose tensor maps carry a reduction dim (summed
    over ``R``), one of :data:`REDUCE_OPS` ("" for no ``R`` parameter); ``persistent``: CTAs loop
    over the output tiles (grid from :meth:`Sm90Kernel.grid`, a ``Z`` parameter).
    """

    dtype: str = "f16"
    bm: int = 256
    bn: int = 128
    stages: int = 4
    first: str = "zero"
    last: str = "none"
    a_major: str = "m"
    b_major: str = "k"
    batch: str = ""
    reduce: str = ""
    persistent: bool = False

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
        if self.a_major not in ("m", "k") or self.b_major not in ("k", "n"):
            bad(f"a_major {self.a_major!r} must be 'm' or 'k', b_major {self.b_major!r} 'k' or 'n'")
        if self.dtype == "tf32" and self.orientation != "kk":
            bad("tf32 wgmma needs K-major A and B (a_major='k', b_major='k')")
        if self.batch not in BATCH_OPS:
            bad(f"batch {self.batch!r}: one of {BATCH_OPS}")
        if self.reduce not in REDUCE_OPS:
            bad(f"reduce {self.reduce!r}: one of {REDUCE_OPS}")
        if not isinstance(self.persistent, bool):
            bad("persistent must be a bool")
        if self.smem_bytes > 227 * 1024:
            bad(f"{self.smem_bytes} bytes of shared memory (max 232448)")

    # derived -------------------------------------------------------------------------------------
    @property
    def es(self) -> int:
        """Input element size in bytes."""
        return ESIZE[self.dtype]

    @property
    def bk(self) -> int:
        """K elements per stage: one 128-byte swizzle row (64 for f16/bf16, 32 for tf32)."""
        return ROW // self.es

    @property
    def orientation(self) -> str:
        """``a_major + b_major``: "mk" (the default), "kk", "mn" or "kn"."""
        return self.a_major + self.b_major

    @property
    def consumers(self) -> int:
        return self.bn // 64

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def b_bytes(self) -> int:
        """Shared bytes of one stage's B tile (bn x bk elements, 128 bytes per row of either orientation)."""
        return self.bn * ROW

    @property
    def a_bytes(self) -> int:
        """Shared bytes of one stage's A tile (bm x bk elements)."""
        return self.bm * ROW

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: 1024 bytes of alignment slack, the stages, 2 mbarriers per stage."""
        return 1024 + self.stages * self.stage_bytes + 16 * self.stages

    @property
    def name(self) -> str:
        tail = "" if self.orientation == "mk" else f"_a{self.a_major}b{self.b_major}"
        tail += (f"_z{self.batch}" if self.batch else "") + (f"_r{self.reduce}" if self.reduce else "")
        tail += "_p" if self.persistent else ""
        return f"gemm90_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_s{self.stages}_{self.first}_{self.last}{tail}"


@dataclass
class Sm90Kernel(GeneratedKernel):
    """A generated kernel: PTX module, kernel and launch geometry (``grid(m, n, batch)``)."""

    spec: Sm90Spec

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory the launch must grant (bytes)."""
        return self.spec.smem_bytes

    def tiles(self, m: int, n: int, batch: int = 1) -> int:
        """Output tiles of an M x N GEMM times ``batch``."""
        return -(-m // self.spec.bm) * -(-n // self.spec.bn) * batch

    def grid(self, m: int, n: int, batch: int = 1, ctas: int | None = None) -> tuple[int, int, int]:
        """``(ceil(M/bm), ceil(N/bn), batch)``; persistent: ``(min(tiles, ctas), 1, 1)`` (``ctas``
        None: one per tile)."""
        if not self.spec.persistent:
            return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch)
        total = self.tiles(m, n, batch)
        return (max(1, min(total, total if ctas is None else int(ctas))), 1, 1)


def tensor_maps(
    spec: Sm90Spec,
    a: int,
    b: int,
    m: int,
    n: int,
    k: int,
    lda: int,
    ldb: int,
    *,
    batch: int = 1,
    a_batch: int = 0,
    b_batch: int = 0,
    reduce: int = 1,
    a_reduce: int = 0,
    b_reduce: int = 0,
) -> tuple[dict, dict]:
    """``cuTensorMapEncodeTiled`` arguments (keyword dicts) for A at device address ``a`` (M x K
    in ``spec.a_major`` order, ``lda`` bytes between its outer index) and B at ``b`` (K x N,
    ``ldb``). ``batch``/``reduce``: number of z/r values; ``a_batch``, ``b_batch``, ``a_reduce``,
    ``b_reduce``: byte strides of A and B between consecutive z / r, nonzero exactly for the
    operands named in ``spec.batch``/``spec.reduce`` (those get the extra dimensions, r then z)."""
    S = spec
    common = dict(dtype=TMAP_DTYPE[S.dtype], swizzle=SWIZZLE_128B)
    if S.a_major == "m":
        ta = dict(global_dim=[m, k], global_strides=[lda], box_dim=[MN_BOX, S.bk])
    else:
        ta = dict(global_dim=[k, m], global_strides=[lda], box_dim=[S.bk, S.bm])
    if S.b_major == "k":
        tb = dict(global_dim=[k, n], global_strides=[ldb], box_dim=[S.bk, S.bn])
    else:
        tb = dict(global_dim=[n, k], global_strides=[ldb], box_dim=[MN_BOX, S.bk])
    for op, t, r_stride, z_stride in (("a", ta, a_reduce, a_batch), ("b", tb, b_reduce, b_batch)):
        for what, count, stride, ops in (("reduce", reduce, r_stride, S.reduce), ("batch", batch, z_stride, S.batch)):
            if (op in ops) != (stride != 0):
                raise ValueError(
                    f"tensor_maps: {op}_{what} stride {stride} bytes, but spec.{what} = {ops!r}"
                    f" ({'needs' if op in ops else 'takes no'} a {what} stride for {op.upper()})"
                )
            if op in ops:
                t["global_dim"].append(count)
                t["global_strides"].append(stride)
                t["box_dim"].append(1)
    out = []
    for ptr, t in ((a, ta), (b, tb)):
        rank = len(t["global_dim"])
        out.append(
            dict(
                global_address=ptr,
                rank=rank,
                element_strides=(1,) * rank,
                **{key: tuple(v) for key, v in t.items()},
                **common,
            )
        )
    return out[0], out[1]


def generate(spec: Sm90Spec) -> Sm90Kernel:
    """Emit the kernel for ``spec`` (see the module docstring for its parameters)."""
    S = spec
    mod = Module()
    k = mod.kernel(S.name, maxntid=S.threads, minnctapersm=1)
    # tiling decisions
    kw = wgmma_k(S.dtype)  # K of one wgmma
    ks_per_stage = S.bk // kw
    box_bytes = S.bk * ROW  # one MN-major box: 64 mn x bk rows of 128 bytes (LBO between boxes)
    kmajor_step, mnmajor_step = kw * S.es, kw * ROW  # descriptor advance per wgmma K step (bytes)
    # wgmma operands: X = B^T (wgmma A), Y = A (wgmma B); transpose immediate 1 = MN-major
    x_trans, y_trans = int(S.b_major == "n"), int(S.a_major == "m")
    x_bits = make_descriptor(0, box_bytes if x_trans else 16, 1024, SWIZZLE)
    y_bits = make_descriptor(0, box_bytes if y_trans else 16, 1024, SWIZZLE)
    x_step = mnmajor_step if x_trans else kmajor_step
    y_step = mnmajor_step if y_trans else kmajor_step

    p_ta, p_tb = k.tensormap_param("tmap_a"), k.tensormap_param("tmap_b")
    p_c = k.param("u64", "C")
    p_bt = k.param("u64", "batch_table") if S.batch else None
    p_m, p_n, p_k = (k.param("s32", x) for x in "MNK")
    p_r = k.param("s32", "R") if S.reduce else None
    p_z = k.param("s32", "Z") if S.persistent else None
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
    m0, n0, zc = k.reg("s32"), k.reg("s32"), k.reg("s32")
    M, N, K = (reg("s32") for _ in range(3))
    for r, p in ((M, p_m), (N, p_n), (K, p_k)):
        k.ld_param(r, p)
    if S.persistent:  # tiles t = ctaid.x, + nctaid.x, ... of tiles_m * tiles_n * Z
        tiles_m, tiles_n, per_z, total, tile, width = (k.reg("s32") for _ in range(6))
        k.add(tiles_m, M, S.bm - 1)
        k.div(tiles_m, tiles_m, S.bm, rnd=None)
        k.add(tiles_n, N, S.bn - 1)
        k.div(tiles_n, tiles_n, S.bn, rnd=None)
        k.mul(per_z, tiles_m, tiles_n, mode="lo")
        k.ld_param(total, p_z)
        k.mul(total, total, per_z, mode="lo")
        k.mul(width, tiles_n, GROUP_M, mode="lo")
        k.mov(tile, sreg.ctaid.x)

    def coords() -> None:
        # this tile's m0, n0 and batch index zc (persistent: grouped order, GROUP_M tiles of m per sweep of n)
        if not S.persistent:
            k.mov(m0, sreg.ctaid.x)
            k.mul(m0, m0, S.bm, mode="lo")
            k.mov(n0, sreg.ctaid.y)
            k.mul(n0, n0, S.bn, mode="lo")
            k.mov(zc, sreg.ctaid.z)
            return
        r, grp, first, gsize, w, q = (k.reg("s32") for _ in range(6))
        k.div(zc, tile, per_z, rnd=None)
        k.mul(r, zc, per_z, mode="lo")
        k.sub(r, tile, r)
        k.div(grp, r, width, rnd=None)
        k.mul(first, grp, GROUP_M, mode="lo")
        k.sub(gsize, tiles_m, first)
        k.min(gsize, gsize, GROUP_M)
        k.mul(w, grp, width, mode="lo")
        k.sub(w, r, w)  # position inside the group: m fastest
        k.div(q, w, gsize, rnd=None)  # the n tile
        k.mul(n0, q, S.bn, mode="lo")
        k.mul(q, q, gsize, mode="lo")
        k.sub(q, w, q)
        k.add(q, q, first)  # the m tile
        k.mul(m0, q, S.bm, mode="lo")

    def next_tile(top, out) -> None:
        # persistent: on to tile + nctaid.x (back to ``top``); one tile per CTA otherwise
        if S.persistent:
            step = k.reg("s32")
            k.mov(step, sreg.nctaid.x)
            k.add(tile, tile, step)
            k.bra(top, uni=True)
        k.place(out)

    def tile_start(top, out) -> None:
        # persistent: leave through ``out`` once past the last tile; then this tile's coordinates
        if S.persistent:
            k.place(top)
            past = k.reg("pred")
            k.setp("ge", past, tile, total)
            k.bra(out, pred=past, uni=True)
            coords()

    if not S.persistent:
        coords()
    ktiles = k.reg("s32")
    k.add(ktiles, K, S.bk - 1)
    k.shr(ktiles, ktiles, S.bk.bit_length() - 1)
    ntiles = ktiles  # K tiles of all reduction steps
    if S.reduce:
        rr = k.reg("s32")
        k.ld_param(rr, p_r)
        ntiles = k.reg("s32")
        k.mul(ntiles, ktiles, rr, mode="lo")
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
    kc, mc, kin, ri = k.reg("s32"), k.reg("s32"), reg("s32", 0), reg("s32", 0)
    extra = {op: ([ri] if op in S.reduce else []) + ([zc] if op in S.batch else []) for op in "ab"}
    ptile, pdone = k.label("produce_tile"), k.label("produce_tiles_done")
    tile_start(ptile, pdone)
    for r in (kt, kin, ri):  # a new tile: K tiles from the first (the stage ring goes on)
        k.mov(r, 0)
    ploop, pwait, pend = k.label("produce"), k.label("wait_empty"), k.label("produce_end")
    k.setp("ge", ok, kt, ntiles)
    k.bra(pend, pred=ok, uni=True)
    k.place(ploop)
    stage_addrs()
    epar = k.reg("u32")
    k.xor(epar, phase, 1)  # a fresh empty barrier counts as released
    k.place(pwait)
    k.mbarrier_try_wait_parity(ok, eb, epar)
    k.bra(pwait, pred=~ok)
    k.mbarrier_arrive_expect_tx(fb, S.stage_bytes)
    k.shl(kc, kin, S.bk.bit_length() - 1)
    for op, k_major, smem, tmap, row0, rows in (
        ("b", S.b_major == "k", sb, tmb, n0, S.bn),
        ("a", S.a_major == "k", sa, tma, m0, S.bm),
    ):
        if k_major:  # one box: the K tile x all rows
            k.cp_async_bulk_tensor(smem, tmap, [kc, row0, *extra[op]], fb)
            continue
        for j in range(rows // MN_BOX):  # MN-major: boxes of MN_BOX rows (one 128-byte swizzle span)
            k.add(mc, row0, MN_BOX * j)
            k.cp_async_bulk_tensor(addr(smem, j * box_bytes), tmap, [mc, kc, *extra[op]], fb)
    k.add(kin, kin, 1)
    if S.reduce:  # next reduction step after the last K tile
        wrap_k = k.reg("pred")
        k.setp("eq", wrap_k, kin, ktiles)
        k.mov(kin, 0, pred=wrap_k)
        k.add(ri, ri, 1, pred=wrap_k)
    advance()
    k.setp("lt", ok, kt, ntiles)
    k.bra(ploop, pred=ok, uni=True)
    k.place(pend)
    next_tile(ptile, pdone)
    k.place(done)
    k.ret()

    # ---- consumer warpgroups: wgmma from the stages
    k.place(consumer)
    k.setmaxnreg(232, inc=True)
    g = k.reg("u32")
    k.sub(g, wg, 1)
    acc = k.regs("f32", S.bm // 2)
    lead = k.reg("pred")
    lt = k.reg("u32")
    k.and_(lt, tid, 127)
    k.setp("eq", lead, lt, 0)
    yes = k.reg("pred")
    k.setp("eq", yes, tid, tid)
    gofs = k.reg("u32")
    k.mul(gofs, g, 64 * ROW, mode="lo")  # this warpgroup's 64 n of the B tile (64 rows, or box g)
    dx, dy, t64 = k.reg("b64"), k.reg("b64"), k.reg("u64")
    prev_eb = reg("u32", 0)  # the empty barrier of the stage whose wgmma group may still run
    ctile, cdone = k.label("consume_tile"), k.label("consume_tiles_done")
    tile_start(ctile, cdone)
    for r in acc:
        k.mov(r, 0.0)
    k.mov(kt, 0)
    cloop, cwait, cend = k.label("consume"), k.label("wait_full"), k.label("consume_end")
    k.setp("ge", ok, kt, ntiles)
    k.bra(cend, pred=ok, uni=True)
    k.place(cloop)
    stage_addrs()
    k.place(cwait)
    k.mbarrier_try_wait_parity(ok, fb, phase)
    k.bra(cwait, pred=~ok)
    xaddr = k.reg("u32")
    k.add(xaddr, sb, gofs)
    for d, a_, bits in ((dx, xaddr, x_bits), (dy, sa, y_bits)):
        k.cvt(t64, a_)
        k.shr(t64, t64, 4)
        k.or_(d, t64, bits)
    k.wgmma_fence()
    for s in range(ks_per_stage):
        ddx, ddy = (dx, dy) if s == 0 else (k.reg("b64"), k.reg("b64"))
        if s:
            k.add(ddx, dx, (s * x_step) >> 4, type="u64")
            k.add(ddy, dy, (s * y_step) >> 4, type="u64")
        k.wgmma(f"m64n{S.bm}k{kw}", S.dtype, acc, ddx, ddy, yes, trans_a=x_trans, trans_b=y_trans)
    k.wgmma_commit()
    # one group stays in flight: once the previous stage's group has retired, that stage is free
    k.wgmma_wait(1)
    not_first = k.reg("pred")
    k.setp("ne", not_first, kt, 0)
    k.and_(not_first, not_first, lead)
    k.mbarrier_arrive(prev_eb, pred=not_first)
    k.mov(prev_eb, eb)
    advance()
    k.setp("lt", ok, kt, ntiles)
    k.bra(cloop, pred=ok, uni=True)
    k.place(cend)
    # the last group: wait for it before the epilogue reads the accumulators, then free its stage
    k.wgmma_wait(0)
    last = k.reg("pred")
    k.setp("gt", last, kt, 0)
    k.and_(last, last, lead)
    k.mbarrier_arrive(prev_eb, pred=last)

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
    if S.batch:  # C's byte offset: column 2 of batch-table row z
        bt, coff = k.reg("s64"), k.reg("s64")
        k.ld_param(bt, p_bt)
        k.cvta(bt, bt)
        k.mad(bt, zc, 24, bt, mode="wide")
        k.ld("global", coff, addr(bt, 16))
        k.add(cptr, cptr, coff)
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
    next_tile(ctile, cdone)
    k.ret()
    return Sm90Kernel(S, mod, k)


def fits(
    dtype: str,
    m: int,
    n: int,
    k: int,
    ptr_a: int,
    ptr_b: int,
    lda: int,
    ldb: int,
    a_major: str = "m",
    b_major: str = "k",
) -> bool:
    """Can the sm_90a kernel run this GEMM: f16/bf16 in any of the 4 orientations, tf32 with A and
    B K-major only; TMA alignment (base addresses and leading dimensions in bytes multiples of
    16); sizes in the tensor map's range."""
    if dtype not in ESIZE or (dtype == "tf32" and (a_major, b_major) != ("k", "k")):
        return False
    return all(x % 16 == 0 for x in (ptr_a, ptr_b, lda, ldb)) and min(m, n, k) >= 1 and max(m, n, k) < 1 << 31


def uniform_strides(table) -> tuple[int, ...] | None:
    """Per column of an offset table (rows: batch or reduction index, columns: tensors; bytes),
    the stride ``s`` with ``table[i] == i * s``, or None when a column is not of that form (or a
    stride is negative or not a multiple of 16 bytes, which a tensor map cannot express)."""
    import numpy as np  # noqa: PLC0415

    t = np.asarray(table, np.int64)
    if t.ndim != 2 or len(t) == 0:
        return None
    s = t[1] - t[0] if len(t) > 1 else np.zeros(t.shape[1], np.int64)
    if (t != np.arange(len(t), dtype=np.int64)[:, None] * s[None, :]).any():
        return None
    if (s < 0).any() or (s % 16).any():
        return None
    return tuple(int(x) for x in s)


@dataclass(frozen=True)
class Sm90Plan:
    """How a (batched, reduced) GEMM maps onto one sm_90a launch: operand orientations, the
    operands with batch/reduction tensor-map dims (:attr:`Sm90Spec.batch`/``reduce`` strings),
    their counts and byte strides (``a_batch`` .. ``b_reduce``; 0 for an operand without the dim)."""

    a_major: str
    b_major: str
    batch: str
    reduce: str
    nbatch: int
    nreduce: int
    a_batch: int
    b_batch: int
    a_reduce: int
    b_reduce: int

    def __post_init__(self) -> None:
        if self.batch not in BATCH_OPS or self.reduce not in REDUCE_OPS:
            raise ValueError(f"Sm90Plan: batch {self.batch!r} in {BATCH_OPS}, reduce {self.reduce!r} in {REDUCE_OPS}")
        if self.nbatch < 1 or self.nreduce < 1:
            raise ValueError(f"Sm90Plan: nbatch {self.nbatch} and nreduce {self.nreduce} must be >= 1")

    def map_strides(self) -> dict:
        """The keyword arguments of :func:`tensor_maps` for the batch and reduction dims."""
        return dict(
            batch=self.nbatch,
            a_batch=self.a_batch,
            b_batch=self.b_batch,
            reduce=self.nreduce,
            a_reduce=self.a_reduce,
            b_reduce=self.b_reduce,
        )


def plan(
    dtype: str,
    m: int,
    n: int,
    k: int,
    a_major: str,
    b_major: str,
    lda: int,
    ldb: int,
    batch_table,
    red_table,
    ptr_a: int = 0,
    ptr_b: int = 0,
) -> Sm90Plan | None:
    """The :class:`Sm90Plan` of a GEMM given like :mod:`minijit.cuda.gemm`'s launch (orientations,
    leading dims in bytes, ``batch_table`` rows of (A, B, C) byte offsets, ``red_table`` rows of
    (A, B) byte offsets), or None when the sm_90a family cannot run it: see :func:`fits`; the A/B
    batch and reduction offsets must be ``i * stride`` with strides >= 0 and multiples of 16 bytes
    (C's batch offsets may be anything); a reduction with R > 1 needs a nonzero A or B stride;
    each leading dim at least its contiguous extent (lda >= M or K elements, ldb >= K or N)."""
    import numpy as np  # noqa: PLC0415

    if not fits(dtype, m, n, k, ptr_a, ptr_b, lda, ldb, a_major, b_major):
        return None
    es = ESIZE[dtype]
    if lda < (m if a_major == "m" else k) * es or ldb < (k if b_major == "k" else n) * es:
        return None
    bt, rt = np.asarray(batch_table, np.int64), np.asarray(red_table, np.int64)
    zs, rs = uniform_strides(bt[:, :2]), uniform_strides(rt[:, :2])
    if zs is None or rs is None or max(*zs, *rs) >= 1 << 40:
        return None
    nb, nr = len(bt), len(rt)
    batch = "" if nb == 1 and not bt[0, 2] else "".join(op for op, s in zip("ab", zs, strict=True) if s) + "c"
    reduce = "".join(op for op, s in zip("ab", rs, strict=True) if s)
    if nr > 1 and not reduce:
        return None
    return Sm90Plan(a_major, b_major, batch, reduce, nb, nr, zs[0], zs[1], rs[0], rs[1])


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
