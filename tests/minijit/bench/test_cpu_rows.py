"""`minijit.bench.cpu` and `report.cpu_table`: the per-round record of a row and its spread column."""

from __future__ import annotations

import pytest

from minijit.bench import report
from minijit.bench.cpu import spread


def test_spread_is_the_slowest_round_over_the_best():
    assert spread([0.010]) == 0.0
    assert spread([0.010, 0.012, 0.011]) == pytest.approx(0.2)
    assert spread([2.0, 1.0]) == pytest.approx(1.0)
    for bad in ([], [0.01, 0.0], [-1.0]):
        with pytest.raises(ValueError, match="spread needs positive times"):
            spread(bad)


def _row(name: str, spread_mj: float | None, peer_spread: float | None) -> dict:
    row = {
        "config": name, "dtype": "fp32", "threads": 1, "time_s": 0.001, "unit": "GFLOPS", "rate": 10.0,
        "check": {"ok": True, "max_abs_err": 0.0},
        "peers": [{"name": "numpy.matmul", "rate": 9.0, "ratio": 10 / 9}],
    }  # fmt: skip
    if spread_mj is not None:
        row["spread"] = spread_mj
    if peer_spread is not None:
        row["peers"][0]["spread"] = peer_spread
    return row


def test_table_shows_spreads_only_for_rows_timed_in_rounds():
    table = report.cpu_table([_row("a", 0.034, 0.12), _row("b", None, None)])
    lines = table.splitlines()
    assert lines[0].endswith("| spread | check |")
    assert lines[2].endswith("| 3 % / 12 % | ok |") and lines[3].endswith("| - / - | ok |")
    plain = report.cpu_table([_row("c", None, None)])  # e.g. the einsum suite's rows
    assert "spread" not in plain and plain.splitlines()[2].endswith("| 1.11x | ok |")


def test_hardware_names_the_cpu_model_and_caches_and_the_header_shows_them():
    """Two hosts with one name (a KVM guest calls Zen 3 and Zen 4 "AMD EPYC") differ in the
    record: family/model and the caches the blocking model used."""
    from minijit import packing

    hw = report.hardware()
    l1, l2 = packing.cache_geometries()
    assert hw["caches"] == {"L1d": l1.size, "L2": l2.size, "L3": packing.last_level_cache_bytes()}
    assert isinstance(hw["cpu_id"], str)
    line = report.describe_cpu(hw)
    assert f"L2 {l2.size // 1024} KiB" in line and (hw["cpu"] or hw["isa"]) in line
    assert hw["cpu_id"] in line
    fake = {"cpu": "AMD EPYC", "cpu_id": "family 25 model 17", "caches": {"L1d": 32768, "L2": 1 << 20}}
    assert report.describe_cpu(fake) == "AMD EPYC (family 25 model 17; L1d 32 KiB, L2 1024 KiB)"
    assert report.describe_cpu({"cpu": "", "isa": "x86_64"}) == "x86_64"
