"""The one rule for arrays handed to ``execute`` (CPU and CUDA tensor operations).

A configuration's strides count *elements of a C-contiguous array*, relative to the element at
``offset`` (default 0, the array's first element). An array that is not C-contiguous (a slice
with steps such as ``x[::3]``, a transpose such as ``A.T``, a Fortran-order array, a reversed or
broadcast view) is rejected with a ``ValueError`` naming the argument: its memory holds elements
the view does not own, or holds them in another order, so reading it through the configured
strides would misread it. Fix: pass ``np.ascontiguousarray(x)`` (a copy), or pass the array the
view was taken from and describe the view in ``setup()``'s strides (with ``offsets`` for views
whose first element is not the buffer's first, e.g. negative strides).

Every element the strides reach, shifted by the offset, must lie inside the array: machine code
never touches memory an array does not own.
"""

from __future__ import annotations

from collections.abc import Sequence

import _cffi_backend
import cffi
import numpy as np

_FFI = cffi.FFI()
# cffi's backend calls with their types resolved once: `address` runs three times per execute
_CHARS, _INTPTR = _FFI.typeof("char[]"), _FFI.typeof("intptr_t")
_from_buffer, _cast = _cffi_backend.from_buffer, _cffi_backend.cast

#: ``execute(..., offsets=)``: element offsets of in0, in1, out (None: all 0)
Offsets = tuple[int, int, int] | None


def c_strides(shape: Sequence[int], item: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape`` with ``item``-byte elements."""
    out, acc = [], item
    for n in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def is_c_contiguous(shape: Sequence[int], strides: Sequence[int] | None, item: int) -> bool:
    """True when byte ``strides`` (None: C order) lay ``shape`` out as one C-order block
    (axes of length 1 may have any stride, empty arrays are contiguous)."""
    if strides is None or any(int(n) == 0 for n in shape):
        return True
    want = c_strides(shape, item)
    return all(int(n) == 1 or int(s) == w for n, s, w in zip(shape, strides, want, strict=True))


def require_c_contiguous(name: str, shape: Sequence[int], strides: Sequence[int] | None, item: int) -> None:
    """ValueError naming ``name`` unless the array is C-contiguous (byte ``strides``)."""
    if is_c_contiguous(shape, strides, item):
        return
    raise ValueError(
        f"{name} is not C-contiguous (shape {tuple(shape)}, byte strides {tuple(strides or ())}): the configured "
        f"strides count elements of a C-contiguous array from its first element, so a strided view, a transpose "
        f"(A.T) or a Fortran-order array would be misread. Pass np.ascontiguousarray({name}) (a copy), or pass the "
        f"array the view was taken from and describe the view in setup()'s strides (offsets= for its first element)"
    )


def address(arr) -> int:
    """Address of the first element of numpy array ``arr``: through cffi's buffer view for a
    C-contiguous array (cheaper than ``arr.ctypes.data``, which builds a ctypes object per call),
    else ``arr.ctypes.data``."""
    if arr.flags.c_contiguous:
        return int(_cast(_INTPTR, _from_buffer(_CHARS, arr, False)))
    return arr.ctypes.data


def quick_addresses(in0, in1, out, dtype, need0: int, need1: int, need_out: int) -> tuple[int, int, int] | None:
    """The addresses of ``in0``, ``in1``, ``out`` when each is a plain C-contiguous ``np.ndarray``
    of ``dtype`` (the very dtype object) holding at least ``need*`` bytes from its first element,
    and ``out`` is writable; else None, and the caller runs the full checks, which name what is
    wrong. One buffer request per array (cffi's ``from_buffer`` refuses a non-C-contiguous or,
    for ``out``, read-only array) instead of reading flags, size and address one by one: the
    common case of ``execute``."""
    nd = np.ndarray
    if type(in0) is not nd or type(in1) is not nd or type(out) is not nd:
        return None
    if in0.dtype is not dtype or in1.dtype is not dtype or out.dtype is not dtype:
        return None
    try:
        b0, b1, bo = _from_buffer(_CHARS, in0, False), _from_buffer(_CHARS, in1, False), _from_buffer(_CHARS, out, True)
    except (BufferError, TypeError, ValueError):
        return None
    if len(b0) < need0 or len(b1) < need1 or len(bo) < need_out:
        return None
    return int(_cast(_INTPTR, b0)), int(_cast(_INTPTR, b1)), int(_cast(_INTPTR, bo))


def check_offsets(offsets: Sequence[int] | None) -> tuple[int, int, int]:
    """The ``offsets`` argument of ``execute``: None or three non-negative ints (elements)."""
    if offsets is None:
        return (0, 0, 0)
    offsets = tuple(offsets)
    if len(offsets) != 3 or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets):
        raise ValueError(f"offsets must be three non-negative ints (elements of in0, in1, out), got {offsets!r}")
    return offsets  # type: ignore[return-value]


def require_reach(name: str, lo: int, hi: int, offset: int, size: int) -> None:
    """ValueError unless elements ``offset + lo .. offset + hi`` lie in ``0 .. size - 1``."""
    if 0 <= offset + lo and offset + hi < size:
        return
    where = f"element {offset}" if offset else "its first element"
    raise ValueError(
        f"{name}: the strides reach elements {lo}..{hi} relative to {where}, outside the array "
        f"(elements {-offset}..{size - 1 - offset} from there)"
    )
