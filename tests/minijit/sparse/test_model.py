"""Plan and numpy model of TCA-SpMM: warp assignment, matricization, diagonal reduction == S @ B."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.sparse import as_csr, make_plan, model
from minijit.sparse import layout as L
from minijit.sparse.plan import warps_for_nnz
from ptx import mma as M
from tests.minijit.sparse.helpers import csr_with_lengths, quantized_reference, skewed


def test_warps_for_nnz():
    nnz = np.array([0, 1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 1000])
    assert warps_for_nnz(nnz, 2).tolist() == [0, 1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 16, 64]
    assert warps_for_nnz(np.array([65, 128]), 1).tolist() == [16, 16]


def test_plan_structure():
    rng = np.random.default_rng(0)
    lengths = [0, 3, 12, 30, 60, 64, 65, 200, 1500, 0, 7, 7, 7]
    s = as_csr(csr_with_lengths(lengths, 2000, rng))
    p = make_plan(s.indptr, 100)
    rid, nw, wr = p.row_id_for_each_warp, p.num_warps_per_row, p.warpid_within_row
    assert rid.shape[0] % 8 == 0 and p.num_blocks == rid.shape[0] // 8
    for r, n in enumerate(lengths):
        sel = np.flatnonzero(rid == r)
        assert sel.size == warps_for_nnz(n), r
        if sel.size:
            assert sorted(wr[sel].tolist()) == list(range(sel.size)) and (nw[sel] == sel.size).all()
            if n <= 64:  # multirow_per_block: one block, consecutive warps
                assert np.all(np.diff(sel) == 1) and sel[0] // 8 == sel[-1] // 8
    # blocks are homogeneous: multiblock blocks first, each holding one long row
    nnz = np.diff(s.indptr)
    for b in range(p.num_blocks):
        rows = rid[8 * b : 8 * b + 8]
        long = nnz[rows[0]] > 64
        assert long == (b < p.num_multiblock_blocks)
        if long:
            assert (rows == rows[0]).all()
    # second pass: rows with >1 block (200 -> 2, 1500 -> 12 blocks) and the empty rows
    assert sorted(p.reduce_rows.tolist()) == [0, 7, 8, 9]
    assert p.num_partials == 2 + 12


@pytest.mark.parametrize("lq", range(4))
def test_rhs_buffer_is_a_permutation(lq):
    assert sorted(model.rhs_slots(lq).ravel().tolist()) == list(range(512))


@pytest.mark.parametrize("lq", range(4))
def test_matricization_and_diagonal(lq):
    """One warp, one MMA, straight from the layout formulas: the picked diagonal sums are dot products."""
    o = L.IntOps
    q = 1 << lq
    rng = np.random.default_rng(lq)
    s = rng.standard_normal(8 * q).astype(np.float16).astype(np.float32)  # the row's (padded) chunk
    cols = 16 // q
    d = rng.standard_normal((8 * q, cols)).astype(np.float16).astype(np.float32)  # compressed columns
    a_tile = np.zeros((16, 8), np.float32)
    for m in range(16):
        a_tile[m] = d[8 * (m % q) : 8 * (m % q) + 8, m // q]
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    afr = M.scatter("m16n8k8", "f16", "a", a_tile)
    bidx = L.b_frag_index(o, g, t, lq)
    bfr = np.stack([s[bidx], s[bidx + 1]], axis=1)
    dfr = model.mma_sync(afr, bfr, np.zeros((32, 4), np.float32))
    np.testing.assert_allclose(dfr, M.mma_sync("m16n8k8", "f16", afr, bfr, np.zeros((32, 4))), rtol=1e-6, atol=1e-6)
    odd, src = L.diag_source(o, lane, g, lq)
    out = np.zeros(cols)
    for half in range(2):
        v = np.where(odd == 1, dfr[:, 2 * half + 1], dfr[:, 2 * half])[src]
        for st in range(3):
            if lq > st:
                v = v + v[lane ^ (4 << st)]
        w = L.is_writer(o, g, lq) == 0
        out[L.out_col(o, g[w], lq, half)] = v[w]
    np.testing.assert_allclose(out, s.astype(np.float64) @ d, rtol=1e-5, atol=1e-5)


def test_fast_mma_equals_ptx_model():
    rng = np.random.default_rng(3)
    a, b, c = rng.standard_normal((32, 4)), rng.standard_normal((32, 2)), rng.standard_normal((32, 4))
    # same products in float64; only the summation order differs (<= 1 ulp of f32)
    np.testing.assert_allclose(model.mma_sync(a, b, c), M.mma_sync("m16n8k8", "f16", a, b, c), rtol=1e-6, atol=1e-6)


def _check(s, n, rng, seg=2):
    b = rng.standard_normal((s.shape[1], n)).astype(np.float32)
    csr = as_csr(s)
    out = model.tca_spmm(make_plan(csr.indptr, n, seg), csr, b)
    ref = quantized_reference(s, b)
    scale = (np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    assert np.all(np.abs(out - ref) <= 1e-5 * scale + 1e-6)


@pytest.mark.parametrize("n", [1, 8, 64, 100, 130])
def test_model_row_lengths(n):
    rng = np.random.default_rng(n)
    lengths = [0, 1, 5, 8, 9, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 129, 300, 1100, 0, 2]
    _check(csr_with_lengths(lengths, 1500, rng), n, rng)


@pytest.mark.parametrize("density", [1e-4, 1e-3, 0.01, 0.1, 0.3])
def test_model_skewed(density):
    rng = np.random.default_rng(int(density * 1e4))
    _check(skewed(150, 1200, density, rng), 72, rng)


@pytest.mark.parametrize("seg", [1, 3, 4])
def test_model_segments(seg):
    rng = np.random.default_rng(seg)
    _check(csr_with_lengths([65, 200, 1030, 5, 0], 1100, rng), 40, rng, seg)


def test_model_all_empty_and_tiny():
    rng = np.random.default_rng(9)
    _check(csr_with_lengths([0, 0, 0], 10, rng), 5, rng)
    _check(csr_with_lengths([1], 1, rng), 1, rng)
