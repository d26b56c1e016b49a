"""Prim (cache block) sizes for GEMM/BRGEMM operations from a data-movement model (seed 001).

The CPU kernels hold one register block of C (``mr`` rows) in registers, keep the A micro-panel
(``mr`` rows x prim K) in L1 while they walk the N blocks, and keep the B block (prim K x prim N,
every BR step's) in L2 while they walk the M blocks; around the prim, the loop nest calls the
kernel once per (M, N, K) block. For prim sizes ``mc, nc, kc`` on an ``M x N x K`` problem of
``item``-byte elements, the bytes each level receives are (seed 001's two-level transfer
count, applied per level):

    into L2 (from L3 / memory): A  M*K * N/nc    B  K*N * M/mc    C  2*M*N * K/kc
    into L1 (from L2):          A  M*K * N/nc    B  K*N * M/mr    C  2*M*N * K/kc

Each level's bytes are weighted by the inverse of its fill bandwidth, and every kernel call costs
a fixed overhead; the cheapest candidate whose A micro-panel fits L1 and whose B block fits L2
(its target's ``b_block_l2_share`` of L2) wins. With A and B in micro-panels
(`minijit.packing.plan_panels`) both are sequential streams that the prefetchers keep ahead of the
FMAs, so the capacities bound the blocks, not halves of them (the measurements behind this
module's constants: bench/results/model_constants_measurements.md). AVX-512 blocks are the
exception: their K stops at 128, and a B block of all of L2 only widens N
(`minijit.targets.X86Target.b_block_l2_share`).
`choose` returns the maxima that `minijit.optimizer.split_dims` then uses per dim type; the
optimizer may then fold the K blocks into BR steps of one kernel call (C then crosses memory once,
and one call reads BR times the modelled B block, once per register block of M: from the
last-level cache). The BR steps per call are capped so that the calls of every thread keep their
B within `LLC_B_SHARE` of the last-level cache that those threads own (`llc_budget`: a shared
cache gives each sharing CPU ``size / sharers``, so a 300 MiB L3 shared by 120 CPUs is 2.5 MiB a
thread, not 300 MiB; `minijit.optimizer.limit_batch`); beyond it each register block of M
re-reads B from memory. `call_footprint` states what one call of the
compiled kernel reads, next to the cache sizes, so a listing shows both the model's choice and
what was compiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minijit import targets
from minijit.ir import dim_t
from minijit.optimizer import thread_load
from minijit.runtime import features
from minijit.runtime.features import CacheGeometry
from minijit.targets import Target

#: fill bandwidth in bytes per cycle: L2 -> L1, and L3 -> L2 (per core; Zen 3/4/5 and recent Intel
#: cores sustain roughly these); a kernel call's fixed cost in cycles (loop nest, pointer setup,
#: first C block load)
L1_FILL, L2_FILL, CALL_CYCLES = 32.0, 16.0, 400.0
#: the share of the last-level cache that the B of one kernel call (every BR step's B block) may
#: take, summed over the threads (`choose` caps the BR steps per call by it; each thread counts on
#: its slice of a shared cache, `llc_budget`). Each register block
#: of M re-reads the call's B; past the cache it comes from memory (AVX2 fp64, 8-row blocks: half
#: a byte per flop)
LLC_B_SHARE = 0.25
#: the largest prim M the model proposes (a larger M only saves kernel calls)
MAX_MC = 1024
#: prim sizes below this are not proposed (per dim), unless the dim itself is smaller
MIN_BLOCK = 16
#: x86-64 GEMV (N = 1, `minijit.kernels.x86_64.gemv`): the largest prim M in bytes of one column
#: (each column of a call's A is one sequential run; y's block stays in L1) and the largest prim K
GEMV_RUN_BYTES = 16 * 1024
GEMV_MAX_K = 512


@dataclass(frozen=True)
class Blocking:
    """Largest prim sizes (elements) per dim type, the most BR steps one kernel call may take
    (``br``; None: no cap), and the model's figures for the choice."""

    m: int
    n: int
    k: int
    reason: str
    br: int | None = None

    def sizes(self) -> dict[dim_t, int]:
        """The maxima as `minijit.optimizer.split_dims` takes them."""
        return {dim_t.m: self.m, dim_t.n: self.n, dim_t.k: self.k}

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "br"):
            value = getattr(self, name)
            if name == "br" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Blocking.{name} must be a positive int, got {value!r}")


def transfer_cycles(
    shape: tuple[int, int, int], block: tuple[int, int, int], mr: int, item: int
) -> tuple[float, float, float]:
    """Modelled cycles of (L1 fills, L2 fills, kernel calls) for ``shape`` = (M, N, K) in prims of
    ``block`` = (mc, nc, kc) with ``mr``-row register blocks (see the module docstring)."""
    (m, n, k), (mc, nc, kc) = shape, block
    a, b, c = m * k * item, k * n * item, 2 * m * n * item
    l2 = a * n / nc + b * m / mc + c * k / kc
    l1 = a * n / nc + b * m / mr + c * k / kc
    calls = math.ceil(m / mc) * math.ceil(n / nc) * math.ceil(k / kc)
    return l1 / L1_FILL, l2 / L2_FILL, calls * CALL_CYCLES


def _candidates(size: int, cap: int) -> list[int]:
    """Block sizes for a dim of ``size``: its divisors up to ``cap`` (at least `MIN_BLOCK`)."""
    out = [d for d in range(1, min(size, cap) + 1) if size % d == 0 and (d >= MIN_BLOCK or d == size)]
    return out or [size]


def _llc(llc_bytes: int | None, llc_shared: int | None) -> tuple[int, int]:
    """(bytes, sharing CPUs) of the last-level cache: the arguments, else the host's."""
    for name, value in (("llc_bytes", llc_bytes), ("llc_shared", llc_shared)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    if llc_bytes is None:
        llc_bytes = features.last_level_cache_bytes()
        llc_shared = llc_shared or features.last_level_cache_sharing()
    return llc_bytes, llc_shared or 1


def llc_budget(llc_bytes: int, llc_shared: int, threads: int) -> int:
    """Bytes of the last-level cache the B of one kernel call on every one of ``threads`` threads
    may take together: `LLC_B_SHARE` of the part of it those threads own, ``threads`` shares of
    ``llc_bytes // llc_shared`` (each sharing CPU's slice) up to the whole cache."""
    return int(min(llc_bytes, llc_bytes // llc_shared * threads) * LLC_B_SHARE)


def ranked(
    shape: tuple[int, int, int],
    item: int,
    target: str | Target,
    *,
    threads: int = 1,
    caches: tuple[CacheGeometry, CacheGeometry] | None = None,
    column_bytes: int | None = None,
    llc_bytes: int | None = None,
    llc_shared: int | None = None,
    count: int = 1,
) -> list[Blocking]:
    """The model's ``count`` best prim sizes for a GEMM of ``shape`` = (M, N, K) elements on
    ``target``, best first (see the module docstring and `choose`); distinct (M, N, K) blocks,
    each with its BR cap. `minijit.tune` times them where the model is unsure."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    llc, shared = _llc(llc_bytes, llc_shared)
    t = targets.get_cpu(target)
    if shape[1] == 1 and t.has_gemv:
        return [_gemv(shape, item, threads)]
    l1, l2 = caches or features.cache_geometries()
    column = column_bytes or t.panel_column_bytes
    mr = max(1, column // item)
    b_cap = int(l2.size * t.b_block_l2_share)  # bytes the B block may take
    m, n, k = shape
    scored: list[tuple[tuple[bool, float], tuple[int, int, int], tuple[float, float, float]]] = []
    for kc in _candidates(k, max(MIN_BLOCK, l1.size // column)):
        for nc in _candidates(n, max(MIN_BLOCK, b_cap // (kc * item))):
            for mc in _candidates(m, MAX_MC):
                parts = transfer_cycles(shape, (mc, nc, kc), mr, item)
                blocks = -(-m // mc) * -(-n // nc)
                # the (M, N) blocks are split statically over the threads: the slowest one sets the time
                scored.append(((blocks < threads, sum(parts) * thread_load(blocks, threads)), (mc, nc, kc), parts))
    scored.sort(key=lambda s: s[0])  # stable: among equal costs the first found, as before
    share = f"{b_cap} B (its share) of " if b_cap < l2.size else ""
    budget = llc_budget(llc, shared, threads)  # bytes the B of one call on every thread may take
    out = []
    for _, (mc, nc, kc), (c1, c2, cc) in scored[:count]:
        reason = (
            f"prims up to {mc} x {nc} x {kc} (M x N x K): A micro-panel {mr * kc * item} B of L1 {l1.size} B, "
            f"B block {kc * nc * item} B of {share}L2 {l2.size} B; modelled cycles L1 fills {c1:.3g}, "
            f"L2 fills {c2:.3g}, calls {cc:.3g}"
        )
        br = None
        per_call = budget // (kc * nc * item * threads)  # BR steps whose B fits the budget
        if k // kc > max(1, per_call):
            br = max(1, per_call)
            slice_ = f", {llc // shared} B per sharing CPU ({shared})" if shared > 1 else ""
            reason += (
                f"; at most {br} BR steps of {kc} per call: one call's B on each of {threads} thread(s)"
                f" within {budget} B of the last-level cache ({llc} B{slice_})"
            )
        out.append(Blocking(mc, nc, kc, reason, br))
    return out


def choose(
    shape: tuple[int, int, int],
    item: int,
    target: str | Target,
    *,
    threads: int = 1,
    caches: tuple[CacheGeometry, CacheGeometry] | None = None,
    column_bytes: int | None = None,
    llc_bytes: int | None = None,
    llc_shared: int | None = None,
) -> Blocking:
    """The prim sizes for a GEMM of ``shape`` = (M, N, K) elements on ``target`` (see the module
    docstring); with ``threads`` > 1, blocks that leave at least that many (M, N) blocks are
    preferred, so the loops can be shared, and each candidate's cycles are scaled by the
    `minijit.optimizer.thread_load` of its (M, N) blocks (5 blocks on 2 threads cost 1.2x).
    ``target``: a CPU target name or `minijit.targets` object. ``column_bytes``: bytes of one
    column of the register block of A (default the target's ``panel_column_bytes``). The BR
    steps per call (``br``) are capped where the K blocks of one call on each of ``threads``
    threads would take more than `llc_budget` of the last-level cache: ``llc_bytes`` (the whole
    cache) shared by ``llc_shared`` CPUs, each of which owns an equal slice (default the host's
    cache and its sharers; given ``llc_bytes`` alone: one sharer)."""
    return ranked(
        shape,
        item,
        target,
        threads=threads,
        caches=caches,
        column_bytes=column_bytes,
        llc_bytes=llc_bytes,
        llc_shared=llc_shared,
    )[0]


def _gemv(shape: tuple[int, int, int], item: int, threads: int) -> Blocking:
    """The prim sizes of an x86-64 GEMV (N = 1): A is read once whatever the blocks, so no cache
    level is modelled; the prim M is the longest run of a column up to `GEMV_RUN_BYTES` that still
    leaves a block for each of ``threads`` threads where M allows (split evenly), the prim K up to
    `GEMV_MAX_K` (the optimizer folds the K blocks into BR steps of one call)."""
    m, _, k = shape
    cands = _candidates(m, max(MIN_BLOCK, GEMV_RUN_BYTES // item))
    mc = max(cands, key=lambda c: (-(-m // c) >= threads, -thread_load(-(-m // c), threads), c))
    kc = max(_candidates(k, GEMV_MAX_K))
    reason = (
        f"GEMV (N = 1): prims up to {mc} x 1 x {kc} (M x N x K): A read once in column runs of "
        f"{mc * item} B (at most {GEMV_RUN_BYTES} B), {-(-m // mc)} M blocks for {threads} threads"
    )
    return Blocking(mc, 1, kc, reason)


def _level(nbytes: int, caches: tuple[CacheGeometry, CacheGeometry]) -> str:
    """The first cache level ``nbytes`` fits, else "beyond L2" (bytes, whole cache)."""
    for name, geo in zip(("L1", "L2"), caches, strict=True):
        if nbytes <= geo.size:
            return f"fits {name} ({geo.size} B)"
    return f"beyond L2 ({caches[1].size} B)"


def call_footprint(
    m: int, n: int, k: int, br: int, item: int, mr: int, caches: tuple[CacheGeometry, CacheGeometry] | None = None
) -> str:
    """What one call of a compiled GEMM/BRGEMM kernel of prim sizes ``m`` x ``n`` x ``k`` with ``br``
    BR steps reads, in bytes of ``item``-byte elements: the A micro-panel (``mr`` rows x ``br*k``,
    re-read once per register block of N), the B block (``br*k`` x ``n``, re-read once per register
    block of M) and the C block, each against the L1/L2 sizes (``caches``, default the host's)."""
    for name, value in (("m", m), ("n", n), ("k", k), ("br", br), ("item", item), ("mr", mr)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"call_footprint: {name} must be a positive int, got {value!r}")
    caches = caches or features.cache_geometries()
    depth = br * k
    panel, b_block, c_block = min(mr, m) * depth * item, depth * n * item, m * n * item
    steps = f" ({br} BR steps of {k})" if br > 1 else ""
    return (
        f"one kernel call: {m} x {n} x {depth}{steps} (M x N x K): A micro-panel {panel} B {_level(panel, caches)}, "
        f"B block {b_block} B {_level(b_block, caches)}, C block {c_block} B"
    )
