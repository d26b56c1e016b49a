"""Hypothesis strategies for sparse tensors and sparse einsum expressions (issue 38).

Patterns cover the corner cases the generated loops must survive: all zero, one non-zero,
empty fibres (whole rows/slices without entries), and dense-ish blocks.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from minijit.sparseauto.tensor import SparseTensor

PATTERNS = ("random", "zero", "one", "empty_fibres")


@st.composite
def patterns(draw, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean mask of ``shape`` drawn from `PATTERNS`."""
    kind = draw(st.sampled_from(PATTERNS))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    mask = np.zeros(shape, bool)
    if kind == "zero" or size == 0:
        return mask
    if kind == "one":
        mask.flat[rng.integers(size)] = True
        return mask
    mask = rng.random(shape) < draw(st.sampled_from((0.1, 0.3, 0.7)))
    if kind == "empty_fibres":  # clear every other slice of the first mode
        mask[::2] = False
    return mask


@st.composite
def sparse_tensors(draw, shape: tuple[int, ...], dtype: object = np.float64, levels=None, mode_order=None):
    """``(SparseTensor, dense array)`` of ``shape`` with drawn levels and mode order when not given."""
    nd = len(shape)
    if levels is None:
        levels = tuple(draw(st.sampled_from(("dense", "compressed"))) for _ in range(nd))
    if mode_order is None:
        mode_order = tuple(draw(st.permutations(range(nd))))
    mask = draw(patterns(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    dense = np.where(mask, rng.uniform(-1, 1, shape), 0).astype(dtype)
    return SparseTensor.from_dense(dense, levels, mode_order), dense


shapes = st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple)


@st.composite
def expressions(draw, max_indices: int = 5, max_operands: int = 3):
    """``(subscripts, operands, dense operands)``: 2..max_operands operands over up to
    ``max_indices`` indices, one or two of them sparse (levels and mode orders drawn, kept
    compatible with one global loop order), the output dense or sampling a sparse operand."""
    n_idx = draw(st.integers(2, max_indices))
    letters = "ijklm"[:n_idx]
    extents = {i: draw(st.integers(1, 6)) for i in letters}
    n_ops = draw(st.integers(2, max_operands))
    terms = [tuple(draw(st.permutations(letters))[: draw(st.integers(1, min(3, n_idx)))]) for _ in range(n_ops)]
    missing = [i for i in letters if not any(i in t for t in terms)]
    if missing:
        terms[-1] = tuple(dict.fromkeys(terms[-1] + tuple(missing)))
    n_sparse = draw(st.integers(1, 2))
    sparse_at = draw(st.permutations(range(n_ops)))[:n_sparse]
    rank = {i: r for r, i in enumerate(draw(st.permutations(letters)))}  # one order all sparse levels follow
    dtype = draw(st.sampled_from((np.float32, np.float64)))
    ops, dense = [], []
    for k, term in enumerate(terms):
        shape = tuple(extents[i] for i in term)
        if k in sparse_at:
            order = tuple(sorted(range(len(term)), key=lambda m, term=term: rank[term[m]]))
            t, d = draw(sparse_tensors(shape, dtype=dtype, mode_order=order))
            ops.append(t)
            dense.append(d)
        else:
            seed = draw(st.integers(0, 2**31 - 1))
            d = np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)
            ops.append(d)
            dense.append(d)
    if draw(st.booleans()) and n_sparse:
        out = "".join(draw(st.permutations(terms[sparse_at[0]])))  # samples a sparse operand
    else:
        out = "".join(draw(st.permutations(letters))[: draw(st.integers(0, min(3, n_idx)))])
    subscripts = ",".join("".join(t) for t in terms) + "->" + out
    return subscripts, ops, dense
