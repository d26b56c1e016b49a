"""numpy's and dask's own einsum tests, run from the installed packages (never copied here) with
``np.einsum`` / ``da.einsum`` replaced by `minijit.einsum` / `minijit.dask.einsum`: pytest in a
subprocess (an argument list, no shell) from a temporary directory holding a generated plugin that
makes the replacement. Any failure fails the test, with the subprocess's report. Deselected, with
its reason: dask's ``test_einsum_chunksizes`` (it asserts dask's own output chunks; minijit.dask picks block sizes
with its data-movement model, `minijit.dask.block_sizes`). Each run takes ~10-30 s.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: numpy's test deselected, and why (see the module docstring)
NUMPY_DESELECTED: dict[str, str] = {}
#: dask's test deselected, and why
DASK_DESELECTED = {
    "test_einsum_chunksizes": "asserts dask's own output chunks; minijit.dask's chunk model differs",
}


def _installed(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.is_file() else None


#: the plugin the subprocess loads first: ``{module}.einsum`` replaced by a counting wrapper of
#: ``{target}``; the count of calls is written to calls.txt when the session ends
PLUGIN = """import functools
import pathlib

import {module} as swapped
import {target_module}

_calls = 0


@functools.wraps({target})
def einsum(*args, **kwargs):
    global _calls
    _calls += 1
    return {target}(*args, **kwargs)


swapped.einsum = einsum


def pytest_sessionfinish(session, exitstatus):
    pathlib.Path("calls.txt").write_text(str(_calls))
"""


def _run_suite(tmp_path: Path, test_file: Path, swap: tuple[str, str, str], select: str | None, deselect) -> int:
    """pytest on the tests of ``test_file`` that ``select`` (a ``-k`` expression; None: all) names,
    less those of ``deselect``, in a subprocess that first replaces ``swap[0]``'s einsum by
    ``swap[2]`` (from module ``swap[1]``); fails with the subprocess's output unless every selected
    test passed (and at least one ran). Returns how many times minijit's function was called."""
    module, target_module, target = swap
    (tmp_path / "minijit_swap.py").write_text(PLUGIN.format(module=module, target_module=target_module, target=target))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    keyword = " and ".join(([f"({select})"] if select else []) + [f"not {name}" for name in deselect])
    args = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "minijit_swap", "-p", "no:cacheprovider"]
    args += ["-p", "no:xdist", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)]
    args += ["-k", keyword] if keyword else []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    report = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"{test_file.name} against minijit:\n{report}"
    assert " passed" in proc.stdout and " failed" not in proc.stdout, report
    return int((tmp_path / "calls.txt").read_text())


def test_numpys_einsum_tests_pass_against_minijit(tmp_path):
    test_file = _installed("numpy", "_core", "tests", "test_einsum.py")
    if test_file is None:
        pytest.skip("the installed numpy has no numpy/_core/tests/test_einsum.py (numpy < 2 or tests stripped)")
    calls = _run_suite(tmp_path, test_file, ("numpy", "minijit", "minijit.einsum"), None, NUMPY_DESELECTED)
    assert calls > 1000  # the tests ran on minijit's einsum (about 17000 calls with numpy 2.4)


def test_dasks_einsum_tests_pass_against_minijit_dask(tmp_path):
    pytest.importorskip("dask.array", reason="dask is not installed")
    test_file = _installed("dask", "array", "tests", "test_routines.py")
    if test_file is None:
        pytest.skip("the installed dask has no dask/array/tests/test_routines.py")
    swap = ("dask.array", "minijit.dask", "minijit.dask.einsum")
    calls = _run_suite(tmp_path, test_file, swap, "einsum", DASK_DESELECTED)
    assert calls > 40  # the tests ran on minijit.dask's einsum
