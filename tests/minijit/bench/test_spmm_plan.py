"""The plan section of minijit bench spmm: mma counts of the strategies' plans before and after
row reordering and with swapped 8-row windows, and the strategy chosen, computed on the CPU (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest


def test_plan_rows_count_the_plans_and_pick_reordering_for_shuffled_blocks():
    sp = pytest.importorskip("scipy.sparse")
    from minijit.bench import spmm
    from minijit.sparse import make_plan
    from minijit.sparse import window_plan as WP

    rng = np.random.default_rng(4)
    # 8 blocks of 16 identical rows, 16 columns each (disjoint, scattered): 2 tiles per block once
    # the rows are grouped, against up to 2 per block in every window of the shuffled order
    groups, cols, k = 8, 16, 5000
    col_sets = rng.permutation(k)[: groups * cols].reshape(groups, cols)
    order = rng.permutation(groups * 16)
    indices = np.sort(col_sets[order // 16], axis=1).reshape(-1).astype(np.int32)
    indptr = np.arange(0, indices.size + 1, cols, dtype=np.int32)
    blocks = sp.csr_matrix((rng.standard_normal(indices.size).astype(np.float32), indices, indptr), (groups * 16, k))
    fem = spmm.fem_blocks(3, 3, rng)
    rows = spmm.plan_rows([("blocks", "shuffled blocks", blocks), ("fem", "FEM", fem)], 64)
    assert [r["matrix"] for r in rows] == ["blocks", "fem"]
    for r, s in zip(rows, (blocks, fem), strict=True):
        assert r["tca_mmas"] == WP.tca_mmas(make_plan(s.indptr, 64), s.indptr)
        assert r["window_mmas"] == WP.window_mmas(WP.make_window_plan(s.indptr, s.indices, 64))
        assert r["reordered_mmas"] <= r["window_mmas"]
        assert r["window_density"] == pytest.approx(s.nnz / (r["window_mmas"] // 8 * 128))
        ws = WP.make_window_plan(s.indptr, s.indices, 64, window=8)
        assert r["swapped_mmas"] <= WP.window_mmas(ws)
    assert rows[1]["swapped_mmas"] == WP.window_mmas(WP.make_window_plan(fem.indptr, fem.indices, 64, window=8))
    b = rows[0]
    assert b["reordered_mmas"] == groups * (cols // 8) * 8
    windows = [len(set((order[w : w + 16] // 16).tolist())) for w in range(0, groups * 16, 16)]
    assert b["window_mmas"] == sum(2 * g for g in windows) * 8
    assert b["strategy"] == "window_reordered" and b["reorder_gain"] >= WP.MIN_REORDER_GAIN
    assert rows[1]["reorder_gain"] < WP.MIN_REORDER_GAIN
    assert rows[1]["strategy"] == "window_swapped"  # FEM 3x3 blocks: 8-row windows touch fewer columns
    assert rows[1]["swapped_mmas"] <= (1 - WP.MIN_SWAP_GAIN) * min(rows[1]["window_mmas"], rows[1]["tca_mmas"])
    text = spmm.plan_table(rows)
    assert "| window mmas | tile density | reordered mmas |" in text.splitlines()[0]
    assert f"| {b['window_mmas']} |" in text.splitlines()[2] and "| window_reordered |" in text.splitlines()[2]
    report = "\n".join(spmm.sections(None, [], "GPU rows pending", rows))
    assert report.index("## Plans") < report.index("GPU rows pending") < report.index("## CPU")
