"""float16 <-> float32 conversion of host arrays with minijit's own kernels.

`to_float32(x)` / `to_float16(x)` return a new array of the same shape and layout (C or Fortran
order, as ``x.astype(..., order="K")``) whose bits equal numpy's ``astype`` (widening is exact;
narrowing rounds to nearest even, overflows to inf; quiet NaNs keep sign and payload). They run
the native target's conversion kernel (`kernel`, `Target.half_convert_kernel`): x86-64 with F16C
`minijit.kernels.x86_64.convert` ("avx2" form; the AVX-512 form is generated and checked by
llvm-mc but not picked yet), an AArch64 host `minijit.kernels.aarch64.convert` natively.
Elsewhere (a host without F16C, or an AArch64 kernel that would only run emulated) and for arrays
that are not contiguous, numpy's ``astype``.
The arrays live on the host whatever the einsum target is, so the host's kernel converts them:
the emulated AArch64 kernel is for tests, never used here.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["kernel", "to_float16", "to_float32"]

_DTYPES = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}


@functools.cache
def kernel(src: str, dst: str) -> Any | None:
    """The native ``void(const void* src, void* dst, int64_t n)`` kernel converting ``src`` to
    ``dst`` ("fp16"/"fp32") on this host, or None where there is none (numpy's astype then)."""
    from minijit import targets  # noqa: PLC0415 - loaded with the first conversion

    if (src, dst) not in (("fp16", "fp32"), ("fp32", "fp16")):
        raise ValueError(f"(src, dst) must be ('fp16', 'fp32') or ('fp32', 'fp16'), got {(src, dst)!r}")
    try:
        native = targets.native()
    except Exception:  # noqa: BLE001 - a host minijit has no target for: numpy's astype
        return None
    return native.half_convert_kernel(src, dst)


def _convert(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != _DTYPES[src]:
        raise TypeError(f"x must be a {_DTYPES[src]} array, got dtype {x.dtype}")
    order = "C" if x.flags.c_contiguous else "F" if x.flags.f_contiguous else None
    k = kernel(src, dst)
    if k is None or order is None:
        return x.astype(_DTYPES[dst], order="K")
    out = np.empty(x.shape, _DTYPES[dst], order=order)
    k(x.reshape(-1, order=order), out.reshape(-1, order=order), x.size)
    return out


def to_float32(x: np.ndarray) -> np.ndarray:
    """float16 array ``x`` widened to a new float32 array (exact), same shape and layout."""
    return _convert(x, "fp16", "fp32")


def to_float16(x: np.ndarray) -> np.ndarray:
    """float32 array ``x`` rounded (to nearest even) to a new float16 array, same shape and layout."""
    return _convert(x, "fp32", "fp16")
