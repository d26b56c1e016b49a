"""The fuzz suite (issue 40): every public entry point called the way a hostile user would.

Each batch runs in a child process (`tests.fuzz.runner`), so a crash of native code fails the
batch with the example that was drawn last instead of taking pytest down. An example ends in the
numpy result or in ValueError/TypeError (SetupError included) with every output untouched.
``MINIJIT_FUZZ_SCALE`` sizes the campaign: 1 (the default, CI) runs each batch's CI count (about
a minute on one core); N > 1 runs N times each batch's per-scale count, which gives every CPU entry
point (TensorOperation on each CPU target, SpMM, each of einsum / EinsumPlan / contract_path,
which share one batch, and einsum with sparse operands) 500 * N examples: 10,000 at N = 20. The
simulated CUDA batches run N times their CI count.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minijit.cuda import CudaTensorOperation
from minijit.runtime import features
from ptx import simdriver
from tests.fuzz import cases
from tests.fuzz.runner import _Cai

ROOT = Path(__file__).resolve().parents[2]
SCALE = int(os.environ.get("MINIJIT_FUZZ_SCALE", "1") or 1)
#: the hypothesis seed of every batch (a new one per session unless MINIJIT_FUZZ_SEED is set)
SEED = int(os.environ.get("MINIJIT_FUZZ_SEED") or random.SystemRandom().randrange(1 << 31))
#: (entry, examples at scale 1 (CI), extra argument, examples per unit of scale above 1): AArch64
#: and CUDA run in emulation, so few in CI; the einsum batch serves three entry points
BATCHES = [
    ("cpu", 500, "x86_64-avx2", 500),
    ("cpu", 500, "x86_64-avx512", 500),
    ("cpu", 12, "aarch64-neon", 500),
    ("cpu", 12, "aarch64-sve", 500),
    ("cuda", 4, None, 4),
    ("spmm", 200, "native", 500),
    ("spmm", 5, "cuda", 5),
    ("einsum", 300, None, 1500),
    ("sparse", 100, None, 500),
]


def batch_examples(ci: int, per_scale: int, scale: int = SCALE) -> int:
    """Examples of a batch at ``scale`` (see the module docstring)."""
    return ci if scale <= 1 else per_scale * scale


def _runnable(entry: str, extra: str | None) -> str | None:
    """Why this batch cannot run on this host (None: it can)."""
    host = features.host()
    if entry == "cpu" and extra and extra.startswith("x86_64"):
        if host.isa != "x86_64":
            return f"{extra} needs an x86-64 host"
        if extra.endswith("avx512") and not host.avx512:
            return "the host lacks AVX-512"
        if extra.endswith("avx2") and not host.avx2:
            return "the host lacks AVX2"
    return None


def run_batch(entry: str, examples: int, extra: str | None, seed: int = SEED, timeout: float = 3000) -> dict:
    """Run one batch in a child; fail with the last drawn example when the child dies."""
    args = [sys.executable, "-m", "tests.fuzz.runner", entry, str(examples), str(seed)] + ([extra] if extra else [])
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    lines = proc.stdout.splitlines()
    summary = next((json.loads(line[8:]) for line in reversed(lines) if line.startswith("SUMMARY ")), None)
    if summary is None:
        last = next((line for line in reversed(lines) if line.startswith("EXAMPLE ")), "(none drawn)")
        where = f"fuzz child {args[3:]} (MINIJIT_FUZZ_SEED={seed})"
        pytest.fail(f"{where} died (exit {proc.returncode}) at {last}\nstderr:\n{proc.stderr[-4000:]}")
    if proc.returncode or summary["failed"]:
        where = f"{args[3:]} (MINIJIT_FUZZ_SEED={seed})"
        pytest.fail(f"{summary['failed']} failing examples in {where}:\n" + "\n".join(summary["failures"]))
    return summary


@pytest.mark.parametrize(
    ("entry", "ci", "extra", "per_scale"), BATCHES, ids=[f"{e}-{x or 'sim'}" for e, _, x, _ in BATCHES]
)
def test_fuzz(entry, ci, extra, per_scale):
    why = _runnable(entry, extra)
    if why:
        pytest.skip(why)
    examples = batch_examples(ci, per_scale)
    summary = run_batch(entry, examples, extra)
    counts = summary["counts"]
    assert counts["examples"] >= examples * 0.9  # hypothesis may draw a few duplicates less
    assert counts.get("result", 0) > 0  # some examples ran to a compared result


def test_crash_in_child_reports_example(tmp_path, monkeypatch):
    """A child that dies (here: SIGSEGV from a batch) fails the test with the last drawn example."""
    monkeypatch.setenv("MINIJIT_FUZZ_CRASH", "1")
    with pytest.raises(pytest.fail.Exception, match=r"died \(exit -11\) at EXAMPLE cpu"):
        run_batch("cpu", 3, "x86_64-avx2" if features.host().isa == "x86_64" else "aarch64-neon")


@pytest.mark.parametrize("which", [0, 1, 2])
def test_cuda_null_device_pointer_refused(which):
    """A device array whose data pointer is 0 is refused with ValueError naming it, out untouched."""
    setup = {
        "dtype": "fp32",
        "prim_first": "none",
        "prim_main": "gemm",
        "prim_last": "none",
        "dim_types": ["m", "n", "k"],
        "exec_types": ["undefined"] * 3,
        "dim_sizes": [3, 2, 4],
        "strides_in0": [1, 0, 3],
        "strides_in1": [0, 4, 1],
        "strides_out": [1, 3, 0],
    }
    op = CudaTensorOperation(driver=simdriver)
    op.setup(*setup.values())
    in0, in1, out, _ = cases.arrays_for(setup, np.random.default_rng(0))
    args = [_Cai.of(simdriver, x, "ok") for x in (in0, in1, out)]
    args[which].__cuda_array_interface__["data"] = (0, False)
    before = args[2].read()
    with pytest.raises(ValueError, match=("in0", "in1", "out")[which]):
        op.execute(*args)
    assert np.array_equal(args[2].read(), before)


def test_scale_twenty_is_ten_thousand_per_cpu_entry_point():
    """The campaign size the issue asks for: 10,000 examples per CPU entry point at scale 20
    (the einsum batch's three entry points share 30,000); CI's counts stay as they are."""
    for entry, ci, extra, per_scale in BATCHES:
        assert batch_examples(ci, per_scale, 1) == ci
        if entry != "cuda" and extra != "cuda":
            share = 3 if entry == "einsum" else 1
            assert batch_examples(ci, per_scale, 20) >= 10_000 * share
