"""The shared thread pool under concurrent callers that ask for different sizes, and concurrent
callers of TensorOperation, einsum and SpMM that start no workers of their own."""

import os
import threading
import time

import numpy as np
import pytest

import minijit
from minijit import jit, parallel
from minijit.runtime import team as team_mod
from minijit.sparse import SpMM


def test_concurrent_callers_growing_the_pool_all_complete():
    # each caller asks for a larger pool than the last: the pool is replaced while others submit
    errors: list[BaseException] = []
    totals = [0] * 8
    barrier = threading.Barrier(len(totals))

    def caller(i: int) -> None:
        seen = [0] * 64
        lock = threading.Lock()

        def body(begin: int, end: int) -> None:
            with lock:
                for j in range(begin, end):
                    seen[j] += 1

        try:
            barrier.wait()
            for rep in range(20):
                parallel.run_range(body, len(seen), 2 + (i + rep) % 7)
            totals[i] = sum(seen)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(totals))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert totals == [20 * 64] * len(totals)


def _os_threads() -> int:
    """Threads of this process the kernel knows (Python threads and the native team's workers)."""
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in Linux /proc")
@pytest.mark.parametrize("backend", parallel.BACKENDS)
def test_concurrent_callers_start_no_workers_of_their_own(backend):
    """Six Python threads call a 2-thread TensorOperation, minijit.einsum and a 2-thread CPU SpMM at
    once: every call runs on the one team (native; its lock serializes them) or the one pool
    (python), so while they run the process never has more threads than before plus the callers
    and the watcher; the team is the same object with the same workers afterwards. Results match
    numpy."""
    if backend == "native" and team_mod.unsupported_reason() is not None:
        pytest.skip(team_mod.unsupported_reason())
    scipy_sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((160, 192), dtype=np.float32)
    b = rng.standard_normal((192, 224), dtype=np.float32)
    op = minijit.TensorOperation("native", num_threads=2)
    op.setup(
        "fp32",
        "zero",
        "gemm",
        "none",
        "mnk",
        ("undefined",) * 3,
        (160, 224, 192),
        (192, 0, 1),
        (0, 1, 224),
        (224, 1, 0),
    )
    s = scipy_sparse.random(300, 192, density=0.05, format="csr", dtype=np.float32, random_state=1)
    spmm = SpMM(s, 224, target="native", threads=2)
    want_gemm, want_spmm = a.astype(np.float64) @ b, s @ b

    def gemm() -> np.ndarray:
        out = np.empty((160, 224), np.float32)
        op.execute(a, b, out)
        return out

    calls = {
        "execute": gemm,
        "einsum": lambda: minijit.einsum("ik,kj->ij", a, b),
        "spmm": lambda: spmm.execute(b, np.empty((300, 224), np.float32)),
    }
    with parallel.forced_backend(backend), pytest.MonkeyPatch.context() as mp:
        # warm: the team and the pool exist at their sizes, and einsum's shape is specialised now
        # (its one persistent background thread started) rather than while the callers run
        mp.setattr(jit, "SPECIALISE_SECONDS", 0.0)
        for call in calls.values():
            call()
        jit.drain()
        team = parallel.team(2) if backend == "native" else None
        workers = team.workers if team is not None else None
        before = _os_threads()
        peak, stop, errors = [before], threading.Event(), []

        def watch() -> None:
            while not stop.is_set():
                peak.append(_os_threads())
                time.sleep(0.0005)

        def caller(name: str) -> None:
            try:
                for _ in range(8):
                    want = want_spmm if name == "spmm" else want_gemm
                    np.testing.assert_allclose(np.asarray(calls[name]()), want, rtol=1e-4, atol=1e-3)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        watcher = threading.Thread(target=watch)
        callers = [threading.Thread(target=caller, args=(name,)) for name in list(calls) * 2]
        watcher.start()
        for t in callers:
            t.start()
        for t in callers:
            t.join()
        stop.set()
        watcher.join()
    assert errors == []
    assert max(peak) <= before + len(callers) + 1, (before, max(peak))
    if team is not None:
        assert parallel.team(2) is team and team.workers == workers


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads Linux /proc")
def test_quiet_blas_stops_openblas_workers_and_numpy_restarts_them():
    """`quiet_blas` finds numpy's OpenBLAS in the process maps and stops the workers its threaded
    matmul started (the process is back to its thread count before that matmul); the next matmul
    starts them again with the right result. numpy's thread setting is left alone."""
    libs = parallel.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS in this process")
    a = np.random.default_rng(0).standard_normal((384, 384))
    want = np.einsum("ij,jk->ik", a, a)  # without BLAS
    assert parallel.quiet_blas() == len(libs)
    base = _os_threads()
    np.testing.assert_allclose(a @ a, want)
    started = _os_threads() - base  # OpenBLAS's workers, where it runs threaded
    assert parallel.quiet_blas() == len(libs)
    assert _os_threads() == base, started
    np.testing.assert_allclose(a @ a, want)
    assert _os_threads() == base + started


@pytest.mark.parametrize("cores", [1, 7, 96])
def test_default_threads_answers_as_the_pinned_host(monkeypatch, cores):
    """Without an environment override the thread count is a host decision: under a pinned
    profile it is that host's core count, not this machine's (issue 49)."""
    import dataclasses

    from minijit.runtime import features, profiles

    monkeypatch.delenv("MINIJIT_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    host = dataclasses.replace(profiles.get("cascadelake"), cores=cores)
    with features.pinned(host):
        assert parallel.default_threads() == cores
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert parallel.default_threads() == 3
        monkeypatch.setenv("MINIJIT_NUM_THREADS", "5")
        assert parallel.default_threads() == 5
    monkeypatch.delenv("MINIJIT_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert parallel.default_threads() == features.num_cpus()
