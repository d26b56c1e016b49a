"""Square GEMMs of any size, small and not powers of two, on one thread and on ``--threads``:
minijit as `setup()` builds it against numpy's matmul at the same thread count, in one process.

    python bench/gemm_sizes.py [--sizes 32,48,...] [--threads 2] [--order C] [--dtype fp32]
                               [--target native] [--rounds 5]

Per size, the four calls (minijit and numpy on 1 thread, then on ``--threads``) are timed in
alternating blocks (a `PAUSE_S` pause before each, so OpenBLAS's threads stop spinning; numpy's
thread count set through `minijit.bench.cpu.BlasThreads.limit`), each block the median of its calls;
reported: GFLOPS of each side's median block, minijit / numpy per thread count, and minijit's
speed-up from 1 to ``--threads`` (below 1.0: more threads were slower, which setup() must never
choose). Results are checked against numpy first. Wall clock (``perf_counter``), exec types
undefined, the prim and thread choices of the defaults.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from minijit import TensorOperation
from minijit.bench import report
from minijit.bench.cpu import BlasThreads, checked_gemm_calls, timeit

PAUSE_S = 0.1
DEFAULT_SIZES = "32,48,64,80,96,100,102,104,108,112,128,136,150,160,200,256,300,384,520,1000"


def operation(n: int, order: str, dtype: str, target: str, threads: int) -> TensorOperation:
    """C = A B of ``n``^3, every operand in ``order`` ("C" or "F")."""
    strides = {"C": ([n, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, n], [0, n, 1], [1, n, 0])}[order]
    op = TensorOperation(target, num_threads=threads)
    op.setup(dtype, "none", "gemm", "none", "mnk", ["undefined"] * 3, [n, n, n], *strides)
    return op


def measure(n: int, args: argparse.Namespace, blas: BlasThreads) -> str:
    """One table row for size ``n``."""
    t = np.float32 if args.dtype == "fp32" else np.float64
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n)).astype(t), rng.standard_normal((n, n)).astype(t)
    C = np.zeros((n, n), t)
    if args.order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if args.order == "F" else (A, B, C)
    counts = (1, args.threads)
    ops = {c: operation(n, args.order, args.dtype, args.target, c) for c in counts}
    calls = {}
    for c, op in ops.items():
        both = checked_gemm_calls({"minijit": op}, A, B, C, bufs)
        calls[("minijit", c)], calls[("numpy", c)] = both["minijit"], both["numpy"]
    flops = 2 * n**3
    reps = max(5, int(0.02 / (flops / 50e9)))
    blocks: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
    for _ in range(args.rounds):
        for (side, c), call in calls.items():
            with blas.limit(c):
                time.sleep(PAUSE_S)
                blocks[(side, c)].append(timeit(call, reps, warmup=1, min_warm_s=0))
    best = {key: statistics.median(v) for key, v in blocks.items()}
    rate = {key: flops / v / 1e9 for key, v in best.items()}
    cells = [f"{rate[('minijit', c)]:.1f} / {rate[('numpy', c)]:.1f}" for c in counts]
    ratios = [f"{best[('numpy', c)] / best[('minijit', c)]:.2f}x" for c in counts]
    speedup = best[("minijit", 1)] / best[("minijit", args.threads)]
    used = ops[args.threads].threads_used
    return f"| {n} | {cells[0]} | {ratios[0]} | {cells[1]} | {ratios[1]} | {speedup:.2f}x | {used} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated N of N x N x N")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--order", choices=["C", "F"], default="C")
    p.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32")
    p.add_argument("--target", default="native")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if args.threads < 2:
        p.error("--threads must be 2 or more (the row compares it with one thread)")
    blas = BlasThreads()
    if not blas.available():
        p.error("cannot set numpy's BLAS thread count (no threadpoolctl, no OpenBLAS symbol)")
    hw = report.hardware()
    native = hw["native_target"]
    print(f"# {report.describe_cpu(hw)}, {args.target} ({native} native), {args.dtype}, order {args.order}")
    t = args.threads
    print(
        f"| N | 1 thread minijit / numpy GFLOPS | ratio | {t} threads minijit / numpy | ratio"
        f" | minijit {t} / 1 | threads used |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        print(measure(int(size), args, blas), flush=True)


if __name__ == "__main__":
    main()
