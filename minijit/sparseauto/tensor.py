"""`SparseTensor`: a sparse tensor with per-level formats (TACO/CSF style).

A tensor of ``ndim`` modes is stored as ``ndim`` levels in the storage order ``mode_order``
(level ``k`` holds the coordinates of mode ``mode_order[k]``). Each level's format is an object
of `minijit.sparseauto.formats` (`Dense`, `Compressed`, `Singleton`, `Blocked`), which knows
how the level is iterated, assembled and checked; the `Level` holds the format, the mode size
and the format's arrays (``pos``/``crd``, int32, read-only).

``vals`` (float32 or float64) holds one value per position of the last level. CSR is
``(Dense(), Compressed())`` with ``mode_order (0, 1)``, CSC the same with ``(1, 0)``, DCSR/CSF
all ``Compressed()``, COO ``(Compressed(unique=False), Singleton(), ...)``. Formats may be given
by name (``"dense"``, ``"compressed"``, ``"singleton"``, ...; `formats.as_format`).

Duplicate coordinates given to `SparseTensor.from_coo` (and to the scipy/pydata conversions) are
**summed**, as scipy and pydata do. Indices, positions and the number of positions of every
level must fit int32 (the generated code loads 32-bit indices). Every check runs at construction,
so a `SparseTensor` is valid by the time any code reads it; malformed input raises ValueError or
TypeError naming the array, level or mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minijit.sparseauto.formats import (
    COMPRESSED,
    DENSE,
    LevelFormat,
    as_format,
    check_chain,
    first_unsorted,
    format_names,
)

__all__ = ["DTYPES", "FORMATS", "INDEX_MAX", "Level", "SparseTensor", "as_sparse", "first_unsorted", "is_sparse"]

FORMATS = format_names()  # the format names `formats.as_format` accepts
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INDEX_MAX = 2**31 - 1  # coordinates, positions and level sizes must fit int32


@dataclass(frozen=True)
class Level:
    """One storage level: its format (a `LevelFormat`; a name is converted), mode size, and the
    format's arrays ``pos``/``crd`` (None where the format has none)."""

    format: LevelFormat
    size: int
    pos: np.ndarray | None = None
    crd: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.format, LevelFormat):
            object.__setattr__(self, "format", as_format(self.format))


def _check_dtype(dtype: object, what: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)  # type: ignore[arg-type]
    except TypeError as e:
        raise TypeError(f"{what}: not a dtype: {dtype!r}") from e
    if dt not in DTYPES:
        raise TypeError(f"{what} must be float32 or float64, got {dt} (convert with .astype(np.float64))")
    return dt


def _check_shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, Sequence) or isinstance(shape, str) or len(shape) == 0:
        raise ValueError(f"shape must be a non-empty tuple of ints, got {shape!r}")
    out = []
    for m, n in enumerate(shape):
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise TypeError(f"shape[{m}] must be an int, got {n!r}")
        if not 0 <= int(n) <= INDEX_MAX:
            raise ValueError(f"shape[{m}] = {int(n)} not in 0..{INDEX_MAX}")
        out.append(int(n))
    return tuple(out)


def _check_levels(levels: object, ndim: int) -> tuple[LevelFormat, ...]:
    if isinstance(levels, str) or not isinstance(levels, Sequence) or len(levels) != ndim:
        raise ValueError(f"levels must be a sequence of {ndim} level formats ({FORMATS}), got {levels!r}")
    out = tuple(as_format(f, f"levels[{k}]") for k, f in enumerate(levels))
    check_chain(out)
    return out


def _check_mode_order(mode_order: object, ndim: int) -> tuple[int, ...]:
    if mode_order is None:
        return tuple(range(ndim))
    if not isinstance(mode_order, Sequence) or sorted(int(m) for m in mode_order) != list(range(ndim)):
        raise ValueError(f"mode_order must be a permutation of 0..{ndim - 1}, got {mode_order!r}")
    return tuple(int(m) for m in mode_order)


class SparseTensor:
    """A validated sparse tensor (see the module docstring for the storage).

    Attributes: ``shape`` (in mode order), ``dtype``, ``levels`` (formats in storage order),
    ``mode_order``, ``storage`` (the `Level` objects), ``vals``, ``nnz`` (stored values).
    """

    def __init__(
        self,
        shape: Sequence[int],
        storage: Sequence[Level],
        vals: np.ndarray,
        mode_order: Sequence[int] | None = None,
    ) -> None:
        self.shape = _check_shape(shape)
        nd = len(self.shape)
        self.mode_order = _check_mode_order(mode_order, nd)
        if len(storage) != nd:
            raise ValueError(f"storage has {len(storage)} levels for a {nd}-mode tensor")
        levels = []
        parents = 1  # positions of the level above
        for k, lv in enumerate(storage):
            if not isinstance(lv, Level):
                raise TypeError(f"storage[{k}] must be a Level, got {lv!r}")
            if k:
                check_chain((storage[k - 1].format, lv.format))
            size = self.shape[self.mode_order[k]]
            if lv.size != size:
                raise ValueError(f"level {k} (mode {self.mode_order[k]}) has size {lv.size}, the shape says {size}")
            pos, crd, parents = lv.format.check(k, size, lv.pos, lv.crd, parents)
            levels.append(Level(lv.format, size, pos, crd))
            if parents > INDEX_MAX:
                raise ValueError(f"level {k} has {parents} positions, more than {INDEX_MAX} (int32 positions)")
        if not isinstance(vals, np.ndarray):
            raise TypeError(f"vals must be a numpy array, got {type(vals).__name__}")
        _check_dtype(vals.dtype, "vals")
        if vals.ndim != 1 or vals.shape[0] != parents:
            raise ValueError(f"vals has shape {vals.shape}, the last level has {parents} positions")
        self.storage = tuple(levels)
        self.vals = np.ascontiguousarray(vals).view()  # a read-only view: the caller's array keeps its flags
        self.vals.flags.writeable = False

    # ------------------------------------------------------------------ properties

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.vals.dtype

    @property
    def levels(self) -> tuple[LevelFormat, ...]:
        """Level formats in storage order (`LevelFormat` objects; each equals its name)."""
        storage, found = self.__dict__.get("_levels", (None, ()))
        if storage is not self.storage:  # computed once per storage tuple
            found = tuple(lv.format for lv in self.storage)
            self.__dict__["_levels"] = (self.storage, found)
        return found

    @property
    def nnz(self) -> int:
        """Stored values (explicit zeros of dense levels included)."""
        return int(self.vals.shape[0])

    def __repr__(self) -> str:
        return (
            f"SparseTensor(shape={self.shape}, dtype={self.dtype}, levels={tuple(f.name for f in self.levels)}, "
            f"mode_order={self.mode_order}, nnz={self.nnz})"
        )

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_coo(
        cls,
        coords: object,
        values: object,
        shape: Sequence[int],
        levels: Sequence[LevelFormat | str] | None = None,
        mode_order: Sequence[int] | None = None,
        dtype: object = None,
        *,
        copy: bool = True,
    ) -> SparseTensor:
        """Build from coordinates ``coords`` (ndim x nnz integers) and ``values`` (nnz floats).

        ``levels`` (format objects or names) default to all `Compressed` (CSF); ``mode_order`` to ``0..ndim-1``;
        ``dtype`` to the values' (float32 or float64). Duplicate coordinates are summed.

        Cost: coordinates already strictly increasing in storage order (a pydata ``sparse.COO``
        in mode order) convert in O(nnz) vectorised passes, no sort; any others are sorted once
        (``np.lexsort``, O(nnz log nnz): about 40 ms at 2e5 values and 3 modes on a Zen 3 core)
        (`minijit.sparseauto.convert`). ``copy=False``: arrays that already have the storage's
        dtype and layout (int32 coordinate rows, the values) are kept as read-only views.
        """
        shape = _check_shape(shape)
        nd = len(shape)
        levels = _check_levels((COMPRESSED,) * nd if levels is None else levels, nd)
        order = _check_mode_order(mode_order, nd)
        c = np.asarray(coords)
        if c.ndim == 1 and nd == 1:
            c = c[None, :]
        if c.ndim != 2 or c.shape[0] != nd:
            raise ValueError(f"coords must have shape (ndim={nd}, nnz), got {c.shape}")
        if c.dtype.kind not in "iu" and not (c.size == 0 and c.dtype.kind == "f"):
            raise TypeError(f"coords must be integers, got {c.dtype}")
        if c.dtype.kind == "f":
            c = c.astype(np.int64)
        v = np.asarray(values)
        dt = _check_dtype(v.dtype if dtype is None else dtype, "values" if dtype is None else "dtype")
        if v.dtype.kind not in "fiub":
            raise TypeError(f"values must be numbers, got {v.dtype}")
        if v.ndim != 1 or v.shape[0] != c.shape[1]:
            raise ValueError(f"values has shape {v.shape}, coords has {c.shape[1]} entries")
        if c.shape[1]:
            lo, hi = c.min(axis=1), c.max(axis=1)
            for m in range(nd):
                if lo[m] < 0 or hi[m] >= shape[m]:
                    bad = (c[m] < 0) | (c[m] >= shape[m])
                    j = int(np.argmax(bad))
                    raise ValueError(f"coords[{m}][{j}] = {c[m, j]} is out of range for mode {m} of size {shape[m]}")
        from minijit.sparseauto.convert import from_sorted_or_not  # noqa: PLC0415 - convert imports this module

        return from_sorted_or_not(c, v, shape, levels, order, dt, share=not copy)

    @classmethod
    def from_dense(
        cls,
        array: object,
        levels: Sequence[LevelFormat | str] | None = None,
        mode_order: Sequence[int] | None = None,
    ) -> SparseTensor:
        """The non-zeros of a dense numpy array (float32/float64)."""
        a = np.asarray(array)
        _check_dtype(a.dtype, "array")
        return cls.from_coo(np.array(np.nonzero(a)), a[np.nonzero(a)], a.shape, levels, mode_order)

    @classmethod
    def from_scipy(cls, matrix: object, dtype: object = None, *, copy: bool = True) -> SparseTensor:
        """From a scipy.sparse CSR (-> dense, compressed), CSC (the same in mode order (1, 0)) or COO
        (-> compressed, compressed) matrix or array. Duplicates are summed; unsorted indices sorted.

        A canonical CSR/CSC (every row strictly increasing; checked, ``has_canonical_format`` is
        not trusted) converts in O(nnz) with no sort; others are summed and sorted by scipy on a
        copy. ``copy=False``: int32 ``indptr``/``indices`` and ``data`` of the result's dtype are
        kept as read-only views of the matrix's arrays (never written)."""
        fmt = getattr(matrix, "format", None)
        if fmt not in ("csr", "csc", "coo"):
            raise TypeError(
                f"expected a scipy.sparse CSR, CSC or COO matrix, got {type(matrix).__name__}"
                + (f" (format {fmt!r}; convert with .tocsr())" if fmt else "")
            )
        shape = tuple(int(n) for n in matrix.shape)  # type: ignore[attr-defined]
        if len(shape) != 2:
            raise ValueError(f"expected a 2-D scipy.sparse matrix, got shape {shape}")
        data = matrix.data  # type: ignore[attr-defined]
        dt = _check_dtype(data.dtype if dtype is None else dtype, "matrix data" if dtype is None else "dtype")
        if fmt == "coo":
            coords = np.array([matrix.row, matrix.col])  # type: ignore[attr-defined]
            return cls.from_coo(coords, data, shape, dtype=dt, copy=copy)
        from minijit.sparseauto.convert import from_compressed  # noqa: PLC0415 - convert imports this module

        order = (0, 1) if fmt == "csr" else (1, 0)
        # scipy's own C routines (sum_duplicates) trust indptr and indices: check them first
        _check_scipy_compressed(matrix, shape[order[0]], shape[order[1]])
        indptr, indices = np.asarray(matrix.indptr), np.asarray(matrix.indices)  # type: ignore[attr-defined]
        t = from_compressed(shape, order, indptr, indices, np.asarray(data), dt, share=not copy)
        if t is not None:
            return t
        m = matrix.copy()  # type: ignore[attr-defined]  # unsorted or duplicates: scipy's sum
        m.sum_duplicates()  # sorts indices too
        t = from_compressed(shape, order, np.asarray(m.indptr), np.asarray(m.indices), m.data, dt, share=True)
        assert t is not None, "scipy's sum_duplicates leaves every row strictly increasing"
        return t

    @classmethod
    def from_pydata(cls, array: object, dtype: object = None, *, copy: bool = True) -> SparseTensor:
        """From a pydata ``sparse.COO`` (-> all compressed, CSF), ``sparse.GCXS`` (compressed axes
        first: the first stored level dense, the others compressed; CSR/CSC for matrices) or
        ``sparse.DOK`` (as its COO). A non-zero fill value is refused.

        A COO as pydata builds it (sorted, no duplicates; checked, not trusted) and a GCXS with
        sorted rows convert in O(nnz), no sort (`from_coo`); ``copy=False`` keeps arrays of the
        storage's layout and dtype as read-only views (see `from_scipy`)."""
        kind = type(array).__name__
        if kind not in ("COO", "GCXS", "DOK") or not hasattr(array, "fill_value"):
            raise TypeError(f"expected a pydata sparse.COO, sparse.GCXS or sparse.DOK array, got {kind}")
        if array.fill_value != 0:  # type: ignore[attr-defined]
            raise ValueError(f"the fill value must be 0, got {array.fill_value}")  # type: ignore[attr-defined]
        if kind == "DOK" or (kind == "GCXS" and len(array.shape) < 2):  # type: ignore[attr-defined]
            array = array.to_coo() if kind == "DOK" else array.tocoo()  # type: ignore[attr-defined]
            kind, copy = "COO", False  # a fresh COO: nothing of the caller's is shared
        shape = tuple(int(n) for n in array.shape)  # type: ignore[attr-defined]
        if kind == "COO":
            return cls.from_coo(array.coords, array.data, shape, dtype=dtype, copy=copy)  # type: ignore[attr-defined]
        comp = tuple(int(a) for a in array.compressed_axes)  # type: ignore[attr-defined]
        rest = tuple(m for m in range(len(shape)) if m not in comp)
        indptr = np.asarray(array.indptr)  # type: ignore[attr-defined]
        indices = np.asarray(array.indices)  # type: ignore[attr-defined]
        data = np.asarray(array.data)  # type: ignore[attr-defined]
        if len(shape) == 2:  # GCXS of a matrix is CSR (compressed axis 0) or CSC
            from minijit.sparseauto.convert import from_compressed  # noqa: PLC0415

            dt = _check_dtype(data.dtype if dtype is None else dtype, "data" if dtype is None else "dtype")
            _check_scipy_compressed(array, shape[comp[0]], shape[rest[0]])
            t = from_compressed(shape, comp + rest, indptr, indices, data, dt, share=not copy)  # type: ignore[arg-type]
            if t is not None:
                return t
        # GCXS is CSR of the array transposed to (compressed axes, the others) and reshaped to 2-D
        indptr = indptr.astype(np.int64)
        rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
        coords = np.zeros((len(shape), rows.shape[0]), np.int64)
        coords[list(comp)] = np.unravel_index(rows, [shape[a] for a in comp])
        coords[list(rest)] = np.unravel_index(indices, [shape[a] for a in rest])
        levels = (DENSE,) + (COMPRESSED,) * (len(shape) - 1)
        return cls.from_coo(coords, data, shape, levels, comp + rest, dtype, copy=False)

    # ------------------------------------------------------------------ export

    def to_coo(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coords, vals)``: coordinates (ndim x stored values, int64, in mode order) of every
        stored value, in storage order."""
        coords_s: list[np.ndarray] = []  # per level: the coordinate of every position
        parent_of: list[np.ndarray] = []  # per level: the parent position of every position
        parents = 1
        for lv in self.storage:  # each format walks its own level
            par, crd = lv.format.iterate(lv.size, lv.pos, lv.crd, parents)
            parent_of.append(par)
            coords_s.append(crd)
            parents = int(crd.shape[0])
        out = np.zeros((self.ndim, parents), np.int64)
        p = np.arange(parents, dtype=np.int64)
        for k in reversed(range(self.ndim)):
            out[self.mode_order[k]] = coords_s[k][p]
            p = parent_of[k][p]
        if any(lv.format.pads for lv in self.storage):  # padding coordinates (blocked levels) are not stored ones
            inside = (out < np.array(self.shape, np.int64)[:, None]).all(axis=0)
            return out[:, inside], self.vals[inside]
        return out, self.vals

    def to_dense(self) -> np.ndarray:
        """The dense numpy array (C order)."""
        coords, vals = self.to_coo()
        out = np.zeros(self.shape, self.dtype)
        if vals.size and all(f.capabilities.unique for f in self.levels):
            out[tuple(coords)] = vals
        elif vals.size:  # a level may repeat coordinates: repeated ones are summed
            np.add.at(out, tuple(coords), vals)
        return out

    def astype(self, dtype: object) -> SparseTensor:
        """The same pattern with values converted to ``dtype`` (float32/float64)."""
        dt = _check_dtype(dtype, "dtype")
        return SparseTensor(self.shape, self.storage, self.vals.astype(dt), self.mode_order)

    @classmethod
    def _trusted(
        cls, shape: tuple[int, ...], storage: tuple[Level, ...], vals: np.ndarray, mode_order: tuple[int, ...]
    ) -> SparseTensor:
        """A tensor over storage that is already valid (checked arrays, ``vals`` of the right
        length and dtype): no O(nnz) checks. For outputs that reuse an operand's pattern."""
        t = cls.__new__(cls)
        t.shape, t.storage, t.mode_order = shape, storage, mode_order
        t.vals = vals
        return t

    def with_vals(self, vals: np.ndarray) -> SparseTensor:
        """The same pattern (shared storage arrays) with other values."""
        return SparseTensor(self.shape, self.storage, vals, self.mode_order)


def is_sparse(x: object) -> bool:
    """True for a `SparseTensor`, a scipy.sparse matrix/array or a pydata sparse array."""
    if isinstance(x, SparseTensor):
        return True
    mod = type(x).__module__ or ""
    return mod.startswith("scipy.sparse") or (mod.startswith("sparse") and hasattr(x, "fill_value"))


def as_sparse(x: object, name: str = "operand", copy: bool = True) -> SparseTensor:
    """Convert a scipy/pydata sparse operand (or pass a `SparseTensor` through); TypeError naming
    ``name`` otherwise. ``copy=False``: see `SparseTensor.from_scipy` (for a tensor used at once).
    scipy formats other than CSR/CSC/COO (BSR, DIA, DOK, LIL) are converted with ``.tocsr()`` first."""
    if isinstance(x, SparseTensor):
        return x
    mod = type(x).__module__ or ""
    try:
        if mod.startswith("scipy.sparse"):
            if getattr(x, "format", None) not in ("csr", "csc", "coo"):  # BSR, DIA, DOK, LIL: a CSR copy
                return SparseTensor.from_scipy(x.tocsr(), copy=False)  # type: ignore[attr-defined]
            return SparseTensor.from_scipy(x, copy=copy)
        if mod.startswith("sparse"):
            return SparseTensor.from_pydata(x, copy=copy)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{name}: {e}") from e
    raise TypeError(f"{name}: expected a SparseTensor, scipy.sparse or pydata sparse array, got {type(x).__name__}")


def _check_scipy_compressed(matrix: object, outer: int, inner: int) -> None:
    """ValueError naming what is wrong unless a scipy CSR/CSC matrix's ``indptr`` (``outer + 1``
    entries from 0, non-decreasing, ending at the number of entries) and ``indices`` (in
    ``[0, inner)``) describe ``data``: a malformed one must not reach scipy's C code or ours."""
    indptr = np.asarray(matrix.indptr)  # type: ignore[attr-defined]
    indices = np.asarray(matrix.indices)  # type: ignore[attr-defined]
    data = np.asarray(matrix.data)  # type: ignore[attr-defined]
    if indptr.ndim != 1 or indptr.shape[0] != outer + 1:
        raise ValueError(f"scipy matrix: indptr has {indptr.shape} entries, expected {outer + 1}")
    if indptr.shape[0] and int(indptr[0]) != 0:
        raise ValueError(f"scipy matrix: indptr[0] is {int(indptr[0])}, expected 0")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("scipy matrix: indptr decreases")
    nnz = int(indptr[-1]) if indptr.shape[0] else 0
    if indices.ndim != 1 or data.ndim != 1 or indices.shape[0] < nnz or data.shape[0] < nnz:
        raise ValueError(
            f"scipy matrix: indptr ends at {nnz} but there are {indices.shape[0]} indices and {data.shape[0]} values"
        )
    if nnz and (int(indices[:nnz].min()) < 0 or int(indices[:nnz].max()) >= inner):
        raise ValueError(f"scipy matrix: an index lies outside 0..{inner - 1}")
