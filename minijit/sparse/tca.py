"""TCA-SpMM PTX kernels (seed 003 Algorithms 2-4), emitted through ``ptx``.

``build(n, seg_chunks)`` returns a `Module` with two kernels, specialised for
N output columns (B is K x N row-major f16, C is M x N row-major f32):

``tca_spmm(indptr, indices, data, B, C, P, row_id_for_each_warp,
num_warps_per_row, warpid_within_row, partial_slot_for_each_warp)`` —
256 threads (8 warps) per block, one block per 8 plan warps (Algorithm 2):

1. scratch pad: the block's threads copy its sparse-row values (f16) and
   column indices into shared memory, zero / -1 padded to whole chunks —
   ``multirow_per_block`` (Algorithm 4): 8 entries per warp, each row's q
   warps hold its 8q entries; ``multiblock_per_row`` (Algorithm 3): the
   block's segment of ``64*seg_chunks`` entries of one long row;
2. per warp, per 64-column tile, per 64-nnz chunk: the warp gathers its
   compressed RHS buffer (4 A tiles, 128-bit ``ld.global.nc`` of 8 f16 from
   a B row when N % 8 == 0, predicated scalar loads otherwise) into shared
   memory, transposed into the matricized layout; 4 ``mma.sync.m16n8k8``
   f16 x f16 + f32 with the sparse row as the (tile-invariant) B operand;
3. diagonal extraction: ``selp`` + ``shfl.idx`` pick each row's diagonal
   element, ``shfl.bfly`` (offsets 4, 8, 16, predicated by q) sums the q
   rows of a group; lanes with ``g % q == 0`` store predicated on N.

``tca_reduce(C, P, rows, slot_begin, slot_count)``: grid (items, ceil(N/256)),
``C[row] = sum of P[slot_begin .. +count]`` (count 0 zero-fills an empty row).
The builder has no ``atom``, so rows split over several blocks use this
second pass instead of atomicAdd.

All index math comes from `minijit.sparse.layout`, evaluated here with
`PtxOps` (instructions) and in `minijit.sparse.model` with ``IntOps``.
No output buffer in shared memory: results are stored straight from the
reducing lanes.
"""

from __future__ import annotations

from minijit.sparse import layout as L
from minijit.sparse.precision import Precision, precision
from ptx import Module, addr, sreg

__all__ = ["PtxOps", "build", "BLOCK_THREADS", "REDUCE_THREADS"]

BLOCK_THREADS = 32 * L.WARPS_PER_BLOCK
REDUCE_THREADS = 256


class PtxOps:
    """`layout` operations as PTX on ``.u32`` registers (Python ints fold to constants)."""

    def __init__(self, k):
        self.k = k

    def _bin(self, name: str, a, b, fold):
        if isinstance(a, int) and isinstance(b, int):
            return fold(a, b)
        d = self.k.reg("u32")
        if name == "mul":
            self.k.mul(d, a, b, mode="lo", type="u32")
        elif name in ("add", "sub"):
            getattr(self.k, name)(d, a, b, type="u32")
        elif name == "shr":
            self.k.shr(d, a, b, type="u32")
        else:
            getattr(self.k, name)(d, a, b)
        return d

    def add(self, a, b):
        return self._bin("add", a, b, lambda x, y: x + y)

    def sub(self, a, b):
        return self._bin("sub", a, b, lambda x, y: x - y)

    def mul(self, a, b):
        return self._bin("mul", a, b, lambda x, y: x * y)

    def shl(self, a, b):
        return self._bin("shl", a, b, lambda x, y: x << y)

    def shr(self, a, b):
        return self._bin("shr", a, b, lambda x, y: x >> y)

    def and_(self, a, b):
        return self._bin("and_", a, b, lambda x, y: x & y)

    def gt(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return int(a > b)
        p, d = self.k.reg("pred"), self.k.reg("u32")
        self.k.setp("gt", p, a, b, type="u32")
        self.k.selp(d, 1, 0, p)
        return d


def _gptr(k, param):
    r, g = k.reg("u64"), k.reg("u64")
    k.ld_param(r, param)
    k.cvta(g, r)
    return g


def _load_u32(k, base, index, space="global", type="u32"):
    """``ld.global.u32 d, [base + 4*index]`` (index: u32 register)."""
    a = k.reg("u64")
    k.mad(a, index, 4, base, mode="wide", type="u32")
    d = k.reg(type)
    k.ld(space, d, addr(a), type=type)
    return d


def _pand(k, *ps):
    out = ps[0]
    for p in ps[1:]:
        q = k.reg("pred")
        k.and_(q, out, p)
        out = q
    return out


def _main_kernel(m: Module, n: int, seg_chunks: int, prec: Precision):
    e = _TcaEmitter(m, n, seg_chunks, prec)
    e.scratch_pad()  # the block's nonzeros (values, columns) into shared memory
    e.warp_row()  # this warp's row, segment, chunk count and output row
    e.lane_constants()  # RHS gather vectors, fragment offsets, reduction predicates
    e.tile_loop()  # per N tile: chunks of gathered B times the nonzeros, then the diagonal stores
    e.k.exit()
    return e.k


class _TcaEmitter:
    """The stages of ``tca_spmm``, emitted in order; registers shared between stages are attributes."""

    def __init__(self, m: Module, n: int, seg_chunks: int, prec: Precision) -> None:
        k = self.k = m.kernel("tca_spmm", reqntid=BLOCK_THREADS)
        self.n, self.seg_chunks, self.prec = n, seg_chunks, prec
        self.es, self.sh, self.sty = prec.bytes, prec.shift, prec.smem_type
        self.tf32 = prec.mma == "tf32"
        names = ("indptr", "indices", "data", "B", "C", "P", "row_id", "nwpr", "wrid", "pslot")
        params = [k.param("u64", nm) for nm in names]
        ptrs = [_gptr(k, p) for p in params]  # nwpr (ptrs[7]) is loaded but unused
        self.g_indptr, self.g_indices, self.g_data, self.g_b, self.g_c, self.g_p, self.g_rid = ptrs[:7]
        self.g_wrid, self.g_pslot = ptrs[8:]
        o = self.o = PtxOps(k)
        self.ent = L.CHUNK * seg_chunks
        self.s_val = k.shared("s_val", self.sty, self.ent, align=16)
        self.s_col = k.shared("s_col", "s32", self.ent, align=16)
        self.s_rhs = k.shared("s_rhs", self.sty, L.WARPS_PER_BLOCK * L.RHS_HALVES, align=16)
        tid, blk, warp, lane, g, t = k.regs("u32", 6)
        k.mov(tid, sreg.tid.x)
        k.mov(blk, sreg.ctaid.x)
        k.shr(warp, tid, 5)
        k.and_(lane, tid, 31)
        k.shr(g, lane, 2)
        k.and_(t, lane, 3)
        self.tid, self.warp, self.lane, self.g, self.t = tid, warp, lane, g, t
        self.w0 = o.shl(blk, 3)

    def row_nnz(self, row):
        """indptr[row] and the row's nonzero count."""
        k = self.k
        a = k.reg("u64")
        k.mad(a, row, 4, self.g_indptr, mode="wide", type="u32")
        lo, hi = k.reg("u32"), k.reg("u32")
        k.ld("global", lo, addr(a), type="u32")
        k.ld("global", hi, addr(a, 4), type="u32")
        return lo, self.o.sub(hi, lo)

    # ---------------------------------------------------------------- scratch pad (Algorithm 2, lines 16-20)

    def scratch_pad(self) -> None:
        """Thread e < ent stores nonzero e of the block (value, column; column -1 past the row)."""
        k, o, tid, ent = self.k, self.o, self.tid, self.ent
        row0 = _load_u32(k, self.g_rid, self.w0)
        _, nnz0 = self.row_nnz(row0)
        is_mb = k.reg("pred")
        k.setp("gt", is_mb, nnz0, L.CHUNK, type="u32")
        w_e, lim = k.reg("u32"), k.reg("u32")
        l_mb, l_join = k.label("multiblock_per_row"), k.label("scratch")
        k.bra(l_mb, pred=is_mb)
        # multirow_per_block: entry e belongs to warp e / 8; 64 entries
        k.shr(w_e, tid, 3)
        k.min(w_e, w_e, 7)
        k.mov(lim, L.CHUNK)
        k.bra(l_join)
        k.place(l_mb)
        # multiblock_per_row: entries are the block's segment of one long row
        k.mov(w_e, 0)
        k.mov(lim, ent)
        k.place(l_join)
        self.sv, self.sc = _shared_addr(k, self.s_val), _shared_addr(k, self.s_col)
        in_tile = k.reg("pred")
        k.setp("lt", in_tile, tid, ent, type="u32")
        l_after = k.label("scratch_done")
        k.bra(l_after, pred=~in_tile)
        widx = o.add(self.w0, w_e)
        row_e = _load_u32(k, self.g_rid, widx, type="s32")
        wr_e = _load_u32(k, self.g_wrid, widx)
        base_e = k.reg("u32")
        k.selp(base_e, 0, o.shl(o.sub(w_e, wr_e), 3), is_mb)
        p_e = o.sub(o.add(L.seg_begin(o, wr_e, self.seg_chunks), tid), base_e)
        ok_row, ok_lim = k.reg("pred"), k.reg("pred")
        k.setp("ge", ok_row, row_e, 0)
        k.setp("lt", ok_lim, tid, lim, type="u32")
        val, col = k.reg(self.sty), k.reg("s32")
        k.mov(col, -1)
        k.mov(val, 0)
        l_store = k.label("scratch_store")
        k.bra(l_store, pred=~_pand(k, ok_row, ok_lim))
        self.load_nonzero(row_e, p_e, val, col)
        k.place(l_store)
        k.st("shared", addr(o.add(self.sv, o.shl(tid, self.sh))), val)
        k.st("shared", addr(o.add(self.sc, o.shl(tid, 2))), col)
        k.place(l_after)
        k.bar_sync(0)

    def load_nonzero(self, row_e, p_e, val, col) -> None:
        """val, col := nonzero p_e of row row_e, where p_e < its nonzero count."""
        k, o = self.k, self.o
        lo, nnz_e = self.row_nnz(row_e)
        ok_p = k.reg("pred")
        k.setp("lt", ok_p, p_e, nnz_e, type="u32")
        j = o.add(lo, p_e)
        a_d, a_i = k.reg("u64"), k.reg("u64")
        k.mad(a_d, j, self.es, self.g_data, mode="wide", type="u32")
        k.mad(a_i, j, 4, self.g_indices, mode="wide", type="u32")
        if self.tf32:  # fp32 value rounded to tf32 (cvt.rna) once, here
            raw = k.reg("f32")
            k.mov(raw, 0.0)
            k.ld("global", raw, addr(a_d), pred=ok_p)
            k.cvt_tf32(val, raw)
        else:
            k.ld("global", val, addr(a_d), pred=ok_p)
        k.ld("global", col, addr(a_i), pred=ok_p)

    # ---------------------------------------------------------------- per warp

    def warp_row(self) -> None:
        """This warp's row (idle warps exit), its segment's chunk count and output row pointer."""
        k, o, n, warp = self.k, self.o, self.n, self.warp
        widx = o.add(self.w0, warp)
        row = _load_u32(k, self.g_rid, widx, type="s32")
        idle = k.reg("pred")
        k.setp("lt", idle, row, 0)
        k.exit(pred=idle)
        wr = _load_u32(k, self.g_wrid, widx)
        ps = _load_u32(k, self.g_pslot, widx, type="s32")
        _, nnz = self.row_nnz(row)
        self.lq = lq = L.lq_of_nnz(o, nnz)
        mbw = k.reg("pred")
        k.setp("gt", mbw, nnz, L.CHUNK, type="u32")
        self.base = base = k.reg("u32")
        k.selp(base, 0, o.shl(o.sub(o.and_(warp, 7), wr), 3), mbw)
        sb = L.seg_begin(o, wr, self.seg_chunks)
        seg_len = k.reg("u32")
        k.min(seg_len, o.sub(nnz, sb), self.ent)
        self.nchunks = o.shr(o.add(seg_len, L.CHUNK - 1), 6)
        # output row: P[pslot] (partial) or C[row]
        to_p = k.reg("pred")
        k.setp("ge", to_p, ps, 0)
        out_c, out_p, self.out = k.reg("u64"), k.reg("u64"), k.reg("u64")
        k.mad(out_c, row, 4 * n, self.g_c, mode="wide", type="u32")
        k.mad(out_p, ps, 4 * n, self.g_p, mode="wide", type="u32")
        k.selp(self.out, out_p, out_c, to_p)
        self.wcol = L.warp_col0(o, wr, lq)

    def lane_constants(self) -> None:
        """Per-lane constants: RHS gather vectors and their transposed slots (bytes), fragment
        offsets, the diagonal's source lane, and the store predicates and columns."""
        k, o, lane, g, t, lq, sh, wcol = self.k, self.o, self.lane, self.g, self.t, self.lq, self.sh, self.wcol
        rhs_w = o.add(_shared_addr(k, self.s_rhs), o.mul(self.warp, self.es * L.RHS_HALVES))
        self.vecs = []
        for u in range(2):
            p_u, cb_u = L.rhs_vector(o, o.add(lane, 32 * u), lq)
            slots = [o.add(rhs_w, o.shl(L.rhs_slot(o, o.add(o.shl(cb_u, 3), e), p_u, lq), sh)) for e in range(8)]
            self.vecs.append((p_u, o.add(wcol, o.shl(cb_u, 3)), slots))
        if self.tf32:  # one element per register: A a0..a3, B b0, b1
            self.a_off = [o.add(rhs_w, o.shl(L.a_frag_index_tf32(o, g, t, i), 2)) for i in range(4)]
            self.b_offs = [L.b_frag_index_tf32(o, g, t, lq, i) for i in range(2)]
        else:  # two 16-bit elements per register: A a0, a1 (rows g, g+8), B b0
            self.a_off = [o.add(rhs_w, o.shl(L.a_frag_index(o, g, t, h), 1)) for h in range(2)]
            self.b_offs = [L.b_frag_index(o, g, t, lq)]
        odd, self.src = L.diag_source(o, lane, g, lq)
        self.p_odd = k.reg("pred")
        k.setp("ne", self.p_odd, odd, 0, type="u32")
        self.p_lq = []
        for s in range(3):
            p = k.reg("pred")
            k.setp("gt", p, lq, s, type="u32")
            self.p_lq.append(p)
        writer = k.reg("pred")
        k.setp("eq", writer, L.is_writer(o, g, lq), 0, type="u32")
        self.p_store = []
        for mt in range(L.MMAS_PER_TILE):
            p = k.reg("pred")
            k.setp("eq", p, t, mt, type="u32")
            self.p_store.append(_pand(k, p, writer))
        self.colw = [
            [o.add(o.add(wcol, L.mma_col0(o, mt, lq)), L.out_col(o, g, lq, h)) for h in range(2)] for mt in range(4)
        ]
        self.bar_id = o.add(self.warp, 1)

    # ---------------------------------------------------------------- tile loop

    def tile_loop(self) -> None:
        """For each TILE_N columns: the chunk main loop, then the diagonal stores."""
        k = self.k
        self.tile = tile = k.reg("u32")
        k.mov(tile, 0)
        l_tile = k.label("tile")
        k.place(l_tile)
        acc = [k.regs("f32", 4) for _ in range(L.MMAS_PER_TILE)]
        for r in (x for a4 in acc for x in a4):
            k.mov(r, 0.0)
        self.chunk_loop(acc)
        self.diagonal_stores(acc)
        k.add(tile, tile, L.TILE_N)
        more_t = k.reg("pred")
        k.setp("lt", more_t, tile, self.n, type="u32")
        k.bra(l_tile, pred=more_t)

    def chunk_loop(self, acc) -> None:
        """Per chunk of 64 nonzeros: gather the B rows they select into the warp's RHS pad, then mma."""
        k, o, es, n, sh = self.k, self.o, self.es, self.n, self.sh
        chunk = k.reg("u32")
        k.mov(chunk, 0)
        l_chunk = k.label("chunk")
        k.place(l_chunk)
        k.bar_sync(self.bar_id, 32)
        cbase = o.add(self.base, o.shl(chunk, 6))
        for p_u, ccol, slots in self.vecs:
            colidx = k.reg("u32")
            k.ld("shared", colidx, addr(o.add(self.sc, o.shl(o.add(cbase, p_u), 2))), type="u32")
            valid = k.reg("pred")
            k.setp("ge", valid, colidx, 0, type="s32")
            col0 = o.add(self.tile, ccol)
            rowa = k.reg("u64")
            k.mul(rowa, colidx, es * n, mode="wide", type="u32")
            k.add(rowa, rowa, self.g_b)
            ga = k.reg("u64")
            k.mad(ga, col0, es, rowa, mode="wide", type="u32")
            elems = _gather8(k, o, ga, col0, valid, n, self.tf32)
            for e in range(8):
                k.st("shared", addr(slots[e]), elems[e])
        k.bar_sync(self.bar_id, 32)
        bfrag = k.regs("b32", len(self.b_offs))
        for r, off in zip(bfrag, self.b_offs, strict=True):
            k.ld("shared", r, addr(o.add(self.sv, o.shl(o.add(cbase, off), sh))), type="b32")
        for mt in range(L.MMAS_PER_TILE):
            a = k.regs("b32", len(self.a_off))
            for r, off in zip(a, self.a_off, strict=True):
                k.ld("shared", r, addr(off, 128 * es * mt), type="b32")
            k.mma("m16n8k8", self.prec.mma, acc[mt], a, bfrag, acc[mt])
        k.add(chunk, chunk, 1)
        more = k.reg("pred")
        k.setp("lt", more, chunk, self.nchunks, type="u32")
        k.bra(l_chunk, pred=more)

    def diagonal_stores(self, acc) -> None:
        """Diagonal extraction: the wanted products gathered by shuffles, summed, stored by the writers."""
        k, o = self.k, self.o
        for mt in range(L.MMAS_PER_TILE):
            for h in range(2):
                v, w = k.reg("f32"), k.reg("f32")
                k.selp(v, acc[mt][2 * h + 1], acc[mt][2 * h], self.p_odd)
                k.shfl_sync("idx", w, v, self.src, 0x1F)
                for s in range(3):
                    tmp = k.reg("f32")
                    k.shfl_sync("bfly", tmp, w, 4 << s, 0x1F)
                    k.add(w, w, tmp, pred=self.p_lq[s])
                col = o.add(self.tile, self.colw[mt][h])
                inb = k.reg("pred")
                k.setp("lt", inb, col, self.n, type="u32")
                ga = k.reg("u64")
                k.mad(ga, col, 4, self.out, mode="wide", type="u32")
                k.st("global", addr(ga), w, pred=_pand(k, self.p_store[mt], inb))


def _gather8(k, o, ga, col0, valid, n: int, tf32: bool) -> list:
    """8 consecutive B elements of one row from ``ga`` (columns ``col0 .. col0+7``), 0 where
    ``valid`` is false or the column is >= N: 16-bit bit patterns, or fp32 rounded to tf32."""
    if n % 8 == 0:  # the vector lies inside the row: 128-bit loads (one for 16-bit, two for fp32)
        inb = k.reg("pred")
        k.setp("lt", inb, col0, n, type="u32")
        ok = _pand(k, valid, inb)
        if tf32:
            raw = k.regs("f32", 8)
            for r in raw:
                k.mov(r, 0.0)
            k.ld("global", raw[:4], addr(ga), nc=True, pred=ok)
            k.ld("global", raw[4:], addr(ga, 16), nc=True, pred=ok)
        else:
            x = k.regs("b32", 4)
            for r in x:
                k.mov(r, 0)
            k.ld("global", x, addr(ga), nc=True, pred=ok)
            halves = k.regs("b16", 8)
            for i in range(4):
                k.mov(halves[2 * i : 2 * i + 2], x[i])
            return halves
    else:  # predicated scalar loads: no read past the row's last column
        raw = k.regs("f32" if tf32 else "b16", 8)
        for e in range(8):
            k.mov(raw[e], 0.0 if tf32 else 0)
            inb = k.reg("pred")
            k.setp("lt", inb, o.add(col0, e), n, type="u32")
            k.ld("global", raw[e], addr(ga, (4 if tf32 else 2) * e), nc=True, pred=_pand(k, valid, inb))
        if not tf32:
            return raw
    out = k.regs("b32", 8)
    for d, r in zip(out, raw, strict=True):
        k.cvt_tf32(d, r)
    return out


def _shared_addr(k, arr):
    r = k.reg("u32")
    k.mov(r, arr)
    return r


def _reduce_kernel(m: Module, n: int):
    k = m.kernel("tca_reduce", reqntid=REDUCE_THREADS)
    params = [k.param("u64", nm) for nm in ("C", "P", "rows", "slot_begin", "slot_count")]
    g_c, g_p, g_rows, g_begin, g_count = (_gptr(k, p) for p in params)
    o = PtxOps(k)
    tid, item, cy = k.regs("u32", 3)
    k.mov(tid, sreg.tid.x)
    k.mov(item, sreg.ctaid.x)
    k.mov(cy, sreg.ctaid.y)
    col = o.add(o.mul(cy, REDUCE_THREADS), tid)
    out = k.reg("pred")
    k.setp("ge", out, col, n, type="u32")
    k.exit(pred=out)
    row = _load_u32(k, g_rows, item)
    begin = _load_u32(k, g_begin, item)
    count = _load_u32(k, g_count, item)
    s = k.reg("f32")
    k.mov(s, 0.0)
    pa = k.reg("u64")
    k.mul(pa, begin, 4 * n, mode="wide", type="u32")
    k.add(pa, pa, g_p)
    k.mad(pa, col, 4, pa, mode="wide", type="u32")
    done = k.label("store")
    zero = k.reg("pred")
    k.setp("eq", zero, count, 0, type="u32")
    k.bra(done, pred=zero)
    j = k.reg("u32")
    k.mov(j, 0)
    top = k.label("sum")
    k.place(top)
    x = k.reg("f32")
    k.ld("global", x, addr(pa))
    k.add(s, s, x)
    k.add(pa, pa, 4 * n, type="u64")
    k.add(j, j, 1)
    more = k.reg("pred")
    k.setp("lt", more, j, count, type="u32")
    k.bra(top, pred=more)
    k.place(done)
    ca = k.reg("u64")
    k.mul(ca, row, 4 * n, mode="wide", type="u32")
    k.add(ca, ca, g_c)
    k.mad(ca, col, 4, ca, mode="wide", type="u32")
    k.st("global", addr(ca), s)
    k.exit()
    return k


def build(n: int, seg_chunks: int = 2, target: str | None = None, dtype: str = "fp16") -> Module:
    """The PTX module (``tca_spmm`` and ``tca_reduce``) for N columns; ``target`` e.g. "sm_90"
    (default: inferred); ``dtype`` the input precision: "fp16", "bf16" (2-byte S values and B)
    or "tf32" (fp32 S values and B, rounded in the kernel), fp32 accumulation in all three."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= (1 << 24):
        raise ValueError(f"n must be an int in 1..{1 << 24}, got {n!r}")
    if not isinstance(seg_chunks, int) or not 1 <= seg_chunks <= 4:
        raise ValueError(f"seg_chunks must be 1..4, got {seg_chunks!r}")
    prec = precision(dtype)
    m = Module(target=target) if target else Module()
    _main_kernel(m, n, seg_chunks, prec)
    _reduce_kernel(m, n)
    return m
