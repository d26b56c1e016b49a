"""The one rule for arrays handed to ``execute`` (CPU and CUDA tensor operations, SpMM, einsum plans).

**Any dense array is accepted.** An array whose elements fill one contiguous block of memory, with
nothing between them, is taken as that block: C order, F order (``np.asfortranarray``, ``A.T``
of a C-order array) or any permutation of its axes, with non-negative strides. Sorted by stride,
each axis's byte stride equals the product of the smaller axes' extents times the item size;
axes of length 1 may have any stride, and empty arrays are dense. A configuration's strides count
*elements of that block from its lowest address* (for such an array: its data pointer), relative
to the element at ``offset`` (default 0). So an F-order ``(M, K)`` array is the same memory as a
C-order ``(K, M)`` array and is read exactly as that one would be: describe the layout you hold
in ``setup()``'s strides.

A view with gaps (a slice with steps such as ``x[::3]``, a slice of a larger array such as
``x[:, :4]``) or with negative strides (``x[::-1]``), and a broadcast view, are refused with a
``ValueError`` naming the argument: its memory holds elements the view does not own, so reading
it as a block would misread it. Fix: pass ``np.ascontiguousarray(x)`` (a copy), or pass the array
the view was taken from and describe the view in ``setup()``'s strides (with ``offsets`` for
views whose first element is not the buffer's first, e.g. negative strides).

Every element the strides reach, shifted by the offset, must lie inside the block: machine code
never touches memory an array does not own.

Operations that take arrays by their logical shape rather than through configured strides apply
the same rule to what they accept: ``SpMM`` reads a host B and writes a host C given in C or F
order as the matrices they are (an F-order C through a row-major scratch); einsum reads an
operand in any axis order of a dense block in place (relabelling its indices, or through
``EinsumPlan(strides=)``) and copies other host layouts. Device arrays a kernel reads or writes
row-major by shape (SpMM's device B and C, a CUDA einsum plan's operands and ``out``) are used in
place in C order and reordered on the device through a C-order scratch in any other dense order
(`minijit.cuda.reorder`).
"""

from __future__ import annotations

from collections.abc import Sequence

import _cffi_backend
import numpy as np

# cffi's backend calls with their types resolved once: `address` runs three times per execute.
# The types come from the backend itself (the very objects ``cffi.FFI().typeof("char[]")`` and
# ``typeof("intptr_t")`` return), so importing this module does not load cffi's C parser.
_CHARS = _cffi_backend.new_array_type(_cffi_backend.new_pointer_type(_cffi_backend.new_primitive_type("char")), None)
_INTPTR = _cffi_backend.new_primitive_type("intptr_t")
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
    """ValueError naming ``name`` unless the array is C-contiguous (byte ``strides``): for callers
    that read an array by its logical shape in C order (a device matrix for a kernel), not as a
    block through configured strides."""
    if is_c_contiguous(shape, strides, item):
        return
    raise ValueError(
        f"{name} is not C-contiguous (shape {tuple(shape)}, byte strides {tuple(strides or ())}): this kernel reads "
        f"it row-major by its shape. Pass a C-order copy (np.ascontiguousarray({name}), tensor.contiguous())"
    )


def dense_order(shape: Sequence[int], strides: Sequence[int] | None, item: int) -> tuple[int, ...] | None:
    """The axes of ``shape`` from the largest byte stride to the smallest when byte ``strides``
    (None: C order) lay it out as one dense block (the rule of this module: no gaps, non-negative
    strides; axes of length 1 and empty arrays anything); else None. Transposing an array by
    this order gives a C-contiguous view of its block."""
    axes = tuple(range(len(shape)))
    if strides is None or any(int(n) == 0 for n in shape):
        return axes
    ranked = sorted(axes, key=lambda i: (int(shape[i]) > 1, int(strides[i])), reverse=True)
    want = item
    for i in reversed(ranked):
        if int(shape[i]) == 1:
            continue
        if int(strides[i]) != want:
            return None
        want *= int(shape[i])
    return tuple(ranked)


def is_dense(shape: Sequence[int], strides: Sequence[int] | None, item: int) -> bool:
    """True when byte ``strides`` (None: C order) lay ``shape`` out as one dense block (C order,
    F order or any axis permutation; see the module docstring)."""
    return dense_order(shape, strides, item) is not None


def require_dense(name: str, shape: Sequence[int], strides: Sequence[int] | None, item: int) -> None:
    """ValueError naming ``name`` unless the array is one dense block (byte ``strides``)."""
    if is_dense(shape, strides, item):
        return
    raise ValueError(
        f"{name} is not one dense block (shape {tuple(shape)}, byte strides {tuple(strides or ())}): it has gaps "
        f"between its elements (a strided view such as x[::2], or a slice of a larger array) or negative strides, "
        f"and the configured strides count elements of one dense block (C order, F order or any axis "
        f"permutation) from its lowest address, so it would be misread. Pass np.ascontiguousarray({name}) (a copy), "
        f"or pass the array the view was taken from and describe the view in setup()'s strides (offsets= for its "
        f"first element)"
    )


def dense_view(name: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` itself when it is C-contiguous, else a C-contiguous view of the dense block it
    fills (its axes ordered by stride: same memory, same first element, same writeability);
    ValueError naming ``name`` when ``arr`` is not one dense block."""
    flags = arr.flags
    if flags.c_contiguous:
        return arr
    if flags.f_contiguous:  # numpy's F order flag: one dense block, axes reversed
        return arr.T
    order = dense_order(arr.shape, arr.strides, arr.itemsize)
    if order is None:
        require_dense(name, arr.shape, arr.strides, arr.itemsize)
    view = arr.transpose(order)
    assert view.flags.c_contiguous, (arr.shape, arr.strides)
    return view


def address(arr) -> int:
    """Address of the first element of numpy array ``arr``: through cffi's buffer view for a
    C-contiguous array (cheaper than ``arr.ctypes.data``, which builds a ctypes object per call),
    else ``arr.ctypes.data``."""
    if arr.flags.c_contiguous:
        return int(_cast(_INTPTR, _from_buffer(_CHARS, arr, False)))
    return arr.ctypes.data


def quick_addresses(in0, in1, out, dtype, need0: int, need1: int, need_out: int) -> tuple[int, int, int] | None:
    """The addresses of ``in0``, ``in1``, ``out`` when each is a plain ``np.ndarray`` of ``dtype``
    (the very dtype object) in C or F order holding at least ``need*`` bytes from its lowest
    address, and ``out`` is writable; else None, and the caller runs the full checks, which name
    what is wrong (and take any other dense block). One buffer request per array (cffi's
    ``from_buffer`` refuses a non-C-contiguous or, for ``out``, read-only array; an F-order
    array's transpose is the same block in C order) instead of reading flags, size and address one
    by one: the common case of ``execute``."""
    nd = np.ndarray
    if type(in0) is not nd or type(in1) is not nd or type(out) is not nd:
        return None
    if in0.dtype is not dtype or in1.dtype is not dtype or out.dtype is not dtype:
        return None
    try:
        b0, b1, bo = _from_buffer(_CHARS, in0, False), _from_buffer(_CHARS, in1, False), _from_buffer(_CHARS, out, True)
    except (BufferError, TypeError, ValueError):
        try:  # F order: .T is the same block in C order (any other layout raises again)
            b0, b1, bo = _c_block(in0, False), _c_block(in1, False), _c_block(out, True)
        except (BufferError, TypeError, ValueError):
            return None
    if len(b0) < need0 or len(b1) < need1 or len(bo) < need_out:
        return None
    return int(_cast(_INTPTR, b0)), int(_cast(_INTPTR, b1)), int(_cast(_INTPTR, bo))


def _c_block(arr: np.ndarray, writable: bool):
    """cffi's buffer of ``arr``'s block when ``arr`` is in C or F order (BufferError otherwise)."""
    return _from_buffer(_CHARS, arr if arr.flags.c_contiguous else arr.T, writable)


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
