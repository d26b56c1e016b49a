"""``minijit bench einsum --dask``: the flags it refuses (the rows run in test_cluster)."""

from __future__ import annotations

import pytest

from minijit import cli


@pytest.mark.parametrize("extra", [["--target", "cuda"], ["--dtype", "fp64"], ["--threads", "2"]])
def test_dask_bench_refuses_cpu_and_gpu_flags(extra, capsys):
    assert cli.main(["bench", "einsum", "--dask", *extra]) == 2
    assert "--dask runs fp32 on CPU workers" in capsys.readouterr().err
