"""Stage 3: SMT dominance under user constraints, with z3 and without it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from minijit.sparseauto.complexity import Assumptions, Monomial, Poly, dim_symbol, nnz_symbol
from minijit.sparseauto.nest import COMPRESSED, DENSE, Operand
from minijit.sparseauto.prune import Bucket, buckets, candidates, depth_poset_stage, frontier_stage
from minijit.sparseauto.schedules import enumerate_schedules
from minijit.sparseauto.smt import parse_constraints, smt_stage
from tests.minijit.sparseauto.test_complexity import seed_ops

B = Operand("B", ("i", "j"), (DENSE, COMPRESSED))
OPS = (B, Operand.dense("C", ("j", "k")))
NNZ = nnz_symbol("B", ("i", "j"))


def bucket(time: dict, memory: dict | None = None) -> Bucket:
    t = Poly.of([(Monomial.of(time), 1)])
    m = Poly() if memory is None else Poly.of([(Monomial.of(memory), 1)])
    return Bucket(t, m, ())


# Incomparable without constraints: I*J*K against nnz(B_ij)*K^2.
DENSE_WAY = bucket({dim_symbol("i"): 1, dim_symbol("j"): 1, dim_symbol("k"): 1})
SPARSE_WAY = bucket({NNZ: 1, dim_symbol("k"): 2})


def test_constraints_decide_between_incomparable_buckets():
    pytest.importorskip("z3")
    asm = Assumptions((B,))
    assert not asm.le(DENSE_WAY.time, SPARSE_WAY.time) and not asm.le(SPARSE_WAY.time, DENSE_WAY.time)
    # K = 1: the sparse way is never slower; the dense way goes.
    res = smt_stage([DENSE_WAY, SPARSE_WAY], OPS, {"k": 1})
    assert res.ran and res.kept == (SPARSE_WAY,)
    # K large and B dense enough: nnz(B_ij) * K >= I * J, the sparse way goes.
    res = smt_stage([DENSE_WAY, SPARSE_WAY], OPS, {"k": (100, 200), "i": 10, "j": 10, "B": (1, 100)})
    assert res.kept == (DENSE_WAY,)
    # Wide ranges: neither always wins, both stay.
    res = smt_stage([DENSE_WAY, SPARSE_WAY], OPS, {"k": (1, 100), "i": (1, 1000)})
    assert res.kept == (DENSE_WAY, SPARSE_WAY)
    assert "2 buckets -> 2" in res.message


def test_equal_buckets_keep_the_first():
    pytest.importorskip("z3")
    res = smt_stage([SPARSE_WAY, SPARSE_WAY], OPS, {"k": (1, 4)})
    assert len(res.kept) == 1


def test_kept_buckets_are_not_beaten_at_sampled_points():
    """Soundness on the seed's example: every removed bucket is beaten by a kept one at every
    sampled point of the constrained range."""
    pytest.importorskip("z3")
    ops = seed_ops()
    out = Operand.dense("A", ("l", "m", "n"))
    asm = Assumptions(ops)
    front = frontier_stage(
        buckets(depth_poset_stage(candidates(enumerate_schedules(ops, out, max_memory_depth=2).nests)), asm), asm
    )
    cons = {"l": (8, 64), "m": (8, 64), "n": (8, 64), "i": (100, 10000), "j": (100, 10000), "k": (100, 10000)}
    res = smt_stage(front, ops, cons)
    assert 0 < len(res.kept) < len(front)
    rng = np.random.default_rng(5)
    for _ in range(50):
        env = {dim_symbol(i): float(rng.integers(*cons[i])) for i in "ijklmn"}
        bij = float(rng.integers(env[dim_symbol("i")], env[dim_symbol("i")] * env[dim_symbol("j")]))
        env[nnz_symbol("B", ("i", "j"))] = bij
        env[nnz_symbol("B", ("i", "j", "k"))] = float(rng.integers(bij, bij * env[dim_symbol("k")]))
        for gone in (b for b in front if b not in res.kept):
            assert any(
                k.time.evaluate(env) <= gone.time.evaluate(env) and k.memory.evaluate(env) <= gone.memory.evaluate(env)
                for k in res.kept
            )


def test_skipped_without_z3(monkeypatch):
    monkeypatch.setitem(sys.modules, "z3", None)  # import z3 now raises ImportError
    res = smt_stage([DENSE_WAY, SPARSE_WAY], OPS, {"k": 1})
    assert not res.ran and res.kept == (DENSE_WAY, SPARSE_WAY)
    assert "z3 is not installed" in res.message and "minijit[sparse]" in res.message
    # Bad constraints are still refused without z3.
    with pytest.raises(ValueError, match="'q'"):
        smt_stage([DENSE_WAY], OPS, {"q": 1})


def test_skipped_without_constraints():
    res = smt_stage([DENSE_WAY, SPARSE_WAY], OPS, None)
    assert not res.ran and "no constraints" in res.message and len(res.kept) == 2


def test_constraint_parsing():
    parsed = parse_constraints({"i": 5, "B": (10, 20), "nnz(B_ij)": (1, 9)}, [B])
    assert parsed["i"] == (((dim_symbol("i"), 1),), (5.0, 5.0))
    assert parsed["B"][0] == ((NNZ, 1),)
    c = Operand("C", ("i", "j", "k"), (DENSE, COMPRESSED, DENSE))
    assert parse_constraints({"C": 7}, [c])["C"][0] == ((nnz_symbol("C", ("i", "j")), 1), (dim_symbol("k"), 1))
    for bad, match in [
        ({"z": 1}, "'z' names no index"),
        ({"i": (5, 1)}, "exceeds"),
        ({"i": "x"}, "number or a"),
        ({"i": (-1, 2)}, "non-negative"),
        ({"D": 3}, "names no"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_constraints(bad, [B])
    with pytest.raises(ValueError, match="dense"):
        parse_constraints({"E": 3}, [Operand.dense("E", ("i",))])
    with pytest.raises(TypeError):
        parse_constraints([("i", 1)], [B])


def test_contradictory_constraints_raise():
    pytest.importorskip("z3")
    with pytest.raises(ValueError, match="contradict"):
        smt_stage([DENSE_WAY, SPARSE_WAY], OPS, {"i": 2, "j": 2, "B": (10, 20)})  # nnz(B_ij) <= 4
