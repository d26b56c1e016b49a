"""``minijit bench --einsum``: the cases are valid, rows check against numpy, the CLI wiring."""

from __future__ import annotations

import numpy as np
import pytest

from minijit import cli
from minijit.bench import einsum as bench_einsum
from minijit.einsum import parse_subscripts


def test_cases_are_valid_expressions():
    for case in bench_einsum.cases() + bench_einsum.cases(quick=True):
        if "tree" in case:
            assert len(case["sizes"]) == 9
            continue
        expr = parse_subscripts(case["subscripts"], *case["shapes"])
        assert len(expr.inputs) == len(case["shapes"]) >= 2
    first = bench_einsum.random_cases(3)
    assert first == bench_einsum.random_cases(3)  # fixed seed
    for case in first:
        ops = [np.empty(s) for s in case["shapes"]]
        info = np.einsum_path(case["subscripts"], *ops, optimize=True)[1]
        flops = float(info.split("Optimized FLOP count:")[1].split()[0])
        assert 1e7 <= flops <= 2e8


TINY = [
    {"name": "tiny-chain", "subscripts": "ij,jk,kl->il", "shapes": [(16, 8), (8, 12), (12, 4)], "description": "t",
     "kind": "real"},
    {"name": "tiny-tree", "tree": "[0,1],[1,2]->[0,2]", "sizes": (6, 5, 7), "description": "t", "kind": "real"},
]  # fmt: skip
TINY_RANDOM = [{"name": "random-0", "subscripts": "ab,bc->ca", "shapes": [(5, 6), (6, 7)], "description": "t",
                "kind": "random"}]  # fmt: skip


def test_bench_one_row_checks_and_ratios():
    row = bench_einsum.bench_one(TINY[0], "float64", 1, 1, bench_einsum.BlasThreads())
    assert row["check"]["ok"]
    # the cheaper chain order: (jk kl) then ij: 2 (8*12*4 + 16*8*4) flops, not 2 (16*8*12 + 16*12*4)
    assert row["flops"] == 2 * (8 * 12 * 4 + 16 * 8 * 4)
    peer = row["peers"][0]
    assert peer["name"] == "numpy.einsum"
    assert peer["ratio"] == pytest.approx(peer["time_s"] / row["time_s"])


def test_cli_einsum_runs_rows(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench_einsum, "cases", lambda quick=False: [dict(c) for c in TINY])
    monkeypatch.setattr(bench_einsum, "random_cases", lambda count=4: [dict(c) for c in TINY_RANDOM])
    monkeypatch.setattr(bench_einsum.report, "results_dir", lambda: tmp_path)
    rc = cli.main(["bench", "--einsum", "--reps", "1", "--threads", "1", "-q", "--write"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| tiny-chain | fp32 | 1 |" in out and "| tiny-tree |" in out and "| random-0 |" in out
    assert "geomean minijit/numpy.einsum: real expressions" in out
    written = list(tmp_path.glob("einsum_*.md"))
    assert len(written) == 1 and "command: `minijit bench --einsum" in written[0].read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--einsum", "--config", "gemm"], "--einsum runs its own cases"),
        (["bench", "--einsum", "--spmm"], "--einsum runs on the native CPU target"),
        (["bench", "--einsum", "--threads", "1,2"], "--einsum takes one --threads value"),
    ],
)
def test_cli_einsum_bad_arguments(argv, message, capsys):
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err
