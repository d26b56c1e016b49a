"""SpMM benchmark: TCA-SpMM (fp16 tensor cores) vs cuSPARSE on a GPU; the native CPU kernel vs scipy.

    python bench/spmm.py [--n 128 256 512] [--repeats 5] [--threads T] [--no-write]

A thin wrapper of ``minijit bench spmm --write`` (matrices, measurement and checks are in
`minijit.bench.spmm`): synthetic DLMC-like and SuiteSparse-like matrices; with a CUDA device
(``ptx.driver.available()``) TCA-SpMM against cuSPARSE with speedups and their geometric mean,
otherwise a line that the GPU rows are pending; always the JIT'd native kernel (fp32) against
``scipy.sparse``. Every row is checked against scipy (a wrong result exits 1). Writes
``bench/results/spmm_<date>.md`` (``spmm_cpu_<date>.md`` without GPU rows) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from minijit import cli

    argv = ["bench", "spmm", "--n", ",".join(map(str, args.n)), "--reps", str(args.repeats)]
    argv += ["--threads", str(args.threads)] if args.threads is not None else []
    argv += [] if args.no_write else ["--write"]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
