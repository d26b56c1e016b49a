"""The GPU rows of minijit bench spmm (fp16 and tf32 column groups), run in the PTX simulator
with a stand-in timer and peer: the kernels' results are checked for real, the times are fixed."""

from __future__ import annotations

import types

import numpy as np
import pytest


class _FixedEvent:
    """An event pair that reports 1 ms (the simulator is never timed)."""

    def record(self, stream=None) -> None:
        pass

    def elapsed_ms(self, start) -> float:
        return 1.0


def test_gpu_rows_have_fp16_and_tf32_in_the_simulator():
    pytest.importorskip("scipy")
    from minijit.bench import spmm
    from ptx import driver, simdriver

    drv = types.SimpleNamespace(**{k: getattr(simdriver, k) for k in driver.API}, Event=_FixedEvent)
    rng = np.random.default_rng(0)
    lengths = np.array([0, 3, 70, 0, 9, 1, 0, 17])
    mats = [
        ("tiny_skewed", "8 rows, one long", spmm._csr(8, 80, lengths, rng)),
        ("tiny_fem", "FEM", spmm.fem_blocks(2, 2, rng)),
    ]
    calls = []

    def peer(s, b, reps, dtype):
        calls.append((b.dtype, dtype))
        return f"fake cuSPARSE {spmm.GPU_DTYPES[dtype]}", 2e-3

    rows = spmm.gpu_rows(mats, [8], 1, driver=drv, peer=peer)
    assert [(r["matrix"], r["dtype"]) for r in rows] == [
        ("tiny_skewed", "fp16"), ("tiny_skewed", "tf32"), ("tiny_fem", "fp16"), ("tiny_fem", "tf32"),
    ]  # fmt: skip
    assert calls == [(np.float16, "fp16"), (np.float32, "tf32")] * 2
    for r in rows:
        assert r["check"]["ok"] and r["check"]["max_abs_ref"] > 0, r
        assert r["time_s"] == pytest.approx(1e-3) and r["speedup"] == pytest.approx(2.0)
        assert isinstance(r["reordered"], bool) and not (r["dtype"] == "tf32" and r["reordered"])
    text = spmm.gpu_table(rows)
    lines = text.splitlines()
    assert (
        "| fp16 TFLOPS | cuSPARSE fp16 TFLOPS | fp16 speedup | tf32 TFLOPS | cuSPARSE fp32 TFLOPS | tf32 speedup |"
        in lines[0]
    )
    assert len(lines) == 2 + 2 and all(ln.endswith("| 2.00x | ok |") for ln in lines[2:])
    report = "\n".join(spmm.sections(rows, [], ""))
    assert "geometric-mean speedup of TCA-SpMM tf32 over fake cuSPARSE fp32: 2.00x" in report
    bad = dict(rows[1], check={"ok": False, "max_abs_err": 0.5, "max_abs_ref": 1.0})
    assert spmm.gpu_table([rows[0], bad]).splitlines()[2].endswith("| tf32 ERR 0.5 |")
    # every row times each kernel variant side by side (each checked against scipy for real)
    for r in rows:
        st = r["strategies"]
        assert list(st) == list(spmm.STRATEGY_VARIANTS)
        assert all(v["check"]["ok"] and v["time_s"] == pytest.approx(1e-3) for v in st.values()), st
        assert "seed 003" in st["tca"]["plan"] and "row windows of 16" in st["window16"]["plan"]
        assert "row windows of 8 (swapped" in st["window8"]["plan"]
    side = spmm.strategy_table(rows).splitlines()
    assert side[0].startswith("| matrix | N | dtype | tca us | window16 us | window8 us | auto ran | fastest |")
    assert len(side) == 2 + 4  # one line per row; equal (fixed) times: the first is the fastest
    assert all("| 1000.0 | 1000.0 | 1000.0 |" in ln and ln.endswith("| tca | 1.00x |") for ln in side[2:])
    assert [ln.split(" | ")[2] for ln in side[2:]] == ["fp16", "tf32", "fp16", "tf32"]
    assert "### Kernels side by side" in report
