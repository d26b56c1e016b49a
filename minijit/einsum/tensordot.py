"""numpy's ``tensordot`` and ``transpose`` on minijit: with `minijit.einsum`, what an opt_einsum
backend needs (``opt_einsum.contract(expr, *ops, backend="minijit")`` imports the module named
by the backend and calls its ``tensordot``, ``transpose`` and ``einsum``).

    C = minijit.tensordot(A, B, axes=([1, 0], [0, 1]))   # as np.tensordot
    T = minijit.transpose(A, (2, 0, 1))                   # as np.transpose: a view

`tensordot` is one `minijit.einsum` call (its plan cached like any other; the device follows the
data and the result type the input, float32/float64 on the CPU). `transpose` returns a view, as
numpy does (a torch tensor: ``permute``); minijit reads such views in place.

Light to import (`minijit.einsum` imports it with the package): the einsum machinery loads on
the first `tensordot` call.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["tensordot", "transpose"]


def _ndim_shape(x: Any) -> tuple[int, tuple[int, ...]]:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    shape = tuple(int(s) for s in shape)
    return len(shape), shape


def _axis(ax: Any, ndim: int, name: str) -> int:
    try:
        i = operator.index(ax)
    except TypeError:
        raise TypeError(f"tensordot: axes of {name} must be ints, got {ax!r}") from None
    if not -ndim <= i < ndim:
        raise ValueError(f"tensordot: axis {i} is out of bounds for {name} with {ndim} dimensions")
    return i % ndim


def _axes_lists(axes: Any, nd_a: int, nd_b: int) -> tuple[list[int], list[int]]:
    """numpy's rule: an int N (the last N axes of a with the first N of b), or a pair of axis
    sequences (or ints) of equal length."""
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        n = int(axes)
        if n < 0:
            raise ValueError(f"tensordot: axes must be >= 0, got {n}")
        if n > nd_a or n > nd_b:
            raise ValueError(f"tensordot: axes={n} is more than a ({nd_a} dims) or b ({nd_b} dims) has")
        return list(range(nd_a - n, nd_a)), list(range(n))
    try:
        if isinstance(axes, (str, bytes)):
            raise TypeError
        axes_a, axes_b = axes
    except (TypeError, ValueError):
        raise TypeError(f"tensordot: axes must be an int or a pair of axis sequences, got {axes!r}") from None
    axes_a = list(axes_a) if isinstance(axes_a, Sequence | np.ndarray) else [axes_a]
    axes_b = list(axes_b) if isinstance(axes_b, Sequence | np.ndarray) else [axes_b]
    if len(axes_a) != len(axes_b):
        raise ValueError(f"tensordot: axes pair {axes!r} has sequences of different lengths")
    la = [_axis(x, nd_a, "a") for x in axes_a]
    lb = [_axis(x, nd_b, "b") for x in axes_b]
    for name, lst in (("a", la), ("b", lb)):
        if len(set(lst)) != len(lst):
            raise ValueError(f"tensordot: repeated axis in {name}'s axes {lst}")
    return la, lb


def tensordot(a: Any, b: Any, axes: int | Sequence = 2) -> Any:
    """Sum products over the given axes, as ``np.tensordot``: ``axes`` is an int N (the last N
    axes of ``a`` with the first N of ``b``; 0: the outer product) or a pair of axis sequences of
    equal length (negative axes count from the end). The result holds ``a``'s remaining axes,
    then ``b``'s. Summed axes must have equal sizes (ValueError "shape-mismatch for sum"); dtypes
    as `minijit.einsum` takes them."""
    from minijit.einsum.api import einsum  # noqa: PLC0415 - the JIT loads on first use
    from minijit.einsum.parse import _LETTERS  # noqa: PLC0415

    nd_a, shape_a = _ndim_shape(a)
    nd_b, shape_b = _ndim_shape(b)
    if nd_a + nd_b > len(_LETTERS):
        raise ValueError(f"tensordot: {nd_a} + {nd_b} dimensions is more than einsum's {len(_LETTERS)} indices")
    la, lb = _axes_lists(axes, nd_a, nd_b)
    for i, j in zip(la, lb, strict=True):
        if shape_a[i] != shape_b[j]:
            raise ValueError(
                f"tensordot: shape-mismatch for sum: axis {i} of a has {shape_a[i]} elements, axis {j} of b"
                f" {shape_b[j]}"
            )
    sub_a = _LETTERS[:nd_a]
    sub_b = list(_LETTERS[nd_a : nd_a + nd_b])
    for i, j in zip(la, lb, strict=True):
        sub_b[j] = sub_a[i]
    free_a = "".join(c for i, c in enumerate(sub_a) if i not in la)
    free_b = "".join(c for j, c in enumerate(sub_b) if j not in lb)
    return einsum(f"{sub_a},{''.join(sub_b)}->{free_a}{free_b}", a, b)


def transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    """``a`` with its axes permuted, as ``np.transpose``: reversed by default, else ``axes`` (a
    permutation; negative axes count from the end). A view: numpy arrays through ``np.transpose``,
    torch tensors through ``permute``, other arrays through their ``transpose`` method."""
    if isinstance(a, np.ndarray):
        return np.transpose(a, axes)
    from minijit.runtime.device_arrays import is_torch_tensor  # noqa: PLC0415 - loads the runtime

    if is_torch_tensor(a):
        nd = a.dim()
        perm = tuple(range(nd))[::-1] if axes is None else tuple(axes)
        if sorted(p % nd if -nd <= p < nd else p for p in perm) != list(range(nd)):
            raise ValueError(f"transpose: axes {perm} are not a permutation of {nd} dimensions")
        return a.permute(*perm)
    if hasattr(a, "transpose") and not isinstance(a, (list, tuple)):
        return a.transpose() if axes is None else a.transpose(tuple(axes))
    return np.transpose(np.asarray(a), axes)
