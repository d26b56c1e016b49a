"""Blocked reductions (`minijit.einsum.blocked`): long sums in levels of short chains, against
math.fsum within the bound docs/decisions.md states, natively and in the AArch64 emulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.einsum import blocked

from .test_einsum import EMULATED


@given(st.integers(1, 10**7))
@settings(max_examples=200, deadline=None)
def test_factors_multiply_back_and_are_short(n):
    fs = blocked.factors(n)
    assert math.prod(fs) == n
    assert fs[0] <= blocked.LEAF_MAX
    for f in fs[1:]:
        assert f <= blocked.FAN_IN_MAX or all(f % d for d in range(2, math.isqrt(f) + 1))  # else a prime


def test_levels_keep_short_sums_whole_and_cut_long_ones():
    assert blocked.levels(("i", "j"), {"j"}, {"i": 5, "j": 1024}) is None
    ids, sizes, stages = blocked.levels(("i", "j", "k"), {"i", "k"}, {"i": 3000, "j": 7, "k": 200})
    assert math.prod(sizes.values()) == 3000 * 200 and "j" in ids
    assert math.prod(sizes[c] for c in stages[0]) <= blocked.LEAF_MAX
    assert all(len(s) == 1 and sizes[s[0]] <= blocked.FAN_IN_MAX for s in stages[1:])
    assert sorted(c for s in stages for c in s) == sorted(c for c in ids if c != "j")


def test_numpys_chunking_precision_case():
    # numpy's test_einsum_chunking_precision: the mean of 10^6 equal values to 15 decimals
    num, value = 1_000_000, 1.0 + np.finfo(np.float64).eps * 8196
    res = minijit.einsum("i->", np.broadcast_to(np.array(value), num)) / num
    assert abs(res - value) < 1.5e-15
    assert abs(res - value) <= abs(np.einsum("i->", np.broadcast_to(np.array(value), num)) / num - value)


def _bound(ids, drop, sizes) -> int:
    """(L - 1 + sum(f - 1)): the chain length the stated error bound multiplies by u * sum|x|."""
    cut = blocked.levels(ids, drop, sizes)
    if cut is None:
        return math.prod(sizes[c] for c in drop) - 1
    _, new_sizes, stages = cut
    return math.prod(new_sizes[c] for c in stages[0]) - 1 + sum(new_sizes[s[0]] - 1 for s in stages[1:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("sub", "sizes"),
    [
        ("ij->j", {"i": 3000, "j": 5}),  # the summed index outermost
        ("ij->i", {"i": 3, "j": 4100}),  # innermost
        ("ijk->j", {"i": 1040, "j": 3, "k": 7}),  # two runs, the inner one short
        ("ij->", {"i": 60, "j": 700}),  # one run of two adjacent indices
    ],
)
@given(seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 1e-3, 1e6]))
@settings(max_examples=3, deadline=None)
def test_long_sums_within_the_stated_bound(dtype, sub, sizes, seed, scale):
    ins, out = sub.split("->")
    shape = tuple(sizes[c] for c in ins)
    a = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
    got = minijit.einsum(sub, a).astype(np.float64)
    drop = {c for c in ins if c not in out}
    axes = tuple(k for k, c in enumerate(ins) if c in drop)
    moved = np.moveaxis(a.astype(np.float64), axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))
    exact = np.apply_along_axis(math.fsum, -1, flat)
    absum = np.abs(flat).sum(-1)
    chain = _bound(tuple(ins), drop, sizes)
    assert chain < flat.shape[-1] - 1  # shorter than one chain
    bound = chain * np.finfo(dtype).eps / 2 * absum * 1.01
    assert (np.abs(got - exact) <= bound).all()


def test_a_prime_length_sum_is_one_chain_and_right():
    a = np.random.default_rng(4).standard_normal(3413)  # prime: no blocks (docs/decisions.md)
    assert blocked.levels(("i",), {"i"}, {"i": 3413}) is None
    assert abs(minijit.einsum("i->", a) - math.fsum(a)) <= 3412 * np.finfo(np.float64).eps / 2 * np.abs(a).sum()


@pytest.mark.parametrize("target", EMULATED)
def test_long_sums_in_the_emulator(target):
    a = np.random.default_rng(3).standard_normal((2100, 5)).astype(np.float32)
    plan = minijit.EinsumPlan("ij->j", a.shape, dtype=np.float32, target=target)
    assert len(plan.steps) == 2  # a block level and a combining level
    exact = np.array([math.fsum(c) for c in a.astype(np.float64).T])
    bound = _bound(("i", "j"), {"i"}, {"i": 2100, "j": 5}) * np.finfo(np.float32).eps / 2
    assert (np.abs(plan(a) - exact) <= bound * np.abs(a).astype(np.float64).sum(0) * 1.01).all()
