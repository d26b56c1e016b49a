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

import math
from dataclasses import dataclass

from minijit import packing
from minijit.ir import GEMM_PTYPES, TensorConfig, dim_t, exec_t
from minijit.runtime import features
from minijit.targets import CpuTarget

#: GEMM/BRGEMM operations with fewer multiply-adds than this run on the calling thread only.
PARALLEL_MIN_ELEMENTS = 1 << 20
#: elementwise operations (copies, packing passes) moving fewer bytes (read + written) than this
#: run on the calling thread only
PARALLEL_MIN_BYTES = 1 << 20
# (the measurements behind these constants: bench/results/model_constants_measurements.md)
#: the kernel packs A itself (``a_copy``) only when at most this many kernel calls read each A block
A_COPY_MAX_REUSE = 4
#: ``n_outer`` kernels: the least bytes of C a call walks down each column (prim M x item), and
#: the share of the last-level cache the call's A block may take
N_OUTER_MIN_RUN, N_OUTER_LLC_SHARE = 2048, 8
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
    """Which of setup's rules may apply (all by default): ``chunks`` (`a_chunks`), ``k_chunks``
    (K chunks before M chunks), ``n_outer`` (`kernel_n_outer`), ``a_copy`` (`kernel_copies_a`)."""

    chunks: bool = True
    k_chunks: bool = True
    n_outer: bool = True
    a_copy: bool = True


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
    config: TensorConfig, tensor: str, target: CpuTarget, *, in_chunk: bool = False
) -> packing.PanelPlan | None:
    """The micro-panel packing of ``tensor`` ("in0" or "in1") on a target that packs panels
    (`minijit.packing.plan_panels`, A rows `panel_rows`, B columns `panel_width`); a chunk's A
    (``in_chunk``) from `CHUNK_PANEL_REUSE_N` columns of reuse. None where it does not pay."""
    if not target.packs_panels:
        return None
    width = target.panel_rows(config.dtype.name) if tensor == "in0" else target.panel_width()
    reuse = CHUNK_PANEL_REUSE_N if in_chunk and tensor == "in0" else None
    return packing.plan_panels(config, width, tensor=tensor, min_reuse=reuse)


def padded_layout(config: TensorConfig) -> packing.PackPlan | None:
    """The padded A of `minijit.packing.plan_packing` (every target), or None."""
    return packing.plan_packing(config)


def kernel_n_outer(config: TensorConfig, *, in_chunk: bool = False, rules: Rules = DEFAULT_RULES) -> bool:
    """Whether the BRGEMM kernel, its A in micro-panels, should walk its N blocks outermost (the
    BLIS order): C is then read and written down its columns in runs of `N_OUTER_MIN_RUN` bytes or
    more, which the prefetchers stream, and the call's whole A block (prim M x K x BR), re-read
    once per block of columns, must stay within 1/`N_OUTER_LLC_SHARE` of the last-level cache.
    Never in a chunk (its A, just packed, is read once in the M-outer order)."""
    roles = config.prim
    if in_chunk or not rules.n_outer or roles.m is None or roles.n is None:
        return False
    item = config.dtype.itemsize
    m, k, br = (_prim_size(config, r) for r in (roles.m, roles.k, roles.br))
    return m * item >= N_OUTER_MIN_RUN and m * k * br * item <= features.last_level_cache_bytes() // N_OUTER_LLC_SHARE


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


def a_chunks(config: TensorConfig, target: CpuTarget, rules: Rules = DEFAULT_RULES) -> ChunkChoice | None:
    """The chunks ``config`` should run in, or None. Taken on targets that chunk (``chunks_a``)
    when A (in0) is larger than half of the last-level cache and B (in1) takes at most
    1/`CHUNK_LLC_SHARE` of it: packing all of A first writes the packed copy to memory and the
    kernels read it back, where a chunk's A block is packed into a buffer that stays in the cache.

    K chunks (`k_chunks`) are tried first. M chunks (A packed, micro-panels or padded): chunks of
    the outermost loop dim, an M dim that B does not walk (A is then read once, chunk by chunk),
    one index of it reading at most the share of A; the leading loop dims that split one dim (such
    as the threads' shared dim) are merged back into one first."""
    if not rules.chunks or not target.chunks_a or config.prim_main not in GEMM_PTYPES:
        return None
    if config.prim.m is None or config.prim.n is None:
        return None
    rows = target.panel_rows(config.dtype.name)
    llc = features.last_level_cache_bytes()
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
