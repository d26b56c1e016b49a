"""bench/gemm_blocking.py: forced prim maxima reach the compiled kernel, results are checked, and
a malformed --blocking is refused before anything is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from minijit.kernels import native_target

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gemm_blocking.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not native_target().startswith("x86_64"), reason="times native x86-64 kernels")
def test_forced_blocking_is_compiled_and_checked():
    out = _run(
        "--size",
        "96",
        "--target",
        native_target(),
        "--threads",
        "1",
        "--rounds",
        "1",
        "--reps",
        "1",
        "--blocking",
        "32x48x16:2",
        "--dtype",
        "fp32",
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"model", "32x48x16:2", "numpy"}, out.stdout
    # the forced row's kernel call: prim M 32, N 48, two BR steps of K 16
    assert "one kernel call: 32 x 48 x 32 (2 BR steps of 16)" in rows["32x48x16:2"], rows["32x48x16:2"]
    assert "32 x 48 x 32" not in rows["model"]


@pytest.mark.parametrize("bad", ["1x2", "axbxc", "4x4x0", "4x4x4:x"])
def test_bad_blocking_is_refused(bad):
    out = _run("--size", "8", "--blocking", bad)
    assert out.returncode == 2
    assert f"--blocking {bad!r}" in out.stderr
