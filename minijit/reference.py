"""Pure-Python/numpy reference executor for a :class:`~minijit.ir.TensorConfig`
(docs/seeds/004_mini_jit_backend.txt section 5.2).

This is the oracle for the JIT backends and the debugging path; it is slow by design.

Memory model: ``in0``, ``in1`` and ``out`` are flat 1-D numpy arrays of the config's dtype.
Strides are in elements; the element of index tuple ``(i_0, ..., i_{d-1})`` of a tensor lies at
``base + sum(i_j * stride_j)``, where ``base`` is the tensor's entry of ``offsets`` (default 0, so
strides are relative to element 0; give a positive base when strides are negative). Every
reachable element must lie inside the array (checked before anything runs).

Execution mirrors the seed's ``execute_iter``: recursion over the shared and seq dims in list
order (shared loops run sequentially here); at the prim block the first-touch primitive runs on
the output block before the first iteration of all enclosing K loops, then the main primitive,
then the last touch after the last K iteration. Configs without prim dims run the main primitive
on 1 x 1 (x 1) blocks, so unoptimized configs can be checked too.

Primitives (numpy on strided views, column-major as in the kernels):

* gemm/brgemm: ``C[m, n] += sum_br sum_k A_br[m, k] B_br[k, n]`` (BR = the outer prim K dim).
* zero: ``out = 0``; relu: ``out = max(in0, 0)``; copy: ``out = in0`` (a transposition is just
  different strides).
* add/sub/mul/div/min/max: ``out = in0 (op) in1`` elementwise.
* first/last touch work in place on the output block: zero, relu (``max(out, 0)``), copy (no-op).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from minijit.errors import SetupError, error_t
from minijit.ir import GEMM_PTYPES, Dimension, TensorConfig, dim_t, exec_t, offset_range, ptype_t

__all__ = ["execute_iter", "check_arrays"]

_BINARY_UFUNCS = {
    ptype_t.add: np.add,
    ptype_t.sub: np.subtract,
    ptype_t.mul: np.multiply,
    ptype_t.div: np.divide,
    ptype_t.min: np.minimum,
    ptype_t.max: np.maximum,
}


def check_arrays(
    config: TensorConfig,
    in0: np.ndarray | None,
    in1: np.ndarray | None,
    out: np.ndarray,
    offsets: Sequence[int] = (0, 0, 0),
) -> None:
    """Raise SetupError unless each tensor the config uses is a 1-D array of the config's dtype
    (out writeable) and every element its strides reach (from its base offset) lies inside it.
    Arrays the primitive does not read (in1 of a unary op, in0 of zero) may be ``None``."""
    want = config.dtype.numpy
    used = {"in0": config.uses_in0, "in1": config.uses_in1, "out": True}
    if len(offsets) != 3:
        raise SetupError(error_t.wrong_array, f"offsets needs 3 entries (in0, in1, out), got {len(offsets)}")
    for name, arr, base in zip(("in0", "in1", "out"), (in0, in1, out), offsets, strict=True):
        if not used[name] and arr is None:
            continue
        if not isinstance(arr, np.ndarray):
            raise SetupError(error_t.wrong_array, f"{name} must be a numpy array, got {type(arr).__name__}")
        if arr.ndim != 1:
            raise SetupError(error_t.wrong_array, f"{name} must be a flat 1-D array, got shape {arr.shape}")
        if arr.dtype != want:
            raise SetupError(error_t.wrong_dtype, f"{name} has dtype {arr.dtype}, the config needs {want}")
        if name == "out" and not arr.flags.writeable:
            raise SetupError(error_t.wrong_array, "out is read-only")
        if not used[name]:
            continue
        lo, hi = offset_range(config, name)
        if base + lo < 0 or base + hi >= arr.shape[0]:
            raise SetupError(
                error_t.out_of_bounds,
                f"{name}: strides reach elements {base + lo}..{base + hi} (base {base}), "
                f"but the array has {arr.shape[0]} elements",
            )


def _view(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    step = buf.strides[0]
    if not buf.flags.c_contiguous:  # a strided 1-D view
        return as_strided(buf[offset:], shape=shape, strides=tuple(s * step for s in strides))
    # numpy checks that the view stays inside buf (as_strided would not), and builds it faster
    return np.ndarray(shape, buf.dtype, buffer=buf, offset=offset * step, strides=tuple(s * step for s in strides))


def _block(dims: Sequence[Dimension], idx: Sequence[int | None], tensor: str) -> tuple[tuple, tuple]:
    shape = tuple(1 if i is None else dims[i].size for i in idx)
    strides = tuple(0 if i is None else dims[i].stride(tensor) for i in idx)
    return shape, strides


def _touch(ptype: ptype_t, view: np.ndarray) -> None:
    if ptype is ptype_t.zero:
        view[...] = 0
    elif ptype is ptype_t.relu:
        np.maximum(view, 0, out=view)
    # none, copy: nothing to do in place


def execute_iter(
    config: TensorConfig,
    in0: np.ndarray | None,
    in1: np.ndarray | None,
    out: np.ndarray,
    offsets: Sequence[int] = (0, 0, 0),
) -> None:
    """Execute ``config`` on flat arrays (see the module docstring), writing into ``out``.

    ``offsets`` are the base element offsets of in0, in1 and out. The arrays are in the config's
    roles: for a config with ``inputs_swapped`` (see `minijit.optimizer.swap_operands`) pass the
    caller's in1 as ``in0`` and in0 as ``in1``. Raises SetupError for arrays of the wrong kind or
    too small for the strides.
    """
    check_arrays(config, in0, in1, out, offsets)
    dims = config.dims
    first_prim = config.first_prim
    loops = dims[:first_prim]
    prim_ids = list(range(first_prim, len(dims)))
    main = config.prim_main

    # output block (for the touches): the non-K prim dims
    touch_ids = [i for i in prim_ids if dims[i].type is not dim_t.k]
    touch_shape, touch_strides = _block(dims, touch_ids, "out")

    if main in GEMM_PTYPES:
        p = config.prim
        a_shape, a_strides = _block(dims, (p.br, p.m, p.k), "in0")
        b_shape, b_strides = _block(dims, (p.br, p.k, p.n), "in1")
        c_shape, c_strides = _block(dims, (p.m, p.n), "out")

        def main_kernel(o0: int, o1: int, oo: int) -> None:
            a = _view(in0, o0, a_shape, a_strides)
            b = _view(in1, o1, b_shape, b_strides)
            c = _view(out, oo, c_shape, c_strides)
            c += np.matmul(a, b).sum(axis=0, dtype=c.dtype)

    else:
        shape0, strides0 = _block(dims, prim_ids, "in0")
        shape1, strides1 = _block(dims, prim_ids, "in1")
        shapeo, stridesout = _block(dims, prim_ids, "out")

        def main_kernel(o0: int, o1: int, oo: int) -> None:
            c = _view(out, oo, shapeo, stridesout)
            if main is ptype_t.zero:
                c[...] = 0
            elif main is ptype_t.copy:
                c[...] = _view(in0, o0, shape0, strides0)
            elif main is ptype_t.relu:
                np.maximum(_view(in0, o0, shape0, strides0), 0, out=c)
            else:
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    _BINARY_UFUNCS[main](_view(in0, o0, shape0, strides0), _view(in1, o1, shape1, strides1), out=c)

    first, last = config.prim_first, config.prim_last

    def leaf(o0: int, o1: int, oo: int, is_first: bool, is_last: bool) -> None:
        if is_first and first is not ptype_t.none:
            _touch(first, _view(out, oo, touch_shape, touch_strides))
        main_kernel(o0, o1, oo)
        if is_last and last is not ptype_t.none:
            _touch(last, _view(out, oo, touch_shape, touch_strides))

    def rec(level: int, o0: int, o1: int, oo: int, is_first: bool, is_last: bool) -> None:
        if level == len(loops):
            leaf(o0, o1, oo, is_first, is_last)
            return
        d = loops[level]
        assert d.exec is not exec_t.prim
        for it in range(d.size):
            f, l = is_first, is_last
            if d.type is dim_t.k and d.size > 1:
                f = is_first and it == 0
                l = is_last and it == d.size - 1
            rec(level + 1, o0 + it * d.stride_in0, o1 + it * d.stride_in1, oo + it * d.stride_out, f, l)

    dummy = np.zeros(1, dtype=config.dtype.numpy)
    if in0 is None:
        in0 = dummy
    if in1 is None:
        in1 = dummy
    base0, base1, baseo = (int(o) for o in offsets)
    if not config.uses_in0:
        base0 = 0
    if not config.uses_in1:
        base1 = 0
    rec(0, base0, base1, baseo, True, True)
