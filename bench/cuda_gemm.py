"""Benchmark the generated tensor-core GEMM/BRGEMM kernels against torch (cuBLAS) on a GPU.

    python bench/cuda_gemm.py [--iters 20] [--size 8192]

A thin wrapper of ``minijit bench cuda --write`` (the cases and the measurement are in
`minijit.bench.cuda`): fp16, bf16 and fp32-as-tf32 GEMMs of M = N = K = size against
``torch.matmul`` and the three seed 004 configurations scaled up against ``torch.einsum``. Prints
the table and writes ``bench/results/cuda_<date>.md`` (device, driver, torch and ptxas versions,
date, command). Without a GPU, ptxas or torch with CUDA it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()
    from minijit import cli

    return cli.main(["bench", "cuda", "--size", str(args.size), "--iters", str(args.iters), "--write"])


if __name__ == "__main__":
    sys.exit(main())
