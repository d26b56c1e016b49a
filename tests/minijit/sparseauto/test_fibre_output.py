"""Fibre outputs (``fibre_output=True``): an output stored under a sparse operand's fibres (its
leading levels, sharing ``pos``/``crd``, then dense levels), against numpy on x86-64 and in the
emulator (NEON, SVE), every schedule of the planner's frontier, and the cases that refuse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minijit.sparseauto.api import compile_einsum, sparse_einsum
from minijit.sparseauto.nest import (
    COMPRESSED,
    DENSE,
    Access,
    Compute,
    Loop,
    Nest,
    Operand,
    PatternError,
    fibre_output,
)
from minijit.sparseauto.plan import sparse_plan
from minijit.sparseauto.tensor import SparseTensor
from tests.conftest import examples
from tests.minijit.sparseauto.strategies import expressions, sparse_tensors

X86 = __import__("minijit.runtime", fromlist=["host"]).host().isa == "x86_64"
CSF = (COMPRESSED,) * 3

#: (subscripts, the output's levels in storage order, dense operand shapes by index)
CASES = [
    ("ijk,kl->ijl", (COMPRESSED, COMPRESSED, DENSE)),  # TTM: a row of L per (i, j) fibre
    ("ijk,kl,lm->ijm", (COMPRESSED, COMPRESSED, DENSE)),  # the TTM chain
    ("ijk,jl,km->ilm", (COMPRESSED, DENSE, DENSE)),  # TTMc: an L x M block per slice
    ("ijk,jl,kl->il", (COMPRESSED, DENSE)),  # MTTKRP: a row per slice
    ("ijk,kl->jil", (COMPRESSED, COMPRESSED, DENSE)),  # the output's own mode order
]
SIZES = {"i": 11, "j": 6, "k": 9, "l": 5, "m": 7}


def _tensor(rng: np.random.Generator) -> tuple[SparseTensor, np.ndarray]:
    d = np.where(rng.random((11, 6, 9)) < 0.15, rng.standard_normal((11, 6, 9)), 0.0)
    d[3] = 0  # an empty slice
    d[5, 2] = 0  # an empty fibre
    return SparseTensor.from_dense(d, CSF), d


def _dense_operands(subscripts: str, rng: np.random.Generator) -> list[np.ndarray]:
    terms = subscripts.split("->")[0].split(",")[1:]
    return [rng.standard_normal(tuple(SIZES[c] for c in t)) for t in terms]


def _check(out: object, subscripts: str, d: np.ndarray, dense: list[np.ndarray], t: SparseTensor, levels) -> None:
    assert isinstance(out, SparseTensor)
    assert out.levels == levels
    shared = sum(1 for lv in levels if lv == COMPRESSED)
    for k in range(shared):  # the operand's own pattern arrays, not copies
        assert out.storage[k].pos is t.storage[k].pos and out.storage[k].crd is t.storage[k].crd
    want = np.einsum(subscripts, d, *dense)
    assert out.shape == want.shape
    np.testing.assert_allclose(out.to_dense(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize(("subscripts", "levels"), CASES)
@pytest.mark.parametrize("schedule", ["auto", "linear"])
def test_fibre_output_matches_numpy_native(subscripts, levels, schedule):
    rng = np.random.default_rng(11)
    t, d = _tensor(rng)
    dense = _dense_operands(subscripts, rng)
    for threads in (1, 2):
        out = sparse_einsum(subscripts, t, *dense, schedule=schedule, threads=threads, fibre_output=True)
        _check(out, subscripts, d, dense, t, levels)
    compiled, _ = compile_einsum(subscripts, t, *dense, schedule=schedule, fibre_output=True)
    assert compiled.program.vectorized  # the output's dense rows run as vector loops


@pytest.mark.parametrize(("subscripts", "levels"), CASES[:3])
@pytest.mark.parametrize(
    ("target", "sve_vl"), [("aarch64-neon", 128), *(("aarch64-sve", vl) for vl in (128, 256, 512))]
)
def test_fibre_output_matches_numpy_aarch64(subscripts, levels, target, sve_vl):
    rng = np.random.default_rng(12)
    t, d = _tensor(rng)
    dense = _dense_operands(subscripts, rng)
    out = sparse_einsum(subscripts, t, *dense, fibre_output=True, target=target, sve_vl=sve_vl)
    _check(out, subscripts, d, dense, t, levels)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
def test_every_frontier_schedule_writes_the_fibre_output():
    """Each schedule the planner keeps compiles and computes the same fibre output."""
    from minijit.sparseauto.execute import SparseContraction

    rng = np.random.default_rng(13)
    t, d = _tensor(rng)
    dense = _dense_operands("ijk,kl,lm->ijm", rng)
    plan = sparse_plan("ijk,kl,lm->ijm", t, *dense, fibre_output=True)
    assert plan.output.levels == (COMPRESSED, COMPRESSED, DENSE)
    nests = {*plan.frontier(), plan.default_linear()}
    assert len(nests) >= 2
    for nest in nests:
        nest.check_pattern()
        out = SparseContraction(nest, SIZES, threads=2).execute(t, *dense)
        np.testing.assert_allclose(out.to_dense(), np.einsum("ijk,kl,lm->ijm", d, *dense), atol=1e-12)


@st.composite
def fibre_expressions(draw):
    """``(subscripts, operands, dense arrays)`` whose output qualifies for a fibre output: a
    sparse ``X`` (2-3 indices, drawn levels, a compressed one among the first ``p``), the output
    over ``X``'s first ``p`` indices and 1-2 indices ``X`` lacks (in a drawn order), 1-2 dense
    operands over ``X``'s other indices and those."""
    nx = draw(st.integers(2, 3))
    xs, extra = "ijk"[:nx], "lm"[: draw(st.integers(1, 2))]
    p = draw(st.integers(1, nx - 1))
    levels = [draw(st.sampled_from((DENSE, COMPRESSED))) for _ in range(nx)]
    levels[draw(st.integers(0, p - 1))] = COMPRESSED
    extents = {c: draw(st.integers(1, 5)) for c in xs + extra}
    dtype = draw(st.sampled_from((np.float32, np.float64)))
    t, d = draw(
        sparse_tensors(tuple(extents[c] for c in xs), dtype=dtype, levels=tuple(levels), mode_order=tuple(range(nx)))
    )
    # the dense operands cover X's contracted indices and the extra ones
    pool = list(xs[p:] + extra)
    first = "".join(draw(st.permutations(pool)))
    terms = [first[: draw(st.integers(1, len(first)))]]
    rest = [c for c in pool if c not in terms[0]]
    if rest or draw(st.booleans()):
        terms.append("".join(rest) + draw(st.sampled_from(["", *xs])).strip())
    terms = [tr for tr in (("".join(dict.fromkeys(tr))) for tr in terms) if tr]
    out = "".join(draw(st.permutations(xs[:p] + extra)))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    dense = [rng.uniform(-1, 1, tuple(extents[c] for c in tr)).astype(dtype) for tr in terms]
    return ",".join([xs, *terms]) + "->" + out, [t, *dense], [d, *dense]


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fibre_expressions(), st.sampled_from(["auto", "linear"]))
def test_drawn_fibre_outputs_match_numpy(expr, schedule):
    subscripts, ops, dense = expr
    got = sparse_einsum(subscripts, *ops, schedule=schedule, fibre_output=True, threads=2)
    want = np.einsum(subscripts, *[x.astype(np.float64) for x in dense])
    assert isinstance(got, SparseTensor) and got.shape == want.shape and got.dtype == dense[0].dtype
    tol = 1e-4 if got.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got.to_dense(), want, rtol=tol, atol=tol)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_drawn_expressions_give_a_fibre_output_or_refuse(expr):
    """The general drawn expressions: a fibre output where one qualifies, else the clear
    refusal."""
    subscripts, ops, dense = expr
    try:
        got = sparse_einsum(subscripts, *ops, fibre_output=True)
    except ValueError as e:
        assert "fibre_output" in str(e) or "contradict" in str(e)
        return
    want = np.einsum(subscripts, *[x.astype(np.float64) for x in dense])
    assert isinstance(got, SparseTensor) and got.shape == want.shape
    tol = 1e-4 if got.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got.to_dense(), want, rtol=tol, atol=tol)


def test_operands_that_give_no_fibre_output():
    b = Operand("B", ("i", "j", "k"), CSF)
    csr = Operand("B", ("i", "k"), (DENSE, COMPRESSED))
    assert fibre_output((b, Operand.dense("C", ("k", "l"))), ("i", "j", "l"), "A") == Operand(
        "A", ("i", "j", "l"), (COMPRESSED, COMPRESSED, DENSE)
    )
    assert fibre_output((csr, Operand.dense("C", ("k", "j"))), ("i", "j"), "A") is None  # only a dense level
    assert fibre_output((b, Operand.dense("C", ("j", "l"))), ("i", "k", "l"), "A") is None  # k below a skipped j
    assert fibre_output((Operand.dense("C", ("i", "l")),), ("i", "l"), "A") is None


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
def test_no_fibre_output_is_a_clear_error():
    rng = np.random.default_rng(14)
    t, _ = _tensor(rng)
    with pytest.raises(ValueError, match="fibre_output: no sparse operand"):
        sparse_einsum("ijk,jl->ikl", t, rng.standard_normal((6, 5)), fibre_output=True)
    with pytest.raises(TypeError, match="fibre_output must be True or False"):
        sparse_einsum("ijk,kl->ijl", t, rng.standard_normal((9, 5)), fibre_output=1)
    with pytest.raises(TypeError, match="fibre_output must be True or False"):
        sparse_plan("ijk,kl->ijl", t, rng.standard_normal((9, 5)), fibre_output="yes")


def test_a_fibre_output_written_outside_the_walk_is_refused():
    """The output's position comes from the walk of its pattern: writing it under a dense loop
    over a shared compressed index is a PatternError (such schedules are never enumerated)."""
    b = Operand("B", ("i", "j", "k"), CSF)
    c = Operand.dense("C", ("k", "l"))
    out = Operand("A", ("i", "j", "l"), (COMPRESSED, COMPRESSED, DENSE))
    temp_then_dense = (
        Loop(
            "i",
            (
                Loop(
                    "j",
                    (Loop("k", (Loop("l", (Compute(Access("A", ("i", "j", "l")), (Access("C", ("k", "l")),)),)),)),),
                ),
            ),
        ),
    )
    with pytest.raises(PatternError, match="does not walk B"):
        Nest((b, c), out, temp_then_dense).check_pattern()


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_fibre_output_listings_reassemble(isa, dtype):
    """Every schedule of the TTM chain with a fibre output, both x86-64 ISAs: llvm-mc assembles
    the listing to the emitted bytes (AVX-512 code cannot run on a host without it)."""
    from asm import llvm
    from minijit.sparseauto.codegen import compile_nest

    rng = np.random.default_rng(15)
    t, _ = _tensor(rng)
    plan = sparse_plan("ijk,kl,lm->ijm", t, *_dense_operands("ijk,kl,lm->ijm", rng), fibre_output=True)
    for nest in {*plan.frontier(), plan.default_linear()}:
        prog = compile_nest(nest, SIZES, dtype, isa)
        assert llvm.assemble(prog.asm.listing(), triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()
