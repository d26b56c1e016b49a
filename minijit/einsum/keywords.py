"""numpy's ``order`` and ``casting`` keywords of `minijit.einsum`: which values are valid, whether a
cast is allowed, and the result's memory layout on the compiled path (its kernels write C order).

Invalid values are not refused here: `minijit.einsum.dtypes` hands such a call to numpy's einsum,
which raises numpy's own error (ValueError for an unknown order or casting name, TypeError for a
cast the rule forbids).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CASTINGS",
    "ORDERS",
    "apply_order",
    "cast_allowed",
    "k_order",
    "layout_needed",
    "valid_casting",
    "valid_order",
]

#: numpy's casting rules, as ``np.einsum`` spells them
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
#: numpy's orders (either case; None is numpy's default, K)
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
    'A', or 'K' (None, numpy's default) where an operand of more than one dim is not C-contiguous
    (cheap: nothing converted)."""
    o = "K" if order is None else order.upper()
    if o == "C":
        return False
    if o in ("F", "A"):
        return True
    return any(isinstance(x, np.ndarray) and x.ndim > 1 and not x.flags.c_contiguous for x in operands)


def apply_order(result: Any, order: Any, subscripts: Any, arrays: list[Any]) -> Any:
    """``result`` (C order, from the compiled path) in the layout numpy's einsum gives for
    ``order``: 'C' as it is, 'F' Fortran order, 'A' Fortran order when every operand is
    F-contiguous (1-d ones are), else C; 'K' (None: numpy's default) the layout numpy's unoptimised einsum allocates
    (`k_order`), which follows the operands' strides. ``subscripts``: a str (``arrays`` its
    operands) or numpy's sublist form (``arrays`` the operands and sublists, alternating). A
    result of less than 2 dims, or not a numpy array, is returned as it is."""
    if not isinstance(result, np.ndarray) or result.ndim < 2:
        return result
    o = "K" if order is None else order.upper()
    if o == "C":
        return result
    if not isinstance(subscripts, str):
        from minijit.einsum.grammar import sublist_subscripts  # noqa: PLC0415 - the sublist form only

        subscripts, arrays = sublist_subscripts(subscripts, tuple(arrays))
    arrays = [np.asarray(x) for x in arrays]
    if o == "F" or (o == "A" and all(x.flags.f_contiguous for x in arrays)):
        return np.asfortranarray(result)
    if o == "A" or all(x.flags.c_contiguous for x in arrays):
        return result
    perm = k_order(subscripts, arrays)
    if perm == tuple(range(result.ndim)):
        return result
    laid = np.empty_like(result.transpose(perm), order="C").transpose(np.argsort(perm))
    laid[...] = result
    return laid


def k_order(subscripts: str, arrays: list[np.ndarray]) -> tuple[int, ...]:
    """The output's axes outermost to innermost as numpy's einsum lays out an ``order='K'``
    result (numpy's iterator, `npyiter_find_best_axis_ordering`): the iterator's axes (the output's
    letters, then the summed ones in ASCII order) start in C order and are insertion-sorted by the
    operands' |strides| (a size-1 dim has stride 0; a pair of axes is ordered by the first operand
    with a nonzero stride on both, unless a later such operand disagrees); the output takes the
    sorted order of its axes. numpy's optimised einsum may lay out differently (it differs from its
    own unoptimised einsum too); the values are the same either way."""
    from minijit.einsum.parse import expand_subscripts  # noqa: PLC0415 - 'K' with strided operands only

    inputs, out = expand_subscripts(subscripts, tuple(x.ndim for x in arrays))
    summed = sorted({c for sub in inputs for c in sub} - set(out))
    labels = list(out) + summed
    strides = []
    for c in labels:
        per_op = []
        for sub, x in zip(inputs, arrays, strict=True):
            per_op.append(sum(abs(st) for ch, n, st in zip(sub, x.shape, x.strides, strict=True) if ch == c and n > 1))
        strides.append(per_op)
    perm = list(range(len(labels)))[::-1]  # innermost first, as numpy's axis data
    for i0 in range(1, len(perm)):
        s0, pos = strides[perm[i0]], i0
        for i1 in range(i0 - 1, -1, -1):
            s1 = strides[perm[i1]]
            ambiguous, swap = True, False
            for a0, a1 in zip(s0, s1, strict=True):
                if a0 and a1:
                    if a1 <= a0:
                        swap = False
                    elif ambiguous:
                        swap = True
                    ambiguous = False
            if not ambiguous:
                if not swap:
                    break
                pos = i1
        if pos != i0:
            perm.insert(pos, perm.pop(i0))
    return tuple(k for k in perm[::-1] if k < len(out))
