"""The one lowering of an einsum: operands' index tuples, a contraction path, a tree of pairwise
contractions. The CPU plan (`minijit.einsum.plan`) and the CUDA plan (`minijit.einsum.cuda`) both
consume a `Lowering` and ask their target for one operation per node.

Indices of size 1 are dropped from every tensor (they change no address). Node ids: the inputs are
``0 .. n-1``, contraction ``k`` of the path makes node ``n + k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minijit.einsum import grammar as _grammar
from minijit.einsum import path as _path
from minijit.einsum.parse import Expression


@dataclass(frozen=True)
class Contraction:
    """One pairwise step: nodes ``left`` and ``right`` (sorted operand positions of the path step)
    contract into a tensor holding ``kept``; ``batch`` indices are in both and kept, ``summed`` in
    both and dropped."""

    left: int
    right: int
    kept: frozenset[str]
    batch: frozenset[str]
    summed: frozenset[str]


@dataclass(frozen=True)
class Lowering:
    """An einsum lowered for fixed shapes: per input its indices (size-1 dims dropped, in the
    operand's order) and the set a contraction must carry (indices another tensor or the output
    needs), the output's indices, the pairwise path and its contractions in order."""

    sizes: dict[str, int]
    inputs: tuple[tuple[str, ...], ...]
    sets: tuple[frozenset[str], ...]
    output: tuple[str, ...]
    path: tuple[tuple[int, int], ...]
    steps: tuple[Contraction, ...]

    def tree(self) -> Any:
        """The contraction tree as nested pairs of input positions (an int for one input)."""
        nodes: list[Any] = list(range(len(self.inputs)))
        for step in self.steps:
            right, left = nodes.pop(step.right), nodes.pop(step.left)
            nodes.append((left, right))
        return nodes[0]


def choose_path(
    sets: list[frozenset[str]], out: frozenset[str], sizes: dict[str, int], optimize: Any, itemsize: int
) -> list[tuple[int, int]]:
    """The pairwise path for ``optimize`` (`grammar.normalize_optimize`'s forms): an explicit path
    as given (steps of three or more operands made pairwise), True = optimal up to
    `path.OPTIMAL_LIMIT` operands else greedy, "greedy", "optimal", False = left to right."""
    n = len(sets)
    opt = _grammar.normalize_optimize(optimize, n)
    if n < 2:
        return []
    if isinstance(opt, list):
        return opt
    if opt is False:
        return [(0, 1)] * (n - 1)
    if opt == "greedy" or (opt is True and n > _path.OPTIMAL_LIMIT):
        return _path.greedy_path(sets, out, sizes, itemsize)
    return _path.optimal_path(sets, out, sizes, itemsize)


def lower(expr: Expression, shapes: list[tuple[int, ...]], optimize: Any, itemsize: int) -> Lowering:
    """Lower parsed ``expr`` over ``shapes`` (see the module docstring); ValueError for a bad path."""
    sizes = dict(expr.sizes)
    inputs = tuple(
        tuple(c for c, s in zip(sub, sh, strict=True) if s != 1) for sub, sh in zip(expr.inputs, shapes, strict=True)
    )
    output = tuple(c for c in expr.output if sizes[c] != 1)
    counts: dict[str, int] = {}
    for ids in inputs:
        for c in ids:
            counts[c] = counts.get(c, 0) + 1
    sets = tuple(frozenset(c for c in x if counts[c] > 1 or c in output) for x in inputs)
    path = choose_path(list(sets), frozenset(output), sizes, optimize, itemsize)
    live = list(sets)
    steps = []
    for i, j in path:
        i, j = _path.checked_step(i, j, len(live))
        sb, sa = live.pop(j), live.pop(i)
        need = set(output)
        for x in live:
            need |= x
        kept = frozenset((sa | sb) & need)
        steps.append(Contraction(i, j, kept, frozenset(sa & sb & kept), frozenset((sa & sb) - kept)))
        live.append(kept)
    if len(live) != 1 and inputs:
        raise ValueError(f"einsum: path {path} leaves {len(live)} operands, not one")
    return Lowering(sizes, inputs, sets, output, tuple(path), tuple(steps))
