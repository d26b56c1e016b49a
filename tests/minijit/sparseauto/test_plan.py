"""sparse_plan: operand descriptions, the printed plan, the frontier executed, the choice."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit.sparseauto as sa
from minijit.sparseauto import Operand, SparsePlan, sparse_plan
from minijit.sparseauto.nest import COMPRESSED, DENSE
from minijit.sparseauto.prune import cache_cost, choose, environment
from tests.conftest import examples
from tests.minijit.sparseauto.interp import einsum_reference, random_arrays, run
from tests.minijit.sparseauto.test_complexity import seed_ops

SEED_SIZES = dict(i=1000, j=800, k=600, l=16, m=16, n=16)


@dataclass
class FakeSparse:
    """What sparse_plan reads from a sparse tensor: shape, levels, mode_order, nnz."""

    shape: tuple
    levels: tuple
    nnz: int
    mode_order: tuple | None = None


@dataclass
class Level:
    crd: list | None


@dataclass
class FakeStored(FakeSparse):
    storage: tuple = ()


def test_plan_of_the_seed_example_prints_and_chooses():
    """The seed's example and its choice by iterations (``lanes=None``: the seed's stage 4)."""
    plan = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), sizes=SEED_SIZES, nnz={"B": 100_000}, lanes=None)
    assert isinstance(plan, SparsePlan) and sa.sparse_plan is sparse_plan
    text = str(plan)
    for part in (
        "stages: 1 memory depth <= 2",
        "frontier [1] time O(",
        "default linear schedule (TACO)",
        "4 run-time choice: time",
    ):
        assert part in text
    assert plan.chosen in plan.schedules()
    assert set(plan.frontier()) <= set(plan.schedules())
    # The choice is the least evaluated time of the frontier (all fit the default limit here).
    env = environment(plan.operands, SEED_SIZES, {"B": 100_000})
    best = min(c.cost.time.evaluate(env) for c in plan.frontier_candidates())
    assert plan.choice.time == best
    linear = plan.default_linear()
    assert not linear.temps and len(linear.computes) == 1
    assert plan.choice.time <= sa.plan.cost(linear).time.evaluate(env)
    assert len(plan.listing(every=True)) >= len(text)


def test_numpy_and_duck_typed_operands():
    b = FakeSparse((30, 20, 10), (DENSE, COMPRESSED, COMPRESSED), nnz=500)
    c, d = np.zeros((20, 8)), np.zeros((10, 8))
    plan = sparse_plan("ijk,jl,kl->il", b, c, d)
    assert [o.name for o in plan.operands] == ["B", "C", "D"]
    assert plan.operands[0].levels == (DENSE, COMPRESSED, COMPRESSED)
    assert plan.operands[1] == Operand.dense("C", ("j", "l"))
    assert plan.output == Operand.dense("A", ("i", "l"))
    assert plan.sizes == dict(i=30, j=20, k=10, l=8)
    assert plan.nnz == {"B": 500}
    assert plan.chosen is not None


def test_mode_order_and_exact_level_counts():
    # Stored column-major (j, then i): a CSC matrix.
    b = FakeStored((6, 5), (DENSE, COMPRESSED), nnz=7, mode_order=(1, 0), storage=(Level(None), Level([0] * 7)))
    plan = sparse_plan("ij,jk->ik", b, np.zeros((5, 3)))
    assert plan.operands[0].indices == ("j", "i")
    assert plan.nnz == {"B": [7]}
    assert str(plan.default_linear()).splitlines()[1] == "for j:"


def test_sampled_output_takes_the_pattern():
    b = FakeSparse((6, 5), (DENSE, COMPRESSED), nnz=9)
    plan = sparse_plan("ij,ik,kj->ij", b, np.zeros((6, 4)), np.zeros((4, 5)))
    assert plan.output == Operand("A", ("i", "j"), (DENSE, COMPRESSED))
    for nest in plan.schedules():
        nest.check_pattern()


@pytest.mark.parametrize(
    "subscripts, levels, sizes",
    [
        ("ijk,jl,kl->il", ("ccc", "", ""), dict(i=3, j=4, k=3, l=2)),
        ("ij,ik,kj->ij", ("dc", "", ""), dict(i=4, j=5, k=3)),
        ("ijk,jl,km->ilm", ("dcc", "", ""), dict(i=3, j=3, k=3, l=2, m=2)),
    ],
)
def test_every_frontier_schedule_computes_the_einsum(subscripts, levels, sizes):
    ops = []
    for k, (term, lv) in enumerate(zip(subscripts.split("->")[0].split(","), levels, strict=True)):
        fm = tuple(COMPRESSED if ch == "c" else DENSE for ch in lv) if lv else (DENSE,) * len(term)
        ops.append(Operand("BCD"[k], tuple(term), fm))
    plan = sparse_plan(subscripts, *ops)
    assert plan.chosen is None and "no size" in plan.listing()
    front = plan.frontier()
    assert front
    arrays = random_arrays(front[0], sizes, np.random.default_rng(2))
    want = einsum_reference(front[0], arrays)
    for nest in (*front, plan.default_linear()):
        got, _ = run(nest, arrays)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(nest))


def test_choose_later_without_replanning():
    plan = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), lanes=None)
    assert plan.chosen is None and "no size for i, j, k, l, m, n" in str(plan)
    space = plan.space
    choice = plan.choose(SEED_SIZES, {"B": 100_000})
    assert choice.candidate in plan.stage1 and plan.space is space
    low = plan.choose(SEED_SIZES, {"B": 100_000}, memory_limit=0)
    assert low.memory == min(
        c.cost.memory.evaluate(environment(plan.operands, SEED_SIZES, {"B": 100_000}))
        for c in plan.frontier_candidates()
    )
    with pytest.raises(ValueError, match="sparse operand B"):
        plan.choose(SEED_SIZES)
    partial = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), sizes=SEED_SIZES)
    assert partial.chosen is None and "no non-zero count for B" in str(partial)


def test_constraints_reach_the_smt_stage():
    pytest.importorskip("z3")
    cons = {"l": (8, 64), "m": (8, 64), "n": (8, 64), "i": (100, 10000), "j": (100, 10000), "k": (100, 10000)}
    plan = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), constraints=cons)
    assert plan.smt.ran and len(plan.smt.kept) <= len(plan.frontier_buckets)
    assert "SMT stage:" in str(plan)


def test_bad_descriptions_raise_naming_the_operand():
    b = FakeSparse((30, 20), (DENSE, COMPRESSED), nnz=5)
    with pytest.raises(ValueError, match="index 'j'"):
        sparse_plan("ij,jk->ik", b, np.zeros((21, 3)))
    with pytest.raises(ValueError, match="operand 1 .jk.: shape"):
        sparse_plan("ij,jk->ik", b, np.zeros((20, 3, 1)))
    with pytest.raises(ValueError, match="operand 0 .ij.: levels"):
        sparse_plan("ij,jk->ik", FakeSparse((3, 2), ("dense", "csr"), 1), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="mode_order"):
        sparse_plan("ij,jk->ik", FakeSparse((3, 2), (DENSE, DENSE), 1, (0, 0)), np.zeros((2, 3)))
    with pytest.raises(TypeError, match="operand 1"):
        sparse_plan("ij,jk->ik", b, [[1.0]])
    with pytest.raises(ValueError, match="not a permutation"):
        sparse_plan("ij,jk->ik", Operand.dense("B", ("i", "k")), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="name 2 operands but 1"):
        sparse_plan("ij,jk->ik", b)
    with pytest.raises(ValueError, match="contradict"):
        sparse_plan("ij,ji->", FakeSparse((3, 3), (DENSE, COMPRESSED), 2), FakeSparse((3, 3), (DENSE, COMPRESSED), 2))


@st.composite
def expressions(draw):
    """2-4 operands over up to 5 indices, one or two of them sparse (random level formats)."""
    letters = "ijklm"[: draw(st.integers(2, 5))]
    n_ops = draw(st.integers(2, 4))
    terms = []
    for _ in range(n_ops):
        k = draw(st.integers(1, min(3, len(letters))))
        terms.append("".join(draw(st.permutations(letters))[:k]))
    used = sorted(set("".join(terms)))
    out = "".join(i for i in used if draw(st.booleans()))
    n_sparse = draw(st.integers(1, min(2, n_ops)))
    levels = []
    for k, t in enumerate(terms):
        if k < n_sparse:
            lv = [draw(st.sampled_from((DENSE, COMPRESSED))) for _ in t]
            lv[-1] = COMPRESSED
            levels.append(tuple(lv))
        else:
            levels.append((DENSE,) * len(t))
    return ",".join(terms) + "->" + out, levels


@settings(max_examples=examples(15), deadline=None)
@given(expressions(), st.integers(0, 2**16))
def test_drawn_expressions_frontier_and_choice_compute_the_einsum(expr, seed):
    subscripts, levels = expr
    terms = subscripts.split("->")[0].split(",")
    ops = [Operand("BCDE"[k], tuple(t), lv) for k, (t, lv) in enumerate(zip(terms, levels, strict=True))]
    try:
        plan = sparse_plan(subscripts, *ops, limit=300)
    except ValueError as e:
        assert "contradict" in str(e)  # two sparse operands with opposite level orders
        return
    rng = np.random.default_rng(seed)
    sizes = {i: int(rng.integers(1, 4)) for i in "ijklm"}
    arrays = random_arrays(plan.schedules()[0], sizes, rng)
    want = einsum_reference(plan.schedules()[0], arrays)
    nnz = {o.name: int(np.count_nonzero(arrays[o.name])) for o in plan.operands if o.sparse}
    choice = plan.choose({i: sizes[i] for o in plan.operands for i in o.indices}, nnz)
    for nest in {*plan.frontier(), choice.candidate.nest, plan.default_linear()}:
        nest.validate()
        got, _ = run(nest, arrays)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=str(nest))


def test_replanning_the_same_structure_reuses_stages_1_to_3():
    first = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), sizes=SEED_SIZES, nnz={"B": 100_000})
    other = dict(SEED_SIZES, l=64)
    second = sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), sizes=other, nnz={"B": 10})
    assert second.space is first.space and second.smt is first.smt
    assert second.sizes == other
    # A different structure (B stored with a dense last level) is planned afresh.
    b = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, DENSE))
    other_b = sparse_plan("ijk,il,jm,kn->lmn", b, *seed_ops()[1:], max_memory_depth=1)
    assert other_b.space is not first.space
    for bad in (dict(limit=0), dict(max_memory_depth=-1), dict(smt_timeout_ms=[1]), dict(limit=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), **bad)
    with pytest.raises(TypeError, match="constraints must be a mapping"):
        sparse_plan("ijk,il,jm,kn->lmn", *seed_ops(), constraints=[("l", 3)])


def test_stage5_prefers_unit_stride_innermost_loops_at_equal_time():
    """TTMc: the frontier's scalar-temporary schedule re-walks each k fibre per m with D(k, m)
    and A(i, l, m) strided; the stage-1 schedule with T<m> has the same time and unit strides."""
    b = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, COMPRESSED))
    ops = (b, Operand.dense("C", ("j", "l")), Operand.dense("D", ("k", "m")))
    sizes = dict(i=1000, j=800, k=600, l=16, m=16)
    plan = sparse_plan("ijk,jl,km->ilm", *ops, sizes=sizes, nnz={"B": 100_000}, lanes=None)
    env = environment(plan.operands, sizes, {"B": 100_000})
    stage4 = choose(plan.frontier_candidates(), env, sizes, plan.memory_limit)
    assert cache_cost(stage4.candidate.nest, sizes) > 0
    assert plan.choice.time == stage4.time
    assert cache_cost(plan.chosen, sizes) == 0
    assert [t.indices for t in plan.chosen.temps] == [("m",)]
    assert "stage 5: same time" in plan.choice.reason and "stage 5" in str(plan)


@pytest.mark.skipif(__import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="runs x86-64 code")
def test_ttm_chain_takes_the_top_level_temporary_when_fibres_outnumber_k():
    """TTM chain ``ijk,kl,lm->ijm``: ``T<k,m> = C*D`` once (time K*L*M + M*nnz) against the
    per-fibre temporaries (L*M*nnz(B_ij) + L*nnz). The seed's depth poset drops the former
    (depths 4/2 against 4/0) although it is not asymptotically slower; with many more fibres than
    K it is the cheaper one, and executing both shows it."""
    from minijit.bench.sparse_einsum import powerlaw_tensor
    from minijit.sparseauto.execute import SparseContraction
    from minijit.sparseauto.prune import buckets, depth_poset_stage, frontier_stage

    rng = np.random.default_rng(5)
    b = powerlaw_tensor((120, 120, 50), 48_000, rng, fibre_mean=8.0)
    c, d = rng.standard_normal((50, 16)), rng.standard_normal((16, 16))
    plan = sparse_plan("ijk,kl,lm->ijm", b, c, d)
    assert [t.indices for t in plan.chosen.temps] == [("k", "m")]
    # Without the time check in stage 2a, no such schedule reaches stage 4.
    seed_front = frontier_stage(buckets(depth_poset_stage(plan.stage1), plan.assumptions), plan.assumptions)
    seed_cands = [c for bk in seed_front for c in bk.candidates]
    assert all(("k", "m") not in [t.indices for t in c.nest.temps] for c in seed_cands)
    env = environment(plan.operands, plan.sizes, plan.nnz)
    seed_choice = choose(seed_cands, env, plan.sizes, plan.memory_limit, plan.stage1)
    assert plan.choice.time < seed_choice.time / 2
    want = np.einsum("ijk,kl,lm->ijm", b.to_dense(), c, d)
    nests = (plan.chosen, seed_choice.candidate.nest)
    for nest in nests:
        op = SparseContraction(nest, plan.sizes, threads=2)
        ops = {"B": b, "C": c, "D": d}
        np.testing.assert_allclose(op.execute(*[ops[o.name] for o in nest.operands]), want, rtol=1e-10, atol=1e-10)
    # the work, counted by the IR interpreter on a small tensor with more (i, j) fibres than K:
    # K*L*M + M*nnz statements against L*M*nnz(B_ij) + L*nnz
    small = powerlaw_tensor((30, 30, 6), 600, rng, fibre_mean=3.0).to_dense()
    arrays = {"B": small, "C": rng.standard_normal((6, 8)), "D": rng.standard_normal((8, 8))}
    (got0, work0), (got1, work1) = (run(n, arrays) for n in nests)
    ref = np.einsum("ijk,kl,lm->ijm", small, arrays["C"], arrays["D"])
    np.testing.assert_allclose(got0, ref, atol=1e-10)
    np.testing.assert_allclose(got1, ref, atol=1e-10)
    assert work0 < work1 / 2, (work0, work1)


def test_planning_pauses_the_cyclic_gc_and_restores_its_state(monkeypatch):
    import gc

    from minijit.sparseauto import plan as plan_module

    seen = []
    enumerate_schedules = plan_module.enumerate_schedules

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return enumerate_schedules(*args, **kwargs)

    monkeypatch.setattr(plan_module, "enumerate_schedules", spy)
    was = gc.isenabled()
    try:
        for enabled, subscripts in ((True, "ij,jk->ik"), (False, "ij,jk,kl->il")):
            gc.enable() if enabled else gc.disable()
            sparse_plan(subscripts, *(np.ones((2, 2)),) * subscripts.count(","), np.ones((2, 2)))
            assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False]


def test_overlapping_plannings_leave_the_cyclic_gc_as_they_found_it():
    """Two plannings overlap (as in two threads): A starts, B starts, A ends, B ends. The collector
    stays off until both are done and is on again after (a per-call save/restore would have B
    restore the 'off' it found, leaving the collector off for good)."""
    import gc

    from minijit.sparseauto import plan as plan_module

    assert gc.isenabled()
    a, b = plan_module._no_cyclic_gc(), plan_module._no_cyclic_gc()
    try:
        a.__enter__()
        b.__enter__()
        assert not gc.isenabled()
        a.__exit__(None, None, None)
        assert not gc.isenabled()  # B still plans
    finally:
        b.__exit__(None, None, None)
    assert gc.isenabled()


@pytest.mark.parametrize(("profile", "wide"), [("zen3", 4), ("cascadelake", 8), ("neoverse-v1", 2)])
def test_lanes_follow_the_target_and_dtype(pin_host, profile, wide):
    """``lanes="native"`` (the default) is the host's sparse code (`minijit.targets.native`) for
    the operands' dtype, so the plan `sparse_plan` prints is the one `minijit.einsum` runs;
    explicit targets give theirs. Pinned hosts: AVX2, AVX-512, SVE at the native 128 bits."""
    from minijit import targets
    from minijit.sparseauto.api import compile_einsum
    from minijit.sparseauto.plan import native_lanes, vector_lanes
    from minijit.sparseauto.tensor import SparseTensor
    from minijit.targets import AArch64Target

    pin_host(profile)
    assert native_lanes() == wide == targets.native().vector_lanes(np.float64)
    rng = np.random.default_rng(2)
    t = SparseTensor.from_dense(np.where(rng.random((20, 15, 10)) < 0.2, 1.0, 0.0))
    b, c = rng.standard_normal((15, 8)), rng.standard_normal((10, 8))
    assert native_lanes((t.astype(np.float32), b.astype(np.float32))) == 2 * wide
    assert native_lanes((t.astype(np.float32), b)) == wide
    assert vector_lanes("x86_64-avx2", np.float64) == 4 and vector_lanes("x86_64-avx2", np.float32) == 8
    assert vector_lanes("x86_64-avx512", np.float64) == 8 and vector_lanes("aarch64-neon", np.float32) == 4
    assert vector_lanes(AArch64Target("sve", sve_vl=256), np.float64) == 4
    sve = AArch64Target("sve", sve_vl=512)  # what compile_einsum plans with for this target
    assert compile_einsum("ijk,jl,km->ilm", t, b, c, target=sve)[0].plan.machine.lanes == 8
    plan = sparse_plan("ijk,jl,km->ilm", t, b, c)
    assert plan.machine is not None and plan.machine.lanes == wide
    if targets.native().native:  # compiled and loaded here, not run
        compiled, _ = compile_einsum("ijk,jl,km->ilm", t, b, c)
        assert str(compiled.nest) == str(plan.chosen) and compiled.target == targets.native()
    with pytest.raises(ValueError, match="lanes must be"):
        sparse_plan("ijk,jl,km->ilm", t, b, c, lanes="wide")
    with pytest.raises(ValueError, match="lanes must be"):
        sparse_plan("ijk,jl,km->ilm", t, b, c, lanes=0)
