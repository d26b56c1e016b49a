"""Threads on a host that does not give every core the same speed: pieces against the static split.

    python bench/team_pieces.py [--sizes 1024,2048,4096] [--rounds 12] [--order F|C] [--busy]

Every size is set up three times in one process: on all threads with the optimizer's default
(`minijit.optimizer.PIECES_PER_THREAD` shared iterations per thread, which the native team runs
as pieces that an idle thread can take over), on all threads with one shared iteration per
thread (``PIECES_PER_THREAD = 1``: each range is one piece, the static split), and on one
thread; numpy's matmul at the same thread count is the peer. The variants run in alternating
blocks of ``--reps`` calls per round (wall clock, median of the block, after a pause that lets
numpy's BLAS threads stop spinning), so each round compares
them under the same host conditions. ``--busy`` starts a busy loop pinned to the last CPU for
the whole run (another process competing for one core). Prints a Markdown table: the median
GFLOPS over rounds, the median per-round ratio against the static split, and how many rounds
ran below 1.5x the one-thread rate (a call held up by one slow thread).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit import TensorOperation, optimizer, parallel  # noqa: E402
from minijit.bench.configs import BUILTIN_CONFIGS  # noqa: E402
from minijit.bench.cpu import SETTLE_S, BlasThreads  # noqa: E402
from minijit.runtime.features import cpu_name  # noqa: E402


def operation(setup: dict, threads: int, pieces_per_thread: int) -> TensorOperation:
    """A TensorOperation set up with the optimizer's piece target set to ``pieces_per_thread``."""
    saved = optimizer.PIECES_PER_THREAD
    optimizer.PIECES_PER_THREAD = pieces_per_thread
    try:
        op = TensorOperation(num_threads=threads)
        op.setup(**setup)
    finally:
        optimizer.PIECES_PER_THREAD = saved
    return op


def block(fn, reps: int) -> float:
    """Median wall time of ``reps`` consecutive calls (seconds), after `SETTLE_S` of sleep (the
    previous variant's threads, numpy's BLAS threads above all, stop spinning meanwhile: a
    spinning BLAS thread takes a core from the next variant's workers)."""
    time.sleep(SETTLE_S)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(n: int, order: str, threads: int, rounds: int, reps: int, blas: BlasThreads) -> dict[str, list[float]]:
    setup = BUILTIN_CONFIGS[f"gemm-{n}" + ("-c" if order == "C" else "")].setup
    rng = np.random.default_rng(n)
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    c = np.zeros((n, n), np.float32)
    ops = {
        "pieces": operation(setup, threads, optimizer.PIECES_PER_THREAD),
        "static": operation(setup, threads, 1),
        "1 thread": operation(setup, 1, optimizer.PIECES_PER_THREAD),
    }
    shared = {k: op.iterations for k, op in ops.items()}
    flops = 2.0 * n**3
    calls = {k: (lambda op=op: op.execute(a, b, c)) for k, op in ops.items()}
    out: dict[str, list[float]] = {k: [] for k in (*ops, "numpy")}
    with blas.limit(threads):
        for fn in (*calls.values(), lambda: np.matmul(a, b, out=c)):
            fn()  # warm up
        for _ in range(rounds):
            for k, fn in calls.items():
                out[k].append(flops / block(fn, reps) / 1e9)
            out["numpy"].append(flops / block(lambda: np.matmul(a, b, out=c), reps) / 1e9)
    out["_shared"] = [float(shared["pieces"]), float(shared["static"])]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1024,2048,4096")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--order", choices=("F", "C"), default="F")
    p.add_argument("--threads", type=int, default=parallel.default_threads())
    p.add_argument("--busy", action="store_true", help="a busy loop pinned to the last CPU meanwhile")
    args = p.parse_args()
    if args.threads < 2:
        sys.exit("team_pieces: needs at least 2 threads")
    blas = BlasThreads()
    busy = None
    if args.busy:
        cpu = max(os.sched_getaffinity(0))
        busy = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        rows = [
            (n, measure(n, args.order, args.threads, args.rounds, args.reps, blas))
            for n in map(int, args.sizes.split(","))
        ]
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    print(f"- CPU: {cpu_name()}; {args.threads} threads; {args.order}-order fp32; numpy BLAS threads via {blas.how}")
    print(
        f"- date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC;"
        f" command: python bench/team_pieces.py {' '.join(sys.argv[1:])}"
    )
    print(
        f"- {args.rounds} rounds of {args.reps} calls per variant{'; busy loop on the last CPU' if args.busy else ''}\n"
    )
    print(
        "| n^3 | shared iterations (pieces / static) | pieces GFLOPS | static GFLOPS"
        " | pieces / static (median of rounds) | 1 thread | numpy | rounds < 1.5x 1 thread (pieces / static / numpy) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for n, r in rows:
        one = np.array(r["1 thread"])
        slow = {k: int((np.array(r[k]) < 1.5 * one).sum()) for k in ("pieces", "static", "numpy")}
        ratio = float(np.median(np.array(r["pieces"]) / np.array(r["static"])))
        it_p, it_s = (int(x) for x in r["_shared"])
        print(
            f"| {n} | {it_p} / {it_s} | {np.median(r['pieces']):.1f} | {np.median(r['static']):.1f} | {ratio:.2f}x"
            f" | {np.median(one):.1f} | {np.median(r['numpy']):.1f}"
            f" | {slow['pieces']} / {slow['static']} / {slow['numpy']} |"
        )


if __name__ == "__main__":
    main()
