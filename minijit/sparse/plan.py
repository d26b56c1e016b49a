"""TCA-SpMM preprocessing: warps, blocks and partial sums per sparsity pattern
(docs/seeds/003_tca_spmm.txt section 4.2).

Rows with 1-64 non-zeros get 1, 2, 4 or 8 warps (<=8, 9-16, 17-32, 33-64
nnz) and share 8-warp blocks (``multirow_per_block``); they are packed in
order of decreasing warp count, so a row's warps never straddle two blocks.
Rows with more than 64 non-zeros get ``ceil(nnz / (64 * seg_chunks))``
blocks of 8 warps (``multiblock_per_row``): block ``s`` of the row computes
the row's non-zeros ``[64*seg_chunks*s, 64*seg_chunks*(s+1))`` against all N
columns. Without atomics in the ``ptx`` builder, multi-block rows write
per-block partial rows to a workspace ``P`` and a second kernel sums them
into C (that pass also zero-fills empty rows). Single-block rows write C
directly.

Per warp, as in the seed: ``row_id_for_each_warp`` (-1: idle),
``num_warps_per_row`` (over all blocks of the row) and ``warpid_within_row``
(0 .. num_warps_per_row-1); plus ``partial_slot_for_each_warp`` (-1: write
C). The plan depends only on ``indptr`` (and N), so new values need no new plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minijit.sparse.layout import CHUNK, WARPS_PER_BLOCK

__all__ = ["Plan", "SEG_CHUNKS", "make_plan", "warps_for_nnz"]

SEG_CHUNKS = 2  # 64-nnz chunks per multiblock_per_row block


def warps_for_nnz(nnz, seg_chunks: int = SEG_CHUNKS):
    """Warps a row gets: 0, 1, 2, 4, 8 for 0, <=8, <=16, <=32, <=64 nnz; 8 per block beyond."""
    nnz = np.asarray(nnz, dtype=np.int64)
    blocks = -(-nnz // (CHUNK * seg_chunks))
    small = np.select([nnz == 0, nnz <= 8, nnz <= 16, nnz <= 32], [0, 1, 2, 4], 8)
    return np.where(nnz > CHUNK, WARPS_PER_BLOCK * blocks, small).astype(np.int64)


@dataclass(frozen=True)
class Plan:
    """Warp/block assignment of one sparsity pattern (arrays int32)."""

    m: int
    n: int
    nnz: int
    seg_chunks: int
    row_id_for_each_warp: np.ndarray
    num_warps_per_row: np.ndarray
    warpid_within_row: np.ndarray
    partial_slot_for_each_warp: np.ndarray
    num_blocks: int
    num_multiblock_blocks: int  # the first blocks; the rest are multirow_per_block
    num_partials: int  # rows of the workspace P
    reduce_rows: np.ndarray  # rows the second pass writes (multi-block rows, then empty rows)
    reduce_slot_begin: np.ndarray
    reduce_slot_count: np.ndarray  # 0: an empty row (zero-filled)

    @property
    def num_warps(self) -> int:
        return self.num_blocks * WARPS_PER_BLOCK

    @property
    def needs_second_pass(self) -> bool:
        return self.reduce_rows.shape[0] > 0

    def summary(self) -> str:
        busy = int((self.row_id_for_each_warp >= 0).sum())
        return (
            f"{self.m} rows, nnz {self.nnz}, N {self.n}: {self.num_blocks} blocks"
            f" ({self.num_multiblock_blocks} multiblock_per_row), {busy}/{self.num_warps} warps busy,"
            f" {self.num_partials} partial rows, {self.reduce_rows.shape[0]} rows in the second pass"
        )


def make_plan(indptr: np.ndarray, n: int, seg_chunks: int = SEG_CHUNKS) -> Plan:
    """Build the plan from a validated ``indptr`` (length M+1) for N output columns."""
    if not isinstance(seg_chunks, int) or not 1 <= seg_chunks <= 4:
        raise ValueError(f"seg_chunks must be 1..4 (the scratch pad is loaded by 256 threads), got {seg_chunks!r}")
    indptr = np.asarray(indptr, dtype=np.int64)
    m = indptr.shape[0] - 1
    nnz_row = np.diff(indptr)
    warps = warps_for_nnz(nnz_row, seg_chunks)
    seg = CHUNK * seg_chunks

    row_ids: list[np.ndarray] = []
    nwpr: list[np.ndarray] = []
    wrid: list[np.ndarray] = []
    pslot: list[np.ndarray] = []
    red_rows, red_begin, red_count = [], [], []

    # multiblock_per_row: rows with > 64 nnz, 8 warps per block, block s covers nnz segment s
    long_rows = np.flatnonzero(nnz_row > CHUNK)
    slots = 0
    for r in long_rows:
        nblk = int(-(-nnz_row[r] // seg))
        w = WARPS_PER_BLOCK * nblk
        row_ids.append(np.full(w, r))
        nwpr.append(np.full(w, w))
        wrid.append(np.arange(w))
        if nblk > 1:
            pslot.append(slots + np.arange(w) // WARPS_PER_BLOCK)
            red_rows.append(r)
            red_begin.append(slots)
            red_count.append(nblk)
            slots += nblk
        else:
            pslot.append(np.full(w, -1))
    n_mb_blocks = sum(len(x) for x in row_ids) // WARPS_PER_BLOCK

    # multirow_per_block: rows with 1..64 nnz, sorted by warp count (8, 4, 2, 1), packed
    short = np.flatnonzero((nnz_row > 0) & (nnz_row <= CHUNK))
    short = short[np.argsort(-warps[short], kind="stable")]
    q = warps[short]
    if short.size:
        row_ids.append(np.repeat(short, q))
        nwpr.append(np.repeat(q, q))
        starts = np.repeat(np.cumsum(q) - q, q)
        wrid.append(np.arange(int(q.sum())) - starts)
        pslot.append(np.full(int(q.sum()), -1))
    total = sum(len(x) for x in row_ids)
    pad = (-total) % WARPS_PER_BLOCK
    if pad:
        row_ids.append(np.full(pad, -1))
        nwpr.append(np.zeros(pad))
        wrid.append(np.zeros(pad))
        pslot.append(np.full(pad, -1))

    empty = np.flatnonzero(nnz_row == 0)
    red_rows.extend(empty.tolist())
    red_begin.extend([0] * empty.size)
    red_count.extend([0] * empty.size)

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)

    rid = cat(row_ids)
    return Plan(
        m=m,
        n=int(n),
        nnz=int(indptr[-1]),
        seg_chunks=seg_chunks,
        row_id_for_each_warp=rid,
        num_warps_per_row=cat(nwpr),
        warpid_within_row=cat(wrid),
        partial_slot_for_each_warp=cat(pslot),
        num_blocks=rid.shape[0] // WARPS_PER_BLOCK,
        num_multiblock_blocks=n_mb_blocks,
        num_partials=slots,
        reduce_rows=np.asarray(red_rows, dtype=np.int32),
        reduce_slot_begin=np.asarray(red_begin, dtype=np.int32),
        reduce_slot_count=np.asarray(red_count, dtype=np.int32),
    )
