"""What every `minijit.einsum` call needs before it plans anything: the dtypes it takes, its target
check, and the cache of specialised plans (`EinsumPlan`s, built by `minijit.einsum.plan`). Kept
apart from the planner so that a call the generic tier or a cached plan serves never imports it."""

from __future__ import annotations

import numpy as np

from minijit.cache import LRUCache

__all__ = ["DTYPES", "PLAN_CACHE_MAX_BYTES", "PLAN_CACHE_SIZE", "PLANS", "check_dtype", "check_target"]

#: the dtypes einsum computes in, and their minijit names
DTYPES = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64"}
#: specialised plans kept (least recently used out first); only plans whose intermediates of one
#: call take at most PLAN_CACHE_MAX_BYTES
PLAN_CACHE_SIZE = 128
PLAN_CACHE_MAX_BYTES = 64 << 20
PLANS = LRUCache(lambda: PLAN_CACHE_SIZE, name="einsum.plans")


def check_target(target: str) -> str:
    """``target`` if it is a str, else TypeError."""
    if not isinstance(target, str):
        raise TypeError(f"einsum: target must be a str, got {type(target).__name__}")
    return target


def check_dtype(dtype) -> np.dtype:
    """``dtype`` as a numpy dtype einsum computes in, else TypeError."""
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        raise TypeError(f"einsum: dtype {dt} is not supported (float32 or float64)")
    return dt
