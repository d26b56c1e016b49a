"""Benchmark suites of the ``minijit bench`` command and their reports.

- `minijit.bench.configs`: `OpSpec`, the built-in configurations and suites, user config files;
- `minijit.bench.cpu`: operands, numpy reference, timing and the CPU suite (GFLOPS next to numpy);
- `minijit.bench.cuda`: tensor-core GEMM/BRGEMM rows against torch on a GPU (``minijit bench cuda``);
- `minijit.bench.spmm`: TCA-SpMM vs cuSPARSE and the CPU SpMM kernel vs scipy (``minijit bench spmm``);
- `minijit.bench.einsum`, `einsum_cuda`: einsum plans against np.einsum / torch.einsum (``minijit bench einsum``);
- `minijit.bench.dask`: `minijit.dask` against `dask.array.einsum` on a local cluster (``minijit bench einsum --dask``);
- `minijit.bench.sparse_einsum`: sparse contractions, chosen vs linear schedule, tensora, pydata sparse, scipy
  (``minijit bench sparse-einsum``);
- `minijit.bench.report`: tables, hardware and version facts, JSON and ``bench/results`` files, plots.

Each suite returns a `minijit.bench.report.Report`; `minijit.cli` parses the arguments, calls
the suite and prints or writes the report. Nothing here imports `minijit.cli`.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """A user error (arguments, config file, missing tool or device): one line, exit status 2."""
