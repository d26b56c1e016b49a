"""Schedule enumeration: legality, deduplication, caps, and every schedule computes the einsum."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.sparseauto.nest import Temp
from minijit.sparseauto.schedules import default_linear, enumerate_schedules, renumbered
from tests.minijit.sparseauto.interp import einsum_reference, expression, random_arrays, run

SPMM = ("ik,kj->ij", "dc")
MTTKRP = ("ijk,jl,kl->il", "ccc")
SDDMM = ("ij,ik,kj->ij", "dc")
TWO_SPARSE = ("ij,ij,jk->ik", "dc", "dc")
SEED = ("ijk,il,jm,kn->lmn", "dcc")


@pytest.mark.parametrize("case", [SPMM, MTTKRP, SDDMM, TWO_SPARSE, SEED], ids=lambda c: c[0])
def test_every_schedule_validates_and_is_unique(case):
    ops, out = expression(*case)
    space = enumerate_schedules(ops, out)
    assert not space.truncated
    assert len(set(space.nests)) == len(space.nests)
    assert len({renumbered(n) for n in space.nests}) == len(space.nests)
    for nest in space.nests:
        nest.validate()
    # The linear schedule (no temporaries) is always among them.
    assert any(not n.temps for n in space.nests)


@pytest.mark.parametrize(
    "case, sizes",
    [
        (SPMM, dict(i=4, k=5, j=3)),
        (MTTKRP, dict(i=3, j=4, k=3, l=2)),
        (SDDMM, dict(i=4, j=5, k=3)),
        (TWO_SPARSE, dict(i=4, j=5, k=2)),
    ],
    ids=lambda c: c[0] if isinstance(c, tuple) else "",
)
def test_every_schedule_computes_the_einsum(case, sizes):
    ops, out = expression(*case)
    space = enumerate_schedules(ops, out)
    rng = np.random.default_rng(7)
    arrays = random_arrays(space.nests[0], sizes, rng)
    want = einsum_reference(space.nests[0], arrays)
    for nest in space.nests:
        got, _ = run(nest, arrays)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(nest))


def test_seed_example_schedules_compute_the_einsum():
    """A sample of the seed's 4-operand example (all 900+ would be slow in the interpreter)."""
    ops, out = expression(*SEED)
    space = enumerate_schedules(ops, out, max_memory_depth=2)
    rng = np.random.default_rng(3)
    arrays = random_arrays(space.nests[0], dict(i=3, j=3, k=2, l=2, m=2, n=2), rng)
    want = einsum_reference(space.nests[0], arrays)
    picks = rng.choice(len(space.nests), size=80, replace=False)
    for k in picks:
        got, _ = run(space.nests[k], arrays)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(space.nests[k]))


def test_sampled_output_only_written_inside_the_pattern_walk():
    ops, out = expression(*SDDMM)
    assert out.sparse
    space = enumerate_schedules(ops, out)
    for nest in space.nests:
        nest.check_pattern()
    # The dense-output version of the same expression has more schedules: the ones writing
    # the output under dense loops.
    dense_out = type(out).dense("A", out.indices)
    assert len(enumerate_schedules(ops, dense_out).nests) > len(space.nests)


def test_memory_depth_during_enumeration_equals_pruning_after():
    ops, out = expression(*SEED)
    everything = enumerate_schedules(ops, out)
    pruned = enumerate_schedules(ops, out, max_memory_depth=1)
    after = {renumbered(n) for n in everything.nests if max((len(t.indices) for t in n.temps), default=0) <= 1}
    assert {renumbered(n) for n in pruned.nests} == after
    assert len(after) < len(everything.nests)


def test_fission_and_fusion_shapes_present():
    """The seed's listing (d) shape: T<k,j> under l, then a scalar fused under m and k."""
    ops, out = expression(*SEED)
    space = enumerate_schedules(ops, out, max_memory_depth=2)
    found = [
        n
        for n in space.nests
        if len(n.body) == 1
        and n.body[0].index == "l"
        and isinstance(n.body[0].body[0], Temp)
        and set(n.body[0].body[0].indices) == {"j", "k"}
        and any(t.indices == () for t in n.temps)
    ]
    assert found
    # The scalar temporary is declared two loops deeper than T<j,k> (multi-level branching).
    text = str(found[0])
    assert "<> = 0" in text


def test_limit_truncates_with_a_message():
    ops, out = expression(*SEED)
    space = enumerate_schedules(ops, out, limit=5)
    assert len(space.nests) == 5 and space.truncated
    assert "truncated at the cap of 5" in space.message()
    full = enumerate_schedules(*expression(*SPMM))
    assert not full.truncated and "truncated" not in full.message()
    with pytest.raises(ValueError, match="limit"):
        enumerate_schedules(ops, out, limit=0)
    with pytest.raises(ValueError, match="max_memory_depth"):
        enumerate_schedules(ops, out, max_memory_depth=-1)


def test_default_linear_is_one_nest_in_natural_order():
    ops, out = expression(*MTTKRP)
    nest = default_linear(ops, out)
    assert not nest.temps and len(nest.computes) == 1
    assert "for i_pos:\n  for j_pos:\n    for k_pos:\n      for l:" in str(nest)
    # A stored order other than the appearance order moves the loops.
    ops, out = expression("ij,jk->ik", "cc")
    ops = (type(ops[0])("B", ("j", "i"), ops[0].levels), ops[1])
    nest = default_linear(ops, out)
    assert [loop.index for loop in (nest.body[0], nest.body[0].body[0])] == ["j", "i"]


def test_contradictory_sparse_orders_rejected():
    ops, out = expression("ij,ji->", "cc", "cc")
    with pytest.raises(ValueError, match="contradict"):
        enumerate_schedules(ops, out)


def test_renumbered_names_temporaries_in_declaration_order():
    ops, out = expression(*SEED)
    nest = next(n for n in enumerate_schedules(ops, out, max_memory_depth=1).nests if len(n.temps) == 2)
    again = renumbered(nest).validate()
    assert [t.name for t in again.temps] == ["T1", "T2"]
    assert [t.indices for t in again.temps] == [t.indices for t in nest.temps]
