"""Row reordering for the row-window strategy: rows that share columns into the same window.

The row-window kernel (`minijit.sparse.window_plan`) forms one dense 16 x 8 A tile of an
``mma.m16n8k8`` for every 8 distinct columns of a window of 16 rows, so its mma count is
``sum over windows of ceil(distinct columns / 8)`` (times N / 8). A row order that puts rows
with similar column sets in the same window has fewer distinct columns per window: denser
tiles, fewer mma instructions (Acc-SpMM, FlashSparse: row-window reordering).

`reorder_rows` tries a few cheap orders, each a sort of the rows by a key from their column
sets (O(nnz + M log M) for the key, O(nnz log nnz) to count the tiles), and keeps the one with
the fewest tiles:

- ``"compact"``: the given order with empty rows moved to the end (empty rows cost nothing,
  but scattered among the others they spread them over more windows);
- ``"first_column"``: by (first column, last column): recovers bands and blocks whose rows
  start in the same column;
- ``"minhash"``: by two MinHash values of the column set (random column permutations, fixed
  seed): rows with Jaccard similarity J share the first value with probability J;
- ``"minhash_2hop"``: by the smallest MinHash value among the rows that share a column with
  the row (one step of label propagation), then by the row's own MinHash: rows of one block
  whose column sets overlap but differ get the same key.

Empty rows always come last, ties keep the given order (the sorts are stable). The order is a
permutation ``perm`` (int64, length M): window position ``p`` computes original row
``perm[p]``; the plan stores it as its row table, so C is written in the caller's row order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minijit.sparse.layout import TILE_N

__all__ = ["METHODS", "RowOrder", "count_tiles", "permute_csr", "reorder_rows"]

WINDOW = 16  # rows per window (the mma's M); equal to window_plan.WINDOW
BLOCK_COLS = 8  # condensed columns per tile (the mma's K)
METHODS = ("compact", "first_column", "minhash", "minhash_2hop")
_SEED = 0x5EED


@dataclass(frozen=True)
class RowOrder:
    """A row permutation for the row-window plan and its 16 x 8 tile counts before and after.

    ``perm``: int64 (M,), window position ``p`` holds original row ``perm[p]`` (a permutation of
    0..M-1; empty rows last). ``tiles_before`` / ``tiles_after``: A tiles (16 rows x 8 condensed
    columns) of the given order and of ``perm``. ``nnz``: entries of the pattern.
    ``method``: the key that won (one of `METHODS`)."""

    perm: np.ndarray
    method: str
    nnz: int
    tiles_before: int
    tiles_after: int

    def __post_init__(self) -> None:
        p = self.perm
        if not isinstance(p, np.ndarray) or p.ndim != 1 or p.dtype != np.int64:
            raise TypeError("perm must be a 1-D int64 numpy array")
        m = p.shape[0]
        if m and (p.min() < 0 or p.max() >= m or np.bincount(p, minlength=m).max() != 1):
            raise ValueError("perm must be a permutation of 0..M-1")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("nnz", "tiles_before", "tiles_after"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative int, got {v!r}")

    @property
    def m(self) -> int:
        return int(self.perm.shape[0])

    @property
    def inverse(self) -> np.ndarray:
        """int64 (M,): window position of each original row."""
        inv = np.empty_like(self.perm)
        inv[self.perm] = np.arange(self.m, dtype=np.int64)
        return inv

    @property
    def mmas_before(self) -> int:
        """mma instructions per 64 output columns in the given order (as `window_plan.window_mmas`)."""
        return self.tiles_before * (TILE_N // 8)

    @property
    def mmas_after(self) -> int:
        """mma instructions per 64 output columns in the order ``perm``."""
        return self.tiles_after * (TILE_N // 8)

    @property
    def density_before(self) -> float:
        """Non-zeros per tile slot (16 * 8 per tile), 0..1, in the given order."""
        return self.nnz / (self.tiles_before * WINDOW * BLOCK_COLS) if self.tiles_before else 0.0

    @property
    def density_after(self) -> float:
        return self.nnz / (self.tiles_after * WINDOW * BLOCK_COLS) if self.tiles_after else 0.0

    @property
    def gain(self) -> float:
        """Fraction of the mma instructions the order saves: 1 - after / before (0 without tiles)."""
        return 1.0 - self.tiles_after / self.tiles_before if self.tiles_before else 0.0

    def summary(self) -> str:
        return (
            f"rows reordered by {self.method}: {self.tiles_before} -> {self.tiles_after} tiles"
            f" ({self.density_before:.0%} -> {self.density_after:.0%} dense, mma count -{self.gain:.0%})"
        )


def _check_pattern(indptr: object, indices: object) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    if indptr.ndim != 1 or indptr.shape[0] < 1 or not np.issubdtype(indptr.dtype, np.integer):
        raise ValueError("indptr must be a 1-D integer array of length M + 1")
    if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
        raise ValueError("indices must be a 1-D integer array")
    indptr = indptr.astype(np.int64)
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.shape[0]:
        raise ValueError("indptr must start at 0, not decrease, and end at len(indices)")
    indices = indices.astype(np.int64)
    if indices.size and indices.min() < 0:
        raise ValueError("indices must be non-negative")
    return indptr, indices


def count_tiles(indptr: object, indices: object, perm: np.ndarray | None = None) -> int:
    """16 x 8 A tiles of the row-window plan of a CSR pattern (``indptr`` length M+1, ``indices``
    the columns) with the rows in the order ``perm`` (window position -> row; None: as given):
    ``sum over windows of ceil(distinct columns / 8)``. O(nnz log nnz)."""
    indptr, indices = _check_pattern(indptr, indices)
    m = indptr.shape[0] - 1
    if indices.size == 0:
        return 0
    pos = np.arange(m, dtype=np.int64)
    if perm is not None:
        perm = np.asarray(perm, np.int64)
        if perm.shape != (m,):
            raise ValueError(f"perm must have M = {m} entries, got shape {perm.shape}")
        pos[perm] = np.arange(m, dtype=np.int64)
    win = pos[np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))] // WINDOW
    k = int(indices.max()) + 1
    key = np.sort(win * k + indices)  # (np.sort + a mask: several times faster than np.unique)
    first = np.ones(key.shape[0], bool)
    first[1:] = key[1:] != key[:-1]
    per_win = np.bincount(key[first] // k)
    return int((-(-per_win // BLOCK_COLS)).sum())


def _row_min(values: np.ndarray, indptr: np.ndarray, fill: int) -> np.ndarray:
    """Per row, the minimum of ``values`` over its non-zeros (``fill`` for empty rows)."""
    m = indptr.shape[0] - 1
    out = np.full(m, fill, np.int64)
    busy = np.diff(indptr) > 0
    if busy.any():
        out[busy] = np.minimum.reduceat(values, indptr[:-1][busy])
    return out


def _keys(method: str, indptr: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
    """Sort keys, most significant first (np.lexsort takes them least significant first)."""
    m = indptr.shape[0] - 1
    lengths = np.diff(indptr)
    empty = (lengths == 0).astype(np.int64)
    k = int(indices.max(initial=0)) + 1
    if method == "compact" or indices.size == 0:
        return [empty]
    if method == "first_column":
        first = np.where(lengths > 0, indices[np.minimum(indptr[:-1], indices.size - 1)], k)
        last = np.where(lengths > 0, indices[np.maximum(indptr[1:] - 1, 0)], k)
        return [empty, first, last]
    rng = np.random.default_rng(_SEED)
    h1, h2 = (rng.permutation(k).astype(np.int64) for _ in range(2))
    mh1 = _row_min(h1[indices], indptr, k)
    mh2 = _row_min(h2[indices], indptr, k)
    if method == "minhash":
        return [empty, mh1, mh2]
    # minhash_2hop: column label = min over its rows of mh1; row label = min over its columns
    rows = np.repeat(np.arange(m, dtype=np.int64), lengths)
    col_label = np.full(k, k, np.int64)
    np.minimum.at(col_label, indices, mh1[rows])
    label = _row_min(col_label[indices], indptr, k)
    return [empty, label, mh1, mh2]


def reorder_rows(indptr: object, indices: object, methods: tuple[str, ...] = METHODS) -> RowOrder:
    """The row order with the fewest 16 x 8 tiles among ``methods`` (see the module docstring),
    for a CSR pattern (``indptr`` length M+1, ``indices`` the columns of each row). Ties go to
    the earlier method; the given order itself is the baseline (``tiles_before``)."""
    indptr, indices = _check_pattern(indptr, indices)
    if not methods or any(meth not in METHODS for meth in methods):
        raise ValueError(f"methods must be a non-empty tuple of {METHODS}, got {methods!r}")
    m = indptr.shape[0] - 1
    before = count_tiles(indptr, indices)
    best = None
    for meth in methods:
        keys = _keys(meth, indptr, indices)
        perm = np.lexsort([np.arange(m, dtype=np.int64), *reversed(keys)]).astype(np.int64)
        tiles = count_tiles(indptr, indices, perm)
        if best is None or tiles < best[0]:
            best = (tiles, meth, perm)
    tiles, meth, perm = best
    return RowOrder(perm=perm, method=meth, nnz=int(indptr[-1]), tiles_before=before, tiles_after=tiles)


def permute_csr(indptr: object, indices: object, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pattern with its rows in the order ``perm``: (indptr, indices, nnz_of) with
    ``nnz_of[q]`` the original position of the permuted non-zero ``q`` (values: ``data[nnz_of]``)."""
    indptr, indices = _check_pattern(indptr, indices)
    perm = np.asarray(perm, np.int64)
    lengths = np.diff(indptr)[perm]
    new_ptr = np.zeros(perm.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=new_ptr[1:])
    starts = np.repeat(indptr[:-1][perm] - new_ptr[:-1], lengths)
    nnz_of = np.arange(int(new_ptr[-1]), dtype=np.int64) + starts
    return new_ptr, indices[nnz_of], nnz_of
