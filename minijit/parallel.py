"""OpenMP-style static scheduling over a persistent thread pool (DESIGN.md decision 6).

`run_range(fn, n, threads)` splits ``[0, n)`` into ``threads`` contiguous chunks
and calls ``fn(begin, end)`` for each, on pool workers, returning when all are
done. The compiled loop nests release the GIL while they run (cffi), so the
chunks execute in parallel.

Pool size: ``MINIJIT_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the number
of CPUs this process may use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_LOCK = threading.Lock()


def default_threads() -> int:
    """Threads to use when the caller does not say (environment, then CPU count)."""
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
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < threads:
            if _POOL is not None:
                _POOL.shutdown(wait=True)
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
    futures = [pool.submit(fn, b, e) for b, e in parts[1:]]
    fn(*parts[0])
    for f in futures:
        f.result()
