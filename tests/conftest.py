"""Project-wide pytest configuration."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.asm.oracle import FORMS

#: tests never read the user's tuned blockings (`minijit.tune_store`): an empty path turns the
#: store off; tests of the store point it at a file of their own
os.environ["MINIJIT_TUNE_FILE"] = ""
#: nor the user's code cache (`minijit.runtime.codecache`): one of their own for the session
os.environ["MINIJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="minijit-code-cache-")
atexit.register(shutil.rmtree, os.environ["MINIJIT_CACHE_DIR"], ignore_errors=True)

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("default"),
    derandomize=True,  # CI is reproducible; local runs explore new examples
    print_blob=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

#: MINIJIT_EXAMPLES_SCALE multiplies the example counts of the slowest sweeps (default 1: the
#: budget that keeps `bash scripts/test` under 8 minutes on 2 cores; 4 for a deeper local run).
EXAMPLES_SCALE = float(os.environ.get("MINIJIT_EXAMPLES_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` hypothesis examples scaled by MINIJIT_EXAMPLES_SCALE (at least 1); the drawn space
    stays the same, only how many points of it one run visits changes."""
    return max(1, round(n * EXAMPLES_SCALE))


#: the environment that sets how many threads minijit and the BLAS use, as the session found it
THREAD_ENV = ("MINIJIT_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_SESSION_THREAD_ENV = {k: os.environ.get(k) for k in THREAD_ENV}


@pytest.fixture(autouse=True)
def _thread_environment_as_the_session_found_it(request):
    """A test starts with the session's thread settings: one that leaked OMP_NUM_THREADS=1 (a
    `distributed` cluster sets it in its parent process) would make every later test in the
    worker run minijit on one thread. The dask cluster's own tests run inside that change."""
    if "client" not in request.fixturenames:
        now = {k: os.environ.get(k) for k in THREAD_ENV}
        assert now == _SESSION_THREAD_ENV, f"an earlier test left the thread environment changed: {now}"


@pytest.fixture
def pin_host():
    """``pin_host("cascadelake")`` (a key of `minijit.runtime.profiles.PROFILES`) makes every host
    query answer as that recorded host for the rest of the test, so a decision test decides the
    same on every machine; minijit's caches are emptied when the pin starts and when the test ends
    (plans made for the pinned host never reach a later test)."""
    import minijit
    from minijit.runtime import features, profiles

    outer = features._pinned

    def pin(key: str):
        minijit.cache_clear()
        features._pinned = profiles.get(key)
        return features._pinned

    yield pin
    features._pinned = outer
    minijit.cache_clear()


@pytest.fixture(scope="module")
def dev():
    """The CUDA device, for the gpu tests; skips without a device, the CUDA bindings or ptxas."""
    from ptx import driver, toolchain

    if not driver.available():
        pytest.skip("no CUDA device or cuda-bindings not installed")
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    return driver.device()


@dataclass(frozen=True)
class CudaBackend:
    """Where kernel-launch tests run: ``driver`` has the `ptx.driver` API, ``dev`` its device."""

    name: str
    driver: Any
    dev: Any

    @property
    def simulated(self) -> bool:
        return self.name == "sim"

    def load(self, text: str, kernel: str, signature=None):
        """Assemble ``text`` with ptxas (when present; no spills) and load ``kernel``: (module, function)."""
        from ptx import toolchain

        if self.simulated and toolchain.find_ptxas() is None:
            mod = self.driver.load(text)
        else:
            cub = toolchain.compile(text, arch=self.dev.arch)
            assert cub[kernel].spills == 0, f"{kernel} spills"
            mod = self.driver.load(cub)
        return mod, mod.function(kernel, signature=signature)


@pytest.fixture(scope="module", params=["sim", pytest.param("gpu", marks=pytest.mark.gpu)])
def cuda_backend(request) -> CudaBackend:
    """Each launch test runs twice: in the PTX simulator (`ptx.simdriver`, always) and on the
    GPU (`ptx.driver`, marked gpu; skipped without a device, cuda-bindings or ptxas)."""
    if request.param == "sim":
        from ptx import simdriver

        return CudaBackend("sim", simdriver, simdriver.device())
    from ptx import driver

    return CudaBackend("gpu", driver, request.getfixturevalue("dev"))


def pytest_terminal_summary(terminalreporter) -> None:
    for isa, forms in FORMS.items():
        if forms:
            terminalreporter.write_line(
                f"{isa}: {len(forms)} distinct encoder forms checked byte-for-byte against llvm-mc"
            )


def pytest_sessionfinish(session) -> None:
    """An xdist worker hands the forms it checked to the controller (see pytest_testnodedown)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["llvm_forms"] = {isa: sorted(forms) for isa, forms in FORMS.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: merge the forms a finished worker checked."""
    for isa, forms in getattr(node, "workeroutput", {}).get("llvm_forms", {}).items():
        FORMS.setdefault(isa, set()).update(forms)
