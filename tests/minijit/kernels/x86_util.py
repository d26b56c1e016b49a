"""Shared helpers of the x86-64 kernel tests: host gating, cached generators, strided views."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from minijit.kernels.x86_64 import binary, brgemm, unary
from minijit.runtime.features import detected_host

#: this machine (never a pinned profile): the kernels these tests generate run on it
HOST = detected_host()
ON_X86 = HOST.isa == "x86_64"
ISAS = [
    pytest.param("avx512", marks=pytest.mark.skipif(not (ON_X86 and HOST.avx512f), reason="host lacks AVX-512F")),
    pytest.param("avx2", marks=pytest.mark.skipif(not (ON_X86 and HOST.avx2), reason="host lacks AVX2")),
]
NP = {"fp32": np.float32, "fp64": np.float64}
UINT = {"fp32": np.uint32, "fp64": np.uint64}

needs_x86 = pytest.mark.skipif(not ON_X86, reason="x86-64 kernels run natively only on x86-64")


def available(isa: str) -> bool:
    return ON_X86 and (HOST.avx512f if isa == "avx512" else HOST.avx2)


brgemm_kernel = functools.lru_cache(maxsize=256)(brgemm.generate)
unary_kernel = functools.lru_cache(maxsize=256)(unary.generate)
binary_kernel = functools.lru_cache(maxsize=256)(binary.generate)


def colmajor_index(offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """Indices ``offset + r + c*ld`` of a rows x cols column-major matrix."""
    return offset + np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]


def bits_equal(x: np.ndarray, y: np.ndarray, dtype: str) -> bool:
    return np.array_equal(np.ascontiguousarray(x).view(UINT[dtype]), np.ascontiguousarray(y).view(UINT[dtype]))


def with_specials(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sprinkle NaN, +-inf, +-0.0 over ``x`` (in place)."""
    for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
        x[rng.random(x.size) < 0.08] = v
    return x
