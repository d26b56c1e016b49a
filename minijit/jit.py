"""Tiered compilation: the generic tier runs a new shape at once; hot plans are specialised in the
background (`minijit.einsum.generic`).

``MINIJIT_JIT`` (read at each call): ``tiered`` (the default) or ``eager`` (every new shape
generates its shape-specialised kernels before it runs, as before the generic tier: for
benchmarks of the specialised code). A generic plan is specialised once the work it ran would
have paid for generating its specialised code (`specialise_after`: a 1024^3 GEMM on its first
call, 256^3 after 75 calls, 64^3 after 4800). One daemon thread builds the specialised plans in
order; `drain` waits until it is idle (tests, benchmarks).
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["MAX_CALLS", "SPECIALISE_WORK", "drain", "generic_kernel", "mode", "specialise", "specialise_after"]

#: flops a generic plan runs, over all its calls, before its specialised plan is built: code
#: generation (~5-50 ms) pays for itself once the specialised kernel's saving (about 40 % of the
#: generic kernel's time at ~50 GFLOPS on one core) adds up to it, about 2.5 GFLOP of work
#: (bench/results/x86_64_warmup_2026-11-28.md: 6 ms / 17 us per call at 64^3, 23 ms / 0.35 ms
#: at 256^3); a plan of at least this much work is specialised on its first call
SPECIALISE_WORK = 2_500_000_000
#: the most calls a small plan waits (its specialised plan saves microseconds a call)
MAX_CALLS = 10_000
#: the values ``MINIJIT_JIT`` takes
MODES = ("tiered", "eager")

_kernels: dict[str, tuple[Any, Any]] = {}
_kernels_lock = threading.Lock()
_queue: queue.Queue[Callable[[], object] | None] = queue.Queue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


def mode() -> str:
    """``MINIJIT_JIT`` ("tiered" when unset; ValueError naming the choices otherwise)."""
    value = os.environ.get("MINIJIT_JIT", "tiered").strip().lower() or "tiered"
    if value not in MODES:
        raise ValueError(f"MINIJIT_JIT must be one of {', '.join(MODES)}, got {value!r}")
    return value


def specialise_after(flops: int) -> int:
    """Calls after which a generic plan of ``flops`` work a call is specialised: enough that its
    work reaches `SPECIALISE_WORK` (1 for large plans), at most `MAX_CALLS`."""
    return max(1, min(MAX_CALLS, -(-SPECIALISE_WORK // max(1, flops))))


def generic_kernel(dtype: np.dtype) -> Any:
    """The native target's generic GEMM kernel for ``dtype`` as a raw function of four addresses
    (a, b, c, args), through ctypes (it releases the GIL during the call). Loaded from the code
    cache into W^X memory without the kernel machinery where the cache has it (no C parser, no
    generator imported), else generated once per process (and stored)."""
    name = np.dtype(dtype).name
    found = _kernels.get(name)
    if found is not None:
        return found[1]
    with _kernels_lock:
        found = _kernels.get(name)
        if found is None:
            found = _kernels[name] = _load_generic(name)  # the first item keeps the code mapped
    return found[1]


def _load_generic(name: str) -> tuple[Any, Any]:
    import ctypes

    from minijit import targets
    from minijit.kernels import generic as spec
    from minijit.runtime import codecache
    from minijit.runtime.memory import ExecutableBuffer

    dtype = {"float32": "fp32", "float64": "fp64"}[name]
    target = targets.native()
    signature = spec.signature("float" if dtype == "fp32" else "double")
    code = codecache.load_code("generic_gemm", target, {"dtype": dtype}, codecache.signature_text(signature))
    if code is not None:
        owner: Any = ExecutableBuffer(code)
    else:
        from minijit import kernels

        owner = kernels.generic_gemm(dtype, target=target)  # generated and stored
    function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(owner.address)
    return owner, function


def specialise(build: Callable[[], object]) -> None:
    """Run ``build`` on the background thread (started on first use). Its errors are reported as
    warnings; the generic plan keeps serving."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="minijit-specialise", daemon=True)
            _worker.start()
    _queue.put(build)


def drain() -> None:
    """Wait until every queued specialisation is built."""
    _queue.join()


def _work() -> None:
    while True:
        build = _queue.get()
        try:
            if build is not None:
                build()
        except Exception as exc:  # noqa: BLE001 - the generic plan keeps serving
            warnings.warn(f"minijit: specialising a plan failed ({type(exc).__name__}: {exc})", stacklevel=1)
        finally:
            _queue.task_done()
