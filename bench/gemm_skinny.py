"""GEMMs with one small dim (a batch of rows through a large weight matrix: 1..256 x 4096 x 4096)
and other non-square shapes: minijit as `setup()` builds it, against two switched-off variants and
numpy's matmul, in one process.

    OPENBLAS_NUM_THREADS=1 python bench/gemm_skinny.py [--shapes 8x4096x4096,...] [--threads 1]
                                                       [--order C] [--rounds 8]

Variants, timed in alternating blocks of calls (a `PAUSE_S` pause before each block, so OpenBLAS's
threads stop spinning): "auto" (the operation as `setup()` builds it), "reuse64" (chunk operations
pack A into micro-panels only from `minijit.packing.PANEL_REUSE_N` columns of N, as before
b6e4118), "caller-blocking" (that, and the cache model run on the caller's M x N x K instead of
the kernel's roles: the blocking before b6e4118, transposed for C-order operands), and
``np.matmul``. Reported: GFLOPS of the median block and medians of per-round ratios. Results are
checked against numpy first. Wall-clock time (``perf_counter``), fp32, exec types undefined.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from minijit import TensorOperation, blocking, schedule
from minijit.bench.cpu import checked_gemm_calls, timeit

PAUSE_S = 0.25
DEFAULT_SHAPES = "1x4096x4096,8x4096x4096,16x4096x4096,32x4096x4096,64x4096x4096,128x4096x4096,256x4096x4096"


def operation(m: int, n: int, k: int, order: str, threads: int, variant: str) -> TensorOperation:
    """C = A B, every operand in ``order``, built as ``variant`` says (see the module docstring)."""
    strides = {"C": ([k, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, m], [0, k, 1], [1, m, 0])}[order]
    choose, reuse = blocking.choose, schedule.CHUNK_PANEL_REUSE_N
    if variant in ("reuse64", "caller-blocking"):
        schedule.CHUNK_PANEL_REUSE_N = 64
    if variant == "caller-blocking" and order == "C":  # the kernel's roles are the caller's, swapped
        blocking.choose = lambda shape, *a, **kw: choose((shape[1], shape[0], shape[2]), *a, **kw)
    try:
        op = TensorOperation(num_threads=threads)
        op.setup("fp32", "none", "gemm", "none", "mnk", ["undefined"] * 3, [m, n, k], *strides)
    finally:
        blocking.choose, schedule.CHUNK_PANEL_REUSE_N = choose, reuse
    return op


def measure(shape: str, threads: int, order: str, rounds: int) -> str:
    """One table row: every variant of ``shape`` ("MxNxK") timed in alternating blocks."""
    m, n, k = (int(x) for x in shape.split("x"))
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    C = np.zeros((m, n), np.float32)
    if order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if order == "F" else (A, B, C)
    ops = {v: operation(m, n, k, order, threads, v) for v in ("auto", "reuse64", "caller-blocking")}
    calls = checked_gemm_calls(ops, A, B, C, bufs)
    flops = 2 * m * n * k
    reps = max(3, int(0.05 / (flops / 60e9 / threads)))
    blocks: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            time.sleep(PAUSE_S)
            blocks[name].append(timeit(call, reps, warmup=1, min_warm_s=0))

    def ratio(a: str, b: str) -> float:
        return statistics.median(y / x for x, y in zip(blocks[a], blocks[b], strict=True))

    gflops = " | ".join(f"{flops / statistics.median(t) / 1e9:.1f}" for t in blocks.values())
    chunks = ops["auto"].chunks
    kind = "" if chunks == 1 else f" {ops['auto'].chunk_kind}"
    return (
        f"| {shape} | {order} | {threads} | {chunks}{kind} | {gflops} | {ratio('auto', 'caller-blocking'):.3f} |"
        f" {ratio('auto', 'numpy'):.3f} | {ratio('caller-blocking', 'numpy'):.3f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated M x N x K")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--order", choices=["C", "F"], default="C")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    print(
        "| M x N x K | order | threads | chunks | auto | reuse64 | caller-blocking | numpy |"
        " auto / caller-blocking | auto / numpy | caller-blocking / numpy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        print(measure(shape, args.threads, args.order, args.rounds), flush=True)


if __name__ == "__main__":
    main()
