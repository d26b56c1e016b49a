"""The x86-64 BRGEMM kernel's loop order on GEMMs of any shape: N outermost (``n_outer``, what
`TensorOperation` picks by its rule) against the M-outer order, next to numpy's matmul, in one
process.

    python bench/gemm_order.py [--shapes 4096x4096x64,...] [--threads 1] [--order C] [--dtype fp32]
                               [--rounds 8]

Each shape is M x N x K with every operand in ``--order`` (C: row-major numpy arrays, F: column-
major). Three variants run in alternating blocks of calls (a `PAUSE_S` pause before each block, so
OpenBLAS's threads stop spinning): minijit as `setup()` compiles it ("auto": the rule's choice),
minijit with ``n_outer`` switched off ("m-outer"), and ``np.matmul`` at the same thread count (set
``OPENBLAS_NUM_THREADS`` to it: numpy reads it at import). Reported: GFLOPS of the median block
(each block: one untimed call, then the median of its timed calls) and the median over rounds of
the per-round ratio to the M-outer variant. Results are checked
against numpy first. Wall-clock time (``perf_counter``).
"""

from __future__ import annotations

import statistics

import numpy as np

from minijit import TensorOperation
from minijit.bench.cpu import alternating_blocks, shape_table
from minijit.schedule import Rules

#: seconds of sleep before each block: OpenBLAS threads spin for ~0.1 s after a call and would
#: slow the next variant on a 2-core host
PAUSE_S = 0.25
DEFAULT_SHAPES = "4096x4096x64,2048x2048x32,4096x4096x128,2048x2048x256,1024x1024x1024,2048x2048x2048,8192x128x128"


def operation(m: int, n: int, k: int, dtype: str, order: str, threads: int, n_outer: bool) -> TensorOperation:
    """C = A B set up through `setup()` with exec types undefined; ``n_outer`` False forces the
    M-outer kernel order (``Rules(n_outer=False)``)."""
    strides = {"C": ([k, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, m], [0, k, 1], [1, m, 0])}[order]
    op = TensorOperation(num_threads=threads, rules=Rules(n_outer=n_outer))
    op.setup(dtype, "none", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [m, n, k], *strides)
    return op


def measure(shape: str, threads: int, order: str, dtype: str, rounds: int) -> str:
    """One table row: the three variants of ``shape`` ("MxNxK") timed in alternating blocks."""
    m, n, k = (int(x) for x in shape.split("x"))
    dt = np.dtype(np.float32 if dtype == "fp32" else np.float64)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    C = np.zeros((m, n), dt)
    if order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if order == "F" else (A, B, C)
    auto = operation(m, n, k, dtype, order, threads, True)
    m_outer = operation(m, n, k, dtype, order, threads, False)
    calls = {
        "auto": lambda: auto.execute(*bufs),
        "m-outer": lambda: m_outer.execute(*bufs),
        "numpy": lambda: np.matmul(A, B, out=C),
    }
    want = A.astype(np.float64) @ B.astype(np.float64)
    for name in ("auto", "m-outer"):
        C[...] = 0
        calls[name]()
        np.testing.assert_allclose(C, want, rtol=1e-3, atol=1e-3 * np.sqrt(k), err_msg=name)
    flops = 2 * m * n * k
    reps = max(3, min(200, int(0.1 / (flops / 70e9 / threads))))
    blocks = alternating_blocks(calls, reps, rounds, PAUSE_S)
    gf = {name: flops / statistics.median(t) / 1e9 for name, t in blocks.items()}
    ratio = {
        name: statistics.median(b / t for b, t in zip(blocks["m-outer"], blocks[name], strict=True))
        for name in ("auto", "numpy")
    }
    chosen = "n_outer" if auto.n_outer else "m-outer"
    return (
        f"| {shape} | {threads} | {chosen} | {gf['auto']:.1f} | {gf['m-outer']:.1f} | {gf['numpy']:.1f}"
        f" | {ratio['auto']:.2f}x | {ratio['numpy']:.2f}x |"
    )


def main() -> None:
    columns = ["M x N x K", "threads", "auto order", "auto GFLOPS", "m-outer GFLOPS", "numpy GFLOPS"]
    shape_table(__doc__.split("\n\n")[0], DEFAULT_SHAPES, [*columns, "auto / m-outer", "numpy / m-outer"], measure)


if __name__ == "__main__":
    main()
