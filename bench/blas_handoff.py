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
    run_minijit, run_numpy = (lambda: op.execute(a, b, c)), (lambda: np.matmul(a, b, out=c))
    pause = args.pause
    # condition: (what runs first, the pause after it, what is timed)
    conditions = {
        "minijit after numpy": (run_numpy, 0.0, run_minijit),
        "quiet_blas + minijit after numpy": (run_numpy, 0.0, lambda: (parallel.quiet_blas(), run_minijit())),
        "minijit after pause": (run_numpy, pause, run_minijit),
        "numpy after minijit": (run_minijit, 0.0, run_numpy),
        "numpy after pause": (run_minijit, pause, run_numpy),
    }
    times: dict[str, list[float]] = {name: [] for name in conditions}
    for rep in range(args.reps):
        names = list(conditions) if rep % 2 == 0 else list(reversed(conditions))  # alternate the order
        for name in names:
            first, gap, then = conditions[name]
            time.sleep(pause)
            first()
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            then()
            times[name].append((time.perf_counter() - t0) * 1e3)
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
