"""Fused native conversion passes for `minijit.einsum` on scipy/pydata operands (issue 53 part 3).

Two x86-64 passes, generated once per shape class with minijit's assembler and run natively
(`minijit.runtime.kernel.Kernel`); on any other host, or for input they do not cover, the
callers fall back to the numpy conversions (`minijit.sparseauto.convert`), so results never
depend on which path ran.

* `csf_from_sorted`: coordinates (``ndim x nnz`` int64, C order, as a pydata ``sparse.COO``
  holds them) to CSF levels (all compressed, modes in order) in **one** pass: every coordinate
  is range-checked, the entries are checked to be strictly increasing in lexicographic order
  (sorted, no duplicates: never trusted from flags), and the int32 ``crd`` of every level and
  the ``pos`` of the levels below the first are written as the walk goes (a new position of level
  ``k`` wherever the coordinates of levels ``0..k`` change). The first entry that is out of range
  or out of order stops the pass: the caller then takes the numpy path, which sorts or raises.
  The caller's arrays are only read.
* `coo_from_dense`: the non-zeros of a C-contiguous float32/float64 array of 1 to 4 dimensions
  as pydata's ``COO.from_numpy`` lists them (C order, int64 coordinates), counted first
  (``np.count_nonzero`` of the bits), then one pass that writes the coordinates and values; a
  value is zero when all its bits are (``-0.0`` and NaN are listed, as ``from_numpy`` lists
  what is not bitwise its fill value 0.0).

Cost at 2e5 non-zeros, 3 modes: one read of the 4.8 MB of coordinates, instead of about eight
numpy passes (bench/results/x86_64_sparse_einsum_calls_2026-11-28.md).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from minijit.sparseauto.tensor import INDEX_MAX, Level, SparseTensor

__all__ = ["MAX_DENSE_NDIM", "MAX_NDIM", "available", "coo_from_dense", "csf_from_sorted"]

#: most modes `csf_from_sorted` generates code for (one row-pointer register per mode)
MAX_NDIM = 7
#: most dimensions `coo_from_dense` generates code for (an index and a row pointer per dimension)
MAX_DENSE_NDIM = 4

_lock = threading.RLock()  # _kernel looks the target up while holding it
_kernels: dict[tuple[str, int, str], Any] = {}  # kind, nd, variant -> (Kernel, direct entry)
_native: list[Any] = []  # the native target, once looked up (None: no runtime on this host)
#: the passes' signatures (`convert_native_x86`) with every pointer a char* (cffi buffers)
_DIRECT = {
    "csf": "int64_t(*)(char *, int64_t, char *, char *, char *, char *)",
    "nonzero": "int64_t(*)(char *, char *, char *, int64_t, char *)",
}


def _target() -> Any:
    """The native target (`minijit.targets.native`), which hands out the passes; None where this
    host has none."""
    if not _native:
        with _lock:  # looked up once, whichever thread comes first
            if not _native:
                try:
                    from minijit import targets  # noqa: PLC0415

                    t = targets.native()
                except Exception:  # noqa: BLE001 - no runtime on this host: the numpy path
                    t = None
                _native.append(t)
    return _native[0]


def available() -> bool:
    """True when the native target runs the passes (`Target.sparse_convert_passes`; else the
    callers use numpy)."""
    t = _target()
    return t is not None and t.sparse_convert_passes


def _kernel(kind: str, nd: int, dtype: str = "") -> Any:
    key = (kind, nd, dtype)
    k = _kernels.get(key)
    if k is None:
        with _lock:
            k = _kernels.get(key)
            if k is None:
                kern = _target().sparse_convert_pass(kind, nd, dtype)
                # called directly (the Kernel stays alive here, never closed): the arrays are
                # built or checked by the callers below, so the generic per-call argument check
                # (~18 us a call) is not needed
                k = _kernels[key] = (kern, _ffi().cast(_DIRECT[kind], kern.address))
    return k[1]


def _ffi() -> Any:
    from minijit.runtime.kernel import _ffi as ffi  # noqa: PLC0415 - cffi loads with the runtime

    return ffi


def _buf(x: np.ndarray) -> Any:
    """A cffi char buffer over ``x``'s memory (cffi passes it as a pointer to its first byte)."""
    return _ffi().from_buffer(x)


def csf_from_sorted(coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], dt: np.dtype) -> SparseTensor | None:
    """A CSF `SparseTensor` (every level compressed, mode order ``0..ndim-1``) from coordinates
    ``coords`` (``ndim x nnz``) and values ``vals`` (``nnz``, read as ``dt``), or None when the
    fused pass does not apply (not an x86-64 host, ``coords`` not C-contiguous int64, more than
    `MAX_NDIM` modes, no entries) or finds the input not canonical (an entry out of range, out of
    order or repeated): the caller then converts with numpy, which sorts or raises.

    The tensor's ``crd``/``pos`` are new int32 arrays (views of one buffer per kind; the upper
    levels' views keep the whole buffer alive); ``vals`` is a read-only view of ``vals`` when it
    is C-contiguous of dtype ``dt``, else a copy. Nothing of the caller's is written."""
    if not available() or not isinstance(coords, np.ndarray) or coords.ndim != 2:
        return None
    nd, nnz = coords.shape
    if not 1 <= nd <= MAX_NDIM or nd != len(shape) or nnz == 0 or nnz > INDEX_MAX:
        return None
    if coords.dtype != np.int64 or not coords.flags.c_contiguous:
        return None
    if not isinstance(vals, np.ndarray) or vals.shape != (nnz,):
        return None
    sizes = np.array(shape, np.int64)
    crd = np.empty((nd, nnz), np.int32)
    pos = np.empty((max(nd - 1, 1), nnz + 1), np.int32)
    counts = np.zeros(nd, np.int64)
    fn = _kernel("csf", nd)
    bad = fn(_buf(coords), nnz, _buf(sizes), _buf(crd), _buf(pos), _buf(counts))
    if bad != -1:
        return None
    counts[nd - 1] = nnz
    storage = []
    for k in range(nd):
        n = int(counts[k])
        if k == 0:
            p = np.array([0, n], np.int32)
        else:
            p = pos[k - 1, : int(counts[k - 1]) + 1]
            p[-1] = n  # the last parent's end (the pass writes every other start)
        c = crd[k, :n]
        p.flags.writeable = False
        c.flags.writeable = False
        storage.append(Level("compressed", int(shape[k]), p, c))
    if vals.dtype == dt and vals.flags.c_contiguous:
        v = vals.view()
    else:
        v = np.array(vals, dt, order="C")
    v.flags.writeable = False
    return SparseTensor._trusted(tuple(int(n) for n in shape), tuple(storage), v, tuple(range(nd)))


def coo_from_dense(a: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(coords, data)`` of the non-zeros of ``a`` in C order (``coords`` int64, ``ndim x
    count``; ``data`` of ``a``'s dtype; both new arrays), or None when the pass does not apply
    (not an x86-64 host, ``a`` not C-contiguous float32/float64 of 1 to `MAX_DENSE_NDIM`
    dimensions, or empty): the caller then uses numpy."""
    if not available() or not isinstance(a, np.ndarray) or not 1 <= a.ndim <= MAX_DENSE_NDIM or a.size == 0:
        return None
    if a.dtype not in (np.float32, np.float64) or not a.flags.c_contiguous:
        return None
    count = int(np.count_nonzero(a.view(np.int64 if a.dtype == np.float64 else np.int32)))
    coords = np.empty((a.ndim, count), np.int64)
    data = np.empty(count, a.dtype)
    if count:
        shape = np.array(a.shape, np.int64)
        fn = _kernel("nonzero", a.ndim, a.dtype.name)
        written = fn(_buf(a), _buf(shape), _buf(coords), count, _buf(data))
        if written != count:  # the array changed under us (another thread): let numpy answer
            return None
    return coords, data
