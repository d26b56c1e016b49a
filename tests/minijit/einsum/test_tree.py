"""The lab's bracket notation: parsing, plans from trees, layouts that need permute nodes."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from minijit.einsum import parse_tree

LAB = "[[8,4],[7,3,8]->[7,3,4]],[[[2,6,7],[1,5,6]->[1,2,5,7]],[0,5]->[0,1,2,7]]->[0,1,2,3,4]"
LAB_SIZES = [100, 72, 128, 128, 3, 71, 305, 32, 3]


def test_parse_lab_tree():
    root = parse_tree(LAB)
    assert root.ids == (0, 1, 2, 3, 4)
    assert [leaf.ids for leaf in root.leaves()] == [(8, 4), (7, 3, 8), (2, 6, 7), (1, 5, 6), (0, 5)]
    left, right = root.children
    assert left.ids == (7, 3, 4) and right.ids == (0, 1, 2, 7)
    assert right.children[0].ids == (1, 2, 5, 7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lab_tree_reduced_sizes_matches_numpy(dtype):
    sizes = [max(1, s // 16) if s > 8 else s for s in LAB_SIZES]  # 6,4,8,8,3,4,19,2,3
    plan = minijit.EinsumPlan.from_tree(LAB, sizes, dtype=dtype)
    assert plan.shapes == [(sizes[8], sizes[4]), (sizes[7], sizes[3], sizes[8]), (sizes[2], sizes[6], sizes[7]),
                           (sizes[1], sizes[5], sizes[6]), (sizes[0], sizes[5])]  # fmt: skip
    rng = np.random.default_rng(0)
    ops = [rng.uniform(-1, 1, s).astype(dtype) for s in plan.shapes]
    ref = np.einsum(plan.subscripts, *[o.astype(np.float64) for o in ops])
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for _ in range(2):  # the plan runs again on the same intermediates
        got = plan(*ops)
        assert got.shape == tuple(sizes[:5])
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    text = str(plan)
    assert text.count("contract") == 4 and "flops" in text and "TensorConfig" in text


def test_tree_with_layouts_needing_permutes_and_reductions():
    # result's unit-stride index is a batch index (2), a child keeps an index nobody else has (3)
    tree = "[[0,1,2],[2,1,3]->[0,1,2]],[[2,4]]->[4,0,2]"
    sizes = [5, 4, 6, 3, 7]
    plan = minijit.EinsumPlan.from_tree(tree, sizes, dtype=np.float64)
    rng = np.random.default_rng(1)
    ops = [rng.random(s) for s in plan.shapes]
    np.testing.assert_allclose(plan(*ops), np.einsum(plan.subscripts, *ops), rtol=1e-12)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[0,1],[1,2]", "->"),
        ("[0,1],[1,2]->[0,2", "expected"),
        ("[0,0],[0,1]->[1]", "repeats"),
        ("[0,1],[1,2]->[0,2]]", "trailing"),
        ("[0,x]", "unexpected"),
    ],
)
def test_tree_parse_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_tree(text)


def test_tree_needs_a_size_per_id():
    with pytest.raises(ValueError, match="size"):
        minijit.EinsumPlan.from_tree("[0,1],[1,2]->[0,2]", [3, 4])


def test_tree_with_a_unary_node():
    # [0,1,2]->[2,0] sums dim 1 out and permutes; the result meets [2,3]
    tree = "[[0,1,2]->[2,0]],[2,3]->[0,3]"
    root = parse_tree(tree)
    assert root.children[0].ids == (2, 0) and root.children[0].children[0].ids == (0, 1, 2)
    plan = minijit.EinsumPlan.from_tree(tree, [4, 5, 6, 7], dtype=np.float64)
    assert plan.subscripts == "abc,cd->ad"
    rng = np.random.default_rng(2)
    ops = [rng.random(s) for s in plan.shapes]
    np.testing.assert_allclose(plan(*ops), np.einsum("abc,cd->ad", *ops), rtol=1e-12)
