"""Packing of the A operand (in0) of a GEMM/BRGEMM: when and into which layout.

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
import os
from dataclasses import dataclass
from functools import cache

from minijit.ir import GEMM_PTYPES, Dimension, TensorConfig, dim_t, exec_t, ptype_t

#: bytes of one register block column of A the kernels keep in flight (AVX-512: 4 vectors of 64 B)
PANEL_COLUMN_BYTES = 256
#: a panel is re-read once per N block: below this prim N there is too little reuse to pack
MIN_REUSE_N = 16


@dataclass(frozen=True)
class CacheGeometry:
    """Data cache geometry (bytes): total size, associativity, line size."""

    size: int = 32 * 1024
    ways: int = 8
    line: int = 64

    @property
    def sets(self) -> int:
        return max(1, self.size // (self.ways * self.line))


#: used where sysfs does not tell: L1 32 KiB 8-way, L2 1 MiB 16-way, 64-byte lines
DEFAULT_CACHES = (CacheGeometry(32 * 1024, 8, 64), CacheGeometry(1024 * 1024, 16, 64))


@cache
def cache_geometries() -> tuple[CacheGeometry, CacheGeometry]:
    """The host's L1 data and L2 caches (Linux sysfs of cpu0), else `DEFAULT_CACHES`."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    found: dict[int, CacheGeometry] = {}
    try:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            if not entry.startswith("index"):
                continue

            def read(name: str, path: str = path) -> str:
                with open(os.path.join(path, name)) as f:
                    return f.read().strip()

            level = int(read("level"))
            if level in (1, 2) and read("type") in ("Data", "Unified"):
                size = read("size").upper()
                scale = 1024 if size.endswith("K") else 1024 * 1024 if size.endswith("M") else 1
                ways, line = int(read("ways_of_associativity")), int(read("coherency_line_size"))
                found[level] = CacheGeometry(int(size.rstrip("KM")) * scale, ways, line)
    except (OSError, ValueError):
        pass
    return found.get(1, DEFAULT_CACHES[0]), found.get(2, DEFAULT_CACHES[1])


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
    caches = caches or cache_geometries()
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
