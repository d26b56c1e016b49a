"""Complex einsum through `minijit.einsum` (`minijit.einsum.widen`: the real 4M formulation, or 3M
on steps of at least `widen.GAUSS_MIN` in m, n and k) against ``np.matmul`` (OpenBLAS
cgemm/zgemm) and ``np.einsum(optimize=True)``; both of minijit's routes are timed on every row
(the other one forced through `widen.GAUSS_MIN`), so the threshold can be read off the table.

    MINIJIT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \\
        python bench/einsum_complex.py [--sizes 256,512,1024] [--batched 16x256] [--rounds 5] [--clock process]

Rows: ``ij,jk->ik`` at n x n by n x n for each size, and ``bij,bjk->bik`` for each ``--batched``
BxN. Each round times every candidate in turn (best of ``reps`` calls), rounds interleaved;
reported: the best over rounds, in ms and GFLOP/s (8 real flops per complex multiply-add, for
3M too), and the ratios. ``--clock process`` times with ``time.process_time`` (this process's CPU
time: with 1 thread everywhere it leaves out the time other processes on a loaded host take;
meaningless with more threads, where it adds the threads' times up), ``wall`` with
``time.perf_counter``. Every result is checked against complex128 numpy first. Plans are built
before the first round.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import minijit
from minijit.einsum import widen

#: `widen.GAUSS_MIN` that forces each route
FORCE = {"3M": 1, "4M": 1 << 62}


def best_of(f: Callable[[], object], reps: int, clock: Callable[[], float]) -> float:
    """The shortest of ``reps`` calls of ``f``, in seconds of ``clock``."""
    times = []
    for _ in range(reps):
        t0 = clock()
        f()
        times.append(clock() - t0)
    return min(times)


def forced(route: str, f: Callable[[], object]) -> Callable[[], object]:
    """``f`` with minijit's complex steps forced onto ``route`` ("3M" or "4M")."""

    def call() -> object:
        saved, widen.GAUSS_MIN = widen.GAUSS_MIN, FORCE[route]
        try:
            return f()
        finally:
            widen.GAUSS_MIN = saved

    return call


def measure(dtype: type, batch: int, n: int, rounds: int, clock: Callable[[], float]) -> str:
    """One table row: ``n x n`` by ``n x n`` complex matrices of ``dtype`` (``batch`` of them when > 0)."""
    rng = np.random.default_rng(n + batch)
    shape = (batch, n, n) if batch else (n, n)
    a, b = ((rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype) for _ in range(2))
    subs = "bij,bjk->bik" if batch else "ij,jk->ik"
    mine = lambda: minijit.einsum(subs, a, b)  # noqa: E731
    calls = {
        "3M": forced("3M", mine),
        "4M": forced("4M", mine),
        "matmul": lambda: np.matmul(a, b),
        "einsum": lambda: np.einsum(subs, a, b, optimize=True),
    }
    exact = np.matmul(a.astype(np.complex128), b)
    for k, f in calls.items():  # plans built, pages touched, every result checked
        err = np.abs(f() - exact).max()
        assert err < 8 * n * np.finfo(a.real.dtype).eps, (k, err)  # a sanity check: a wrong product is off by O(1)
    reps = 3 if n >= 1024 else 7
    t = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for k, f in calls.items():
            t[k] = min(t[k], best_of(f, reps, clock))
    auto = "3M" if n >= widen.GAUSS_MIN else "4M"
    gf = 8.0 * max(batch, 1) * n**3 / 1e9
    ms = {k: v * 1e3 for k, v in t.items()}
    return (
        f"| {np.dtype(dtype).name} | {subs} | {f'{batch}x' if batch else ''}{n} | {auto} "
        f"| {ms['3M']:.2f} ({gf / t['3M']:.1f}) | {ms['4M']:.2f} ({gf / t['4M']:.1f}) "
        f"| {ms['matmul']:.2f} ({gf / t['matmul']:.1f}) | {ms['einsum']:.2f} "
        f"| {t['matmul'] / t[auto]:.2f}x | {t['einsum'] / t[auto]:.2f}x | {t['4M'] / t['3M']:.2f}x |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,512,1024")
    p.add_argument("--batched", default="16x256", help="BxN rows of bij,bjk->bik, comma-separated ('' for none)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clock", choices=("process", "wall"), default="wall")
    p.add_argument("--dtypes", default="complex64,complex128")
    args = p.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    threads = {v: os.environ.get(v, "unset") for v in ("MINIJIT_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(f"threads: {threads}; clock: {args.clock}; GAUSS_MIN = {widen.GAUSS_MIN}")
    print(f"load before: {open('/proc/loadavg').read().split()[:3]}")  # noqa: SIM115 - one read
    print(
        "| dtype | einsum | n | minijit route | 3M ms (GFLOP/s) | 4M ms (GFLOP/s) | np.matmul ms (GFLOP/s) "
        "| np.einsum(optimize=True) ms | np.matmul / minijit | np.einsum / minijit | 4M / 3M |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [(0, int(s)) for s in args.sizes.split(",") if s]
    rows += [tuple(int(x) for x in s.split("x")) for s in args.batched.split(",") if s]
    for dtype in args.dtypes.split(","):
        for batch, n in rows:
            print(measure(np.dtype(dtype).type, batch, n, args.rounds, clock), flush=True)
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")  # noqa: SIM115 - one read


if __name__ == "__main__":
    main()
