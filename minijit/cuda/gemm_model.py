"""The host side of the mma.sync GEMM: batch/reduction tables, operand encoding, and the numpy model
(:func:`simulate`) that runs the generator's index math with bank-conflict and bounds checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ptx import mma

from .gemm_index import _frag_offset, _fragment_plans, acc_coords, copy_coords, copy_src, global_offset, split_range
from .gemm_spec import GemmSpec

# --------------------------------------------------------------------------- host-side tables


def tables(batch_offsets=None, red_offsets=None) -> tuple[np.ndarray, np.ndarray]:
    """int64 tables: batch (Z, 3) byte offsets of (A, B, C); reduction (R, 2) of (A, B).
    Defaults: one batch entry and one reduction entry at offset 0."""
    bt = np.zeros((1, 3), np.int64) if batch_offsets is None else np.asarray(batch_offsets, np.int64).reshape(-1, 3)
    rt = np.zeros((1, 2), np.int64) if red_offsets is None else np.asarray(red_offsets, np.int64).reshape(-1, 2)
    if len(bt) == 0 or len(rt) == 0:
        raise ValueError("batch and reduction tables need at least one row")
    return np.ascontiguousarray(bt), np.ascontiguousarray(rt)


#: host bytes of an operand as the kernel reads them, and back (`ptx.mma.encode` / `ptx.mma.decode`)
encode, decode = mma.encode, mma.decode


# --------------------------------------------------------------------------- numpy model


def bank_degree(addrs: np.ndarray, width: int) -> int:
    """Worst bank-conflict degree of one warp-wide shared access of ``width`` bytes per lane
    (lanes served in phases of 128 bytes; 1 = conflict-free)."""
    addrs = np.asarray(addrs, dtype=np.int64)
    per = max(1, 128 // max(width, 4))
    worst = 1
    for p in range(0, len(addrs), per):
        a = addrs[p : p + per]
        words = np.unique((a[:, None] + np.arange(0, max(width, 4), 4)[None, :]).ravel() // 4)
        _, counts = np.unique(words % 32, return_counts=True)
        worst = max(worst, int(counts.max()))
    return worst


@dataclass
class ModelStats:
    """What the model saw: worst bank-conflict degrees per access kind and the cp.async count."""

    conflicts: dict = field(default_factory=dict)
    copies: int = 0
    mma: int = 0
    written: np.ndarray | None = None

    def note(self, kind: str, degree: int) -> None:
        self.conflicts[kind] = max(self.conflicts.get(kind, 1), degree)


def _read(mem: np.ndarray, start: np.ndarray, nbytes: np.ndarray, width: int, what: str) -> np.ndarray:
    """Bytes [start, start+nbytes) of ``mem`` per row, zero-filled to ``width`` (cp.async src-size)."""
    start = np.asarray(start, np.int64)
    nbytes = np.asarray(nbytes, np.int64)
    live = nbytes > 0
    if live.any():
        lo, hi = start[live].min(), (start[live] + nbytes[live]).max()
        if lo < 0 or hi > mem.size:
            raise AssertionError(f"{what}: read of bytes {lo}..{hi} outside the buffer of {mem.size}")
    idx = start[:, None] + np.arange(width)[None, :]
    mask = np.arange(width)[None, :] < nbytes[:, None]
    out = np.zeros(idx.shape, np.uint8)
    out[mask] = mem[idx[mask]]
    return out


def simulate(
    spec: GemmSpec,
    a_mem: np.ndarray,
    b_mem: np.ndarray,
    c: np.ndarray,
    m: int,
    n: int,
    k: int,
    lda: int,
    ldb: int,
    ldc: int,
    batch_table=None,
    red_table=None,
    exact_mma: bool = False,
) -> ModelStats:
    """Run the kernel's data movement in numpy, CTA by CTA, thread-vectorized.

    ``a_mem``/``b_mem``: the operands' device bytes (uint8, see :func:`encode`); ``c``: float32
    array updated in place; ``lda/ldb/ldc`` and the tables in bytes, as the kernel takes them.
    Copies follow :func:`copy_coords`/:func:`copy_src` (reads outside a buffer raise), the stage
    ring is the kernel's (tile s+stages-1 is written before tile s is read), fragments come from
    the modelled shared memory through ``ptx.mma.ldmatrix`` (or the tf32 scalar loads) and are
    reassembled with ``ptx.mma.gather``; ``exact_mma`` uses the lane-level ``ptx.mma.mma_sync``.
    With ``split_k`` > 1, ``c`` is the workspace: ``batch * split_k`` fp32 planes of N columns of
    ``ldc`` bytes, plane ``z * split_k + part`` holding part ``part``'s sum (``batch_table``'s C
    offsets unused).
    """
    S = spec.validate()
    run = _ModelRun(S, a_mem, b_mem, c, m, n, k, lda, ldb, ldc, batch_table, red_table, exact_mma)
    total = len(run.rt) * run.kt_count
    for zz in range(len(run.bt) * S.split_k):  # tile scheduler: batch entry x split-K part, then CTA tiles
        bz, part = divmod(zz, S.split_k)
        seq0 = split_range(part, total, S.split_k)
        count = split_range(part + 1, total, S.split_k) - seq0
        c_base = zz * n * ldc if S.split_k > 1 else run.bt[bz, 2]
        for bx in range(-(-m // S.bm)):
            for by in range(-(-n // S.bn)):
                run.cta(bx * S.bm, by * S.bn, bz, seq0, count, c_base)
    run.stats.written = run.written
    return run.stats


class _ModelRun:
    """One :func:`simulate` call: the operands, the tables and the statistics; :meth:`cta` runs one
    CTA's stages (prologue, main loop, epilogue) as the kernel does."""

    def __init__(self, S: GemmSpec, a_mem, b_mem, c, m, n, k, lda, ldb, ldc, batch_table, red_table, exact_mma):
        self.S, self.c, self.m, self.n, self.k = S, c, m, n, k
        self.lda, self.ldb, self.ldc, self.exact_mma = lda, ldb, ldc, exact_mma
        self.bt, self.rt = tables(batch_table, red_table)
        self.a_mem = np.ascontiguousarray(a_mem).view(np.uint8).ravel()
        self.b_mem = np.ascontiguousarray(b_mem).view(np.uint8).ravel()
        self.c_bytes = c.view(np.uint8).reshape(-1)
        self.stats = ModelStats()
        self.tids = np.arange(S.threads, dtype=np.int64)
        self.kt_count = -(-k // S.bk)
        self.fplan = _fragment_plans(S)
        self.written = np.zeros(c.size, np.int64)

    def cta(self, m_cta: int, n_cta: int, bz: int, seq0: int, count: int, c_base: int) -> None:
        """One CTA: stages - 1 tiles in flight, then per tile: load the one stages - 1 ahead, compute."""
        S = self.S
        smem = np.zeros(S.smem_bytes, np.uint8)
        acc = np.zeros((S.warps, S.mt, S.nt, 32, 4), np.float64)
        for s in range(min(S.stages - 1, count)):
            self.load(smem, m_cta, n_cta, bz, seq0, s)
        for s in range(count):
            if s + S.stages - 1 < count:
                self.load(smem, m_cta, n_cta, bz, seq0, s + S.stages - 1)
            self.compute(smem, acc, s)
        self.epilogue(acc, m_cta, n_cta, c_base)

    def load(self, smem, m_cta, n_cta, bz, seq0, s) -> None:
        """Producer: the copies of tile ``s`` of the CTA's sequence into its stage, checked."""
        S, m, n, k, lay_a, lay_b = self.S, self.m, self.n, self.k, self.S.layout_a, self.S.layout_b
        r, kt = divmod(seq0 + s, self.kt_count)
        stage = (s % S.stages) * S.stage_bytes
        k0 = kt * S.bk
        bt, rt = self.bt, self.rt
        ops = (
            (
                "a",
                lay_a,
                S.vec_a,
                self.a_mem,
                bt[bz, 0] + rt[r, 0],
                self.lda,
                *S.tile_coords("a", m_cta, n_cta, k0, m, n, k),
                0,
            ),
            (
                "b",
                lay_b,
                S.vec_b,
                self.b_mem,
                bt[bz, 1] + rt[r, 1],
                self.ldb,
                *S.tile_coords("b", m_cta, n_cta, k0, m, n, k),
                lay_a.nbytes,
            ),
        )
        for op, lay, vec, mem, base, ld, outer0, inner0, outer_ext, inner_ext, soff in ops:
            for j in range(S.copies(op)):
                row, col = copy_coords(lay, vec, S.threads, self.tids, j)
                dst = stage + soff + lay.offset(row, col)
                outer, inner, nb = copy_src(lay, vec, row, col, outer0, inner0, outer_ext, inner_ext)
                src = np.where(nb > 0, base + global_offset(outer, inner, ld, lay.es), base)
                assert (dst % vec == 0).all(), "unaligned shared destination"
                assert (src[nb > 0] % vec == 0).all(), f"{op}: unaligned global source for {vec}-byte copy"
                for w in range(S.warps):
                    self.stats.note(f"store_{op}", bank_degree(dst[32 * w : 32 * w + 32], vec))
                data = _read(mem, src, nb, vec, f"operand {op}")
                smem[dst[:, None] + np.arange(vec)[None, :]] = data
                self.stats.copies += S.threads

    def compute(self, smem, acc, s) -> None:
        """Consumer: every warp's fragments of stage ``s`` and its mma.sync, into ``acc``."""
        S, stats, fplan = self.S, self.stats, self.fplan
        stage = (s % S.stages) * S.stage_bytes
        for w in range(S.warps):
            lt = self.tids[32 * w : 32 * w + 32]
            for ks in range(S.bk // S.kstep):
                afr, bfr = [], [None] * S.nt
                for mt in range(S.mt):
                    afr.append(_model_frag(S, smem, stage, lt, "a", mt, ks, fplan, stats))
                if S.es == 2:
                    for p in range(S.nt // 2):
                        regs = _model_frag(S, smem, stage, lt, "b", p, ks, fplan, stats)
                        bfr[2 * p], bfr[2 * p + 1] = regs[:, 0:2], regs[:, 2:4]
                else:
                    for nt in range(S.nt):
                        bfr[nt] = _model_frag(S, smem, stage, lt, "b", nt, ks, fplan, stats)
                for mt in range(S.mt):
                    for nt in range(S.nt):
                        acc[w, mt, nt] = _model_mma(S, afr[mt], bfr[nt], acc[w, mt, nt], self.exact_mma)
                        stats.mma += 1

    def epilogue(self, acc, m_cta, n_cta, c_base) -> None:
        """The touches and the C stores under m < M, n < N (bounds of the C buffer checked)."""
        S, c = self.S, self.c
        for mt in range(S.mt):
            for nt in range(S.nt):
                for i in range(4):
                    mm, nn = acc_coords(S, self.tids, mt, nt, i)
                    gm, gn = m_cta + mm, n_cta + nn
                    ok = (gm < self.m) & (gn < self.n)
                    off = c_base + gn.astype(np.int64) * self.ldc + gm * 4
                    live = off[ok]
                    if live.size and (live.min() < 0 or live.max() + 4 > self.c_bytes.size):
                        raise AssertionError("C store outside the buffer")
                    assert (live % 4 == 0).all()
                    idx = live // 4
                    v = acc[:, mt, nt, :, i].reshape(-1)[ok]
                    if S.first == "zero":
                        old = 0.0
                    else:
                        old = c[idx].astype(np.float64)
                        if S.first == "relu":
                            old = np.maximum(old, 0.0)
                    v = v + old
                    if S.last == "relu":
                        v = np.maximum(v, 0.0)
                    c[idx] = v.astype(np.float32)
                    np.add.at(self.written, idx, 1)


def _model_frag(S: GemmSpec, smem, stage, lane_tids, operand, tile, ks, fplan, stats) -> np.ndarray:
    """Register contents (32, regs) uint32 of one fragment load, from the planned addresses."""
    base = stage + (S.layout_a.nbytes if operand == "b" else 0)
    if S.es == 2:
        key = (operand, tile, ks, 0)
        rep, const = fplan[key]
        a = base + np.asarray(_frag_offset(S, lane_tids, rep), np.int64) + const
        assert (a == base + _frag_offset(S, lane_tids, key)).all()
        assert (a % 16 == 0).all(), "ldmatrix row address not 16-byte aligned"
        stats.note(f"ldmatrix_{operand}", bank_degree(a, 16))
        rows = smem[a[:, None] + np.arange(16)[None, :]].view(np.uint16).reshape(4, 8, 8)
        got = mma.ldmatrix(rows, trans=S.trans_a if operand == "a" else S.trans_b)  # (32, 4, 2) uint16
        return got[..., 0].astype(np.uint32) | (got[..., 1].astype(np.uint32) << 16)
    n = 4 if operand == "a" else 2
    out = np.empty((32, n), np.uint32)
    for i in range(n):
        key = (operand, tile, ks, i)
        rep, const = fplan[key]
        a = base + np.asarray(_frag_offset(S, lane_tids, rep), np.int64) + const
        assert (a % 4 == 0).all()
        stats.note(f"lds_{operand}", bank_degree(a, 4))
        f = smem[a[:, None] + np.arange(4)[None, :]].copy().view(np.float32).ravel()
        out[:, i] = mma.round_tf32(f).view(np.uint32)  # cvt.rna.tf32.f32
    return out


def _model_mma(S: GemmSpec, a_regs, b_regs, c_frag, exact: bool) -> np.ndarray:
    a = mma.unpack_regs(S.dtype, a_regs)
    b = mma.unpack_regs(S.dtype, b_regs)
    if exact:
        return mma.mma_sync(S.shape, S.dtype, a, b, c_frag.astype(np.float32)).astype(np.float64)
    ta = mma.gather(S.shape, S.dtype, "a", mma.quantize(S.dtype, a)).astype(np.float64)
    tb = mma.gather(S.shape, S.dtype, "b", mma.quantize(S.dtype, b)).astype(np.float64)
    tc = mma.gather(S.shape, S.dtype, "c", c_frag)
    return mma.scatter(S.shape, S.dtype, "c", ta @ tb + tc)


def reference(dtype, a, b, c, first="zero", last="none"):
    """numpy reference for one GEMM with quantized inputs (float64 accumulation)."""
    qa = mma.quantize(dtype, a) if dtype != "tf32" else mma.round_tf32(a)
    qb = mma.quantize(dtype, b) if dtype != "tf32" else mma.round_tf32(b)
    old = np.zeros_like(c, dtype=np.float64) if first == "zero" else c.astype(np.float64)
    if first == "relu":
        old = np.maximum(old, 0.0)
    out = old + qa.astype(np.float64) @ qb.astype(np.float64)
    return np.maximum(out, 0.0) if last == "relu" else out
