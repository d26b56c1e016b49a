"""minijit.bench is a package of its own: no module imports minijit.cli, each imports first."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import minijit.bench

PACKAGE = Path(minijit.bench.__file__).parent
MODULES = ["minijit.bench", *(f"minijit.bench.{p.stem}" for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__")]


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def test_bench_never_imports_the_cli():
    assert {"minijit.bench.configs", "minijit.bench.cpu", "minijit.bench.cuda", "minijit.bench.spmm"} <= set(MODULES)
    for path in PACKAGE.glob("*.py"):
        assert not any(m == "minijit.cli" or m.startswith("minijit.cli.") for m in _imports(path)), path.name


def test_each_module_imports_first_in_a_fresh_interpreter():
    procs = {
        m: subprocess.Popen([sys.executable, "-c", f"import {m}"], stderr=subprocess.PIPE, text=True)
        for m in [*MODULES, "minijit.cli"]
    }
    for m, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (m, err)
