"""`minijit.einsum` with sparse operands: numpy's call, the SparseAuto kernels, the caller's types.

`einsum` checks what the call asks for, runs `minijit.sparseauto.api.evaluate` and returns its
result as the operands' family does (`minijit.sparseauto.interop`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.sparseauto import interop

__all__ = ["einsum"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def einsum(subscripts: Any, operands: tuple, out: Any, optimize: Any, target: Any, dtype: Any, driver: Any) -> Any:
    """`minijit.einsum` on operands of which one at least is sparse (see its docstring)."""
    from minijit.sparseauto.api import evaluate  # noqa: PLC0415 - the planner loads on first use

    if not isinstance(subscripts, str):
        raise TypeError("einsum with sparse operands takes the subscripts as a string (not the sublist form)")
    if target == "cuda" or driver is not None:
        raise ValueError(
            f"einsum with sparse operands runs on the native CPU, not target={target!r} "
            "(or emulated on 'aarch64-neon'/'aarch64-sve')"
        )
    if not (isinstance(optimize, bool) or optimize in ("greedy", "optimal")):
        raise ValueError("einsum with sparse operands takes optimize=True/False (planner or linear schedule)")
    if dtype is not None and np.dtype(dtype) not in _FLOATS:
        raise TypeError(f"einsum with sparse operands computes in float32 or float64, not {np.dtype(dtype)}")
    values = operands
    if dtype is not None:
        values = tuple(x.astype(dtype) if hasattr(x, "astype") else x for x in operands)
    target = "native" if isinstance(target, str) and target == "auto" else target
    result, sampled = evaluate(subscripts, values, schedule="auto" if optimize else "linear", target=target)
    if out is None:
        return interop.result_like(result, operands, sampled)
    if not isinstance(out, np.ndarray) or not isinstance(result, np.ndarray):
        raise TypeError("einsum with sparse operands: out= takes a numpy array, for a dense result only")
    if out.shape != result.shape:
        raise ValueError(f"out has shape {out.shape}, the result {result.shape}")
    np.copyto(out, result, casting="same_kind")
    return out
