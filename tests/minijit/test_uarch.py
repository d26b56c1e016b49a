"""Core models (`minijit.targets.uarch`) and the kernel order they decide (`schedule.kernel_n_outer`),
under each recorded host profile, held to the tune results recorded on the Cascade Lake guest
(tests/data/tune/cascadelake_2026-11-28.json). Decisions only: nothing here runs a kernel."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from minijit import TensorOperation, blocking
from minijit.runtime import profiles
from minijit.targets import uarch

RECORDED = json.loads((Path(__file__).parents[1] / "data" / "tune" / "cascadelake_2026-11-28.json").read_text())
STRIDES = {
    "C": lambda n: ([n, 0, 1], [0, 1, n], [n, 1, 0]),
    "F": lambda n: ([1, 0, n], [0, n, 1], [1, n, 0]),
}


def _gemm(n: int, dtype: str, order: str, threads: int, forced: tuple[int, int, int] | None = None):
    """A square GEMM of numpy arrays in ``order`` set up as `TensorOperation` does it (``forced``:
    prim maxima replacing the model's, as `minijit.tune` sets a candidate up)."""
    choose = blocking.choose
    if forced is not None:
        m, nn, k = forced
        blocking.choose = lambda *a, **kw: dataclasses.replace(choose(*a, **kw), m=m, n=nn, k=k)
    try:
        op = TensorOperation("native", num_threads=threads)
        op.setup(dtype, "none", "gemm", "none", "mnk", ["undefined"] * 3, [n, n, n], *STRIDES[order](n))
    finally:
        blocking.choose = choose
    return op


@pytest.mark.parametrize(
    ("key", "model"),
    [("zen3", uarch.ZEN), ("zen4", uarch.ZEN), ("cascadelake", uarch.INTEL_MESH), ("neoverse-v1", uarch.GENERIC)],
)
def test_each_profile_gets_its_core_model(pin_host, key, model):
    pin_host(key)
    assert uarch.core_model() is model


def test_core_model_reads_family_and_model_numbers():
    assert uarch._family_model("family 6 model 85 stepping 7") == (6, 85)
    assert uarch._family_model("implementer 0x41 part 0xd40") == (None, None)
    with pytest.raises(ValueError, match="llc_stream"):
        uarch.CoreModel("bad", {"avx2": 64}, 0.0)
    with pytest.raises(ValueError, match="fma_bytes"):
        uarch.CoreModel("bad", {"avx2": 0}, 8.0)


@pytest.mark.parametrize("key", profiles.X86_PROFILES)
@pytest.mark.parametrize("threads", [1, 2])
def test_n_outer_only_where_the_last_level_cache_feeds_it(pin_host, key, threads):
    """fp32 1024^3 C order: the A block of a call (4 MiB) exceeds L2, so ``n_outer`` re-reads it from
    L3 once per 6 columns; AMD's L3 keeps up with two 256-bit FMA pipes (measured 1.06x over
    m-outer on Zen 3), the Xeon mesh does not with two 512-bit ones (the recorded 1.88x)."""
    pin_host(key)
    op = _gemm(1024, "fp32", "C", threads)
    assert op.n_outer is (key != "cascadelake")
    # a small A block stays in L2 and n_outer keeps its streamed C everywhere (4096 x 64 fp32 panels)
    small = TensorOperation("native", num_threads=1)
    small.setup("fp32", "none", "gemm", "none", "mnk", ["undefined"] * 3, [4096, 4096, 64], *STRIDES["C"](4096))
    assert small.n_outer


@pytest.mark.parametrize("case", RECORDED["classes"], ids=lambda c: f"{c['dtype']}-{c['size']}-{c['order']}")
def test_cascadelake_model_runs_the_tuned_winners_kernel_order(pin_host, case):
    """Under the Cascade Lake profile the model's plan walks its kernel in the order of the plan
    that won the recorded tune, and the model prices the tuned blocking within 5 % of its own
    choice's transfer cycles plus the FMAs' cycles (bench/results/x86_64_cascadelake_tune_2026-11-28.md)."""
    pin_host(RECORDED["host"])
    n, dtype, order, threads = case["size"], case["dtype"], case["order"], case["threads"]
    model = _gemm(n, dtype, order, threads)
    tuned = _gemm(n, dtype, order, threads, tuple(case["tuned"]))
    assert (model.blocking.m, model.blocking.n, model.blocking.k) == tuple(case["model"])
    assert model.n_outer == tuned.n_outer is False
    item = 4 if dtype == "fp32" else 8
    mr = model.target_info.panel_column_bytes // item
    flops_per_cycle = 2 * uarch.core_model().fma_rate("avx512") / item
    fma_cycles = 2 * n**3 / flops_per_cycle
    cost = [
        sum(blocking.transfer_cycles((n, n, n), tuple(b), mr, item)) + fma_cycles
        for b in (case["model"], case["tuned"])
    ]
    assert cost[1] <= cost[0] * 1.05
