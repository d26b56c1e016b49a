"""Complex einsum ``ij,jk->ik`` through `minijit.einsum` (the real 4M formulation,
`minijit.einsum.widen`) against ``np.matmul`` (OpenBLAS cgemm/zgemm) and
``np.einsum(optimize=True)``, with the two parts of minijit's call timed alone: the 4M expansion
of B (`widen.expand_4m`) and the real GEMM on the expanded operands (minijit's and np.matmul's).

    MINIJIT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python bench/einsum_complex.py [--sizes 512,1024] [--rounds 5]

Each round times every candidate in turn (best of ``reps`` calls), rounds interleaved; reported:
the best over rounds, in ms and GFLOP/s (8 n^3 real flops per complex GEMM), and the ratios.
The result is checked against complex128 numpy first. Wall-clock time; no warm-up counted (every
plan is built before the first round).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import minijit
from minijit.einsum import widen


def best_of(f: Callable[[], object], reps: int) -> float:
    """The shortest of ``reps`` calls of ``f``, in seconds."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(dtype: type, n: int, rounds: int) -> str:
    """One table row for ``n x n`` by ``n x n`` complex matrices of ``dtype``."""
    rng = np.random.default_rng(n)
    a, b = ((rng.uniform(-1, 1, (n, n)) + 1j * rng.uniform(-1, 1, (n, n))).astype(dtype) for _ in range(2))
    a_real = widen.as_real(a).reshape(n, 2 * n)  # (I x 2J), read in place
    expanded = widen.expand_4m(b, 1).reshape(2 * n, 2 * n)  # (2J x 2K)
    calls = {
        "minijit": lambda: minijit.einsum("ij,jk->ik", a, b),
        "matmul": lambda: np.matmul(a, b),
        "einsum": lambda: np.einsum("ij,jk->ik", a, b, optimize=True),
        "expand": lambda: widen.expand_4m(b, 1),
        "real_minijit": lambda: minijit.einsum("ij,jk->ik", a_real, expanded),
        "real_matmul": lambda: np.matmul(a_real, expanded),
    }
    for f in calls.values():
        f()  # plans built, pages touched
    err = np.abs(minijit.einsum("ij,jk->ik", a, b) - a.astype(np.complex128) @ b).max()
    assert err < 4 * n * np.finfo(a.real.dtype).eps, err  # gamma_2n * 4 with |re|, |im| < 1
    reps = 3 if n >= 1024 else 7
    t = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for k, f in calls.items():
            t[k] = min(t[k], best_of(f, reps))
    gf = 8.0 * n**3 / 1e9
    ms = {k: v * 1e3 for k, v in t.items()}
    return (
        f"| {np.dtype(dtype).name} | {n} | {ms['minijit']:.1f} ({gf / t['minijit']:.1f}) | {ms['matmul']:.1f} "
        f"({gf / t['matmul']:.1f}) | {ms['einsum']:.1f} | {t['matmul'] / t['minijit']:.2f}x | "
        f"{t['einsum'] / t['minijit']:.2f}x | {ms['expand']:.2f} | {ms['real_minijit']:.1f} | {ms['real_matmul']:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="512,1024")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(
        "| dtype | n | minijit.einsum ms (GFLOP/s) | np.matmul ms (GFLOP/s) | np.einsum(optimize=True) ms "
        "| np.matmul / minijit | np.einsum / minijit | expand_4m ms | real GEMM, minijit ms | real GEMM, np.matmul ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype in (np.complex64, np.complex128):
        for n in (int(s) for s in args.sizes.split(",")):
            print(measure(dtype, n, args.rounds), flush=True)


if __name__ == "__main__":
    main()
