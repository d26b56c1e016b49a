"""Strided operands of an einsum plan: the planned element strides and the views read in place."""

from __future__ import annotations

import numpy as np

from minijit.arrays import dense_view, is_dense

__all__ = ["checked_view", "view_of_base", "view_strides"]


def view_strides(strides, shapes) -> list[tuple[int, ...] | None]:
    """The ``strides`` argument of `EinsumPlan`: per operand None or its element strides; None
    where the view has no unit-stride dim (every kernel reads one dim at unit stride)."""
    if strides is None:
        return [None] * len(shapes)
    strides = list(strides)
    if len(strides) != len(shapes):
        raise ValueError(f"einsum plan: strides has {len(strides)} entries for {len(shapes)} operands")
    out: list[tuple[int, ...] | None] = []
    for i, (st, sh) in enumerate(zip(strides, shapes, strict=True)):
        if st is None:
            out.append(None)
            continue
        st = tuple(st)
        if len(st) != len(sh) or not all(isinstance(s, (int, np.integer)) for s in st):
            raise ValueError(f"einsum plan: strides[{i}] must be {len(sh)} ints (elements), got {st!r}")
        st = tuple(int(s) for s in st)
        big = [s for s, n in zip(st, sh, strict=True) if n != 1]
        if big and 1 not in big:
            out.append(None)
        else:
            out.append(st)
    return out


def view_of_base(x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(base, offset)`` when ``x`` is a view into an array that fills one dense block (C order,
    F order or any axis permutation; `minijit.arrays`) and every element of ``x`` lies inside that
    block, with byte strides that are multiples of the itemsize: ``base`` is the block as a flat
    array of ``x``'s dtype (from its lowest address) and ``offset`` the element of it that is
    ``x``'s first element. None otherwise (then the view must be copied)."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not is_dense(root.shape, root.strides, root.itemsize):
        return None
    root = dense_view("base", root)  # C-contiguous: its memory in order, from its first element
    item = x.itemsize
    delta = x.ctypes.data - root.ctypes.data
    if delta % item or any(s % item for s in x.strides):
        return None
    lo = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s > 0)
    usable = root.nbytes - root.nbytes % item  # whole elements of x's dtype
    if x.size and (delta + lo < 0 or delta + hi + item > usable):
        return None
    flat = root.reshape(-1).view(np.uint8)[:usable].view(x.dtype)
    return flat, delta // item


def checked_view(i: int, x: np.ndarray, strides: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """ValueError naming operand ``i`` unless ``x`` has the planned element ``strides`` (on dims of
    size > 1) and lies inside a base array that is one dense block; returns the block (flat) and
    the offset."""
    item = x.itemsize
    got = tuple(s // item if s % item == 0 else None for s in x.strides)
    if any(n != 1 and g != w for n, g, w in zip(x.shape, got, strides, strict=True)):
        raise ValueError(
            f"einsum plan: operand {i} has byte strides {x.strides}, the plan reads it in place with element"
            f" strides {strides} (build a plan for this layout, or pass a copy to a plan built without strides)"
        )
    found = view_of_base(x)
    if found is None:
        raise ValueError(
            f"einsum plan: operand {i} is not a view inside a base array that is one dense block (C order, F"
            " order or any axis permutation), so it cannot be read in place with the planned strides"
        )
    return found
