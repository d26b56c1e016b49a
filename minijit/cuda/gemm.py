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
    S = spec
    mod = Module()
    k = mod.kernel(S.name, reqntid=S.threads)

    def V(r):
        return Val(k, r)

    def reg(t, src=None):
        r = k.reg(t)
        if src is not None:
            k.mov(r, src)
        return r

    params = {}
    for n in PARAMS[:5]:
        params[n] = k.param("u64", n)
    for n in PARAMS[5:9]:
        params[n] = k.param("s32", n)
    for n in PARAMS[9:]:
        params[n] = k.param("s64", n)
    g = {}
    for n in PARAMS[:5]:
        raw, gp = k.reg("s64"), k.reg("s64")
        k.ld_param(raw, params[n])
        k.cvta(gp, raw)
        g[n] = V(gp)
    for n in PARAMS[5:]:
        r = k.reg("s32" if n in "MNKR" else "s64")
        k.ld_param(r, params[n])
        g[n] = V(r)
    M, N, K, R = g["M"], g["N"], g["K"], g["R"]
    lda, ldb, ldc = g["lda"], g["ldb"], g["ldc"]

    tid = V(reg("s32", sreg.tid.x))
    m_cta = V(reg("s32", sreg.ctaid.x)) * S.bm
    n_cta = V(reg("s32", sreg.ctaid.y)) * S.bn
    z = V(reg("s32", sreg.ctaid.z))

    def idiv(a: Val, b) -> Val:
        d = k.reg(a.type)
        k.div(d, a.r, b.r if isinstance(b, Val) else int(b), rnd=None)
        return V(d)

    split = S.split_k > 1
    bz, part = (idiv(z, S.split_k), None) if split else (z, None)
    if split:
        part = z - bz * S.split_k  # ctaid.z = bz * split_k + part
    brow = g["batch_table"] + to64(bz) * 24
    boff = []
    for i in range(3):
        r = k.reg("s64")
        k.ld("global", r, addr(brow.r, 8 * i))
        boff.append(V(r))
    ptr_a, ptr_b = g["A"] + boff[0], g["B"] + boff[1]
    if split:  # partials: plane ctaid.z of the workspace (M x N fp32 planes, ldc = its M stride)
        ptr_c = g["C"] + to64(z) * (to64(N) * ldc)
    else:
        ptr_c = g["C"] + boff[2]

    kt_count = (K + (S.bk - 1)) >> (S.bk.bit_length() - 1)
    total = R * kt_count
    # this CTA's part [seq0, seq_end) of the flattened K-tile sequence (all of it without split-K)
    seq0 = split_range(part, total, S.split_k, idiv) if split else 0
    seq_end = split_range(part + 1, total, S.split_k, idiv) if split else total
    count = seq_end - seq0 if split else total

    smem = k.shared("smem", "b8", S.smem_bytes, align=128)
    sm_base = V(reg("s32", smem))

    # accumulators
    acc = [[k.regs("f32", 4) for _ in range(S.nt)] for _ in range(S.mt)]
    for row in acc:
        for quad in row:
            for r in quad:
                k.mov(r, 0.0)

    # loop-carried state of the producer
    sl, ktl, rl, wr = (reg("s32", 0) for _ in range(4))
    if split:
        r0 = idiv(seq0, kt_count)
        k.mov(sl, seq0.r)
        k.mov(rl, r0.r)
        k.mov(ktl, (seq0 - r0 * kt_count).r)
    base_a, base_b = k.reg("s64"), k.reg("s64")

    def set_slice(r_val):
        rrow = g["red_table"] + to64(r_val) * 16
        oa, ob = k.reg("s64"), k.reg("s64")
        k.ld("global", oa, addr(rrow.r, 0))
        k.ld("global", ob, addr(rrow.r, 8))
        k.add(base_a, ptr_a.r, oa)
        k.add(base_b, ptr_b.r, ob)

    set_slice(V(rl))

    def load_tile():
        skip = k.label("skip_load")
        p = k.reg("pred")
        k.setp("ge", p, sl, seq_end.r)
        k.bra(skip, pred=p, uni=True)
        k0 = V(ktl) * S.bk
        stage = sm_base + V(wr)
        operands = (
            ("a", S.layout_a, S.vec_a, V(base_a), lda, *S.tile_coords("a", m_cta, n_cta, k0, M, N, K), 0),
            (
                "b",
                S.layout_b,
                S.vec_b,
                V(base_b),
                ldb,
                *S.tile_coords("b", m_cta, n_cta, k0, M, N, K),
                S.layout_a.nbytes,
            ),
        )
        for op, lay, vec, base, ld, outer0, inner0, outer_ext, inner_ext, soff in operands:
            for j in range(S.copies(op)):
                row, col = copy_coords(lay, vec, S.threads, tid, j)
                dst = stage + lay.offset(row, col)
                outer, inner, nbytes = copy_src(lay, vec, row, col, outer0, inner0, outer_ext, inner_ext)
                src = base + global_offset(outer, inner, ld, lay.es)
                ok = k.reg("pred")
                k.setp("gt", ok, nbytes.r, 0)
                safe = k.reg("s64")
                k.selp(safe, src.r, base.r, ok)  # never form an address past the operand when nothing is read
                if vec >= 4:
                    k.cp_async(addr(dst.r, soff), addr(safe), vec, cache="cg" if vec == 16 else "ca", src_size=nbytes.r)
                else:
                    h = reg("u16", 0)
                    k.ld("global", h, addr(safe), type="u16", pred=ok)
                    k.st("shared", addr(dst.r, soff), h, type="u16")
        # advance: stage ring, k tile, reduction slice
        k.add(wr, wr, S.stage_bytes)
        wrap = k.reg("pred")
        k.setp("ge", wrap, wr, S.smem_bytes)
        k.mov(wr, 0, pred=wrap)
        k.add(ktl, ktl, 1)
        k.add(sl, sl, 1)
        nxt = k.reg("pred")
        k.setp("lt", nxt, ktl, kt_count.r)
        k.bra(skip, pred=nxt, uni=True)
        k.mov(ktl, 0)
        k.add(rl, rl, 1)
        last = k.reg("pred")
        k.setp("ge", last, rl, R.r)
        k.bra(skip, pred=last, uni=True)
        set_slice(V(rl))
        k.place(skip)

    # fragment address registers (one per plan representative)
    fplan = _fragment_plans(S)
    frag_regs = {}
    for rep, _ in fplan.values():
        if rep not in frag_regs:
            off = _frag_offset(S, tid, rep)
            frag_regs[rep] = off if isinstance(off, Val) else V(reg("s32", int(off)))
    afr = [k.regs("b32", 4) for _ in range(S.mt)]
    bfr = [k.regs("b32", 2) for _ in range(S.nt)]
    ftmp = k.reg("f32")

    def frag_addr(stage, key, extra=0):
        rep, const = fplan[key]
        a = stage + frag_regs[rep]
        return addr(a.r, const + extra)

    def compute(rd):
        stage = sm_base + V(rd)
        b_off = S.layout_a.nbytes
        for ks in range(S.bk // S.kstep):
            if S.es == 2:
                for mt in range(S.mt):
                    k.ldmatrix(afr[mt], frag_addr(stage, ("a", mt, ks, 0)), trans=S.trans_a)
                for p in range(S.nt // 2):
                    regs = [bfr[2 * p][0], bfr[2 * p][1], bfr[2 * p + 1][0], bfr[2 * p + 1][1]]
                    k.ldmatrix(regs, frag_addr(stage, ("b", p, ks, 0), b_off), trans=S.trans_b)
            else:
                for mt in range(S.mt):
                    for i in range(4):
                        k.ld("shared", ftmp, frag_addr(stage, ("a", mt, ks, i)))
                        k.cvt_tf32(afr[mt][i], ftmp)
                for nt in range(S.nt):
                    for i in range(2):
                        k.ld("shared", ftmp, frag_addr(stage, ("b", nt, ks, i), b_off))
                        k.cvt_tf32(bfr[nt][i], ftmp)
            for mt in range(S.mt):
                for nt in range(S.nt):
                    k.mma(S.shape, S.dtype, acc[mt][nt], afr[mt], bfr[nt], acc[mt][nt])

    # prologue: stages-1 tiles in flight
    pc = reg("s32", 0)
    pro = k.label("prologue")
    k.place(pro)
    load_tile()
    k.cp_async_commit()
    k.add(pc, pc, 1)
    more = k.reg("pred")
    k.setp("lt", more, pc, S.stages - 1)
    k.bra(pro, pred=more, uni=True)

    rd, s = reg("s32", 0), reg("s32", 0)
    loop, epilogue = k.label("mainloop"), k.label("epilogue")
    if split:  # a part with no K tiles (split_k > tiles) writes zero partials
        empty = k.reg("pred")
        k.setp("le", empty, count.r, 0)
        k.bra(epilogue, pred=empty, uni=True)
    k.place(loop)
    k.cp_async_wait(S.stages - 2)
    k.bar_sync(0)
    load_tile()
    k.cp_async_commit()
    compute(rd)
    k.add(rd, rd, S.stage_bytes)
    wrap = k.reg("pred")
    k.setp("ge", wrap, rd, S.smem_bytes)
    k.mov(rd, 0, pred=wrap)
    k.add(s, s, 1)
    again = k.reg("pred")
    k.setp("lt", again, s, count.r)
    k.bra(loop, pred=again, uni=True)

    # epilogue
    k.place(epilogue)
    deltas = _acc_deltas(S)
    m0, n0 = acc_coords(S, tid, 0, 0, 0)
    gm, gn = m_cta + m0, n_cta + n0
    cbase = ptr_c + to64(gn) * ldc + to64(gm * 4)
    row_ok = {}
    for mt in range(S.mt):
        for h in range(2):
            dm = deltas[(mt, 0, 2 * h)][0]
            p = k.reg("pred")
            k.setp("lt", p, (gm + dm).r, M.r)
            row_ok[(mt, h)] = p
    zero_f = reg("f32", 0.0)
    for nt in range(S.nt):
        for jc in range(2):
            dn = deltas[(0, nt, jc)][1]
            col_ok = k.reg("pred")
            k.setp("lt", col_ok, (gn + dn).r, N.r)
            pcol = cbase + ldc * dn if dn else cbase
            for mt in range(S.mt):
                for h in range(2):
                    i = 2 * h + jc
                    dm, dn_i = deltas[(mt, nt, i)]
                    assert dn_i == dn
                    p = k.reg("pred")
                    k.and_(p, row_ok[(mt, h)], col_ok)
                    v = acc[mt][nt][i]
                    store_touched(k, S.first, S.last, v, addr(pcol.r, 4 * dm), p, zero_f)
    k.ret()
    return GemmKernel(S, mod, k)


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
