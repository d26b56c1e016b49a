"""A fresh process's first 64x64 fp32 ``minijit.einsum("ij,jk->ik", a, b)``, with a cold and a
warm persistent code cache (`minijit.runtime.codecache`; docs/decisions.md, "A persistent code
cache").

Each sample is a new Python process. It times the imports (``import numpy, minijit`` and resolving
``minijit.einsum``, which imports the einsum stack lazily) apart from the first call, which sets up
the operation: its plan, its kernels (generated, or loaded from the cache) and its loop nests.
Cold: every process gets an empty cache directory; warm: every process shares one that a first,
untimed process filled. Python's own bytecode cache is on and filled first (``--no-bytecode``:
``PYTHONDONTWRITEBYTECODE=1``, every import compiles its source), so both columns pay the same
imports.

    python bench/code_cache.py [--runs 5] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import time
t0 = time.perf_counter()
import numpy as np
import minijit
einsum = minijit.einsum
t1 = time.perf_counter()
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 64)).astype(np.float32)
b = rng.standard_normal((64, 64)).astype(np.float32)
t2 = time.perf_counter()
c = einsum("ij,jk->ik", a, b)
t3 = time.perf_counter()
assert np.allclose(c, a @ b, rtol=1e-4, atol=1e-4)
from minijit.runtime import codecache
s = codecache.info()
import json
print(json.dumps({"import_s": t1 - t0, "first_s": t3 - t2, "hits": s["hits"], "misses": s["misses"]}))
"""


def sample(cache: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env={**env, "MINIJIT_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="fresh processes per column (default 5)")
    p.add_argument("--no-bytecode", action="store_true", help="PYTHONDONTWRITEBYTECODE=1 in the children")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("MINIJIT_CACHE", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory(prefix="minijit-bench-code-cache-") as tmp:
        if args.no_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        sample(Path(tmp) / "prime-bytecode", env)
        warm = Path(tmp) / "warm"
        sample(warm, env)  # fills the warm cache (untimed)
        rows = {"cold": [], "warm": []}
        for i in range(args.runs):  # alternate the columns: drift in the host's load hits both
            rows["cold"].append(sample(Path(tmp) / f"cold{i}", env))
            rows["warm"].append(sample(warm, env))
    bytecode = "off" if args.no_bytecode else "on"
    print(f"python {sys.version.split()[0]}, bytecode {bytecode}, {args.runs} processes each")
    header = ("code cache", "first call, median (ms)", "all runs (ms)", "imports, median (ms)", "kernels loaded / made")
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|")
    for name, got in rows.items():
        first = [1000 * r["first_s"] for r in got]
        imports = [1000 * r["import_s"] for r in got]
        counts = {(r["hits"], r["misses"]) for r in got}
        print(
            f"| {name} | {statistics.median(first):.1f} | {' '.join(f'{x:.1f}' for x in first)} |"
            f" {statistics.median(imports):.0f} | {' '.join(f'{h} / {m}' for h, m in sorted(counts))} |"
        )


if __name__ == "__main__":
    main()
