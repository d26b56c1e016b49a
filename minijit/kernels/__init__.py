"""Primitive generators per target, behind one interface and one cache.

Targets: ``aarch64-neon``, ``aarch64-sve`` (run natively on AArch64 hosts,
emulated elsewhere at SVE vector length ``sve_vl`` bits), ``x86_64-avx512``,
``x86_64-avx2`` (names or `minijit.targets` objects; each function dispatches
through the target object). Strides are in elements, matrices column-major:

- `brgemm`: ``f(a, b, c, lda, ldb, ldc, br_stride_a, br_stride_b)``, C += Σ_br A_br·B_br
  (then an elementwise epilogue, `minijit.kernels.epilogue`, where the target fuses one)
- `unary`: ``f(a, b, lda, ldb)``, B = op(A) or op(A)ᵀ for zero/copy/relu
- `binary`: ``f(in0, in1, out, ld0, ld1, ldo)`` for add/sub/mul/div/min/max
- `compile_loopnest`: the compiled loop nest of a `LoopNest` plan,
  ``f(in0, in1, out, begin, end)``

`brgemm`, `unary` and `binary` keep the last `CACHE_SIZE` kernels they generated: the same
arguments (the target resolved, an ``epilogue`` as its canonical text) return the same kernel
object, which is immutable machine code (operations that share it only read it). `cache_clear`
empties the cache, `cache_info` counts.
Behind that cache, the persistent code cache (`minijit.runtime.codecache`) loads a kernel an
earlier process generated instead of generating it again; loop nests are not kept on disk.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from minijit import targets
from minijit.cache import LRUCache
from minijit.kernels.epilogue import Epilogue
from minijit.runtime import codecache
from minijit.targets import CpuTarget, Target

#: the CPU target names (`minijit.targets.CPU_TARGETS`)
TARGETS = targets.CPU_TARGETS


def native_target() -> str:
    """The name of the fastest target this host runs natively."""
    return targets.native().name


#: the most kernels `brgemm`, `unary` and `binary` keep (least recently used first out)
CACHE_SIZE = 512
_cache = LRUCache(lambda: CACHE_SIZE, name="kernels")  # also in `minijit.cache_info`


def _cached(generate: Callable[..., Any]) -> Callable[..., Any]:
    """``generate`` behind the kernel cache, keyed by its name, the target object (``target`` and
    ``sve_vl`` resolved into it) and every other argument (defaults filled in). An ``epilogue``
    argument is keyed by its canonical text (`Epilogue.of`; ValueError/TypeError before anything is
    generated) and left out of the key when it is none, so kernels without one keep the keys they had
    before epilogues existed (`minijit.jit` looks the generic GEMM up by ``{"dtype": ...}``). Errors
    are not cached."""

    signature = inspect.signature(generate)

    @functools.wraps(generate)
    def wrapper(*args: Any, target: str | Target, sve_vl: int = 128, **kwargs: Any) -> Any:
        t = targets.get_cpu(target, sve_vl=sve_vl)
        bound = signature.bind(*args, target=t, **kwargs)
        bound.apply_defaults()
        if "epilogue" in bound.arguments:
            epilogue = Epilogue.of(bound.arguments["epilogue"])
            if epilogue:
                bound.arguments["epilogue"] = str(epilogue)
            else:
                del bound.arguments["epilogue"]  # the generator's default: none
        key = (generate.__name__, *bound.arguments.items())
        try:
            hash(key)
        except TypeError:  # an unhashable argument: the generator's checks reject it
            return generate(*bound.args, **bound.kwargs)

        def create() -> Any:  # generated, or loaded from the code cache, outside the lock: it takes ms
            return codecache.cached(
                generate.__name__, t, bound.arguments, lambda: generate(*bound.args, **bound.kwargs)
            )

        return _cache.get_or_create(key, create)

    return wrapper


def cache_info() -> dict[str, int]:
    """Hits and misses of the kernel cache since the last `cache_clear`, and its size (the
    ``"kernels"`` entry of `minijit.cache_info`, without its maxsize)."""
    info = _cache.info()
    return {"hits": info["hits"], "misses": info["misses"], "size": info["size"]}


def cache_clear() -> None:
    """Drop every cached kernel and loop nest (kernels in use stay alive with their operations)."""
    _cache.clear()
    _loopnests.clear()


def check_target(target: str) -> str:
    """Resolve "native" and reject unknown targets (ValueError naming the choices)."""
    return targets.get_cpu(target).name


def max_prim_size(target: str | Target) -> int | None:
    """The most indices (elements) a prim dim may have on ``target``: what every one of its
    kernels takes (`minijit.targets.CpuTarget.max_prim_size`; None: no limit). Larger dims must
    be split, or peeled (`minijit.peeling`)."""
    return targets.get_cpu(target).max_prim_size


@_cached
def brgemm(
    m,
    n,
    k,
    br_size=1,
    *,
    trans_a=False,
    trans_b=False,
    trans_c=False,
    dtype="fp32",
    target: CpuTarget,
    a_panel=None,
    b_panel=None,
    zero_c=False,
    epilogue="none",
    a_copy=False,
    n_outer=False,
):
    """A BRGEMM kernel for ``target`` (see the module docstring); x86-64 only: ``a_panel`` /
    ``b_panel``, A / B packed in micro-panels that many elements apart
    (`minijit.packing.plan_panels`); ``zero_c``, a first touch zero fused into the kernel;
    ``epilogue`` (a `minijit.kernels.epilogue.Epilogue` or its text, "relu"), an elementwise
    epilogue on the accumulators before the store (a last touch relu fused); ``a_copy``, the
    kernel packs A itself into a stack buffer; ``n_outer``, the N blocks outermost (C walked down
    its columns). Other targets refuse these options (ValueError)."""
    options = {"a_panel": a_panel, "b_panel": b_panel, "zero_c": zero_c, "epilogue": Epilogue.of(epilogue)}
    options.update(a_copy=a_copy, n_outer=n_outer)
    flags = {"trans_a": trans_a, "trans_b": trans_b, "trans_c": trans_c}
    return target.brgemm(m, n, k, br_size, **flags, dtype=dtype, **options)


@_cached
def unary(m, n, *, trans_b=False, dtype="fp32", ptype="copy", target: CpuTarget, dense_b=False):
    """A unary (zero/copy/relu) kernel for ``target``. ``dense_b``: the caller passes ``ldb == n``
    with ``trans_b`` (B is one contiguous N x M run), or ``ldb == m`` without it (B one contiguous
    M x N run that does not overlap A); x86-64 then stores edge vectors without masks (the AArch64
    kernels need no hint: they read ``ldb``)."""
    return target.unary(m, n, trans_b=trans_b, dtype=dtype, ptype=ptype, dense_b=dense_b)


@_cached
def binary(m, n, *, dtype="fp32", ptype="add", target: CpuTarget):
    """A binary elementwise kernel for ``target``."""
    return target.binary(m, n, dtype=dtype, ptype=ptype)


@_cached
def generic_gemm(dtype="fp32", *, target: CpuTarget, epilogue="none"):
    """The generic-tier GEMM kernel for ``target``, ``dtype`` and ``epilogue`` (an elementwise
    `minijit.kernels.epilogue.Epilogue` or its text: "none", "relu"; a separate kernel per
    epilogue) (`minijit.kernels.generic`: ``f(a, b, c, args)``, sizes and strides at run time)."""
    return target.generic_gemm(dtype, epilogue=Epilogue.of(epilogue))


#: the most compiled loop nests `compile_loopnest` keeps (least recently used first out)
LOOPNEST_CACHE_SIZE = 256
_loopnests = LRUCache(lambda: LOOPNEST_CACHE_SIZE, name="loopnests")  # also in `minijit.cache_info`


def compile_loopnest(plan, *, target: str | Target, sve_vl: int = 128):
    """The compiled loop nest of ``plan`` (a `minijit.kernels.loopnest.LoopNest`), kept in a cache
    of its own: the same plan on the same target returns the same kernel object. Its machine code
    depends on nothing but the plan (the kernels it calls are addresses in the plan), so a setup
    of a configuration seen before reuses it. Errors are not cached; `cache_clear` empties it."""
    t = targets.get_cpu(target, sve_vl=sve_vl)
    return _loopnests.get_or_create((plan, t), lambda: t.loopnest(plan))
