"""Numpy model of the TCA-SpMM kernels, lane by lane (vectorised over all warps).

`tca_spmm` runs what ``tca.py`` emits, with the same plan and the same index
formulas (`minijit.sparse.layout`, evaluated with `IntOps`): the per-block
sparse-row scratch pad, each warp's compressed RHS buffer (its 4 A tiles),
A/B fragments read through the ``ptx.mma`` layout tables, m16n8k8 f16/bf16/tf32 MMAs
with f32 accumulation (`mma_sync`, a vectorised equivalent of
``ptx.mma.mma_sync``), the diagonal pick (``shfl.idx``) and butterfly
(``shfl.bfly``) reduction, predicated stores, and the second pass over
partial rows. Values are rounded to the input precision as the kernel sees them.
"""

from __future__ import annotations

import numpy as np

from minijit.sparse import layout as L
from minijit.sparse.csr import Csr
from minijit.sparse.plan import Plan
from minijit.sparse.precision import precision
from ptx import mma as M

__all__ = ["mma_sync", "tca_spmm", "rhs_slots"]

_SHAPE = "m16n8k8"


def mma_sync(a_frags: np.ndarray, b_frags: np.ndarray, c_frags: np.ndarray, dtype: str = "f16") -> np.ndarray:
    """``mma.sync.m16n8k8.row.col.f32.{dtype}.{dtype}.f32`` on stacks of warps: (..., 32, 4|2|4)
    fragments (elements, one per entry, for f16, bf16 and tf32 alike).

    Same semantics as ``ptx.mma.mma_sync`` (inputs quantized to ``dtype``, products and
    sums in float64, result float32), for any leading batch shape.
    """
    lay_a, lay_b, lay_c = (M.layout(_SHAPE, dtype, x) for x in "abc")
    a = M.quantize(dtype, a_frags).astype(np.float64)
    b = M.quantize(dtype, b_frags).astype(np.float64)
    batch = a.shape[:-2]
    at = np.zeros(batch + (16, 8))
    bt = np.zeros(b.shape[:-2] + (8, 8))
    at[..., lay_a[..., 0], lay_a[..., 1]] = a
    bt[..., lay_b[..., 0], lay_b[..., 1]] = b
    d = at @ bt
    return (d[..., lay_c[..., 0], lay_c[..., 1]] + np.asarray(c_frags, np.float64)).astype(np.float32)


def rhs_slots(lq: int) -> np.ndarray:
    """(64 vectors, 8 elements) -> f16 slot of a warp's RHS buffer, for chunk lq (a permutation of 0..511)."""
    o = L.IntOps
    v = np.arange(64)[:, None]
    e = np.arange(8)[None, :]
    p, cb = L.rhs_vector(o, v, lq)
    return L.rhs_slot(o, 8 * cb + e, p, lq)


def tca_spmm(plan: Plan, csr: Csr, b: np.ndarray, dtype: str = "fp16") -> np.ndarray:
    """C = S @ B (float32, M x N) computed as the TCA-SpMM kernels for input precision ``dtype``
    ("fp16", "bf16", "tf32"; `minijit.sparse.precision`) compute it."""
    o = L.IntOps
    prec = precision(dtype)
    m, n = plan.m, plan.n
    indptr = csr.indptr.astype(np.int64)
    nnz_row = np.diff(indptr)
    data = prec.quantize(csr.data).astype(np.float32)
    bq = prec.quantize(b).astype(np.float32)
    indices = csr.indices.astype(np.int64)
    c_out = np.zeros((m, n), np.float32)
    part = np.zeros((max(plan.num_partials, 1), n), np.float32)
    rid = plan.row_id_for_each_warp.astype(np.int64)
    wrid = plan.warpid_within_row.astype(np.int64)
    nb, nw = plan.num_blocks, plan.num_warps
    if nb:
        ent = L.CHUNK * plan.seg_chunks
        # ---- scratch pad: thread e of block blk loads entry e (multiblock: the block's segment)
        blk = np.arange(nb)[:, None]
        e = np.arange(ent)[None, :]
        mb_blk = nnz_row[rid[8 * blk]] > L.CHUNK
        w_e = np.where(mb_blk, 0, e >> 3)
        w_e = np.minimum(w_e, 7)
        row_e = rid[8 * blk + w_e]
        wr_e = wrid[8 * blk + w_e]
        base_e = np.where(mb_blk, 0, 8 * (w_e - wr_e))
        p_e = L.seg_begin(o, wr_e, plan.seg_chunks) + e - base_e
        ok = (row_e >= 0) & (p_e < nnz_row[np.maximum(row_e, 0)]) & np.where(mb_blk, True, e < L.CHUNK)
        src = np.where(ok, indptr[np.maximum(row_e, 0)] + p_e, 0)
        s_val = np.where(ok, data[src] if data.size else 0.0, 0.0).astype(np.float32)
        s_col = np.where(ok, indices[src] if indices.size else -1, -1)

        # ---- per warp
        busy = rid >= 0
        row = np.maximum(rid, 0)
        nnz_w = np.where(busy, nnz_row[row], 0)
        lq = L.lq_of_nnz(o, nnz_w)
        mb = nnz_w > L.CHUNK
        wblk = np.arange(nw) // 8
        base = np.where(mb, 0, 8 * (np.arange(nw) % 8 - wrid))
        sb = L.seg_begin(o, wrid, plan.seg_chunks)
        nchunks = np.where(busy, (np.minimum(nnz_w - sb, ent) + 63) >> 6, 0)
        pslot = plan.partial_slot_for_each_warp.astype(np.int64)

        lane = np.arange(32)[None, :]
        g, t = lane >> 2, lane & 3
        lqc = lq[:, None]
        wcol = L.warp_col0(o, wrid, lq)[:, None]
        mt = np.arange(4)[None, :, None]
        if prec.mma == "tf32":  # one element per register
            a_el = [L.a_frag_index_tf32(o, g, t, i) for i in range(4)]
            b_el = [L.b_frag_index_tf32(o, g, t, lq[:, None], i) for i in range(2)]
        else:  # element 2j in the low half of register j
            a_el = [L.a_frag_index(o, g, t, i >> 1) + (i & 1) for i in range(4)]
            b_el = [L.b_frag_index(o, g, t, lq[:, None]) + i for i in range(2)]
        a_idx = np.stack([(mt * 128 + a) for a in a_el], axis=-1)  # (1, 4, 32, 4)
        for tile in range(-(-n // L.TILE_N)):
            acc = np.zeros((nw, 4, 32, 4), np.float32)
            for c in range(int(nchunks.max(initial=0))):
                active = c < nchunks
                rhs = np.zeros((nw, L.RHS_HALVES), np.float32)
                for u in range(2):
                    p, cb = L.rhs_vector(o, lane + 32 * u, lqc)
                    eidx = np.minimum(base[:, None] + L.CHUNK * c + p, ent - 1)
                    colidx = s_col[wblk[:, None], eidx]
                    col0 = tile * L.TILE_N + wcol + 8 * cb
                    for el in range(8):
                        col = col0 + el
                        good = (colidx >= 0) & (col < n)
                        val = np.where(good, bq[np.maximum(colidx, 0), np.minimum(col, n - 1)], 0.0)
                        slot = L.rhs_slot(o, 8 * cb + el, p, lqc)
                        np.put_along_axis(rhs, slot, val, axis=1)
                afr = rhs[:, a_idx[0]]  # (W, 4, 32, 4)
                b_idx = base[:, None, None] + L.CHUNK * c + np.stack(b_el, axis=-1)
                b_idx = np.minimum(b_idx, ent - 1)
                bfr = s_val[wblk[:, None, None], b_idx]  # (W, 32, 2)
                d = mma_sync(afr, bfr[:, None], acc, prec.mma)
                acc = np.where(active[:, None, None, None], d, acc)
            # ---- diagonal extraction: shfl.idx pick, then shfl.bfly over the q rows of a group
            odd, srcl = L.diag_source(o, lane, g, lqc)
            writer = (L.is_writer(o, g, lqc) == 0) & busy[:, None]
            out_rows = np.where(pslot >= 0, pslot, row)
            for k in range(4):
                for half in range(2):
                    v = np.where(odd == 1, acc[:, k, :, 2 * half + 1], acc[:, k, :, 2 * half])
                    v = np.take_along_axis(v, srcl, axis=1)
                    for s in range(3):
                        tmp = v[:, np.arange(32) ^ (4 << s)]
                        v = np.where(lqc > s, v + tmp, v)
                    col = tile * L.TILE_N + wcol + L.mma_col0(o, k, lqc) + L.out_col(o, g, lqc, half)
                    st = writer & (t == k) & (col < n)
                    wi, li = np.nonzero(st)
                    dst_p = pslot[wi] >= 0
                    c_out[out_rows[wi[~dst_p]], col[wi[~dst_p], li[~dst_p]]] = v[wi[~dst_p], li[~dst_p]]
                    part[out_rows[wi[dst_p]], col[wi[dst_p], li[dst_p]]] = v[wi[dst_p], li[dst_p]]
    # ---- second pass: sum partial rows; zero-fill empty rows
    for r, b0, cnt in zip(plan.reduce_rows, plan.reduce_slot_begin, plan.reduce_slot_count, strict=True):
        acc1 = np.zeros(n, np.float32)
        for j in range(int(cnt)):
            acc1 = acc1 + part[b0 + j]
        c_out[r] = acc1
    return c_out
