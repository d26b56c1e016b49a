"""Contraction paths: greedy and optimal (dynamic programming over subsets) under an IO cost model.

The cost of one pairwise contraction follows seed 001's IO model in its simplest form: the time
of a node is its flops plus ``BYTE_WEIGHT`` flop-equivalents per byte moved between memory and
the core (both operands read once, the result written once). ``BYTE_WEIGHT`` is the ratio of a
core's FMA throughput to its share of memory bandwidth (flops per byte).
A path is a list of position pairs in numpy's convention: each step removes two operands from the
list and appends their result at the end.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BYTE_WEIGHT", "PathInfo", "checked_step", "contraction_cost", "greedy_path", "optimal_path", "path_cost"]

#: flop-equivalents per byte moved (peak flops / bandwidth of one core, order of magnitude)
BYTE_WEIGHT = 5.0
#: the default search (``optimize=True``) is optimal up to this many operands, greedy above
OPTIMAL_LIMIT = 8
#: ``optimize="optimal"`` refuses more operands than this (3^n subset pairs)
OPTIMAL_MAX = 12


def checked_step(i: int, j: int, count: int) -> tuple[int, int]:
    """A path step ``(i, j)`` sorted, or ValueError unless it names two different operands of ``count``."""
    i, j = sorted((i, j))
    if i < 0 or j >= count or i == j:
        raise ValueError(f"einsum: path step {(i, j)} must name two different operands of {count}")
    return i, j


def _size(ids, sizes) -> int:
    return math.prod(sizes[c] for c in ids)


def contraction_cost(a: frozenset, b: frozenset, out: frozenset, sizes: dict[str, int], itemsize: int = 4) -> float:
    """Flops + BYTE_WEIGHT * bytes moved for contracting index sets ``a`` and ``b`` into ``out``."""
    flops = 2 * _size(a | b, sizes)
    moved = itemsize * (_size(a, sizes) + _size(b, sizes) + _size(out, sizes))
    return flops + BYTE_WEIGHT * moved


def _kept(a: frozenset, b: frozenset, others: Sequence[frozenset], output: frozenset) -> frozenset:
    need = set(output)
    for o in others:
        need |= o
    return frozenset((a | b) & need)


@dataclass(frozen=True)
class PathInfo:
    """A path with its per-step index sets and costs (see `path_cost`)."""

    path: list[tuple[int, int]]
    steps: list[tuple[frozenset, frozenset, frozenset, float, int]]  # (a, b, out, cost, flops)
    cost: float

    @property
    def flops(self) -> int:
        return sum(s[4] for s in self.steps)

    @property
    def largest_intermediate(self) -> int:
        return max((s[5] if len(s) > 5 else 0 for s in self.steps), default=0)


def path_cost(
    inputs: Sequence[frozenset], output: frozenset, sizes: dict[str, int], path, itemsize: int = 4
) -> PathInfo:
    """Cost of following ``path`` (numpy convention) from ``inputs`` to ``output``."""
    ops = list(inputs)
    steps = []
    total = 0.0
    for i, j in path:
        i, j = sorted((i, j))
        b = ops.pop(j)
        a = ops.pop(i)
        out = _kept(a, b, ops, output)
        c = contraction_cost(a, b, out, sizes, itemsize)
        steps.append((a, b, out, c, 2 * _size(a | b, sizes)))
        total += c
        ops.append(out)
    return PathInfo([tuple(p) for p in path], steps, total)


def greedy_path(inputs: Sequence[frozenset], output: frozenset, sizes: dict[str, int], itemsize: int = 4):
    """Repeatedly contract the pair with the cheapest node (ties: smallest result); outer products
    only when no pair shares an index."""
    ops = list(inputs)
    path: list[tuple[int, int]] = []
    while len(ops) > 1:
        best = None
        for i, j in itertools.combinations(range(len(ops)), 2):
            others = [o for k, o in enumerate(ops) if k not in (i, j)]
            out = _kept(ops[i], ops[j], others, output)
            outer = not (ops[i] & ops[j])
            key = (outer, contraction_cost(ops[i], ops[j], out, sizes, itemsize), _size(out, sizes), i, j)
            if best is None or key < best[0]:
                best = (key, i, j, out)
        _, i, j, out = best
        path.append((i, j))
        ops = [o for k, o in enumerate(ops) if k not in (i, j)] + [out]
    return path


def optimal_path(inputs: Sequence[frozenset], output: frozenset, sizes: dict[str, int], itemsize: int = 4):
    """The cheapest contraction tree under `contraction_cost` (DP over subsets, O(3^n))."""
    n = len(inputs)
    if n > OPTIMAL_MAX:
        raise ValueError(f"einsum: optimal path search takes at most {OPTIMAL_MAX} operands, got {n}")
    if n == 1:
        return []
    full = (1 << n) - 1
    # indices of a subset's result: those of its operands also used outside it or in the output
    ids_of: dict[int, frozenset] = {}
    union: dict[int, frozenset] = {0: frozenset()}
    for s in range(1, full + 1):
        low = s & -s
        union[s] = union[s ^ low] | inputs[low.bit_length() - 1]
    for s in range(1, full + 1):
        outside = set(output)
        rest = full ^ s
        outside |= union[rest]
        ids_of[s] = frozenset(union[s] & outside)
    best: dict[int, tuple[float, object]] = {1 << i: (0.0, i) for i in range(n)}
    for s in sorted(range(1, full + 1), key=lambda x: bin(x).count("1")):
        if s in best:
            continue
        low = s & -s
        choice = None
        sub = (s - 1) & s
        while sub:
            if sub & low:  # each split once: the part holding the lowest operand
                other = s ^ sub
                c = best[sub][0] + best[other][0]
                if choice is None or c < choice[0]:
                    c += contraction_cost(ids_of[sub], ids_of[other], ids_of[s], sizes, itemsize)
                    if choice is None or c < choice[0]:
                        choice = (c, (sub, other))
            sub = (sub - 1) & s
        best[s] = choice
    # tree -> numpy-style path
    ops: list[int] = [1 << i for i in range(n)]
    path: list[tuple[int, int]] = []

    def emit(s: int) -> None:
        tree = best[s][1]
        if isinstance(tree, int):
            return
        a, b = tree
        emit(a)
        emit(b)
        i, j = ops.index(a), ops.index(b)
        path.append((min(i, j), max(i, j)))
        ops.remove(a)
        ops.remove(b)
        ops.append(s)

    emit(full)
    return path
