"""The seed's pruning pipeline (docs/seeds/002_sparseauto.txt sections 5.2-5.3), minus the optional SMT
stage (``smt.py``).

1. memory depth: drop schedules whose largest temporary has more than ``max_depth`` indices;
2. depth poset: keep the Pareto frontier of (loop depth, memory depth) (a schedule is dropped
   only by one that is also no slower asymptotically, see :func:`depth_poset_stage`), group the survivors
   into buckets of asymptotically equal (time, memory) (dropping, inside a bucket, schedules
   another beats term by term), and keep the buckets no other bucket dominates in both (the
   symbolic Pareto frontier, exact under the seed's assumptions);
4. run-time choice: evaluate the polynomials with the concrete sizes and non-zero counts, take
   the least time among the schedules whose temporaries fit the memory limit (else the least
   memory);
5. cache criterion (section 5.3): among schedules of that same evaluated time, the fewest strided
   innermost accesses (:func:`cache_cost`), then the least memory.

Stage 4 can weigh each statement's executions by the code it compiles to (`MachineCosts`:
vector, strided or scalar, `complexity.statement_path`) and then also weighs the default linear
schedule: a frontier schedule whose statements run scalar can lose to the linear schedule's
vector loops at small sizes, where iterations alone would pick it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minijit.sparseauto.complexity import (
    Assumptions,
    Cost,
    Poly,
    Symbol,
    cost,
    dim_symbol,
    nnz_symbol,
    statement_counts,
)
from minijit.sparseauto.nest import Compute, Loop, Nest, Node, Operand

#: Default memory-depth threshold of stage 1 (the seed prunes 3-D temporaries and larger).
DEFAULT_MAX_MEMORY_DEPTH = 2


@dataclass(frozen=True)
class Candidate:
    """A schedule and its symbolic cost."""

    nest: Nest
    cost: Cost


@dataclass(frozen=True)
class Bucket:
    """Schedules with asymptotically equal time and memory (they differ in loop structure)."""

    time: Poly
    memory: Poly
    candidates: tuple[Candidate, ...]


def candidates(nests: Iterable[Nest]) -> tuple[Candidate, ...]:
    """Attach the symbolic cost to each nest."""
    return tuple(Candidate(n, cost(n)) for n in nests)


def memory_depth_stage(cands: Iterable[Candidate], max_depth: int = DEFAULT_MAX_MEMORY_DEPTH) -> tuple[Candidate, ...]:
    """Stage 1: the candidates whose temporaries have at most ``max_depth`` indices."""
    if not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"max_memory_depth must be a non-negative integer, got {max_depth!r}")
    return tuple(c for c in cands if c.cost.memory_depth <= max_depth)


def depth_poset_stage(cands: Iterable[Candidate], assumptions: Assumptions | None = None) -> tuple[Candidate, ...]:
    """Stage 2a: drop a candidate when another has loop and memory depth no larger, one smaller.

    With ``assumptions``, the other must also have an asymptotic time no larger (``O(.)``
    under the seed's assumptions) before it drops the candidate. Loop depth is the seed's
    proxy for time, and a proxy only: in the TTM chain ``ijk,kl,lm->ijm`` the top-level
    temporary ``T<k,m> = C*D`` (time ``K*L*M + M*nnz(B)``, depths 4/2) is dropped by the
    per-fibre scalar temporary (``L*M*nnz(B_ij) + L*nnz(B)``, depths 4/0), although neither
    is asymptotically faster and on long fibres the first does several times less work.
    """
    cands = tuple(cands)

    def key(c: Candidate) -> tuple:  # all that decides whether one candidate beats another
        return c.cost.loop_depth, c.cost.memory_depth, c.cost.time if assumptions is not None else None

    def beats(q: tuple, p: tuple) -> bool:
        if not (q[0] <= p[0] and q[1] <= p[1] and q[:2] != p[:2]):
            return False
        return assumptions is None or assumptions.le(q[2], p[2])

    keys = set(map(key, cands))  # candidates with one key stand or fall together
    dropped = {p for p in keys if any(beats(q, p) for q in keys)}
    return tuple(c for c in cands if key(c) not in dropped)


def pointwise_dominates(a: Candidate, b: Candidate, assumptions: Assumptions) -> bool:
    """``a``'s time and memory polynomials are <= ``b``'s everywhere, and not both equal."""
    at, am, bt, bm = a.cost.time, a.cost.memory, b.cost.time, b.cost.memory
    if not (assumptions.pointwise_le(at, bt) and assumptions.pointwise_le(am, bm)):
        return False
    return not (assumptions.pointwise_le(bt, at) and assumptions.pointwise_le(bm, am))


def buckets(cands: Iterable[Candidate], assumptions: Assumptions) -> tuple[Bucket, ...]:
    """Group candidates by their asymptotic (time, memory), in first-seen order, and drop from
    each bucket the candidates another in it beats term by term (seed section 3.1: Figure 2(d) beats
    2(e), whose extra 1-D temporary does not change the asymptotic memory)."""
    groups: dict[tuple[Poly, Poly], list[Candidate]] = {}
    for c in cands:
        key = (assumptions.asymptotic(c.cost.time), assumptions.asymptotic(c.cost.memory))
        groups.setdefault(key, []).append(c)
    out = []
    for (t, m), cs in groups.items():
        costs = {}
        for c in cs:
            costs.setdefault((c.cost.time, c.cost.memory), []).append(c)
        reps = [v[0] for v in costs.values()]
        keep = {
            (r.cost.time, r.cost.memory)
            for r in reps
            if not any(pointwise_dominates(o, r, assumptions) for o in reps if o is not r)
        }
        out.append(Bucket(t, m, tuple(c for c in cs if (c.cost.time, c.cost.memory) in keep)))
    return tuple(out)


def dominates(a: Bucket, b: Bucket, assumptions: Assumptions) -> bool:
    """True when ``a`` is no worse than ``b`` in time and memory for all symbol values, and
    strictly better in one of them asymptotically."""
    le_t = assumptions.le(a.time, b.time)
    le_m = assumptions.le(a.memory, b.memory)
    if not (le_t and le_m):
        return False
    return not (assumptions.le(b.time, a.time) and assumptions.le(b.memory, a.memory))


def frontier_stage(bs: Iterable[Bucket], assumptions: Assumptions) -> tuple[Bucket, ...]:
    """Stage 2b: the buckets that no other bucket dominates (symbolic Pareto frontier)."""
    bs = tuple(bs)
    return tuple(b for b in bs if not any(dominates(o, b, assumptions) for o in bs if o is not b))


def estimate_level_counts(operand: Operand, sizes: Mapping[str, int], nnz: int) -> dict[tuple[str, ...], float]:
    """Stored positions per compressed level of ``operand`` with ``nnz`` values spread uniformly.

    The deepest compressed level holds ``nnz`` divided by the trailing dense extents; a level
    above it holds the expected number of distinct prefixes, ``M * (1 - exp(-n / M))`` for
    ``M`` prefix cells.
    """
    comp = [k for k, f in enumerate(operand.levels) if f.sparse]
    if not comp:
        return {}
    last = comp[-1]
    trailing = math.prod(sizes[i] for i in operand.indices[last + 1 :])
    n = max(nnz / max(trailing, 1), 0.0)
    counts = {}
    for c in comp:
        cells = math.prod(sizes[i] for i in operand.indices[: c + 1])
        counts[operand.indices[: c + 1]] = n if c == last else cells * -math.expm1(-n / cells)
    return counts


def environment(
    operands: Iterable[Operand],
    sizes: Mapping[str, int],
    nnz: Mapping[str, object] | None = None,
) -> dict[Symbol, float]:
    """Concrete symbol values: ``sizes`` maps index -> extent; ``nnz`` maps a sparse operand's
    name to its stored values (an int, levels estimated by :func:`estimate_level_counts`) or to
    a sequence of stored positions per compressed level (outermost first). Raises ValueError
    naming a missing size or count."""
    nnz = dict(nnz or {})
    env: dict[Symbol, float] = {}
    operands = tuple(operands)
    for o in operands:
        for i in o.indices:
            if i not in sizes:
                raise ValueError(f"run-time choice: no size for index {i!r} of operand {o.name}")
            s = sizes[i]
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ValueError(f"run-time choice: size of index {i!r} must be a positive int, got {s!r}")
            env[dim_symbol(i)] = float(s)
    for o in operands:
        if not o.sparse:
            continue
        if o.name not in nnz:
            raise ValueError(f"run-time choice: no non-zero count for sparse operand {o.name}")
        given = nnz[o.name]
        comp = [k for k, f in enumerate(o.levels) if f.sparse]
        if isinstance(given, int) and not isinstance(given, bool):
            if given < 0:
                raise ValueError(f"run-time choice: nnz of {o.name} must be >= 0, got {given}")
            counts = estimate_level_counts(o, sizes, given)
        elif isinstance(given, (tuple, list)) and len(given) == len(comp):
            counts = {o.indices[: c + 1]: float(v) for c, v in zip(comp, given, strict=True)}
        else:
            raise ValueError(
                f"run-time choice: nnz of {o.name} must be an int or {len(comp)} per-level counts, got {given!r}"
            )
        for prefix, v in counts.items():
            env[nnz_symbol(o.name, prefix)] = max(float(v), 1.0)
    return env


def cache_cost(nest: Nest, sizes: Mapping[str, int]) -> int:
    """The seed's leaf cache criterion: for each statement, each access whose stored indices
    contain the innermost loop index but not as the last one costs the product of the extents
    after it (the stride between consecutive iterations)."""
    total = 0

    def walk(body: tuple[Node, ...], inner: str | None) -> None:
        nonlocal total
        for node in body:
            if isinstance(node, Loop):
                walk(node.body, node.index)
            elif isinstance(node, Compute) and inner is not None:
                for a in (node.out, *node.ins):
                    if inner in a.indices and a.indices[-1] != inner:
                        k = a.indices.index(inner)
                        total += math.prod(sizes.get(i, 1) for i in a.indices[k + 1 :])

    walk(nest.body, None)
    return total


#: nanoseconds per execution of a statement by its code path, fp64 with 4 lanes (AVX2), one
#: thread of the project's Zen 3 host (fitted: bench/results/model_constants_measurements.md): a
#: vector of ``lanes`` elements of a vectorized inner loop, an element of a strided scalar loop,
#: and a statement of the general scalar path (each address through the stack)
VECTOR_NS = 0.73
STRIDED_NS = 0.91
SCALAR_NS = 4.5


@dataclass(frozen=True)
class MachineCosts:
    """Stage 4's weights per statement execution (ns): ``lanes`` vector lanes of the dtype on the
    target, a vector's time (``vector``), a strided element's and a scalar statement's. Only
    their ratios choose; the fitted host's nanoseconds make the estimate readable."""

    lanes: int
    vector: float = VECTOR_NS
    strided: float = STRIDED_NS
    scalar: float = SCALAR_NS

    def __post_init__(self) -> None:
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive int, got {self.lanes!r}")
        for name in ("vector", "strided", "scalar"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"{name} must be a positive number of nanoseconds, got {v!r}")

    def per_execution(self, path: str) -> float:
        """Nanoseconds of one execution of a statement on ``path`` ("vector": one element's share)."""
        if path == "vector":
            return self.vector / self.lanes
        return self.strided if path == "strided" else self.scalar


def machine_time(nest: Nest, env: Mapping[Symbol, float], costs: MachineCosts) -> float:
    """The estimated nanoseconds of ``nest`` (one thread): each statement's executions at ``env``
    times the time of its code path (`MachineCosts.per_execution`)."""
    return sum(m.evaluate(env) * costs.per_execution(path) for m, path in statement_counts(nest))


@dataclass(frozen=True)
class Choice:
    """The run-time choice: the candidate, its evaluated time and memory, and why."""

    candidate: Candidate
    time: float
    memory: float
    reason: str
    unit: str = "iterations"  # of ``time``: the seed's iterations, or "ns" (`MachineCosts`)


def choose(
    cands: Iterable[Candidate],
    env: Mapping[Symbol, float],
    sizes: Mapping[str, int],
    memory_limit: float | None = None,
    alternatives: Iterable[Candidate] = (),
    machine: MachineCosts | None = None,
    linear: Candidate | None = None,
) -> Choice:
    """Stage 4: least evaluated time among candidates whose temporaries fit ``memory_limit``
    elements (None: no limit); when none fits, least memory. Ties: memory, cache cost, order.
    With ``machine`` the time is `machine_time` (ns), and the ``alternatives`` whose iterations
    tie a candidate's and ``linear`` (the default linear schedule) compete too.

    Stage 5 (seed section 5.3, cache criterion): among the chosen schedule, the candidates and the
    ``alternatives`` (e.g. the stage-1 survivors the symbolic stages dropped) whose evaluated
    time equals the chosen one and whose temporaries fit, the least :func:`cache_cost` wins,
    then the least memory: the same iterations with unit-stride innermost loops (which a code
    generator can vectorize) beat strided ones.
    """
    cands = tuple(cands)
    if not cands:
        raise ValueError("run-time choice: no candidate schedule")
    if machine is not None:  # the schedules the seed's time ties with a candidate's compete too
        seed = [c.cost.time.evaluate(env) for c in cands]
        seen = {id(c) for c in cands}
        for c in alternatives:
            t = c.cost.time.evaluate(env)
            if id(c) not in seen and any(abs(t - s) <= 1e-9 * s for s in seed):
                cands += (c,)
                seen.add(id(c))
        if linear is not None and all(c.nest != linear.nest for c in cands):
            cands = (*cands, linear)

    def time(c: Candidate) -> float:
        return c.cost.time.evaluate(env) if machine is None else machine_time(c.nest, env, machine)

    unit = "iterations" if machine is None else "ns"
    scored = [(time(c), c.cost.memory.evaluate(env), cache_cost(c.nest, sizes), k, c) for k, c in enumerate(cands)]
    fits = [s for s in scored if memory_limit is None or s[1] <= memory_limit]
    if not fits:
        best = min(scored, key=lambda s: (s[1], s[0], s[2], s[3]))
        reason = f"no schedule's temporaries fit {memory_limit:.0f} elements: least memory"
        return Choice(best[4], best[0], best[1], reason, unit)
    best = min(fits, key=lambda s: s[:4])
    reason = "least time" if machine is None else f"least estimated time ({machine.lanes} lanes)"
    reason += "" if memory_limit is None else f" with temporaries <= {memory_limit:.0f} elements"
    seen = {id(c) for c in cands}
    pool = list(fits)
    # with weights, the tied alternatives are among the candidates already: none left to score
    for k, c in enumerate(alternatives if machine is None else (), len(scored)):
        if id(c) in seen:
            continue
        t = c.cost.time.evaluate(env)
        if abs(t - best[0]) <= 1e-9 * best[0]:
            m = c.cost.memory.evaluate(env)
            if memory_limit is None or m <= memory_limit:
                pool.append((t, m, cache_cost(c.nest, sizes), k, c))
    ties = [s for s in pool if abs(s[0] - best[0]) <= 1e-9 * best[0]]
    five = min(ties, key=lambda s: (s[2], s[1], s[3]))
    if five[2] < best[2]:
        reason += f"; stage 5: same time, cache cost {five[2]} instead of {best[2]}"
        best = five
    return Choice(best[4], best[0], best[1], reason, unit)
