"""Reorder copies on the device: a dense device array in any axis order to and from a C-order buffer.

Kernels that read or write a device matrix row-major by its logical shape (SpMM's B and C, the
operands and result of a `minijit.einsum.cuda.CudaEinsumPlan`) take any array that fills one dense
block (C order, F order, any axis permutation; `minijit.arrays`). A C-order array is used in place;
any other order goes through a C-order scratch buffer the caller owns: `to_c_order` copies the
array into it before the kernel, `from_c_order` copies a C-order result out into the caller's
array after it. Each is one launch of the elementwise copy kernel (`minijit.cuda.elementwise`,
``copy_plan``): 4-byte elements (float32) as fp32, 2-byte elements (float16, bfloat16) as .b16
bits, on the caller's driver (`ptx.driver` or `ptx.simdriver`) and its default stream, so the
launches are ordered with the kernels around them; nothing is copied through the host and the
functions return without waiting.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from minijit.arrays import c_strides, is_c_contiguous, require_dense
from minijit.cuda import elementwise
from minijit.cuda.launch import _loaded
from minijit.runtime.device_arrays import DeviceView

__all__ = ["copy_layout", "from_c_order", "needs_reorder", "to_c_order"]


def needs_reorder(view: DeviceView, name: str) -> bool:
    """False when ``view`` is C-contiguous (read in place), True when it fills one dense block in
    another axis order (read through a C-order buffer); ValueError naming ``name`` otherwise."""
    item = view.itemsize
    if is_c_contiguous(view.shape, view.strides, item):
        return False
    require_dense(name, view.shape, view.strides, item)
    return True


@functools.lru_cache(maxsize=256)
def _plan(shape: tuple[int, ...], src: tuple[int, ...], dst: tuple[int, ...], es: int) -> elementwise.Plan:
    return elementwise.copy_plan(shape, src, dst, es)


def _element_strides(shape: tuple[int, ...], strides: tuple[int, ...], item: int) -> tuple[int, ...]:
    """Byte ``strides`` in elements (axes of length 1, which may have any stride, get 0)."""
    return tuple(0 if n == 1 else int(s) // item for n, s in zip(shape, strides, strict=True))


def copy_layout(
    driver: Any,
    shape: tuple[int, ...],
    item: int,
    src: int,
    src_strides: tuple[int, ...],
    dst: int,
    dst_strides: tuple[int, ...],
    device: int = 0,
) -> None:
    """Launch ``dst[i] = src[i]`` for every index tuple ``i`` of ``shape``: ``item``-byte elements
    (2 or 4), device addresses ``src``/``dst`` of the element at index 0, byte strides (multiples
    of ``item`` on every axis longer than 1). Asynchronous (the default stream); empty shapes
    launch nothing."""
    shape = tuple(int(n) for n in shape)
    if math.prod(shape) == 0:
        return
    plan = _plan(shape, _element_strides(shape, src_strides, item), _element_strides(shape, dst_strides, item), item)
    fn = _loaded(plan.spec, driver.device(device), driver)
    fn.launch(grid=plan.grid, block=plan.block, args=plan.args({"in0": src, "out": dst}))


def _strides(view: DeviceView) -> tuple[int, ...]:
    return view.strides if view.strides is not None else c_strides(view.shape, view.itemsize)


def to_c_order(driver: Any, view: DeviceView, dst: int, device: int = 0) -> None:
    """Copy device array ``view`` (one dense block, any axis order) into the C-order buffer of its
    shape at device address ``dst`` (``view.size * view.itemsize`` bytes); one launch."""
    copy_layout(driver, view.shape, view.itemsize, view.ptr, _strides(view), dst,
                c_strides(view.shape, view.itemsize), device)  # fmt: skip


def from_c_order(driver: Any, src: int, view: DeviceView, device: int = 0) -> None:
    """Copy the C-order buffer at device address ``src`` into device array ``view`` (one dense
    block, any axis order; only its own elements are written); one launch."""
    copy_layout(driver, view.shape, view.itemsize, src, c_strides(view.shape, view.itemsize), view.ptr,
                _strides(view), device)  # fmt: skip
