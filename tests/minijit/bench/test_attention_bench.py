"""minijit bench attention (issue 50 part 4): the report's structure on --quick tiny shapes, every
result checked against numpy written out and the float64 reference (the times are not checked)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from minijit import cli
from minijit.attention import api
from minijit.bench import attention
from minijit.runtime import detected_host
from tests.minijit.attention.test_api import reference

X86 = detected_host().isa == "x86_64"
TINY = (attention.Shape(1, 2, 24, 40, 8), attention.Shape(1, 2, 24, 24, 8, True), attention.Shape(1, 3, 1, 300, 8))


def test_numpy_written_out_is_the_reference():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in ((2, 7, 5), (2, 9, 5), (2, 9, 5)))
    for causal in (False, True):
        got = attention.numpy_attention(q.copy(), k, v, causal, 0.5)
        np.testing.assert_allclose(got, reference(q, k, v, is_causal=causal, scale=0.5), rtol=0, atol=1e-12)


def test_shape_flops_count_visible_pairs():
    assert attention.Shape(1, 1, 4, 4, 2).flops() == 4 * 2 * 16
    assert attention.Shape(1, 1, 4, 4, 2, True).flops() == 4 * 2 * 10  # 1 + 2 + 3 + 4 pairs
    assert attention.Shape(2, 3, 2, 5, 1, True).flops() == 4 * 1 * 3 * 6
    with pytest.raises(ValueError, match="Shape.E"):
        attention.Shape(1, 1, 1, 1, 0)


def test_bench_attention_quick_report(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(attention, "QUICK", TINY)
    monkeypatch.setattr(attention, "SWEEP_G", (4, 6))
    monkeypatch.setattr(attention, "SWEEP_SX", (2, 3))
    out_json = tmp_path / "attention.json"
    argv = ["bench", "attention", "--quick", "--threads", "1,2", "--dtype", "fp32,fp64", "--rounds", "1", "--reps", "1"]
    rc = cli.main([*argv, "--sweep", "--json", str(out_json), "-q"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    data = json.loads(out_json.read_text())
    assert {"date", "command", "hardware", "versions", "settings", "results", "summary", "sweep"} <= set(data)
    rows = data["results"]
    assert [(r["dtype"], r["shape"], r["threads"]) for r in rows] == [
        (d, s.name, t) for d in ("fp32", "fp64") for s in TINY for t in (1, 2)
    ]
    torch = attention.reports.torch_module()
    for r in rows:
        assert r["check"]["ok"], r
        assert r["minijit_ms"] > 0 and r["numpy_ms"] > 0 and r["vs_numpy"] > 0, r
        assert 0 < r["model"]["softmax_share"] < 1, r
        assert (r["torch_check"]["ok"] and r["vs_torch"] > 0) if torch is not None else "torch_ms" not in r, r
        decode = r["L"] <= api.DECODE_MAX_ROWS
        assert r["path"].startswith("decode") == decode, r
        if X86 and not decode:
            assert r["path"].startswith("fused") and 0 <= r["measured_softmax_share"] <= 1, r
        assert f"| {r['shape']} | {r['dtype']} | {r['threads']} |" in printed
    assert [(s["dtype"], s["threads"]) for s in data["summary"]] == [(d, t) for d in ("fp32", "fp64") for t in (1, 2)]
    sweeps = data["sweep"]
    assert len(sweeps) == 2 * len(TINY)
    for s in sweeps:
        if X86 and not s["shape"].startswith("1x3"):
            assert s["ok"] and 1 <= s["chosen_rank"] <= s["tiles"] and s["chosen_over_best"] >= 1, s
            assert len(s["times_ms"]) == s["tiles"] >= 4
        else:
            assert "skipped" in s
    assert "plan over best" in printed and "geomean" in printed


@pytest.mark.skipif(not X86, reason="the fused kernel is x86-64 only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernel_without_softmax_leaves_the_stage_out(dtype):
    """The bench's measure of the softmax share: the kernel without its softmax stage runs (finite
    unnormalized products) and differs from the right result, which the full kernel gives."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((1, 2, 13, 8), (1, 2, 37, 8), (1, 2, 37, 8)))
    plan = api.AttentionPlan(
        q.shape, k.shape, v.shape, np.dtype(dtype), "none", tile=(6, 16 if dtype == np.float32 else 8)
    )
    want = reference(q, k, v)
    np.testing.assert_allclose(plan.execute(q, k, v), want, rtol=0, atol=3e-5)
    without = plan._execute(q, k, v, None, softmax=False)
    assert without.shape == want.shape and not np.allclose(without, want, atol=1e-2)


def test_bench_attention_cpu_clock_is_recorded_and_restored(monkeypatch, tmp_path, capsys):
    """``--clock cpu`` times by the process's CPU time (the clock named in the header and the
    JSON) and leaves the wall clock in place afterwards; an unknown clock is refused."""
    monkeypatch.setattr(attention, "QUICK", TINY[:1])
    seen = []
    monkeypatch.setitem(attention.CLOCKS, "cpu", lambda: seen.append(1) or time.process_time())
    out_json = tmp_path / "attention.json"
    argv = ["bench", "attention", "--quick", "--threads", "1", "--dtype", "fp32", "--rounds", "1", "--reps", "1"]
    rc = cli.main([*argv, "--clock", "cpu", "--json", str(out_json), "-q"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert seen, "the CPU clock was not used"
    assert json.loads(out_json.read_text())["settings"]["clock"] == "cpu"
    assert "clock: the process's CPU time" in printed
    assert attention._clock is time.perf_counter
    with pytest.raises(ValueError, match="clock must be"):
        attention.bench(TINY[:1], [1], ["fp32"], 1, 1, False, "x", clock="sundial")
    assert cli.main([*argv, "--clock", "sundial"]) == 2  # argparse's usage error
    assert "invalid choice: 'sundial'" in capsys.readouterr().err
