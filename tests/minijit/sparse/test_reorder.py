"""Row reordering for the row-window strategy: the permutation, its tile counts against the plan,
recovery of shuffled row blocks, the reordered plan (row table) through the numpy model and
through ptx.sim against scipy in the caller's row order, the choice with reordering as a third
candidate, ptxas for the row-table kernel, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ptx
from minijit.bench.spmm import fem_blocks
from minijit.sparse import SpMM, as_csr, make_plan
from minijit.sparse import reorder as R
from minijit.sparse import window_kernel as W
from minijit.sparse import window_plan as WP
from minijit.sparse.precision import precision
from ptx import toolchain
from tests.minijit.sparse.helpers import csr_with_lengths, skewed
from tests.minijit.sparse.test_tca import _skewed_cases


def _ref(s, prec, b):
    return sp.csr_matrix((prec.quantize(s.data), s.indices, s.indptr), shape=s.shape) @ prec.quantize(b)


def _shuffled_blocks(groups: int, cols: int, k: int, empty: int, rng, full_rows: bool):
    """``groups`` blocks of 16 rows; block g uses its own ``cols`` columns (disjoint, scattered over
    0..k-1). ``full_rows``: every row uses all of them; else row 0 of the block does and the
    others a random subset of more than half (so any two rows of a block share a column). Plus
    ``empty`` empty rows; then the rows are shuffled. Returns (S, block of each row, -1 empty)."""
    col_sets = rng.permutation(k)[: groups * cols].reshape(groups, cols)
    rows, block = [], []
    for g in range(groups):
        for r in range(16):
            n = cols if full_rows or r == 0 else int(rng.integers(cols // 2 + 1, cols + 1))
            rows.append(np.sort(rng.choice(col_sets[g], n, replace=False)))
            block.append(g)
    rows += [np.zeros(0, np.int64)] * empty
    block += [-1] * empty
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    block = np.asarray(block)[order]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
    indices = np.concatenate(rows).astype(np.int32)
    data = rng.standard_normal(indices.size).astype(np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(len(rows), k)), block


def _cases(rng):
    return [
        *_skewed_cases(rng),
        ("skewed", skewed(70, 90, 0.1, rng)),
        ("fem", fem_blocks(2, 3, rng)),
        ("blocks", _shuffled_blocks(3, 12, 100, 9, rng, full_rows=False)[0]),
    ]


def test_order_is_a_permutation_with_empty_rows_last_and_counts_match_the_plan():
    rng = np.random.default_rng(1)
    for name, s in _cases(rng):
        c = as_csr(s)
        order = R.reorder_rows(c.indptr, c.indices)
        m = c.shape[0]
        np.testing.assert_array_equal(np.sort(order.perm), np.arange(m))
        np.testing.assert_array_equal(order.perm[order.inverse], np.arange(m))
        lengths = np.diff(c.indptr.astype(np.int64))[order.perm]
        busy = int((lengths > 0).sum())
        assert (lengths[:busy] > 0).all() and (lengths[busy:] == 0).all(), name
        # tile and mma counts are those of the plans, before and after
        plain = WP.make_window_plan(c.indptr, c.indices, 8)
        reordered = WP.make_window_plan(c.indptr, c.indices, 8, row_order=order.perm)
        assert order.tiles_before == plain.num_blocks and order.mmas_before == WP.window_mmas(plain), name
        assert order.tiles_after == reordered.num_blocks and order.mmas_after == WP.window_mmas(reordered), name
        assert order.tiles_after <= order.tiles_before, name  # "compact" keeps the given order's windows or better
        assert order.nnz == c.nnz
        if order.tiles_after:
            assert order.density_after == pytest.approx(c.nnz / (128 * order.tiles_after))


@pytest.mark.parametrize("full_rows", [True, False])
def test_reordering_recovers_shuffled_blocks(full_rows):
    """After reordering every window is one block: ceil(cols / 8) tiles per block. Before, a
    window of the shuffled rows holds rows of several blocks (with full rows: ceil(cols * blocks
    in the window / 8) tiles)."""
    rng = np.random.default_rng(7 + full_rows)
    groups, cols, empty = 6, 20, 21
    s, block = _shuffled_blocks(groups, cols, 400, empty, rng, full_rows)
    c = as_csr(s)
    order = R.reorder_rows(c.indptr, c.indices)
    want_after = groups * -(-cols // 8)
    assert order.tiles_after == want_after
    windows = [set(block[w : w + 16].tolist()) - {-1} for w in range(0, s.shape[0], 16)]
    if full_rows:
        assert order.tiles_before == sum(-(-cols * len(g) // 8) for g in windows)
    assert order.tiles_before > want_after  # at least one window mixes blocks (rows are shuffled)
    assert max(len(g) for g in windows) > 1
    # the windows after are the blocks, in some order, and the empty rows come last
    blocks_after = block[order.perm]
    for w in range(groups):
        assert len(set(blocks_after[16 * w : 16 * w + 16].tolist())) == 1
    assert (blocks_after[groups * 16 :] == -1).all()
    assert order.gain == pytest.approx(1 - want_after / order.tiles_before)


@pytest.mark.parametrize("target_nnz", [8, 256])
def test_reordered_plan_model_is_s_times_b_in_the_callers_row_order(target_nnz):
    """The numpy model of the reordered plan (row table for the C stores and the second pass)
    equals scipy's product row for row, for the reorder_rows order and a random permutation."""
    rng = np.random.default_rng(target_nnz)
    prec = precision("fp16")
    for name, s in _cases(rng):
        c = as_csr(s)
        b = rng.standard_normal((s.shape[1], 11)).astype(np.float32)
        ref = _ref(s, prec, b)
        for perm in (R.reorder_rows(c.indptr, c.indices).perm, rng.permutation(s.shape[0])):
            wp = WP.make_window_plan(c.indptr, c.indices, 11, target_nnz, row_order=perm)
            assert wp.reordered
            np.testing.assert_array_equal(wp.rows, perm)
            got = WP.model(wp, c.data, b, prec.quantize)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)


def test_choose_strategy_with_reordering_as_a_third_candidate():
    rng = np.random.default_rng(3)
    s, _ = _shuffled_blocks(6, 24, 3000, 0, rng, full_rows=True)
    c = as_csr(s)
    plan = make_plan(c.indptr, 64)
    order = R.reorder_rows(c.indptr, c.indices)
    wp = WP.make_window_plan(c.indptr, c.indices, 64)
    wpr = WP.make_window_plan(c.indptr, c.indices, 64, row_order=order.perm)
    assert WP.window_mmas(wpr) < WP.window_mmas(wp) < WP.tca_mmas(plan, c.indptr)
    assert WP.choose_strategy(plan, c.indptr, wp, wpr) == "window_reordered"
    assert WP.choose_strategy(plan, c.indptr, wp) == "window"
    # a saving below min_gain keeps the given order
    assert WP.choose_strategy(plan, c.indptr, wp, wpr, min_gain=min(0.99, order.gain + 0.01)) == "window"
    assert WP.pick_window(wp, wpr, min_gain=order.gain) is wpr
    # long scattered rows stay on seed 003 with or without reordering
    long_rows = as_csr(csr_with_lengths([200] * 16, 50000, rng))
    o2 = R.reorder_rows(long_rows.indptr, long_rows.indices)
    args = (make_plan(long_rows.indptr, 64), long_rows.indptr)
    wp2 = WP.make_window_plan(long_rows.indptr, long_rows.indices, 64)
    wpr2 = WP.make_window_plan(long_rows.indptr, long_rows.indices, 64, row_order=o2.perm)
    assert WP.choose_strategy(*args, wp2, wpr2, min_gain=0.0) == "tca"


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("window", [16, 8])
def test_row_table_kernel_assembles_without_spills(arch, dtype, window):
    module = W.build(100, dtype, row_table=True, window=window)
    assert [p.name for p in module.kernels[0].params][-1] == "rows"
    cub = ptx.compile(module.text(), arch=arch)
    for f in cub.functions.values():
        assert f.spills == 0 and f.stack_frame == 0, (f.name, f.spill_stores, f.spill_loads)


@pytest.mark.parametrize("window", [16, 8])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
def test_reordered_window_kernel_in_the_simulator_vs_scipy(cuda_backend, dtype, window):
    """reorder='rows': the kernels store C through the row table; C in the caller's row order
    matches scipy (fp64 on the rounded inputs, within fp32 accumulation) and the model, on empty
    rows + a long row (split windows: partials, second pass through the row table), one column,
    all empty, power-law rows and shuffled blocks; then new values on the same plan."""
    rng = np.random.default_rng(17)
    prec = precision(dtype)
    drv = cuda_backend.driver
    for name, s in _cases(rng):
        n = 13
        b = rng.standard_normal((s.shape[1], n)).astype(np.float32)
        op = SpMM(s, n, dtype=dtype, target="cuda", driver=drv, strategy="window", reorder="rows", window_rows=window)
        assert op.reordered and op._wplan.reordered and "reordered" in repr(op), name
        assert op.window_rows == op._wplan.window == window
        c = np.full((s.shape[0], n), np.nan, np.float32)
        op.execute(b, c)
        scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
        err = np.abs(c - _ref(s, prec, b))
        assert np.all(err <= 1e-5 * scale + 1e-30), (name, float(err.max()))
        np.testing.assert_allclose(c, op.model(b), rtol=1e-5, atol=1e-5 * float(scale.max(initial=0)) + 1e-30)
    s = _shuffled_blocks(2, 12, 60, 5, rng, full_rows=False)[0]
    op = SpMM(s, 16, dtype=dtype, target="cuda", driver=drv, strategy="window", reorder="rows", window_rows=window)
    assert not np.array_equal(op._wplan.rows, np.arange(s.shape[0]))
    s.data = rng.standard_normal(s.nnz).astype(np.float32)
    op.update_values(s.data)
    b = rng.standard_normal((s.shape[1], 16)).astype(np.float32)
    scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(op.execute(b, np.empty((s.shape[0], 16), np.float32)) - _ref(s, prec, b)) <= 1e-5 * scale)


def test_auto_reorders_when_the_model_says_so(cuda_backend):
    """reorder='auto' reorders shuffled blocks (the mma count drops by far more than 10 %) and
    keeps a matrix whose order is already the best (FEM blocks in mesh order), in fp16 and tf32;
    'none' never reorders."""
    rng = np.random.default_rng(23)
    drv = cuda_backend.driver
    blocks, _ = _shuffled_blocks(3, 16, 3000, 4, rng, full_rows=True)
    op = SpMM(blocks, 8, target="cuda", driver=drv)
    assert op.row_order.gain >= WP.MIN_REORDER_GAIN
    assert (op.strategy, op.reordered) == ("window", True) and "rows reordered" in op.plan_summary()
    b = rng.standard_normal((blocks.shape[1], 8)).astype(np.float32)
    scale = np.abs(blocks).astype(np.float64) @ np.abs(b).astype(np.float64)
    c = op.execute(b, np.empty((blocks.shape[0], 8), np.float32))
    assert np.all(np.abs(c - _ref(blocks, precision("fp16"), b)) <= 1e-5 * scale)
    none = SpMM(blocks, 8, target="cuda", driver=drv, reorder="none")
    assert not none.reordered and none.row_order is None
    assert WP.window_mmas(none._wplan) > WP.window_mmas(op._wplan)
    fem = fem_blocks(2, 3, rng)
    op = SpMM(fem, 8, target="cuda", driver=drv)
    assert op.row_order.gain < WP.MIN_REORDER_GAIN and not op.reordered and "reordered=False" in repr(op)
    tf = SpMM(blocks, 8, dtype="tf32", target="cuda", driver=drv)
    assert (tf.strategy, tf.reordered) == ("window", True) and tf._wplan.tf32
    c = tf.execute(b, np.empty((blocks.shape[0], 8), np.float32))
    assert np.all(np.abs(c - _ref(blocks, precision("tf32"), b)) <= 1e-5 * scale)


def test_bad_input():
    from ptx import simdriver

    s = fem_blocks(2, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"reorder must be one of \('auto', 'none', 'rows'\)"):
        SpMM(s, 8, target="cuda", driver=simdriver, reorder="minhash")
    with pytest.raises(ValueError, match="reorder='rows' reorders the row-window strategy"):
        SpMM(s, 8, target="cuda", driver=simdriver, reorder="rows", strategy="tca")
    with pytest.raises(ValueError, match="reorder='rows'"):
        SpMM(s, 8, target="native", reorder="rows")
    c = as_csr(s)
    m = c.shape[0]
    with pytest.raises(ValueError, match="permutation"):
        WP.make_window_plan(c.indptr, c.indices, 8, row_order=np.zeros(m, np.int64))
    with pytest.raises(ValueError, match="M = "):
        WP.make_window_plan(c.indptr, c.indices, 8, row_order=np.arange(m - 1))
    with pytest.raises(ValueError, match="perm must have M"):
        R.count_tiles(c.indptr, c.indices, np.arange(m + 1))
    with pytest.raises(ValueError, match="indptr must start at 0"):
        R.reorder_rows(np.array([1, 2]), np.array([0]))
    with pytest.raises(ValueError, match="methods"):
        R.reorder_rows(c.indptr, c.indices, methods=("spectral",))
    with pytest.raises(ValueError, match="permutation of 0..M-1"):
        R.RowOrder(perm=np.array([0, 0], np.int64), method="minhash", nnz=0, tiles_before=0, tiles_after=0)
    with pytest.raises(TypeError, match="int64"):
        R.RowOrder(perm=np.array([0, 1], np.int32), method="minhash", nnz=0, tiles_before=0, tiles_after=0)
    with pytest.raises(ValueError, match="min_gain"):
        WP.pick_window(WP.make_window_plan(c.indptr, c.indices, 8), None, min_gain=1.0)
    with pytest.raises(TypeError, match="row_table"):
        W.build(8, row_table=1)
