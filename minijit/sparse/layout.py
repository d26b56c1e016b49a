"""TCA-SpMM index math, written once for both the PTX emitter and the numpy model.

Every formula takes an ``ops`` object first: `IntOps` evaluates it on Python
ints / numpy integer arrays (the model, vectorised over warps and lanes);
``tca.PtxOps`` emits the same operations as PTX instructions on ``.u32``
registers. So the kernel and the model cannot disagree on a mapping.

Matricization (docs/seeds/003_tca_spmm.txt section 4.1-4.2) for a warp whose row has ``q = 1 << lq``
chunks of 8 non-zeros per MMA (lq = 0..3 for <=8, <=16, <=32, >32 nnz):

* B operand (8x8, the compressed sparse row, column-wise):
  ``B[k][n] = s[8*(n % q) + k]`` (zero beyond the row's nnz);
* A operand (16x8, compressed dense columns, row-wise): row ``m`` holds chunk
  ``m % q`` of compressed column ``m // q``: ``A[m][k] = D[col[8*(m % q) + k], c0 + m // q]``;
  stored in shared memory as 128 contiguous f16 (``A[m][k]`` at ``8m + k``);
* result: ``O[c0 + j] = sum_{r<q} D[q*j + r][r]`` (a diagonal of each q x q
  block), so one MMA yields ``16 / q`` outputs.

The fragment layouts are those of ``mma.m16n8k8`` (`ptx.mma`): f16 and bf16
share one (two elements per register, `a_frag_index`, `b_frag_index`); tf32
has its own (one element per register, `a_frag_index_tf32`,
`b_frag_index_tf32`). Element ``i`` of the matricized tiles is the same for
all three, so only the fragment reads differ.

Per 64-column tile a warp owns ``64 >> lq`` columns = 4 MMAs (the row's q
warps share the tile), so every warp issues 4 MMAs per tile and chunk.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "IntOps",
    "TILE_N",
    "MMAS_PER_TILE",
    "CHUNK",
    "WARPS_PER_BLOCK",
    "lq_of_nnz",
    "seg_begin",
    "warp_col0",
    "rhs_vector",
    "rhs_slot",
    "a_frag_index",
    "b_frag_index",
    "a_frag_index_tf32",
    "b_frag_index_tf32",
    "diag_source",
    "out_col",
    "is_writer",
    "mma_col0",
]

TILE_N = 64  # output columns per warp-group tile
MMAS_PER_TILE = 4  # MMAs per warp per tile and chunk
CHUNK = 64  # non-zeros per m16n8k8 MMA (8x8 B operand)
WARPS_PER_BLOCK = 8
RHS_HALVES = MMAS_PER_TILE * 128  # f16 per warp in the compressed RHS buffer


class IntOps:
    """The formulas' operations on Python ints or numpy integer arrays."""

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def mul(a, b):
        return a * b

    @staticmethod
    def shl(a, b):
        return a << b

    @staticmethod
    def shr(a, b):
        return a >> b

    @staticmethod
    def and_(a, b):
        return a & b

    @staticmethod
    def gt(a, b):
        """1 where a > b else 0."""
        r = np.greater(a, b)
        return r.astype(np.int64) if isinstance(r, np.ndarray) else int(r)


def lq_of_nnz(o, nnz):
    """log2 of the chunks per MMA (= warps per row for <= 64 nnz): 0, 1, 2, 3 for <=8, <=16, <=32, >32."""
    return o.add(o.add(o.gt(nnz, 8), o.gt(nnz, 16)), o.gt(nnz, 32))


def seg_begin(o, wr, seg_chunks: int):
    """First non-zero (within the row) of the segment of warp ``wr``: blocks of 8 warps share a segment."""
    return o.mul(o.shr(wr, 3), CHUNK * seg_chunks)


def warp_col0(o, wr, lq):
    """First column, within a 64-column tile, owned by warp ``wr`` of its row (``64 >> lq`` columns)."""
    return o.shl(o.and_(wr, 7), o.sub(6, lq))


def rhs_vector(o, v, lq):
    """Vector ``v`` (0..63, 8 f16 each) of a warp's RHS buffer -> (chunk position p, column block cb)."""
    s = o.sub(3, lq)
    return o.shr(v, s), o.and_(v, o.sub(o.shl(1, s), 1))


def rhs_slot(o, c, p, lq):
    """Shared f16 index (within the warp's buffer) of warp column ``c`` at chunk position ``p``."""
    mt = o.shr(c, o.sub(4, lq))
    mcol = o.and_(c, o.sub(o.shr(16, lq), 1))
    m = o.add(o.shl(mcol, lq), o.shr(p, 3))
    return o.add(o.add(o.shl(mt, 7), o.shl(m, 3)), o.and_(p, 7))


def mma_col0(o, mt, lq):
    """First warp column of MMA ``mt`` (each covers ``16 >> lq`` columns)."""
    return o.shl(mt, o.sub(4, lq))


def a_frag_index(o, g, t, half: int):
    """f16 index of A fragment register ``half`` (a0: rows g, a1: rows g+8), cols 2t, 2t+1, in one 8x16 tile."""
    return o.add(o.shl(o.add(g, 8 * half), 3), o.shl(t, 1))


def b_frag_index(o, g, t, lq):
    """f16 index (within the chunk's 64) of B fragment register b0 (rows 2t, 2t+1 of column g)."""
    return o.add(o.shl(o.and_(g, o.sub(o.shl(1, lq), 1)), 3), o.shl(t, 1))


def a_frag_index_tf32(o, g, t, i: int):
    """Element index of tf32 A fragment register ``i`` (0..3): row ``g + 8*(i&1)``, col ``t + 4*(i>=2)``."""
    return o.add(o.shl(o.add(g, 8 * (i & 1)), 3), o.add(t, 4 * (i >= 2)))


def b_frag_index_tf32(o, g, t, lq, i: int):
    """Element index (within the chunk's 64) of tf32 B fragment register ``i`` (0, 1): row ``t + 4i`` of column g."""
    return o.add(o.shl(o.and_(g, o.sub(o.shl(1, lq), 1)), 3), o.add(t, 4 * i))


def diag_source(o, lane, g, lq):
    """Diagonal pick: (odd, src): take element ``2*half + odd`` and read it from lane ``src``."""
    r = o.and_(g, o.sub(o.shl(1, lq), 1))
    return o.and_(r, 1), o.add(o.and_(lane, 0x1C), o.shr(r, 1))


def out_col(o, g, lq, half: int):
    """Column within the MMA's ``16 >> lq`` of the reduced value of rows g (half 0) or g+8 (half 1)."""
    c = o.shr(g, lq)
    return c if half == 0 else o.add(c, o.shr(8, lq))


def is_writer(o, g, lq):
    """0 where this lane holds a reduced result (``g % q == 0``)."""
    return o.and_(g, o.sub(o.shl(1, lq), 1))
