"""minijit.einsum against np.einsum (float64 reference) on random and named expressions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.runtime import runs_natively
from tests.conftest import examples
from tests.minijit.einsum.strategies import assert_close, expressions, operands

EMULATED = () if runs_natively("aarch64") else ("aarch64-neon", "aarch64-sve")
DTYPES = [np.float32, np.float64]


@settings(max_examples=examples(200))
@given(expressions(), st.sampled_from(DTYPES))
def test_random_expressions_native(expr, dtype):
    subs, shapes = expr
    ops = operands(shapes, dtype)
    got = minijit.einsum(subs, *ops)
    assert_close(got, subs, ops, dtype)


@settings(max_examples=examples(40))
@given(expressions(min_ops=1, max_ops=1, max_indices=5), st.sampled_from(DTYPES))
def test_single_operand_native(expr, dtype):
    subs, shapes = expr
    ops = operands(shapes, dtype)
    assert_close(minijit.einsum(subs, *ops), subs, ops, dtype)


@pytest.mark.parametrize("target", EMULATED)
@settings(max_examples=examples(8))
@given(expr=expressions(max_ops=3, max_indices=4, max_size=5, max_product=64), dtype=st.sampled_from(DTYPES))
def test_random_expressions_emulated(target, expr, dtype):
    subs, shapes = expr
    ops = operands(shapes, dtype)
    assert_close(minijit.einsum(subs, *ops, target=target), subs, ops, dtype)
    plan = minijit.EinsumPlan(subs, *shapes, dtype=dtype, target=target)  # reused with new arrays
    ops = operands(shapes, dtype, seed=1)
    out = np.full(plan.out_shape, np.nan, dtype)
    assert plan(*ops, out=out) is out
    assert_close(out, subs, ops, dtype)


@settings(max_examples=examples(60))
@given(expressions(max_ops=5), st.sampled_from(DTYPES))
def test_plan_reuse_with_new_arrays(expr, dtype):
    subs, shapes = expr
    plan = minijit.EinsumPlan(subs, *shapes, dtype=dtype)
    for seed in (1, 2):
        ops = operands(shapes, dtype, seed)
        assert_close(plan(*ops), subs, ops, dtype)
    ops = operands(shapes, dtype, 3)
    ref = np.einsum(subs, *ops)
    out = np.full(ref.shape, np.nan, dtype)
    assert plan.execute(*ops, out=out) is out  # written in place, no stale values left
    assert_close(out, subs, ops, dtype)


NAMED = [
    ("bhqd,bhkd->bhqk", [(2, 3, 16, 8), (2, 3, 12, 8)]),
    ("bik,bkj->bij", [(4, 9, 7), (4, 7, 5)]),
    ("ij,jk,kl,lm->im", [(20, 3), (3, 30), (30, 4), (4, 25)]),
    ("pqrs,pi,qj,rk,sl->ijkl", [(5, 6, 4, 5), (5, 3), (6, 4), (4, 2), (5, 3)]),  # 4-index transform
    ("abc,ai,bj,ck->ijk", [(6, 5, 4), (6, 3), (5, 2), (4, 3)]),  # Tucker
    ("ia,ajb,bkc,cl->ijkl", [(5, 3), (3, 4, 2), (2, 6, 3), (3, 5)]),  # tensor train
    ("ij->ji", [(7, 5)]),
    ("ijk->", [(3, 4, 5)]),
    ("ij,ij->", [(6, 7), (6, 7)]),
    ("i,j->ij", [(5,), (6,)]),
    (",i->i", [(), (4,)]),
    ("ij,jk", [(1, 5), (5, 1)]),
    ("ab,bc->ca", [(8, 1), (1, 9)]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("subs", "shapes"), NAMED)
def test_named_expressions(subs, shapes, dtype):
    ops = operands(shapes, dtype)
    assert_close(minijit.einsum(subs, *ops), subs, ops, dtype)


def test_non_contiguous_and_mixed_inputs():
    rng = np.random.default_rng(5)
    a = rng.random((12, 10))[::2].T  # strided and transposed
    b = np.asfortranarray(rng.random((6, 4)).astype(np.float32))
    got = minijit.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.float64  # result type of float64 and float32, like numpy
    np.testing.assert_allclose(got, np.einsum("ij,jk->ik", a, b.astype(np.float64)), rtol=1e-12)
    got32 = minijit.einsum("ij,jk->ik", a, b, dtype=np.float32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, a @ b, rtol=1e-5)


def test_out_argument_checked():
    rng = np.random.default_rng(6)
    a, b = rng.random((4, 5)), rng.random((5, 3))
    out = np.zeros((4, 3))
    assert minijit.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        minijit.einsum("ij,jk->ik", a, b, out=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="dtype"):
        minijit.einsum("ij,jk->ik", a, b, out=np.zeros((4, 3), np.int32))
    fortran = np.zeros((4, 3), order="F")  # not C-contiguous: written through a copy
    assert minijit.einsum("ij,jk->ik", a, b, out=fortran) is fortran
    np.testing.assert_allclose(fortran, a @ b, rtol=1e-12)
    f32 = np.zeros((4, 3), np.float32)  # another float dtype: cast like numpy's out=
    minijit.einsum("ij,jk->ik", a, b, out=f32)
    np.testing.assert_allclose(f32, a @ b, rtol=1e-6)


@pytest.mark.parametrize(
    ("subs", "shapes", "match"),
    [
        ("ii->i", [(3, 4)], "repeated index 'i'"),  # a diagonal needs equal sizes
        ("ij,jj->i", [(3, 3), (3, 4)], "repeated index 'j'"),
        ("...ij,jk->ik", [(2, 3, 4), (4, 5)], "no '...'"),  # '...' dims need '...' in the output
        ("ij,jk->ik", [(3, 4)], "operands"),
        ("ij,jk->ik", [(3, 4), (5, 6)], "operand 1"),
        ("ij,jk->ik", [(3, 4, 5), (4, 6)], "operand 0"),
        ("ij,jk->iz", [(3, 4), (4, 6)], "'z'"),
        ("ij,jk->ii", [(3, 4), (4, 6)], "repeat"),
        ("i1,jk->ik", [(3, 4), (4, 6)], "character"),
        ("ij->i->j", [(3, 4)], "->"),
    ],
)
def test_bad_subscripts_raise_value_error(subs, shapes, match):
    ops = [np.ones(s, np.float32) for s in shapes]
    with pytest.raises(ValueError, match=match):
        minijit.einsum(subs, *ops)


def test_bad_dtypes_and_targets():
    # dtypes without a compiled path run on numpy's einsum (issue 52): numpy's result, said by explain
    a, b = np.arange(4, dtype=np.int64).reshape(2, 2), np.ones((2, 2))
    got = minijit.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.float64 and np.array_equal(got, np.einsum("ij,jk->ik", a, b))
    assert "int64" in minijit.einsum("ij,jk->ik", a, b, explain=True)
    z = np.ones((2, 2), np.complex128) * 1j
    assert np.array_equal(minijit.einsum("ij->ji", z), z.T)
    assert "complex128" in minijit.einsum("ij->ji", z, explain=True)
    with pytest.raises(TypeError, match="float16"):
        minijit.EinsumPlan("ij->ji", (2, 2), dtype=np.float16)
    with pytest.raises(TypeError, match="target 'cuda' takes float32, float16 or bfloat16"):
        minijit.einsum("ij->ji", np.ones((2, 2)), target="cuda")  # float64 has no CUDA GEMM


def test_zero_size_dims():
    a, b = np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert got.shape == (3, 4) and not got.any()
    assert minijit.einsum("ij,jk->ik", np.ones((0, 2)), np.ones((2, 4))).shape == (0, 4)


def test_plan_caches_operations():
    shapes = [(16, 8), (8, 12)]
    p1 = minijit.EinsumPlan("ij,jk->ik", *shapes)
    p2 = minijit.EinsumPlan("ij,jk->ik", *shapes)
    assert [s.op for s in p1.steps] == [s.op for s in p2.steps]  # same TensorOperation objects
    text = p1.listing()
    assert "contract" in text and "flops" in text and str(2 * 16 * 8 * 12) in text
    assert str(p1) == text
    with pytest.raises(ValueError, match="operand 0"):
        p1(np.ones((16, 9), np.float32), np.ones((8, 12), np.float32))


LARGER = [
    ("ij,jk->ik", [(517, 300), (300, 263)]),  # sizes the optimizer splits (> 256) with remainders
    ("ik,jk->ij", [(300, 517), (263, 517)]),
    ("bqd,bkd->bqk", [(5, 300, 33), (5, 257, 33)]),
    ("ijk,kjl->il", [(37, 41, 43), (43, 41, 29)]),
    ("ij->ji", [(513, 259)]),
    ("ijk->j", [(33, 65, 17)]),
    ("ij,j->i", [(300, 400), (400,)]),
    ("ij,i->j", [(300, 400), (300,)]),
    ("ib,jb->ijb", [(70, 5), (90, 5)]),  # batch index innermost in the result
    ("bi,bi->b", [(300, 7), (300, 7)]),  # batched dot products
    ("ib,ib->b", [(7, 300), (7, 300)]),
    ("beac,caeb->ecb", [(9, 6, 11, 5), (5, 11, 6, 9)]),
    ("bik,bkj->ijb", [(6, 40, 30), (6, 30, 50)]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("subs", "shapes"), LARGER)
def test_larger_sizes(subs, shapes, dtype):
    ops = operands(shapes, dtype, seed=7)
    assert_close(minijit.einsum(subs, *ops), subs, ops, dtype)


def test_plan_runs_without_replanning_or_rejit(monkeypatch):
    from minijit import TensorOperation
    from minijit.einsum import plan as plan_mod

    shapes = [(12, 7), (7, 9), (9, 5)]
    plan = minijit.EinsumPlan("ij,jk,kl->il", *shapes, dtype=np.float64)
    n_ops = len(plan_mod._OPS)

    def no_setup(*args, **kwargs):
        raise AssertionError("setup called while running a plan")

    monkeypatch.setattr(TensorOperation, "setup", no_setup)
    monkeypatch.setattr(plan_mod, "parse_subscripts", no_setup)
    for seed in range(3):
        ops = operands(shapes, np.float64, seed)
        assert_close(plan(*ops), "ij,jk,kl->il", ops, np.float64)
    # the same expression again: every node's TensorOperation comes from the cache
    monkeypatch.undo()
    again = minijit.EinsumPlan("ij,jk,kl->il", *shapes, dtype=np.float64)
    assert len(plan_mod._OPS) == n_ops
    assert [s.op for s in again.steps] == [s.op for s in plan.steps]


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_fortran_and_strided_inputs_are_read_in_place(dtype, monkeypatch):
    rng = np.random.default_rng(8)
    a_t = rng.random((20, 30)).astype(dtype).T  # (30, 20), a transposed view
    a_f = rng.random((30, 20)).astype(dtype).T  # (20, 30), a transposed view
    b = np.asfortranarray(rng.random((20, 10, 6)).astype(dtype))
    c = rng.random((6, 5, 4)).astype(dtype).transpose(2, 0, 1)  # (4, 6, 5), strides permuted
    strided = rng.random((60, 20)).astype(dtype)[::2]  # a view of a C array: read in place too
    gapped = rng.random((20, 60)).astype(dtype)[:, ::3]  # no unit-stride dim: the kernels need a copy
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda x, *a, **k: copies.append(x.shape) or real(x, *a, **k))
    for subs, x in (("ij,jkl,mln->imn", a_t), ("ji,jkl,mln", a_f)):  # explicit and implicit outputs
        got = minijit.einsum(subs, x, b, c)
        assert not copies
        assert_close(got, subs, [x, b, c], dtype)
    assert_close(minijit.einsum("ij,jkl->ikl", strided, b), "ij,jkl->ikl", [strided, b], dtype)
    assert not copies
    assert_close(minijit.einsum("ij,jkl->ikl", gapped, b), "ij,jkl->ikl", [gapped, b], dtype)
    assert copies == [(20, 20)]  # copied, and still right


@pytest.mark.parametrize("target", ("native", *EMULATED))
@pytest.mark.parametrize(
    ("subs", "shapes"), [("ib,jb->ijb", [(3, 5), (4, 5)]), ("dcab,cda->dcba", [(2, 3, 5, 2), (3, 2, 5)])]
)
def test_broadcast_products_use_the_binary_kernel(target, subs, shapes):
    plan = minijit.EinsumPlan(subs, *shapes, dtype=np.float32, target=target)
    assert "multiply" in [s.kind for s in plan.steps]
    ops = operands(shapes, np.float32, seed=9)
    assert_close(plan(*ops), subs, ops, np.float32)
