"""Small kernels built with the ptx builder, shared by the ptxas and GPU tests."""

from __future__ import annotations

from ptx import Module, addr, mma, sreg


def vadd(module: Module | None = None):
    """c[i] = a[i] + b[i] for i < n; grid-stride free, one element per thread, predicated tail."""
    m = module or Module()
    k = m.kernel("vadd", maxntid=256)
    pa, pb, pc, pn = k.param("u64", "a"), k.param("u64", "b"), k.param("u64", "c"), k.param("u32", "n")
    a, b, c = k.regs("u64", 3)
    n = k.reg("u32")
    for r, p in ((a, pa), (b, pb), (c, pc), (n, pn)):
        k.ld_param(r, p)
    tid, ctaid, ntid, i = k.regs("u32", 4)
    k.mov(tid, sreg.tid.x)
    k.mov(ctaid, sreg.ctaid.x)
    k.mov(ntid, sreg.ntid.x)
    k.mad(i, ctaid, ntid, tid, mode="lo")
    out = k.reg("pred")
    done = k.label("done")
    k.setp("ge", out, i, n)
    k.bra(done, pred=out)
    off = k.reg("u64")
    k.mul(off, i, 4, mode="wide")
    ga, gb, gc = k.regs("u64", 3)
    for g, p in ((ga, a), (gb, b), (gc, c)):
        k.cvta(g, p)
        k.add(g, g, off)
    x, y = k.regs("f32", 2)
    k.ld("global", x, ga)
    k.ld("global", y, gb)
    k.add(x, x, y)
    k.st("global", gc, x)
    k.place(done)
    k.ret()
    return m, k


def _lane_g_t(k):
    lane, g, t = k.regs("u32", 3)
    k.mov(lane, sreg.laneid)
    k.shr(g, lane, 2)
    k.and_(t, lane, 3)
    return lane, g, t


def _c_offsets(k, g, t):
    """Byte offset of C/D elements (c0, c1) for a row-major 16x8 f32 tile: (g*8 + 2t)*4."""
    o32 = k.reg("u32")
    k.shl(o32, g, 5)  # g*32
    tmp = k.reg("u32")
    k.shl(tmp, t, 3)  # t*8
    k.add(o32, o32, tmp)
    o64 = k.reg("u64")
    k.cvt(o64, o32)
    return o64


def _mma_c_to_d(k, g, t, gc, gd, shape, dtype, ra, rb):
    """Load this lane's C fragment (row-major 16 x 8 f32 at ``gc``), D = A @ B + C, store D at ``gd``."""
    coff = _c_offsets(k, g, t)
    pc_, pd_ = k.regs("u64", 2)
    k.add(pc_, gc, coff)
    k.add(pd_, gd, coff)
    c = k.regs("f32", 4)
    k.ld("global", c[0:2], addr(pc_))
    k.ld("global", c[2:4], addr(pc_, 8 * 8 * 4))  # rows g and g + 8
    d = k.regs("f32", 4)
    k.mma(shape, dtype, d, ra, rb, c)
    k.st("global", addr(pd_), d[0:2])
    k.st("global", addr(pd_, 8 * 8 * 4), d[2:4])


def _global_param(k, p):
    r, g = k.regs("u64", 2)
    k.ld_param(r, p)
    k.cvta(g, r)
    return g


def mma_ldmatrix_f16(module: Module | None = None):
    """One warp: D = A @ B + C, m16n8k16 f16 -> f32.

    A (16x16 f16) and B (16x8 f16) are row-major in global memory and staged in
    shared memory with cp.async.cg; A is loaded with ldmatrix.x4, B with
    ldmatrix.x2.trans. C and D are row-major 16x8 f32.
    """
    m = module or Module()
    k = m.kernel("mma_ldmatrix_f16", reqntid=32)
    pa, pb, pc, pd = (k.param("u64", n) for n in ("A", "B", "C", "D"))
    ga, gb, gc, gd = (_global_param(k, p) for p in (pa, pb, pc, pd))
    sa = k.shared("sA", "b8", 512, align=128)
    sb = k.shared("sB", "b8", 256, align=128)
    lane, g, t = _lane_g_t(k)
    # stage: lane l copies bytes [16l, 16l+16) of A; lanes 0..15 those of B
    sa_base, sb_base = k.regs("u32", 2)
    k.mov(sa_base, sa)
    k.mov(sb_base, sb)
    off = k.reg("u32")
    k.shl(off, lane, 4)
    off64 = k.reg("u64")
    k.mul(off64, lane, 16, mode="wide")
    dst_a, dst_b = k.regs("u32", 2)
    src_a, src_b = k.regs("u64", 2)
    k.add(dst_a, sa_base, off)
    k.add(dst_b, sb_base, off)
    k.add(src_a, ga, off64)
    k.add(src_b, gb, off64)
    k.cp_async(addr(dst_a), addr(src_a), 16, cache="cg")
    lo16 = k.reg("pred")
    k.setp("lt", lo16, lane, 16)
    k.cp_async(addr(dst_b), addr(src_b), 16, cache="cg", pred=lo16)
    k.cp_async_commit()
    k.cp_async_wait(0)
    k.bar_sync(0)
    # ldmatrix addresses: A row (lane % 16), column block (lane / 16); B row (lane % 16)
    row, cb, la, lb = k.regs("u32", 4)
    k.and_(row, lane, 15)
    k.shr(cb, lane, 4)
    k.shl(la, row, 5)
    k.shl(cb, cb, 4)
    k.add(la, la, cb)
    k.add(la, la, sa_base)
    k.shl(lb, row, 4)
    k.add(lb, lb, sb_base)
    ra = k.regs("b32", 4)
    rb = k.regs("b32", 2)
    k.ldmatrix(ra, addr(la))
    k.ldmatrix(rb, addr(lb), trans=True)
    _mma_c_to_d(k, g, t, gc, gd, "m16n8k16", "f16", ra, rb)
    k.ret()
    return m, k


def _storage_pos(shape, dtype, operand, lane, i, trans):
    r, c = mma.element_position(shape, dtype, operand, lane, i)
    return (c, r) if trans else (r, c)


def _lane_offset(k, g, t, shape, dtype, operand, ld, esize, trans=False):
    """u64 byte offset of element 0 of this lane's fragment, from the layout table.

    Every table is (row, col) = f(g, t) + const(i), so the lane part is
    pos(lane, 0) - pos(0, 0), linear in g and t.
    """
    p0 = _storage_pos(shape, dtype, operand, 0, 0, trans)
    pg = _storage_pos(shape, dtype, operand, 4, 0, trans)  # g = 1, t = 0
    pt = _storage_pos(shape, dtype, operand, 1, 0, trans)  # g = 0, t = 1
    coef_g = ((pg[0] - p0[0]) * ld + (pg[1] - p0[1])) * esize
    coef_t = ((pt[0] - p0[0]) * ld + (pt[1] - p0[1])) * esize
    o, tmp = k.regs("u32", 2)
    k.mul(o, g, coef_g, mode="lo")
    k.mul(tmp, t, coef_t, mode="lo")
    k.add(o, o, tmp)
    o64 = k.reg("u64")
    k.cvt(o64, o)
    return o64


def mma_direct(shape: str, dtype: str, module: Module | None = None):
    """One warp: D = A @ B + C with fragments loaded straight from global memory.

    A is row-major (m x k). For f16/bf16, B is given transposed (n x k row-major,
    i.e. the "col" layout), so each .b32 register is one aligned 32-bit load; for
    tf32, A and B are f32 (B row-major k x n) and converted with cvt.rna.tf32.f32.
    Offsets come from the fragment tables in ``ptx.mma``. C/D row-major f32.
    """
    inf = mma.info(shape, dtype)
    m = module or Module()
    k = m.kernel(f"mma_{shape}_{dtype}", reqntid=32)
    pa, pb, pc, pd = (k.param("u64", n) for n in ("A", "B", "C", "D"))
    ga, gb, gc, gd = (_global_param(k, p) for p in (pa, pb, pc, pd))
    _, g, t = _lane_g_t(k)
    esize = 4 if dtype == "tf32" else 2
    b_trans = dtype != "tf32"
    ld_a = inf.k
    ld_b = inf.k if b_trans else inf.n
    oa = _lane_offset(k, g, t, shape, dtype, "a", ld_a, esize)
    ob = _lane_offset(k, g, t, shape, dtype, "b", ld_b, esize, trans=b_trans)
    pa_, pb_ = k.regs("u64", 2)
    k.add(pa_, ga, oa)
    k.add(pb_, gb, ob)
    ra, rb = k.regs("b32", inf.regs_a), k.regs("b32", inf.regs_b)
    for operand, regs, base, ld, tr in (("a", ra, pa_, ld_a, False), ("b", rb, pb_, ld_b, b_trans)):
        p0 = _storage_pos(shape, dtype, operand, 0, 0, tr)
        for j, r in enumerate(regs):
            row, col = _storage_pos(shape, dtype, operand, 0, j * inf.per_reg, tr)
            const = ((row - p0[0]) * ld + (col - p0[1])) * esize
            if dtype == "tf32":
                f = k.reg("f32")
                k.ld("global", f, addr(base, const))
                k.cvt_tf32(r, f)
            else:
                k.ld("global", r, addr(base, const))
    _mma_c_to_d(k, g, t, gc, gd, shape, dtype, ra, rb)
    k.ret()
    return m, k


def stage_reverse(module: Module | None = None, threads: int = 128):
    """cp.async + wait: each block stages its ``4*threads`` floats in shared memory
    (16 bytes per thread, cp.async.cg), waits, and writes the chunk reversed and
    doubled: out[blk + 4t + j] = 2 * inp[blk + 4*threads - 1 - 4t - j].
    """
    m = module or Module()
    k = m.kernel("stage_reverse", reqntid=threads)
    pin, pout = k.param("u64", "inp"), k.param("u64", "out")
    gin, gout = _global_param(k, pin), _global_param(k, pout)
    nb = 16 * threads
    s = k.shared("stage", "f32", 4 * threads, align=16)
    tid, ctaid, sbase = k.regs("u32", 3)
    k.mov(tid, sreg.tid.x)
    k.mov(ctaid, sreg.ctaid.x)
    k.mov(sbase, s)
    blk, off = k.regs("u64", 2)
    k.mul(blk, ctaid, nb, mode="wide")
    k.mul(off, tid, 16, mode="wide")
    src = k.reg("u64")
    k.add(src, gin, blk)
    k.add(src, src, off)
    dst, o32 = k.regs("u32", 2)
    k.shl(o32, tid, 4)
    k.add(dst, sbase, o32)
    k.cp_async(addr(dst), addr(src), 16, cache="cg")
    k.cp_async_commit()
    k.cp_async_wait(0)
    k.bar_sync(0)
    # read the mirrored 16 bytes: shared offset nb - 16 - 16*tid, reversed element order
    rd = k.reg("u32")
    k.sub(rd, nb - 16, o32)
    k.add(rd, rd, sbase)
    v = k.regs("f32", 4)
    k.ld("shared", v, addr(rd))
    w = k.regs("f32", 4)
    for j in range(4):
        k.add(w[j], v[3 - j], v[3 - j])
    dst_g = k.reg("u64")
    k.add(dst_g, gout, blk)
    k.add(dst_g, dst_g, off)
    k.st("global", addr(dst_g), w)
    k.ret()
    return m, k


def warp_sum_pack(module: Module | None = None):
    """Per warp: sum 32 floats with shfl.sync.bfly; lane 0 stores the sum and the
    sum packed as f16x2 (hi = sum, lo = -sum) via cvt.rn.f16x2.f32."""
    m = module or Module()
    k = m.kernel("warp_sum_pack", reqntid=32)
    pin, pout, ppk = k.param("u64", "inp"), k.param("u64", "out"), k.param("u64", "packed")
    gin, gout, gpk = (_global_param(k, p) for p in (pin, pout, ppk))
    lane = k.reg("u32")
    k.mov(lane, sreg.laneid)
    off = k.reg("u64")
    k.mul(off, lane, 4, mode="wide")
    src = k.reg("u64")
    k.add(src, gin, off)
    x, y = k.regs("f32", 2)
    k.ld("global", x, addr(src))
    for delta in (16, 8, 4, 2, 1):
        k.shfl_sync("bfly", y, x, delta, 31)
        k.add(x, x, y)
    first, neg = k.reg("pred"), k.reg("f32")
    k.setp("eq", first, lane, 0)
    k.st("global", addr(gout), x, pred=first)
    k.sub(neg, 0.0, x)
    h = k.reg("b32")
    k.cvt_pack(h, x, neg, dtype="f16x2")
    k.st("global", addr(gpk), h, pred=first)
    k.ret()
    return m, k
