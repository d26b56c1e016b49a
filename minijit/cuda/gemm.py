"""Tensor-core GEMM/BRGEMM generator (PTX through :mod:`ptx`) and a numpy model of its data movement.

The kernel computes, for every batch entry ``z`` of a batch table and every CTA tile::

    C_z = last_touch(first_touch(C_z) + sum_r A_{z,r} B_{z,r})

over the rows ``r`` of a reduction table (BRGEMM batch-reduce entries and any outer K loops,
flattened), with fp32 accumulation in registers.

Layouts (strides in bytes are kernel parameters; element strides in the docs below), chosen by
the spec's ``a_major`` and ``b_major`` (4 kernel variants):

- A is M x K: ``a_major="m"``: ``a[m + k*lda]`` (M contiguous, column-major), ``"k"``:
  ``a[k + m*lda]`` (K contiguous, row-major); f16, bf16 or f32 (used as tf32).
- B is K x N: ``b_major="k"``: ``b[k + n*ldb]`` (K contiguous), ``"n"``: ``b[n + k*ldb]``
  (N contiguous); same element type as A.
- C is M x N fp32, ``c[m + n*ldc]`` (M contiguous). An N-contiguous C is the caller's business:
  `minijit.cuda.operation` computes C^T = B^T A^T instead (A and B exchange roles), which turns
  it into an M-contiguous one, so 4 kernel variants cover all 8 orientations of A, B and C.

``lda``/``ldb`` are always the stride of the operand's non-contiguous dim.

Kernel parameters, in order: ``A, B, C, batch_table, red_table`` (u64 device pointers),
``M, N, K, R`` (s32), ``lda, ldb, ldc`` (s64, **bytes**). ``batch_table`` holds ``gridDim.z``
rows of three s64 byte offsets ``(A, B, C)``; ``red_table`` holds ``R`` rows of two s64 byte
offsets ``(A, B)``. Grid ``(ceil(M/BM), ceil(N/BN), batch)``, block ``(threads,)``.

Split-K (``GemmSpec.split_k = S`` > 1): grid z is ``batch * S`` (``ctaid.z = z * S + s``), CTA
``s`` runs K tiles ``[s*T//S, (s+1)*T//S)`` of the flattened sequence of ``T = R * ceil(K/BK)``
(:func:`split_range`) and stores its raw fp32 sum to plane ``ctaid.z`` of a workspace passed as
``C``, with ``ldc`` its M stride (``4*M`` bytes; planes ``N * ldc`` bytes apart; the batch
table's C offsets unused); :mod:`minijit.cuda.splitk` reduces the planes into C.

Inside one CTA (``threads = 32 * warps_m * warps_n``):

- the flattened sequence of ``R * ceil(K/BK)`` K tiles is streamed through ``stages`` shared
  memory buffers with ``cp.async`` (multi-stage pipeline: ``wait_group stages-2`` + ``bar.sync``
  per tile); edge tiles use the ``src-size`` operand (zero fill), so any M, N, K works;
- shared tiles keep the operand's global orientation, one row per index of its non-contiguous dim
  (A: rows k if M-contiguous, rows m if K-contiguous; B: rows n if K-contiguous, rows k if
  N-contiguous), each loaded with ``cp.async`` 16-byte chunks along the contiguous dim, with an
  XOR swizzle of the 16-byte chunks (:class:`Swizzle`) against bank conflicts;
- f16/bf16: ``ldmatrix.x4`` feeds ``mma.sync.m16n8k16``, with ``.trans`` where the shared rows
  are k (A M-contiguous, B N-contiguous) and without where they are m (A) or n (B);
  tf32: ldmatrix moves 16-bit elements only, so every fragment element is a scalar
  ``ld.shared.f32`` (+ ``cvt.rna.tf32.f32``) from its (row, column) in the swizzled tile, whatever
  the orientation, feeding ``mma.sync.m16n8k8``;
- the epilogue applies the first touch (zero, or load C, optionally ReLU'd) and the last touch
  (none or ReLU) and stores with predicates ``m < M and n < N``.

Index math is written once, in plain Python arithmetic, against values that are either numpy
integer arrays (the model) or :class:`Val` (a typed PTX register: every operator emits one
instruction). :func:`generate` and :func:`simulate` call the same functions
(:func:`copy_coords`, :func:`copy_src`, :meth:`SmemLayout.offset`, :func:`a_ldmatrix`, ...),
so the model checks the addresses the kernel computes, not a re-derivation of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptx import Module, addr, sreg
from ptx.builder import Kernel, Reg

# the spec, index math and model live in their own modules; gemm keeps every name it had
from .gemm_index import (  # noqa: F401
    Val,
    _acc_deltas,
    _frag_offset,
    _fragment_plans,
    _lane_pos,
    a_ldmatrix,
    acc_coords,
    b_ldmatrix,
    copy_coords,
    copy_src,
    global_offset,
    imax,
    imin,
    plan,
    split_range,
    tf32_frag,
    thread_coords,
    to64,
)
from .gemm_model import (  # noqa: F401
    ModelStats,
    _model_frag,
    _model_mma,
    _read,
    bank_degree,
    decode,
    encode,
    reference,
    simulate,
    tables,
)
from .gemm_spec import (  # noqa: F401
    ESIZE,
    FIRST_TOUCH,
    LAST_TOUCH,
    MAX_SPLIT,
    PARAMS,
    GemmSpec,
    SmemLayout,
    Swizzle,
    _pow2,
    choose_vec,
    default_spec,
    ldmatrix_swizzle,
    pair_swizzle,
)

# --------------------------------------------------------------------------- the generator


@dataclass
class GeneratedKernel:
    """A generated kernel: PTX module, kernel and launch geometry (``spec.threads`` per CTA; the
    grid is each family's: :meth:`grid`). Shared by the GEMM families and the split-K reduction."""

    spec: Any
    module: Module
    kernel: Kernel
    _text: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.module.text()
        return self._text

    @property
    def signature(self) -> tuple[str, ...]:
        return self.kernel.signature

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.spec.threads, 1, 1)

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        """``(ceil(M/BM), ceil(N/BN), batch)``."""
        return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch)


@dataclass
class GemmKernel(GeneratedKernel):
    """A generated mma.sync GEMM kernel."""

    spec: GemmSpec

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        """``(ceil(M/BM), ceil(N/BN), batch * split_k)``: with split-K, ``ctaid.z = z * split_k + s``."""
        return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch * self.spec.split_k)


def generate(spec: GemmSpec) -> GemmKernel:
    """Emit the kernel for ``spec`` (see the module docstring for its parameters)."""
    spec.validate()
    g = _GemmEmitter(spec)
    g.arguments()  # parameters, global pointers, problem size
    g.tile_scheduler()  # this CTA's tile, batch entry and (split-K) part of the K-tile sequence
    g.shared_and_accumulators()  # the stage ring and the zeroed accumulators
    g.producer_state()  # the copy loop's position: sequence index, K tile, reduction slice, stage
    g.fragment_registers()  # shared addresses of the ldmatrix / tf32 fragments
    g.prologue()  # stages - 1 tiles in flight
    g.mainloop()  # wait, load the next tile, mma on the oldest stage
    g.epilogue()  # touches and predicated stores of the accumulators
    g.k.ret()
    return GemmKernel(spec, g.mod, g.k)


class _GemmEmitter:
    """The stages of the mma.sync kernel, emitted in order into one PTX kernel. Registers shared
    between stages are attributes; index math comes from :mod:`minijit.cuda.gemm_index`."""

    def __init__(self, spec: GemmSpec) -> None:
        self.S = spec
        self.mod = Module()
        self.k = self.mod.kernel(spec.name, reqntid=spec.threads)

    def V(self, r) -> Val:
        return Val(self.k, r)

    def reg(self, t, src=None):
        r = self.k.reg(t)
        if src is not None:
            self.k.mov(r, src)
        return r

    def idiv(self, a: Val, b) -> Val:
        d = self.k.reg(a.type)
        self.k.div(d, a.r, b.r if isinstance(b, Val) else int(b), rnd=None)
        return self.V(d)

    # ---- arguments and tile scheduler

    def arguments(self) -> None:
        """Kernel parameters; the pointers converted to global addresses, the sizes loaded."""
        k, V = self.k, self.V
        params = {}
        for n in PARAMS[:5]:
            params[n] = k.param("u64", n)
        for n in PARAMS[5:9]:
            params[n] = k.param("s32", n)
        for n in PARAMS[9:]:
            params[n] = k.param("s64", n)
        g = self.g = {}
        for n in PARAMS[:5]:
            raw, gp = k.reg("s64"), k.reg("s64")
            k.ld_param(raw, params[n])
            k.cvta(gp, raw)
            g[n] = V(gp)
        for n in PARAMS[5:]:
            r = k.reg("s32" if n in "MNKR" else "s64")
            k.ld_param(r, params[n])
            g[n] = V(r)
        self.M, self.N, self.K, self.R = g["M"], g["N"], g["K"], g["R"]
        self.lda, self.ldb, self.ldc = g["lda"], g["ldb"], g["ldc"]

    def tile_scheduler(self) -> None:
        """CTA tile origin, batch entry (its A, B, C offsets) and this CTA's range [seq0, seq_end)
        of the flattened K-tile sequence (all of it without split-K)."""
        k, S, V, reg, g = self.k, self.S, self.V, self.reg, self.g
        self.tid = V(reg("s32", sreg.tid.x))
        self.m_cta = V(reg("s32", sreg.ctaid.x)) * S.bm
        self.n_cta = V(reg("s32", sreg.ctaid.y)) * S.bn
        z = V(reg("s32", sreg.ctaid.z))
        self.split = split = S.split_k > 1
        bz, part = (self.idiv(z, S.split_k), None) if split else (z, None)
        if split:
            part = z - bz * S.split_k  # ctaid.z = bz * split_k + part
        brow = g["batch_table"] + to64(bz) * 24
        boff = []
        for i in range(3):
            r = k.reg("s64")
            k.ld("global", r, addr(brow.r, 8 * i))
            boff.append(V(r))
        self.ptr_a, self.ptr_b = g["A"] + boff[0], g["B"] + boff[1]
        if split:  # partials: plane ctaid.z of the workspace (M x N fp32 planes, ldc = its M stride)
            self.ptr_c = g["C"] + to64(z) * (to64(self.N) * self.ldc)
        else:
            self.ptr_c = g["C"] + boff[2]
        self.kt_count = kt_count = (self.K + (S.bk - 1)) >> (S.bk.bit_length() - 1)
        total = self.R * kt_count
        self.seq0 = split_range(part, total, S.split_k, self.idiv) if split else 0
        self.seq_end = split_range(part + 1, total, S.split_k, self.idiv) if split else total
        self.count = self.seq_end - self.seq0 if split else total

    def shared_and_accumulators(self) -> None:
        """The shared stage ring and the accumulators, zeroed."""
        k, S = self.k, self.S
        smem = k.shared("smem", "b8", S.smem_bytes, align=128)
        self.sm_base = self.V(self.reg("s32", smem))
        self.acc = [[k.regs("f32", 4) for _ in range(S.nt)] for _ in range(S.mt)]
        for row in self.acc:
            for quad in row:
                for r in quad:
                    k.mov(r, 0.0)

    # ---- producer: global -> shared copies

    def producer_state(self) -> None:
        """Loop-carried state of the copies: sequence index, K tile, reduction slice, write stage."""
        k, V = self.k, self.V
        self.sl, self.ktl, self.rl, self.wr = (self.reg("s32", 0) for _ in range(4))
        if self.split:
            r0 = self.idiv(self.seq0, self.kt_count)
            k.mov(self.sl, self.seq0.r)
            k.mov(self.rl, r0.r)
            k.mov(self.ktl, (self.seq0 - r0 * self.kt_count).r)
        self.base_a, self.base_b = k.reg("s64"), k.reg("s64")
        self.set_slice(V(self.rl))

    def set_slice(self, r_val) -> None:
        """base_a, base_b: the operands of reduction slice ``r_val`` (offsets from the table)."""
        k = self.k
        rrow = self.g["red_table"] + to64(r_val) * 16
        oa, ob = k.reg("s64"), k.reg("s64")
        k.ld("global", oa, addr(rrow.r, 0))
        k.ld("global", ob, addr(rrow.r, 8))
        k.add(self.base_a, self.ptr_a.r, oa)
        k.add(self.base_b, self.ptr_b.r, ob)

    def load_tile(self) -> None:
        """Copy the next K tile of A and B into the write stage (nothing past seq_end), advance."""
        k, S, V = self.k, self.S, self.V
        skip = k.label("skip_load")
        p = k.reg("pred")
        k.setp("ge", p, self.sl, self.seq_end.r)
        k.bra(skip, pred=p, uni=True)
        k0 = V(self.ktl) * S.bk
        stage = self.sm_base + V(self.wr)
        m_cta, n_cta, M, N, K = self.m_cta, self.n_cta, self.M, self.N, self.K
        operands = (
            ("a", S.layout_a, S.vec_a, V(self.base_a), self.lda, *S.tile_coords("a", m_cta, n_cta, k0, M, N, K), 0),
            (
                "b",
                S.layout_b,
                S.vec_b,
                V(self.base_b),
                self.ldb,
                *S.tile_coords("b", m_cta, n_cta, k0, M, N, K),
                S.layout_a.nbytes,
            ),
        )
        for op, lay, vec, base, ld, outer0, inner0, outer_ext, inner_ext, soff in operands:
            for j in range(S.copies(op)):
                row, col = copy_coords(lay, vec, S.threads, self.tid, j)
                dst = stage + lay.offset(row, col)
                outer, inner, nbytes = copy_src(lay, vec, row, col, outer0, inner0, outer_ext, inner_ext)
                src = base + global_offset(outer, inner, ld, lay.es)
                self.copy(dst, src, base, nbytes, vec, soff)
        self.advance_producer(skip)

    def copy(self, dst, src, base, nbytes, vec: int, soff: int) -> None:
        """One thread's copy of ``nbytes`` (0 past the operand's edge) from ``src`` to shared ``dst``."""
        k = self.k
        ok = k.reg("pred")
        k.setp("gt", ok, nbytes.r, 0)
        safe = k.reg("s64")
        k.selp(safe, src.r, base.r, ok)  # never form an address past the operand when nothing is read
        if vec >= 4:
            k.cp_async(addr(dst.r, soff), addr(safe), vec, cache="cg" if vec == 16 else "ca", src_size=nbytes.r)
        else:
            h = self.reg("u16", 0)
            k.ld("global", h, addr(safe), type="u16", pred=ok)
            k.st("shared", addr(dst.r, soff), h, type="u16")

    def advance_producer(self, skip) -> None:
        """Advance: stage ring, K tile, reduction slice; then place ``skip``."""
        k, S = self.k, self.S
        k.add(self.wr, self.wr, S.stage_bytes)
        wrap = k.reg("pred")
        k.setp("ge", wrap, self.wr, S.smem_bytes)
        k.mov(self.wr, 0, pred=wrap)
        k.add(self.ktl, self.ktl, 1)
        k.add(self.sl, self.sl, 1)
        nxt = k.reg("pred")
        k.setp("lt", nxt, self.ktl, self.kt_count.r)
        k.bra(skip, pred=nxt, uni=True)
        k.mov(self.ktl, 0)
        k.add(self.rl, self.rl, 1)
        last = k.reg("pred")
        k.setp("ge", last, self.rl, self.R.r)
        k.bra(skip, pred=last, uni=True)
        self.set_slice(self.V(self.rl))
        k.place(skip)

    # ---- consumer: the MMA main loop

    def fragment_registers(self) -> None:
        """Fragment address registers (one per plan representative) and the fragment registers."""
        k, S = self.k, self.S
        self.fplan = _fragment_plans(S)
        self.frag_regs = {}
        for rep, _ in self.fplan.values():
            if rep not in self.frag_regs:
                off = _frag_offset(S, self.tid, rep)
                self.frag_regs[rep] = off if isinstance(off, Val) else self.V(self.reg("s32", int(off)))
        self.afr = [k.regs("b32", 4) for _ in range(S.mt)]
        self.bfr = [k.regs("b32", 2) for _ in range(S.nt)]
        self.ftmp = k.reg("f32")

    def frag_addr(self, stage, key, extra=0):
        rep, const = self.fplan[key]
        a = stage + self.frag_regs[rep]
        return addr(a.r, const + extra)

    def compute(self, rd) -> None:
        """The mma.sync of one stage: fragments by ldmatrix (16-bit) or ld + cvt.rna (tf32)."""
        k, S, afr, bfr, ftmp = self.k, self.S, self.afr, self.bfr, self.ftmp
        stage = self.sm_base + self.V(rd)
        b_off = S.layout_a.nbytes
        for ks in range(S.bk // S.kstep):
            if S.es == 2:
                for mt in range(S.mt):
                    k.ldmatrix(afr[mt], self.frag_addr(stage, ("a", mt, ks, 0)), trans=S.trans_a)
                for p in range(S.nt // 2):
                    regs = [bfr[2 * p][0], bfr[2 * p][1], bfr[2 * p + 1][0], bfr[2 * p + 1][1]]
                    k.ldmatrix(regs, self.frag_addr(stage, ("b", p, ks, 0), b_off), trans=S.trans_b)
            else:
                for mt in range(S.mt):
                    for i in range(4):
                        k.ld("shared", ftmp, self.frag_addr(stage, ("a", mt, ks, i)))
                        k.cvt_tf32(afr[mt][i], ftmp)
                for nt in range(S.nt):
                    for i in range(2):
                        k.ld("shared", ftmp, self.frag_addr(stage, ("b", nt, ks, i), b_off))
                        k.cvt_tf32(bfr[nt][i], ftmp)
            for mt in range(S.mt):
                for nt in range(S.nt):
                    k.mma(S.shape, S.dtype, self.acc[mt][nt], afr[mt], bfr[nt], self.acc[mt][nt])

    def prologue(self) -> None:
        """stages - 1 tiles in flight before the main loop."""
        k = self.k
        pc = self.reg("s32", 0)
        pro = k.label("prologue")
        k.place(pro)
        self.load_tile()
        k.cp_async_commit()
        k.add(pc, pc, 1)
        more = k.reg("pred")
        k.setp("lt", more, pc, self.S.stages - 1)
        k.bra(pro, pred=more, uni=True)

    def mainloop(self) -> None:
        """Per K tile: wait for the oldest stage, load the next tile, mma on the oldest stage."""
        k, S = self.k, self.S
        rd, s = self.reg("s32", 0), self.reg("s32", 0)
        loop, self.epilogue_label = k.label("mainloop"), k.label("epilogue")
        if self.split:  # a part with no K tiles (split_k > tiles) writes zero partials
            empty = k.reg("pred")
            k.setp("le", empty, self.count.r, 0)
            k.bra(self.epilogue_label, pred=empty, uni=True)
        k.place(loop)
        k.cp_async_wait(S.stages - 2)
        k.bar_sync(0)
        self.load_tile()
        k.cp_async_commit()
        self.compute(rd)
        k.add(rd, rd, S.stage_bytes)
        wrap = k.reg("pred")
        k.setp("ge", wrap, rd, S.smem_bytes)
        k.mov(rd, 0, pred=wrap)
        k.add(s, s, 1)
        again = k.reg("pred")
        k.setp("lt", again, s, self.count.r)
        k.bra(loop, pred=again, uni=True)

    # ---- epilogue

    def epilogue(self) -> None:
        """First and last touch of every accumulator, stored under m < M and n < N."""
        k, S, ldc = self.k, self.S, self.ldc
        k.place(self.epilogue_label)
        deltas = _acc_deltas(S)
        m0, n0 = acc_coords(S, self.tid, 0, 0, 0)
        gm, gn = self.m_cta + m0, self.n_cta + n0
        cbase = self.ptr_c + to64(gn) * ldc + to64(gm * 4)
        row_ok = {}
        for mt in range(S.mt):
            for h in range(2):
                dm = deltas[(mt, 0, 2 * h)][0]
                p = k.reg("pred")
                k.setp("lt", p, (gm + dm).r, self.M.r)
                row_ok[(mt, h)] = p
        zero_f = self.reg("f32", 0.0)
        for nt in range(S.nt):
            for jc in range(2):
                dn = deltas[(0, nt, jc)][1]
                col_ok = k.reg("pred")
                k.setp("lt", col_ok, (gn + dn).r, self.N.r)
                pcol = cbase + ldc * dn if dn else cbase
                for mt in range(S.mt):
                    for h in range(2):
                        i = 2 * h + jc
                        dm, dn_i = deltas[(mt, nt, i)]
                        assert dn_i == dn
                        p = k.reg("pred")
                        k.and_(p, row_ok[(mt, h)], col_ok)
                        v = self.acc[mt][nt][i]
                        store_touched(k, S.first, S.last, v, addr(pcol.r, 4 * dm), p, zero_f)


def store_touched(k: Kernel, first: str, last: str, v: Reg, a, p: Reg, zero_f: Reg) -> None:
    """Epilogue of one f32 accumulator ``v`` at global address ``a`` under predicate ``p``: add the
    first touch's C (``load``: C, ``relu``: relu(C); ``zero``: nothing), apply the last touch, store."""
    if first in ("load", "relu"):
        old = k.reg("f32")
        k.mov(old, 0.0)
        k.ld("global", old, a, pred=p)
        if first == "relu":
            k.max(old, old, zero_f)
        k.add(v, v, old)
    if last == "relu":
        k.max(v, v, zero_f)
    k.st("global", a, v, pred=p)


__all__ = [
    "ESIZE",
    "GemmKernel",
    "GeneratedKernel",
    "GemmSpec",
    "ModelStats",
    "SmemLayout",
    "Swizzle",
    "Val",
    "a_ldmatrix",
    "acc_coords",
    "b_ldmatrix",
    "bank_degree",
    "copy_coords",
    "copy_src",
    "decode",
    "default_spec",
    "encode",
    "generate",
    "global_offset",
    "choose_vec",
    "plan",
    "reference",
    "simulate",
    "tables",
    "tf32_frag",
]
