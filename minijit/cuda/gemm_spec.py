"""The mma.sync GEMM's specification: input types, touches, shared-memory layouts and swizzles, and
:class:`GemmSpec` with its defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: element size in bytes of each input type
ESIZE = {"f16": 2, "bf16": 2, "tf32": 4}
FIRST_TOUCH = ("zero", "load", "relu")  # C := 0 | C | max(C, 0), before the products are added
LAST_TOUCH = ("none", "relu")
#: largest split-K factor (CTAs per output tile)
MAX_SPLIT = 64
PARAMS = ("A", "B", "C", "batch_table", "red_table", "M", "N", "K", "R", "lda", "ldb", "ldc")


def _pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


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
