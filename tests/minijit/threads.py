"""Shared by the thread tests: run a callable from several threads at once and collect what failed."""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def fast_switching(interval: float = 1e-5) -> Iterator[None]:
    """Let the interpreter switch threads every ``interval`` seconds (its own default is 5 ms):
    calls that share state then interleave within a few calls instead of a few hundred."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_threads(work: Callable[[int], list[str]], threads: int) -> list[str]:
    """Call ``work(t)`` on ``threads`` threads that start together (a barrier); returns the
    failures every call reported, and any exception a thread raised (as text)."""
    barrier = threading.Barrier(threads)
    failures: list[str] = []
    lock = threading.Lock()

    def run(t: int) -> None:
        try:
            barrier.wait()
            found = work(t)
        except Exception as e:  # noqa: BLE001 - reported to the test
            found = [f"thread {t} raised {type(e).__name__}: {e}\n{traceback.format_exc()}"]
        with lock:
            failures.extend(found)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    with fast_switching():
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    return failures
