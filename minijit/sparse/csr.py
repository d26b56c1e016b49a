"""CSR validation: every check runs before any kernel sees the arrays.

`as_csr(x)` accepts a ``scipy.sparse`` CSR matrix/array or a tuple
``(indptr, indices, data, shape)`` of numpy arrays and returns a `Csr` with
``indptr``/``indices`` as C-contiguous int32 and ``data`` as given (float16,
float32 or float64). Malformed input raises `ValueError` (wrong values,
lengths, order, non-contiguous arrays) or `TypeError` (wrong kinds/dtypes),
with a message naming the array.

Column indices must be non-decreasing within each row (sorted; duplicates
are allowed and summed, as in ``S @ B``).

A `Csr` is a thin view of the shared sparse layer's tensor type: its levels are
``(Dense(), Compressed(unique=False))`` (`minijit.sparseauto.formats`), `Csr.tensor` is the
`minijit.sparseauto.SparseTensor` over the same arrays, and `as_csr` takes such a tensor
(any matrix whose formats say: a full level, then a segmented one, mode order (0, 1)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit.arrays import is_dense

__all__ = ["Csr", "INDEX_MAX", "as_csr", "check_dense", "check_out", "row_major"]

INDEX_MAX = 2**31 - 1  # indices, rows, columns and nnz must fit int32 (the kernels use 32-bit indices)
VALUE_DTYPES = (np.float16, np.float32, np.float64)


@dataclass(frozen=True)
class Csr:
    """A validated CSR matrix (``indptr``, ``indices`` int32; ``data`` float)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def row_nnz(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def levels(self) -> tuple:
        """The level formats (`minijit.sparseauto.formats`): every row, then each row's columns
        (sorted, repeats allowed)."""
        from minijit.sparseauto.formats import DENSE, Compressed

        return (DENSE, Compressed(unique=False))

    def tensor(self, values: np.ndarray | None = None) -> Any:
        """The shared layer's `minijit.sparseauto.SparseTensor` over these arrays (read-only views,
        nothing copied), with ``values`` (float32/float64, nnz of them; default ``data``, which
        must then be float32 or float64)."""
        from minijit.sparseauto.tensor import Level, SparseTensor

        vals = self.data if values is None else values
        if vals.dtype not in (np.float32, np.float64) or vals.shape != (self.nnz,):
            raise TypeError(
                f"values must be nnz = {self.nnz} float32 or float64 numbers, got {vals.dtype} {vals.shape}"
            )
        m, k = self.shape
        rows, cols = self.levels
        pos, crd, v = self.indptr.view(), self.indices.view(), np.ascontiguousarray(vals).view()
        for a in (pos, crd, v):
            a.flags.writeable = False
        return SparseTensor._trusted((m, k), (Level(rows, m), Level(cols, k, pos, crd)), v, (0, 1))

    def to_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def _array(name: str, x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got {x.ndim}-D with shape {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous (got a strided view); pass np.ascontiguousarray({name})")
    return x


def _index_array(name: str, x: object) -> np.ndarray:
    x = _array(name, x)
    if x.dtype.kind not in "iu" or x.dtype.itemsize > 8:
        raise TypeError(f"{name} must have an integer dtype (int32 or int64), got {x.dtype}")
    return x


def _shape(shape: object) -> tuple[int, int]:
    if not isinstance(shape, tuple | list) or len(shape) != 2:
        raise ValueError(f"shape must be a pair (rows, cols), got {shape!r}")
    out = []
    for what, v in zip(("rows", "cols"), shape, strict=True):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"shape: {what} must be an int, got {v!r}")
        if not 0 <= int(v) <= INDEX_MAX:
            raise ValueError(f"shape: {what} = {int(v)} not in 0..{INDEX_MAX}")
        out.append(int(v))
    return out[0], out[1]


def as_csr(x: object) -> Csr:
    """Validate ``x`` (scipy CSR or ``(indptr, indices, data, shape)``) into a `Csr`."""
    if isinstance(x, Csr):
        return x
    if _is_tensor(x):  # the shared layer's tensor: a CSR view when its formats say so
        return _from_tensor(x)
    if isinstance(x, tuple | list):
        if len(x) != 4:
            raise ValueError(f"a CSR tuple is (indptr, indices, data, shape); got {len(x)} items")
        indptr, indices, data, shape = x
    elif getattr(x, "format", None) == "csr" and hasattr(x, "indptr"):
        indptr, indices, data, shape = x.indptr, x.indices, x.data, tuple(x.shape)
    elif getattr(x, "format", None) is not None:
        raise TypeError(f"expected a CSR sparse matrix, got format {x.format!r}; convert with .tocsr()")
    else:
        raise TypeError(f"expected a scipy.sparse CSR matrix or (indptr, indices, data, shape), got {type(x).__name__}")
    m, k = _shape(shape)
    indptr = _index_array("indptr", indptr)
    indices = _index_array("indices", indices)
    data = _array("data", data)
    if data.dtype not in VALUE_DTYPES:
        raise TypeError(f"data must be float16, float32 or float64, got {data.dtype}")
    if indptr.shape[0] != m + 1:
        raise ValueError(f"indptr has length {indptr.shape[0]}, expected rows + 1 = {m + 1}")
    nnz = indices.shape[0]
    if nnz > INDEX_MAX:
        raise ValueError(f"nnz = {nnz} exceeds {INDEX_MAX}")
    if data.shape[0] != nnz:
        raise ValueError(f"nnz mismatch: indices has {nnz} entries, data has {data.shape[0]}")
    ip = indptr.astype(np.int64)
    if ip[0] != 0:
        raise ValueError(f"indptr[0] must be 0, got {ip[0]}")
    counts = np.diff(ip)
    if (counts < 0).any():
        r = int(np.argmax(counts < 0))
        raise ValueError(f"indptr is not monotone: indptr[{r + 1}] = {ip[r + 1]} < indptr[{r}] = {ip[r]}")
    if ip[-1] != nnz:
        raise ValueError(f"nnz mismatch: indptr[-1] = {ip[-1]} but indices has {nnz} entries")
    if nnz:
        idx = indices.astype(np.int64)
        bad = (idx < 0) | (idx >= k)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"indices[{j}] = {idx[j]} is out of range for {k} columns")
        rows = np.repeat(np.arange(m, dtype=np.int64), counts)
        down = (np.diff(idx) < 0) & (rows[1:] == rows[:-1])
        if down.any():
            j = int(np.argmax(down))
            raise ValueError(
                f"indices of row {rows[j]} are not sorted: indices[{j}] = {idx[j]} > indices[{j + 1}] = {idx[j + 1]}"
                " (call .sort_indices())"
            )
    return Csr(
        np.ascontiguousarray(indptr, dtype=np.int32),
        np.ascontiguousarray(indices, dtype=np.int32),
        data,
        (m, k),
    )


def _is_tensor(x: object) -> bool:
    return type(x).__name__ == "SparseTensor" and type(x).__module__ == "minijit.sparseauto.tensor"


def _from_tensor(t: Any) -> Csr:
    """A `Csr` over a `SparseTensor`'s arrays (shared, read-only): a matrix stored by rows whose
    first level is full and second segmented (`LevelFormat.segmented`); TypeError otherwise."""
    if t.ndim != 2 or t.mode_order != (0, 1) or not (t.levels[0].full and t.levels[1].segmented):
        raise TypeError(
            f"expected a CSR SparseTensor (a full level, then a segmented one, mode order (0, 1)), got {t!r}; "
            "convert with SparseTensor.from_coo(*t.to_coo(), t.shape, ('dense', 'compressed'))"
        )
    lv = t.storage[1]
    return Csr(lv.pos, lv.crd, t.vals, (int(t.shape[0]), int(t.shape[1])))


def check_dense(b: object, k: int, n: int, dtypes: tuple = (np.float16, np.float32)) -> np.ndarray:
    """A dense K x N operand: numpy, 2-D, one dense block (C or F order, `minijit.arrays`), dtype
    in ``dtypes``."""
    if not isinstance(b, np.ndarray):
        raise TypeError(f"B must be a numpy array, got {type(b).__name__}")
    if b.ndim != 2:
        raise ValueError(f"B must be 2-D, got shape {b.shape}")
    if b.shape != (k, n):
        raise ValueError(f"shape mismatch: S is ? x {k} and the plan has N = {n}, so B must be {(k, n)}, got {b.shape}")
    if b.dtype not in dtypes:
        raise TypeError(f"B must have dtype {' or '.join(np.dtype(d).name for d in dtypes)}, got {b.dtype}")
    if not is_dense(b.shape, b.strides, b.itemsize):
        raise ValueError(
            f"B is not one dense block (row-major or column-major), got a view with gaps or negative strides "
            f"(byte strides {b.strides}): pass np.ascontiguousarray(B)"
        )
    return b


def check_out(c: object, m: int, n: int) -> np.ndarray:
    """The output: float32, M x N, one dense block (C or F order, `minijit.arrays`), writeable.
    The kernels write row-major: an F-order C is computed into a scratch (`row_major`) and copied."""
    if not isinstance(c, np.ndarray):
        raise TypeError(f"C must be a numpy array, got {type(c).__name__}")
    if c.shape != (m, n):
        raise ValueError(f"shape mismatch: C must be {(m, n)}, got {c.shape}")
    if c.dtype != np.float32:
        raise TypeError(f"C must be float32, got {c.dtype}")
    if not is_dense(c.shape, c.strides, c.itemsize):
        raise ValueError(
            f"C is not one dense block (row-major or column-major), got a view with gaps or negative strides (byte "
            f"strides {c.strides}): pass np.empty({(m, n)}, np.float32) and copy the result into your view"
        )
    if not c.flags.writeable:
        raise ValueError("C must be writeable")
    return c


def row_major(c: np.ndarray) -> np.ndarray:
    """Where the kernels write ``c`` (checked by `check_out`): ``c`` itself when C-contiguous,
    else a C-order scratch of its shape, to be copied into ``c`` (``c[...] = scratch``)."""
    return c if c.flags.c_contiguous else np.empty(c.shape, np.float32)
