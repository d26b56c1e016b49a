"""sparse_einsum against numpy: drawn expressions (2-3 operands, up to 5 indices, one or two sparse
operands with drawn levels and mode orders, empty fibres, one non-zero, all zero)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings

from minijit.sparseauto.api import compile_einsum, sparse_einsum
from minijit.sparseauto.tensor import SparseTensor
from tests.minijit.sparseauto.strategies import expressions

pytestmark = pytest.mark.skipif(
    __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="x86-64 code generation"
)


def _check(subscripts, ops, dense, schedule):
    got = sparse_einsum(subscripts, *ops, schedule=schedule)
    want = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    if isinstance(got, SparseTensor):
        assert got.shape == want.shape
        got = got.to_dense()
    tol = 1e-4 if got.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_linear_schedule_matches_numpy(expr):
    _check(*expr, "linear")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_auto_schedule_matches_numpy(expr):
    _check(*expr, "auto")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(max_operands=4))
def test_four_operand_expressions_match_numpy(expr):
    _check(*expr, "auto")


def test_sampled_output_keeps_pattern_and_mode_order():
    rng = np.random.default_rng(1)
    a = sp.random(9, 7, density=0.3, format="csc", random_state=2)
    b, c = rng.standard_normal((9, 5)), rng.standard_normal((7, 5))
    out = sparse_einsum("ij,ik,jk->ij", a, b, c)
    assert isinstance(out, SparseTensor) and out.shape == (9, 7) and out.mode_order == (1, 0)
    assert out.nnz == a.nnz
    np.testing.assert_allclose(out.to_dense(), a.toarray() * (b @ c.T), atol=1e-12)


def test_compiled_contraction_is_cached():
    a = sp.random(6, 5, density=0.4, format="csr", random_state=3)
    b = np.ones((5, 3))
    first, _ = compile_einsum("ik,kj->ij", a, b)
    again, _ = compile_einsum("ik,kj->ij", a * 2, b + 1)
    other, _ = compile_einsum("ik,kj->ij", a, np.ones((5, 4)))
    assert first is again and other is not first


@pytest.mark.parametrize(
    "subscripts, ops, exc, text",
    [
        ("ij,jk->ik", (np.ones((2, 2)), np.ones((2, 2))), ValueError, "at least one sparse"),
        ("ij,jk->ik", (sp.eye(3, format="csr"), np.ones((2, 2))), ValueError, "index 'j' has size 2"),
        ("ij,jk->ik", (sp.eye(3, format="csr"), [[1.0]]), TypeError, "operand 1 must be a numpy array"),
        ("ij,jk->ik", (sp.eye(3, format="csr"), np.ones((3, 3), np.complex128)), TypeError, "complex128"),
        ("ii,ik->ik", (sp.eye(3, format="csr"), np.ones((3, 3))), ValueError, "diagonals"),
        ("ij,jk->iz", (sp.eye(3, format="csr"), np.ones((3, 3))), ValueError, "'z'"),
        ("ijk,jk->i", (sp.eye(3, format="csr"), np.ones((3, 3))), ValueError, "has 2 modes"),
        ("ij,ji->", (sp.eye(3, format="csr"), sp.eye(3, format="csr")), ValueError, "contradict"),
    ],
)
def test_bad_input(subscripts, ops, exc, text):
    with pytest.raises(exc) as info:
        sparse_einsum(subscripts, *ops, schedule="linear")
    assert text in str(info.value)


def test_integer_operands_are_converted():
    a = sp.csr_matrix(np.array([[0, 2], [3, 0]], dtype=np.int64))
    got = sparse_einsum("ij,jk->ik", a, np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, a.toarray() @ np.array([[1, 2], [3, 4]]))


def test_bad_schedule():
    with pytest.raises(ValueError, match="schedule must be one of"):
        sparse_einsum("ij,j->i", sp.eye(2, format="csr"), np.ones(2), schedule="fast")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(max_operands=3))
def test_every_frontier_schedule_matches_numpy(expr):
    """Not only the chosen schedule: every schedule on the planner's frontier compiles and runs."""
    from minijit.sparseauto.api import _convert, _operands
    from minijit.sparseauto.execute import SparseContraction
    from minijit.sparseauto.graph import parse_subscripts
    from minijit.sparseauto.plan import sparse_plan

    subscripts, ops, dense = expr
    values, dtype = _convert(ops)
    terms, out_term = parse_subscripts(subscripts, len(values))
    _, extents = _operands(terms, values)
    plan = sparse_plan(subscripts, *values, sizes=extents)
    want = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert plan.frontier()
    for nest in plan.frontier():
        got = SparseContraction(nest, extents, dtype).execute(*values)
        if isinstance(got, SparseTensor):  # stored in the sampled operand's order
            got = np.einsum(f"{''.join(nest.output.indices)}->{''.join(out_term)}", got.to_dense())
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(nest))
