"""Contraction path search: optimal vs greedy vs exhaustive enumeration, matrix chains."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

import minijit
from minijit.einsum import greedy_path, optimal_path, parse_subscripts, path_cost
from minijit.einsum.path import checked_step
from tests.conftest import examples
from tests.minijit.einsum.strategies import expressions


def _sets(subs, shapes):
    expr = parse_subscripts(subs, *shapes)
    counts = {}
    for sub in expr.inputs:
        for c in sub:
            counts[c] = counts.get(c, 0) + 1
    out = frozenset(expr.output)
    ins = [frozenset(c for c in sub if counts[c] > 1 or c in out) for sub in expr.inputs]
    return ins, out, expr.sizes


def _all_paths(n):
    """Every numpy-style path for n operands (all pair choices at every step)."""
    if n <= 1:
        yield []
        return
    for pair in itertools.combinations(range(n), 2):
        for rest in _all_paths(n - 1):
            yield [pair, *rest]


@settings(max_examples=examples(80))
@given(expressions(min_ops=2, max_ops=8, broadcast=False))
def test_optimal_never_costs_more_than_greedy(expr):
    ins, out, sizes = _sets(*expr)
    opt = path_cost(ins, out, sizes, optimal_path(ins, out, sizes))
    greedy = path_cost(ins, out, sizes, greedy_path(ins, out, sizes))
    assert opt.cost <= greedy.cost * (1 + 1e-12)
    assert len(opt.path) == len(greedy.path) == len(ins) - 1


@settings(max_examples=examples(40))
@given(expressions(min_ops=2, max_ops=5, broadcast=False))
def test_optimal_matches_exhaustive_search(expr):
    ins, out, sizes = _sets(*expr)
    best = min(path_cost(ins, out, sizes, p).cost for p in _all_paths(len(ins)))
    assert path_cost(ins, out, sizes, optimal_path(ins, out, sizes)).cost == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize(
    ("shapes", "first"),
    [
        ([(10, 100), (100, 5), (5, 50)], (0, 1)),  # (AB)C: AB is 10x5
        ([(50, 5), (5, 100), (100, 10)], (1, 2)),  # A(BC): BC is 5x10
    ],
)
def test_matrix_chain_order(shapes, first):
    for method in ("optimal", "greedy"):
        path, info = minijit.contract_path("ij,jk,kl->il", *shapes, optimize=method)
        assert path[0] == first, (method, path)
        assert "ij,jk,kl->il" in info
    # the order numpy picks for the same chain (flop count only, so where sizes are this lopsided it agrees)
    np_path = np.einsum_path("ij,jk,kl->il", *[np.ones(s) for s in shapes], optimize="optimal")[0]
    assert tuple(np_path[1]) == first


def test_long_chain_flops_match_the_classic_dp():
    """Matrix-chain DP (CLRS) over flops; with BYTE_WEIGHT's IO term the chosen tree's flops may
    exceed the flop-optimal ones only slightly; the result stays exact."""
    dims = [30, 35, 15, 5, 10, 20, 25]
    n = len(dims) - 1
    m = [[0] * n for _ in range(n)]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            m[i][j] = min(m[i][k] + m[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1] for k in range(i, j))
    letters = "abcdefg"
    subs = ",".join(letters[i] + letters[i + 1] for i in range(n)) + "->a" + letters[n]
    shapes = [(dims[i], dims[i + 1]) for i in range(n)]
    ins, out, sizes = _sets(subs, shapes)
    info = path_cost(ins, out, sizes, optimal_path(ins, out, sizes))
    assert 2 * m[0][n - 1] <= info.flops <= 1.2 * 2 * m[0][n - 1]
    rng = np.random.default_rng(0)
    ops = [rng.random(s) for s in shapes]
    np.testing.assert_allclose(minijit.einsum(subs, *ops), np.linalg.multi_dot(ops), rtol=1e-10)


def test_contract_path_and_explicit_paths():
    shapes = [(8, 4), (4, 6), (6, 3), (3, 5)]
    subs = "ab,bc,cd,de->ae"
    path, info = minijit.contract_path(subs, *shapes)
    assert len(path) == 3 and all(0 <= i < j for i, j in path)
    assert "Flops" in info
    rng = np.random.default_rng(1)
    ops = [rng.random(s) for s in shapes]
    ref = np.einsum(subs, *ops)
    for explicit in ([(0, 1), (0, 1), (0, 1)], [(2, 3), (0, 1), (0, 1)], ["einsum_path", (1, 2), (0, 2), (0, 1)]):
        np.testing.assert_allclose(minijit.einsum(subs, *ops, optimize=explicit), ref, rtol=1e-12)
    for method in (False, "greedy", "optimal"):
        np.testing.assert_allclose(minijit.einsum(subs, *ops, optimize=method), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="optimize"):
        minijit.einsum(subs, *ops, optimize="fastest")
    for bad in ([(0, 5), (0, 1), (0, 1)], [(1, 1), (0, 1), (0, 1)], [(0, 1), (0, 1)]):
        with pytest.raises(ValueError, match="path"):
            minijit.einsum(subs, *ops, optimize=bad)


@pytest.mark.parametrize("step", [(0, 0), (-1, 1), (0, 3), (5, 1)])
def test_explicit_paths_with_bad_steps_raise_before_planning(step):
    with pytest.raises(ValueError, match="must name different operands of the 3 left"):
        minijit.EinsumPlan("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), optimize=["einsum_path", step, (0, 1)])
    assert checked_step(2, 0, 3) == (0, 2)
