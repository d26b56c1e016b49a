"""Matrix-vector products (GEMV: one of M, N is 1) through `TensorOperation` against numpy's matmul,
in one process.

    OPENBLAS_NUM_THREADS=1 python bench/gemv.py [--shapes 4096x1x4096,...] [--threads 1]
                                                [--order C] [--dtype fp32] [--rounds 8] [--inc 1]

``M x N x K`` with N = 1 is ``A @ x`` (A M x K), with M = 1 ``x @ B`` (B K x N); in C order the
first reads A's rows (the kernel's dot form), the second B's columns (its axpy form), and F order
swaps them. ``--inc S``: x and y are every S-th element of their buffers (a column of a C-order
matrix S wide, as ``X[:, 0]``), for both minijit and numpy. Each operation is set up with exec types
undefined and timed in alternating blocks of calls against ``np.matmul`` (a `PAUSE_S` pause before
each block, so OpenBLAS's and minijit's threads stop spinning); reported: GFLOPS of the median
block, the median of per-round ratios, and the kernel the operation runs. Results are checked
against numpy first. Wall-clock time.
"""

from __future__ import annotations

import statistics

import numpy as np

from minijit import TensorOperation
from minijit.bench.cpu import alternating_blocks, checked_gemm_calls, shape_table

PAUSE_S = 0.25
DEFAULT_SHAPES = "4096x1x4096,1x4096x4096,2048x1x2048,1x2048x2048,1024x1x1024,1x1024x1024,16384x1x1024,1x1024x16384"


def measure(shape: str, threads: int, order: str, dtype: str, rounds: int, inc: int = 1) -> str:
    """One table row: minijit and numpy on ``shape`` ("MxNxK") in alternating blocks (``inc``: the
    vectors' element stride)."""
    m, n, k = (int(x) for x in shape.split("x"))
    if 1 not in (m, n):
        raise SystemExit(f"{shape}: a GEMV has M = 1 or N = 1")
    rng = np.random.default_rng(0)
    npt = np.float32 if dtype == "fp32" else np.float64
    A, B = rng.standard_normal((m, k)).astype(npt), rng.standard_normal((k, n)).astype(npt)
    C = np.zeros((m, n), npt)
    strides = {"C": ([k, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, m], [0, k, 1], [1, m, 0])}[order]
    if order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if order == "F" else (A, B, C)
    if inc > 1:  # the vectors are every inc-th element of C-contiguous buffers; the matrix stays
        vec = [i for i, (r, c) in enumerate(((m, k), (k, n), (m, n))) if r == 1 or c == 1]
        views, bufs, strides = [A, B, C], list(bufs), [list(s) for s in strides]
        for i in vec:
            buf = np.zeros(views[i].size * inc, npt)
            view = buf[::inc].reshape(views[i].shape)
            view[...] = views[i]
            views[i], bufs[i] = view, buf
            strides[i] = [s * inc for s in strides[i]] if order == "C" else [0 if s == 0 else inc for s in strides[i]]
        A, B, C = views
    op = TensorOperation(num_threads=threads)
    op.setup(dtype, "none", "gemm", "none", "mnk", ["undefined"] * 3, [m, n, k], *strides)
    calls = checked_gemm_calls({"minijit": op}, A, B, C, tuple(bufs))
    flops = 2 * m * n * k
    reps = max(5, int(0.05 / (flops / 10e9)))
    blocks = alternating_blocks(calls, reps, rounds, PAUSE_S)
    ratio = statistics.median(y / x for x, y in zip(blocks["minijit"], blocks["numpy"], strict=True))
    gflops = " | ".join(f"{flops / statistics.median(t) / 1e9:.1f}" for t in blocks.values())
    kernel = op.primitives["main"].name
    return f"| {shape} | {order} | {inc} | {dtype} | {threads} | {gflops} | {ratio:.3f} | `{kernel}` |"


def main() -> None:
    columns = ["M x N x K", "order", "inc", "dtype", "threads", "minijit GFLOPS", "numpy GFLOPS", "minijit / numpy"]
    shape_table(__doc__.splitlines()[0], DEFAULT_SHAPES, [*columns, "kernel"], measure, inc=True)


if __name__ == "__main__":
    main()
