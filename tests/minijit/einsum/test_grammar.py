"""numpy's whole einsum grammar in minijit.einsum, contract_path and EinsumPlan, against np.einsum:
``...`` with broadcasting, repeated indices (diagonals and traces), implicit outputs, the sublist
form, every ``optimize`` form numpy takes, and numpy's refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.einsum.grammar import normalize_optimize
from tests.conftest import examples
from tests.minijit.einsum.strategies import assert_close, operands

DTYPES = [np.float32, np.float64]
#: letters drawn for the expressions; an upper-case one checks the implicit output's ASCII order
POOL = "abcdB"


@st.composite
def grammar_expressions(draw):
    """``(subscripts, shapes)``, valid for np.einsum: 1-3 operands whose subscripts may repeat a
    letter (diagonals, traces) and hold ``...`` anywhere, over 0-2 dims right-aligned across the
    operands; named and ``...`` dims occasionally of size 1 (broadcast); implicit or explicit
    output (``...`` in it wherever numpy needs it)."""
    sizes = {c: draw(st.integers(2, 4)) for c in POOL}
    under = draw(st.one_of(st.none(), st.integers(0, 2)))  # None: no '...' anywhere
    under_sizes = [draw(st.integers(2, 3)) for _ in range(under or 0)]
    inputs, shapes, ellipsis = [], [], False
    for _ in range(draw(st.integers(1, 3))):
        sub = draw(st.lists(st.sampled_from(POOL), max_size=3))  # letters may repeat
        ones = set(draw(st.lists(st.sampled_from(sub), max_size=1))) if sub and draw(st.booleans()) else set()
        shape = [1 if c in ones else sizes[c] for c in sub]
        text = "".join(sub)
        if under is not None and draw(st.booleans()):
            k = draw(st.integers(0, under))  # this operand's dims under '...' (the last k)
            dims = [1 if draw(st.integers(0, 3)) == 0 else n for n in under_sizes[under - k :]]
            pos = draw(st.integers(0, len(sub)))
            text = text[:pos] + "..." + text[pos:]
            shape = shape[:pos] + dims + shape[pos:]
            ellipsis = True
        inputs.append(text)
        shapes.append(tuple(shape))
    if draw(st.booleans()):
        return ",".join(inputs), shapes  # implicit output
    used = sorted({c for sub in inputs for c in sub if c != "."})
    out = draw(st.lists(st.sampled_from(used), unique=True, max_size=4)) if used else []
    if ellipsis or draw(st.integers(0, 4)) == 0:  # '...' in the output: needed, or of zero dims
        out.insert(draw(st.integers(0, len(out))), "...")
    return ",".join(inputs) + "->" + "".join(out), shapes


@settings(max_examples=examples(150), deadline=None)
@given(grammar_expressions(), st.sampled_from(DTYPES))
def test_drawn_grammar_matches_numpy(expr, dtype):
    subs, shapes = expr
    ops = operands(shapes, dtype, seed=len(subs))
    got = minijit.einsum(subs, *ops)
    assert_close(got, subs, ops, dtype)


def _mutate(draw, subs: str, shapes: list[tuple[int, ...]]):
    """One change to a valid expression that numpy (mostly) refuses."""
    lhs, arrow, rhs = subs.partition("->")
    inputs = lhs.split(",")
    kind = draw(st.sampled_from(["out_unknown", "out_repeat", "operands", "ndim", "char", "size", "out_ellipsis"]))
    if kind == "out_unknown":
        return f"{lhs}->{rhs}z", shapes
    if kind == "out_repeat":
        letters = [c for c in lhs if c.isalpha()] or ["z"]
        c = draw(st.sampled_from(letters))
        return f"{lhs}->{rhs}{c}{c}", shapes
    if kind == "operands":
        if draw(st.booleans()) or len(shapes) == 1:
            return subs, [*shapes, (2,)]
        return subs, shapes[:-1]
    if kind == "ndim":
        i = draw(st.integers(0, len(shapes) - 1))
        return subs, [(*s, 2) if k == i else s for k, s in enumerate(shapes)]
    if kind == "char":
        bad = draw(st.sampled_from(["1", "#", ".", "..", "-", ">", "....", "_"]))
        i = draw(st.integers(0, len(inputs) - 1))
        inputs[i] += bad
        return ",".join(inputs) + arrow + rhs, shapes
    if kind == "size":
        i = draw(st.integers(0, len(shapes) - 1))
        if not shapes[i]:
            return subs, [*shapes[:i], (3,), *shapes[i + 1 :]]
        ax = draw(st.integers(0, len(shapes[i]) - 1))
        shape = list(shapes[i])
        shape[ax] += 1
        return subs, [tuple(shape) if k == i else s for k, s in enumerate(shapes)]
    # out_ellipsis: an explicit output without '...'
    return f"{lhs}->{rhs.replace('...', '')}", shapes


@settings(max_examples=examples(150), deadline=None)
@given(grammar_expressions(), st.data())
def test_numpy_refusals_are_value_errors(expr, data):
    subs, shapes = _mutate(data.draw, *expr)
    ops = operands(shapes, np.float64)
    try:
        ref = np.einsum(subs, *ops)
    except ValueError:
        with pytest.raises(ValueError, match="einsum"):
            minijit.einsum(subs, *ops)
        return
    got = minijit.einsum(subs, *ops)  # the change left a valid expression: the same result
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


EXAMPLES = [
    ("...ij,...jk->...ik", [(3, 1, 2, 3), (4, 3, 5)]),  # batch shapes (3, 1) and (4,)
    ("...ij,...jk", [(3, 1, 2, 3), (4, 3, 5)]),  # implicit: '...' first
    ("...ij,...j->...i", [(2, 3, 4, 5), (5,)]),  # different numbers of '...' dims
    ("...ij,...jk->...ik", [(2, 3), (3, 4)]),  # '...' of zero dims
    ("ij->...ij", [(3, 4)]),  # '...' only in the output
    ("i...,...->...i", [(3, 2, 1), (4,)]),  # '...' first, last and alone
    ("...,...", [(2, 3), (3,)]),
    ("...", [()]),
    ("ii->i", [(4, 4)]),
    ("ii->", [(4, 4)]),
    ("ii", [(4, 4)]),  # implicit: a trace (the index repeats)
    ("iij->j", [(3, 3, 5)]),
    ("iij", [(3, 3, 5)]),
    ("ij,jj->i", [(3, 4), (4, 4)]),
    ("ij,jj", [(3, 4), (4, 4)]),
    ("iii", [(3, 3, 3)]),
    ("iii->i", [(3, 3, 3)]),
    ("ii,jj->ij", [(3, 3), (2, 2)]),  # repeated in several operands
    ("ii,ii->i", [(3, 3), (3, 3)]),
    ("iji,jkj->ik", [(3, 4, 3), (4, 2, 4)]),
    ("ii,i->i", [(1, 1), (3,)]),  # a size-1 diagonal broadcast
    ("...ii->...i", [(2, 3, 3)]),
    ("i...i->...", [(3, 2, 3)]),
    ("Ba", [(2, 3)]),  # implicit: ASCII order, upper case first
    ("aB", [(2, 3)]),
    ("ij,jk", [(2, 1), (3, 4)]),  # size-1 broadcasting of a named index
    (",ij->ij", [(), (2, 3)]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("subs", "shapes"), EXAMPLES)
def test_examples_match_numpy(subs, shapes, dtype):
    ops = operands(shapes, dtype, seed=3)
    assert_close(minijit.einsum(subs, *ops), subs, ops, dtype)


def test_diagonals_of_views_and_out():
    rng = np.random.default_rng(4)
    a = rng.random((5, 3, 5))
    t = a.transpose(2, 1, 0)  # a strided view: its diagonal is a view of a view
    np.testing.assert_allclose(minijit.einsum("iji->j", t), np.einsum("iji->j", t), rtol=1e-12)
    np.testing.assert_allclose(minijit.einsum("iij->ji", a[:, ::-1].swapaxes(1, 2)[:3, :3]),
                               np.einsum("iij->ji", a[:, ::-1].swapaxes(1, 2)[:3, :3]), rtol=1e-12)  # fmt: skip
    out = np.empty((2, 3))
    b, c = rng.random((2, 3, 3)), rng.random((3, 3))
    assert minijit.einsum("...ii,ij->...j", b, c, out=out) is out
    np.testing.assert_allclose(out, np.einsum("...ii,ij->...j", b, c), rtol=1e-12)
    np.testing.assert_allclose(minijit.einsum("ii->i", [[1.0, 2.0], [3.0, 4.0]]), [1.0, 4.0])  # a list


def test_sublist_form_matches_numpy():
    rng = np.random.default_rng(5)
    a, b = rng.random((2, 3, 3)), rng.random((3, 4))
    for args in [
        (a, [Ellipsis, 0, 1], b, [1, 30], [Ellipsis, 0, 30]),
        (a, [0, 1, 1], b, [1, 2]),
        (a, [0, 40, 40], [0]),
    ]:
        np.testing.assert_allclose(minijit.einsum(*args), np.einsum(*args), rtol=1e-12)
    with pytest.raises(ValueError, match="valid range"):
        minijit.einsum(a, [0, 1, 52])
    with pytest.raises(TypeError, match="int or Ellipsis"):
        minijit.einsum(a, [0, 1, "x"])


PATH_CASES = [
    ("ij,jk,kl->il", [(4, 6), (6, 3), (3, 5)]),
    ("ii,ij,jk->k", [(3, 3), (3, 4), (4, 5)]),
    ("...ij,...jk,kl->...il", [(2, 4, 6), (6, 3), (3, 5)]),
    ("ab,bc,cd,de->ae", [(3, 4), (4, 5), (5, 2), (2, 3)]),
]


@pytest.mark.parametrize(("subs", "shapes"), PATH_CASES)
def test_numpy_paths_are_taken(subs, shapes):
    ops = operands(shapes, np.float64, seed=6)
    ref = np.einsum(subs, *ops)
    n = len(shapes)
    paths = [
        np.einsum_path(subs, *ops, optimize="greedy")[0],
        np.einsum_path(subs, *ops, optimize="optimal")[0],
        ["einsum_path", tuple(range(n))],  # one step over all operands
        ["einsum_path", (0,), *[(0, 1)] * (n - 1)],  # a one-operand step first
        [(0, 1)] * (n - 1),  # the bare steps
        tuple((0, 1) for _ in range(n - 1)),
    ]
    for opt in [*paths, True, False, None, "greedy", "optimal", ("optimal", 1e6), np.bool_(True)]:
        got = minijit.einsum(subs, *ops, optimize=opt)
        np.testing.assert_allclose(got, ref, rtol=1e-12, err_msg=str(opt))
    for opt in paths:  # contract_path takes them too; its pairwise path runs on numpy
        path, info = minijit.contract_path(subs, *shapes, optimize=opt)
        assert isinstance(info, str)
        np.testing.assert_allclose(np.einsum(subs, *ops, optimize=["einsum_path", *path]), ref, rtol=1e-12)
    path, _ = minijit.contract_path(subs, *ops)  # arrays as numpy's einsum_path takes them
    np.testing.assert_allclose(np.einsum(subs, *ops, optimize=["einsum_path", *path]), ref, rtol=1e-12)


@pytest.mark.parametrize(
    ("opt", "match"),
    [
        (["einsum_path", (0, 3)], "different operands"),
        (["einsum_path", (0, 0), (0, 1)], "different operands"),
        (["einsum_path", (0, 1)], "leaves 2"),
        (["einsum_path"], "leaves 3"),
        ([(0, 1), (0, 1), (0, 1)], "different operands"),
        (["einsum_path", (-1, 0), (0, 1)], "different operands"),
        (["einsum_path", ("a", 0), (0, 1)], "positions"),
        (["einsum_path", 0], "positions"),
        (["path", (0, 1), (0, 1)], "'einsum_path'"),
        ("foo", "optimize"),
        (2.5, "optimize"),
        (("foo", 10), "optimize"),
    ],
)
def test_invalid_optimize_refused(opt, match):
    shapes = [(2, 3), (3, 4), (4, 5)]
    ops = operands(shapes, np.float64)
    with pytest.raises(ValueError, match=match):
        minijit.einsum("ij,jk,kl->il", *ops, optimize=opt)
    with pytest.raises(ValueError, match=match):
        minijit.contract_path("ij,jk,kl->il", *shapes, optimize=opt)


def test_normalize_optimize_pairs():
    assert normalize_optimize(["einsum_path", (0, 2), (0, 1)], 3) == [(0, 2), (0, 1)]
    # (0, 1, 2) over 4 operands: 0 and 1, then their result (last) with the old 2 (now 0)
    assert normalize_optimize([(1, 0, 2), (0, 1)], 4) == [(0, 1), (0, 2), (0, 1)]
    # a one-operand step moves it last in numpy's list ([1, 2, 0]), the plan's list stays [0, 1, 2]:
    # numpy's (1, 2) names operands 2 and 0
    assert normalize_optimize([(0,), (1, 2), (0, 1)], 3) == [(0, 2), (0, 1)]
    assert normalize_optimize(["einsum_path", (0,)], 1) == []
    assert normalize_optimize(None, 2) is False


def test_plan_from_shapes_takes_ellipsis_not_diagonals():
    shapes = [(3, 1, 2, 3), (4, 3, 5)]
    plan = minijit.EinsumPlan("...ij,...jk->...ik", *shapes, dtype="float64")
    ops = operands(shapes, np.float64, seed=7)
    assert plan.out_shape == (3, 4, 2, 5)
    np.testing.assert_allclose(plan(*ops), np.einsum("...ij,...jk->...ik", *ops), rtol=1e-12)
    with pytest.raises(ValueError, match=r"repeats index 'i' \(a diagonal\).*minijit\.einsum"):
        minijit.EinsumPlan("ii->i", (3, 3))


@pytest.mark.parametrize(
    ("subs", "shapes", "match"),
    [
        ("..ij", [(2, 3)], "ellipsis"),
        ("...i...", [(2, 3)], "ellipsis"),
        ("ij->...i...", [(2, 3)], "ellipsis"),
        ("...ij,jk->ik", [(2, 3, 4), (4, 5)], "no '...'"),
        ("i...->i", [(1, 3)], "no '...'"),  # even over size-1 dims, as numpy
        ("ii->i", [(3, 1)], "repeated index 'i'"),
        ("ii", [(2, 3)], "repeated index 'i'"),
        ("ij->ii", [(2, 2)], "repeat"),
        ("ii->ii", [(2, 2)], "repeat"),
        ("ij->k", [(2, 2)], "'k'"),
        ("ij->i", [(2, 2, 2)], "operand 0 has 3 dims"),
        ("ijk...->i", [(2, 2)], "operand 0 has 2 dims"),
        ("ij,jk->ik", [(2, 3)], "operands"),
        ("ij", [(2, 3), (3, 4)], "operands"),
        ("ij,jk", [(2, 3), (4, 5)], "size"),
        ("ij-j", [(2, 3)], "'->'"),
        ("ij>j", [(2, 3)], "'->'"),
        ("ij->i->j", [(2, 3)], "'->'"),
        ("i1", [(2, 3)], "character"),
        ("", [], "operands"),
    ],
)
def test_bad_subscripts_refused_as_numpy_does(subs, shapes, match):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(subs, *ops)  # the oracle refuses it too
    with pytest.raises(ValueError, match=match):
        minijit.einsum(subs, *ops)
    with pytest.raises(ValueError, match=match):
        minijit.contract_path(subs, *shapes)


def test_grammar_on_the_cuda_target(cuda_backend):
    rng = np.random.default_rng(8)
    for subs, shapes in [("...ij,...jk->...ik", [(2, 8, 4), (4, 8)]), ("ii,ij->j", [(8, 8), (8, 16)])]:
        ops = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
        got = minijit.einsum(subs, *ops, target="cuda", driver=cuda_backend.driver)
        ref = np.einsum(subs, *[o.astype(np.float64) for o in ops])
        scale = np.einsum(subs, *[np.abs(o.astype(np.float64)) for o in ops])
        assert got.shape == ref.shape
        assert (np.abs(got - ref) <= 4e-3 * (scale + 1e-6)).all(), subs  # tf32, as test_cuda
