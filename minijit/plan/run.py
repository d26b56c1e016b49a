"""The one runner of plan trees: `run` walks a body with the addresses of in0, in1, out.

Native targets pass ``arrays=None``: every kernel gets raw addresses. Emulated targets pass the
three numpy arrays the addresses point into (a packed buffer replaces its operand's): the
emulation worker copies whole arrays in and out, so the loop nest is called with views whose
first element is at the address. `TensorOperation.execute` and ``execute_ptr`` call it after
their checks; ``execute_iter`` is the pure-Python reference and runs no plan.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from minijit import parallel
from minijit.plan.nodes import Chunk, Kernel, Node, Pack, Peel, Plan

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray] | None


def run_plan(plan: Plan, a0: int, a1: int, ao: int, arrays: Arrays = None) -> None:
    """Run ``plan`` on operands in the caller's roles (exchanged first where ``plan.swapped``)."""
    if plan.swapped:
        a0, a1 = a1, a0
        if arrays is not None:
            arrays = (arrays[1], arrays[0], arrays[2])
    run(plan.body, a0, a1, ao, arrays)


def run(node: Node, a0: int, a1: int, ao: int, arrays: Arrays = None) -> None:
    """Run ``node`` on the operands at addresses ``a0``, ``a1``, ``ao`` (in its roles; ``arrays``:
    see the module docstring)."""
    kind = type(node)
    if kind is Kernel:
        if arrays is not None:  # emulated: one call, the worker copies the arrays in and out
            views = [_origin_view(arr, addr) for arr, addr in zip(arrays, (a0, a1, ao), strict=True)]
            node.loopnest(*views, 0, node.iterations)
        elif node.threads == 1:
            node.raw(a0, a1, ao, 0, node.iterations)
        else:
            parallel.run_loopnest(node.loopnest.address, a0, a1, ao, node.iterations, node.threads)
    elif kind is Pack:
        _run_pack(node, a0, a1, ao, arrays)
    elif kind is Chunk:
        _run_chunks(node, a0, a1, ao)
    elif kind is Peel:
        for part in node.parts:
            b0, b1, bo = part.byte_offsets
            run_plan(part.plan, a0 + b0, a1 + b1, ao + bo, arrays)
    else:
        raise TypeError(f"not a plan node: {kind.__name__}")


def _run_pack(node: Pack, a0: int, a1: int, ao: int, arrays: Arrays) -> None:
    """Fill this call's buffers (taken from the node's pool), then run the body on them."""
    scratch = node.pool.acquire()
    try:
        addr = [a0, a1]
        arrs = None if arrays is None else list(arrays)
        for fill, (buf, base) in zip(node.fills, scratch, strict=True):
            t, item = fill.operand, buf.itemsize
            for copy in fill.copies:
                src = addr[t] + copy.src * item
                views = None if arrs is None else (arrs[t], arrs[t], buf)
                run_plan(copy.plan, src, src, base + copy.dst * item, views)
            addr[t] = base
            if arrs is not None:
                arrs[t] = buf
        run(node.body, addr[0], addr[1], ao, None if arrs is None else (arrs[0], arrs[1], arrs[2]))
    finally:
        node.pool.release(scratch)


def _run_chunks(node: Chunk, a0: int, a1: int, ao: int) -> None:
    """Every chunk (native only): K chunks in order, each on its own threads; M chunks split over
    the node's threads."""
    s0, s1, so = node.steps
    if node.kind == "K":
        for i, plan in enumerate(node.bodies):
            run(plan.body, a0 + i * s0, a1 + i * s1, ao + i * so)
        return
    body = node.bodies[0].body

    def chunks(begin: int, end: int) -> None:
        for i in range(begin, end):
            run(body, a0 + i * s0, a1 + i * s1, ao + i * so)

    if node.threads == 1:
        chunks(0, node.count)
    else:
        parallel.run_range(chunks, node.count, node.threads)


def _origin_view(arr: np.ndarray, address: int) -> np.ndarray:
    """A view of C-contiguous ``arr`` whose first element is at ``address`` and whose memory span
    is still the whole array (what the emulation worker copies in and out)."""
    flat = arr.reshape(-1)
    offset = (address - arr.ctypes.data) // arr.itemsize
    if offset == 0 or flat.size == 0:
        return arr
    last = flat.size - 1 - offset
    # two by two elements: origin, element 0, the last element, origin again
    return as_strided(flat[offset:], shape=(2, 2), strides=(-offset * arr.itemsize, last * arr.itemsize))
