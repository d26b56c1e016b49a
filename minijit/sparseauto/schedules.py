"""Schedule enumeration: kernel fission with temporaries and fusion into branched nests (seed 002).

A computation ``out += prod(factors)`` under already bound outer loops is scheduled either

- linearly: one loop per free index, in a legal order, around one statement; or
- split: a non-empty proper subset of the factors (the producer) computes a dense temporary
  ``T`` over the producer's indices that the consumer (the other factors and ``out``) still
  needs (docs/seeds/002_sparseauto.txt section 4.3: indices in the producer that also appear in the
  consumer or the output),
  then the consumer reads ``T``. Any subset of ``T``'s indices may be fused: those loops
  enclose both producer and consumer, ``T`` is declared inside them and loses those indices.
  Producer and consumer are then scheduled recursively under the fused loops, which gives the
  seed's multi-level branched nests.

Within a linear section the loop order does not change the time or memory complexity, so each
section gets one canonical legal order (unit-stride indices innermost, seed section 5.3's cache
criterion); :func:`~minijit.sparseauto.graph.topological_orders` lists every order where needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations

from minijit.sparseauto.graph import IterationGraph, canonical_order
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Node, Operand, PatternError, Temp

#: Default cap on the number of schedules enumerated for one expression.
DEFAULT_LIMIT = 4000


@dataclass(frozen=True)
class ScheduleSpace:
    """The enumerated schedules of one expression (deduplicated, each validated)."""

    nests: tuple[Nest, ...]
    truncated: bool
    limit: int

    def message(self) -> str:
        """One line saying how many schedules there are and whether the cap cut them off."""
        if self.truncated:
            return (
                f"{len(self.nests)} schedules; enumeration truncated at the cap of {self.limit} "
                "(pass a larger limit to see more)"
            )
        return f"{len(self.nests)} schedules"


class _Truncated(Exception):
    pass


def _loops(order: tuple[str, ...], body: tuple[Node, ...]) -> tuple[Node, ...]:
    # the enumerator's indices, nodes and bodies are well formed by construction
    for index in reversed(order):
        body = (Loop.built(index, body),)
    return body


class _Enumerator:
    """The recursive enumeration. Temporaries are named after their content (producer factors,
    indices, declaration loops), so equal sub-problems are equal and memoized."""

    def __init__(self, operands: tuple[Operand, ...], output: Operand, limit: int, max_depth: int | None) -> None:
        self.max_depth = max_depth
        self.operands = operands
        self.limit = limit
        self.work = 0
        self.first = {i: k for k, i in enumerate(IterationGraph(operands, output).indices)}
        self.taken = {o.name for o in operands} | {output.name}
        self.names: dict[tuple, str] = {}
        self.implicit: dict[str, tuple[str, ...]] = {}  # temporary -> loops around its declaration
        self.memo: dict[tuple, list[tuple[Node, ...]]] = {}

    def eff(self, a: Access) -> set[str]:
        return set(a.indices) | set(self.implicit.get(a.tensor, ()))

    def sparse_ops(self, accesses: tuple[Access, ...]) -> tuple[Operand, ...]:
        names = {a.tensor for a in accesses}
        return tuple(o for o in self.operands if o.sparse and o.name in names)

    def key(self, accesses: tuple[Access, ...]):
        """Loop-order preference: indices far from the end of their accesses go outside."""
        score: dict[str, int] = {}
        for a in accesses:
            for pos, idx in enumerate(a.indices):
                score[idx] = score.get(idx, 0) + len(a.indices) - 1 - pos
        return lambda idx: (-score.get(idx, 0), self.first.get(idx, 0), idx)

    def ordered(self, indices: set[str]) -> tuple[str, ...]:
        return tuple(sorted(indices, key=lambda i: (self.first.get(i, 0), i)))

    def count(self) -> None:
        self.work += 1
        if self.work > max(20 * self.limit, 100_000):
            raise _Truncated

    def temp_name(self, producer: tuple[Access, ...], indices: tuple[str, ...], inner: tuple[str, ...]) -> str:
        key = (producer, indices, inner)
        if key not in self.names:
            k = len(self.names) + 1
            while f"T{k}" in self.taken:
                k += 1
            self.taken.add(f"T{k}")
            self.names[key] = f"T{k}"
            self.implicit[f"T{k}"] = inner
        return self.names[key]

    def bodies_list(self, out: Access, factors: tuple[Access, ...], outer: tuple[str, ...]) -> list[tuple[Node, ...]]:
        key = (out, factors, outer)
        if key not in self.memo:
            self.memo[key] = list(self.bodies(out, factors, outer))
        return self.memo[key]

    def bodies(self, out: Access, factors: tuple[Access, ...], outer: tuple[str, ...]) -> Iterator[tuple[Node, ...]]:
        """Every schedule of ``out += prod(factors)`` placed where ``outer`` loops are bound."""
        accesses = (out, *factors)
        free = set().union(*(self.eff(a) for a in accesses)) - set(outer)
        sparse = self.sparse_ops(factors)
        order = canonical_order(self.ordered(free), outer, sparse, self.key(accesses))
        if order is not None:
            self.count()
            yield _loops(order, (Compute(out, factors),))
        n = len(factors)
        for r in range(1, n):
            for chosen in combinations(range(n), r):
                producer = tuple(factors[k] for k in chosen)
                consumer = tuple(factors[k] for k in range(n) if k not in chosen)
                yield from self.splits(out, producer, consumer, outer)

    def splits(
        self, out: Access, producer: tuple[Access, ...], consumer: tuple[Access, ...], outer: tuple[str, ...]
    ) -> Iterator[tuple[Node, ...]]:
        idx_p = set().union(*(self.eff(a) for a in producer))
        if not set(outer) <= idx_p:
            return  # the producer would be recomputed in an outer loop it does not use
        idx_c = set().union(*(self.eff(a) for a in (*consumer, out)))
        tidx = (idx_p & idx_c) - set(outer)
        if len(producer) == 1 and idx_p - set(outer) == tidx:
            return  # a copy of one operand: never cheaper, only more memory
        sparse = self.sparse_ops(producer + consumer)
        everything = (out, *producer, *consumer)
        ordered_t = self.ordered(tidx)
        for r in range(len(ordered_t) + 1):
            for fused_set in combinations(ordered_t, r):
                fused = canonical_order(fused_set, outer, sparse, self.key(everything))
                if fused is None:
                    continue
                inner = outer + fused
                t_indices = tuple(i for i in ordered_t if i not in fused)
                if self.max_depth is not None and len(t_indices) > self.max_depth:
                    continue
                name = self.temp_name(producer, t_indices, inner)
                temp = Temp(name, t_indices)
                t_access = Access(name, t_indices)
                cons_bodies = self.bodies_list(out, consumer + (t_access,), inner)
                if not cons_bodies:
                    continue
                for pb in self.bodies_list(t_access, producer, inner):
                    for cb in cons_bodies:
                        self.count()
                        yield _loops(fused, (temp, *pb, *cb))


def renumbered(nest: Nest) -> Nest:
    """The same nest with its temporaries renamed T1, T2, ... in declaration order (for
    listings; names the operands use are skipped)."""
    taken = {o.name for o in nest.operands} | {nest.output.name}
    mapping: dict[str, str] = {}
    k = 0
    for t in nest.temps:
        k += 1
        while f"T{k}" in taken:
            k += 1
        mapping[t.name] = f"T{k}"

    def acc(a: Access) -> Access:
        return Access(mapping.get(a.tensor, a.tensor), a.indices)

    def node(n: Node) -> Node:
        if isinstance(n, Loop):
            return Loop(n.index, tuple(node(b) for b in n.body))
        if isinstance(n, Temp):
            return Temp(mapping[n.name], n.indices)
        return Compute(acc(n.out), tuple(acc(a) for a in n.ins))

    return Nest(nest.operands, nest.output, tuple(node(b) for b in nest.body))


def default_linear(operands: tuple[Operand, ...], output: Operand) -> Nest:
    """TACO's default schedule: one perfectly nested loop nest in the natural order, no temps."""
    order = IterationGraph(operands, output).natural_order()
    assert order is not None  # IterationGraph raised otherwise
    stmt = Compute(Access(output.name, output.indices), tuple(Access(o.name, o.indices) for o in operands))
    return Nest(operands, output, _loops(order, (stmt,))).validate()


def enumerate_schedules(
    operands: tuple[Operand, ...],
    output: Operand,
    limit: int = DEFAULT_LIMIT,
    max_memory_depth: int | None = None,
) -> ScheduleSpace:
    """Every schedule of ``output = prod(operands)`` reachable by fission and fusion.

    Deduplicated (every nest passes :meth:`Nest.validate`; the tests check it); at most
    ``limit`` nests (``truncated`` says when the cap or the enumeration work bound cut the
    space short). Schedules that would write a sparse
    (sampled) output outside the walk of its pattern operand are left out.
    """
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    operands = tuple(operands)
    IterationGraph(operands, output)  # raises for contradictory sparse orders
    if max_memory_depth is not None and (not isinstance(max_memory_depth, int) or max_memory_depth < 0):
        raise ValueError(f"max_memory_depth must be a non-negative integer, got {max_memory_depth!r}")
    enum = _Enumerator(operands, output, limit, max_memory_depth)
    out = Access(output.name, output.indices)
    factors = tuple(Access(o.name, o.indices) for o in operands)
    seen: dict[tuple[Node, ...], Nest] = {}  # operands and output are shared: the body decides equality
    truncated = False
    try:
        for body in enum.bodies(out, factors, ()):
            if body in seen:
                continue
            nest = Nest(operands, output, body)
            try:
                nest.check_pattern()
            except PatternError:
                continue
            if len(seen) >= limit:
                truncated = True
                break
            seen[body] = nest
    except _Truncated:
        truncated = True
    return ScheduleSpace(tuple(seen.values()), truncated, limit)
