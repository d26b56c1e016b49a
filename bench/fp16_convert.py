"""float16 <-> float32 conversion: minijit's kernel (`minijit.kernels.convert`) against numpy's
``astype``, alone and inside the float16 einsum route (`minijit.einsum.widen`).

    MINIJIT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \\
        python bench/fp16_convert.py [--elements 10000000] [--size 1024] [--rounds 7]

Rows: fp16 -> fp32 and fp32 -> fp16 of ``--elements`` contiguous elements (kernel vs astype), and
float16 ``ij,jk->ik`` at ``--size`` through minijit.einsum with the kernel vs with astype (the
kernel lookup patched to None; numpy's own float16 einsum, far slower, is not timed).
Rounds interleave the candidates; reported: the best over rounds of ``time.process_time``
(1 thread: this process's CPU time). Results are checked bit for bit against astype first.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import minijit
from minijit.kernels import convert


def cpu_best(f: Callable[[], object], reps: int) -> float:
    """The shortest of ``reps`` calls of ``f``, in CPU seconds."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        f()
        best = min(best, time.process_time() - t0)
    return best


def without_kernel(f: Callable[[], object]) -> Callable[[], object]:
    """``f`` with the conversion kernel lookup returning None (numpy's astype)."""

    def call() -> object:
        saved = convert.kernel
        convert.kernel = lambda src, dst: None
        try:
            return f()
        finally:
            convert.kernel = saved

    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=10_000_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    h = rng.standard_normal(args.elements).astype(np.float16)
    f = rng.standard_normal(args.elements).astype(np.float32) * np.float32(100)
    n = args.size
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    cands = {
        "fp16->fp32 kernel": (lambda: convert.to_float32(h), 3),
        "fp16->fp32 astype": (lambda: h.astype(np.float32), 3),
        "fp32->fp16 kernel": (lambda: convert.to_float16(f), 3),
        "fp32->fp16 astype": (lambda: f.astype(np.float16), 3),
        f"einsum f16 {n} kernel": (lambda: minijit.einsum("ij,jk->ik", a, b), 1),
        f"einsum f16 {n} astype": (without_kernel(lambda: minijit.einsum("ij,jk->ik", a, b)), 1),
    }
    assert np.array_equal(convert.to_float32(h).view(np.uint32), h.astype(np.float32).view(np.uint32))
    assert np.array_equal(convert.to_float16(f).view(np.uint16), f.astype(np.float16).view(np.uint16))
    e1, e2 = (cands[f"einsum f16 {n} {w}"][0]() for w in ("kernel", "astype"))
    assert np.array_equal(e1.view(np.uint16), e2.view(np.uint16))
    best = dict.fromkeys(cands, float("inf"))
    for _ in range(args.rounds):
        for name, (fn, reps) in cands.items():
            best[name] = min(best[name], cpu_best(fn, reps))
    threads = {k: os.environ.get(k) for k in ("MINIJIT_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    print(f"threads {threads}, loadavg {open('/proc/loadavg').read().split()[:3]}")
    print("| case | CPU ms (best) |")
    print("|---|---|")
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.2f} |")
    for pair in ("fp16->fp32", "fp32->fp16", f"einsum f16 {n}"):
        print(f"{pair}: astype / kernel = {best[pair + ' astype'] / best[pair + ' kernel']:.2f}x")


if __name__ == "__main__":
    main()
