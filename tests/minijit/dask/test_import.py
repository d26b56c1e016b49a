"""Without dask: ``import minijit`` works, ``import minijit.dask`` says what to install."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# a child process in which dask and distributed cannot be imported (a meta path finder refuses them)
_NO_DASK = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Refuse())
import minijit
assert "dask" not in sys.modules
minijit.einsum("ij,jk->ik", [[1.0]], [[2.0]])
try:
    import minijit.dask
except ImportError as e:
    print(e)
else:
    print("imported")
"""


def test_import_minijit_without_dask_and_the_message():
    out = subprocess.run([sys.executable, "-c", _NO_DASK], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install minijit[dask]" in out.stdout, out.stdout + out.stderr


def test_message_when_dask_is_hidden_in_this_process(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)  # None in sys.modules: ImportError on import
    monkeypatch.setitem(sys.modules, "dask.array", None)
    monkeypatch.delitem(sys.modules, "minijit.dask", raising=False)
    with pytest.raises(ImportError, match=r"pip install minijit\[dask\]"):
        importlib.import_module("minijit.dask")
