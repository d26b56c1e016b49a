"""Strided views (slices with steps, negative steps, transposes, broadcasts) read in place by einsum
plans: no copy, results against np.einsum in float64, nothing read outside the base array."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import minijit
from minijit.einsum.plan import view_of_base
from tests.minijit.einsum.strategies import assert_close
from tests.minijit.einsum.test_einsum import EMULATED

_RNG = np.random.default_rng(11)
BASE = _RNG.uniform(-1, 1, (24, 30, 20))
OTHER = _RNG.uniform(-1, 1, (30, 20))


def permuted(x: np.ndarray) -> np.ndarray:
    """A copy of 3-d ``x`` that owns one dense block with its axes in the order (2, 0, 1): neither C
    nor F order."""
    y = np.ascontiguousarray(x.transpose(2, 0, 1)).transpose(1, 2, 0).copy(order="K")
    assert y.base is None and not (y.flags.c_contiguous or y.flags.f_contiguous)
    return y


def _views(dtype):
    base, other = BASE.astype(dtype), OTHER.astype(dtype)
    row, col = other[3], other[4, :6, None]  # col: (6, 1), unit stride down the column
    return [
        ("steps", "ij,jk->ik", [base[0][::2, 2:10], other[:8, 3:10]]),
        ("negative outer step", "ij,jk->ik", [base[1][::-3, 1:9], other[10:2:-1, :7]]),
        ("3-d negative and steps", "ijk,kl->ijl", [base[::5, ::-2, 2:12], other[:10, ::-1][:, ::-1][:, 5:9]]),
        ("transposed slice", "ij,jk->ik", [base[2, 3:9, 1:17].T, other[4:10, :5]]),
        ("broadcast row (stride 0)", "ij,jk->ik", [np.broadcast_to(row[:8], (6, 8)), other[:8, :7]]),
        ("broadcast column (stride 0)", "ij,jk->ik", [np.broadcast_to(col, (6, 8)), other[:8, :7]]),
        ("batched views", "bij,bjk->bik", [base[:4, 1:7, :9], base[10:18:2, 2:11, 11:16]]),
        ("three operands", "ij,jk,kl->il", [base[3, ::-2, :7], other[::3, 2:9].T.T[:7], base[5][:14:2, 1:6]]),
        ("single operand sum", "ijk->k", [base[::-4, 3:, 5:15]]),
        ("single operand permute", "ijk->kji", [base[1:5, ::-7, :6]]),
        ("view of an F-order array", "ij,jk->ik", [np.asfortranarray(other)[2:9, 3:11], other[:8, :5]]),
        ("view of a permuted dense array", "ijk,kl->ijl", [permuted(base)[::5, 2:9, 1:12], other[:11, :4]]),
    ]


NAMES = [v[0] for v in _views(np.float64)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_views_are_read_in_place(name, dtype, monkeypatch):
    _, subs, ops = next(v for v in _views(dtype) if v[0] == name)
    assert any(not x.flags.c_contiguous for x in ops)
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda x, *a, **k: copies.append(x.shape) or real(x, *a, **k))
    got = minijit.einsum(subs, *ops)
    assert not copies, f"{name}: copied {copies}"
    assert_close(got, subs, ops, dtype)
    for x in ops:  # the operands were not written
        assert x.base is not None


@pytest.mark.parametrize("target", EMULATED)
@pytest.mark.parametrize(
    "name", ["negative outer step", "broadcast column (stride 0)", "batched views", "view of an F-order array"]
)
def test_views_emulated(target, name):
    # the emulated path hands each node the base array and the view's first element as an offset
    _, subs, ops = next(v for v in _views(np.float32) if v[0] == name)
    assert_close(minijit.einsum(subs, *ops, target=target), subs, ops, np.float32)


def test_plan_with_strides_checks_every_call():
    base = BASE[0].copy()
    view = base[::-2, 1:9]  # (12, 8), element strides (-40, 1)
    plan = minijit.EinsumPlan("ij,jk->ik", view.shape, (8, 5), dtype=np.float64, strides=[(-40, 1), None])
    assert plan.strides == [(-40, 1), None]
    b = OTHER[:8, :5].copy()
    np.testing.assert_allclose(plan(view, b), np.einsum("ij,jk->ik", view, b), rtol=1e-12)
    with pytest.raises(ValueError, match="operand 0 has byte strides"):
        plan(np.ascontiguousarray(view), b)  # not the planned layout
    # planned strides, but the elements reach outside the memory the array was made from
    fake = as_strided(base[-1:], shape=view.shape, strides=view.strides)
    with pytest.raises(ValueError, match="operand 0 is not a view inside a base array that is one dense block"):
        plan(fake, b)
    with pytest.raises(ValueError, match="strides\\[1\\]"):
        minijit.EinsumPlan("ij,jk->ik", (3, 4), (4, 5), strides=[None, (5,)])
    with pytest.raises(ValueError, match="2 operands"):
        minijit.EinsumPlan("ij,jk->ik", (3, 4), (4, 5), strides=[None])


def test_plan_with_strides_reads_dense_blocks_in_any_order():
    """An F-order or permuted-axes operand (one dense block) is read in place by a plan built for
    its strides, and copied to C order by a plan built without; both give numpy's result, also
    into an F-order ``out``."""
    f = np.asfortranarray(OTHER[:8, :6])  # element strides (1, 8)
    p3 = permuted(BASE[:4, :5, :6])  # element strides (5, 1, 20)
    b = OTHER[10:16, :3].copy()
    for x, subs, st in ((f, "ij,jk->ik", (1, 8)), (p3, "ijk,kl->ijl", (5, 1, 20))):
        want = np.einsum(subs, x, b)
        in_place = minijit.EinsumPlan(subs, x.shape, b.shape, dtype=np.float64, strides=[st, None])
        assert in_place.strides == [st, None]
        copying = minijit.EinsumPlan(subs, x.shape, b.shape, dtype=np.float64)
        for plan in (in_place, copying):
            np.testing.assert_allclose(plan(x, b), want, rtol=1e-12)
            out = np.zeros(want.shape, order="F")
            assert plan(x, b, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-12)
        with pytest.raises(ValueError, match="operand 0 has byte strides"):
            in_place(np.ascontiguousarray(x), b)  # not the planned layout


def test_a_view_without_unit_stride_is_copied():
    gapped = BASE[0][:, ::3]  # (30, 7), inner stride 3: no kernel reads it in place
    plan = minijit.EinsumPlan("ij,jk->ik", gapped.shape, (7, 4), dtype=np.float64, strides=[(20, 3), None])
    assert plan.strides == [None, None]
    b = OTHER[:7, :4].copy()
    np.testing.assert_allclose(plan(gapped, b), gapped @ b, rtol=1e-12)


def test_view_of_base():
    a = np.arange(60.0).reshape(6, 10)
    base, offset = view_of_base(a[::-2, 3:7])
    assert base.shape == (60,) and offset == 53 and np.shares_memory(base, a)
    assert view_of_base(a.T)[1] == 0
    assert view_of_base(np.broadcast_to(a[2], (4, 10)))[1] == 20
    assert view_of_base(a.reshape(-1).view(np.uint8)[1:81].view(np.float64)) is None  # misaligned: not whole elements
    assert view_of_base(as_strided(a[1:], shape=(6, 10), strides=(-80, 8))) is None  # reaches before a[1:]
    for v in (np.asfortranarray(a)[::2, 1:], permuted(a.reshape(3, 4, 5))[1:, ::-2]):  # dense bases in any order
        base, offset = view_of_base(v)
        assert base.size == v.base.size and np.shares_memory(base, v)
        np.testing.assert_array_equal(as_strided(base[offset:], v.shape, v.strides), v)
    gapped = as_strided(a, shape=(3, 5), strides=(80, 8))  # owns no block: its root has gaps
    assert view_of_base(gapped) is None and view_of_base(gapped[::2]) is None
