"""Square GEMMs with forced prim maxima against the cache model's choice and numpy, in one process:
does another blocking beat `minijit.blocking.choose` on this host?

    python bench/gemm_blocking.py [--size 4096] [--dtype fp64] [--target x86_64-avx2]
                                  [--threads 2] [--order F] [--rounds 5] [--reps N]
                                  [--blocking 512x1024x256:1 ...]

A ``--blocking`` is ``MxNxK[:BR]``: the largest prim M, N and K (elements) and the most BR steps
per kernel call (`minijit.blocking.Blocking`; default: the model's cap), in place of the model's
choice; the rest of `setup()` runs as usual (an M-outer or ``n_outer`` kernel, packing and shared
loops follow from the prims). "model" is the operation as `setup()` builds it. Every variant and
``np.matmul`` (at ``--threads`` BLAS threads) are timed in alternating blocks of calls (a
`PAUSE_S` pause before each, so OpenBLAS's threads stop spinning); reported per variant: GFLOPS
of the median block, its range over the rounds, the ratio to numpy per round and their median.
Results are checked against numpy first. Wall clock (``perf_counter``), exec types undefined.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import numpy as np

from minijit import TensorOperation, blocking
from minijit.bench import report
from minijit.bench.cpu import BlasThreads, alternating_blocks, checked_gemm_calls

PAUSE_S = 0.25
DEFAULT_BLOCKINGS = ("256x256x256:1", "512x1024x256:1")


def parse_blocking(text: str) -> dict[str, int]:
    """``MxNxK[:BR]`` -> the `Blocking` fields it sets (raises ValueError naming the text)."""
    sizes, _, br = text.partition(":")
    try:
        m, n, k = (int(x) for x in sizes.split("x"))
        fields = {"m": m, "n": n, "k": k, **({"br": int(br)} if br else {})}
    except ValueError:
        raise ValueError(f"--blocking {text!r}: expected MxNxK or MxNxK:BR (positive integers)") from None
    if min(fields.values()) < 1:
        raise ValueError(f"--blocking {text!r}: every size must be positive")
    return fields


def operation(args: argparse.Namespace, forced: dict[str, int] | None) -> TensorOperation:
    """C = A B of ``args.size``^3, every operand in ``args.order``; ``forced``: `Blocking` fields
    that replace the model's (None: the model's choice)."""
    n = args.size
    strides = {"C": ([n, 0, 1], [0, 1, n], [n, 1, 0]), "F": ([1, 0, n], [0, n, 1], [1, n, 0])}[args.order]
    choose = blocking.choose
    if forced is not None:
        blocking.choose = lambda *a, **kw: dataclasses.replace(choose(*a, **kw), **forced)
    try:
        op = TensorOperation(args.target, num_threads=args.threads)
        op.setup(args.dtype, "none", "gemm", "none", "mnk", ["undefined"] * 3, [n, n, n], *strides)
    finally:
        blocking.choose = choose
    return op


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096, help="N of the N x N x N GEMM")
    p.add_argument("--dtype", choices=["fp32", "fp64"], default="fp64")
    p.add_argument("--target", default="x86_64-avx2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--order", choices=["C", "F"], default="F")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=None, help="calls per block (default: about 0.5 s of calls)")
    default = ", ".join(DEFAULT_BLOCKINGS)
    p.add_argument("--blocking", action="append", help=f"MxNxK[:BR] (repeatable; default: {default})")
    args = p.parse_args()
    if min(args.size, args.threads, args.rounds, args.reps or 1) < 1:
        p.error("--size, --threads, --rounds and --reps must be positive")
    try:
        variants = {"model": None} | {b: parse_blocking(b) for b in args.blocking or DEFAULT_BLOCKINGS}
    except ValueError as e:
        p.error(str(e))
    blas = BlasThreads()
    if not blas.available():
        p.error("cannot set numpy's BLAS thread count (no threadpoolctl, no OpenBLAS symbol)")
    t = np.float32 if args.dtype == "fp32" else np.float64
    rng = np.random.default_rng(0)
    n = args.size
    A, B, C = rng.standard_normal((n, n)).astype(t), rng.standard_normal((n, n)).astype(t), np.zeros((n, n), t)
    if args.order == "F":  # the buffers are handed over C-contiguous: the transposes
        A, B, C = (np.asfortranarray(x) for x in (A, B, C))
    bufs = (A.T, B.T, C.T) if args.order == "F" else (A, B, C)
    ops = {name: operation(args, forced) for name, forced in variants.items()}
    calls = checked_gemm_calls(ops, A, B, C, bufs)
    flops = 2 * n**3
    reps = args.reps or max(3, int(0.5 / (flops / 100e9)))
    with blas.limit(args.threads):
        blocks = alternating_blocks(calls, reps, args.rounds, PAUSE_S)
    hw = report.hardware()
    print(
        f"# {report.describe_cpu(hw)}, {args.target} ({hw['native_target']} native), {args.dtype}, "
        f"{n}^3 order {args.order}, {args.threads} thread(s), {args.rounds} rounds of {reps} calls"
    )
    print("| blocking | kernel call (`call_footprint`) | GFLOPS | min-max | minijit / numpy per round | median |")
    print("|---|---|---|---|---|---|")
    for name, times in blocks.items():
        rates = [flops / s / 1e9 for s in times]
        ratios = [b / s for s, b in zip(times, blocks["numpy"], strict=True)]
        call = "" if name == "numpy" else ops[name].call_footprint() + (" (n_outer)" if ops[name].n_outer else "")
        print(
            f"| {name} | {call} | {flops / statistics.median(times) / 1e9:.1f} | {min(rates):.1f}-{max(rates):.1f} "
            f"| {' '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.3f}x |"
        )


if __name__ == "__main__":
    main()
