"""`minijit bench cpu`'s square-GEMM rows hand minijit and numpy the arrays their names say: C-order
arrays, or F-order ones (``np.asfortranarray``'s layout) over the same memory (issue 36)."""

from __future__ import annotations

import numpy as np
import pytest

from minijit import TensorOperation
from minijit.bench import configs
from minijit.bench import cpu as bench_cpu


@pytest.mark.parametrize("order", configs.LAYOUTS)
def test_gemm_arrays_are_in_the_named_order_and_minijit_and_numpy_agree(order):
    """Each of A, B, C is a 2-D array in its letter's order over its buffer; minijit (set up with
    the row's strides) and the numpy peer compute A @ B from those very arrays."""
    n = 24
    rng = np.random.default_rng(7)
    bufs = [rng.uniform(-1, 1, n * n).astype(np.float32) for _ in range(2)] + [np.zeros(n * n, np.float32)]
    letters = order * 3 if len(order) == 1 else order
    arrays = bench_cpu.gemm_arrays(*bufs, n, order)
    for x, buf, o in zip(arrays, bufs, letters, strict=True):
        assert x.shape == (n, n) and np.shares_memory(x, buf)
        assert (x.flags.c_contiguous, x.flags.f_contiguous) == (o == "C", o == "F")
    a, b, c = arrays
    want = a.astype(np.float64) @ b
    op = TensorOperation(num_threads=1)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [n] * 3, *configs.gemm_strides(order, n))
    op.execute(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    c[...] = 0
    bench_cpu.matmul_peer(*bufs, n, order)()
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_bench_row_passes_the_named_orders_to_minijit(monkeypatch):
    """A mixed-layout row (A F-order, B and C C-order) runs minijit's execute on a 2-D F-order A
    and C-order B and C, and its check against numpy passes."""
    seen = []
    real = TensorOperation.execute

    def execute(self, in0, in1, out, **kw):
        seen.append(tuple((x.ndim, x.flags.c_contiguous, x.flags.f_contiguous) for x in (in0, in1, out)))
        return real(self, in0, in1, out, **kw)

    monkeypatch.setattr(TensorOperation, "execute", execute)
    spec = configs._square_gemm(32, order="FCC")
    row = bench_cpu.bench_one(spec, 1, "native", reps=1, blas=bench_cpu.BlasThreads(), rounds=1)
    assert row["check"]["ok"]
    assert seen and set(seen) == {((2, False, True), (2, True, False), (2, True, False))}


def test_each_minijit_round_starts_with_numpy_blas_stopped(monkeypatch):
    """numpy's OpenBLAS workers spin after each call and would share minijit's cores: every
    minijit round of a row first stops them (`minijit.parallel.quiet_blas`), then times."""
    events = []
    monkeypatch.setattr(bench_cpu.parallel, "quiet_blas", lambda: events.append("quiet") or 0)
    real = TensorOperation.execute

    def execute(self, *args, **kw):
        events.append("minijit")
        return real(self, *args, **kw)

    monkeypatch.setattr(TensorOperation, "execute", execute)
    spec = configs._square_gemm(16, order="C")
    row = bench_cpu.bench_one(spec, 1, "native", reps=1, blas=bench_cpu.BlasThreads(), rounds=3)
    assert row["check"]["ok"] and row["rounds"] == 3
    rounds = "".join("q" if e == "quiet" else "m" for e in events)
    assert rounds.count("q") == 3
    assert all(part.startswith("m") for part in rounds.split("q")[1:])  # a minijit call follows each stop
