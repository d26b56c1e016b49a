"""llvm-mca estimates of the NEON BRGEMM K loop for the three modelled CPUs."""

from __future__ import annotations

import pytest

from asm import llvm
from minijit.kernels.aarch64 import mca
from minijit.kernels.aarch64.brgemm import NeonBrgemm as neon_brgemm
from minijit.kernels.aarch64.unary import NeonUnary as neon_unary
from minijit.kernels.aarch64.unary import SveUnary as sve_unary


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


def test_loop_body_cuts_the_labelled_loop():
    """The K loop of a generated kernel, from its label through the branch back, reassembles."""
    a, kbody = neon_brgemm.program(32, 8, 32)
    body = mca.loop_body(a.listing(), "k")
    lines = [s.strip() for s in body.splitlines()]
    assert lines[-2:] == ["subs x11, x11, #1", "b.ne #-4"]
    assert [s.strip() for s in kbody.splitlines()] == lines[:-2]  # the generator's own K-loop text
    assert llvm.assemble(body)
    sve = mca.loop_body(sve_unary.program(64, 3).listing(), "row")
    assert "b.none #-4" in sve and sve.strip().endswith("b #-4") and ".L" not in sve
    with pytest.raises(ValueError, match="name"):
        mca.loop_body(a.listing(), "nope")


def test_estimate_loop_and_copy_estimate():
    a, _ = neon_brgemm.program(32, 8, 32)
    row = mca.estimate_loop(mca.loop_body(a.listing(), "k"), "neon", "32x8x32", "neoverse-v2", iterations=50)
    assert row.fmas == 64 and row.efficiency >= 90
    body = mca.loop_body(neon_unary.program(128, 4).listing(), "rows")
    copy = mca.copy_estimate(body, "neon", "copy", "neoverse-v2", iterations=50)
    assert copy.vectors == 4 and copy.cycles >= copy.bound > 0 and 0 < copy.efficiency <= 100
    sve = mca.copy_estimate(mca.loop_body(sve_unary.program(128, 4).listing(), "row"), "sve", "c", "neoverse-v2")
    assert sve.vectors == 4
    assert mca.copy_table([copy, sve]).count("\n") == 4
    with pytest.raises(ValueError, match="body"):
        mca.copy_estimate("    add x0, x0, #1", "neon", "none", "neoverse-v2")
