"""Packing of GEMM/BRGEMM operands: when and into which layout.

Two layouts: `plan_packing` (every target) pads A's columns so they spread over the cache sets;
`plan_panels` (x86-64 kernels, section at the end) copies A into register-row micro-panels and B
into register-column micro-panels. `TensorOperation` tries A panels first, then the padded A,
then B panels on the result. The padded layout's model:

The column-major kernels stream an A micro-panel (one register block of M rows by every K of the
prim) once per N block and expect it to stay in cache (L1, else L2). Its K columns lie ``lda``
bytes apart; when ``lda`` is a multiple of a large power of two (numpy arrays of size 512, 1024,
2048, ...) those columns map onto a few sets only, and the panel is evicted by its own columns:
every N block then re-reads A from the next level. The model below counts it per cache level:

    sets touched by K lines at stride S = n_sets / gcd(S / line, n_sets)   (S a multiple of line)
    bytes usable by the panel           = sets touched * ways * line
    panel bytes                         = min(prim M, register block) * item * prim K

Packing pays when, at L1 or L2, the conflicts leave the panel less room than it would have dense
(usable < min(panel, cache size)), the packed layout (columns `padded_column` elements apart) gives
it more room than the caller's, and the panel is re-read (prim N of at least
``MIN_REUSE_N`` columns), and always for a transposed A (unit stride in K), which the kernels
would otherwise run on their scalar path. A packed A is one buffer, copied once per ``execute`` by a
unary copy TensorOperation (which absorbs any strides and transposes): the loop dims of A in loop order,
then the BR, K and M prims, M innermost (unit stride), so every panel column is adjacent to the
next, each column padded to an odd number of cache lines so that a panel's columns spread over
every set. The copy moves |A| twice (read and write), against prim-N-fold re-reads from L2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minijit import limits
from minijit.ir import GEMM_PTYPES, Dimension, TensorConfig, dim_t, exec_t, ptype_t
from minijit.runtime import features

# the host's caches, importable from here too; this module calls them through `features` at each
# call, so a test that patches `minijit.runtime.features` reaches every user
from minijit.runtime.features import (
    DEFAULT_CACHES,
    DEFAULT_LLC_BYTES,
    CacheGeometry,
    cache_geometries,
    last_level_cache_bytes,
)

__all__ = [
    "DEFAULT_CACHES",
    "DEFAULT_LLC_BYTES",
    "CacheGeometry",
    "PackPlan",
    "PanelPlan",
    "aligned_empty",
    "cache_geometries",
    "last_level_cache_bytes",
    "llc_share",
    "padded_column",
    "plan_packing",
    "plan_panels",
    "usable_bytes",
]

#: bytes of one register block column of A the kernels keep in flight (AVX-512: 4 vectors of 64 B)
PANEL_COLUMN_BYTES = 256
#: a panel is re-read once per N block: below this prim N there is too little reuse to pack
MIN_REUSE_N = 16


@dataclass(frozen=True)
class PackPlan:
    """How to pack in0: ``copy`` (a unary copy config from the caller's A into the packed buffer),
    ``main`` (the GEMM config reading the packed buffer), the buffer's size in elements (padding
    included), and ``reason``: the model's figures that chose packing."""

    copy: TensorConfig
    main: TensorConfig
    elements: int
    reason: str

    def describe(self) -> str:
        return f"pack in0 into a buffer of {self.elements} elements, copied once per execute: {self.reason}"


def aligned_empty(
    elements: int, dtype: np.dtype, align: int = 64, *, what: str = "packing buffer", dim: int | None = None
) -> np.ndarray:
    """An uninitialized 1-D array of ``elements`` whose first element is ``align``-byte aligned (a
    packed panel column then starts a cache line: misaligned, each column touches one more line).
    SetupError(too_large) naming ``what`` (and ``dim``) when it exceeds ``minijit.limits.MAX_BYTES``."""
    dtype = np.dtype(dtype)
    limits.check_alloc(elements * dtype.itemsize + align, what, dim)
    raw = np.empty(elements * dtype.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + elements * dtype.itemsize].view(dtype)


def llc_share(threads: int | None = None) -> int:
    """Bytes of the host's last-level cache that ``threads`` threads own (default
    `minijit.parallel.default_threads`): each sharing CPU's slice (``size // sharers``,
    `CacheGeometry.shared`) times the threads, at most the whole cache. A 300 MiB L3 shared by 120
    CPUs is 40 MiB for 16 threads; a 32 MiB L3 shared by 2 is 16 MiB for one thread."""
    if threads is None:
        from minijit.parallel import default_threads  # parallel imports nothing of packing

        threads = default_threads()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    size, shared = features.last_level_cache_bytes(), features.last_level_cache_sharing()
    return min(size, max(1, size // max(1, shared)) * threads)


def usable_bytes(stride_bytes: int, geo: CacheGeometry) -> int:
    """Cache bytes that lines ``stride_bytes`` apart can occupy (all of the cache for a stride that
    is not a multiple of the line, whose lines spread over the sets)."""
    if stride_bytes % geo.line:
        return geo.size
    sets = geo.sets // math.gcd(abs(stride_bytes) // geo.line, geo.sets)
    return sets * geo.ways * geo.line


def padded_column(m: int, item: int, line: int = 64) -> int:
    """Elements between the packed buffer's K columns: ``m`` rounded up to whole cache lines, plus
    one line when that count is even, so the columns of a panel spread over every set (an odd
    number of lines is coprime with any power-of-two set count). Columns under a line stay dense."""
    if m * item <= line or line % item:
        return m
    lines = -(-m * item // line)
    return (lines + 1 - lines % 2) * line // item


def plan_packing(config: TensorConfig, caches: tuple[CacheGeometry, ...] | None = None) -> PackPlan | None:
    """The packing of in0 for a GEMM/BRGEMM config with prim dims, or None when it does not pay
    (see the module docstring for the model); ``caches``: L1 and L2 (default: the host's)."""
    if config.prim_main not in GEMM_PTYPES or not config.has_prims:
        return None
    caches = caches or features.cache_geometries()
    dims, p = config.dims, config.prim
    if p.m is None or p.k is None or p.n is None or dims[p.n].size < MIN_REUSE_N:
        return None
    item = config.dtype.itemsize
    m, k = dims[p.m], dims[p.k]
    if k.size < 2:
        return None
    column = padded_column(m.size, item, caches[0].line)  # the packed K stride (elements)
    if m.size > 1 and m.stride_in0 != 1:
        reason = "A is transposed (unit stride in K): packed, the vector kernel replaces the scalar one"
    else:
        panel, stride = min(m.size * item, PANEL_COLUMN_BYTES) * k.size, k.stride_in0 * item
        packed_stride = column * item
        room = [
            (f"L{level}", usable_bytes(stride, geo), usable_bytes(packed_stride, geo), geo.size)
            for level, geo in enumerate(caches, 1)
        ]
        # a level where conflicts squeeze the panel and the packed layout gives it more room
        tight = [(name, use, new) for name, use, new, size in room if use < min(panel, size) and new > use]
        if not tight:
            return None
        name, use, new = tight[0]
        reason = (
            f"A micro-panel of {panel} B, columns {stride} B apart, can use {use} B of {name}; packed "
            f"({packed_stride} B apart) {new} B"
        )
    # packed order, outermost first: A's loop dims in loop order, then BR, K, M (unit stride); the
    # K columns are `column` elements apart (M padded to an odd number of cache lines)
    prim_order = [i for i in (p.br, p.k, p.m) if i is not None]
    loops = [i for i, d in enumerate(dims) if d.exec is not exec_t.prim and d.stride_in0 != 0 and d.size > 1]
    packed: dict[int, int] = {}
    size = 1
    for i in reversed(loops + prim_order):
        packed[i] = size
        size *= column if i == p.m else dims[i].size
    main = config.with_dims([d.with_(stride_in0=packed.get(i, 0)) for i, d in enumerate(dims)])
    copy_dims = [
        Dimension(dim_t.c, exec_t.undefined, dims[i].size, dims[i].stride_in0, 0, packed[i]) for i in loops + prim_order
    ]
    copy = TensorConfig(config.dtype, ptype_t.none, ptype_t.copy, ptype_t.none, tuple(copy_dims))
    return PackPlan(copy, main, size, reason)


# -- micro-panels (x86-64): A in panels of register rows, B in panels of register columns -----------
#: below this many rows of M (for B; columns of N for A) in all, an element is used too few times
#: for its copy to pay
PANEL_REUSE_M = 64
PANEL_REUSE_N = 64


def reachable_bytes(run_bytes: int, stride_bytes: int, geo: CacheGeometry) -> int:
    """Cache bytes that contiguous runs of ``run_bytes``, ``stride_bytes`` apart, can occupy: the
    runs start in ``sets / gcd(stride lines, sets)`` sets and each covers ``run lines`` more."""
    if stride_bytes % geo.line:
        return geo.size
    lines = max(1, -(-run_bytes // geo.line))
    starts = geo.sets // math.gcd(abs(stride_bytes) // geo.line, geo.sets)
    return min(geo.sets, starts * lines) * geo.ways * geo.line


@dataclass(frozen=True)
class PanelPlan:
    """How to pack one GEMM operand (``tensor``: "in0" = A or "in1" = B) into the x86-64 kernels'
    micro-panels (`minijit.kernels.x86_64.brgemm` ``a_panel`` / ``b_panel``): panel ``p`` starts
    ``panel * p`` elements into the buffer and holds, for each BR step and K row, ``width``
    adjacent elements of the panel dim (A: M rows, B: N columns).

    ``copies``: unary copy configs from the caller's operand into the buffer, each with the element
    offsets (source, buffer) of its first element (full panels, then the remainder panel).
    ``main``: the GEMM config on the buffer (prim K stride = ``width``, panel dim stride 1 within a
    panel; the kernel adds ``panel`` per panel). ``elements``: buffer size. ``reason``: the model's
    figures."""

    tensor: str
    copies: tuple[tuple[TensorConfig, int, int], ...]
    main: TensorConfig
    width: int
    panel: int
    elements: int
    reason: str

    def describe(self) -> str:
        what = "rows of M" if self.tensor == "in0" else "columns of N"
        return (
            f"pack {self.tensor} into micro-panels of {self.width} {what} ({self.elements} elements, "
            f"{len(self.copies)} copies per execute): {self.reason}"
        )


#: the K rows one call of a streamed A copy fills in one panel (`plan_panels`); the largest divisor
#: of prim K up to this, at least `STREAM_MIN_ROWS`
STREAM_MAX_ROWS = 64
STREAM_MIN_ROWS = 16


def stream_rows(k: int) -> int | None:
    """The K rows per call of a streamed A panel copy: the largest divisor of ``k`` in
    [`STREAM_MIN_ROWS`, `STREAM_MAX_ROWS`], or None."""
    return next((r for r in range(min(k, STREAM_MAX_ROWS), STREAM_MIN_ROWS - 1, -1) if k % r == 0), None)


def _b_panel_reason(config: TensorConfig, l2: CacheGeometry, llc_bytes: int | None) -> str | None:
    """Why B's micro-panels pay (`plan_panels`), or None where they do not: the B block (every
    BR step's prim K x prim N) can use less of ``l2`` than it needs, and a column-major B takes
    half of the last-level cache (``llc_bytes``, default the part the threads own, `llc_share`) or more."""
    dims, p, item = config.dims, config.prim, config.dtype.itemsize
    k, pd = dims[p.k], dims[p.n]
    br_size = dims[p.br].size if p.br is not None else 1
    run_dim, other = (k, pd) if k.stride_in1 == 1 else (pd, k)
    block = br_size * k.size * pd.size * item  # what one M block reads (every BR step's B)
    room = reachable_bytes(run_dim.size * item, other.stride_in1 * item, l2)
    if room >= min(block, l2.size):
        return None
    runs = f"{run_dim.size * item} B runs {other.stride_in1 * item} B apart"
    reason = f"B block of {block} B ({runs}) can use {room} B of L2"
    if k.stride_in1 == 1:  # column-major B: only when the last-level cache cannot hold it well
        lo, hi = config.offset_range("in1")
        b_bytes, llc = (hi - lo + 1) * item, llc_share() if llc_bytes is None else llc_bytes
        if b_bytes < llc // 2:
            return None  # the kernel re-reads the block from the last-level cache, no copy
        reason += f", and B ({b_bytes} B) takes half the last-level cache ({llc} B) or more"
    return reason + "; packed it is one stream"


def plan_panels(
    config: TensorConfig,
    width: int,
    caches: tuple[CacheGeometry, ...] | None = None,
    tensor: str = "in1",
    llc_bytes: int | None = None,
    min_reuse: int | None = None,
) -> PanelPlan | None:
    """The micro-panel packing of ``tensor`` for a GEMM/BRGEMM config with prim dims, or None.

    B ("in1"): the B block (every BR step's prim K x prim N) is re-read once per register block
    of M; packed, it is one sequential stream that fills L2 without conflicts. It pays when the
    caller's layout lets the block use less of L2 than it needs and every B element is used by at
    least `PANEL_REUSE_M` rows of M in all; for a column-major B (unit stride in K) only when B
    takes half of the last-level cache (``llc_bytes``; default `llc_share`: the slices of the
    sharing CPUs the threads own, not the whole cache) or more. Below that the prefetchers stream
    the block's columns from the last-level cache as fast as the kernel needs them, and the copy
    pass costs more than it saves (bench/results/model_constants_measurements.md).
    A ("in0"): each register block's A is one contiguous stream (a few pages, no TLB misses, no
    set conflicts) instead of K columns of the caller's stride; it pays when every A element is
    used by at least `PANEL_REUSE_N` columns of N in all (``min_reuse`` where given: a chunked
    operation's A is copied from memory in any case) and the prim M holds a full panel.

    The copy of an A with unit-stride M reads each A column whole and scatters it over every
    panel, one cache line each, when A and its buffer fit half of the last-level cache
    (``llc_bytes``, default `llc_share`). Beyond that the scattered lines go to memory in as
    many streams as there are panels, so the copy is streamed instead: the outer loop walks K in
    chunks of `stream_rows` rows, and each call fills those rows of one panel, one contiguous run.
    """
    if tensor not in ("in0", "in1"):
        raise ValueError(f"tensor must be 'in0' or 'in1', got {tensor!r}")
    if config.prim_main not in GEMM_PTYPES or not config.has_prims or width < 1:
        return None
    caches = caches or features.cache_geometries()
    dims, p = config.dims, config.prim
    if p.m is None or p.k is None or p.n is None:
        return None
    t = 0 if tensor == "in0" else 1
    item = config.dtype.itemsize
    k = dims[p.k]
    pdim = p.m if t == 0 else p.n  # the panel dim
    pd = dims[pdim]
    reuse_type = dim_t.n if t == 0 else dim_t.m
    reuse = math.prod(d.size for d in dims if d.type is reuse_type and d.strides[t] == 0)
    br_size = dims[p.br].size if p.br is not None else 1
    if min_reuse is None:
        min_reuse = PANEL_REUSE_N if t == 0 else PANEL_REUSE_M
    if pd.size < width or k.size < 4 or reuse < min_reuse:
        return None
    if pd.strides[t] != 1 and k.strides[t] != 1:
        return None  # no unit stride: the kernels cannot read it (setup reports that)
    if t == 0:
        reason = f"each {width}-row block of A becomes one {width * k.size * item} B stream ({reuse} columns reuse it)"
    else:
        reason = _b_panel_reason(config, caches[-1], llc_bytes)
        if reason is None:
            return None
    # buffer order, outermost first: the operand's loop dims in loop order, panels, BR, K, width
    loops = [i for i, d in enumerate(dims) if d.exec is not exec_t.prim and d.strides[t] != 0 and d.size > 1]
    panels, rem = divmod(pd.size, width)
    panel = br_size * k.size * width
    packed: dict[int, int] = {}
    size = (panels + (rem > 0)) * panel
    for i in reversed(loops):
        packed[i] = size
        size *= dims[i].size
    packed[p.k], packed[pdim] = width, 1
    if p.br is not None:
        packed[p.br] = k.size * width
    key = "stride_in0" if t == 0 else "stride_in1"
    main = config.with_dims([d.with_(**{key: packed.get(i, 0)}) for i, d in enumerate(dims)])

    # B with unit-stride N (row-major B): the copy's prims are K and the panel's columns, so one
    # call fills one panel's contiguous rows (x86-64 stores them with unmasked vectors, `dense_b`);
    # left to the optimizer it would copy 6-element runs into a different panel each
    rows_prim = t == 1 and pd.strides[t] == 1
    # A with unit-stride M too large for the last-level cache: K chunks outermost, each call fills
    # `chunk` rows of one panel (a contiguous run) instead of scattering a column over every panel
    chunk = None
    if t == 0 and pd.strides[t] == 1:
        llc = llc_share() if llc_bytes is None else llc_bytes
        if 2 * size * item > llc // 2:  # A (about the buffer's size) and the buffer
            chunk = stream_rows(k.size)

    def copy(count: int, n_panels: int) -> TensorConfig:
        """Loop dims, then (the full panels), BR, K and ``count`` elements of the panel dim."""
        fixed = rows_prim or chunk is not None
        loop_exec = exec_t.seq if fixed else exec_t.undefined
        out = [Dimension(dim_t.c, loop_exec, dims[i].size, dims[i].strides[t], 0, packed[i]) for i in loops]
        inner = (p.br, p.k, pdim)
        if chunk is not None:  # BR and K chunks outermost (after A's loops), panels inside them
            if p.br is not None:
                out.append(Dimension(dim_t.c, loop_exec, br_size, dims[p.br].strides[t], 0, packed[p.br]))
            out.append(Dimension(dim_t.c, loop_exec, k.size // chunk, chunk * k.strides[t], 0, chunk * width))
            inner = (p.k, pdim)
        if n_panels:
            out.append(Dimension(dim_t.c, loop_exec, n_panels, width * pd.strides[t], 0, panel))
        for i in inner:
            if i is not None:
                size_i = count if i == pdim else chunk if i == p.k and chunk is not None else dims[i].size
                ex = exec_t.prim if fixed and i in (p.k, pdim) else loop_exec
                out.append(Dimension(dim_t.c, ex, size_i, dims[i].strides[t], 0, packed[i]))
        return TensorConfig(config.dtype, ptype_t.none, ptype_t.copy, ptype_t.none, tuple(out))

    copies = []
    if panels:
        copies.append((copy(width, panels), 0, 0))
    if rem:
        copies.append((copy(rem, 0), panels * width * pd.strides[t], panels * panel))
    return PanelPlan(tensor, tuple(copies), main, width, panel, size, reason)
