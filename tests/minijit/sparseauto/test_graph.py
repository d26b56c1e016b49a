"""Iteration graphs: subscripts parsing and the legal loop orders under sparse level orders."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.sparseauto.graph import (
    IterationGraph,
    canonical_order,
    parse_subscripts,
    prefix_legal,
    topological_orders,
)
from minijit.sparseauto.nest import COMPRESSED, DENSE, Operand
from tests.conftest import examples


def test_parse_explicit_and_implicit():
    assert parse_subscripts("ijk,jl,kl->il", 3) == ((("i", "j", "k"), ("j", "l"), ("k", "l")), ("i", "l"))
    assert parse_subscripts("ik, kj", 2) == ((("i", "k"), ("k", "j")), ("i", "j"))
    assert parse_subscripts("ij->", 1) == ((("i", "j"),), ())


@pytest.mark.parametrize(
    "subscripts, n, match",
    [
        ("ij,jk->ik", 3, "name 2 operands but 3"),
        ("i1,jk->ik", 2, "operand 0"),
        ("ii,ij->j", 2, "repeats an index"),
        ("ij,jk->iz", 2, "output index 'z'"),
        ("ij->i->j", 1, "more than one"),
    ],
)
def test_parse_errors_name_the_term(subscripts, n, match):
    with pytest.raises(ValueError, match=match):
        parse_subscripts(subscripts, n)
    with pytest.raises(TypeError):
        parse_subscripts(3, 1)


def graph(*specs: tuple[str, str]) -> IterationGraph:
    ops = []
    for k, (ix, lv) in enumerate(specs):
        ops.append(Operand("BCDE"[k], tuple(ix), tuple(COMPRESSED if c == "c" else DENSE for c in lv)))
    out = Operand.dense("A", ())
    return IterationGraph(tuple(ops), out)


def test_edges_only_from_sparse_operands():
    g = graph(("ijk", "dcc"), ("jl", "dd"))
    assert g.edges == {("i", "j"), ("j", "k")}
    assert g.indices == ("i", "j", "k", "l")


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(
        st.tuples(st.permutations("ijkl").map(lambda p: "".join(p[:3])), st.sampled_from(["ddd", "dcc", "ccc", "cdd"])),
        min_size=1,
        max_size=3,
    )
)
def test_loop_orders_are_the_legal_permutations(specs):
    """loop_orders == the permutations that is_legal accepts (brute force over all orders)."""
    try:
        g = graph(*specs)
    except ValueError as e:
        assert "contradict" in str(e)
        # Contradiction really means no permutation visits every sparse operand in order.
        ops = [Operand("X", tuple(ix), tuple(COMPRESSED if c == "c" else DENSE for c in lv)) for ix, lv in specs]
        idx = sorted({i for ix, _ in specs for i in ix})
        assert not any(all(prefix_legal(o, p) for o in ops) for p in itertools.permutations(idx))
        return
    brute = {p for p in itertools.permutations(g.indices) if g.is_legal(p)}
    assert set(g.loop_orders()) == brute
    assert g.natural_order() in brute


def test_loop_orders_limit_and_counts():
    g = graph(("ijk", "dcc"), ("il", "dd"))
    assert len(list(g.loop_orders())) == 4  # l anywhere around i < j < k
    assert len(list(g.loop_orders(limit=2))) == 2
    assert not g.is_legal(("i", "k", "j", "l"))
    assert not g.is_legal(("i", "j", "k"))  # missing l


def test_topological_orders_after_bound_prefix():
    b = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, COMPRESSED))
    assert set(topological_orders(("j", "k"), (b,), bound=("i",))) == {("j", "k")}
    assert list(topological_orders(("i", "k"), (b,), bound=("j",))) == []  # j bound before i


def test_canonical_order_prefers_key_within_constraints():
    b = Operand("B", ("j", "i"), (DENSE, COMPRESSED))
    rank = {"i": 0, "j": 1, "k": 2}.__getitem__
    assert canonical_order(("i", "j", "k"), (), (b,), rank) == ("j", "i", "k")
    assert canonical_order(("i", "k"), (), (b,), rank) is None  # j is neither bound nor listed
    assert canonical_order(("i", "k"), ("j",), (b,), rank) == ("i", "k")


def test_contradictory_orders_rejected():
    with pytest.raises(ValueError, match="contradict"):
        graph(("ij", "dc"), ("ji", "dc"))
    # The same orders are fine when one operand is dense.
    graph(("ij", "dc"), ("ji", "dd"))
