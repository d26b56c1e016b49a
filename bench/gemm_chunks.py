"""Chunked execution (`minijit.schedule.a_chunks`) against packing all of A first, next to numpy's
matmul, on fp32 GEMMs in C or F order, in one process.

    OPENBLAS_NUM_THREADS=1 python bench/gemm_chunks.py 64x4096x4096 [--order C] [--threads 1] [--rounds 8]

Four variants in alternating blocks of calls (a `PAUSE_S` pause before each block, so OpenBLAS's
threads stop spinning): the operation as `setup()` builds it ("chunked" where the rule chunks it),
the same with K chunks switched off ("m-chunks": the M chunks where they apply;
``Rules(k_chunks=False)``), with chunking switched off ("whole"; ``Rules(chunks=False)``), and
``np.matmul``. Reported: GFLOPS of the median
block and the median over rounds of the per-round ratio to "whole". Wall-clock (``perf_counter``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from minijit import TensorOperation
from minijit.bench.cpu import checked_gemm_calls, timeit
from minijit.schedule import Rules

PAUSE_S = 0.25


def operation(m: int, n: int, k: int, order: str, threads: int, variant: str) -> TensorOperation:
    """C = A B with every operand in ``order``, fp32, exec types undefined; ``variant`` "chunked"
    (the rule), "m-chunks" (K chunks switched off) or "whole" (chunking off)."""
    rules = {"chunked": Rules(), "m-chunks": Rules(k_chunks=False), "whole": Rules(chunks=False)}[variant]
    op = TensorOperation(num_threads=threads, rules=rules)
    strides = {"C": ([k, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, m], [0, k, 1], [1, m, 0])}[order]
    op.setup("fp32", "none", "gemm", "none", "mnk", ["undefined"] * 3, [m, n, k], *strides)
    return op


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shape", help="M x N x K, e.g. 64x4096x4096")
    p.add_argument("--order", choices=["C", "F"], default="C")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x"))
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    C = np.zeros((m, n), np.float32)
    if args.order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if args.order == "F" else (A, B, C)
    ops = {name: operation(m, n, k, args.order, args.threads, name) for name in ("chunked", "m-chunks", "whole")}
    calls = checked_gemm_calls(ops, A, B, C, bufs)
    flops = 2 * m * n * k
    reps = max(2, int(0.1 / (flops / 80e9 / args.threads)))
    blocks: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, call in calls.items():
            time.sleep(PAUSE_S)
            blocks[name].append(timeit(call, reps, warmup=1, min_warm_s=0))
    kinds = {name: f"{op.chunks} ({op.chunk_kind or 'whole'})" for name, op in ops.items()}
    print(f"{args.shape} {args.order}-order, {args.threads} thread(s), chunks: {kinds}")
    for name, t in blocks.items():
        ratio = statistics.median(w / x for w, x in zip(blocks["whole"], t, strict=True))
        print(f"  {name:8s} {flops / statistics.median(t) / 1e9:6.1f} GFLOPS  {ratio:.3f}x whole")


if __name__ == "__main__":
    main()
