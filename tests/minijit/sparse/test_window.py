"""The row-window strategy (work split by non-zeros; 16-row windows and the swapped 8-row ones):
plan, numpy model, choice between the strategies, ptxas for sm_80/sm_90 without spills, and the
kernels in ptx.sim against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ptx
from minijit.bench.spmm import fem_blocks
from minijit.sparse import SpMM, as_csr, make_plan
from minijit.sparse import window_kernel as W
from minijit.sparse import window_plan as WP
from minijit.sparse.precision import precision
from ptx import toolchain
from tests.conftest import examples
from tests.minijit.sparse.helpers import csr_with_lengths
from tests.minijit.sparse.test_tca import _skewed_cases


def _ref(s, prec, b):
    return sp.csr_matrix((prec.quantize(s.data), s.indices, s.indptr), shape=s.shape) @ prec.quantize(b)


def _assemble(wp, tiles: np.ndarray, shape) -> np.ndarray:
    """S rebuilt from dense (blocks, window, 8) tiles through the plan's items and column blocks;
    padding slots (column -1) must hold zeros."""
    dense = np.zeros(shape)
    for blk in range(wp.num_blocks):
        win = next(r0 for r0, b0, b1 in zip(wp.item_row0, wp.item_blk_begin, wp.item_blk_end, strict=True)
                   if b0 <= blk < b1)  # fmt: skip
        rows = min(wp.window, shape[0] - win)
        for j, col in enumerate(wp.block_cols[blk]):
            if col >= 0:
                dense[win : win + rows, col] += tiles[blk, :rows, j]
            else:
                assert not tiles[blk, :, j].any()
    return dense


def test_plan_splits_windows_by_nonzeros():
    rng = np.random.default_rng(2)
    lengths = [0] * 16 + [1, 300, 2, 0] + [0] * 12 + [3] * 16  # window 1: one long row; window 2: short rows
    s = as_csr(csr_with_lengths(lengths, 400, rng))
    wp = WP.make_window_plan(s.indptr, s.indices, 8, target_nnz=64)
    # tiles in fragment order hold exactly S, column blocks name the condensed columns
    a = np.zeros((wp.num_blocks, 16, 8))
    lane, e = np.arange(32)[:, None], np.arange(4)[None, :]
    a[:, lane // 4 + 8 * (e >= 2), 2 * (lane % 4) + (e & 1)] = wp.tiles(s.data)
    np.testing.assert_array_equal(_assemble(wp, a, s.shape), s.to_scipy().toarray())
    # window 0 is empty (zero-filled by the second pass); window 1 (303 nnz) splits into ~5 items
    # of about 64 nnz writing partials; window 2 (48 nnz) is one item writing C
    w1 = wp.item_row0 == 16
    assert w1.sum() == 5 and (wp.item_pslot[w1] >= 0).all() and (wp.item_pstride[w1] == 5).all()
    assert (wp.item_pslot[wp.item_row0 == 32] == -1).all() and (wp.item_row0 == 0).sum() == 0
    assert sorted(set(wp.reduce_rows.tolist())) == list(range(32))
    assert wp.reduce_slot_count[wp.reduce_rows < 16].tolist() == [0] * 16
    assert wp.num_partials == 16 * 5


def test_swapped_plan_tiles_are_b_fragments_of_8_row_windows():
    rng = np.random.default_rng(3)
    lengths = [0] * 8 + [1, 300, 2, 0, 5, 0, 0, 7] + [3] * 11  # an empty window, a long row, a ragged tail
    s = as_csr(csr_with_lengths(lengths, 400, rng))
    wp = WP.make_window_plan(s.indptr, s.indices, 8, target_nnz=64, window=8)
    assert wp.swapped and wp.window == 8 and wp.per_lane == 2 and wp.tiles(s.data).shape == (wp.num_blocks, 32, 2)
    # the m16n8k8 B fragment: lane 4r + t holds B[k = 2t, 2t + 1][n = r] = S[window row r][condensed 2t, 2t + 1]
    t = wp.tiles(s.data)
    d = wp.dense_tiles(t)
    assert d[:, 3, 5].tolist() == t[:, 4 * 3 + 2, 1].tolist()
    np.testing.assert_array_equal(_assemble(wp, d, s.shape), s.to_scipy().toarray())
    # window 0 is empty; window 1 (315 nnz) splits into 5 items writing 8 partial rows each
    w1 = wp.item_row0 == 8
    assert w1.sum() == 5 and (wp.item_pslot[w1] >= 0).all() and wp.num_partials == 8 * 5
    assert sorted(set(wp.reduce_rows.tolist())) == list(range(16))
    with pytest.raises(ValueError, match="window must be 16 or 8"):
        WP.make_window_plan(s.indptr, s.indices, 8, window=4)


@pytest.mark.parametrize("window", [16, 8])
@pytest.mark.parametrize("target_nnz", [8, 256])
def test_model_is_s_times_b(target_nnz, window):
    rng = np.random.default_rng(target_nnz)
    prec = precision("fp16")
    for s in [csr_with_lengths([0, 3, 300, 0, 9, 1, 40, 0] * 5, 320, rng), fem_blocks(3, 3, rng)]:
        b = rng.standard_normal((s.shape[1], 13)).astype(np.float32)
        wp = WP.make_window_plan(s.indptr, s.indices, 13, target_nnz, window=window)
        np.testing.assert_allclose(WP.model(wp, s.data, b, prec.quantize), _ref(s, prec, b), rtol=1e-5, atol=1e-5)


def test_strategy_choice_follows_the_row_statistics():
    """FEM-like blocks (short rows sharing columns) go to row windows; scattered long rows stay on seed 003."""
    rng = np.random.default_rng(0)
    fem = fem_blocks(4, 3, rng)
    scattered = csr_with_lengths([200] * 16, 50000, rng)  # every column block holds ~1 nnz per 16 rows
    for s, want in ((fem, "window"), (scattered, "tca")):
        c = as_csr(s)
        wp = WP.make_window_plan(c.indptr, c.indices, 64)
        assert WP.choose_strategy(make_plan(c.indptr, 64), c.indptr, wp) == want


def test_swapped_windows_win_on_scattered_short_windows_by_a_margin():
    """8-row windows halve the padded zeros of scattered columns; against seed 003, which also
    multiplies 8 x 8 tiles of condensed columns, they must save MIN_SWAP_GAIN of the mmas."""
    rng = np.random.default_rng(5)
    few_rows = as_csr(csr_with_lengths([150] * 4, 4000, rng))  # one window of 4 scattered rows
    one_row = as_csr(csr_with_lengths([2000], 50000, rng))  # scattered: swapped ~ seed 003
    fem = as_csr(fem_blocks(2, 3, rng))
    blocks = as_csr(sp.block_diag([rng.standard_normal((16, 16))] * 3, format="csr"))  # dense 16 x 16 blocks
    picks = {}
    for name, c in (("few_rows", few_rows), ("one_row", one_row), ("fem", fem), ("blocks", blocks)):
        wp = WP.make_window_plan(c.indptr, c.indices, 8)
        ws = WP.make_window_plan(c.indptr, c.indices, 8, window=8)
        plan = make_plan(c.indptr, 8)
        counts = WP.window_mmas(wp), WP.window_mmas(ws), WP.tca_mmas(plan, c.indptr)
        picks[name] = (WP.choose_strategy(plan, c.indptr, wp, swapped=ws), counts)
        assert counts[1] == ws.num_blocks * 4 and counts[0] == wp.num_blocks * 8
    assert picks["few_rows"][0] == "window_swapped"  # 288 against 576 (windows) and 384 (seed 003)
    ws_, tca_ = picks["one_row"][1][1:]
    assert ws_ < tca_ < ws_ / (1 - WP.MIN_SWAP_GAIN) and picks["one_row"][0] == "tca"  # within the margin
    assert picks["fem"][0] == "window_swapped"  # 3x3 blocks on a stencil: 8-row windows touch fewer columns
    assert picks["blocks"][1][0] == picks["blocks"][1][1] and picks["blocks"][0] == "window"  # no padding to save
    with pytest.raises(ValueError, match="swapped must be an 8-row window plan"):
        c = fem
        WP.choose_strategy(make_plan(c.indptr, 8), c.indptr, WP.make_window_plan(c.indptr, c.indices, 8),
                           swapped=WP.make_window_plan(c.indptr, c.indices, 8))  # fmt: skip


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("n", [8, 100, 512])
@pytest.mark.parametrize("window", [16, 8])
def test_window_kernels_assemble_without_spills(arch, dtype, n, window):
    text = W.build(n, dtype, window=window).text()
    ab = {"fp16": "f16.f16", "bf16": "bf16.bf16", "tf32": "tf32.tf32"}[dtype]
    assert text.count(f"mma.sync.aligned.m16n8k8.row.col.f32.{ab}.f32") == 1
    assert text.count("cvt.rna.tf32.f32") == (0 if dtype != "tf32" else 2 if window == 16 else 4)
    cub = ptx.compile(text, arch=arch)
    assert set(cub.functions) == {"window_spmm", "tca_reduce"}
    for f in cub.functions.values():
        assert f.spills == 0 and f.stack_frame == 0, (f.name, f.spill_stores, f.spill_loads)


@pytest.mark.parametrize("window", [16, 8])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
def test_window_kernel_on_skewed_matrices_vs_scipy(cuda_backend, dtype, window):
    """Empty rows + a long row (split into items, partial rows, second pass), one column, all empty,
    FEM blocks; N = 24 and 13: scipy fp64 on rounded inputs within fp32 accumulation, and the model."""
    rng = np.random.default_rng(61)
    prec = precision(dtype)
    cases = [*_skewed_cases(rng), ("fem", fem_blocks(2, 3, rng)), ("split", csr_with_lengths([2, 700, 0, 5], 800, rng))]
    for name, s in cases:
        for n in (24, 13):
            b = rng.standard_normal((s.shape[1], n)).astype(np.float32)
            op = SpMM(s, n, dtype=dtype, target="cuda", driver=cuda_backend.driver, strategy="window",
                      window_rows=window)  # fmt: skip
            assert op.strategy == "window" and op.window_rows == window and "row windows" in op.plan_summary()
            c = np.full((s.shape[0], n), np.nan, np.float32)
            op.execute(b, c)
            scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
            err = np.abs(c - _ref(s, prec, b))
            assert np.all(err <= 1e-5 * scale + 1e-30), (name, n, float(err.max()))
            np.testing.assert_allclose(c, op.model(b), rtol=1e-5, atol=1e-5 * float(scale.max(initial=0)) + 1e-30)
            if name == "split":  # ~707 nnz in one window: 3 items, partial rows and the second pass
                assert op._wplan.num_items == 3 and op._wplan.num_partials == 3 * window
    s = _skewed_cases(rng)[0][1]  # new values, same plan
    op = SpMM(s, 16, target="cuda", driver=cuda_backend.driver, strategy="window", dtype=dtype, window_rows=window)
    s.data = rng.standard_normal(s.nnz).astype(np.float32)
    op.update_values(s.data)
    b = rng.standard_normal((s.shape[1], 16)).astype(np.float32)
    scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(op.execute(b, np.empty((s.shape[0], 16), np.float32)) - _ref(s, prec, b)) <= 1e-5 * scale)


def test_auto_strategy_in_the_simulator(cuda_backend):
    """strategy='auto' runs what choose_strategy picks, for each pick, in fp16 and tf32 (the row
    windows take every dtype; the pick depends on the pattern only)."""
    rng = np.random.default_rng(5)
    drv = cuda_backend.driver
    blocks = sp.block_diag([rng.standard_normal((16, 16))] * 2, format="csr")
    few_rows = csr_with_lengths([150] * 4, 4000, rng)
    long_row = csr_with_lengths([600, 0, 0, 0, 0, 0, 0, 0, 0, 600], 20000, rng)
    prec = precision("fp16")
    for s, want, rows in ((blocks, "window", 16), (few_rows, "window", 8), (long_row, "tca", None)):
        op = SpMM(s, 8, target="cuda", driver=drv)
        assert (op.strategy, op.window_rows) == (want, rows)
        b = rng.standard_normal((s.shape[1], 8)).astype(np.float32)
        scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
        assert np.all(np.abs(op.execute(b, np.empty((s.shape[0], 8), np.float32)) - _ref(s, prec, b)) <= 1e-5 * scale)
    for s, want, rows in ((few_rows, "window", 8), (long_row, "tca", None)):  # tf32: the same picks
        tf = SpMM(s, 8, dtype="tf32", target="cuda", driver=drv)
        assert (tf.strategy, tf.window_rows) == (want, rows)
        assert want == "tca" or tf._wplan.tf32


def test_strategy_validation():
    from ptx import simdriver

    s = fem_blocks(2, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"strategy must be one of \('auto', 'tca', 'window'\)"):
        SpMM(s, 8, target="cuda", driver=simdriver, strategy="rows")
    with pytest.raises(ValueError, match="strategy='window' is a target='cuda' kernel"):
        SpMM(s, 8, target="native", strategy="window")
    with pytest.raises(ValueError, match="dtype must be one of"):
        W.build(8, "fp32")
    with pytest.raises(ValueError, match="window must be 16 or 8"):
        W.build(8, "fp16", window=32)
    with pytest.raises(ValueError, match="window_rows must be None, 16 or 8"):
        SpMM(s, 8, target="cuda", driver=simdriver, window_rows=4)
    with pytest.raises(ValueError, match="window_rows applies to the row-window strategy"):
        SpMM(s, 8, target="cuda", driver=simdriver, strategy="tca", window_rows=8)
    with pytest.raises(ValueError, match="window_rows applies to the row-window strategy"):
        SpMM(s, 8, target="native", window_rows=16)

    with pytest.raises(ValueError, match="target_nnz"):
        WP.make_window_plan(np.zeros(1, np.int32), np.zeros(0, np.int32), 8, target_nnz=0)


@settings(max_examples=examples(30), deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.integers(1, 60),
    n=st.integers(1, 20),
    density=st.floats(0.0, 0.6),
    window=st.sampled_from([16, 8]),
    dtype=st.sampled_from(["fp16", "bf16", "tf32"]),
    reorder=st.sampled_from(["none", "rows"]),
    target_nnz=st.sampled_from([4, 256]),
    seed=st.integers(0, 2**31 - 1),
)
# an S value (0.92944335...) just below a float16 halfway point: the tiles once rounded it from float64
@example(m=22, k=25, n=1, density=0.125, window=16, dtype="fp16", reorder="none", target_nnz=4, seed=1)
def test_window_kernels_on_random_patterns_vs_scipy(m, k, n, density, window, dtype, reorder, target_nnz, seed):
    """Random patterns (empty ones too) through both window layouts, every dtype, both row orders and
    work items of 4 or 256 non-zeros (4: most windows split, partial rows and the second pass), in
    ptx.sim: C (started as NaN) matches scipy on the rounded inputs within fp32 accumulation."""
    from ptx import simdriver

    rng = np.random.default_rng(seed)
    s = sp.random(m, k, density=density, format="csr", random_state=rng, dtype=np.float64)
    s.data = rng.uniform(-2, 2, s.nnz)
    b = rng.uniform(-2, 2, (k, n)).astype(np.float32)
    op = SpMM(s, n, dtype=dtype, target="cuda", driver=simdriver, strategy="window", window_rows=window,
              reorder=reorder)  # fmt: skip
    assert op.window_rows == window and op.reordered == (reorder == "rows")
    if target_nnz != WP.TARGET_NNZ:  # re-plan with small work items (the kernels take any plan)
        op._wplan = WP.make_window_plan(s.indptr, s.indices, n, target_nnz, op._wplan.rows, window,
                                        dtype == "tf32")  # fmt: skip
        op._window_setup(simdriver.device())
    c = np.full((m, n), np.nan, np.float32)
    op.execute(b, c)
    prec = precision(dtype)
    scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)
    err = np.abs(c - _ref(s, prec, b))
    assert np.all(err <= 1e-5 * scale + 1e-30), float(err.max())
