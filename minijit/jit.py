"""Tiered compilation: the generic tier runs a new shape at once; hot plans are specialised in the
background (`minijit.einsum.generic`).

``MINIJIT_JIT`` (read at each call): ``tiered`` (the default) or ``eager`` (every new shape
generates its shape-specialised kernels before it runs, as before the generic tier: for
benchmarks of the specialised code). A generic plan is specialised once the time its kernel ran
would have paid for generating its specialised code (`due`: a 1024^3 GEMM on its first call,
otherwise after 50 ms of generic kernel time: ~80 calls at 256^3, ~1100 at 64^3). One daemon
thread builds the specialised plans in order; `drain` waits until it is idle (tests, benchmarks).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

# what loading the generic kernel from the code cache takes, imported with the module (``import
# minijit`` loads it: the host einsum's fast path), so that a process's first call only does work
from minijit import targets
from minijit.kernels import generic as spec
from minijit.runtime import codecache
from minijit.runtime.memory import ExecutableBuffer

__all__ = ["SPECIALISE_SECONDS", "SPECIALISE_WORK", "drain", "due", "generic_kernel", "mode", "specialise"]

#: seconds of generic-kernel time after which a plan's specialised plan is built: code generation
#: takes ~5-50 ms and the specialised kernel saves about 40 % of the generic one's time
#: (bench/results/x86_64_warmup_2026-11-28.md: at 64^3 45 against 28 us a call, 7 ms to generate),
#: so 50 ms of generic time is about when generating pays for itself
SPECIALISE_SECONDS = 0.05
#: work (flops) of one call from which a plan is specialised on its first call: at ~50 GFLOPS
#: that call alone runs as long as `SPECIALISE_SECONDS`
SPECIALISE_WORK = 2_500_000_000
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


def due(flops: int, seconds: float) -> bool:
    """Whether a generic plan of ``flops`` work a call, whose kernel has run ``seconds`` in all,
    should be specialised now: on its first call when the work is at least `SPECIALISE_WORK`,
    else once the kernel time adds up to `SPECIALISE_SECONDS`."""
    return flops >= SPECIALISE_WORK or seconds >= SPECIALISE_SECONDS


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
    dtype = {"float32": "fp32", "float64": "fp64"}[name]
    target = targets.native()
    signature = spec.signature("float" if dtype == "fp32" else "double")
    code = codecache.load_code("generic_gemm", target, {"dtype": dtype}, signature)  # canonical text
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
