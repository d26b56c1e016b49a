"""Row-window SpMM kernel (`minijit.sparse.window_plan`), emitted through ``ptx``.

``window_spmm(tiles, block_cols, B, C, P, item_row0, item_blk_begin, item_blk_end, item_pslot,
item_pstride, items, m[, rows])``: 128 threads (4 warps) per block, one work item per warp. For every 8
output columns the warp accumulates, over its item's column blocks, one ``mma.m16n8k8`` (f16,
bf16 or tf32 inputs, fp32 accumulators): A is the block's 16 x 8 tile (one 64-bit load per lane,
128-bit for tf32; the tiles are stored in fragment order), B the 8 rows of dense B named by the
block's condensed columns (two 16-bit or fp32 loads per lane; -1 columns and columns >= N read as
0; tf32 rounds B with cvt.rna.tf32.f32, the tiles are rounded on the host). The 16 x 8 result
goes to C (rows >= M not stored) or, for split windows, to the item's partial rows of P; the
second pass is ``tca_reduce`` of `minijit.sparse.tca`.

With a row table (``build(..., row_table=True)``: a reordered plan, `minijit.sparse.reorder`)
window row ``p`` (``item_row0 + r``) is stored to C row ``rows[p]`` (int32, length M): C comes
out in the caller's row order with no extra pass; P rows are unaffected.

Swapped (``build(..., window=8)``, FlashSparse's swap-and-transpose; same parameters): windows of
8 rows, and for every 16 output columns one ``mma.m16n8k8`` per column block computes C^T = B^T
S^T: A is 16 output columns of the 8 dense B rows the block names, transposed (four loads per
lane: columns ``col0 + g`` and ``col0 + g + 8`` of rows ``cols[2t]`` and ``cols[2t + 1]``; tf32:
of rows ``cols[t]`` and ``cols[t + 4]``), B the block's 8 x 8 tile (one 32-bit load per lane,
64-bit for tf32, fragment order); lane (g, t)'s results are window rows 2t and 2t + 1 at those
two columns.
"""

from __future__ import annotations

from minijit.sparse.precision import precision
from minijit.sparse.tca import _gptr, _pand, _reduce_kernel
from ptx import Module, addr, sreg

__all__ = ["WARPS", "build"]

WARPS = 4  # work items (warps) per block


def _kernel(m: Module, n: int, mma: str, row_table: bool, window: int) -> None:
    e = _WindowEmitter(m, n, mma, row_table, window)
    e.work_item()  # this warp's work item (a window and its block range); warps past the end exit
    e.output_rows()  # the lane's two window rows: C (or P) row pointers and bounds
    e.tile_loop()  # per output tile: the block main loop, then the stores
    e.k.exit()


class _WindowEmitter:
    """The stages of ``window_spmm``, emitted in order; registers shared between stages are attributes."""

    def __init__(self, m: Module, n: int, mma: str, row_table: bool, window: int) -> None:
        self.n, self.mma = n, mma
        self.tf32, self.swapped = mma == "tf32", window == 8
        self.es = 4 if self.tf32 else 2  # bytes per B element and tile value
        k = self.k = m.kernel("window_spmm", reqntid=32 * WARPS)
        names = ("tiles", "block_cols", "B", "C", "P", "row0", "blk_begin", "blk_end", "pslot", "pstride")
        ptrs = [_gptr(k, k.param("u64", nm)) for nm in names]
        self.g_tiles, self.g_cols, self.g_b, self.g_c, self.g_p = ptrs[:5]
        self.g_row0, self.g_b0, self.g_b1, self.g_ps, self.g_pst = ptrs[5:]
        self.items, self.m_rows = k.reg("u32"), k.reg("u32")
        k.ld_param(self.items, k.param("u32", "items"))
        k.ld_param(self.m_rows, k.param("u32", "m"))
        self.g_rows = _gptr(k, k.param("u64", "rows")) if row_table else None

    def work_item(self) -> None:
        """Lane coordinates (g = lane / 4, t = lane % 4) and the warp's item; warps past ``items`` exit."""
        k = self.k
        tid, lane, g, t, t2, item = k.regs("u32", 6)
        k.mov(tid, sreg.tid.x)
        k.and_(lane, tid, 31)
        k.shr(g, lane, 2)
        k.and_(t, lane, 3)
        k.shl(t2, t, 1)
        blk = k.reg("u32")
        k.mov(blk, sreg.ctaid.x)
        k.shr(item, tid, 5)
        k.mad(item, blk, WARPS, item, mode="lo", type="u32")
        done = k.reg("pred")
        k.setp("ge", done, item, self.items, type="u32")
        k.exit(pred=done)
        self.lane, self.g, self.t, self.t2, self.item = lane, g, t, t2, item

    def load(self, base, type: str = "u32"):
        """base[item] (a per-item table entry)."""
        k = self.k
        a, d = k.reg("u64"), k.reg(type)
        k.mad(a, self.item, 4, base, mode="wide", type="u32")
        k.ld("global", d, addr(a), type=type)
        return d

    def output_rows(self) -> None:
        """The lane's two window rows: g and g + 8 (c0, c1 / c2, c3); swapped: 2t and 2t + 1 (d0, d2 / d1, d3).
        Each gets an output row pointer (C, or the item's partial rows in P) and a bound."""
        k, n, load = self.k, self.n, self.load
        row0, self.b0, self.b1 = load(self.g_row0), load(self.g_b0), load(self.g_b1)
        ps, pst = load(self.g_ps, "s32"), load(self.g_pst)
        to_p = k.reg("pred")
        k.setp("ge", to_p, ps, 0)
        self.ok_rows, self.out_base = [], []
        for h in range(2):
            r = k.reg("u32")
            k.add(r, self.t2 if self.swapped else self.g, h if self.swapped else 8 * h, type="u32")
            crow, prow = k.reg("u32"), k.reg("u32")
            k.add(crow, row0, r, type="u32")
            k.mad(prow, r, pst, ps, mode="lo", type="u32")
            okr = k.reg("pred")
            k.setp("lt", okr, crow, self.m_rows, type="u32")
            if self.g_rows is not None:  # C row of window row crow: rows[crow]
                ra = k.reg("u64")
                k.mad(ra, crow, 4, self.g_rows, mode="wide", type="u32")
                k.ld("global", crow, addr(ra), nc=True, pred=okr)
            ok = k.reg("pred")
            k.or_(ok, okr, to_p)
            ca, pa, oa = k.reg("u64"), k.reg("u64"), k.reg("u64")
            k.mad(ca, crow, 4 * n, self.g_c, mode="wide", type="u32")
            k.mad(pa, prow, 4 * n, self.g_p, mode="wide", type="u32")
            k.selp(oa, pa, ca, to_p)
            self.ok_rows.append(ok)
            self.out_base.append(oa)

    def tile_loop(self) -> None:
        """Output tiles of 8 columns (swapped: 16): zeroed accumulators, the block loop, the stores."""
        k, n = self.k, self.n
        step = 16 if self.swapped else 8
        self.col0 = col0 = k.reg("u32")
        k.mov(col0, 0)
        l_tile = k.label("ntile")
        k.place(l_tile)
        acc = k.regs("f32", 4)
        for r in acc:
            k.mov(r, 0.0)
        self.ncol, self.in_n = [], []  # dense B columns this lane gathers: col0 + g (swapped: also col0 + g + 8)
        for h in range(2 if self.swapped else 1):
            c_ = k.reg("u32")
            k.add(c_, col0, self.g, type="u32")
            if h:
                k.add(c_, c_, 8, type="u32")
            p_ = k.reg("pred")
            k.setp("lt", p_, c_, n, type="u32")
            self.ncol.append(c_)
            self.in_n.append(p_)
        self.block_loop(acc)
        self.stores(acc)
        k.add(col0, col0, step, type="u32")
        more_n = k.reg("pred")
        k.setp("lt", more_n, col0, n, type="u32")
        k.bra(l_tile, pred=more_n)

    def block_loop(self, acc) -> None:
        """The main loop over the item's blocks: load the block's tile, gather B, one mma each."""
        k, es, tf32 = self.k, self.es, self.tf32
        cb = k.reg("u32")
        k.mov(cb, self.b0)
        l_blk, l_end = k.label("block"), k.label("blocks_done")
        empty = k.reg("pred")
        k.setp("ge", empty, cb, self.b1, type="u32")
        k.bra(l_end, pred=empty)
        k.place(l_blk)
        # the block's tile in fragment order: the mma's A (4 values per lane), swapped its B (2)
        per_lane = 2 if self.swapped else 4
        ta, tl = k.reg("u64"), k.reg("u32")
        k.mad(tl, cb, 32, self.lane, mode="lo", type="u32")
        k.mad(ta, tl, per_lane * es, self.g_tiles, mode="wide", type="u32")
        tile = k.regs("b32", per_lane if tf32 else per_lane // 2)
        k.ld("global", tile, addr(ta), nc=True)
        self.rows_b = self.b_rows(cb)
        gather, pack = self.gather, self.pack
        if self.swapped:  # A = B^T: a[i] = B^T[g + 8(i&1)][k0 + (i>=2)]; f16: a[h] = B^T[g + 8h][2t, 2t + 1]
            if tf32:
                a = [gather(i // 2, i & 1) for i in range(4)]
            else:
                a = [r for h in range(2) for r in pack(gather(e, h) for e in range(2))]
            k.mma("m16n8k8", self.mma, acc, a, tile, acc)
        else:  # B: b = B[k0 + e][col0 + g]
            k.mma("m16n8k8", self.mma, acc, tile, pack(gather(e, 0) for e in range(2)), acc)
        k.add(cb, cb, 1, type="u32")
        more = k.reg("pred")
        k.setp("lt", more, cb, self.b1, type="u32")
        k.bra(l_blk, pred=more)
        k.place(l_end)

    def b_rows(self, cb) -> list:
        """Dense B rows named by block ``cb``'s columns k0 = 2t, 2t + 1 (tf32: t, t + 4); -1 reads as 0.
        Returns (byte address of the row, whether it is a real column) for each."""
        k, tf32 = self.k, self.tf32
        ci = k.reg("u32")  # block_cols + (cb * 8 + k0) * 4
        k.mad(ci, cb, 8, self.t if tf32 else self.t2, mode="lo", type="u32")
        cidx = k.reg("u64")
        k.mad(cidx, ci, 4, self.g_cols, mode="wide", type="u32")
        rows_b = []
        for e in range(2):
            c = k.reg("s32")
            k.ld("global", c, addr(cidx, 4 * (4 * e if tf32 else e)), nc=True)
            valid = k.reg("pred")
            k.setp("ge", valid, c, 0)
            ba = k.reg("u64")
            k.mul(ba, c, self.es * self.n, mode="wide", type="u32")
            k.add(ba, ba, self.g_b, type="u64")
            rows_b.append((ba, valid))
        return rows_b

    def gather(self, e: int, h: int):
        """B[cols[k0 + e]][ncol[h]] as a tf32 register, or a 16-bit value (0 outside)."""
        k, tf32 = self.k, self.tf32
        ba, valid = self.rows_b[e]
        ea, v = k.reg("u64"), k.reg("f32" if tf32 else "b16")
        k.mad(ea, self.ncol[h], self.es, ba, mode="wide", type="u32")
        k.mov(v, 0.0 if tf32 else 0)
        k.ld("global", v, addr(ea), nc=True, pred=_pand(k, valid, self.in_n[h]))
        if not tf32:
            return v
        d = k.reg("b32")
        k.cvt_tf32(d, v)  # fp32 B rounded to tf32 (cvt.rna), one element per register
        return d

    def pack(self, vals):
        """Fragment registers of gathered values: as they are (tf32), or two 16-bit values per b32."""
        if self.tf32:
            return list(vals)
        r = self.k.reg("b32")
        self.k.mov(r, list(vals))
        return [r]

    def stores(self, acc) -> None:
        """acc[2h + e] -> window row h, column col0 + 2t + e; swapped: row e, column ncol[h]."""
        k, n = self.k, self.n
        for h in range(2):
            for e in range(2):
                if self.swapped:
                    row, col, okc = e, self.ncol[h], self.in_n[h]
                else:
                    row, col, okc = h, k.reg("u32"), k.reg("pred")
                    k.add(col, self.col0, e, type="u32")
                    k.add(col, col, self.t2, type="u32")
                    k.setp("lt", okc, col, n, type="u32")
                sa = k.reg("u64")
                k.mad(sa, col, 4, self.out_base[row], mode="wide", type="u32")
                k.st("global", addr(sa), acc[2 * h + e], pred=_pand(k, okc, self.ok_rows[row]))


def build(n: int, dtype: str = "fp16", target: str | None = None, row_table: bool = False, window: int = 16) -> Module:
    """The module (``window_spmm`` and ``tca_reduce``) for N columns; ``dtype`` "fp16", "bf16" or
    "tf32" (fp32 tiles, rounded to tf32 on the host, and fp32 B, rounded with cvt.rna.tf32.f32 in the
    kernel; one element per fragment register);
    ``row_table``: ``window_spmm`` takes a last parameter ``rows`` (window row -> C row, int32);
    ``window``: 16 (tiles as the mma's A) or 8 (swapped, tiles as its B; see the module docstring)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= (1 << 24):
        raise ValueError(f"n must be an int in 1..{1 << 24}, got {n!r}")
    prec = precision(dtype)
    m = Module(target=target) if target else Module()
    if not isinstance(row_table, bool):
        raise TypeError(f"row_table must be a bool, got {row_table!r}")
    if window not in (8, 16) or isinstance(window, bool):
        raise ValueError(f"window must be 16 or 8 (swapped), got {window!r}")
    _kernel(m, n, prec.mma, row_table, window)
    _reduce_kernel(m, n)
    return m
