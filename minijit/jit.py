"""Tiered compilation: the generic tier runs a new shape at once; hot plans are specialised in the
background (`minijit.einsum.generic`).

``MINIJIT_JIT`` (read at each call): ``tiered`` (the default) or ``eager`` (every new shape
generates its shape-specialised kernels before it runs, as before the generic tier: for
benchmarks of the specialised code). A generic plan is specialised after `SPECIALISE_AFTER` calls,
or on its first call when its work (flops) makes the generic kernel's lack of threads and
packing cost more than generating code (`EAGER_FLOPS`). One daemon thread builds the specialised
plans in order; `drain` waits until it is idle (tests, benchmarks).
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["EAGER_FLOPS", "SPECIALISE_AFTER", "drain", "generic_kernel", "mode", "specialise", "specialise_after"]

#: calls of a generic plan after which its specialised plan is built (the generic kernel is within
#: a few per cent of the specialised one at the sizes the generic tier serves; the specialised plan
#: costs ~10-40 ms of code generation, repaid only by plans that run many times:
#: bench/results/x86_64_warmup_2026-11-28.md)
SPECIALISE_AFTER = 8
#: work (flops) from which a plan is specialised on its first call: above it the specialised
#: plan's threads and packing save more than code generation costs
EAGER_FLOPS = 1 << 27
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
    """Calls after which a generic plan of ``flops`` work is specialised."""
    return 1 if flops >= EAGER_FLOPS else SPECIALISE_AFTER


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
