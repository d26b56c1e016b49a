"""Tensor-core GEMM/BRGEMM generator (PTX through :mod:`ptx`) and a numpy model of its data movement.

The kernel computes, for every batch entry ``z`` of a batch table and every CTA tile::

    C_z = last_touch(first_touch(C_z) + sum_r A_{z,r} B_{z,r})

over the rows ``r`` of a reduction table (BRGEMM batch-reduce entries and any outer K loops,
flattened), with fp32 accumulation in registers.

Layouts (strides in bytes are kernel parameters; element strides in the docs below), chosen by
the spec's ``a_major`` and ``b_major`` (4 kernel variants):

- A is M x K: ``a_major="m"``: ``a[m + k*lda]`` (M contiguous, column-major), ``"k"``:
  ``a[k + m*lda]`` (K contiguous, row-major); f16, bf16 or f32 (used as tf32).
- B is K x N: ``b_major="k"``: ``b[k + n*ldb]`` (K contiguous), ``"n"``: ``b[n + k*ldb]``
  (N contiguous); same element type as A.
- C is M x N fp32, ``c[m + n*ldc]`` (M contiguous). An N-contiguous C is the caller's business:
  `minijit.cuda.operation` computes C^T = B^T A^T instead (A and B exchange roles), which turns
  it into an M-contiguous one, so 4 kernel variants cover all 8 orientations of A, B and C.

``lda``/``ldb`` are always the stride of the operand's non-contiguous dim.

Kernel parameters, in order: ``A, B, C, batch_table, red_table`` (u64 device pointers),
``M, N, K, R`` (s32), ``lda, ldb, ldc`` (s64, **bytes**). ``batch_table`` holds ``gridDim.z``
rows of three s64 byte offsets ``(A, B, C)``; ``red_table`` holds ``R`` rows of two s64 byte
offsets ``(A, B)``. Grid ``(ceil(M/BM), ceil(N/BN), batch)``, block ``(threads,)``.

Split-K (``GemmSpec.split_k = S`` > 1): grid z is ``batch * S`` (``ctaid.z = z * S + s``), CTA
``s`` runs K tiles ``[s*T//S, (s+1)*T//S)`` of the flattened sequence of ``T = R * ceil(K/BK)``
(:func:`split_range`) and stores its raw fp32 sum to plane ``ctaid.z`` of a workspace passed as
``C``, with ``ldc`` its M stride (``4*M`` bytes; planes ``N * ldc`` bytes apart; the batch
table's C offsets unused); :mod:`minijit.cuda.splitk` reduces the planes into C.

Inside one CTA (``threads = 32 * warps_m * warps_n``):

- the flattened sequence of ``R * ceil(K/BK)`` K tiles is streamed through ``stages`` shared
  memory buffers with ``cp.async`` (multi-stage pipeline: ``wait_group stages-2`` + ``bar.sync``
  per tile); edge tiles use the ``src-size`` operand (zero fill), so any M, N, K works;
- shared tiles keep the operand's global orientation, one row per index of its non-contiguous dim
  (A: rows k if M-contiguous, rows m if K-contiguous; B: rows n if K-contiguous, rows k if
  N-contiguous), each loaded with ``cp.async`` 16-byte chunks along the contiguous dim, with an
  XOR swizzle of the 16-byte chunks (:class:`Swizzle`) against bank conflicts;
- f16/bf16: ``ldmatrix.x4`` feeds ``mma.sync.m16n8k16``, with ``.trans`` where the shared rows
  are k (A M-contiguous, B N-contiguous) and without where they are m (A) or n (B);
  tf32: ldmatrix moves 16-bit elements only, so every fragment element is a scalar
  ``ld.shared.f32`` (+ ``cvt.rna.tf32.f32``) from its (row, column) in the swizzled tile, whatever
  the orientation, feeding ``mma.sync.m16n8k8``;
- the epilogue applies the first touch (zero, or load C, optionally ReLU'd) and the last touch
  (none or ReLU) and stores with predicates ``m < M and n < N``.

Index math is written once, in plain Python arithmetic, against values that are either numpy
integer arrays (the model) or :class:`Val` (a typed PTX register: every operator emits one
instruction). :func:`generate` and :func:`simulate` call the same functions
(:func:`copy_coords`, :func:`copy_src`, :meth:`SmemLayout.offset`, :func:`a_ldmatrix`, ...),
so the model checks the addresses the kernel computes, not a re-derivation of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ptx import Module, addr, mma, sreg
from ptx.builder import Kernel, Reg

#: element size in bytes of each input type
ESIZE = {"f16": 2, "bf16": 2, "tf32": 4}
FIRST_TOUCH = ("zero", "load", "relu")  # C := 0 | C | max(C, 0), before the products are added
LAST_TOUCH = ("none", "relu")
#: largest split-K factor (CTAs per output tile)
MAX_SPLIT = 64
PARAMS = ("A", "B", "C", "batch_table", "red_table", "M", "N", "K", "R", "lda", "ldb", "ldc")


def _pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


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


# --------------------------------------------------------------------------- shared memory layout


@dataclass(frozen=True)
class Swizzle:
    """16-byte chunk index ``c`` of row ``row`` is stored at ``c ^ (((row >> shift) & mask) << lshift)``."""

    shift: int = 0
    bits: int = 0
    lshift: int = 0

    def __call__(self, row, chunk):
        if self.bits == 0:
            return chunk
        return chunk ^ (((row >> self.shift) & ((1 << self.bits) - 1)) << self.lshift)


def ldmatrix_swizzle(row_bytes: int) -> Swizzle:
    """For accesses that read the same 16-byte chunk of 8 consecutive rows (ldmatrix, and the
    tf32 fragments whose rows are the fragment's groupID): 8 distinct bank groups."""
    cpr = row_bytes // 16
    if cpr >= 8:
        return Swizzle(0, 3, 0)
    if cpr == 4:
        return Swizzle(1, 2, 0)
    if cpr == 2:
        return Swizzle(2, 1, 0)
    return Swizzle()


def pair_swizzle(row_bytes: int) -> Swizzle:
    """For tf32 A (rows = k): a fragment load reads 2 adjacent chunks of 4 consecutive rows."""
    cpr = row_bytes // 16
    if cpr >= 8:
        return Swizzle(0, 2, 1)
    return ldmatrix_swizzle(row_bytes)


@dataclass(frozen=True)
class SmemLayout:
    """``rows`` rows of ``inner`` contiguous elements of ``es`` bytes, chunks swizzled."""

    rows: int
    inner: int
    es: int
    swizzle: Swizzle

    @property
    def row_bytes(self) -> int:
        return self.inner * self.es

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    def offset(self, row, col):
        """Byte offset of element ``col`` of row ``row``."""
        byte = col * self.es
        return row * self.row_bytes + (self.swizzle(row, byte >> 4) << 4) + (byte & 15)


# --------------------------------------------------------------------------- kernel specification


@dataclass(frozen=True)
class GemmSpec:
    """Everything that selects one generated kernel.

    ``dtype``: input type "f16", "bf16" or "tf32" (fp32 inputs, converted with cvt.rna).
    ``bm, bn, bk``: CTA tile; ``warps_m x warps_n`` warps, each owning a
    ``bm/warps_m x bn/warps_n`` warp tile. ``vec_a``/``vec_b``: bytes per global->shared copy
    (16, 8, 4 with cp.async; 2 for f16/bf16 operands whose strides are odd, copied with ld/st).
    ``first``: "zero" | "load" | "relu" (C := 0, C, max(C, 0) before the sum); ``last``: "none" | "relu".
    ``a_major``: A's contiguous dim, "m" or "k"; ``b_major``: B's, "k" or "n" (C is M-contiguous).
    ``split_k``: CTAs sharing one output tile's flattened ``R * ceil(K/bk)`` K-tile sequence (1..64);
    above 1 the kernel writes fp32 partial sums to a workspace instead of touching C (see
    :mod:`minijit.cuda.splitk`; ``first`` must be "zero" and ``last`` "none": the reduction
    kernel applies the touches).
    """

    dtype: str = "f16"
    bm: int = 128
    bn: int = 128
    bk: int = 32
    warps_m: int = 2
    warps_n: int = 4
    stages: int = 3
    vec_a: int = 16
    vec_b: int = 16
    first: str = "zero"
    last: str = "none"
    a_major: str = "m"
    b_major: str = "k"
    split_k: int = 1

    # derived -------------------------------------------------------------------------------------
    @property
    def es(self) -> int:
        return ESIZE[self.dtype]

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def wm(self) -> int:
        return self.bm // self.warps_m

    @property
    def wn(self) -> int:
        return self.bn // self.warps_n

    @property
    def mt(self) -> int:
        """m16 tiles per warp."""
        return self.wm // 16

    @property
    def nt(self) -> int:
        """n8 tiles per warp."""
        return self.wn // 8

    @property
    def shape(self) -> str:
        return "m16n8k16" if self.es == 2 else "m16n8k8"

    @property
    def trans_a(self) -> bool:
        """ldmatrix .trans for A: its shared rows are k (M contiguous), the fragment wants rows m."""
        return self.a_major == "m"

    @property
    def trans_b(self) -> bool:
        """ldmatrix .trans for B: its shared rows are k (N contiguous); rows n (K contiguous) are
        what the "col" fragment wants."""
        return self.b_major == "n"

    @property
    def orientation(self) -> str:
        """A's and B's contiguous dims, e.g. "mk" (M-contiguous A, K-contiguous B; C is M-contiguous)."""
        return self.a_major + self.b_major

    @property
    def kstep(self) -> int:
        return 16 if self.es == 2 else 8

    def _layout(self, rows_k: bool, mn: int) -> SmemLayout:
        """Shared tile of an operand with rows k (inner ``mn``) or rows ``mn`` (inner k). tf32
        fragments read 2 adjacent chunks of 4 k rows (pair swizzle), or 1 chunk of 8 m/n rows."""
        if rows_k:
            rb = mn * self.es
            return SmemLayout(self.bk, mn, self.es, ldmatrix_swizzle(rb) if self.es == 2 else pair_swizzle(rb))
        return SmemLayout(mn, self.bk, self.es, ldmatrix_swizzle(self.bk * self.es))

    @property
    def layout_a(self) -> SmemLayout:
        return self._layout(self.a_major == "m", self.bm)

    @property
    def layout_b(self) -> SmemLayout:
        return self._layout(self.b_major == "n", self.bn)

    def tile_coords(self, operand: str, m_cta, n_cta, k0, M, N, K):
        """(outer0, inner0, outer_ext, inner_ext) of operand 'a' or 'b''s tile: the global origin
        and extents of its shared rows (outer) and columns (inner, the contiguous dim)."""
        if operand == "a":
            return (k0, m_cta, K, M) if self.a_major == "m" else (m_cta, k0, M, K)
        return (n_cta, k0, N, K) if self.b_major == "k" else (k0, n_cta, K, N)

    @property
    def stage_bytes(self) -> int:
        return self.layout_a.nbytes + self.layout_b.nbytes

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes

    @property
    def name(self) -> str:
        return (
            (
                f"gemm_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_w{self.warps_m}x{self.warps_n}_s{self.stages}"
                f"_v{self.vec_a}x{self.vec_b}_{self.first}_{self.last}"
            )
            + ("" if self.orientation == "mk" else f"_a{self.a_major}b{self.b_major}")
            + (f"_sk{self.split_k}" if self.split_k != 1 else "")
        )

    def max_vec(self, operand: str) -> int:
        """Widest copy (bytes) that splits operand 'a' or 'b''s shared tile evenly over the threads."""
        lay = self.layout_a if operand == "a" else self.layout_b
        fits = [v for v in (16, 8, 4, 2) if v >= self.es and not lay.nbytes % (v * self.threads)]
        return next((v for v in fits if not lay.row_bytes % v), self.es)

    def aligned(self, vec_a: int, vec_b: int) -> GemmSpec:
        """This spec with copy widths no wider than the operands' alignment (``vec_*``, e.g. from
        `choose_vec`) and the tile split allow."""
        return replace(self, vec_a=min(vec_a, self.max_vec("a")), vec_b=min(vec_b, self.max_vec("b")))

    def copies(self, operand: str) -> int:
        """Global->shared copies per thread per tile for operand 'a' or 'b'."""
        lay, vec = (self.layout_a, self.vec_a) if operand == "a" else (self.layout_b, self.vec_b)
        return lay.nbytes // vec // self.threads

    def validate(self) -> GemmSpec:
        def bad(msg):
            raise ValueError(f"GemmSpec {self.name}: {msg}")

        if self.dtype not in ESIZE:
            bad(f"dtype {self.dtype!r}; one of {sorted(ESIZE)}")
        if self.first not in FIRST_TOUCH or self.last not in LAST_TOUCH:
            bad(f"first touch in {FIRST_TOUCH}, last touch in {LAST_TOUCH}")
        if self.a_major not in ("m", "k") or self.b_major not in ("k", "n"):
            bad(f"a_major {self.a_major!r} must be 'm' or 'k', b_major {self.b_major!r} 'k' or 'n'")
        for n in ("bm", "bn", "bk", "warps_m", "warps_n"):
            if not _pow2(getattr(self, n)):
                bad(f"{n} must be a power of two")
        if self.wm % 16 or self.wn % 16:
            bad(f"warp tile {self.wm}x{self.wn} must be a multiple of 16x16")
        if self.bk % 16:
            bad("bk must be a multiple of 16")
        if not 2 <= self.stages <= 8:
            bad("stages must be in 2..8")
        if self.threads > 1024:
            bad("more than 1024 threads")
        for op, v in (("a", self.vec_a), ("b", self.vec_b)):
            if v not in (2, 4, 8, 16) or v < self.es:
                bad(f"vec_{op} {v} must be 2, 4, 8 or 16 bytes and at least one element")
            lay = self.layout_a if op == "a" else self.layout_b
            if lay.nbytes % (v * self.threads) or lay.row_bytes % v:
                bad(f"operand {op}: tile of {lay.nbytes} bytes does not split into {self.threads} copies of {v}")
        if self.smem_bytes > 48 * 1024:
            bad(f"{self.smem_bytes} bytes of static shared memory (max 49152)")
        if isinstance(self.split_k, bool) or not isinstance(self.split_k, int) or not 1 <= self.split_k <= MAX_SPLIT:
            bad(f"split_k {self.split_k!r} must be an int in 1..{MAX_SPLIT}")
        if self.split_k > 1 and (self.first, self.last) != ("zero", "none"):
            bad("split_k > 1 writes raw partial sums: first touch 'zero', last 'none' (the reduction applies them)")
        return self


def choose_vec(es: int, *byte_values: int) -> int:
    """Largest copy width (16, 8, 4 or 2 bytes, at least ``es``) dividing every byte offset or
    stride an operand's copies start from (its pointer, ld and table offsets)."""
    g = 0
    for v in byte_values:
        g = math.gcd(g, int(v))
    for vec in (16, 8, 4, 2):
        if vec >= es and (g % vec == 0):
            return vec
    raise ValueError(f"byte offsets {byte_values} are not multiples of the element size {es}")


def default_spec(dtype: str, m: int = 4096, n: int = 4096, k: int = 4096, **changes) -> GemmSpec:
    """A tiling for an M x N x K problem: 128x128 CTA tiles (8 warps of 64x32) for large
    problems, 64 or 32 when M or N is small; bk 32 (f16/bf16) or 16 (tf32); 3 stages."""

    def tile(x):
        return 128 if x > 64 else 64 if x > 32 else 32

    bm, bn = tile(m), tile(n)
    es = ESIZE[dtype]
    bk = 32 if es == 2 else 16
    if k <= 16:
        bk = 16
    spec = replace(GemmSpec(dtype, bm, bn, bk, max(1, bm // 64), max(1, bn // 32), 3), **changes)
    return spec.aligned(changes.get("vec_a", 16), changes.get("vec_b", 16)).validate()


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


# --------------------------------------------------------------------------- the generator


@dataclass
class GeneratedKernel:
    """A generated kernel: PTX module, kernel and launch geometry (``spec.threads`` per CTA; the
    grid is each family's: :meth:`grid`). Shared by the GEMM families and the split-K reduction."""

    spec: Any
    module: Module
    kernel: Kernel
    _text: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.module.text()
        return self._text

    @property
    def signature(self) -> tuple[str, ...]:
        return self.kernel.signature

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.spec.threads, 1, 1)

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        """``(ceil(M/BM), ceil(N/BN), batch)``."""
        return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch)


@dataclass
class GemmKernel(GeneratedKernel):
    """A generated mma.sync GEMM kernel."""

    spec: GemmSpec

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        """``(ceil(M/BM), ceil(N/BN), batch * split_k)``: with split-K, ``ctaid.z = z * split_k + s``."""
        return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch * self.spec.split_k)


def generate(spec: GemmSpec) -> GemmKernel:
    """Emit the kernel for ``spec`` (see the module docstring for its parameters)."""
    spec.validate()
    S = spec
    mod = Module()
    k = mod.kernel(S.name, reqntid=S.threads)

    def V(r):
        return Val(k, r)

    def reg(t, src=None):
        r = k.reg(t)
        if src is not None:
            k.mov(r, src)
        return r

    params = {}
    for n in PARAMS[:5]:
        params[n] = k.param("u64", n)
    for n in PARAMS[5:9]:
        params[n] = k.param("s32", n)
    for n in PARAMS[9:]:
        params[n] = k.param("s64", n)
    g = {}
    for n in PARAMS[:5]:
        raw, gp = k.reg("s64"), k.reg("s64")
        k.ld_param(raw, params[n])
        k.cvta(gp, raw)
        g[n] = V(gp)
    for n in PARAMS[5:]:
        r = k.reg("s32" if n in "MNKR" else "s64")
        k.ld_param(r, params[n])
        g[n] = V(r)
    M, N, K, R = g["M"], g["N"], g["K"], g["R"]
    lda, ldb, ldc = g["lda"], g["ldb"], g["ldc"]

    tid = V(reg("s32", sreg.tid.x))
    m_cta = V(reg("s32", sreg.ctaid.x)) * S.bm
    n_cta = V(reg("s32", sreg.ctaid.y)) * S.bn
    z = V(reg("s32", sreg.ctaid.z))

    def idiv(a: Val, b) -> Val:
        d = k.reg(a.type)
        k.div(d, a.r, b.r if isinstance(b, Val) else int(b), rnd=None)
        return V(d)

    split = S.split_k > 1
    bz, part = (idiv(z, S.split_k), None) if split else (z, None)
    if split:
        part = z - bz * S.split_k  # ctaid.z = bz * split_k + part
    brow = g["batch_table"] + to64(bz) * 24
    boff = []
    for i in range(3):
        r = k.reg("s64")
        k.ld("global", r, addr(brow.r, 8 * i))
        boff.append(V(r))
    ptr_a, ptr_b = g["A"] + boff[0], g["B"] + boff[1]
    if split:  # partials: plane ctaid.z of the workspace (M x N fp32 planes, ldc = its M stride)
        ptr_c = g["C"] + to64(z) * (to64(N) * ldc)
    else:
        ptr_c = g["C"] + boff[2]

    kt_count = (K + (S.bk - 1)) >> (S.bk.bit_length() - 1)
    total = R * kt_count
    # this CTA's part [seq0, seq_end) of the flattened K-tile sequence (all of it without split-K)
    seq0 = split_range(part, total, S.split_k, idiv) if split else 0
    seq_end = split_range(part + 1, total, S.split_k, idiv) if split else total
    count = seq_end - seq0 if split else total

    smem = k.shared("smem", "b8", S.smem_bytes, align=128)
    sm_base = V(reg("s32", smem))

    # accumulators
    acc = [[k.regs("f32", 4) for _ in range(S.nt)] for _ in range(S.mt)]
    for row in acc:
        for quad in row:
            for r in quad:
                k.mov(r, 0.0)

    # loop-carried state of the producer
    sl, ktl, rl, wr = (reg("s32", 0) for _ in range(4))
    if split:
        r0 = idiv(seq0, kt_count)
        k.mov(sl, seq0.r)
        k.mov(rl, r0.r)
        k.mov(ktl, (seq0 - r0 * kt_count).r)
    base_a, base_b = k.reg("s64"), k.reg("s64")

    def set_slice(r_val):
        rrow = g["red_table"] + to64(r_val) * 16
        oa, ob = k.reg("s64"), k.reg("s64")
        k.ld("global", oa, addr(rrow.r, 0))
        k.ld("global", ob, addr(rrow.r, 8))
        k.add(base_a, ptr_a.r, oa)
        k.add(base_b, ptr_b.r, ob)

    set_slice(V(rl))

    def load_tile():
        skip = k.label("skip_load")
        p = k.reg("pred")
        k.setp("ge", p, sl, seq_end.r)
        k.bra(skip, pred=p, uni=True)
        k0 = V(ktl) * S.bk
        stage = sm_base + V(wr)
        operands = (
            ("a", S.layout_a, S.vec_a, V(base_a), lda, *S.tile_coords("a", m_cta, n_cta, k0, M, N, K), 0),
            (
                "b",
                S.layout_b,
                S.vec_b,
                V(base_b),
                ldb,
                *S.tile_coords("b", m_cta, n_cta, k0, M, N, K),
                S.layout_a.nbytes,
            ),
        )
        for op, lay, vec, base, ld, outer0, inner0, outer_ext, inner_ext, soff in operands:
            for j in range(S.copies(op)):
                row, col = copy_coords(lay, vec, S.threads, tid, j)
                dst = stage + lay.offset(row, col)
                outer, inner, nbytes = copy_src(lay, vec, row, col, outer0, inner0, outer_ext, inner_ext)
                src = base + global_offset(outer, inner, ld, lay.es)
                ok = k.reg("pred")
                k.setp("gt", ok, nbytes.r, 0)
                safe = k.reg("s64")
                k.selp(safe, src.r, base.r, ok)  # never form an address past the operand when nothing is read
                if vec >= 4:
                    k.cp_async(addr(dst.r, soff), addr(safe), vec, cache="cg" if vec == 16 else "ca", src_size=nbytes.r)
                else:
                    h = reg("u16", 0)
                    k.ld("global", h, addr(safe), type="u16", pred=ok)
                    k.st("shared", addr(dst.r, soff), h, type="u16")
        # advance: stage ring, k tile, reduction slice
        k.add(wr, wr, S.stage_bytes)
        wrap = k.reg("pred")
        k.setp("ge", wrap, wr, S.smem_bytes)
        k.mov(wr, 0, pred=wrap)
        k.add(ktl, ktl, 1)
        k.add(sl, sl, 1)
        nxt = k.reg("pred")
        k.setp("lt", nxt, ktl, kt_count.r)
        k.bra(skip, pred=nxt, uni=True)
        k.mov(ktl, 0)
        k.add(rl, rl, 1)
        last = k.reg("pred")
        k.setp("ge", last, rl, R.r)
        k.bra(skip, pred=last, uni=True)
        set_slice(V(rl))
        k.place(skip)

    # fragment address registers (one per plan representative)
    fplan = _fragment_plans(S)
    frag_regs = {}
    for rep, _ in fplan.values():
        if rep not in frag_regs:
            off = _frag_offset(S, tid, rep)
            frag_regs[rep] = off if isinstance(off, Val) else V(reg("s32", int(off)))
    afr = [k.regs("b32", 4) for _ in range(S.mt)]
    bfr = [k.regs("b32", 2) for _ in range(S.nt)]
    ftmp = k.reg("f32")

    def frag_addr(stage, key, extra=0):
        rep, const = fplan[key]
        a = stage + frag_regs[rep]
        return addr(a.r, const + extra)

    def compute(rd):
        stage = sm_base + V(rd)
        b_off = S.layout_a.nbytes
        for ks in range(S.bk // S.kstep):
            if S.es == 2:
                for mt in range(S.mt):
                    k.ldmatrix(afr[mt], frag_addr(stage, ("a", mt, ks, 0)), trans=S.trans_a)
                for p in range(S.nt // 2):
                    regs = [bfr[2 * p][0], bfr[2 * p][1], bfr[2 * p + 1][0], bfr[2 * p + 1][1]]
                    k.ldmatrix(regs, frag_addr(stage, ("b", p, ks, 0), b_off), trans=S.trans_b)
            else:
                for mt in range(S.mt):
                    for i in range(4):
                        k.ld("shared", ftmp, frag_addr(stage, ("a", mt, ks, i)))
                        k.cvt_tf32(afr[mt][i], ftmp)
                for nt in range(S.nt):
                    for i in range(2):
                        k.ld("shared", ftmp, frag_addr(stage, ("b", nt, ks, i), b_off))
                        k.cvt_tf32(bfr[nt][i], ftmp)
            for mt in range(S.mt):
                for nt in range(S.nt):
                    k.mma(S.shape, S.dtype, acc[mt][nt], afr[mt], bfr[nt], acc[mt][nt])

    # prologue: stages-1 tiles in flight
    pc = reg("s32", 0)
    pro = k.label("prologue")
    k.place(pro)
    load_tile()
    k.cp_async_commit()
    k.add(pc, pc, 1)
    more = k.reg("pred")
    k.setp("lt", more, pc, S.stages - 1)
    k.bra(pro, pred=more, uni=True)

    rd, s = reg("s32", 0), reg("s32", 0)
    loop, epilogue = k.label("mainloop"), k.label("epilogue")
    if split:  # a part with no K tiles (split_k > tiles) writes zero partials
        empty = k.reg("pred")
        k.setp("le", empty, count.r, 0)
        k.bra(epilogue, pred=empty, uni=True)
    k.place(loop)
    k.cp_async_wait(S.stages - 2)
    k.bar_sync(0)
    load_tile()
    k.cp_async_commit()
    compute(rd)
    k.add(rd, rd, S.stage_bytes)
    wrap = k.reg("pred")
    k.setp("ge", wrap, rd, S.smem_bytes)
    k.mov(rd, 0, pred=wrap)
    k.add(s, s, 1)
    again = k.reg("pred")
    k.setp("lt", again, s, count.r)
    k.bra(loop, pred=again, uni=True)

    # epilogue
    k.place(epilogue)
    deltas = _acc_deltas(S)
    m0, n0 = acc_coords(S, tid, 0, 0, 0)
    gm, gn = m_cta + m0, n_cta + n0
    cbase = ptr_c + to64(gn) * ldc + to64(gm * 4)
    row_ok = {}
    for mt in range(S.mt):
        for h in range(2):
            dm = deltas[(mt, 0, 2 * h)][0]
            p = k.reg("pred")
            k.setp("lt", p, (gm + dm).r, M.r)
            row_ok[(mt, h)] = p
    zero_f = reg("f32", 0.0)
    for nt in range(S.nt):
        for jc in range(2):
            dn = deltas[(0, nt, jc)][1]
            col_ok = k.reg("pred")
            k.setp("lt", col_ok, (gn + dn).r, N.r)
            pcol = cbase + ldc * dn if dn else cbase
            for mt in range(S.mt):
                for h in range(2):
                    i = 2 * h + jc
                    dm, dn_i = deltas[(mt, nt, i)]
                    assert dn_i == dn
                    p = k.reg("pred")
                    k.and_(p, row_ok[(mt, h)], col_ok)
                    v = acc[mt][nt][i]
                    store_touched(k, S.first, S.last, v, addr(pcol.r, 4 * dm), p, zero_f)
    k.ret()
    return GemmKernel(S, mod, k)


def split_range(part, total, split: int, div=None):
    """First K-tile (index into the flattened ``R * ceil(K/bk)`` sequence) of split-K part ``part``
    of ``split``: ``part * total // split``, so the parts differ by at most one tile and none is
    empty when ``split <= total``. ``div`` divides a register value (the generator's ``div.s32``)."""
    if div is None:
        return part * total // split
    return div(part * total, split)


def store_touched(k: Kernel, first: str, last: str, v: Reg, a, p: Reg, zero_f: Reg) -> None:
    """Epilogue of one f32 accumulator ``v`` at global address ``a`` under predicate ``p``: add the
    first touch's C (``load``: C, ``relu``: relu(C); ``zero``: nothing), apply the last touch, store."""
    if first in ("load", "relu"):
        old = k.reg("f32")
        k.mov(old, 0.0)
        k.ld("global", old, a, pred=p)
        if first == "relu":
            k.max(old, old, zero_f)
        k.add(v, v, old)
    if last == "relu":
        k.max(v, v, zero_f)
    k.st("global", a, v, pred=p)


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
    bt, rt = tables(batch_table, red_table)
    a_mem = np.ascontiguousarray(a_mem).view(np.uint8).ravel()
    b_mem = np.ascontiguousarray(b_mem).view(np.uint8).ravel()
    c_bytes = c.view(np.uint8).reshape(-1)
    stats = ModelStats()
    T = S.threads
    tids = np.arange(T, dtype=np.int64)
    kt_count = -(-k // S.bk)
    total = len(rt) * kt_count
    fplan = _fragment_plans(S)
    written = np.zeros(c.size, np.int64)
    lay_a, lay_b = S.layout_a, S.layout_b
    for zz in range(len(bt) * S.split_k):
        bz, part = divmod(zz, S.split_k)
        seq0 = split_range(part, total, S.split_k)
        count = split_range(part + 1, total, S.split_k) - seq0
        c_base = zz * n * ldc if S.split_k > 1 else bt[bz, 2]
        for bx in range(-(-m // S.bm)):
            for by in range(-(-n // S.bn)):
                m_cta, n_cta = bx * S.bm, by * S.bn
                smem = np.zeros(S.smem_bytes, np.uint8)
                acc = np.zeros((S.warps, S.mt, S.nt, 32, 4), np.float64)

                def load(s, smem=smem, m_cta=m_cta, n_cta=n_cta, bz=bz, seq0=seq0):
                    r, kt = divmod(seq0 + s, kt_count)
                    stage = (s % S.stages) * S.stage_bytes
                    k0 = kt * S.bk
                    ops = (
                        (
                            "a",
                            lay_a,
                            S.vec_a,
                            a_mem,
                            bt[bz, 0] + rt[r, 0],
                            lda,
                            *S.tile_coords("a", m_cta, n_cta, k0, m, n, k),
                            0,
                        ),
                        (
                            "b",
                            lay_b,
                            S.vec_b,
                            b_mem,
                            bt[bz, 1] + rt[r, 1],
                            ldb,
                            *S.tile_coords("b", m_cta, n_cta, k0, m, n, k),
                            lay_a.nbytes,
                        ),
                    )
                    for op, lay, vec, mem, base, ld, outer0, inner0, outer_ext, inner_ext, soff in ops:
                        for j in range(S.copies(op)):
                            row, col = copy_coords(lay, vec, T, tids, j)
                            dst = stage + soff + lay.offset(row, col)
                            outer, inner, nb = copy_src(lay, vec, row, col, outer0, inner0, outer_ext, inner_ext)
                            src = np.where(nb > 0, base + global_offset(outer, inner, ld, lay.es), base)
                            assert (dst % vec == 0).all(), "unaligned shared destination"
                            assert (src[nb > 0] % vec == 0).all(), f"{op}: unaligned global source for {vec}-byte copy"
                            for w in range(S.warps):
                                stats.note(f"store_{op}", bank_degree(dst[32 * w : 32 * w + 32], vec))
                            data = _read(mem, src, nb, vec, f"operand {op}")
                            smem[dst[:, None] + np.arange(vec)[None, :]] = data
                            stats.copies += T

                def compute(s, smem=smem, acc=acc):
                    stage = (s % S.stages) * S.stage_bytes
                    for w in range(S.warps):
                        lt = tids[32 * w : 32 * w + 32]
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
                                    acc[w, mt, nt] = _model_mma(S, afr[mt], bfr[nt], acc[w, mt, nt], exact_mma)
                                    stats.mma += 1

                for s in range(min(S.stages - 1, count)):
                    load(s)
                for s in range(count):
                    if s + S.stages - 1 < count:
                        load(s + S.stages - 1)
                    compute(s)

                # epilogue
                for mt in range(S.mt):
                    for nt in range(S.nt):
                        for i in range(4):
                            mm, nn = acc_coords(S, tids, mt, nt, i)
                            gm, gn = m_cta + mm, n_cta + nn
                            ok = (gm < m) & (gn < n)
                            off = c_base + gn.astype(np.int64) * ldc + gm * 4
                            live = off[ok]
                            if live.size and (live.min() < 0 or live.max() + 4 > c_bytes.size):
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
                            np.add.at(written, idx, 1)
    stats.written = written
    return stats


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


__all__ = [
    "ESIZE",
    "GemmKernel",
    "GeneratedKernel",
    "GemmSpec",
    "ModelStats",
    "SmemLayout",
    "Swizzle",
    "Val",
    "a_ldmatrix",
    "acc_coords",
    "b_ldmatrix",
    "bank_degree",
    "copy_coords",
    "copy_src",
    "decode",
    "default_spec",
    "encode",
    "generate",
    "global_offset",
    "choose_vec",
    "plan",
    "reference",
    "simulate",
    "tables",
    "tf32_frag",
]
