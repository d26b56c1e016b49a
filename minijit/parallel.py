"""OpenMP-style scheduling (docs/decisions.md, "Threads without a C extension"): a native team
for compiled loop nests, a Python thread pool for Python callables.

`run_loopnest(fn, in0, in1, out, n, threads)` runs a native loop nest ``fn(in0, in1, out,
begin, end)`` over ``[0, n)``. On Linux x86-64 it dispatches on the process's native team
(`minijit.runtime.team`: JIT-generated worker threads that spin, then sleep in a futex),
which starts from the static split and lets an idle thread take
the pieces of a slowed one's range; elsewhere, or with ``MINIJIT_TEAM=python``
(read at the first dispatch), it runs the same pieces on the pool below (`run_pieces`).
Concurrent callers share the one team and are serialized by its lock. After ``os.fork``
the child builds a new team on first use.

`run_range(fn, n, threads)` splits ``[0, n)`` into ``threads`` contiguous chunks
and calls the Python callable ``fn(begin, end)`` for each on a persistent
`ThreadPoolExecutor`, the caller's thread running the first, returning when all
are done; `run_pieces(fn, n, threads)` calls it per piece, with the native team's
schedule (own range first, then the unclaimed pieces of the others). The compiled
loop nests release the GIL while they run (cffi), so the chunks execute in parallel.

Threads: ``MINIJIT_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the number
of CPUs this process may use. ``MINIJIT_TEAM``: ``native`` (default where
supported) or ``python`` (the pool, also for loop nests).

The thread model (docs/decisions.md, issue 36):

- Grid. A threaded GEMM's shared loops are outer parts of its M and N loop dims, so the threads own
  rectangles of its macro tiles (prim M x prim N blocks). `minijit.schedule.choose_grid` states
  the grid the IO model wants (``p_m`` x ``p_n``, rows and columns per thread within one of each
  other) and the listing shows it beside the grid the shared loops give; ``Rules(grid=True)``
  (opt-in) makes the shared loops that grid (`minijit.schedule.grid_loops`).
- Panel. One packed B in the last-level cache, read by every thread, where the whole B fits half of
  the slices the threads own (`minijit.packing.llc_share`: a shared cache counts ``size /
  sharers`` per thread, not all of it); else each thread streams its own rows of A and columns of
  B, and the grid is the one that moves the least (``A p_n + B p_m``).
- No oversubscription. Every call, from any Python thread (TensorOperation, einsum, SpMM), runs on
  the process's one team or the one pool: concurrent callers never start workers of their own
  (the team runs one job at a time; the pool has ``threads - 1`` workers for all callers).
  numpy's OpenBLAS keeps its workers spinning for a while after each call (about 2**28 cycles),
  and a minijit call made meanwhile shares the cores with them (bench/blas_handoff.py: about 2x
  slower on 2 cores). minijit never changes numpy's settings; `quiet_blas` (opt-in, when no other
  thread is inside a BLAS call) stops those workers now, and ``OPENBLAS_THREAD_TIMEOUT=4`` in the
  environment before numpy loads makes them sleep almost at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import cffi

from minijit.runtime import features
from minijit.runtime import team as _team_mod

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_LOCK = threading.Lock()
_TEAM: _team_mod.Team | None = None
_TEAM_LOCK = threading.Lock()
_FORCED: str | None = None
_ENV_BACKEND: str | None = None
_FFI = cffi.FFI()
LOOPNEST_SIGNATURE = "void(*)(uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t)"
BACKENDS = ("native", "python")


def default_threads() -> int:
    """Threads to use when the caller does not say: the environment, then the CPUs this process
    may run on (`features.num_cpus`, the pinned profile's cores under `features.pinned`)."""
    for var in ("MINIJIT_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                n = int(value.split(",")[0])
            except ValueError:
                raise ValueError(f"{var} must be a positive integer, got {value!r}") from None
            if n < 1:
                raise ValueError(f"{var} must be a positive integer, got {value!r}")
            return n
    # the host query, so a pinned host profile (`features.pinned`) decides threads as on that host
    return features.num_cpus()


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < threads:
            # the old pool is dropped, not shut down: another thread may still be submitting to it
            # (its workers exit once it is collected, after its queued work)
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="minijit")
            _POOL_SIZE = threads
        return _POOL


def chunks(n: int, threads: int) -> list[tuple[int, int]]:
    """Static schedule: ``threads`` contiguous ranges covering ``[0, n)`` (sizes differ by at most 1)."""
    threads = max(1, min(threads, n))
    base, extra = divmod(n, threads)
    out, begin = [], 0
    for t in range(threads):
        end = begin + base + (1 if t < extra else 0)
        out.append((begin, end))
        begin = end
    return out


def run_range(fn: Callable[[int, int], object], n: int, threads: int) -> None:
    """Call ``fn(begin, end)`` over a static split of ``[0, n)``; the caller's thread runs the first chunk."""
    parts = chunks(n, threads)
    if len(parts) == 1:
        fn(*parts[0])
        return
    pool = _pool(len(parts) - 1)
    _run_on_pool(pool, [(fn, b, e) for b, e in parts[1:]], lambda: fn(*parts[0]))


def run_pieces(fn: Callable[[int, int], object], n: int, threads: int) -> None:
    """Call ``fn(begin, end)`` once per piece of ``[0, n)`` (iterations) on up to ``threads``
    threads, with the native team's schedule: the static split into ``min(threads, n)`` ranges,
    each cut into up to `minijit.runtime.team.MAX_PIECES` pieces (`team.range_pieces`). Thread
    ``t`` (the caller is 0) runs range ``t``'s pieces in order, then claims the pieces of ranges
    ``t + 1, t + 2, ...`` (wrapping) that no thread has taken, so a thread slowed mid-call, or a
    pool worker still waking up, hands the rest of its range to the others. Claims are taken
    under one lock, between calls; ``fn`` must release the GIL (a cffi call does) for pieces to
    run in parallel. Ranges of one piece each (n <= threads) run as `run_range` does, without
    claims: a caller that takes a late worker's only piece keeps the GIL while the worker wakes,
    and the extra hand-off cost more than it saved. Returns when every thread is done; the first exception raised
    by ``fn`` is raised then (the other threads' pieces run on)."""
    ranges = _team_mod.range_pieces(n, threads)
    if len(ranges) <= 1 or len(ranges[0]) == 1:  # one piece per range: the static split
        if ranges:
            run_range(fn, n, len(ranges))
        return
    count = len(ranges)
    taken = [0] * count
    claim = threading.Lock()

    def drain(own: int) -> None:  # own range first, then the others' unclaimed pieces
        for r in range(own, own + count):
            pieces = ranges[r % count]
            while True:
                with claim:
                    i = taken[r % count]
                    if i == len(pieces):
                        break
                    taken[r % count] = i + 1
                fn(*pieces[i])

    _run_on_pool(_pool(count - 1), [(drain, r) for r in range(1, count)], lambda: drain(0))


def _run_on_pool(pool: ThreadPoolExecutor, tasks: list[tuple], own: Callable[[], object]) -> None:
    """Submit ``tasks`` (callable, args...), run ``own`` on this thread, then wait for every task
    (even when ``own`` raised: they may use the caller's buffers) and raise the first error."""
    futures = [pool.submit(*task) for task in tasks]
    error: BaseException | None = None
    try:
        own()
    except BaseException as exc:  # noqa: BLE001 - re-raised below, after the workers are done
        error = exc
    for f in futures:
        try:
            f.result()
        except BaseException as exc:  # noqa: BLE001
            error = error or exc
    if error is not None:
        raise error


def backend() -> str:
    """The loop-nest backend in use: "native" (the JIT-generated team) or "python" (the pool).

    ``MINIJIT_TEAM`` chooses (``native``/``python``); it is read once, at the first dispatch
    (`reload_backend` reads it again). "native" falls back to "python" where
    `minijit.runtime.team.unsupported_reason` says the host cannot run it."""
    global _ENV_BACKEND
    if _FORCED is not None:
        return _FORCED
    if _ENV_BACKEND is None:
        choice = os.environ.get("MINIJIT_TEAM", "").strip().lower() or "native"
        if choice not in BACKENDS:
            raise ValueError(f"MINIJIT_TEAM must be one of {', '.join(BACKENDS)}, got {choice!r}")
        if choice == "native" and _team_mod.unsupported_reason() is not None:
            choice = "python"
        _ENV_BACKEND = choice
    return _ENV_BACKEND


def reload_backend() -> str:
    """Read ``MINIJIT_TEAM`` again (after the environment changed); returns the backend now in use."""
    global _ENV_BACKEND
    _ENV_BACKEND = None
    return backend()


@contextlib.contextmanager
def forced_backend(name: str) -> Iterator[None]:
    """Use backend ``name`` ("native" or "python") inside the block, whatever ``MINIJIT_TEAM`` says
    (for benchmarks and tests; process-wide, not per thread)."""
    global _FORCED
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "native" and _team_mod.unsupported_reason() is not None:
        raise RuntimeError(f"backend 'native' is not available: {_team_mod.unsupported_reason()}")
    old, _FORCED = _FORCED, name
    try:
        yield
    finally:
        _FORCED = old


def team(threads: int) -> _team_mod.Team:
    """The process's native team with room for ``threads`` threads (the caller's included).

    Built on first use with ``max(threads, default_threads()) - 1`` workers, rebuilt larger when
    a call asks for more, and rebuilt after ``os.fork`` (a child has no workers)."""
    global _TEAM
    t = _TEAM
    if t is not None and not t.closed and t.workers >= threads - 1:
        return t
    with _TEAM_LOCK:
        t = _TEAM
        if t is None or t.closed or t.workers < threads - 1:
            old = t
            _TEAM = t = _team_mod.Team(max(threads, default_threads()) - 1)
            if old is not None:
                old.close()  # waits for a job in flight; callers holding it retry on the new one
        return t


_BLAS_FFI = cffi.FFI()
_BLAS_FFI.cdef("int blas_thread_shutdown_(void);")


def loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (numpy's and scipy's wheels bundle
    one each), from Linux ``/proc/self/maps``; empty elsewhere."""
    try:
        with open("/proc/self/maps") as f:
            fields = (line.split(None, 5) for line in f)
            paths = {parts[5].strip() for parts in fields if len(parts) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if "openblas" in os.path.basename(p).lower() and ".so" in os.path.basename(p))


def quiet_blas() -> int:
    """Stop the worker threads of every OpenBLAS in this process now (its exported
    ``blas_thread_shutdown_``), so that they do not spin on the cores a minijit call is about to
    use; OpenBLAS starts them again at its next threaded call (a few tens of microseconds). Opt-in:
    call it only while no other thread is inside a BLAS call (numpy matmul, scipy.linalg). Returns
    how many libraries were stopped. numpy's thread count is not changed."""
    done = 0
    for path in loaded_openblas():
        try:
            lib = _BLAS_FFI.dlopen(path)
            lib.blas_thread_shutdown_()
        except (OSError, AttributeError):  # not loadable here, or a build without the symbol
            continue
        done += 1
    return done


def _after_fork_in_child() -> None:
    global _TEAM_LOCK, _TEAM
    _TEAM_LOCK = threading.Lock()  # another thread of the parent may have held it
    _TEAM = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def run_loopnest(fn: int, in0: int, in1: int, out: int, n: int, threads: int) -> None:
    """Run the native loop nest at address ``fn`` (``void f(in0, in1, out, int64_t begin, int64_t
    end)``) over ``[0, n)`` iterations on up to ``threads`` threads in the pieces of
    `minijit.runtime.team.pieces`: on the native team, or on the pool (`run_pieces`).

    Pointers are integer addresses the caller has checked. Returns when every chunk is done."""
    if backend() == "native":
        for _ in range(3):  # a team replaced by a larger one while we held it says False
            if team(threads).run(fn, in0, in1, out, n, threads):
                return
        raise RuntimeError("minijit.parallel: the native team kept closing under run_loopnest")
    for name, value in (("fn", fn), ("in0", in0), ("in1", in1), ("out", out), ("n", n), ("threads", threads)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name in ("fn", "threads") else 0):
            raise ValueError(f"{name} must be an int >= {1 if name in ('fn', 'threads') else 0}, got {value!r}")
    call = _FFI.cast(LOOPNEST_SIGNATURE, fn)
    run_pieces(lambda begin, end: call(in0, in1, out, begin, end), n, threads)
