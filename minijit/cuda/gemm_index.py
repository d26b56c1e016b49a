"""Index math shared by the mma.sync GEMM generator and its numpy model: :class:`Val` (a PTX register with
operators) and the thread, copy, fragment and accumulator coordinates, written once for both."""

from __future__ import annotations

import numpy as np

from ptx import mma
from ptx.builder import Kernel, Reg

from .gemm_spec import GemmSpec, SmemLayout, _pow2

# --------------------------------------------------------------------------- values: numpy or PTX


class Val:
    """An integer value held in a PTX register (.s32 or .s64) of kernel ``k``.

    Arithmetic with ints or other Vals emits one instruction and returns a new Val; multiplying
    by a power of two emits ``shl``, ``//`` and ``%`` take powers of two only (``shr``/``and``).
    Mixing .s32 and .s64 widens the .s32 side (``cvt.s64.s32``). Values are non-negative where
    shifts are used (``shr.s32`` is arithmetic).
    """

    __slots__ = ("k", "r")

    def __init__(self, k: Kernel, r: Reg):
        self.k, self.r = k, r

    @property
    def type(self) -> str:
        return self.r.type

    def _pair(self, o):
        if isinstance(o, Val):
            if o.type != self.type:
                a, b = (to64(self), to64(o))
                return a, b.r
            return self, o.r
        if isinstance(o, bool) or not isinstance(o, int | np.integer):
            raise TypeError(f"cannot combine a register value with {o!r}")
        return self, int(o)

    def _op(self, name: str, o, **kw) -> Val:
        a, b = self._pair(o)
        d = self.k.reg(a.type)
        getattr(self.k, name)(d, a.r, b, **kw)
        return Val(self.k, d)

    def __add__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._op("add", o)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._op("sub", o)

    def __rsub__(self, o):
        d = self.k.reg(self.type)
        self.k.sub(d, int(o), self.r)
        return Val(self.k, d)

    def __mul__(self, o):
        if isinstance(o, int):
            if o == 0:
                return 0
            if o == 1:
                return self
            if _pow2(o):
                return self << (o.bit_length() - 1)
        return self._op("mul", o, mode="lo")

    __rmul__ = __mul__

    def __lshift__(self, n: int):
        if n == 0:
            return self
        d = self.k.reg(self.type)
        self.k.shl(d, self.r, int(n))
        return Val(self.k, d)

    def __rshift__(self, n: int):
        if n == 0:
            return self
        d = self.k.reg(self.type)
        self.k.shr(d, self.r, int(n))
        return Val(self.k, d)

    def __floordiv__(self, n: int):
        if not _pow2(n):
            raise ValueError(f"// {n}: only powers of two")
        return self >> (n.bit_length() - 1)

    def __mod__(self, n: int):
        if not _pow2(n):
            raise ValueError(f"% {n}: only powers of two")
        return self & (n - 1)

    def __and__(self, o):
        return self._op("and_", o)

    __rand__ = __and__

    def __xor__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._op("xor", o)

    __rxor__ = __xor__

    def __or__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._op("or_", o)

    __ror__ = __or__


def to64(x):
    """Widen to 64 bits (.s32 register -> .s64; ints and numpy arrays unchanged)."""
    if isinstance(x, Val) and x.type == "s32":
        d = x.k.reg("s64")
        x.k.cvt(d, x.r)
        return Val(x.k, d)
    return x


def imin(a, b):
    if isinstance(a, Val) or isinstance(b, Val):
        a, b = (a, b) if isinstance(a, Val) else (b, a)
        return a._op("min", b)
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return np.minimum(a, b)


def imax(a, b):
    if isinstance(a, Val) or isinstance(b, Val):
        a, b = (a, b) if isinstance(a, Val) else (b, a)
        return a._op("max", b)
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return np.maximum(a, b)


# --------------------------------------------------------------------------- shared index math
# Every function below takes ints, numpy integer arrays or Vals; generate() and simulate() use them.


def thread_coords(spec: GemmSpec, tid):
    """(lane, warp_m, warp_n) of thread ``tid``."""
    lane = tid & 31
    warp = tid >> 5
    return lane, warp % spec.warps_m, warp // spec.warps_m


def copy_coords(layout: SmemLayout, vec: int, threads: int, tid, j: int):
    """(row, col) in the shared tile of the ``j``-th copy unit of ``vec`` bytes of thread ``tid``."""
    upr = layout.row_bytes // vec
    u = tid + j * threads
    return u // upr, (u % upr) * (vec // layout.es)


def copy_src(layout: SmemLayout, vec: int, row, col, outer0, inner0, outer_ext, inner_ext):
    """Global coordinates (outer, inner) and the number of valid bytes (``src-size``) of a copy.

    The tile row is the operand's outer index (k for A, n for B) at ``outer0 + row``; the column
    is the inner (contiguous) index at ``inner0 + col``; ``*_ext`` are the operand's extents.
    """
    ve = vec // layout.es
    n_inner = imin(imax(inner_ext - inner0 - col, 0), ve)
    ok_outer = imin(imax(outer_ext - outer0 - row, 0), 1)
    return outer0 + row, inner0 + col, n_inner * ok_outer * layout.es


def global_offset(outer, inner, ld_bytes, es: int):
    """Byte offset of (outer, inner) in an operand with outer stride ``ld_bytes``."""
    return to64(outer) * ld_bytes + to64(inner * es)


def a_ldmatrix(spec: GemmSpec, tid, mt: int, ks: int):
    """Shared byte offset (in A's tile) of the row this lane hands to ``ldmatrix.x4.trans`` for the
    A fragment of m16 tile ``mt`` at k step ``ks``. Matrix j = lane/8 covers m + 8*(j&1), k + 8*(j>>1)."""
    lane, warp_m, _ = thread_coords(spec, tid)
    j, r = lane >> 3, lane & 7
    m = warp_m * spec.wm + mt * 16 + (j & 1) * 8
    k = ks * 16 + (j >> 1) * 8
    if spec.a_major == "k":  # rows m: plain ldmatrix, lane r of matrix j hands row m + r
        return spec.layout_a.offset(m + r, k)
    return spec.layout_a.offset(k + r, m)


def b_ldmatrix(spec: GemmSpec, tid, np_: int, ks: int):
    """Shared byte offset (in B's tile) of this lane's row for ``ldmatrix.x4`` of n8 tiles
    ``2*np_`` and ``2*np_+1`` at k step ``ks``. Matrix j covers n + 8*(j>>1), k + 8*(j&1)."""
    lane, _, warp_n = thread_coords(spec, tid)
    j, r = lane >> 3, lane & 7
    n = warp_n * spec.wn + np_ * 16 + (j >> 1) * 8
    k = ks * 16 + (j & 1) * 8
    if spec.b_major == "n":  # rows k: ldmatrix.trans, lane r of matrix j hands row k + r
        return spec.layout_b.offset(k + r, n)
    return spec.layout_b.offset(n + r, k)


def _lane_pos(spec: GemmSpec, operand: str, lane, i: int):
    """(row, col) of fragment element i as a linear function of groupID/threadID_in_group, from
    the tables in ``ptx.mma`` (every table is pos(lane, i) = pos(0, i) + g*dg + t*dt)."""
    pos = mma.element_position
    dt = "tf32" if spec.dtype == "tf32" else spec.dtype
    r0, c0 = pos(spec.shape, dt, operand, 0, i)
    p0 = pos(spec.shape, dt, operand, 0, 0)
    pg, pt = pos(spec.shape, dt, operand, 4, 0), pos(spec.shape, dt, operand, 1, 0)
    rg, cg = pg[0] - p0[0], pg[1] - p0[1]
    rt, ct = pt[0] - p0[0], pt[1] - p0[1]
    g, t = lane >> 2, lane & 3
    return r0 + g * rg + t * rt, c0 + g * cg + t * ct


def tf32_frag(spec: GemmSpec, tid, operand: str, tile: int, ks: int, i: int):
    """Shared byte offset of tf32 fragment element ``i`` of m16 tile (A) or n8 tile (B) ``tile``."""
    lane, warp_m, warp_n = thread_coords(spec, tid)
    row, col = _lane_pos(spec, operand, lane, i)
    if operand == "a":  # (m, k)
        m, kk = warp_m * spec.wm + tile * 16 + row, ks * 8 + col
        return spec.layout_a.offset(kk, m) if spec.a_major == "m" else spec.layout_a.offset(m, kk)
    kk, n = ks * 8 + row, warp_n * spec.wn + tile * 8 + col  # (k, n)
    return spec.layout_b.offset(n, kk) if spec.b_major == "k" else spec.layout_b.offset(kk, n)


def acc_coords(spec: GemmSpec, tid, mt: int, nt: int, i: int):
    """(m, n) inside the CTA tile of accumulator element ``i`` of tile (mt, nt)."""
    lane, warp_m, warp_n = thread_coords(spec, tid)
    row, col = _lane_pos(spec, "c", lane, i)
    return warp_m * spec.wm + mt * 16 + row, warp_n * spec.wn + nt * 8 + col


def plan(fn, keys, threads: int) -> dict:
    """Group keys whose per-thread values ``fn(tid, key)`` differ by a thread-independent constant:
    ``{key: (representative, constant)}``. The generator keeps one register per representative and
    folds the constant into the instruction's immediate offset."""
    tids = np.arange(threads, dtype=np.int64)
    vals = {key: np.broadcast_to(np.asarray(fn(tids, key), dtype=np.int64), tids.shape) for key in keys}
    reps: list = []
    out = {}
    for key in keys:
        for rep in reps:
            d = vals[key] - vals[rep]
            if (d == d[0]).all():
                out[key] = (rep, int(d[0]))
                break
        else:
            reps.append(key)
            out[key] = (key, 0)
    return out


def _fragment_plans(spec: GemmSpec):
    """Offset plans for the shared-memory fragment loads: {(operand, tile, ks, i): (rep, const)}."""
    T = spec.threads
    if spec.es == 2:
        ka = [("a", mt, ks, 0) for ks in range(spec.bk // 16) for mt in range(spec.mt)]
        kb = [("b", p, ks, 0) for ks in range(spec.bk // 16) for p in range(spec.nt // 2)]
        pa = plan(lambda t, key: a_ldmatrix(spec, t, key[1], key[2]), ka, T)
        pb = plan(lambda t, key: b_ldmatrix(spec, t, key[1], key[2]), kb, T)
    else:
        ka = [("a", mt, ks, i) for ks in range(spec.bk // 8) for mt in range(spec.mt) for i in range(4)]
        kb = [("b", nt, ks, i) for ks in range(spec.bk // 8) for nt in range(spec.nt) for i in range(2)]
        pa = plan(lambda t, key: tf32_frag(spec, t, "a", key[1], key[2], key[3]), ka, T)
        pb = plan(lambda t, key: tf32_frag(spec, t, "b", key[1], key[2], key[3]), kb, T)
    return {**pa, **pb}


def _frag_offset(spec: GemmSpec, tid, key):
    _, tile, ks, i = key
    if spec.es == 2:
        return (a_ldmatrix if key[0] == "a" else b_ldmatrix)(spec, tid, tile, ks)
    return tf32_frag(spec, tid, key[0], tile, ks, i)


def _acc_deltas(spec: GemmSpec):
    """Per accumulator element: constant (dm, dn) relative to element (0, 0, 0) of the same thread."""
    tids = np.arange(spec.threads, dtype=np.int64)
    m0, n0 = acc_coords(spec, tids, 0, 0, 0)
    out = {}
    for mt in range(spec.mt):
        for nt in range(spec.nt):
            for i in range(4):
                m, n = acc_coords(spec, tids, mt, nt, i)
                dm, dn = m - m0, n - n0
                assert (dm == dm[0]).all() and (dn == dn[0]).all()
                out[(mt, nt, i)] = (int(dm[0]), int(dn[0]))
    return out


def split_range(part, total, split: int, div=None):
    """First K-tile (index into the flattened ``R * ceil(K/bk)`` sequence) of split-K part ``part``
    of ``split``: ``part * total // split``, so the parts differ by at most one tile and none is
    empty when ``split <= total``. ``div`` divides a register value (the generator's ``div.s32``)."""
    if div is None:
        return part * total // split
    return div(part * total, split)
