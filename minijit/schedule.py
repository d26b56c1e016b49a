"""Execution-mode choices of `minijit.plan.build`: which operand layouts, kernel options and
chunks a configuration runs with, each asked of the target's capabilities
(`minijit.targets.CpuTarget`) and the host's caches (`minijit.runtime.features`).

- `too_small_to_split`: the operation runs on the calling thread.
- `one_column`: a GEMV kernel reads A once; no copy of an operand pays.
- `panel_layout` / `padded_layout`: operands copied into micro-panels (`packs_panels` targets) or a
  padded A (`minijit.packing`), once per call.
- `kernel_n_outer` / `kernel_copies_a`: the BRGEMM walks its N blocks outermost, or packs A itself.
- `a_chunks` (`k_chunks` first): a large A runs in chunks, each chunk's A packed and computed
  while it is in the cache.

`Rules` switches single rules off, so that a benchmark can set up the alternative
(`bench/gemm_chunks.py`, `bench/gemm_order.py`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass

from minijit import packing
from minijit.ir import GEMM_PTYPES, Dimension, TensorConfig, dim_t, exec_t
from minijit.runtime import features
from minijit.targets import CpuTarget, uarch

#: GEMM/BRGEMM operations with fewer multiply-adds than this run on the calling thread only.
PARALLEL_MIN_ELEMENTS = 1 << 20
#: elementwise operations (copies, packing passes) moving fewer bytes (read + written) than this
#: run on the calling thread only
PARALLEL_MIN_BYTES = 1 << 20
# (the measurements behind these constants: bench/results/model_constants_measurements.md)
#: the kernel packs A itself (``a_copy``) only when at most this many kernel calls read each A block
A_COPY_MAX_REUSE = 4
#: ``n_outer`` kernels: the least bytes of C a call walks down each column (prim M x item), and
#: the share of its thread's slice of the last-level cache (`minijit.packing.llc_share` per thread)
#: the call's A block may take (a quarter of a Zen 3 core's 16 MiB: 4 MiB, as 1/8 of the whole
#: 32 MiB was when it was measured)
N_OUTER_MIN_RUN, N_OUTER_SLICE_SHARE = 2048, 4
#: chunked execution: the largest share of the last-level cache one chunk's A may take, and the
#: most the whole B may take (it is re-read by every chunk)
CHUNK_LLC_SHARE = 8
#: K chunks: the largest share of the last-level cache one chunk's A may take, and the most C may
#: take (every chunk reads and writes all of C)
K_CHUNK_LLC_SHARE, K_CHUNK_OUT_SHARE = 4, 16
#: a chunk's A is packed into micro-panels from this many columns of N that reuse it (it is copied
#: from memory in any case; `minijit.packing.PANEL_REUSE_N` elsewhere)
CHUNK_PANEL_REUSE_N = 1


@dataclass(frozen=True)
class Rules:
    """Which of setup's rules may apply (all but ``grid`` by default): ``chunks`` (`a_chunks`),
    ``k_chunks`` (K chunks before M chunks), ``n_outer`` (`kernel_n_outer`), ``a_copy``
    (`kernel_copies_a`); ``grid`` (opt-in): a threaded GEMM's shared loops are the model's grid
    (`grid_loops`) instead of `minijit.optimizer.create_shared_loops`' (unmeasured on many cores)."""

    chunks: bool = True
    k_chunks: bool = True
    n_outer: bool = True
    a_copy: bool = True
    grid: bool = False


#: every rule on
DEFAULT_RULES = Rules()


@dataclass(frozen=True)
class ChunkChoice:
    """Run ``config`` (the caller's, or with leading loop dims merged) in ``count`` chunks of
    ``size`` indices of its dim ``dim``; ``kind`` "K" (a K dim, in order) or "M" (the outermost
    loop dim, chunks independent)."""

    config: TensorConfig
    kind: str
    dim: int
    size: int
    count: int


def _reach_bytes(config: TensorConfig, tensor: str) -> int:
    """Bytes from the first to the last element of ``tensor`` that ``config`` reaches."""
    lo, hi = config.offset_range(tensor)
    return (hi - lo + 1) * config.dtype.itemsize


def _prim_size(config: TensorConfig, role: int | None) -> int:
    return 1 if role is None else config.dims[role].size


def too_small_to_split(config: TensorConfig) -> bool:
    """Whether ``config`` runs faster on the calling thread than split over a team: GEMMs by their
    multiply-adds (`PARALLEL_MIN_ELEMENTS`), elementwise ops by the bytes they read and write
    (`PARALLEL_MIN_BYTES`)."""
    if config.prim_main in GEMM_PTYPES:
        return config.num_elements() < PARALLEL_MIN_ELEMENTS
    tensors = 1 + config.uses_in0 + config.uses_in1  # out, and the inputs it reads
    return config.num_elements() * config.dtype.itemsize * tensors < PARALLEL_MIN_BYTES


def one_column(config: TensorConfig, target: CpuTarget) -> bool:
    """Whether ``config`` is a GEMM/BRGEMM whose N dims all have size 1 on a target with a GEMV
    kernel: it reads each element of A once, in sequential streams, so no copy of an operand pays
    (no panels, padding or chunks)."""
    if not target.has_gemv or config.prim_main not in GEMM_PTYPES:
        return False
    return math.prod(d.size for d in config.dims if d.type is dim_t.n) == 1


def panel_layout(
    config: TensorConfig, tensor: str, target: CpuTarget, *, in_chunk: bool = False, threads: int | None = None
) -> packing.PanelPlan | None:
    """The micro-panel packing of ``tensor`` ("in0" or "in1") on a target that packs panels
    (`minijit.packing.plan_panels`, A rows `panel_rows`, B columns `panel_width`); a chunk's A
    (``in_chunk``) from `CHUNK_PANEL_REUSE_N` columns of reuse; the last-level cache counted is
    the part ``threads`` threads own (`minijit.packing.llc_share`). None where it does not pay."""
    if not target.packs_panels:
        return None
    width = target.panel_rows(config.dtype.name) if tensor == "in0" else target.panel_width()
    reuse = CHUNK_PANEL_REUSE_N if in_chunk and tensor == "in0" else None
    return packing.plan_panels(config, width, tensor=tensor, min_reuse=reuse, llc_bytes=packing.llc_share(threads))


def padded_layout(config: TensorConfig) -> packing.PackPlan | None:
    """The padded A of `minijit.packing.plan_packing` (every target), or None."""
    return packing.plan_packing(config)


def kernel_n_outer(
    config: TensorConfig,
    target: CpuTarget | None = None,
    *,
    in_chunk: bool = False,
    rules: Rules = DEFAULT_RULES,
    threads: int | None = None,
) -> bool:
    """Whether the BRGEMM kernel, its A in micro-panels, should walk its N blocks outermost (the
    BLIS order): C is then read and written down its columns in runs of `N_OUTER_MIN_RUN` bytes or
    more, which the prefetchers stream, and the call's whole A block (prim M x K x BR), re-read
    once per block of columns by the thread that runs the call, must stay within
    1/`N_OUTER_SLICE_SHARE` of that thread's slice of the last-level cache (of ``threads`` threads,
    `minijit.packing.llc_share`). An A block beyond half of L2 is re-read from that cache, at
    `n_outer_stream` bytes per cycle: it must not exceed what one core streams from there
    (`minijit.targets.uarch`). Never in a chunk (its A, just packed, is read once in the
    M-outer order). ``target``: default the host's (`minijit.targets.native`)."""
    roles = config.prim
    if in_chunk or not rules.n_outer or roles.m is None or roles.n is None:
        return False
    item = config.dtype.itemsize
    m, k, br = (_prim_size(config, r) for r in (roles.m, roles.k, roles.br))
    if threads is None:
        from minijit.parallel import default_threads  # parallel imports nothing of schedule

        threads = default_threads()
    slice_ = packing.llc_share(threads) // threads
    block = m * k * br * item
    if m * item < N_OUTER_MIN_RUN or block > slice_ // N_OUTER_SLICE_SHARE:
        return False
    from_llc = block > features.cache_geometries()[1].size // 2
    if target is None:
        from minijit import targets

        target = targets.native()
    return not from_llc or n_outer_stream(target) <= uarch.core_model().llc_stream


def n_outer_stream(target: CpuTarget) -> float:
    """Bytes per cycle an ``n_outer`` kernel re-reads its A block at full speed: each A element
    feeds one register block's ``panel_width`` columns, so the core's multiply-add operand rate
    (`minijit.targets.uarch.CoreModel.fma_rate`) divided by that width."""
    return uarch.core_model().fma_rate(target.isa) / target.panel_width()


def kernel_copies_a(
    config: TensorConfig, target: CpuTarget, *, in_chunk: bool = False, rules: Rules = DEFAULT_RULES
) -> bool:
    """Whether the BRGEMM should pack A itself (``a_copy``) instead of a copy pass into
    micro-panels: the target's kernel can (``copies_a``, `CpuTarget.a_copy_fits`), the prim M has
    unit stride in in0, one call's A (prim M x K x BR) takes at most half of L2, and at most
    `A_COPY_MAX_REUSE` calls read the same A block. The kernel reads the caller's A once per call
    in strided columns, which hides behind the FMAs from L2 but not from further out; a panel copy
    made once serves every call that re-reads A. Never in a chunk (its A comes from memory)."""
    roles, dims = config.prim, config.dims
    if in_chunk or not rules.a_copy or not target.copies_a or roles.m is None:
        return False
    m, n, k, br = (_prim_size(config, r) for r in (roles.m, roles.n, roles.k, roles.br))
    if m > 1 and dims[roles.m].stride_in0 != 1:
        return False
    block = m * k * br * config.dtype.itemsize
    reuse = math.prod(d.size for d in config.loop_dims if d.stride_in0 == 0)
    if block > features.cache_geometries()[1].size // 2 or reuse > A_COPY_MAX_REUSE:
        return False
    return target.a_copy_fits(m, n, k, br, config.dtype.name)


def a_chunks(
    config: TensorConfig, target: CpuTarget, rules: Rules = DEFAULT_RULES, *, threads: int | None = None
) -> ChunkChoice | None:
    """The chunks ``config`` should run in, or None. Taken on targets that chunk (``chunks_a``)
    when A (in0) is larger than half of the last-level cache and B (in1) takes at most
    1/`CHUNK_LLC_SHARE` of it: packing all of A first writes the packed copy to memory and the
    kernels read it back, where a chunk's A block is packed into a buffer that stays in the cache.

    K chunks (`k_chunks`) are tried first. M chunks (A packed, micro-panels or padded): chunks of
    the outermost loop dim, an M dim that B does not walk (A is then read once, chunk by chunk),
    one index of it reading at most the share of A; the leading loop dims that split one dim (such
    as the threads' shared dim) are merged back into one first. The last-level cache counted is
    the part ``threads`` threads own (`minijit.packing.llc_share`), not the whole shared cache."""
    if not rules.chunks or not target.chunks_a or config.prim_main not in GEMM_PTYPES:
        return None
    if config.prim.m is None or config.prim.n is None:
        return None
    rows = target.panel_rows(config.dtype.name)
    llc = packing.llc_share(threads)
    a_bytes, b_bytes = (_reach_bytes(config, t) for t in ("in0", "in1"))
    if a_bytes <= llc // 2 or b_bytes > llc // CHUNK_LLC_SHARE:
        return None
    k = k_chunks(config, rows, llc) if rules.k_chunks else None
    if k is not None:
        return ChunkChoice(config, "K", *k)
    if packing.plan_panels(config, rows, tensor="in0") is None and packing.plan_packing(config) is None:
        return None  # A is not packed: nothing to keep in the cache
    return _m_chunks(config, a_bytes, llc)


def _m_chunks(config: TensorConfig, a_bytes: int, llc: int) -> ChunkChoice | None:
    """M chunks of ``config`` (see `a_chunks`), its leading split loop dims merged first."""
    dims = list(config.dims)
    outer = next((i for i, d in enumerate(dims) if d.exec is not exec_t.prim), None)
    if outer is None:
        return None
    while outer + 1 < len(dims) and dims[outer + 1].exec is not exec_t.prim:
        d, e = dims[outer], dims[outer + 1]
        if d.type is not e.type or any(s != e.size * t for s, t in zip(d.strides, e.strides, strict=True)):
            break
        dims[outer : outer + 2] = [e.with_(size=d.size * e.size, exec=exec_t.seq)]
    config = config.with_dims(dims)
    d = dims[outer]
    if d.type is not dim_t.m or d.stride_in1 != 0 or d.stride_in0 == 0 or d.size < 2:
        return None
    share, block = llc // CHUNK_LLC_SHARE, a_bytes // d.size  # block: the A of one index of the dim
    # c * block <= share bounds the candidates by the cache, not by the dim (a dim of 2**44 indices)
    top = min(d.size - 1, share // max(block, 1))
    fits = [c for c in range(1, top + 1) if d.size % c == 0]
    if not fits:  # one index alone is over the share (a prim M of 1024 rows of a 4096-deep A)
        return None
    return ChunkChoice(config, "M", outer, max(fits), d.size // max(fits))


def k_chunks(config: TensorConfig, rows: int, llc: int) -> tuple[int, int, int] | None:
    """``(dim, size, count)``: K chunks of ``config`` (see `a_chunks`), or None. The chunked dim
    is the K dim (a loop or the BR dim; not the prim K) with the largest A stride; a chunk of it is
    the largest divisor of its size whose A block takes at most 1/`K_CHUNK_LLC_SHARE` of the
    last-level cache (``llc`` bytes) and is one contiguous run (A's M extent is its whole leading
    dimension); C takes at most 1/`K_CHUNK_OUT_SHARE` of it (every chunk reads and writes all of
    C), and the chunk's A is packed into micro-panels of ``rows`` rows. The chunks run in order
    (first touch on the first, last touch on the last), each on every thread."""
    if _reach_bytes(config, "out") > llc // K_CHUNK_OUT_SHARE:
        return None
    dims, prim = config.dims, config.prim
    ks = [i for i, d in enumerate(dims) if d.type is dim_t.k and i != prim.k and d.size > 1]
    if not ks:
        return None
    dim = max(ks, key=lambda i: abs(dims[i].stride_in0))
    d = dims[dim]
    # a chunk of c indices reaches at least (c - 1) * |stride| + 1 elements of A: candidates past the
    # share cannot fit, so the search is bounded by the cache, not by the dim
    step = abs(d.stride_in0) * config.dtype.itemsize
    top = d.size - 1 if step == 0 else min(d.size - 1, llc // K_CHUNK_LLC_SHARE // step + 1)
    if top > 1 << 24:  # A does not walk this dim: no chunk of it is smaller than another
        return None
    for size in sorted((c for c in range(1, top + 1) if d.size % c == 0), reverse=True):
        part = config.with_dims([d.with_(size=size) if i == dim else e for i, e in enumerate(dims)])
        a_bytes = _reach_bytes(part, "in0")
        if a_bytes > llc // K_CHUNK_LLC_SHARE:
            continue
        dense = math.prod(e.size for e in part.dims if e.stride_in0 != 0) * config.dtype.itemsize
        if a_bytes != dense or packing.plan_panels(part, rows, tensor="in0", min_reuse=CHUNK_PANEL_REUSE_N) is None:
            return None  # A's chunk has gaps (a padded leading dim), or would not be panel-packed
        return dim, size, d.size // size
    return None


# -- the threads' grid over the macro tiles ----------------------------------------------------------
#: a core's share of the memory bandwidth, bytes per cycle (a socket's channels shared by its cores:
#: 8 B/cycle is about 20 GB/s per core at 2.5 GHz)
MEM_FILL = 8.0
#: bytes of FMA operands one core consumes per cycle (two 64-byte FMAs): a tile's compute time
FMA_BYTES = 128.0
#: the share of the threads' last-level cache a B panel that every thread reads may take (the rest
#: holds the threads' A rows and C)
SHARED_B_LLC_SHARE = 0.5
PANELS = ("shared", "private")


def _part(total: int, parts: int, i: int) -> range:
    """Part ``i`` of ``total`` items split into ``parts`` contiguous runs, larger ones first."""
    base, extra = divmod(total, parts)
    begin = i * base + min(i, extra)
    return range(begin, begin + base + (i < extra))


@dataclass(frozen=True)
class ThreadGrid:
    """The threads' partition of a GEMM's macro-tile space, ``tiles_m`` x ``tiles_n`` blocks of
    prim M x prim N: a grid of ``p_m`` x ``p_n`` threads, thread ``t`` owning the tile rows
    ``rows(t // p_n)`` and columns ``cols(t % p_n)`` (contiguous runs whose sizes differ by at most
    one). ``panel``: "shared" (one packed B in the last-level cache that the threads share, read by
    every thread) or "private" (each thread streams its own rows of A and columns of B).
    ``working_set``: bytes the choice keeps in the cache (the shared B panel, or one thread's A rows
    and B columns), within ``budget`` bytes of ``level`` where ``fits``; ``reason``: the figures;
    ``cost``: the modelled cycles of its largest thread."""

    tiles_m: int
    tiles_n: int
    p_m: int
    p_n: int
    panel: str
    working_set: int
    budget: int
    level: str
    reason: str
    cost: float = 0.0

    @property
    def threads(self) -> int:
        """Threads the grid uses (``p_m * p_n``)."""
        return self.p_m * self.p_n

    @property
    def fits(self) -> bool:
        """Whether the working set fits its budget."""
        return self.working_set <= self.budget

    def rows(self, i: int) -> range:
        """Tile rows (M blocks) of grid row ``i``."""
        if not 0 <= i < self.p_m:
            raise ValueError(f"grid row must be in [0, {self.p_m}), got {i}")
        return _part(self.tiles_m, self.p_m, i)

    def cols(self, j: int) -> range:
        """Tile columns (N blocks) of grid column ``j``."""
        if not 0 <= j < self.p_n:
            raise ValueError(f"grid column must be in [0, {self.p_n}), got {j}")
        return _part(self.tiles_n, self.p_n, j)

    def tiles(self, t: int) -> tuple[range, range]:
        """(tile rows, tile columns) of thread ``t``."""
        if not 0 <= t < self.threads:
            raise ValueError(f"thread must be in [0, {self.threads}), got {t}")
        i, j = divmod(t, self.p_n)
        return self.rows(i), self.cols(j)

    def describe(self) -> str:
        return (
            f"thread grid {self.p_m} x {self.p_n} (M x N) over {self.tiles_m} x {self.tiles_n} macro tiles, "
            f"{self.panel} B panel: {self.reason}"
        )


def host_llc() -> features.CacheGeometry:
    """The host's last-level cache: its size and sharers (`minijit.runtime.features`)."""
    return features.CacheGeometry(features.last_level_cache_bytes(), 16, 64, features.last_level_cache_sharing())


def choose_grid(
    shape: tuple[int, int, int],
    block: tuple[int, int, int],
    item: int,
    threads: int,
    *,
    mr: int = 16,
    l2: features.CacheGeometry | None = None,
    llc: features.CacheGeometry | None = None,
    grids: Collection[tuple[int, int]] | None = None,
) -> ThreadGrid:
    """The thread grid and B panel for a GEMM of ``shape`` = (M, N, K) elements of ``item`` bytes
    in prims of ``block`` = (mc, nc, kc) on up to ``threads`` threads (``mr``-row register blocks;
    caches: ``l2`` per core and the last-level ``llc`` with its sharers, default the host's).

    Seed 001's transfer count, one level above `minijit.blocking`'s: ``p_m`` x ``p_n`` threads own
    the last-level cache slices of ``p_m * p_n`` sharing CPUs (`CacheGeometry.per_cpu`) and share
    the memory bandwidth (`MEM_FILL` each). A shared B panel (packed once, every thread reads it
    from the shared cache) needs B within `SHARED_B_LLC_SHARE` of those slices; memory then moves
    A + B + C once. Private parts move A once per grid column and B once per grid row
    (``A p_n + B p_m + C``), each again per N (M) block of the thread when a thread's A rows (B
    columns) do not fit its L2 and slice. Each candidate's time is its largest thread's: compute
    (`FMA_BYTES`), its `minijit.blocking.transfer_cycles`, plus the memory cycles; the cheapest
    wins (then the fewer threads, the shared panel, the fewer grid columns). ``grids``: the
    (p_m, p_n) candidates, default every grid of up to ``threads`` threads within the tiles."""
    if len(shape) != 3 or len(block) != 3:
        raise ValueError(f"choose_grid: shape and block must be (M, N, K) triples, got {shape!r}, {block!r}")
    named = [("item", item), ("threads", threads), ("mr", mr)]
    named += [*zip(("M", "N", "K"), shape, strict=True), *zip(("mc", "nc", "kc"), block, strict=True)]
    for name, value in named:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"choose_grid: {name} must be a positive int, got {value!r}")
    from minijit.blocking import transfer_cycles  # blocking imports nothing of schedule

    l2 = l2 or features.cache_geometries()[1]
    llc = llc or host_llc()
    (m, n, k), (mc, nc, kc) = shape, block
    tm, tn = -(-m // mc), -(-n // nc)
    a, b, c = m * k * item, k * n * item, 2 * m * n * item
    best: tuple[tuple, ThreadGrid] | None = None
    if grids is None:
        grids = [(p_m, p_n) for p_m in range(1, min(tm, threads) + 1) for p_n in range(1, min(tn, threads // p_m) + 1)]
    for p_m, p_n in grids:
        if not (1 <= p_m <= tm and 1 <= p_n <= tn and p_m * p_n <= threads):
            raise ValueError(f"choose_grid: grid {p_m} x {p_n} is not within {tm} x {tn} tiles and {threads} threads")
        t = p_m * p_n
        rows, cols = -(-tm // p_m), -(-tn // p_n)  # the largest thread's tiles
        mt, nt = min(m, rows * mc), min(n, cols * nc)
        own = min(llc.size, llc.per_cpu * t)  # the last-level cache these threads own
        per_thread = l2.size + own // t
        a_part, b_part = mt * k * item, k * nt * item
        work = mt * nt * k * item / FMA_BYTES + sum(transfer_cycles((mt, nt, k), (mc, nc, min(kc, k)), mr, item))
        a_reads = 1 if a_part <= per_thread else cols  # A rows re-read per N block past the cache
        for panel in PANELS:
            if panel == "shared":
                ws, budget, level = b, int(own * SHARED_B_LLC_SHARE), f"{own} B of the last-level cache"
                if ws > budget:
                    continue
                mem = a * a_reads + b + c
            else:
                ws, budget, level = a_part + b_part, per_thread, f"L2 {l2.size} B + {own // t} B of L3"
                b_reads = 1 if ws <= per_thread else rows
                mem = a * p_n * a_reads + b * p_m * b_reads + c
            cost = work + mem / (MEM_FILL * t)
            key = (cost, t, panel != "shared", p_n)
            if best is None or key < best[0]:
                reason = (
                    f"{t} thread(s), the largest {rows} x {cols} tiles ({mt} x {nt}); working set {ws} B "
                    f"{'within' if ws <= budget else 'beyond'} {budget} B ({level}); memory moves {mem} B; "
                    f"modelled cycles {cost:.3g}"
                )
                best = key, ThreadGrid(tm, tn, p_m, p_n, panel, ws, budget, level, reason, cost)
    if best is None:
        raise ValueError("choose_grid: no grid to choose from")
    return best[1]


def gemm_grid(
    config: TensorConfig, threads: int, mr: int = 16, grids: Collection[tuple[int, int]] | None = None
) -> ThreadGrid | None:
    """`choose_grid` for an optimized GEMM/BRGEMM ``config`` (prim dims; its macro tiles are its
    prim M x prim N blocks) on ``threads`` threads (among ``grids``, default all), with the host's
    caches; None for other configs."""
    if config.prim_main not in GEMM_PTYPES or not config.has_prims or config.prim.m is None or config.prim.n is None:
        return None
    dims, p = config.dims, config.prim
    size = {t: math.prod(d.size for d in dims if d.type is t) for t in (dim_t.m, dim_t.n, dim_t.k)}
    kc = math.prod(dims[i].size for i in (p.k, p.br) if i is not None)
    block = (dims[p.m].size, dims[p.n].size, kc)
    shape = (size[dim_t.m], size[dim_t.n], size[dim_t.k])
    return choose_grid(shape, block, config.dtype.itemsize, threads, mr=mr, grids=grids)


def shared_partition(config: TensorConfig, threads: int) -> tuple[int, int] | None:
    """The (rows, columns) grid that ``config``'s shared loops give ``threads`` threads under the
    static split (`minijit.parallel.chunks` of the flattened shared iterations, before any piece is
    taken over): each thread's shared iterations span a block of M parts x N parts; None where they
    do not form one grid (a thread's range wraps a row) or there are no shared loops."""
    shared = [d for d in config.dims if d.exec is exec_t.shared]
    n = math.prod(d.size for d in shared)
    if not shared or n < 2 or any(d.type not in (dim_t.m, dim_t.n) for d in shared):
        return None
    from minijit.parallel import chunks  # parallel imports nothing of schedule

    ranges = chunks(n, threads)
    owned: list[tuple[frozenset, frozenset]] = []
    for begin, end in ranges:
        ms, ns = set(), set()
        for index in range(begin, end):
            key: dict[dim_t, list[int]] = {dim_t.m: [], dim_t.n: []}
            for d in reversed(shared):
                index, i = divmod(index, d.size)
                key[d.type].append(i)
            ms.add(tuple(key[dim_t.m]))
            ns.add(tuple(key[dim_t.n]))
        if len(ms) * len(ns) != end - begin:
            return None  # not a rectangle of M parts x N parts
        owned.append((frozenset(ms), frozenset(ns)))
    rows, cols = {o[0] for o in owned}, {o[1] for o in owned}
    if len(rows) * len(cols) != len(owned):
        return None
    return len(rows), len(cols)


def _unshared(config: TensorConfig) -> list[Dimension]:
    """``config``'s dims with its shared loops made seq again, each outer part merged back into the
    M or N loop dim it was split from (its strides are the inner part's times the inner size)."""
    dims = [d.with_(exec=exec_t.seq) if d.exec is exec_t.shared else d for d in config.dims]
    merged = True
    while merged:
        merged = False
        for i, j in itertools.permutations(range(len(dims)), 2):
            d, e = dims[i], dims[j]
            if (
                d.exec is exec_t.seq
                and e.exec is exec_t.seq
                and d.type is e.type
                and d.type in (dim_t.m, dim_t.n)
                and all(s == e.size * t for s, t in zip(d.strides, e.strides, strict=True))
                and any(d.strides)
            ):
                dims[j] = e.with_(size=d.size * e.size)
                del dims[i]
                merged = True
                break
    return dims


def _grid_dim(dims: list[Dimension], kind: dim_t, parts: int) -> int | None:
    """The outermost seq ``kind`` loop dim whose size ``parts`` divides (None where none does)."""
    return next(
        (i for i, d in enumerate(dims) if d.exec is exec_t.seq and d.type is kind and d.size % parts == 0), None
    )


def share_grid(config: TensorConfig, p_m: int, p_n: int) -> TensorConfig | None:
    """``config`` (optimized, with or without shared loops) with shared loops that give ``p_m`` x
    ``p_n`` threads one rectangle of macro tiles each: an outer part of ``p_m`` of an M loop dim and
    one of ``p_n`` of an N loop dim, outermost in that order (``p_m * p_n`` shared iterations). None
    where no M (N) loop dim has a size that ``p_m`` (``p_n``) divides."""
    for name, value in (("p_m", p_m), ("p_n", p_n)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"share_grid: {name} must be a positive int, got {value!r}")
    dims = _unshared(config)
    shared: list[Dimension] = []
    for kind, parts in ((dim_t.m, p_m), (dim_t.n, p_n)):
        if parts == 1:
            continue
        i = _grid_dim(dims, kind, parts)
        if i is None:
            return None
        d = dims[i]
        inner = d.size // parts
        shared.append(Dimension(kind, exec_t.shared, parts, *(s * inner for s in d.strides)))
        if inner > 1:
            dims[i] = d.with_(size=inner)
        else:
            del dims[i]
    return config.with_dims(shared + dims)


def grid_loops(config: TensorConfig, threads: int, mr: int = 16) -> tuple[TensorConfig, ThreadGrid] | None:
    """The model's grid (`gemm_grid`) among those `share_grid` can build for ``config`` on
    ``threads`` threads, and ``config`` with those shared loops; None for other configs or where
    no grid of two or more threads can be built."""
    if threads < 2 or gemm_grid(config, 1) is None:
        return None
    plain = config.with_dims(_unshared(config))
    sizes = {t: [d.size for d in plain.dims if d.exec is exec_t.seq and d.type is t] for t in (dim_t.m, dim_t.n)}
    fits = [
        (p_m, p_n)
        for p_m in range(1, threads + 1)
        for p_n in range(1, threads // p_m + 1)
        if p_m * p_n > 1
        and (p_m == 1 or any(s % p_m == 0 for s in sizes[dim_t.m]))
        and (p_n == 1 or any(s % p_n == 0 for s in sizes[dim_t.n]))
    ]
    grid = gemm_grid(plain, threads, mr, grids=fits) if fits else None
    shared = None if grid is None else share_grid(plain, grid.p_m, grid.p_n)
    return None if shared is None or grid is None else (shared, grid)
