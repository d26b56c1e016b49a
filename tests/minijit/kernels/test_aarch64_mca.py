"""llvm-mca estimates of the NEON BRGEMM K loop for the three modelled CPUs."""

from __future__ import annotations

import pytest

from minijit.kernels.aarch64 import mca


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_estimate_three_cpus(dtype):
    rows = mca.estimates(m=32, n=32, k=32, br_size=8, dtype=dtype, iterations=100)
    assert [r.mcpu for r in rows] == list(mca.MCPUS)
    for r in rows:
        assert r.cycles > 0 and r.fmas == (64 if dtype == "fp32" else 32)
        assert 0 < r.efficiency <= 100 and 0 < r.hw_efficiency <= 100
        assert r.model_pipes in (2, 3, 4)
    if dtype == "fp32":  # the target: >= 90 % of the model's FMA bound
        assert all(r.efficiency >= 90 for r in rows)


def test_table_and_errors():
    row = mca.estimate(m=16, n=4, k=4, mcpu="neoverse-v2", iterations=50)
    text = mca.table([row])
    assert text.startswith("| kernel |") and "neoverse-v2" in text and text.count("\n") == 3
    with pytest.raises(ValueError, match="kind"):
        mca.estimate(kind="unary")
    with pytest.raises(ValueError, match="isa"):
        mca.estimate(isa="avx2")
