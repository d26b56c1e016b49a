"""``import minijit`` is light (issue 55 part 5): a structural check in fresh interpreters, not a timing.

``import minijit`` loads the package, the `minijit.einsum` index and `minijit.einsum.tensordot`;
everything behind the public names (the JIT, the code generators, cffi's C parser, the CUDA,
sparse, dask, bench and CLI modules) loads on first use, and every public name still resolves.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: the minijit modules ``import minijit`` may load, and nothing else of minijit
LIGHT = {"minijit", "minijit.einsum", "minijit.einsum.tensordot"}

#: modules (and their submodules) that ``import minijit`` must not load
HEAVY = (
    # the JIT behind TensorOperation and einsum
    "minijit.einsum.api",
    "minijit.einsum.builder",
    "minijit.einsum.plan",
    "minijit.einsum.cuda",
    "minijit.tensor_operation",
    "minijit.optimizer",
    "minijit.schedule",
    "minijit.ir",
    "minijit.packing",
    "minijit.arrays",
    "minijit.parallel",
    "minijit.plan",
    "minijit.kernels",
    "minijit.runtime",
    "minijit.targets",
    "minijit.tune",
    "minijit.tune_store",
    # the other paths
    "minijit.cuda",
    "minijit.sparse",
    "minijit.sparseauto",
    "minijit.dask",
    "minijit.bench",
    "minijit.cli",
    # code generators and cffi's C parser
    "asm.x86_64",
    "asm.aarch64",
    "ptx",
    "pycparser",
    "cffi.cparser",
)

#: after a host einsum: none of the device, sparse, dask, bench or CLI paths
NOT_ON_HOST_EINSUM = (
    "minijit.einsum.cuda",
    "minijit.cuda",
    "minijit.sparse",
    "minijit.sparseauto",
    "minijit.dask",
    "minijit.bench",
    "minijit.cli",
    "asm.aarch64",
    "ptx",
)


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON document as its last line."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_import_minijit_loads_no_heavy_module():
    out = _fresh("import json, sys; import minijit; print(json.dumps(sorted(sys.modules)))")
    assert _loaded(out, HEAVY) == []
    assert {m for m in out if m.split(".")[0] == "minijit"} == LIGHT


def test_every_public_name_resolves():
    code = """
import json
import minijit
names = list(minijit.__all__)
missing = [n for n in names if n not in dir(minijit)]
ns = {}
for n in names:
    exec(f"from minijit import {n}", ns)
kinds = {n: type(getattr(minijit, n)).__name__ for n in names}
print(json.dumps({"names": names, "missing_dir": missing, "kinds": kinds}))
"""
    out = _fresh(code)
    assert out["missing_dir"] == []
    assert set(out["names"]) == set(out["kinds"])
    assert out["kinds"]["einsum"] == "function"
    assert out["kinds"]["tensordot"] == "function"


def test_einsum_is_the_function_whichever_submodule_loads_first():
    """``minijit.einsum`` (and ``minijit.einsum.tensordot``) name functions, as they always did,
    even when a program imports a submodule of the package before asking for the name."""
    code = """
import json, sys
import minijit.einsum.plan
import minijit.einsum.tensordot
import minijit
import numpy as np
a = np.arange(6, dtype=np.float32).reshape(2, 3)
c = minijit.einsum("ij,kj->ik", a, a)
pkg = sys.modules["minijit.einsum"]
print(json.dumps({
    "einsum": minijit.einsum is sys.modules["minijit.einsum.api"].einsum,
    "pkg_einsum": pkg.einsum is minijit.einsum,
    "tensordot": pkg.tensordot is minijit.tensordot and callable(pkg.tensordot),
    "ok": bool(np.allclose(c, a @ a.T)),
    "submodules": [type(minijit.ir).__name__, type(minijit.packing).__name__, type(pkg.plan).__name__],
}))
"""
    out = _fresh(code)
    assert out == {"einsum": True, "pkg_einsum": True, "tensordot": True, "ok": True, "submodules": ["module"] * 3}


def test_host_einsum_loads_no_device_or_sparse_path():
    code = """
import json, sys
import numpy as np
import minijit
from minijit.runtime.features import host
if host().isa == "x86_64":
    a = np.ones((8, 8), np.float32)
    minijit.einsum("ij,jk->ik", a, a)
print(json.dumps(sorted(sys.modules)))
"""
    out = _fresh(code)
    assert _loaded(out, NOT_ON_HOST_EINSUM) == []


def test_cache_info_lists_every_cache_before_first_use():
    out = _fresh("import json, minijit; print(json.dumps(sorted(minijit.cache_info())))")
    assert {"einsum.plans", "einsum.operations", "kernels", "loopnests", "cuda.kernels"} <= set(out)
