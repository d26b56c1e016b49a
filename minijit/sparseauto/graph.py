"""Iteration graphs of sparse tensor expressions and their legal loop orders
(docs/seeds/002_sparseauto.txt section 2.3).

An expression ``out = prod(operands)`` over named indices has one node per index. Each sparse
operand (some level compressed) adds the edges of its storage order: its level ``k`` index
must be iterated outside its level ``k+1`` index. The legal loop orders are the topological
orders of that graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from minijit.sparseauto.nest import Operand


def parse_subscripts(subscripts: str, n_operands: int) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """Split einsum ``subscripts`` (``"ijk,jl->il"``; the output may be implicit) into index tuples.

    Indices are single letters. Returns ``(input terms, output term)``. Raises ValueError naming
    the term for a bad character, a repeated index in one term (diagonals), an output index
    that no input has, or a term count that differs from ``n_operands``.
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"subscripts must be a string, got {type(subscripts).__name__}")
    text = subscripts.replace(" ", "")
    if text.count("->") > 1:
        raise ValueError(f"subscripts {subscripts!r}: more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_operands:
        raise ValueError(f"subscripts {subscripts!r} name {len(terms)} operands but {n_operands} were given")
    inputs = []
    for k, term in enumerate(terms):
        inputs.append(_term(term, f"operand {k} ({term!r})"))
    if arrow:
        output = _term(rhs, f"output ({rhs!r})")
        seen = {i for t in inputs for i in t}
        for idx in output:
            if idx not in seen:
                raise ValueError(f"subscripts {subscripts!r}: output index {idx!r} is in no operand")
    else:
        flat = [i for t in inputs for i in t]
        output = tuple(sorted(i for i in set(flat) if flat.count(i) == 1))
    return tuple(inputs), output


def _term(term: str, what: str) -> tuple[str, ...]:
    for ch in term:
        if not (ch.isascii() and ch.isalpha()):
            raise ValueError(f"subscripts: {what} holds {ch!r}; indices are single letters a-z, A-Z")
    if len(set(term)) != len(term):
        raise ValueError(f"subscripts: {what} repeats an index (diagonals are not supported)")
    return tuple(term)


@dataclass(frozen=True)
class IterationGraph:
    """The iteration graph of ``output = prod(operands)``: indices and sparse-order edges."""

    operands: tuple[Operand, ...]
    output: Operand

    def __post_init__(self) -> None:
        order = self.natural_order()
        if order is None:
            raise ValueError(
                "the sparse operands' storage orders contradict each other ("
                + ", ".join(str(o) for o in self.operands if o.sparse)
                + "): no loop order visits every sparse level in order; store one operand in "
                "another mode order or densify it"
            )

    @property
    def indices(self) -> tuple[str, ...]:
        """Every index, in order of first appearance in the inputs."""
        seen: dict[str, None] = {}
        for o in self.operands:
            for i in o.indices:
                seen.setdefault(i, None)
        return tuple(seen)

    @property
    def edges(self) -> frozenset[tuple[str, str]]:
        """``(a, b)``: ``a`` must be iterated outside ``b`` (consecutive levels of a sparse operand)."""
        return frozenset(e for o in self.operands for e in sparse_edges(o))

    def is_legal(self, order: Iterable[str]) -> bool:
        """True when the loop order ``order`` (all indices) respects every sparse operand."""
        order = tuple(order)
        if sorted(order) != sorted(self.indices):
            return False
        return all(prefix_legal(o, order) for o in self.operands)

    def loop_orders(self, limit: int | None = None) -> Iterator[tuple[str, ...]]:
        """All legal loop orders (topological orders), at most ``limit`` of them."""
        return topological_orders(self.indices, self.operands, limit=limit)

    def natural_order(self) -> tuple[str, ...] | None:
        """TACO's default: first appearance in the inputs, moved only as far as sparsity needs."""
        rank = {i: k for k, i in enumerate(self.indices)}
        return canonical_order(self.indices, (), self.operands, key=rank.__getitem__)


def sparse_edges(operand: Operand) -> tuple[tuple[str, str], ...]:
    """The storage-order edges of one operand (none when it is all dense)."""
    if not operand.sparse:
        return ()
    return tuple(zip(operand.indices, operand.indices[1:], strict=False))


def prefix_legal(operand: Operand, bound: tuple[str, ...]) -> bool:
    """True when the indices of a sparse ``operand`` bound so far (in ``bound`` order) are a
    prefix of its storage order; always True for a dense operand."""
    if not operand.sparse:
        return True
    mine = tuple(i for i in bound if i in operand.indices)
    return mine == operand.indices[: len(mine)]


def _ready(index: str, bound: tuple[str, ...], operands: Iterable[Operand]) -> bool:
    for o in operands:
        if o.sparse and index in o.indices:
            k = o.indices.index(index)
            if any(i not in bound for i in o.indices[:k]):
                return False
    return True


def topological_orders(
    indices: Iterable[str],
    operands: Iterable[Operand],
    bound: tuple[str, ...] = (),
    limit: int | None = None,
) -> Iterator[tuple[str, ...]]:
    """Every order of ``indices`` that, after the already bound ``bound``, keeps each sparse
    operand's levels in storage order. Yields at most ``limit`` orders."""
    todo = tuple(indices)
    ops = tuple(operands)
    count = 0

    def rec(prefix: tuple[str, ...], rest: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        nonlocal count
        if not rest:
            count += 1
            yield prefix
            return
        for idx in rest:
            if limit is not None and count >= limit:
                return
            if _ready(idx, bound + prefix, ops):
                yield from rec(prefix + (idx,), tuple(i for i in rest if i != idx))

    if all(prefix_legal(o, bound) for o in ops):
        yield from rec((), todo)


def canonical_order(
    indices: Iterable[str],
    bound: tuple[str, ...],
    operands: Iterable[Operand],
    key: Callable[[str], Any],
) -> tuple[str, ...] | None:
    """One legal order of ``indices`` after ``bound``: Kahn's algorithm taking, among the ready
    indices, the one with the smallest ``key``. None when no legal order exists (some sparse
    operand's earlier level is neither bound nor among ``indices``)."""
    ops = tuple(operands)
    if not all(prefix_legal(o, bound) for o in ops):
        return None
    rest = list(indices)
    order: tuple[str, ...] = ()
    while rest:
        ready = [i for i in rest if _ready(i, bound + order, ops)]
        if not ready:
            return None
        pick = min(ready, key=key)
        order += (pick,)
        rest.remove(pick)
    return order
