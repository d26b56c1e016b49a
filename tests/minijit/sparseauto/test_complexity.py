"""Symbolic time/memory complexity: exact against counted iterations, and exact dominance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.sparseauto.complexity import (
    Assumptions,
    Monomial,
    Poly,
    cost,
    dim_symbol,
    loop_depth,
    memory_complexity,
    memory_depth,
    nnz_symbol,
    time_complexity,
)
from minijit.sparseauto.nest import COMPRESSED, DENSE, Access, Compute, Loop, Nest, Operand, Temp
from minijit.sparseauto.prune import environment
from minijit.sparseauto.schedules import enumerate_schedules
from tests.conftest import examples
from tests.minijit.sparseauto.interp import expression, regular_sparse, run


def mono(*symbols, **_: object) -> Monomial:
    powers: dict = {}
    for s in symbols:
        powers[s] = powers.get(s, 0) + 1
    return Monomial.of(powers)


def d(i: str):
    return dim_symbol(i)


def poly(*monomials: Monomial) -> Poly:
    return Poly.of((m, 1) for m in monomials)


NNZ_B = nnz_symbol("B", ("i", "j", "k"))
NNZ_BIJ = nnz_symbol("B", ("i", "j"))


@pytest.mark.parametrize(
    "case, sizes, fans, sample",
    [
        (("ik,kj->ij", "dc"), dict(i=4, k=6, j=3), (0, 2), None),
        (("ijk,jl,kl->il", "ccc"), dict(i=5, j=4, k=4, l=2), (3, 2, 2), None),
        (("ijk,jl,km->ilm", "dcc"), dict(i=3, j=4, k=4, l=2, m=2), (0, 2, 3), 60),
        (("ij,ik,kj->ij", "dc"), dict(i=4, j=5, k=3), (0, 2), None),
        (("ijk,il,jm,kn->lmn", "dcc"), dict(i=3, j=3, k=3, l=2, m=2, n=2), (0, 2, 2), 60),
    ],
    ids=lambda c: c[0] if isinstance(c, tuple) and isinstance(c[0], str) else None,
)
def test_time_equals_counted_iterations(case, sizes, fans, sample):
    """On tensors with equal fibre lengths the uniform-sparsity count is exact: the
    interpreter's statement executions equal the time polynomial for every schedule."""
    ops, out = expression(*case)
    space = enumerate_schedules(ops, out, max_memory_depth=2)
    rng = np.random.default_rng(11)
    arrays, counts = {}, {}
    for o in ops:
        shape = tuple(sizes[i] for i in o.indices)
        if o.sparse:
            arrays[o.name], counts[o.name] = regular_sparse(shape, o.levels, fans, rng)
        else:
            arrays[o.name] = rng.standard_normal(shape)
    env = environment(ops, sizes, counts)
    nests = space.nests
    if sample is not None:
        nests = [nests[k] for k in rng.choice(len(nests), size=min(sample, len(nests)), replace=False)]
    for nest in nests:
        _, executed = run(nest, arrays)
        assert executed == pytest.approx(time_complexity(nest).evaluate(env)), str(nest)


def seed_ops():
    b = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, COMPRESSED))
    return (b, Operand.dense("C", ("i", "l")), Operand.dense("D", ("j", "m")), Operand.dense("E", ("k", "n")))


def loops(order: str, *body):
    for index in reversed(order):
        body = (Loop(index, tuple(body)),)
    return tuple(body)


def acc(t: str, ix: str) -> Access:
    return Access(t, tuple(ix))


def seed_listings() -> dict[str, Nest]:
    """The seed's Figure 2 (a)-(d), transcribed."""
    ops = seed_ops()
    out = Operand.dense("A", ("l", "m", "n"))
    full = Compute(acc("A", "lmn"), (acc("B", "ijk"), acc("C", "il"), acc("D", "jm"), acc("E", "kn")))
    a = Nest(ops, out, loops("lmnijk", full))
    b_prod = Compute(acc("T", "k"), (acc("B", "ijk"), acc("C", "il"), acc("D", "jm")))
    b_cons = Compute(acc("A", "lmn"), (acc("T", "k"), acc("E", "kn")))
    b = Nest(ops, out, loops("ml", Temp("T", ("k",)), *loops("ijk", b_prod), *loops("nk", b_cons)))
    c_prod = Compute(acc("T", "kj"), (acc("B", "ijk"), acc("C", "il")))
    c_cons = Compute(acc("A", "lmn"), (acc("T", "kj"), acc("D", "jm"), acc("E", "kn")))
    c = Nest(ops, out, loops("l", Temp("T", ("k", "j")), *loops("ijk", c_prod), *loops("jmkn", c_cons)))
    d_inner = Compute(acc("t", ""), (acc("T", "kj"), acc("D", "jm")))
    d_outer = Compute(acc("A", "lmn"), (acc("t", ""), acc("E", "kn")))
    d_cons = loops("mk", Temp("t", ()), *loops("j", d_inner), *loops("n", d_outer))
    d_nest = Nest(ops, out, loops("l", Temp("T", ("k", "j")), *loops("ijk", c_prod), *d_cons))
    return {"a": a.validate(), "b": b.validate(), "c": c.validate(), "d": d_nest.validate()}


def test_seed_listing_complexities():
    """Time, memory and depths of the seed's Figure 2 listings, derived by hand."""
    n = seed_listings()
    B, BIJ = mono(NNZ_B), mono(NNZ_BIJ)
    L, M, N, J, K = (mono(d(i)) for i in "lmnjk")
    assert time_complexity(n["a"]) == poly(L * M * N * B)
    assert memory_complexity(n["a"]) == Poly()
    assert time_complexity(n["b"]) == poly(L * M * B, L * M * N * K)
    assert memory_complexity(n["b"]) == poly(K)
    assert time_complexity(n["c"]) == poly(L * B, L * J * M * K * N)
    assert memory_complexity(n["c"]) == poly(K * J)
    assert time_complexity(n["d"]) == poly(L * B, L * M * K * J, L * M * K * N)
    assert memory_complexity(n["d"]) == poly(K * J, Monomial())
    assert [loop_depth(n[k]) for k in "abcd"] == [6, 5, 5, 4]
    assert [memory_depth(n[k]) for k in "abcd"] == [0, 1, 2, 2]
    assert str(time_complexity(n["b"])) == "K*L*M*N + L*M*nnz(B_ijk)"
    assert BIJ != B


def test_seed_listings_are_in_the_enumerated_space():
    """Each transcribed listing's (time, memory) is reached by some enumerated schedule."""
    ops = seed_ops()
    out = Operand.dense("A", ("l", "m", "n"))
    space = {(c.time, c.memory) for c in map(cost, enumerate_schedules(ops, out, max_memory_depth=2).nests)}
    for name, nest in seed_listings().items():
        c = cost(nest)
        assert (c.time, c.memory) in space, name


def test_assumption_chain():
    b = Operand("B", ("i", "j", "k"), (COMPRESSED, COMPRESSED, COMPRESSED))
    csr = Operand("C", ("i", "j"), (DENSE, COMPRESSED))
    asm = Assumptions((b, csr))
    bi, bij, bijk = (mono(nnz_symbol("B", p)) for p in (("i",), ("i", "j"), ("i", "j", "k")))
    I, J, K = (mono(d(i)) for i in "ijk")
    assert asm.monomial_le(bi, bij) and asm.monomial_le(bij, bijk)
    assert not asm.monomial_le(bijk, bij)
    assert asm.monomial_le(bij, I * J) and not asm.monomial_le(I * J, bij)
    assert asm.monomial_le(bijk, bij * K) and not asm.monomial_le(bij * K, bijk)
    assert asm.monomial_le(bi, I) and not asm.monomial_le(I, bi)
    # A dense first level stores every row: I <= nnz(C_ij).
    cij = mono(nnz_symbol("C", ("i", "j")))
    assert asm.monomial_le(I, cij) and asm.monomial_le(cij, I * J)
    # nnz(B) and J are incomparable.
    assert not asm.monomial_le(bijk, J) and not asm.monomial_le(J, bijk)
    # Densities: nnz(B_ij)/(I*J) <= 1.
    assert asm.monomial_le(bij / (I * J), Monomial())


def test_poly_order_and_asymptotic_form():
    b = Operand("B", ("i", "j"), (DENSE, COMPRESSED))
    asm = Assumptions((b,))
    bij = mono(nnz_symbol("B", ("i", "j")))
    I, J, K = (mono(d(i)) for i in "ijk")
    p = Poly.of([(bij * K, 2), (I * K, 1), (K, 3)])
    assert asm.asymptotic(p) == poly(bij * K)
    assert asm.le(poly(I * K), poly(bij * K)) and not asm.le(poly(I * J * K), poly(bij * K))
    assert asm.le(Poly(), poly(K)) and asm.le(poly(Monomial()), Poly())  # 0 and O(1) alike
    assert not asm.le(poly(K), Poly())
    assert asm.equivalent(p, poly(bij * K))
    assert p.evaluate({d("i"): 2, d("k"): 3, nnz_symbol("B", ("i", "j")): 5}) == 2 * 15 + 6 + 9
    assert str(I * J / K) == "I*J/K" and str(Monomial()) == "1" and str(Poly()) == "0"
    with pytest.raises(KeyError, match="nnz"):
        bij.evaluate({})


def _vertices_min_ok(asm: Assumptions, ratio: Monomial) -> bool:
    """Brute force: is log(ratio) >= 0 on every vertex of the assumptions' cone section?

    Each log dim x_i is 0 or 1; each compressed level's increment is 0 or x_i; a dense
    level's is x_i. The form is linear, so the minimum over the section is at a vertex.
    """
    ops = asm.operands
    dims = sorted({i for o in ops for i in o.indices})
    comp = [(o, k) for o in ops for k, f in enumerate(o.levels) if f == COMPRESSED]
    powers = dict(ratio.powers)
    for xs in itertools.product((0, 1), repeat=len(dims)):
        x = dict(zip(dims, xs, strict=True))
        for ds in itertools.product((0, 1), repeat=len(comp)):
            inc = {(o.name, k): x[o.indices[k]] * dv for (o, k), dv in zip(comp, ds, strict=True)}
            value = sum(powers.get(d(i), 0) * x[i] for i in dims)
            for o, c in comp:
                logpos = sum(inc[(o.name, u)] if o.levels[u] == COMPRESSED else x[o.indices[u]] for u in range(c + 1))
                value += powers.get(nnz_symbol(o.name, o.indices[: c + 1]), 0) * logpos
            if value < 0:
                return False
    return True


@settings(max_examples=examples(60), deadline=None)
@given(
    levels=st.tuples(*[st.sampled_from((DENSE, COMPRESSED))] * 3),
    exps=st.lists(st.integers(-2, 2), min_size=6, max_size=6),
)
def test_monomial_order_is_exact(levels, exps):
    """monomial_le agrees with a brute-force check over the vertices of the assumption cone."""
    b = Operand("B", ("i", "j", "k"), levels)
    asm = Assumptions((b,))
    syms = [d("i"), d("j"), d("k")] + [nnz_symbol("B", ("i", "j", "k")[: k + 1]) for k in range(3)]
    valid = [s for s in syms if s[0] == "dim" or levels[len(s[2]) - 1] == COMPRESSED]
    ratio = Monomial.of({s: e for s, e in zip(syms, exps, strict=True) if s in valid})
    assert asm.monomial_le(Monomial(), ratio) == _vertices_min_ok(asm, ratio)


def test_memory_and_depths():
    n = seed_listings()["d"]
    c = cost(n)
    assert (c.loop_depth, c.memory_depth) == (4, 2)
    assert "loop depth 4, memory depth 2" in str(c)


def _feasible_point(b: Operand, rng: np.random.Generator) -> dict:
    env = {d(i): float(rng.integers(1, 30)) for i in b.indices}
    prev = 1.0
    for k, (i, f) in enumerate(zip(b.indices, b.levels, strict=True)):
        n = env[d(i)]
        if f == COMPRESSED:
            prev = float(rng.integers(int(prev), int(prev * n) + 1))
            env[nnz_symbol("B", b.indices[: k + 1])] = prev
        else:
            prev *= n
    return env


@settings(max_examples=examples(40), deadline=None)
@given(
    p=st.lists(st.lists(st.integers(-1, 2), min_size=4, max_size=4), min_size=1, max_size=3),
    q=st.lists(st.lists(st.integers(-1, 2), min_size=4, max_size=4), min_size=1, max_size=3),
)
def test_pointwise_order_is_sound(p, q):
    """When pointwise_le says p <= q, it holds at sampled values the assumptions allow."""
    b = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, COMPRESSED))
    asm = Assumptions((b,))
    syms = [d("i"), d("j"), d("k"), NNZ_B]

    def build(rows):
        return Poly.of((Monomial.of(dict(zip(syms, r, strict=True))), 1) for r in rows)

    pp, qq = build(p), build(q)
    if asm.pointwise_le(pp, qq):
        rng = np.random.default_rng(len(p) * 7 + len(q))
        for _ in range(30):
            env = _feasible_point(b, rng)
            env.setdefault(NNZ_BIJ, 1.0)
            assert pp.evaluate(env) <= qq.evaluate(env) * (1 + 1e-12)
    assert asm.pointwise_le(pp, pp)


def test_memoized_costs_of_a_shared_loop_follow_its_context():
    """The enumerator's schedules share sub-loops; their memoized counts depend on the operands'
    formats and on the enclosing loops, so the cost of each nest equals that of an unshared
    deep copy (fresh memos), whatever was costed before."""
    import copy

    out = Operand.dense("A", ("i",))
    c_op = Operand.dense("C", ("j",))
    sparse_b = Operand("B", ("i", "j"), (DENSE, COMPRESSED))
    dense_b = Operand.dense("B", ("i", "j"))
    stmt = Compute(Access("A", ("i",)), (Access("B", ("i", "j")), Access("C", ("j",))))
    inner = Loop("j", (stmt,))
    nests = [Nest((b, c_op), out, (Loop(outer, (inner,)),)) for b in (sparse_b, dense_b) for outer in ("i", "k")] + [
        Nest((sparse_b, c_op), out, (Loop("i", (Temp("T", ("j",)), inner)),))
    ]
    costs = [cost(n) for n in nests]
    assert costs == [cost(copy.deepcopy(n)) for n in nests]
    assert costs[0].time == Poly.of([(mono(nnz_symbol("B", ("i", "j"))), 1)])
    assert costs[2].time == Poly.of([(mono(d("i"), d("j")), 1)])
    # under a loop over k, B's compressed level is not reachable: the dense count, either format
    assert costs[1].time == costs[3].time == Poly.of([(mono(d("j"), d("k")), 1)])
