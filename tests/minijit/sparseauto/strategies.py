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
