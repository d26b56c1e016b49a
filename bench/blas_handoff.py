"""Does numpy's threaded BLAS slow a minijit GEMM that runs right after it (and the reverse)?

OpenBLAS keeps its worker threads spinning for a while after a call; minijit's native team spins
too (`minijit.runtime.team.DEFAULT_SPIN`) before its workers sleep. On a host with as many cores
as threads, a minijit call made while numpy's workers still spin shares the cores with them.

The script alternates, ``--reps`` times, four timed conditions on the same arrays (``--n`` cubed,
fp32, ``--threads`` threads for both libraries): a minijit GEMM right after a numpy matmul, the
same after a pause of ``--pause`` seconds (past OpenBLAS's spin), and a numpy matmul right after
a minijit GEMM and after a pause. Medians (ms) and the slowdown of "right after" over "after a
pause" are printed. Run: ``python bench/blas_handoff.py [--n 1024] [--threads 2] [--reps 40]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from minijit import TensorOperation, parallel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--pause", type=float, default=0.3)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    op = TensorOperation("native", num_threads=args.threads)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (n, 0, 1), (0, 1, n), (n, 1, 0))
    for _ in range(3):  # warm both (team, pool, OpenBLAS's threads, pages)
        op.execute(a, b, c)
        np.matmul(a, b)
    times: dict[str, list[float]] = {k: [] for k in ("minijit after numpy", "minijit after pause")}
    times.update({k: [] for k in ("numpy after minijit", "numpy after pause", "quiet_blas + minijit after numpy")})

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    run_minijit, run_numpy = (lambda: op.execute(a, b, c)), (lambda: np.matmul(a, b, out=c))
    for rep in range(args.reps):
        order = [0, 4, 1, 2, 3] if rep % 2 == 0 else [1, 4, 0, 3, 2]  # alternate which condition runs first
        for cond in order:
            time.sleep(args.pause)
            if cond == 0:
                run_numpy()
                times["minijit after numpy"].append(timed(run_minijit))
            elif cond == 1:
                run_numpy()
                time.sleep(args.pause)
                times["minijit after pause"].append(timed(run_minijit))
            elif cond == 2:
                run_minijit()
                times["numpy after minijit"].append(timed(run_numpy))
            elif cond == 3:
                run_minijit()
                time.sleep(args.pause)
                times["numpy after pause"].append(timed(run_numpy))
            else:
                run_numpy()
                times["quiet_blas + minijit after numpy"].append(timed(lambda: (parallel.quiet_blas(), run_minijit())))
    print(f"# {n}^3 fp32, {args.threads} threads each, {args.reps} reps, pause {args.pause} s")
    print("| condition | median ms | min ms | max ms |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f} | {max(ts):.2f} |")
    for lib, other in (("minijit", "numpy"), ("numpy", "minijit")):
        right, paused = (statistics.median(times[f"{lib} after {x}"]) for x in (other, "pause"))
        print(f"{lib} right after {other} / after a pause: {right / paused:.3f}x")
    quiet = statistics.median(times["quiet_blas + minijit after numpy"])
    paused = statistics.median(times["minijit after pause"])
    print(f"quiet_blas + minijit right after numpy / minijit after a pause: {quiet / paused:.3f}x")


if __name__ == "__main__":
    main()
