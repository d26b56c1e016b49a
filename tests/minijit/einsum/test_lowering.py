"""The one einsum lowering (`minijit.einsum.lowering`) that the CPU and CUDA plans consume, and
repeated indices on operands without ``.diagonal``."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from minijit.einsum import path as _path
from minijit.einsum.lowering import lower
from minijit.einsum.parse import parse_subscripts
from tests.minijit.host_arrays import BareCuda, HostDLPack


def _lowered(subs: str, *shapes, optimize=True):
    return lower(parse_subscripts(subs, *shapes), [tuple(s) for s in shapes], optimize, 4)


def test_lowering_drops_size_one_dims_and_keeps_what_later_steps_need():
    low = _lowered("aij,jk,kl->il", (1, 3, 4), (4, 5), (5, 2), optimize=False)
    assert low.inputs == (("i", "j"), ("j", "k"), ("k", "l")) and low.output == ("i", "l")
    assert low.path == ((0, 1), (0, 1))
    first, second = low.steps
    assert first.kept == {"i", "k"} and first.summed == {"j"} and first.batch == frozenset()
    assert second.kept == {"i", "l"} and second.summed == {"k"}
    assert low.tree() == (2, (0, 1))  # results go last in the list, as numpy orders them


def test_lowering_paths_match_the_path_search():
    shapes = [(8, 9), (9, 10), (10, 3), (3, 4)]
    low = _lowered("ab,bc,cd,de->ae", *shapes)
    sets = [frozenset(x) for x in ("ab", "bc", "cd", "de")]
    want = _path.optimal_path(sets, frozenset("ae"), low.sizes, 4)
    assert list(low.path) == want
    assert list(_lowered("ab,bc,cd,de->ae", *shapes, optimize="greedy").path) == _path.greedy_path(
        sets, frozenset("ae"), low.sizes, 4
    )
    # a three-operand numpy step becomes two pairwise steps
    assert _lowered("ab,bc,cd->ad", *shapes[:3], optimize=[(0, 1, 2)]).path == ((0, 1), (0, 1))
    with pytest.raises(ValueError, match="leaves 2 of 3 operands"):
        _lowered("ab,bc,cd->ad", *shapes[:3], optimize=[(0, 1)])


def test_both_plans_take_the_same_path():
    from ptx import simdriver

    shapes = [(16, 8), (8, 32), (32, 16)]
    cpu = minijit.EinsumPlan("ij,jk,kl->il", *shapes)
    gpu = minijit.EinsumPlan("ij,jk,kl->il", *shapes, target="cuda", driver=simdriver)
    assert cpu.path == gpu.path == list(_lowered("ij,jk,kl->il", *shapes).path)


def test_repeated_indices_on_host_dlpack_operands_take_their_diagonal():
    a = np.random.default_rng(0).random((4, 4))
    np.testing.assert_allclose(minijit.einsum("ii->i", HostDLPack(a)), np.diag(a), rtol=1e-12)
    np.testing.assert_allclose(minijit.einsum("ii,i->", HostDLPack(a), np.ones(4)), np.trace(a), rtol=1e-12)


def test_repeated_indices_on_a_bare_device_array_are_refused_by_name():
    with pytest.raises(TypeError, match="operand 1 repeats an index .* CUDA device array without .diagonal"):
        minijit.einsum("i,jj->ij", np.ones(3, np.float32), BareCuda((3, 3)), target="cuda")
