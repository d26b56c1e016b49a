"""`minijit.einsum` as a drop-in for np.einsum (issue 52): every dtype numpy takes (those without a
compiled path run on numpy's einsum: bit for bit numpy's result, integers with their wrap-around;
those `minijit.einsum.widen` computes on other kernels: bit for bit for integers and bool, within
a stated bound for float16 and complex),
numpy's ``order`` and ``casting`` keywords, and numpy's error types for its misuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.einsum import dtypes, keywords, widen

from .strategies import expressions, operands, typed_operands
from .test_widen import assert_bound

#: dtypes numpy's einsum runs, but int32 and int64 (`COMPILED_INTS`: minijit's integer kernels)
DELEGATED = [
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.bool_, np.float16, np.longdouble, np.complex64, np.complex128, np.clongdouble,
]  # fmt: skip
#: integer dtypes with a compiled path (numpy arrays of one of them): bit for bit numpy's too
COMPILED_INTS = (np.int32, np.int64)
#: dtypes computed on those kernels (`minijit.einsum.widen`): bit for bit numpy's for integers and
#: bool, within `test_widen.assert_bound` of the exact result for float16 and complex
WIDENED = (
    np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.float16, np.complex64, np.complex128,
)  # fmt: skip
WIDENED_INEXACT = (np.float16, np.complex64, np.complex128)


_draw_operands = typed_operands  # operands of a dtype over its whole range (strategies)


def _same_outcome(call_ours, call_numpy, exact=True, check=None):
    """Both calls give the same arrays (dtype, shape, values: bit for bit where ``exact``, else
    within float32 rounding of their scale, or as ``check(got)`` asserts) or raise the same error type."""
    try:
        want = call_numpy()
    except Exception as e:  # noqa: BLE001 - the error type is what is compared
        with pytest.raises(type(e)):
            call_ours()
        return
    got = call_ours()
    assert np.asarray(got).dtype == np.asarray(want).dtype
    if exact:
        assert np.array_equal(got, want, equal_nan=True)
    elif check is not None:
        check(got)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@given(
    expr=expressions(min_ops=1, max_ops=3, max_indices=5, max_size=6, max_product=512),
    dtype=st.sampled_from(DELEGATED),
    optimize=st.sampled_from([False, True, "greedy"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_every_dtype_is_numpys_bit_for_bit(expr, dtype, optimize, seed):
    subs, shapes = expr
    ops = _draw_operands(shapes, dtype, seed)
    ours, theirs = (
        (lambda: minijit.einsum(subs, *ops, optimize=optimize)),
        (lambda: np.einsum(subs, *ops, optimize=optimize)),
    )
    if dtype in WIDENED_INEXACT:  # float32/float64 kernels: within test_widen's bound of the exact result
        _same_outcome(ours, theirs, exact=False, check=lambda got: assert_bound(got, subs, ops, np.dtype(dtype)))
    else:
        _same_outcome(ours, theirs)
    text = minijit.einsum(subs, *ops, optimize=optimize, explain=True)
    if dtype in COMPILED_INTS or dtype in WIDENED:  # compiled, but a one-operand view (numpy returns a view of it)
        assert text.startswith("minijit compiled:") or dtypes._is_view(subs, tuple(ops)), text
    else:
        assert text.startswith("numpy.einsum:")


@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=5, max_size=6, max_product=512),
    kinds=st.tuples(st.sampled_from([np.int32, np.int64, np.float32, np.float64, np.complex64, np.uint8, np.bool_])),
    dtype=st.sampled_from([None, np.float64, np.int64, np.complex128, np.float32]),
    casting=st.sampled_from([None, "no", "equiv", "safe", "same_kind", "unsafe"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_mixed_kinds_dtype_and_casting_are_numpys(expr, kinds, dtype, casting, seed):
    subs, shapes = expr
    ops = [_draw_operands([s], kinds[i % len(kinds)], seed + i)[0] for i, s in enumerate(shapes)]
    ops[-1] = _draw_operands([shapes[-1]], np.float32, seed)[0]  # two kinds unless kinds[0] is float32
    kw = {"dtype": dtype, "casting": casting}
    mine = {k: v for k, v in kw.items() if v is not None}
    compiled = all(x.dtype in (np.float32, np.float64) for x in ops) and dtype in (None, np.float32, np.float64)
    if compiled and casting is None:
        return  # minijit's default casting lets float64 -> float32 through (docs/decisions.md)
    ours, theirs = (lambda: minijit.einsum(subs, *ops, **mine)), (lambda: np.einsum(subs, *ops, **mine))
    route = widen.route(subs, tuple(ops), None, dtype, None, casting, "auto")
    if route is not None and route.kind == "complex":  # the 4M formulation on minijit's float kernels
        ref = [x.astype(dtype) if dtype is not None else x for x in ops]
        _same_outcome(ours, theirs, exact=False, check=lambda got: assert_bound(got, subs, ref, route.result))
        return
    _same_outcome(ours, theirs, exact=not compiled)  # compiled: minijit's kernels, not numpy's order of sums


def test_integer_wraparound_is_numpys():
    a = np.full((3, 4), np.iinfo(np.int32).max, np.int32)
    got = minijit.einsum("ij,jk->ik", a, a.T)
    assert got.dtype == np.int32 and np.array_equal(got, np.einsum("ij,jk->ik", a, a.T))
    u = np.array([250, 7], np.uint8)
    assert np.array_equal(minijit.einsum("i,i->", u, u), np.einsum("i,i->", u, u))


def test_out_of_another_kind_and_object_operands():
    a = np.arange(6.0).reshape(2, 3)
    out = np.zeros((2, 2), np.int64)
    with pytest.raises(TypeError):  # numpy's 'safe' rule: float64 into int64
        minijit.einsum("ij,kj->ik", a, a, out=out)
    assert minijit.einsum("ij,kj->ik", a, a, out=out, casting="unsafe") is out
    assert np.array_equal(out, np.einsum("ij,kj->ik", a, a).astype(np.int64))
    obj = np.array([[1, 2], [3, 4]], dtype=object)
    got = minijit.einsum("ij,jk->ik", obj, obj)
    assert got.dtype == object and np.array_equal(got, np.einsum("ij,jk->ik", obj, obj))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_explicit_orders_lay_out_as_numpy(dtype):
    # numpy's test_output_order with explicit orders, on the compiled path
    a = np.ones((2, 3, 5), dtype, order="F")
    b = np.ones((4, 3), dtype, order="F")
    c = np.ones((4, 3), dtype)
    assert minijit.einsum("...ft,mf->...mt", a, b, explain=True).startswith("minijit compiled:")
    for opt in (True, False):
        assert minijit.einsum("...ft,mf->...mt", a, b, order="a", optimize=opt).flags.f_contiguous
        assert minijit.einsum("...ft,mf->...mt", a, b, order="f", optimize=opt).flags.f_contiguous
        assert minijit.einsum("...ft,mf->...mt", a, b, order="c", optimize=opt).flags.c_contiguous
        k = minijit.einsum("...ft,mf->...mt", a, b, order="k", optimize=opt)
        assert not k.flags.c_contiguous and not k.flags.f_contiguous
        assert k.strides == np.einsum("...ft,mf->...mt", a, b, order="K", optimize=False).strides
        assert minijit.einsum("...ft,mf->...mt", a, c, order="a", optimize=opt).flags.c_contiguous
        default = minijit.einsum("...ft,mf->...mt", a, b, optimize=opt)
        assert default.strides == k.strides  # numpy's default order is 'K'
        np.testing.assert_array_equal(default, np.einsum("...ft,mf->...mt", a, b))


@given(
    sub=st.sampled_from(["ij,jk->ik", "ijk,kl->lij", "abc,cd->dab", "ij,k->kji", "ij,ij->ji", "ijk->kj"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None)
def test_order_k_follows_numpys_strides(sub, seed):
    rng = np.random.default_rng(seed)
    sizes = {c: int(rng.integers(2, 5)) for c in "abcdijkl"}
    ops = []
    for s in sub.split("->")[0].split(","):
        x = rng.uniform(-1, 1, [sizes[c] for c in s])
        perm = rng.permutation(x.ndim)  # a dense array in a random axis order
        ops.append(np.ascontiguousarray(x.transpose(perm)).transpose(np.argsort(perm)))
    got = minijit.einsum(sub, *ops, order="K")
    want = np.einsum(sub, *ops, order="K", optimize=False)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if got.ndim > 1 and not all(x.flags.c_contiguous for x in ops) and not (len(ops) == 1):
        assert got.strides == want.strides  # one operand: numpy returns a view of it


def test_keyword_validation():
    assert all(keywords.valid_order(o) for o in (None, "C", "f", "a", "K"))
    assert not any(keywords.valid_order(o) for o in ("W", "CC", 1))
    assert keywords.valid_casting(None) and not keywords.valid_casting("SAFE")


@pytest.mark.parametrize("opt", [True, False])
def test_misuses_raise_numpys_error_types(opt):
    # numpy's test_einsum_errors / test_einsum_specific_errors, against numpy's own types
    a = np.arange(6.0).reshape(2, 3)
    cases = [
        ((), {}),
        (("",), {}),
        (("", 0), {"out": "test"}),
        (("", 0), {"order": "W"}),
        (("ij", a), {"order": "d"}),
        (("", 0), {"casting": "blah"}),
        (("ij->j", a), {"casting": "same_value"}),
        (("", 0), {"dtype": "bad_data_type"}),
        (("ij,kj", a, a), {"dtype": np.float32, "casting": "safe"}),
        (("i->i", [[0, 1], [0, 1]]), {"out": np.arange(4).reshape(2, 2)}),
    ]
    for args, kw in cases:
        try:
            np.einsum(*args, optimize=opt, **kw)
        except Exception as e:  # noqa: BLE001 - the type is compared
            with pytest.raises(type(e)):
                minijit.einsum(*args, optimize=opt, **kw)
        else:
            raise AssertionError(f"numpy accepts {args} {kw}")
    with pytest.raises(TypeError):
        minijit.einsum("ij", a, bad_arg=0)
    ops = [np.ones((2, 2))] * 4
    for err in (RuntimeError, ValueError):  # numpy's type, and minijit's for its own callers
        with pytest.raises(err, match="leaves 2"):
            minijit.einsum("ab,bc,cd,de->ae", *ops, optimize=["einsum_path", (2, 3), (0, 1)])


def test_compiled_calls_are_explained_by_their_plan():
    a = operands([(4, 5), (5, 3)], np.float32)
    text = minijit.einsum("ij,jk->ik", *a, explain=True)
    assert text.startswith("minijit compiled:") and "EinsumPlan" in text
    assert "int64" in minijit.einsum("ij,jk->ik", a[0].astype(np.int64), a[1], explain=True)
