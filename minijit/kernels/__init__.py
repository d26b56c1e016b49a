"""Primitive generators per target, behind one interface.

Targets: ``aarch64-neon``, ``aarch64-sve`` (run natively on AArch64 hosts,
emulated elsewhere at SVE vector length ``sve_vl`` bits), ``x86_64-avx512``,
``x86_64-avx2``. Strides are in elements, matrices column-major:

- `brgemm`: ``f(a, b, c, lda, ldb, ldc, br_stride_a, br_stride_b)``, C += Σ_br A_br·B_br
- `unary`: ``f(a, b, lda, ldb)``, B = op(A) or op(A)ᵀ for zero/copy/relu
- `binary`: ``f(in0, in1, out, ld0, ld1, ldo)`` for add/sub/mul/div/min/max
- `compile_loopnest`: the compiled loop nest of a `LoopNest` plan,
  ``f(in0, in1, out, begin, end)``

`brgemm`, `unary` and `binary` keep the last `CACHE_SIZE` kernels they generated: the same
arguments (the target resolved) return the same kernel object, which is immutable machine code
(operations that share it only read it). `cache_clear` empties the cache, `cache_info` counts.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from minijit.cache import LRUCache
from minijit.runtime import host

TARGETS = ("aarch64-neon", "aarch64-sve", "x86_64-avx512", "x86_64-avx2")


def native_target() -> str:
    """The fastest target this host runs natively."""
    h = host()
    if h.isa == "x86_64":
        return "x86_64-avx512" if h.avx512f and h.avx512bw and h.avx512vl else "x86_64-avx2"
    return "aarch64-sve" if h.sve else "aarch64-neon"


#: the most kernels `brgemm`, `unary` and `binary` keep (least recently used first out)
CACHE_SIZE = 512
_cache = LRUCache(lambda: CACHE_SIZE, name="kernels")  # also in `minijit.cache_info`


def _cached(generate: Callable[..., Any]) -> Callable[..., Any]:
    """``generate`` behind the kernel cache, keyed by its name and every argument (defaults filled
    in, the target resolved). Errors are not cached."""

    signature = inspect.signature(generate)

    @functools.wraps(generate)
    def wrapper(*args: Any, target: str, **kwargs: Any) -> Any:
        bound = signature.bind(*args, target=check_target(target), **kwargs)
        bound.apply_defaults()
        key = (generate.__name__, *bound.arguments.items())
        try:
            hash(key)
        except TypeError:  # an unhashable argument: the generator's checks reject it
            return generate(*bound.args, **bound.kwargs)
        # generated outside the cache's lock: it takes milliseconds
        return _cache.get_or_create(key, lambda: generate(*bound.args, **bound.kwargs))

    return wrapper


def cache_info() -> dict[str, int]:
    """Hits and misses of the kernel cache since the last `cache_clear`, and its size (the
    ``"kernels"`` entry of `minijit.cache_info`, without its maxsize)."""
    info = _cache.info()
    return {"hits": info["hits"], "misses": info["misses"], "size": info["size"]}


def cache_clear() -> None:
    """Drop every cached kernel (kernels in use stay alive with their operations)."""
    _cache.clear()


def check_target(target: str) -> str:
    """Resolve "native" and reject unknown targets (ValueError naming the choices)."""
    if target == "native":
        return native_target()
    if target not in TARGETS:
        raise ValueError(f"target must be 'native' or one of {', '.join(TARGETS)}, got {target!r}")
    return target


def max_prim_size(target: str) -> int | None:
    """The most indices (elements) a prim dim may have on ``target``: what every one of its
    kernels takes (x86-64 65536, AArch64 NEON 2^20, which SVE operations may also run; None: no
    limit). Larger dims must be split, or peeled (`minijit.peeling`)."""
    target = check_target(target)
    if target.startswith("x86_64"):
        from minijit.kernels.x86_64 import binary, brgemm, gemv, unary

        return min(brgemm.MAX_SIZE, gemv.MAX_SIZE, unary.MAX_SIZE, binary.MAX_SIZE)
    return 1 << 20  # minijit.kernels.aarch64.common.check_positive's limit


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
    target,
    sve_vl=128,
    a_panel=None,
    b_panel=None,
    zero_c=False,
    relu_c=False,
    a_copy=False,
    n_outer=False,
):
    """A BRGEMM kernel for ``target`` (see the module docstring); x86-64 only: ``a_panel`` /
    ``b_panel``, A / B packed in micro-panels that many elements apart
    (`minijit.packing.plan_panels`); ``zero_c`` / ``relu_c``, a first touch zero / last touch
    relu fused into the kernel; ``a_copy``, the kernel packs A itself into a stack buffer;
    ``n_outer``, the N blocks outermost (C walked down its columns)."""
    target = check_target(target)
    extras = {
        "a_panel": a_panel,
        "b_panel": b_panel,
        "zero_c": zero_c,
        "relu_c": relu_c,
        "a_copy": a_copy,
        "n_outer": n_outer,
    }
    if target.startswith("x86_64"):
        from minijit.kernels.x86_64 import brgemm as x

        return x.generate(m, n, k, br_size, trans_a, trans_b, trans_c, dtype, isa=target.split("-")[1], **extras)
    if any(v not in (None, False) for v in extras.values()):
        names = ", ".join(name for name, v in extras.items() if v not in (None, False))
        raise ValueError(f"{names}: x86-64 kernel options, not ones of {target}")
    if target == "aarch64-neon":
        from minijit.kernels.aarch64.brgemm import NeonBrgemm as g
    else:
        from minijit.kernels.aarch64.brgemm import SveBrgemm as g
    return g.generate(m, n, k, br_size, trans_a, trans_b, trans_c, dtype, sve_vl=sve_vl)


@_cached
def unary(m, n, *, trans_b=False, dtype="fp32", ptype="copy", target, sve_vl=128, dense_b=False):
    """A unary (zero/copy/relu) kernel for ``target``. ``dense_b``: the caller passes ``ldb == n``
    with ``trans_b`` (B is one contiguous N x M run), or ``ldb == m`` without it (B one contiguous
    M x N run that does not overlap A); x86-64 then stores edge vectors without masks (the AArch64
    kernels need no hint: they read ``ldb``)."""
    target = check_target(target)
    if target == "aarch64-neon":
        from minijit.kernels.aarch64.unary import NeonUnary as g
    elif target == "aarch64-sve":
        from minijit.kernels.aarch64.unary import SveUnary as g
    else:
        from minijit.kernels.x86_64 import unary as x

        return x.generate(m, n, trans_b, dtype, ptype, isa=target.split("-")[1], dense_b=dense_b)
    return g.generate(m, n, trans_b, dtype, ptype, sve_vl=sve_vl)


@_cached
def binary(m, n, *, dtype="fp32", ptype="add", target, sve_vl=128):
    """A binary elementwise kernel for ``target``."""
    target = check_target(target)
    if target == "aarch64-neon":
        from minijit.kernels.aarch64.binary import NeonBinary as g
    elif target == "aarch64-sve":
        from minijit.kernels.aarch64.binary import SveBinary as g
    else:
        from minijit.kernels.x86_64 import binary as x

        return x.generate(m, n, dtype, ptype, isa=target.split("-")[1])
    return g.generate(m, n, dtype, ptype, sve_vl=sve_vl)


def compile_loopnest(plan, *, target, sve_vl=128):
    """The compiled loop nest of ``plan`` (a `minijit.kernels.loopnest.LoopNest`)."""
    target = check_target(target)
    if target.startswith("aarch64"):
        from minijit.kernels.aarch64 import loopnest as g

        return g.generate(plan, sve_vl=sve_vl)
    from minijit.kernels.x86_64 import loopnest as x

    return x.generate(plan)
