"""Row-window plan: the second TCA-SpMM strategy, work split by non-zeros instead of by rows.

Rows are grouped in windows of 16 consecutive rows. A window's non-zeros are condensed to the
sorted set of the columns they use; these columns, 8 at a time, form column blocks, and the
window's values in a block make one dense 16 x 8 A tile of an ``mma.m16n8k8`` (zeros where a
row has no entry in that column). The tiles are stored in fragment order (lane by lane, 4
values each: 16-bit, or fp32 for tf32 with its own fragment layout, ``WindowPlan.tf32``), so a
warp loads its A fragments with one 64-bit (tf32: 128-bit) load per lane.

Work items are runs of consecutive column blocks of one window holding about ``target_nnz``
non-zeros each (a split by non-zeros: a window of long rows becomes several items, a window of
short rows one). A window with one item writes C; the items of a split window write partial
rows to ``P`` (item ``i`` of ``s`` writes row ``r`` of the window to ``P[base + r*s + i]``) and
the second pass (``tca_reduce``) sums each row's ``s`` consecutive partials. Windows without
non-zeros are zero-filled by that pass.

Windows of 8 rows (``window=8``, FlashSparse's swap-and-transpose): each 8 x 8 tile of a block is
the mma's B operand (k = the 8 condensed columns, n = the 8 rows; 2 values per lane) and 16
output columns of dense B, transposed, are its A operand, so one ``mma.m16n8k8`` computes 16
output columns of 8 rows: C^T = B^T S^T. Half the rows per window means fewer distinct columns
per window, so fewer padded zeros in the tiles of scattered patterns; `window_mmas` counts both.

With ``row_order`` (a permutation, `minijit.sparse.reorder`) the windows hold the rows in that
order: the plan is made for the permuted pattern and keeps a row table ``rows`` (window row ->
C row) that the kernel's C stores and the second pass go through, so C is in the caller's row
order; ``tile_of_nnz`` stays indexed by the caller's non-zero order.

`choose_strategy` picks between this plan (16-row windows, given or reordered rows, or 8-row
swapped windows) and seed 003's (`minijit.sparse.plan`) from the pattern: the mma instructions
each would issue per 64 output columns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from minijit.sparse.layout import CHUNK, TILE_N
from minijit.sparse.plan import Plan
from minijit.sparse.reorder import permute_csr

__all__ = [
    "MIN_REORDER_GAIN",
    "MIN_SWAP_GAIN",
    "SWAP_WINDOW",
    "WINDOW",
    "WindowPlan",
    "choose_strategy",
    "make_window_plan",
    "pick_window",
    "tca_mmas",
    "window_mmas",
]

WINDOW = 16  # rows per window (the mma's M)
SWAP_WINDOW = 8  # rows per window of the swapped layout (the mma's N)
BLOCK_COLS = 8  # condensed columns per A tile (the mma's K)
TARGET_NNZ = 256  # non-zeros per work item
MIN_REORDER_GAIN = 0.10  # reorder rows when that saves at least this fraction of the window mmas
MIN_SWAP_GAIN = 0.10  # take the swapped 8-row windows when they save at least this fraction of the mmas


@dataclass(frozen=True)
class WindowPlan:
    """Row windows, column blocks and work items of one sparsity pattern (int32 arrays)."""

    m: int
    n: int
    nnz: int
    block_cols: np.ndarray  # (blocks, 8): column of each condensed slot, -1 for padding
    tile_of_nnz: np.ndarray  # (nnz,): flat index into tiles (blocks * 32 * 4) of each non-zero
    item_row0: np.ndarray  # first row of the item's window
    item_blk_begin: np.ndarray
    item_blk_end: np.ndarray
    item_pslot: np.ndarray  # -1: write C; else P row of (row 0, this item)
    item_pstride: np.ndarray  # items of the window (P rows of one C row are consecutive)
    num_partials: int
    reduce_rows: np.ndarray
    reduce_slot_begin: np.ndarray
    reduce_slot_count: np.ndarray
    rows: np.ndarray | None = None  # int32 (m,): C row of window row p (None: row p itself)
    window: int = WINDOW  # rows per window: 16 (tiles are the mma's A) or 8 (swapped: its B)
    tf32: bool = False  # tiles in the tf32 fragment layout (one fp32 value per register)

    def __post_init__(self) -> None:
        if self.window not in (WINDOW, SWAP_WINDOW):
            raise ValueError(f"window must be {WINDOW} or {SWAP_WINDOW}, got {self.window!r}")
        r = self.rows
        if r is not None:
            if not isinstance(r, np.ndarray) or r.shape != (self.m,) or r.dtype != np.int32:
                raise ValueError(f"rows must be an int32 array of M = {self.m} entries (window row -> C row)")
            if self.m and (r.min() < 0 or r.max() >= self.m or np.bincount(r, minlength=self.m).max() != 1):
                raise ValueError("rows must be a permutation of 0..M-1")

    @property
    def reordered(self) -> bool:
        return self.rows is not None

    @property
    def num_blocks(self) -> int:
        return int(self.block_cols.shape[0])

    @property
    def num_items(self) -> int:
        return int(self.item_row0.shape[0])

    @property
    def swapped(self) -> bool:
        """Whether the tiles are the mma's B operand (8-row windows, C^T = B^T S^T)."""
        return self.window == SWAP_WINDOW

    @property
    def per_lane(self) -> int:
        """Tile values per lane and block: 4 (A fragment) or 2 (swapped: B fragment)."""
        return 2 if self.swapped else 4

    @property
    def needs_second_pass(self) -> bool:
        return self.reduce_rows.shape[0] > 0

    def tiles(self, values: np.ndarray) -> np.ndarray:
        """The tiles in fragment order, (blocks, 32 lanes, `per_lane`) float64, from the non-zero
        values (duplicates summed)."""
        k = self.per_lane
        t = np.zeros(max(self.num_blocks, 1) * 32 * k, np.float64)
        np.add.at(t, self.tile_of_nnz, np.asarray(values, np.float64))
        return t.reshape(-1, 32, k)[: self.num_blocks]

    def dense_tiles(self, tiles: np.ndarray) -> np.ndarray:
        """``tiles`` (fragment order, as `tiles`) as dense (blocks, window rows, 8 columns) arrays."""
        r, j = _fragment_rc(self.window, self.tf32)
        out = np.zeros((self.num_blocks, self.window, BLOCK_COLS), tiles.dtype)
        out[:, r, j] = tiles
        return out

    def summary(self) -> str:
        split = int((self.item_pslot >= 0).sum())
        return (
            f"{self.m} rows, nnz {self.nnz}, N {self.n}: row windows of {self.window}"
            + (" (swapped: C^T = B^T S^T)" if self.swapped else "")
            + f", {self.num_blocks} column blocks"
            f" (tiles {self.nnz / max(1, self.num_blocks * self.window * BLOCK_COLS):.0%} dense),"
            f" {self.num_items} items"
            f" ({split} writing partials), {self.reduce_rows.shape[0]} rows in the second pass"
            + (", rows reordered (row table)" if self.reordered else "")
        )


def _fragment_slot(r: np.ndarray, j: np.ndarray, window: int = WINDOW, tf32: bool = False) -> np.ndarray:
    """The slot ``lane * per_lane + element`` of tile value (row ``r``, condensed column ``j``): in
    the m16n8k8 A fragment (16-row windows: A[r][j], 4 per lane), or in its B fragment (8-row
    windows: B[k = j][n = r], 2 per lane). f16/bf16 registers hold 2 neighbouring k (``2t``,
    ``2t + 1``); tf32 ones hold one, k = ``t`` and ``t + 4``."""
    if tf32:
        t, hi_k = j % 4, j // 4
        if window == SWAP_WINDOW:
            return (4 * r + t) * 2 + hi_k
        return (4 * (r % 8) + t) * 4 + (r // 8) + 2 * hi_k
    t, odd = j // 2, j % 2
    if window == SWAP_WINDOW:
        return (4 * r + t) * 2 + odd
    g, hi = r % 8, r // 8
    return (4 * g + t) * 4 + 2 * hi + odd


def _fragment_rc(window: int, tf32: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every (lane, element) slot of a tile: arrays of shape (32, per_lane)."""
    lane = np.arange(32)[:, None]
    per = 2 if window == SWAP_WINDOW else 4
    e = np.arange(per)[None, :]
    if tf32:
        if window == SWAP_WINDOW:
            return np.broadcast_to(lane // 4, (32, 2)), lane % 4 + 4 * e
        return lane // 4 + 8 * (e & 1), lane % 4 + 4 * (e >= 2)
    if window == SWAP_WINDOW:
        return np.broadcast_to(lane // 4, (32, 2)), 2 * (lane % 4) + e
    return lane // 4 + 8 * (e >= 2), 2 * (lane % 4) + (e & 1)


def make_window_plan(
    indptr: np.ndarray,
    indices: np.ndarray,
    n: int,
    target_nnz: int = TARGET_NNZ,
    row_order: np.ndarray | None = None,
    window: int = WINDOW,
    tf32: bool = False,
) -> WindowPlan:
    """The plan from a validated CSR pattern (``indptr`` length M+1, ``indices`` sorted per row);
    ``row_order``: window row ``p`` computes row ``row_order[p]`` (a permutation of 0..M-1, e.g.
    `minijit.sparse.reorder.RowOrder.perm`; None: the given order, no row table); ``window``: rows
    per window, 16 or 8 (the swapped layout, see the module docstring); ``tf32``: tiles in the
    tf32 fragment layout (the dtype="tf32" kernels)."""
    if isinstance(target_nnz, bool) or not isinstance(target_nnz, int) or target_nnz < 1:
        raise ValueError(f"target_nnz must be a positive int, got {target_nnz!r}")
    if window not in (WINDOW, SWAP_WINDOW):
        raise ValueError(f"window must be {WINDOW} or {SWAP_WINDOW}, got {window!r}")
    if row_order is not None:
        perm = np.asarray(row_order)
        m = np.asarray(indptr).shape[0] - 1
        if perm.shape != (m,) or not np.issubdtype(perm.dtype, np.integer):
            raise ValueError(f"row_order must be an integer array of M = {m} entries, got shape {perm.shape}")
        if m and (perm.min() < 0 or perm.max() >= m or np.bincount(perm, minlength=m).max() != 1):
            raise ValueError("row_order must be a permutation of 0..M-1")
        p_indptr, p_indices, nnz_of = permute_csr(indptr, indices, perm)
        wp = make_window_plan(p_indptr, p_indices, n, target_nnz, window=window, tf32=tf32)
        tile_of_nnz = np.empty_like(wp.tile_of_nnz)
        tile_of_nnz[nnz_of] = wp.tile_of_nnz
        rows = perm.astype(np.int32)
        return replace(wp, tile_of_nnz=tile_of_nnz, reduce_rows=rows[wp.reduce_rows], rows=rows)
    indptr = np.asarray(indptr, np.int64)
    indices = np.asarray(indices, np.int64)
    m = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
    win = rows // window
    n_win = -(-m // window)
    # condensed column of every non-zero: its rank among the distinct columns of its window
    key = win * (int(indices.max(initial=0)) + 1) + indices
    uniq, inv = np.unique(key, return_inverse=True)
    u_win = uniq // (int(indices.max(initial=0)) + 1)
    u_col = uniq - u_win * (int(indices.max(initial=0)) + 1)
    first_u = np.searchsorted(u_win, np.arange(n_win + 1))  # distinct columns of window w: [first_u[w], first_u[w+1])
    n_u = np.diff(first_u)
    blocks_w = -(-n_u // BLOCK_COLS)
    first_blk = np.concatenate([[0], np.cumsum(blocks_w)])
    rank = inv - first_u[win]
    blk = first_blk[win] + rank // BLOCK_COLS
    block_cols = np.full((int(first_blk[-1]), BLOCK_COLS), -1, np.int64)
    u_rank = np.arange(uniq.shape[0]) - first_u[u_win]
    block_cols[first_blk[u_win] + u_rank // BLOCK_COLS, u_rank % BLOCK_COLS] = u_col
    tile_of_nnz = blk * (window * BLOCK_COLS) + _fragment_slot(rows % window, rank % BLOCK_COLS, window, tf32)

    # work items: runs of blocks of about target_nnz non-zeros
    nnz_blk = np.bincount(blk, minlength=int(first_blk[-1]))
    row0, b0s, b1s, pslot, pstride = [], [], [], [], []
    red_rows, red_begin, red_count = [], [], []
    slots = 0
    for w in range(n_win):
        lo, hi = int(first_blk[w]), int(first_blk[w + 1])
        r0 = w * window
        if lo == hi:
            red_rows += list(range(r0, min(r0 + window, m)))
            red_begin += [0] * (min(r0 + window, m) - r0)
            red_count += [0] * (min(r0 + window, m) - r0)
            continue
        csum = np.cumsum(nnz_blk[lo:hi])
        parts = max(1, int(round(csum[-1] / target_nnz)))
        cuts = np.searchsorted(csum, csum[-1] * np.arange(1, parts) / parts) + 1
        bounds = [lo, *sorted({lo + int(c) for c in cuts if 0 < c < hi - lo}), hi]
        s = len(bounds) - 1
        for i in range(s):
            row0.append(r0)
            b0s.append(bounds[i])
            b1s.append(bounds[i + 1])
            pslot.append(-1 if s == 1 else slots + i)
            pstride.append(s)
        if s > 1:
            for r in range(min(window, m - r0)):
                red_rows.append(r0 + r)
                red_begin.append(slots + r * s)
                red_count.append(s)
            slots += window * s

    def i32(x) -> np.ndarray:
        return np.asarray(x, dtype=np.int64).astype(np.int32)

    return WindowPlan(
        m=m,
        n=int(n),
        nnz=nnz,
        block_cols=i32(block_cols).reshape(-1, BLOCK_COLS),
        tile_of_nnz=np.asarray(tile_of_nnz, np.int64),
        item_row0=i32(row0),
        item_blk_begin=i32(b0s),
        item_blk_end=i32(b1s),
        item_pslot=i32(pslot),
        item_pstride=i32(pstride),
        num_partials=slots,
        reduce_rows=i32(red_rows),
        reduce_slot_begin=i32(red_begin),
        reduce_slot_count=i32(red_count),
        window=window,
        tf32=bool(tf32),
    )


def tca_mmas(plan: Plan, indptr: np.ndarray) -> int:
    """mma instructions seed 003's kernel issues per 64 output columns: 4 per busy warp and chunk."""
    nnz_row = np.diff(np.asarray(indptr, np.int64))
    rid = plan.row_id_for_each_warp.astype(np.int64)
    busy = rid >= 0
    nnz_w = np.where(busy, nnz_row[np.maximum(rid, 0)] if nnz_row.size else 0, 0)
    seg = CHUNK * plan.seg_chunks
    sb = (plan.warpid_within_row.astype(np.int64) >> 3) * seg
    chunks = np.where(busy, (np.minimum(np.maximum(nnz_w - sb, 0), seg) + CHUNK - 1) // CHUNK, 0)
    return 4 * int(chunks.sum())


def window_mmas(wp: WindowPlan) -> int:
    """mma instructions (all m16n8k8) the row-window kernel issues per 64 output columns: one per
    block and 8 columns, or per block and 16 columns when swapped."""
    return wp.num_blocks * (TILE_N // (16 if wp.swapped else 8))


def pick_window(wp: WindowPlan, reordered: WindowPlan | None, min_gain: float = MIN_REORDER_GAIN) -> WindowPlan:
    """``reordered`` when it issues fewer mma instructions than ``wp`` by at least the fraction
    ``min_gain`` (0..1), else ``wp``."""
    if not 0.0 <= min_gain < 1.0:
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    if reordered is None:
        return wp
    if (reordered.m, reordered.nnz) != (wp.m, wp.nnz):
        raise ValueError("the reordered plan is not of the same pattern")
    before, after = window_mmas(wp), window_mmas(reordered)
    return reordered if after < before and after <= (1.0 - min_gain) * before else wp


def choose_strategy(
    plan: Plan,
    indptr: np.ndarray,
    wp: WindowPlan,
    reordered: WindowPlan | None = None,
    min_gain: float = MIN_REORDER_GAIN,
    swapped: WindowPlan | None = None,
) -> str:
    """The strategy with the fewest mma instructions for this pattern: "window" (row windows: short
    rows that share columns, FEM blocks, very sparse rows), "window_reordered" (row windows on the
    rows of ``reordered``, when it saves at least ``min_gain`` of the window mmas, see
    `pick_window`), "window_swapped" (the 8-row windows of ``swapped``: scattered columns) or "tca"
    (seed 003: long scattered rows). The swapped plan must save at least ``MIN_SWAP_GAIN`` of the
    mmas of the others (seed 003 also multiplies 8 x 8 tiles of condensed columns, so on scattered
    rows the two counts are close and the kernel that was measured on a GPU keeps them); other
    ties go to tca."""
    if swapped is not None and (not swapped.swapped or (swapped.m, swapped.nnz) != (wp.m, wp.nnz)):
        raise ValueError("swapped must be an 8-row window plan of the same pattern")
    best = pick_window(wp, reordered, min_gain)
    pick = "window_reordered" if best is not wp else "window"
    tca = tca_mmas(plan, indptr)
    if swapped is not None and window_mmas(swapped) <= (1.0 - MIN_SWAP_GAIN) * min(window_mmas(best), tca):
        return "window_swapped"
    return "tca" if window_mmas(best) >= tca else pick


def model(wp: WindowPlan, values: np.ndarray, b: np.ndarray, quantize) -> np.ndarray:
    """C = S @ B (float32, M x N) as the row-window kernels compute it: A tiles and B rounded by
    ``quantize`` (a `Precision.quantize`), products summed in float64 per item, partial rows
    summed by the second pass."""
    m, n = wp.m, wp.n
    tiles = quantize(wp.tiles(values).astype(np.float32)) if wp.num_blocks else np.zeros((0, 32, wp.per_lane))
    a = wp.dense_tiles(tiles.astype(np.float64))
    bq = quantize(np.asarray(b, np.float32))
    cols = wp.block_cols.astype(np.int64)
    g = np.where((cols >= 0)[:, :, None], bq[np.maximum(cols, 0)] if bq.size else 0.0, 0.0)
    d = a @ g  # (blocks, window, N)
    c = np.zeros((m, n), np.float32)
    part = np.zeros((max(wp.num_partials, 1), n), np.float32)
    for r0, b0, b1, ps, st in zip(
        wp.item_row0, wp.item_blk_begin, wp.item_blk_end, wp.item_pslot, wp.item_pstride, strict=True
    ):
        acc = d[b0:b1].sum(axis=0).astype(np.float32)
        if ps < 0:
            rows = min(wp.window, m - r0)
            dest = np.arange(r0, r0 + rows) if wp.rows is None else wp.rows[r0 : r0 + rows]
            c[dest] = acc[:rows]
        else:
            part[ps + np.arange(wp.window) * st] = acc
    for row, b0, cnt in zip(wp.reduce_rows, wp.reduce_slot_begin, wp.reduce_slot_count, strict=True):
        c[row] = part[b0 : b0 + cnt].sum(axis=0) if cnt else 0.0
    return c
