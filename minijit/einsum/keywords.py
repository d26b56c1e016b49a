"""numpy's ``order`` and ``casting`` keywords of `minijit.einsum`: which values are valid, whether a
cast is allowed, and the result's memory layout on the compiled path (its kernels write C order).

Invalid values are not refused here: `minijit.einsum.dtypes` hands such a call to numpy's einsum,
which raises numpy's own error (ValueError for an unknown order or casting name, TypeError for a
cast the rule forbids).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CASTINGS", "ORDERS", "apply_order", "cast_allowed", "layout_needed", "valid_casting", "valid_order"]

#: numpy's casting rules, as ``np.einsum`` spells them
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
#: numpy's orders (either case; None is "K")
ORDERS = ("C", "F", "A", "K")


def valid_order(order: Any) -> bool:
    """True when numpy's einsum takes ``order`` (None, or 'C', 'F', 'A', 'K' in either case)."""
    return order is None or (isinstance(order, str) and order.upper() in ORDERS)


def valid_casting(casting: Any) -> bool:
    """True when numpy's einsum takes ``casting`` (one of `CASTINGS`, exactly), or None: minijit's
    default (numpy's 'safe', except that float32 and float64 convert to each other, 'same_kind',
    for ``dtype=`` and ``out=`` as `minijit.einsum` always has; docs/decisions.md)."""
    return casting is None or (isinstance(casting, str) and casting in CASTINGS)


def cast_allowed(arrays: list[np.ndarray], dt: np.dtype, out: Any, casting: str) -> bool:
    """True when numpy's ``casting`` rule lets every operand be cast to the computing dtype ``dt``
    and ``dt`` to ``out``'s dtype (numpy's einsum applies the rule to both, TypeError otherwise).
    ``casting`` None: 'same_kind' between these float dtypes (the only ones this is asked about)."""
    casting = "same_kind" if casting is None else casting
    if casting == "unsafe":
        return True
    if any(not np.can_cast(x.dtype, dt, casting) for x in arrays):
        return False
    return out is None or not hasattr(out, "dtype") or np.can_cast(dt, out.dtype, casting)


def layout_needed(order: Any, operands: tuple) -> bool:
    """True when a C-order result may not be what ``order`` asks for with these operands: 'F' and
    'A', or 'K' where an operand of more than one dim is not C-contiguous (cheap: nothing converted)."""
    o = "K" if order is None else order.upper()
    if o == "C":
        return False
    if o in ("F", "A"):
        return True
    return any(isinstance(x, np.ndarray) and x.ndim > 1 and not x.flags.c_contiguous for x in operands)


def apply_order(result: Any, order: Any, arrays: list[Any]) -> Any:
    """``result`` (C order, from the compiled path) in the layout numpy's ``order`` gives: 'C' as
    it is, 'F' Fortran order, 'A' Fortran order when every operand is F-contiguous (1-d ones are),
    else C. 'K' ("as close to the operands as possible"): Fortran order when every operand of more
    than one dim is F-contiguous and not C-contiguous, else C order. numpy's 'K' layout for mixed
    or permuted operands comes from its iterator's axis sort and is not reproduced (the values are
    the same; only the strides can differ). A 0-d result or a non-numpy result is returned as is."""
    if not isinstance(result, np.ndarray) or result.ndim < 2:
        return result
    o = "K" if order is None else order.upper()
    if o == "C":
        return result
    if o == "F":
        return np.asfortranarray(result)
    nd = [x for x in arrays if isinstance(x, np.ndarray) and x.ndim > 1]
    if o == "A":
        fortran = all(isinstance(x, np.ndarray) and x.flags.f_contiguous for x in arrays)
    else:
        fortran = bool(nd) and all(x.flags.f_contiguous and not x.flags.c_contiguous for x in nd)
    return np.asfortranarray(result) if fortran else result
