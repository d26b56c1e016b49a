"""Drawn dask operands for the minijit.dask tests: numpy operands in random chunkings, the
``chunks=`` mode and dask's block-size setting, and the comparison with numpy and dask."""

from __future__ import annotations

import dask.array as da
import numpy as np
from hypothesis import strategies as st

from tests.minijit.einsum.strategies import reference

#: ``chunks=`` forms drawn: the model (None), the operands' own chunks, one size, a dict
CHUNK_MODES = ("model", "input", "int", "dict")


@st.composite
def chunkings(draw, shape: tuple[int, ...], max_cuts: int = 3) -> tuple[tuple[int, ...], ...]:
    """Random chunks for ``shape``: each axis cut at up to ``max_cuts`` random places."""
    out = []
    for n in shape:
        cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=max_cuts))) if n > 1 else []
        edges = [0, *cuts, n]
        out.append(tuple(b - a for a, b in zip(edges, edges[1:], strict=False)))
    return tuple(out)


@st.composite
def chunk_spec(draw, subscripts: str, min_block: int = 1):
    """A ``chunks=`` argument for ``subscripts`` (block sizes from ``min_block``) and the dask
    ``array.chunk-size`` to run under (a small one makes the model split small operands)."""
    mode = draw(st.sampled_from(CHUNK_MODES))
    letters = sorted({c for c in subscripts.split("->")[0] if c.isalpha()})
    size = draw(st.sampled_from(["128MiB", "256B", "2KiB"]))
    if mode == "model":
        return None, size
    if mode == "input":
        return "input", size
    if mode == "int":
        return draw(st.integers(min_block, 8)), size
    picked = draw(st.lists(st.sampled_from(letters), unique=True, max_size=len(letters))) if letters else []
    return {c: draw(st.integers(min_block, 6)) for c in picked}, size


def dask_operands(draw, ops: list[np.ndarray], max_cuts: int = 3) -> list[da.Array]:
    return [da.from_array(x, chunks=draw(chunkings(x.shape, max_cuts))) for x in ops]


def assert_matches(got: np.ndarray, subs: str, ops: list[np.ndarray], dtype) -> None:
    """``got`` against np.einsum in float64, to the rounding error of ``dtype``."""
    ref, scale = reference(subs, ops)
    assert got.shape == ref.shape, (subs, got.shape, ref.shape)
    assert got.dtype == np.dtype(dtype), (subs, got.dtype)
    eps = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
    err = np.abs(got.astype(np.float64) - ref)
    assert not (err > eps * (scale + 1)).any(), f"{subs}: max error {err.max()} at scale {scale.max()}"
