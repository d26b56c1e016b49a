"""The autotuner: time the cache model's best few GEMM blockings on this host, keep the fastest.

In the spirit of FFTW's wisdom and ATLAS: where hosts differ more than the model captures (cache
geometries the model reads only partly, such as the slice of a shared L3 a virtual machine's CPUs
really get), `tune_config` builds the plan of each candidate (`candidates`: the model's ranked
blocks from `minijit.blocking.ranked`, and the best one with every call's B kept within L2), checks
that each gives the first one's result, times them in alternating rounds within a budget of
seconds, and stores the winner (`winner`: the model's choice unless another is clearly faster) for
this CPU and the GEMM's shape class in the user's store (`minijit.tune_store`), which every later
`setup` reads. `tune` does that for a set of shape classes (`default_classes`: what
``minijit tune`` runs); ``TensorOperation(tune=True)`` calls `setup_tuner` for a class not stored.

The rounds run each candidate once in turn, so a change of load on a shared host slows all of them
alike; a budget long enough for several rounds gives the steadier choice.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from minijit import blocking, optimizer, parallel, targets, tune_store
from minijit import plan as plans
from minijit.blocking import Blocking
from minijit.ir import TensorConfig
from minijit.plan.build import gemm_shape
from minijit.runtime import features

#: model-ranked blocks timed per class (plus the best one's B-within-L2 variant)
DEFAULT_COUNT = 4
#: a candidate replaces the model's choice only when it is this much faster (a relative margin:
#: timings on a shared host scatter by a few per cent)
MIN_GAIN = 0.03
#: timing rounds (each candidate once) at least, whatever the budget
MIN_ROUNDS = 2
#: seconds `TensorOperation(tune=True)` spends on one shape class at setup
SETUP_BUDGET_S = 2.0
#: the shape classes ``minijit tune`` runs by default
DEFAULT_SIZES = (512, 1024, 2048, 4096)
DEFAULT_DTYPES = ("fp32", "fp64")
DEFAULT_ORDERS = ("CCC", "FFF")


@dataclass(frozen=True)
class Timed:
    """One candidate: its blocking, the best seconds per run, GFLOPS, and how many runs."""

    blocking: Blocking
    seconds: float
    gflops: float
    runs: int


@dataclass(frozen=True)
class Result:
    """What `tune_config` measured for one shape class: the model's choice (the first candidate)
    and the winner, every candidate's timing, and the file the winner was stored in (or None)."""

    key: str
    model: Timed
    best: Timed
    timed: tuple[Timed, ...] = field(default=())
    file: Path | None = None

    def line(self) -> str:
        """One line of ``minijit tune``'s table."""

        def name(b: Blocking) -> str:
            return f"{b.m}x{b.n}x{b.k} br {b.br or '-'}"

        ratio = self.best.gflops / self.model.gflops if self.model.gflops > 0 else float("nan")
        same = " (the model's)" if self.best.blocking == self.model.blocking else ""
        return (
            f"{self.key:<30} model {name(self.model.blocking):<22} {self.model.gflops:8.1f} GFLOPS   "
            f"tuned {name(self.best.blocking):<22} {self.best.gflops:8.1f} GFLOPS  {ratio:5.2f}x{same}"
        )


def _brs(blocks: int) -> list[int]:
    return [d for d in range(1, blocks + 1) if blocks % d == 0]


def candidates(config: TensorConfig, target: str, threads: int, count: int = DEFAULT_COUNT) -> list[Blocking]:
    """The blockings `tune_config` times for the caller's GEMM-like ``config`` on ``threads``
    threads: the model's ``count`` best (`minijit.blocking.ranked`; the first is the model's
    choice), then the best one with as many BR steps per call as keep every call's B
    (BR x prim K x prim N) within L2 where that differs (the model lets B stream from its slice
    of the last-level cache, which a virtual machine may overstate). Distinct, in that order."""
    kernel = optimizer.swap_operands(config)
    shape, item = gemm_shape(kernel), config.dtype.itemsize
    t = targets.get_cpu(target)
    ranked = blocking.ranked(shape, item, t, threads=threads, column_bytes=t.panel_column_bytes, count=count)
    out = list(ranked)
    best = ranked[0]
    steps = shape[2] // best.k if shape[2] % best.k == 0 else 1
    if steps > 1:
        l2 = features.cache_geometries()[1].size
        fit = max(d for d in _brs(steps) if d == 1 or d * best.k * best.n * item <= l2)
        current = steps if best.br is None else max(d for d in _brs(steps) if d <= best.br)
        if fit < current:
            reason = f"{best.reason}; variant: at most {fit} BR steps per call keep one call's B within L2 ({l2} B)"
            out.append(Blocking(best.m, best.n, best.k, reason, fit))
    seen: set[tuple[int, int, int, int | None]] = set()
    unique = []
    for b in out:
        sig = (b.m, b.n, b.k, b.br)
        if sig not in seen:
            seen.add(sig)
            unique.append(b)
    return unique


def operands(config: TensorConfig, seed: int = 0) -> tuple[list[np.ndarray], list[int]]:
    """Buffers for in0, in1, out holding every element ``config`` reaches (random in [-1, 1)), and
    the addresses of their origins (element 0 of the strides); the addresses are valid only while
    the caller holds the buffers."""
    rng = np.random.default_rng(seed)
    bufs, addrs = [], []
    for tensor in ("in0", "in1", "out"):
        lo, hi = config.offset_range(tensor)
        buf = rng.uniform(-1, 1, hi - lo + 1).astype(config.dtype.numpy)
        bufs.append(buf)
        addrs.append(buf.ctypes.data - lo * buf.itemsize)
    return bufs, addrs


def _time(runs: list[Callable[[], object]], seconds: float) -> list[tuple[float, int]]:
    """Best seconds of each of ``runs`` and its number of timed runs: in rounds that run each once
    (so a change of load on a shared host slows every candidate alike), until ``seconds`` have
    passed, and at least `MIN_ROUNDS` rounds."""
    best, stop, rounds = [float("inf")] * len(runs), time.perf_counter() + seconds, 0
    while rounds < MIN_ROUNDS or time.perf_counter() < stop:
        for i, run in enumerate(runs):
            t0 = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - t0)
        rounds += 1
    return [(b, rounds) for b in best]


def winner(timed: list[Timed] | tuple[Timed, ...]) -> Timed:
    """The fastest of ``timed``, unless it beats the first (the model's choice) by less than
    `MIN_GAIN` of the model's time: then the model's."""
    best = min(timed, key=lambda t: t.seconds)
    return best if best.seconds * (1 + MIN_GAIN) <= timed[0].seconds else timed[0]


def tune_config(
    config: TensorConfig,
    env: plans.Env,
    threads: int | None = None,
    *,
    budget_s: float = SETUP_BUDGET_S,
    count: int = DEFAULT_COUNT,
    file: Path | None = None,
    save: bool = True,
) -> Result:
    """Time `candidates` of the caller's GEMM-like ``config`` as ``env`` plans it (``threads``:
    the threads it is shaped for, default ``env.num_threads``) within ``budget_s`` seconds in all,
    and store the fastest for this CPU (``file``, default `minijit.tune_store.path`; ``save=False``
    stores nothing). The candidates run in alternating rounds (`_time`); one replaces the model's
    choice only when its best time beats the model's by `MIN_GAIN`. A candidate whose result
    differs from the model's choice is dropped with a warning. Needs a native target."""
    if not env.native:
        raise ValueError(f"tuning times the host: target {env.target.name} is not native here")
    if not isinstance(budget_s, int | float) or isinstance(budget_s, bool) or not budget_s > 0:
        raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
    threads = threads or env.num_threads
    cands = candidates(config, env.target.name, threads, count)
    bufs, addrs = operands(config)
    start = [b.copy() for b in bufs]
    flops = 2.0 * float(np.prod(gemm_shape(config), dtype=np.float64))
    kept, runs, want = [], [], None
    for cand in cands:
        plan = plans.optimized(config, replace(env, blocking=cand, tuned=False, tuner=None), thread_target=threads)
        for buf, orig in zip(bufs, start, strict=True):
            buf[...] = orig
        plans.run_plan(plan, *addrs)
        got = bufs[2].copy()
        if want is None:
            want = got
        elif not np.allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max(initial=0)))):
            name = f"{cand.m}x{cand.n}x{cand.k} br {cand.br}"
            warnings.warn(f"minijit.tune: candidate {name} gives another result; dropped", stacklevel=2)
            continue
        kept.append(cand)
        runs.append(functools.partial(plans.run_plan, plan, *addrs))  # also the warm-up run below
    for run in runs:
        run()
    timed = [Timed(c, sec, flops / sec / 1e9, n) for c, (sec, n) in zip(kept, _time(runs, budget_s), strict=True)]
    best = winner(timed)
    key = tune_store.class_key(config.dtype.name, gemm_shape(config), tune_store.orders(config), threads)
    stored = None
    if save:
        entry = {
            "m": best.blocking.m,
            "n": best.blocking.n,
            "k": best.blocking.k,
            "br": best.blocking.br,
            "gflops": round(best.gflops, 2),
            "model": [timed[0].blocking.m, timed[0].blocking.n, timed[0].blocking.k, timed[0].blocking.br],
            "model_gflops": round(timed[0].gflops, 2),
            "shape": list(gemm_shape(config)),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        stored = tune_store.store(env.target.name, key, entry, file)
    return Result(key, timed[0], best, tuple(timed), stored)


def setup_tuner(budget_s: float = SETUP_BUDGET_S) -> Callable[[TensorConfig, plans.Env, int], Blocking | None]:
    """The ``tuner`` of `minijit.plan.Env` for ``TensorOperation(tune=True)``: tune the class at
    setup (``budget_s`` seconds) and return the winner in the store's form; where the store cannot
    be written the winner is still used (with a warning)."""

    def tuner(config: TensorConfig, env: plans.Env, threads: int) -> Blocking | None:
        try:
            result = tune_config(config, env, threads, budget_s=budget_s)
        except OSError as exc:
            warnings.warn(f"minijit.tune: could not store the tuned blocking: {exc}", stacklevel=2)
            result = tune_config(config, env, threads, budget_s=budget_s, save=False)
        b = result.best.blocking
        return Blocking(b.m, b.n, b.k, f"tuned at setup ({result.key}): {b.reason}", b.br)

    return tuner


def gemm_config(dtype: str, size: int | tuple[int, int, int], order: str) -> TensorConfig:
    """The config of ``out = in0 @ in1`` (M x K times K x N, first touch zero) with each operand in
    ``order``'s C/F order (e.g. "CCC": numpy's row-major ``A @ B``)."""
    m, n, k = (size, size, size) if isinstance(size, int) else size
    if len(order) != 3 or set(order) - {"C", "F"}:
        raise ValueError(f"order must be three of C/F (in0, in1, out), got {order!r}")
    s0 = (k, 0, 1) if order[0] == "C" else (1, 0, m)
    s1 = (0, 1, n) if order[1] == "C" else (0, k, 1)
    so = (n, 1, 0) if order[2] == "C" else (1, m, 0)
    return TensorConfig.from_lists(dtype, "zero", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k), s0, s1, so)


@dataclass(frozen=True)
class ShapeClass:
    """One class ``minijit tune`` runs: dtype, size (M = N = K), operand orders, threads."""

    dtype: str
    size: int
    order: str
    threads: int


def default_classes(
    threads: Iterable[int] | None = None,
    sizes: Iterable[int] = DEFAULT_SIZES,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    orders: Iterable[str] = DEFAULT_ORDERS,
) -> list[ShapeClass]:
    """The classes of ``minijit tune``: every dtype, order, size and thread count (default 1 and
    all of `minijit.parallel.default_threads`)."""
    counts = sorted({1, parallel.default_threads()} if threads is None else set(threads))
    orders, dtypes, sizes = list(orders), list(dtypes), list(sizes)
    for o in orders:
        if len(o) != 3 or set(o) - {"C", "F"}:
            raise ValueError(f"order must be three of C/F (in0, in1, out), got {o!r}")
    for d in dtypes:
        if d not in ("fp32", "fp64"):
            raise ValueError(f"dtype must be fp32 or fp64, got {d!r}")
    if any(not isinstance(x, int) or x < 1 for x in [*sizes, *counts]):
        raise ValueError(f"sizes and thread counts must be positive ints, got {sizes} and {counts}")
    return [ShapeClass(d, s, o, t) for t in counts for d in dtypes for o in orders for s in sorted(sizes)]


#: wall seconds of setup, warm-up and checking per class on top of the timing budget (the Zen 3
#: record: 32 classes, 300 s of timing, 24 min 45 s wall: about 37 s a class)
SETUP_S_PER_CLASS = 37.0


def estimated_seconds(classes: int, budget_s: float) -> float:
    """About how long ``minijit tune`` runs on ``classes`` shape classes with ``budget_s`` seconds of
    timing (wall seconds; `SETUP_S_PER_CLASS` a class on top)."""
    return budget_s + classes * SETUP_S_PER_CLASS


@dataclass(frozen=True)
class Choice:
    """The blocking a `setup` on this host would use for one shape class, and where it comes from:
    ``source`` "tuned" (the user's store, `minijit.tune_store`) or "model" (`minijit.blocking`)."""

    shape_class: ShapeClass
    blocking: Blocking
    source: str


def class_choices(classes: Iterable[ShapeClass], target: str = "native") -> list[Choice]:
    """For each of ``classes``, the blocking `TensorOperation.setup` picks on this host for
    ``target``: the stored tuned one where the store has the class, else the cache model's."""
    t = targets.get_cpu(target)
    out = []
    for c in classes:
        config = gemm_config(c.dtype, c.size, c.order)
        shape = gemm_shape(config)
        found = tune_store.lookup(t.name, c.dtype, shape, tune_store.orders(config), c.threads) if t.native else None
        if found is not None:
            out.append(Choice(c, found, "tuned"))
            continue
        kernel = optimizer.swap_operands(config)
        model = blocking.choose(
            gemm_shape(kernel), config.dtype.itemsize, t, threads=c.threads, column_bytes=t.panel_column_bytes
        )
        out.append(Choice(c, model, "model"))
    return out


def tune(
    classes: Iterable[ShapeClass],
    budget_s: float,
    *,
    target: str = "native",
    count: int = DEFAULT_COUNT,
    file: Path | None = None,
    progress: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Tune every class within ``budget_s`` seconds of timing in all (an equal share each; setup
    and the warm-up runs come on top), storing each winner (``file``, default the user's store);
    ``progress`` gets each result as it is made."""
    classes = list(classes)
    if not classes:
        raise ValueError("tune: no shape classes")
    t = targets.get_cpu(target)
    if not t.native:
        raise ValueError(f"tuning times the host: target {t.name} is not native here")
    out = []
    for c in classes:
        config = gemm_config(c.dtype, c.size, c.order)
        env = plans.Env(t, c.threads, True)
        result = tune_config(config, env, c.threads, budget_s=budget_s / len(classes), count=count, file=file)
        out.append(result)
        if progress is not None:
            progress(result)
    return out
