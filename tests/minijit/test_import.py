"""``import minijit`` is light (issue 55 part 5): a structural check in fresh interpreters, not a timing.

``import minijit`` loads the package, the `minijit.einsum` index, `minijit.einsum.tensordot` and
the host einsum's fast path (the generic tier and the code cache: a process's first einsum on a
warm cache runs at once); everything else behind the public names (the planner, the code
generators, cffi's C parser, the CUDA, sparse, dask, bench and CLI modules) loads on first use,
and every public name still resolves.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: the minijit modules ``import minijit`` may load, and nothing else of minijit
LIGHT = {
    "minijit",
    "minijit.einsum",
    "minijit.einsum.tensordot",
    "minijit._lazy",
    # the host einsum's fast path (the generic tier): no planner, generator or C parser
    "minijit.arrays",
    "minijit.cache",
    "minijit.einsum.api",
    "minijit.einsum.cached",
    "minijit.einsum.dtypes",  # which path a call takes (compiled or numpy's), its keywords
    "minijit.einsum.generic",
    "minijit.einsum.grammar",
    "minijit.einsum.keywords",
    "minijit.einsum.parse",
    "minijit.einsum.views",
    "minijit.errors",
    "minijit.jit",
    "minijit.kernels",
    "minijit.kernels.epilogue",  # the epilogue description kernels are keyed by (no generator)
    "minijit.kernels.generic",
    "minijit.limits",
    "minijit.runtime",
    "minijit.runtime.codecache",
    "minijit.runtime.device_arrays",
    "minijit.runtime.features",
    "minijit.runtime.memory",  # maps the cached generic kernel (ctypes, no C parser)
    "minijit.targets",
    "minijit.targets.aarch64",
    "minijit.targets.aarch64_sme",
    "minijit.targets.base",
    "minijit.targets.cuda",
    "minijit.targets.x86_64",
}

#: modules (and their submodules) that ``import minijit`` must not load
HEAVY = (
    # the planner and JIT behind TensorOperation and einsum's specialised plans
    "minijit.einsum.builder",
    "minijit.einsum.plan",
    "minijit.einsum.cuda",
    "minijit.tensor_operation",
    "minijit.optimizer",
    "minijit.schedule",
    "minijit.ir",
    "minijit.packing",
    "minijit.parallel",
    "minijit.plan",
    "minijit.kernels.x86_64",
    "minijit.kernels.aarch64",
    "minijit.runtime.kernel",
    "minijit.runtime.team",
    "minijit.runtime.emulator",
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
    "cffi",
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


def test_a_warm_process_first_einsum_loads_no_planner_generator_or_c_parser(tmp_path):
    """With the generic kernel in the code cache, a fresh process's first GEMM-like einsum maps its
    bytes and calls them: no planner, no code generator, no cffi, and no module at all imported
    by the call (structure, not timing)."""
    import os

    code = (
        "import json, sys, numpy as np, minijit; a = np.ones((64, 64), np.float32); before = set(sys.modules);"
        " r = minijit.einsum('ij,jk->ik', a, a); assert (r == 64).all();"
        " print(json.dumps([sorted(sys.modules), sorted(set(sys.modules) - before)]))"
    )
    env = {**os.environ, "MINIJIT_CACHE_DIR": str(tmp_path / "code"), "MINIJIT_JIT": "tiered"}
    for _ in range(2):  # the first process generates and stores the kernel, the second loads it
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    modules, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    heavy = ("minijit.einsum.plan", "minijit.tensor_operation", "asm", "cffi", "pycparser", "minijit.runtime.kernel")
    assert _loaded(modules, heavy) == []
    assert imported == []  # the fast path loaded with ``import minijit``: the first call only works
