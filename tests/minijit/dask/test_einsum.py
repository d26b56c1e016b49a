"""minijit.dask on the threaded scheduler: drawn expressions in random chunkings against numpy
and dask.array, numpy's grammar, tensordot and matmul, the tree reduction, the chunk model, the
errors raised before a graph is built, and a graph that carries no kernel."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")  # installed by the test extra (pyproject.toml)
import dask  # noqa: E402

import minijit.dask as md  # noqa: E402
from minijit.einsum.parse import expand_subscripts  # noqa: E402
from tests.conftest import examples  # noqa: E402
from tests.minijit.dask.helpers import assert_matches, chunk_spec, chunkings, dask_operands  # noqa: E402
from tests.minijit.einsum.strategies import expressions, operands, reference  # noqa: E402
from tests.minijit.einsum.test_grammar import grammar_expressions  # noqa: E402

DTYPES = [np.float32, np.float64]


def threaded(x):
    return x.compute(scheduler="threads")


@settings(max_examples=examples(40), deadline=None)
@given(
    expressions(min_ops=1, max_ops=4, max_indices=5, max_size=9, max_product=3000), st.sampled_from(DTYPES), st.data()
)
def test_drawn_expressions_match_numpy_and_dask(expr, dtype, data):
    subs, shapes = expr
    ops = operands(shapes, dtype, seed=len(subs))
    dops = dask_operands(data.draw, ops)
    chunks, size = data.draw(chunk_spec(subs))
    with dask.config.set({"array.chunk-size": size}):
        got = threaded(md.einsum(subs, *dops, chunks=chunks, split_every=data.draw(st.sampled_from([None, 2, 3]))))
    assert_matches(got, subs, ops, dtype)
    theirs = threaded(da.einsum(subs, *dops))
    _, scale = reference(subs, ops)
    eps = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
    assert np.all(np.abs(got - theirs) <= 2 * eps * (scale + 1)), subs


@settings(max_examples=examples(30), deadline=None)
@given(grammar_expressions(), st.sampled_from(DTYPES), st.data())
def test_numpy_grammar(expr, dtype, data):
    """``...``, diagonals, traces, implicit outputs and size-1 broadcasting, as minijit.einsum."""
    subs, shapes = expr
    ops = operands(shapes, dtype, seed=len(subs))
    dops = dask_operands(data.draw, ops)
    chunks = data.draw(st.sampled_from([None, "input", 1, 2]))
    with dask.config.set({"array.chunk-size": "64B"}):
        got = threaded(md.einsum(subs, *dops, chunks=chunks))
    assert_matches(got, subs, ops, dtype)


def test_sublist_form_optimize_path_and_numpy_operands():
    rng = np.random.default_rng(1)
    A, B, C = rng.random((6, 5)), rng.random((5, 7)), rng.random((7, 3))
    a = da.from_array(A, chunks=2)
    got = threaded(md.einsum(a, [0, 1], B, [1, 2], C, [2, 3], [3, 0], chunks=3))
    np.testing.assert_allclose(got, np.einsum(A, [0, 1], B, [1, 2], C, [2, 3], [3, 0]), rtol=1e-12)
    path = ["einsum_path", (1, 2), (0, 1)]
    for optimize in (path, False, "optimal", "greedy"):
        got = threaded(md.einsum("ij,jk,kl->il", a, B, C, chunks=2, optimize=optimize))
        np.testing.assert_allclose(got, A @ B @ C, rtol=1e-12)


@settings(max_examples=examples(20), deadline=None)
@given(st.data())
def test_tensordot_and_matmul_match_numpy_and_dask(data):
    rng = np.random.default_rng(2)
    nd_a, nd_b = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    k = data.draw(st.integers(1, 6))
    batch = [data.draw(st.integers(1, 3)) for _ in range(max(nd_a, nd_b) - 2)] if max(nd_a, nd_b) > 2 else []
    sa = (*batch[len(batch) - max(nd_a - 2, 0) :], data.draw(st.integers(1, 6)), k)[-nd_a:]
    sb = (*batch[len(batch) - max(nd_b - 2, 0) :], k, data.draw(st.integers(1, 6)))[-nd_b:] if nd_b > 1 else (k,)
    if nd_a == 1:
        sa = (k,)
    A, B = rng.random(sa), rng.random(sb)
    a = da.from_array(A, chunks=data.draw(chunkings(A.shape)))
    b = da.from_array(B, chunks=data.draw(chunkings(B.shape)))
    got = threaded(md.matmul(a, b, chunks=data.draw(st.sampled_from([None, "input", 2]))))
    np.testing.assert_allclose(got, A @ B, rtol=1e-12)
    np.testing.assert_allclose(got, threaded(da.matmul(a, b)), rtol=1e-12)
    axes = ([nd_a - 1], [max(nd_b - 2, 0)])
    got = threaded(md.tensordot(a, b, axes=axes, chunks="input"))
    np.testing.assert_allclose(got, np.tensordot(A, B, axes=axes), rtol=1e-12)
    np.testing.assert_allclose(got, threaded(da.tensordot(a, b, axes=axes)), rtol=1e-12)


def test_tensordot_int_axes():
    rng = np.random.default_rng(3)
    A, B = rng.random((3, 4, 5)), rng.random((4, 5, 2))
    for axes in (0, 2):
        got = threaded(md.tensordot(da.from_array(A, chunks=2), B, axes=axes, chunks=2))
        np.testing.assert_allclose(got, np.tensordot(A, B, axes=axes), rtol=1e-12)


def test_tree_reduction_sums_partials_in_levels():
    """16 blocks of the contracted index, two per node: a tree of four levels, and the right sum."""
    rng = np.random.default_rng(4)
    A, B = rng.random((4, 16)).astype(np.float32), rng.random((16, 3)).astype(np.float32)
    r = md.einsum(
        "ij,jk->ik", da.from_array(A, chunks=(4, 1)), da.from_array(B, chunks=(1, 3)), chunks="input", split_every=2
    )
    levels = [name for name in r.dask.layers if name.startswith("minijit-einsum-sum-partial")]
    assert len(levels) == 3  # 16 -> 8 -> 4 -> 2, then the aggregate
    assert_matches(threaded(r), "ij,jk->ik", [A, B], np.float32)


@pytest.mark.parametrize("one_thread", [False, True])
def test_many_blocks_share_plans_across_threads(one_thread, monkeypatch):
    """64 equal blocks on 4 threads at once share one plan, and the results are right; with
    MINIJIT_NUM_THREADS=1 (as in a `distributed` worker) the calls run truly concurrently."""
    if one_thread:
        monkeypatch.setenv("MINIJIT_NUM_THREADS", "1")
    rng = np.random.default_rng(5)
    n = 72 if one_thread else 64  # new shapes: new plans, built under this thread setting
    A, B = rng.random((n, 96)).astype(np.float32), rng.random((96, n)).astype(np.float32)
    r = md.einsum("ij,jk->ik", A, B, chunks={"i": n // 8, "k": n // 8, "j": 48})
    got = r.compute(scheduler="threads", num_workers=4)
    assert_matches(got, "ij,jk->ik", [A, B], np.float32)


def test_matmul_chunks_name_i_j_k():
    """matmul's ``chunks`` dict names the contracted index ``j``: 4 blocks of it, 4 partials summed."""
    rng = np.random.default_rng(8)
    A, B = rng.random((6, 8)), rng.random((8, 5))
    r = md.matmul(A, B, chunks={"j": 2}, split_every=4)
    steps = [n for n in r.dask.layers if n.startswith("minijit-einsum-") and "-sum" not in n]
    assert len(steps) == 1, list(r.dask.layers)
    step = steps[0]
    assert len(r.dask.layers[step]) == 4  # tasks of the blockwise step
    np.testing.assert_allclose(threaded(r), A @ B, rtol=1e-12)


def test_zero_size_index_gives_zeros():
    got = threaded(md.einsum("ij,jk->ik", da.ones((3, 0)), da.ones((0, 2))))
    np.testing.assert_array_equal(got, np.zeros((3, 2)))
    got = threaded(md.einsum("ij,jk->ik", da.ones((0, 4)), da.ones((4, 2)), chunks=2))
    assert got.shape == (0, 2)


def test_graph_carries_subscripts_and_blocks_no_kernels():
    """The graph pickles with plain pickle (no closures), names only minijit.dask's functions, and
    holds no plan or kernel even after this process has built them."""
    a = da.ones((8, 8), chunks=4, dtype=np.float32)
    r = md.einsum("ij,jk->ik", a, a, chunks=4)
    threaded(r)  # plans now exist in this process
    blob = pickle.dumps(dict(r.__dask_graph__()))
    assert b"_block_einsum" in blob and b"ij,jk->ik" in blob
    for name in (b"EinsumPlan", b"TensorOperation", b"Kernel", b"minijit.runtime"):
        assert name not in blob


# ---------------------------------------------------------------------------------------------
# the chunk model
# ---------------------------------------------------------------------------------------------
@settings(max_examples=examples(40), deadline=None)
@given(expressions(min_ops=1, max_ops=2, max_indices=5, max_size=4000, max_product=10**13, broadcast=False),
       st.integers(1, 1 << 24), st.integers(1, 64), st.sampled_from([4, 8]))  # fmt: skip
def test_model_blocks_stay_within_block_bytes(expr, block_bytes, threads, itemsize):
    subs, shapes = expr
    blocks = md.block_sizes(subs, *shapes, itemsize=itemsize, block_bytes=block_bytes, threads=threads)
    inputs, output = expand_subscripts(subs, tuple(len(s) for s in shapes))
    for sub in (*inputs, output):
        assert math.prod(blocks[c] for c in sub) * itemsize <= max(block_bytes, itemsize), (sub, blocks)


def test_model_splits_outputs_for_threads_and_keeps_the_contraction_whole():
    shapes = (4096, 4096), (4096, 4096)
    one = md.block_sizes("ij,jk->ik", *shapes, block_bytes=1 << 40, threads=1)
    assert one == {"i": 4096, "j": 4096, "k": 4096}  # one thread: splitting only adds traffic
    eight = md.block_sizes("ij,jk->ik", *shapes, block_bytes=1 << 40, threads=8)
    assert (4096 // eight["i"]) * (4096 // eight["k"]) >= 8 and eight["j"] == 4096


# ---------------------------------------------------------------------------------------------
# errors, before any graph is built
# ---------------------------------------------------------------------------------------------
def test_errors_name_the_operand_or_index():
    a = da.ones((4, 5), chunks=2)
    with pytest.raises(ValueError, match="operand 1"):
        md.einsum("ij,jk->ik", a, da.ones((6, 3)))
    with pytest.raises(TypeError, match="operand 1 has dtype datetime64"):  # numpy's einsum refuses it too
        md.einsum("ij,jk->ik", a, da.zeros((5, 3), dtype="datetime64[s]"))
    with pytest.raises(ValueError, match="invalid character"):
        md.einsum("ij,j2->i", a, a)
    with pytest.raises(ValueError, match="index 'x'"):
        md.einsum("ij,jk->ik", a, da.ones((5, 3)), chunks={"x": 2})
    with pytest.raises(ValueError, match=r"chunks\['j'\]"):
        md.einsum("ij,jk->ik", a, da.ones((5, 3)), chunks={"j": (2, 2)})
    with pytest.raises(ValueError, match="chunks must be"):
        md.einsum("ij,jk->ik", a, da.ones((5, 3)), chunks="auto")
    with pytest.raises(ValueError, match="positive"):
        md.einsum("ij,jk->ik", a, da.ones((5, 3)), chunks=0)
    with pytest.raises(ValueError, match="split_every"):
        md.einsum("ij,jk->ik", a, da.ones((5, 3)), split_every=1)
    unknown = a[a[:, 0] > 0]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        md.einsum("ij->i", unknown)
    with pytest.raises(ValueError, match="operand 0 axis 1 has size 5"):
        md.tensordot(a, da.ones((4, 3)), axes=([1], [0]))
    with pytest.raises(ValueError, match="operand 1 is 0-d"):
        md.matmul(a, da.ones(()))
