"""`minijit.sparse.SpMM` on the CPU before and after it went through the shared sparse layer.

    python bench/spmm_layer_ab.py OLD_TREE [--rounds 5] [--reps 20] [--n 64 256]
    python bench/spmm_layer_ab.py --nest [--rounds 5] [--reps 20] [--n 64 256]

``OLD_TREE``: a directory holding the sources of the commit before the change (``git archive
<commit> minijit asm ptx | tar -x -C OLD_TREE``). Each round runs one process on the old tree,
then one on this tree (interleaved, so both see the same load), each timing ``op.execute(B, C)``
on the matrices of `minijit.bench.spmm.matrices` (quick sizes) at each N: the best of ``reps``
calls, wall time and the process's CPU time (all threads) per call. The best over rounds is
printed as a markdown table, with the load average before and after.

``--nest``: in one process, interleaved, the layer's two ways to run ``ij,jk->ik`` on a CSR
tensor: sparse einsum's generated nest (`compile_einsum`, then ``execute``) and `SpMM`'s CSR
route (``op.execute``); CPU time per call, best over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_ONE = r"""
import json, sys, time
import numpy as np
from minijit.bench.spmm import matrices
from minijit.sparse import SpMM

reps, ns = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")]
out = []
for name, _, s in matrices(np.random.default_rng(0), quick=True):
    for n in ns:
        b = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float32)
        c = np.empty((s.shape[0], n), np.float32)
        op = SpMM(s, n, target="native")
        op.execute(b, c)
        assert np.allclose(c, s @ b, rtol=1e-4, atol=1e-3), name
        wall = cpu = float("inf")
        for _ in range(reps):
            t0, p0 = time.perf_counter(), time.process_time()
            op.execute(b, c)
            wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - p0)
        out.append({"matrix": name, "nnz": int(s.nnz), "n": n, "wall": wall, "cpu": cpu, "threads": op.threads})
print(json.dumps(out))
"""


def _run(tree: Path, reps: int, ns: list[int]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, "-c", _ONE, str(reps), ",".join(map(str, ns))]
    res = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


_NEST = r"""
import json, sys, time
import numpy as np
from minijit.bench.spmm import matrices
from minijit.sparse import SpMM
from minijit.sparseauto import compile_einsum
from minijit.sparseauto.tensor import SparseTensor

rounds, reps, ns = int(sys.argv[1]), int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
out = []
for name, _, s in matrices(np.random.default_rng(0), quick=True):
    t = SparseTensor.from_scipy(s)
    for n in ns:
        b = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float32)
        c = np.empty((s.shape[0], n), np.float32)
        nest, _ = compile_einsum("ij,jk->ik", t, b)
        op = SpMM(s, n, target="native")
        op.execute(b, c)
        want = s @ b
        assert np.allclose(nest.execute(t, b), want, rtol=1e-4, atol=1e-3), name
        assert np.allclose(c, want, rtol=1e-4, atol=1e-3), name
        best = {"nest": float("inf"), "spmm": float("inf")}
        for _ in range(rounds):
            for key, f in (("nest", lambda: nest.execute(t, b)), ("spmm", lambda: op.execute(b, c))):
                for _ in range(reps):
                    p0 = time.process_time()
                    f()
                    best[key] = min(best[key], time.process_time() - p0)
        out.append({"matrix": name, "nnz": int(s.nnz), "n": n, **best})
print(json.dumps(out))
"""


def nest_table(rounds: int, reps: int, ns: list[int]) -> None:
    """The ``--nest`` comparison (see the module docstring), printed as markdown."""
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    args = [sys.executable, "-c", _NEST, str(rounds), str(reps), ",".join(map(str, ns))]
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True)
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average before: {' '.join(load0)}, after: {' '.join(load1)}; rounds {rounds}, reps {reps}")
    print()
    print("| matrix | nnz | N | generated nest CPU µs | SpMM CSR route CPU µs | route/nest |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in json.loads(res.stdout.strip().splitlines()[-1]):
        print(
            f"| {r['matrix']} | {r['nnz']} | {r['n']} | {r['nest'] * 1e6:.0f} | {r['spmm'] * 1e6:.0f} "
            f"| {r['spmm'] / r['nest']:.2f} |"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path, nargs="?")
    p.add_argument("--nest", action="store_true", help="the generated nest against the CSR route, this tree only")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--n", type=int, nargs="+", default=[64, 256])
    a = p.parse_args()
    if a.nest:
        nest_table(a.rounds, a.reps, a.n)
        return
    if a.old is None:
        p.error("OLD_TREE is needed unless --nest")
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    best: dict[tuple[str, int], dict[str, float]] = {}
    for _ in range(a.rounds):
        for label, tree in (("before", a.old.resolve()), ("after", ROOT)):
            for r in _run(tree, a.reps, a.n):
                key = (r["matrix"], r["n"])
                row = best.setdefault(key, {"nnz": r["nnz"], "threads": r["threads"]})
                for t in ("wall", "cpu"):
                    row[f"{label}_{t}"] = min(row.get(f"{label}_{t}", float("inf")), r[t])
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average before: {' '.join(load0)}, after: {' '.join(load1)}; rounds {a.rounds}, reps {a.reps}")
    print()
    print("| matrix | nnz | N | threads | wall µs before | after | CPU µs before | after | CPU after/before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for (name, n), r in best.items():
        ratio = r["after_cpu"] / r["before_cpu"]
        ratios.append(ratio)
        us = {k: f"{v * 1e6:.0f}" for k, v in r.items() if k.endswith(("_wall", "_cpu"))}
        print(
            f"| {name} | {r['nnz']} | {n} | {r['threads']} | {us['before_wall']} | {us['after_wall']} "
            f"| {us['before_cpu']} | {us['after_cpu']} | {ratio:.3f} |"
        )
    geo = 1.0
    for x in ratios:
        geo *= x
    print(f"\ngeomean after/before (CPU time): {geo ** (1 / len(ratios)):.3f}")


if __name__ == "__main__":
    main()
