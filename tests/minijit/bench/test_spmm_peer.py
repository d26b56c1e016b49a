"""The CPU peer of minijit bench spmm."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_scipy_split_peer_computes_s_times_b(threads):
    """The same-thread-count CPU peer of --spmm: row blocks of equal nnz, every row written once
    (empty rows, one long row, fewer rows than threads)."""
    import numpy as np
    import scipy.sparse as sp

    from minijit.bench.spmm import scipy_split

    rng = np.random.default_rng(threads)
    dense = rng.standard_normal((6, 40)).astype(np.float32) * (rng.random((6, 40)) < 0.3)
    dense[2] = 0
    dense[4] = rng.standard_normal(40)  # one long row
    s = sp.csr_matrix(dense)
    b = rng.standard_normal((40, 5)).astype(np.float32)
    c = np.full((6, 5), np.nan, np.float32)
    scipy_split(s, threads)(b, c)
    np.testing.assert_allclose(c, dense.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
