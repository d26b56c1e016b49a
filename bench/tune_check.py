"""Re-time the blockings `minijit tune` stored against the cache model's, for chosen classes.

    python bench/tune_check.py TUNED_JSON ROUNDS fp32:1024:CCC:1 [fp64:2048:FFF:2 ...]

Each class is dtype:size:order:threads (M = N = K = size; order: C/F of in0, in1, out, as
``minijit tune`` names them). Both plans are set up as the tuner sets them up (`minijit.tune`), run
once untimed, then ROUNDS alternating rounds (each plan once per round); the best time of each
gives GFLOPS and the ratio stored / model. Wall-clock time (``perf_counter``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from minijit import blocking, targets, tune, tune_store
from minijit import plan as plans


def check(file: Path, rounds: int, spec: str) -> str:
    """One line: the model's and the stored blocking of class ``spec`` with their GFLOPS."""
    dtype, size, order, threads = spec.split(":")
    n, th = int(size), int(threads)
    t = targets.get_cpu("native")
    cfg = tune.gemm_config(dtype, n, order)
    env = plans.Env(t, th, True, tuned=False)
    key = tune_store.class_key(dtype, (n, n, n), order, th)
    entry = tune_store.entries(t.name, file).get(key)
    if entry is None:
        return f"{key:<30} not in {file}"
    stored = tune_store.to_blocking(entry, "stored")
    model = tune.candidates(cfg, t.name, th, 1)[0]
    bufs, addrs = tune.operands(cfg)  # bufs: the memory addrs point into, alive until the end
    built = [plans.optimized(cfg, replace(env, blocking=b), thread_target=th) for b in (model, stored)]
    for p in built:
        plans.run_plan(p, *addrs)
    best = [float("inf")] * 2
    for _ in range(rounds):
        for i, p in enumerate(built):
            t0 = time.perf_counter()
            plans.run_plan(p, *addrs)
            best[i] = min(best[i], time.perf_counter() - t0)
    del bufs
    g = [2 * n**3 / b / 1e9 for b in best]

    def name(b: blocking.Blocking) -> str:
        return f"{b.m}x{b.n}x{b.k} br {b.br or '-'}"

    return (
        f"{key:<30} model {name(model)} {g[0]:7.1f} GFLOPS | stored {name(stored)} {g[1]:7.1f} GFLOPS"
        f"  {g[1] / g[0]:.2f}x"
    )


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for spec in argv[2:]:
        print(check(Path(argv[0]), int(argv[1]), spec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
