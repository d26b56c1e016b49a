"""Dispatch cost of threaded loop nests: the native team against the Python thread pool.

`noop_dispatch(threads)` times `minijit.parallel.run_loopnest` on a loop nest that
returns at once (each thread gets one iteration), so the figure is pure dispatch: publish,
wake, run, wait. `gemm_time(n, threads)` times ``TensorOperation.execute`` of a
square fp32 GEMM on C-order arrays set up with exec types ``undefined`` (the optimizer's
choice). Each runs every backend this host has ("native" team, "python" pool) in
alternating blocks, so drift hits both alike. `execute_overhead()` times ``execute`` of an
8-element add on one thread: the argument checks and the call, what every ``execute`` costs
before any thread is woken. `measure()` runs the set, `report()` formats the rows, `bench()` is
``minijit bench dispatch``. Every figure is a median of many calls; GEMM and add results are
checked against numpy.

    from minijit.bench import dispatch
    print(dispatch.report(dispatch.measure()))
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

import numpy as np

from minijit import parallel
from minijit.bench import report as reports
from minijit.bench.cpu import settle
from minijit.runtime import Kernel, runs_natively
from minijit.tensor_operation import TensorOperation

__all__ = [
    "DispatchRow",
    "available_backends",
    "bench",
    "noop_dispatch",
    "execute_overhead",
    "gemm_time",
    "measure",
    "report",
]

LOOPNEST = "void(const void*, const void*, void*, int64_t, int64_t)"


@dataclass(frozen=True)
class DispatchRow:
    """One measurement: ``seconds`` is the median per call (p10/p90 beside it)."""

    case: str
    backend: str
    threads: int
    seconds: float
    p10: float
    p90: float
    calls: int


def _noop() -> Kernel:
    """A native loop nest that returns at once."""
    if runs_natively("x86_64"):  # the no-op runs on this machine, whatever host is pinned
        from asm.x86_64 import Assembler
    else:
        from asm.aarch64 import Assembler  # type: ignore[assignment]
    a = Assembler()
    a.ret()
    return Kernel(a.code(), LOOPNEST, name="noop", unchecked=True)


def _interleaved(calls: dict[str, object], n: int, block: int, forced: bool = True) -> dict[str, np.ndarray]:
    """Seconds per call of each backend's ``call`` (a no-argument callable), ``n`` calls each,
    run in alternating blocks of ``block`` calls (after one warm-up block) so that drift on a
    shared host hits every backend alike (``forced``: under `parallel.forced_backend` of each key,
    else the keys are labels only)."""
    times = {b: [] for b in calls}
    clock = time.perf_counter

    def backend(b: str):
        return parallel.forced_backend(b) if forced else contextlib.nullcontext()

    for b, call in calls.items():  # warm-up: builds the team or the pool
        with backend(b):
            for _ in range(block):
                call()
    while min(len(t) for t in times.values()) < n:
        for b, call in calls.items():
            with backend(b):
                for _ in range(block):
                    t0 = clock()
                    call()
                    times[b].append(clock() - t0)
    return {b: np.asarray(t[:n]) for b, t in times.items()}


def _rows(case: str, threads: int, times: dict[str, np.ndarray]) -> list[DispatchRow]:
    rows = []
    for b, t in times.items():
        p10, p90 = np.percentile(t, (10, 90))
        rows.append(DispatchRow(case, b, threads, float(np.median(t)), float(p10), float(p90), len(t)))
    return rows


def noop_dispatch(threads: int = 2, backends: tuple[str, ...] | None = None, calls: int = 20000) -> list[DispatchRow]:
    """Seconds per `parallel.run_loopnest` of a no-op loop nest with ``threads`` iterations on
    ``threads`` threads, per backend (median of ``calls`` calls, interleaved in blocks of 500)."""
    kernel = _noop()
    fn = kernel.address

    def call() -> None:
        parallel.run_loopnest(fn, 0, 0, 0, threads, threads)

    times = _interleaved(dict.fromkeys(backends or available_backends(), call), calls, 500)
    return _rows("no-op loop nest", threads, times)


def execute_overhead(calls: int = 20000) -> list[DispatchRow]:
    """Seconds per ``TensorOperation.execute`` of an 8-element fp32 add on one thread (the caller's:
    backend "caller"), median of ``calls`` calls in blocks of 500: the checks of the three arrays
    and the call of the loop nest, nearly all of it overhead. The result is checked first."""
    op = TensorOperation(num_threads=1)
    op.setup("fp32", "none", "add", "none", ["c"], ["undefined"], [8], [1], [1], [1])
    a, b = np.arange(8, dtype=np.float32), np.full(8, 0.5, np.float32)
    c = np.full(8, np.nan, np.float32)
    op.execute(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    times = _interleaved({"caller": lambda: op.execute(a, b, c)}, calls, 500, forced=False)
    return _rows("execute() 8-elem add", 1, times)


def gemm_time(n: int, threads: int, backends: tuple[str, ...] | None = None, calls: int = 100) -> list[DispatchRow]:
    """Seconds per ``execute`` of an ``n``^3 fp32 GEMM C = A @ B on C-order arrays, exec types
    ``undefined``, with ``threads`` threads, per backend (median of ``calls``, interleaved in
    blocks of 10). The result is checked against numpy first."""
    op = TensorOperation(num_threads=threads)
    op.setup(
        "fp32", "zero", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [n, n, n],
        [n, 0, 1], [0, 1, n], [n, 1, 0],
    )  # fmt: skip
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    backends = backends or available_backends()
    for backend in backends:
        c[:] = np.nan
        with parallel.forced_backend(backend):
            op.execute(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * n)
    # numpy's BLAS threads spin on the cores for a while after the reference product: timed at
    # once, the team's workers would share their cores (2 vCPUs: a 256^3 GEMM ran 300 us on 2
    # threads, as on 1, against 167 us after the pause)
    settle()
    times = _interleaved(dict.fromkeys(backends, lambda: op.execute(a, b, c)), calls, 10)
    return _rows(f"gemm-{n} C-order", threads, times)


def measure(
    threads: int = 2,
    gemm_sizes: tuple[int, ...] = (256, 512),
    gemm_threads: tuple[int, ...] = (1, 2),
    calls: int = 20000,
    gemm_calls: int = 100,
) -> list[DispatchRow]:
    """No-op dispatch at ``threads`` threads and the GEMMs at ``gemm_threads``, for every backend
    this host has (`available_backends`)."""
    rows = noop_dispatch(threads, None, calls) + execute_overhead(calls)
    for n in gemm_sizes:
        for t in gemm_threads:
            rows += gemm_time(n, t, None, gemm_calls)
    return rows


def available_backends() -> tuple[str, ...]:
    """("native", "python") where the native team runs on this host, else ("python",)."""
    return ("native", "python") if _native_available() else ("python",)


def _native_available() -> bool:
    from minijit.runtime import team

    return team.unsupported_reason() is None


def report(rows: list[DispatchRow]) -> str:
    """A plain-text table: case, threads, backend, median / p10 / p90 in microseconds."""
    lines = [f"{'case':<20} {'threads':>7} {'backend':<8} {'median us':>10} {'p10 us':>9} {'p90 us':>9} {'calls':>6}"]
    for r in rows:
        lines.append(
            f"{r.case:<20} {r.threads:>7} {r.backend:<8} {r.seconds * 1e6:>10.2f} {r.p10 * 1e6:>9.2f}"
            f" {r.p90 * 1e6:>9.2f} {r.calls:>6}"
        )
    return "\n".join(lines)


#: (tiny calls, GEMM calls) per measurement: ``--quick`` and the default
CALLS = {True: (2000, 20), False: (20000, 100)}


def bench(threads: int, quick: bool, command: str, progress: reports.Progress = reports.quiet) -> reports.Report:
    """``minijit bench dispatch``: `measure` at ``threads`` threads (`CALLS` per row) as a report."""
    calls, gemm_calls = CALLS[quick]
    progress(f"dispatch: backends {', '.join(available_backends())}, {threads} threads")
    rows = measure(threads=threads, calls=calls, gemm_calls=gemm_calls)
    hw = reports.hardware()
    cpu = f"{reports.describe_cpu(hw)}, {hw['cores']} cores"
    header = [f"# minijit bench dispatch: {cpu} (medians of {calls} tiny calls)"]
    result = {
        **reports.meta(command),
        "hardware": hw,
        "versions": reports.versions(),
        "settings": {"threads": threads, "calls": calls, "gemm_calls": gemm_calls},
        "results": [asdict(r) for r in rows],
    }
    return reports.Report(header, [report(rows)], result, ok=True)
