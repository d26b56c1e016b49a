"""Builders of plan trees: `optimized` (the optimizer, the cache model, peeling) and `configured`
(a validated config: chunks, packed operands, the kernel). Options of child plans (a chunk, a
copy into a private buffer) are arguments here; the mode choices are `minijit.schedule`'s."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from minijit import blocking, optimizer, packing, peeling, schedule, tune_store
from minijit.cache import ScratchPool
from minijit.errors import SetupError
from minijit.ir import GEMM_PTYPES, TensorConfig, dim_t, ptype_t
from minijit.plan import kernel
from minijit.plan.nodes import Chunk, Copy, Fill, Pack, Part, Peel, Plan, head
from minijit.schedule import DEFAULT_RULES, ChunkChoice, Rules
from minijit.targets import CpuTarget


@dataclass(frozen=True)
class Env:
    """What every plan of one operation is built for: the target (``native``: its code runs
    without emulation), the threads, whether operands may be packed, and the rules that apply.
    A GEMM's prim sizes: ``blocking`` when given (`minijit.tune` times candidates so), else this
    CPU's tuned entry (`minijit.tune_store`; ``tuned=False`` skips it), else what ``tuner`` (the
    caller's config, this Env, the threads) returns (`TensorOperation(tune=True)`), else the
    cache model's (`minijit.blocking.choose`)."""

    target: CpuTarget
    num_threads: int
    native: bool
    pack: bool = True
    rules: Rules = DEFAULT_RULES
    blocking: blocking.Blocking | None = None
    tuned: bool = True
    tuner: Callable[[TensorConfig, Env, int], blocking.Blocking | None] | None = None


def optimized(
    config: TensorConfig,
    env: Env,
    *,
    thread_target: int | None = None,
    max_kernel_size: int | None = None,
    min_kernel_size: int = optimizer.DEFAULT_MIN_KERNEL_SIZE,
) -> Plan:
    """`minijit.optimize` ``config`` (the cache model's prim sizes for a GEMM), then `configured`;
    a dim that leaves a prim over the target's limit and has no divisor that fits is peeled
    (`minijit.peeling`): head and tail are optimized as plans of their own."""
    threads = thread_target or env.num_threads
    if schedule.too_small_to_split(config):
        threads = 1  # it runs on the calling thread: shape it for one thread
    block = None
    if max_kernel_size is None and config.prim_main in GEMM_PTYPES:
        block = _blocking(config, env, threads)
    limit = env.target.max_prim_size
    clip = (lambda size: size) if limit is None else (lambda size: min(size, limit))  # noqa: E731
    sizes = None if block is None else {t: clip(v) for t, v in block.sizes().items()}
    result = optimizer.optimize(
        config,
        thread_target=threads,
        max_kernel_size=clip(optimizer.DEFAULT_MAX_KERNEL_SIZE if max_kernel_size is None else max_kernel_size),
        min_kernel_size=min_kernel_size,
        max_sizes=sizes,
        max_br=None if block is None else block.br,
    )
    if env.rules.grid and threads > 1:  # opt-in: the shared loops are the model's thread grid
        found = schedule.grid_loops(result, threads, max(1, env.target.panel_column_bytes // config.dtype.itemsize))
        result = result if found is None else found[0]
    split = peeling.peel(config) if peeling.oversized(result, limit) else None
    if split is None:
        return configured(result, env, blocking=block)
    item = config.dtype.itemsize
    options = {"thread_target": thread_target, "max_kernel_size": max_kernel_size, "min_kernel_size": min_kernel_size}
    parts = tuple(
        Part(p.offsets, tuple(o * item for o in p.offsets), optimized(p.config, env, **options))  # type: ignore[arg-type]
        for p in split
    )
    return Plan(config, Peel(parts), False, parts[0].plan.blocking)


def gemm_shape(config: TensorConfig) -> tuple[int, int, int]:
    """(M, N, K) of a GEMM-like config: the products of its dims of each type."""
    return tuple(math.prod(d.size for d in config.dims if d.type is t) for t in (dim_t.m, dim_t.n, dim_t.k))  # type: ignore[return-value]


def _blocking(config: TensorConfig, env: Env, threads: int) -> blocking.Blocking:
    """The prim sizes (in the kernel's roles: the config after `optimizer.swap_operands`) of the
    caller's GEMM-like ``config``: `Env`'s order of sources, the cache model last."""
    if env.blocking is not None:
        return env.blocking
    if env.tuned and env.native:
        shape = gemm_shape(config)
        found = tune_store.lookup(env.target.name, config.dtype.name, shape, tune_store.orders(config), threads)
        if found is None and env.tuner is not None:
            found = env.tuner(config, env, threads)
        if found is not None:
            return found
    kernel_roles = optimizer.swap_operands(config)
    item = config.dtype.itemsize
    shape = gemm_shape(kernel_roles)
    return blocking.choose(shape, item, env.target, threads=threads, column_bytes=env.target.panel_column_bytes)


def configured(
    config: TensorConfig,
    env: Env,
    *,
    in_chunk: bool = False,
    private_out: bool = False,
    blocking: blocking.Blocking | None = None,
) -> Plan:
    """The plan of a validated, executable ``config``: chunks of a large A (`schedule.a_chunks`),
    else its packed operands (`schedule.panel_layout`, `schedule.padded_layout`) and the kernel.
    ``in_chunk``: the plan of one chunk (its A is read from memory once; no chunks of its own);
    ``private_out``: out never overlaps in0 (a copy into a packed buffer)."""
    config.validate_executable()
    gemv = schedule.one_column(config, env.target)  # A is read once: no copy of it pays
    if not (gemv or in_chunk) and env.pack and env.native:
        choice = schedule.a_chunks(config, env.target, env.rules, threads=env.num_threads)
        if choice is not None:
            return _chunked(config, choice, env, blocking)
    fill_a = None if gemv else _panel_fill(config, "in0", env, in_chunk)
    n_outer = fill_a is not None and schedule.kernel_n_outer(
        config, env.target, in_chunk=in_chunk, rules=env.rules, threads=env.num_threads
    )
    a_copy = fill_a is not None and not n_outer
    a_copy = a_copy and schedule.kernel_copies_a(config, env.target, in_chunk=in_chunk, rules=env.rules)
    if a_copy:  # the kernel packs A itself: no copy pass before it
        fill_a = None
    if fill_a is None and not (a_copy or gemv):
        fill_a = _padded_fill(config, env)
    compiled = config if fill_a is None else fill_a.layout.main
    fill_b = None if gemv else _panel_fill(compiled, "in1", env, in_chunk)
    compiled = compiled if fill_b is None else fill_b.layout.main
    panels = {f"{x}_panel": f.layout.panel for x, f in (("a", fill_a), ("b", fill_b)) if _is_panel(f)}
    threads = 1 if schedule.too_small_to_split(config) else env.num_threads  # a team round trip costs 10-20 us
    body = kernel.build(
        compiled,
        env.target,
        threads,
        native=env.native,
        a_copy=a_copy,
        n_outer=n_outer,
        private_out=private_out,
        **panels,
    )
    fills = tuple(f for f in (fill_a, fill_b) if f is not None)
    if fills:
        body = Pack(fills, body, _pool(fills, config.dtype.numpy))
    return Plan(config, body, config.inputs_swapped, blocking)


def _is_panel(fill: Fill | None) -> bool:
    return fill is not None and isinstance(fill.layout, packing.PanelPlan)


def _pool(fills: tuple[Fill, ...], dtype: type) -> ScratchPool:
    """The pool of per-call buffers of ``fills`` (one set made now)."""

    def create() -> tuple[tuple[np.ndarray, int], ...]:
        bufs = (packing.aligned_empty(f.elements, dtype) for f in fills)
        return tuple((b, b.ctypes.data) for b in bufs)

    return ScratchPool(create, items=(create(),))


def _copy_plan(copy: TensorConfig, env: Env, *, private_out: bool) -> Plan | None:
    """The plan of a copy into a packed buffer (never packed itself); None where it cannot be set up."""
    try:
        cfg = optimizer.optimize(copy, thread_target=env.num_threads)
        return configured(cfg, replace(env, pack=False), private_out=private_out)
    except SetupError:
        return None


def _padded_fill(config: TensorConfig, env: Env) -> Fill | None:
    """The padded A (`schedule.padded_layout`) and its copy, or None."""
    layout = schedule.padded_layout(config) if env.pack else None
    plan = None if layout is None else _copy_plan(layout.copy, env, private_out=False)
    return None if plan is None else Fill("in0", layout.elements, (Copy(plan, 0, 0),), layout)


def _panel_fill(config: TensorConfig, tensor: str, env: Env, in_chunk: bool) -> Fill | None:
    """The micro-panels of ``tensor`` (`schedule.panel_layout`; native targets only) and their
    copies, or None."""
    if not (env.pack and env.native):
        return None
    layout = schedule.panel_layout(config, tensor, env.target, in_chunk=in_chunk, threads=env.num_threads)
    if layout is None:
        return None
    copies = []
    for cfg, src, dst in layout.copies:
        plan = _copy_plan(cfg, env, private_out=True)
        if plan is None:
            return None
        copies.append(Copy(plan, src, dst))
    return Fill(tensor, layout.elements, tuple(copies), layout)


def _chunked(caller: TensorConfig, choice: ChunkChoice, env: Env, block: blocking.Blocking | None) -> Plan:
    """Chunked execution (`schedule.a_chunks`). M chunks: one single-thread plan run for every
    chunk, the chunks split over the threads statically. K chunks: one plan per distinct chunk
    config (the first chunk keeps the first touch, the last the last touch), run in order."""
    config, dim, size, count = choice.config, choice.dim, choice.size, choice.count
    part = config.with_dims([d.with_(size=size) if i == dim else d for i, d in enumerate(config.dims)])

    def body(cfg: TensorConfig, threads: int) -> Plan:
        return replace(configured(cfg, replace(env, num_threads=threads), in_chunk=True), swapped=False)

    if choice.kind == "M":
        bodies, threads = (body(part, 1),), min(env.num_threads, count)
    else:
        first, last = part.prim_first, part.prim_last
        touches = [(first if i == 0 else ptype_t.none, last if i == count - 1 else ptype_t.none) for i in range(count)]
        built = {
            t: body(part.with_dims(part.dims, prim_first=t[0], prim_last=t[1]), env.num_threads)
            for t in dict.fromkeys(touches)
        }
        bodies = tuple(built[t] for t in touches)
        threads = head(bodies[0]).threads
    steps = tuple(size * s * config.dtype.itemsize for s in config.dims[dim].strides)
    return Plan(caller, Chunk(choice.kind, dim, count, steps, bodies, threads), caller.inputs_swapped, block)  # type: ignore[arg-type]
