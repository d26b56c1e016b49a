"""One `SpMM` shared by several threads at once, each with a B and C of its own: the native
kernel and the CUDA kernels in the PTX simulator (seed 003's plan with partial sums, and row
windows), every result compared with scipy."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.sparse import SpMM
from tests.minijit.sparse.helpers import csr_with_lengths, quantized_reference
from tests.minijit.threads import run_threads


def _check(op, s, n: int, calls: int, threads: int, dtype=np.float32) -> list[str]:
    m, k = s.shape

    def work(t: int) -> list[str]:
        rng = np.random.default_rng(t)
        bad = []
        for i in range(calls):
            b = rng.standard_normal((k, n)).astype(dtype)
            c = np.full((m, n), np.nan, np.float32)
            op.execute(b, c)
            ref = quantized_reference(s, b) if op.dtype == "fp16" else s @ b.astype(np.float64)
            scale = np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64) + 1e-30
            if not np.all(np.abs(c - ref) <= 2e-3 * scale + 1e-5):
                bad.append(f"thread {t} call {i}: max error {np.nanmax(np.abs(c - ref)):.3g}")
        return bad

    return run_threads(work, threads)


def test_native_spmm_shared_by_threads():
    rng = np.random.default_rng(0)
    s = csr_with_lengths(rng.integers(0, 40, 300), 200, rng)
    op = SpMM(s, 24, target="native", threads=2)
    assert _check(op, s, 24, calls=20, threads=6) == []


@pytest.mark.parametrize("strategy", ["tca", "window"])
def test_cuda_spmm_shared_by_threads_in_the_simulator(strategy):
    from ptx import simdriver

    rng = np.random.default_rng(1)
    s = csr_with_lengths([0, 3, 70, 9, 130, 17, 1, 40], 160, rng)  # long rows: partial sums, a reduce pass
    op = SpMM(s, 8, target="cuda", driver=simdriver, strategy=strategy)
    assert op.strategy == strategy
    assert _check(op, s, 8, calls=2, threads=4) == []
