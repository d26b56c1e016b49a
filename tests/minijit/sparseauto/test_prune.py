"""The pruning stages on the seed's hand-checked schedules, and the run-time choice."""

from __future__ import annotations

import pytest

from minijit.sparseauto.complexity import Assumptions, nnz_symbol
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Operand, Temp
from minijit.sparseauto.prune import (
    buckets,
    cache_cost,
    candidates,
    choose,
    depth_poset_stage,
    dominates,
    environment,
    estimate_level_counts,
    frontier_stage,
    memory_depth_stage,
    pointwise_dominates,
)
from minijit.sparseauto.schedules import enumerate_schedules
from tests.minijit.sparseauto.test_complexity import acc, loops, seed_listings, seed_ops

OUT = Operand.dense("A", ("l", "m", "n"))


def seed_e() -> Nest:
    """The seed's Figure 2(e): (d) with a 1-D temporary U<k> instead of the scalar."""
    prod = Compute(acc("T", "kj"), (acc("B", "ijk"), acc("C", "il")))
    inner = Compute(acc("U", "k"), (acc("T", "kj"), acc("D", "jm")))
    outer = Compute(acc("A", "lmn"), (acc("U", "k"), acc("E", "kn")))
    cons = loops("m", Temp("U", ("k",)), *loops("kj", inner), *loops("nk", outer))
    return Nest(seed_ops(), OUT, loops("l", Temp("T", ("k", "j")), *loops("ijk", prod), *cons)).validate()


def seed_unfused() -> Nest:
    """(c) without fusing l: the temporary keeps l, memory depth 3."""
    prod = Compute(acc("T", "kjl"), (acc("B", "ijk"), acc("C", "il")))
    cons = Compute(acc("A", "lmn"), (acc("T", "kjl"), acc("D", "jm"), acc("E", "kn")))
    return Nest(seed_ops(), OUT, (Temp("T", ("k", "j", "l")), *loops("lijk", prod), *loops("ljmkn", cons))).validate()


def named():
    n = seed_listings()
    n["e"] = seed_e()
    n["unfused"] = seed_unfused()
    return {k: c for k, c in zip(n, candidates(n.values()), strict=True)}


def test_stage1_memory_depth():
    c = named()
    kept = memory_depth_stage(c.values(), max_depth=2)
    assert c["unfused"] not in kept
    assert {k for k, v in c.items() if v in kept} == {"a", "b", "c", "d", "e"}
    assert {k for k, v in c.items() if v in memory_depth_stage(c.values(), 1)} == {"a", "b"}
    with pytest.raises(ValueError, match="max_memory_depth"):
        memory_depth_stage(c.values(), -1)


def test_stage2_depth_poset():
    """(a) 6/0, (b) 5/1, (c) 5/2, (d) 4/2, (e) 4/2: (c) is the only one another beats in both."""
    c = named()
    kept = depth_poset_stage(c[k] for k in "abcde")
    assert {k for k, v in c.items() if v in kept} == {"a", "b", "d", "e"}


def test_stage2_with_assumptions_keeps_a_deeper_schedule_that_is_not_slower():
    """TTM chain: the top-level T<k,m> (depths 4/2, time K*L*M + M*nnz) against the per-fibre
    scalar (4/0, L*M*nnz(B_ij) + L*nnz). The pure depth poset drops the first; with the seed's
    assumptions it stays, since neither time is O(the other); on the seed's own schedules the
    time check changes nothing ((c) still goes: (d) is faster at 4/2)."""
    b = Operand("B", ("i", "j", "k"), ("compressed",) * 3)
    ops = (b, Operand.dense("C", ("k", "l")), Operand.dense("D", ("l", "m")))
    asm = Assumptions(ops)
    cands = candidates(enumerate_schedules(ops, Operand.dense("A", ("i", "j", "m")), max_memory_depth=2).nests)
    top = [c for c in cands if [t.indices for t in c.nest.temps] == [("k", "m")]]
    top = [min(top, key=lambda c: (c.cost.loop_depth, c.cost.memory_depth))]
    scalar = [c for c in cands if [t.indices for t in c.nest.temps] == [()]]
    assert top and scalar
    assert (top[0].cost.loop_depth, top[0].cost.memory_depth) == (4, 2)
    assert min((c.cost.loop_depth, c.cost.memory_depth) for c in scalar) == (4, 0)
    assert not asm.le(scalar[0].cost.time, top[0].cost.time)
    assert not asm.le(top[0].cost.time, scalar[0].cost.time)

    def same_time(kept):  # T<k,m> itself, or "for m: T<k>" (4/1), the same work
        return [c for c in kept if asm.equivalent(c.cost.time, top[0].cost.time)]

    assert not same_time(depth_poset_stage(cands))
    assert same_time(depth_poset_stage(cands, asm))
    c = named()
    kept = depth_poset_stage((c[k] for k in "abcde"), Assumptions(seed_ops()))
    assert {k for k, v in c.items() if v in kept} == {"a", "b", "d", "e"}


def test_frontier_matches_the_seeds_argument():
    """docs/seeds/002_sparseauto.txt section 3.1: (d) dominates (e) (same time, less memory) and (c)
    (same memory, less time); (a), (b) and (d) trade time against memory."""
    c = named()
    asm = Assumptions(seed_ops())
    # (d) and (e) share the asymptotic bucket (time equal, memory O(JK)); inside it, (d)'s
    # JK + 1 beats (e)'s JK + K term by term.
    assert pointwise_dominates(c["d"], c["e"], asm) and not pointwise_dominates(c["e"], c["d"], asm)
    (de,) = buckets([c["d"], c["e"]], asm)
    assert de.candidates == (c["d"],)
    bs = {k: buckets([c[k]], asm)[0] for k in "abcd"}
    assert dominates(bs["d"], bs["c"], asm) and not dominates(bs["c"], bs["d"], asm)
    assert not pointwise_dominates(c["d"], c["c"], asm)  # only asymptotically: J = N = 1 breaks it
    for x, y in [("a", "b"), ("a", "d"), ("b", "d")]:
        assert not dominates(bs[x], bs[y], asm) and not dominates(bs[y], bs[x], asm)
    every = buckets([c[k] for k in "abcde"], asm)
    front = frontier_stage(every, asm)
    assert {k for k in "abcde" if any(c[k] in b.candidates for b in front)} == {"a", "b", "d"}


def test_frontier_of_the_whole_space_is_a_pareto_frontier():
    ops = seed_ops()
    asm = Assumptions(ops)
    stage1 = candidates(enumerate_schedules(ops, OUT, max_memory_depth=2).nests)
    bs = buckets(depth_poset_stage(stage1), asm)
    front = frontier_stage(bs, asm)
    assert 0 < len(front) < len(bs)
    for b in bs:
        if b in front:
            assert not any(dominates(o, b, asm) for o in bs)
        else:
            assert any(dominates(o, b, asm) for o in front)
    # Every bucket groups schedules of asymptotically equal cost.
    for b in bs:
        for cand in b.candidates:
            assert asm.equivalent(cand.cost.time, b.time) and asm.equivalent(cand.cost.memory, b.memory)


SIZES = dict(i=1000, j=800, k=600, l=16, m=16, n=16)


def test_run_time_choice_least_time_within_memory():
    c = named()
    pool = [c[k] for k in "abde"]
    env = environment(seed_ops(), SIZES, {"B": 100_000})
    times = {k: c[k].cost.time.evaluate(env) for k in "abde"}
    mems = {k: c[k].cost.memory.evaluate(env) for k in "abde"}
    free = choose(pool, env, SIZES)
    assert free.time == min(times.values())
    # A limit below the chosen schedule's temporaries moves the choice (the seed's Case 2).
    limit = mems[next(k for k in "abde" if c[k] is free.candidate)] - 1
    bounded = choose(pool, env, SIZES, memory_limit=limit)
    assert bounded.memory <= limit
    assert bounded.time == min(t for k, t in times.items() if mems[k] <= limit)
    assert "least time with temporaries" in bounded.reason
    # Nothing fits: least memory.
    tiny = choose([c["d"], c["e"]], env, SIZES, memory_limit=0)
    assert tiny.candidate is c["d"] and "least memory" in tiny.reason
    with pytest.raises(ValueError, match="no candidate"):
        choose([], env, SIZES)


def test_environment_estimates_and_errors():
    b = seed_ops()[0]
    counts = estimate_level_counts(b, SIZES, 100_000)
    assert counts[("i", "j", "k")] == 100_000
    assert 0.9 * 100_000 < counts[("i", "j")] < 100_000  # few (i, j) fibres hold two values
    dense_tail = Operand("B", ("i", "j", "k"), ("dense", "compressed", "dense"))
    assert estimate_level_counts(dense_tail, SIZES, 60_000)[("i", "j")] == 100
    env = environment(seed_ops(), SIZES, {"B": (5000, 70_000)})
    assert env[nnz_symbol("B", ("i", "j"))] == 5000
    assert environment(seed_ops(), SIZES, {"B": 0})[nnz_symbol("B", ("i", "j", "k"))] == 1.0
    with pytest.raises(ValueError, match="index 'n' of operand E"):
        environment(seed_ops(), {k: v for k, v in SIZES.items() if k != "n"}, {"B": 10})
    with pytest.raises(ValueError, match="sparse operand B"):
        environment(seed_ops(), SIZES, {})
    with pytest.raises(ValueError, match="nnz of B"):
        environment(seed_ops(), SIZES, {"B": (1, 2, 3)})
    with pytest.raises(ValueError, match="positive int"):
        environment(seed_ops(), {**SIZES, "i": 0}, {"B": 10})


def test_cache_cost_counts_strided_innermost_accesses():
    b, c = Operand.dense("B", ("i", "k")), Operand.dense("C", ("k", "j"))
    out = Operand.dense("A", ("i", "j"))
    stmt = Compute(Access("A", ("i", "j")), (Access("B", ("i", "k")), Access("C", ("k", "j"))))

    def nest(order: str) -> Nest:
        body: tuple = (stmt,)
        for idx in reversed(order):
            body = (Loop(idx, body),)
        return Nest((b, c), out, body)

    sizes = dict(i=3, j=5, k=7)
    assert cache_cost(nest("ikj"), sizes) == 0
    assert cache_cost(nest("ijk"), sizes) == 5  # C(k, j) strides by J
    assert cache_cost(nest("jki"), sizes) == 5 + 7  # A(i, j) by J, B(i, k) by K


def test_stage5_takes_an_alternative_only_at_equal_time():
    c = named()
    env = environment(seed_ops(), SIZES, {"B": 100_000})
    base = choose([c["d"]], env, SIZES)
    # (e) has (d)'s time; its cache cost decides. (a) is slower: never taken by stage 5.
    with_alts = choose([c["d"]], env, SIZES, alternatives=[c["e"], c["a"]])
    assert with_alts.time == base.time
    assert with_alts.candidate in (c["d"], c["e"])
    ce, cd = cache_cost(c["e"].nest, SIZES), cache_cost(c["d"].nest, SIZES)
    assert (with_alts.candidate is c["e"]) == (ce < cd)
    assert c["a"].cost.time.evaluate(env) != base.time


# ---------------------------------------------------------------- machine-weighted choice


def _ttmc_ops():
    csf = ("compressed",) * 3
    return (Operand("B", tuple("ijk"), csf), Operand.dense("C", tuple("jl")), Operand.dense("D", tuple("km")))


def test_statement_paths_follow_the_inner_loops():
    """vector: a dense innermost index last in every access with it; strided: dense, another
    stride; scalar: a walk's statement (the sparse value indexed by the innermost loop), no loop,
    or no input with the index."""
    from minijit.sparseauto.complexity import statement_counts, statement_path

    ops = _ttmc_ops()
    out = Operand.dense("A", tuple("ilm"))
    vec = Compute(acc("A", "ilm"), (acc("B", "ijk"), acc("C", "jl"), acc("D", "km")))
    lin = Nest(ops, out, loops("ijklm", vec)).validate()
    strided = Nest(ops, out, loops("ijkml", vec)).validate()
    walk = Compute(acc("T", "k"), (acc("B", "ijk"), acc("C", "jl")))
    fission = Nest(
        ops,
        out,
        loops(
            "il",
            Temp("T", ("k",)),
            *loops("jk", walk),
            *loops("km", Compute(acc("A", "ilm"), (acc("D", "km"), acc("T", "k")))),
        ),
    ).validate()
    assert [p for _, p in statement_counts(lin)] == ["vector"]
    assert [p for _, p in statement_counts(strided)] == ["strided"]
    assert [p for _, p in statement_counts(fission)] == ["scalar", "vector"]
    assert [str(m) for m, _ in statement_counts(fission)] == ["L*nnz(B_ijk)", "K*L*M*nnz(B_i)"]
    assert statement_path(lin, vec, None) == "scalar"
    only_out = Compute(acc("A", "ilm"), (acc("B", "ijk"),))  # out[m] += s: no input with m
    assert statement_path(lin, only_out, Loop("m", (only_out,))) == "scalar"


def test_machine_costs_weigh_each_path_and_refuse_bad_weights():
    from minijit.sparseauto.prune import MachineCosts, machine_time

    costs = MachineCosts(4, vector=2.0, strided=3.0, scalar=10.0)
    assert costs.per_execution("vector") == 0.5 and costs.per_execution("strided") == 3.0
    assert costs.per_execution("scalar") == 10.0
    ops = _ttmc_ops()
    sizes = {"i": 10, "j": 20, "k": 30, "l": 8, "m": 4}
    env = environment(ops, sizes, {"B": [10, 100, 1000]})
    walk = Compute(acc("T", "k"), (acc("B", "ijk"), acc("C", "jl")))
    fission = Nest(
        ops,
        Operand.dense("A", tuple("ilm")),
        loops(
            "il",
            Temp("T", ("k",)),
            *loops("jk", walk),
            *loops("km", Compute(acc("A", "ilm"), (acc("D", "km"), acc("T", "k")))),
        ),
    ).validate()
    # L*nnz scalar statements and K*L*M*nnz(B_i) vector elements
    assert machine_time(fission, env, costs) == pytest.approx(8 * 1000 * 10.0 + 30 * 8 * 4 * 10 * 0.5)
    for bad in ({"lanes": 0}, {"lanes": True}, {"lanes": 4, "vector": 0}, {"lanes": 4, "scalar": -1.0}):
        with pytest.raises(ValueError):
            MachineCosts(**bad)


def test_machine_choice_weighs_scalar_walks_against_vector_loops():
    """TTMc on a small tensor: the seed's choice accumulates ``T<k>`` in a walk of scalar
    statements. Weighed by code path, a schedule the seed's time ties with (and the linear one)
    compete, and the least estimated time wins: not the seed's, never above the linear
    schedule's. At the bench's sizes the fission ``T<m>`` stays."""
    from minijit.sparseauto.plan import sparse_plan
    from minijit.sparseauto.prune import MachineCosts, machine_time

    ops = _ttmc_ops()
    small = {"i": 40, "j": 30, "k": 20, "l": 16, "m": 16}
    seed = sparse_plan("ijk,jl,km->ilm", *ops, sizes=small, nnz={"B": 2432}, lanes=None)
    weighed = sparse_plan("ijk,jl,km->ilm", *ops, sizes=small, nnz={"B": 2432}, lanes=4)
    env = environment(ops, small, {"B": 2432})
    est = {
        k: machine_time(n, env, MachineCosts(4)) for k, n in (("seed", seed.chosen), ("linear", seed.default_linear()))
    }
    assert [t.indices for t in seed.chosen.temps] == [("k",)]
    assert weighed.chosen != seed.chosen
    assert weighed.choice.time == pytest.approx(machine_time(weighed.chosen, env, MachineCosts(4)))
    assert weighed.choice.time < est["seed"] and weighed.choice.time <= est["linear"]
    assert weighed.choice.unit == "ns" and "least estimated time (4 lanes)" in weighed.choice.reason
    assert f"4 run-time choice: time {weighed.choice.time:.4g} ns, memory" in weighed.listing()
    big = {"i": 600, "j": 500, "k": 400, "l": 16, "m": 16}
    for lanes in (None, 4, 8):
        plan = sparse_plan("ijk,jl,km->ilm", *ops, sizes=big, nnz={"B": 196751}, lanes=lanes)
        assert [t.indices for t in plan.chosen.temps] == [("m",)], lanes
