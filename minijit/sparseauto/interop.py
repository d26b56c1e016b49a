"""Results of `minijit.einsum` on sparse operands in the caller's own types (issue 53 part 1).

The family of the operands decides (pydata first, then scipy, when both occur):

* **pydata** (``sparse.COO``/``GCXS``/``DOK``): what ``sparse.einsum`` returns. The class of the
  pydata sparse operands when they are all of one class, else ``COO``; dense operands do not
  count; a scalar output is a 0-d ``COO``.
* **scipy** (``*_array``/``*_matrix`` of any format): a sampled 2-D output (SDDMM-like, the
  output has a sparse operand's pattern) comes back as that operand's class (format, and array or
  matrix as given); an output of only sparse operands, 2-D, as the first sparse operand's class;
  anything else (a dense operand that the output does not sample, a 0-d or 1-D output) as a
  numpy array, as scipy's ``A @ dense`` gives.
* **minijit** `SparseTensor` only: a numpy array, or a `SparseTensor` for a sampled output.

Every result owns its arrays (no view of an operand's or the kernel's storage).

Operands come in through `operand`: a pydata ``COO`` (sorted, no duplicates, int64 coordinates,
as pydata builds it) is converted by one fused native pass (`convert_native.csf_from_sorted`,
x86-64), everything else, and anything that pass refuses, by `tensor.as_sparse`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.sparseauto import convert_native, formats
from minijit.sparseauto.tensor import SparseTensor, as_sparse

__all__ = ["family", "operand", "pydata_class", "result_like"]


def operand(x: Any, name: str) -> SparseTensor:
    """A sparse operand of an einsum call (float32/float64 values) as a `SparseTensor` used at
    once: a pydata ``COO`` with zero fill value through the fused pass (its coordinates only read,
    its data a read-only view where it already has the dtype), the rest as `as_sparse` converts
    them with ``copy=False`` (read-only views of the caller's arrays where the layout matches)."""
    if family(x) == "pydata" and type(x).__name__ == "COO" and len(x.shape) and x.fill_value == 0:
        dt = np.dtype(x.dtype)
        if dt in (np.float32, np.float64):
            t = convert_native.csf_from_sorted(x.coords, x.data, tuple(int(n) for n in x.shape), dt)
            if t is not None:
                return t
    return as_sparse(x, name, copy=False)


def family(x: Any) -> str | None:
    """ "pydata", "scipy" or "minijit" for a sparse operand, None for anything else (dense)."""
    if isinstance(x, SparseTensor):
        return "minijit"
    mod = type(x).__module__ or ""
    if mod.startswith("scipy.sparse"):
        return "scipy"
    if mod.startswith("sparse") and hasattr(x, "fill_value"):
        return "pydata"
    return None


def result_like(
    result: np.ndarray | SparseTensor, operands: tuple, sampled: int | None, pydata_class: Any = None
) -> Any:
    """``result`` (a dense numpy array, or a `SparseTensor` with the pattern of operand
    ``sampled``) as the operands' family returns it (module docstring); ``pydata_class``:
    `pydata_class`'s answer for pydata operands (default: the rule of one class or COO)."""
    fams = [family(x) for x in operands]
    if "pydata" in fams:
        return _pydata(result, [x for x, f in zip(operands, fams, strict=True) if f == "pydata"], pydata_class)
    if "scipy" in fams:
        if sampled is not None and isinstance(result, SparseTensor) and fams[sampled] == "scipy" and result.ndim == 2:
            return _scipy(result, operands[sampled])
        dense = _dense(result)
        if dense.ndim == 2 and all(f is not None for f in fams):
            first = next(x for x, f in zip(operands, fams, strict=True) if f == "scipy")
            return _scipy_from_dense(dense, first)
        return dense
    if isinstance(result, SparseTensor):
        return SparseTensor._trusted(result.shape, result.storage, np.array(result.vals), result.mode_order)
    return result


def _dense(result: np.ndarray | SparseTensor) -> np.ndarray:
    return result.to_dense() if isinstance(result, SparseTensor) else result


def pydata_class(inputs: tuple[str, ...], output: str, operands: list) -> Any:
    """The class ``sparse.einsum`` returns for these explicit subscripts and operands, found by
    following its steps on classes only: each operand reduced to the indices it shares
    (``_einsum_single``: its class, a 0-d COO when nothing is left; a dense one stays dense),
    the product of all (one class: it; two sparse classes: COO), then the final reduction (a full
    one: a 0-d COO). A sparse operand reduced to nothing is a 0-d COO whose *fill value* is its
    sum: where that is not 0, its product with a dense factor is dense (so the class depends on
    that one value, computed as pydata computes it, O(nnz)). ``np.ndarray`` for a dense result;
    None without pydata operands."""
    if not any(family(x) == "pydata" for x in operands):
        return None  # no pydata operand: no class (and no import of the package)
    import sparse  # noqa: PLC0415 - a pydata operand came in

    # a factor: (class or None for dense, whether a sparse factor's fill value is non-zero, the
    # aligned indices along which it is longer than 1)
    Factor = tuple[Any, bool, frozenset]

    def single(lhs: str, rhs: str, c: Any) -> Any:  # _einsum_single's class: as is, summed, reduced
        if c is None:
            return None
        return sparse.COO if not rhs else c

    def mul(a: Factor, b: Factor) -> Factor:  # the elementwise product (numpy broadcasting)
        ext = a[2] | b[2]
        if a[0] is None and b[0] is None:
            return (None, False, ext)
        if a[0] is None or b[0] is None:
            (sc, fill, se), (_, _, de) = (b, a) if a[0] is None else (a, b)
            if fill and not de <= se:  # a non-zero fill broadcast by a dense factor: dense
                return (None, False, ext)
            return (sc, fill, ext)
        return (a[0] if a[0] is b[0] else sparse.COO, a[1] and b[1], ext)

    if len(operands) == 1:
        x = operands[0]
        return single(inputs[0], output, type(x) if family(x) == "pydata" else None) or np.ndarray
    uses: dict[str, set[int]] = {}
    size: dict[str, int] = {}
    for k, (term, x) in enumerate(zip(inputs, operands, strict=True)):
        for c, n in zip(term, x.shape, strict=True):
            uses.setdefault(c, set()).add(k)
            size[c] = n
    for c in output:
        uses[c].add(-1)
    aligned = "".join(c for c, k in uses.items() if len(k) > 1)
    product: Factor = (None, False, frozenset())
    for k, (term, x) in enumerate(zip(inputs, operands, strict=True)):
        pterm = "".join(i for i in aligned if i in term)
        ext = frozenset(i for i in pterm if size[i] > 1)
        c: Factor = (type(x), False, ext) if family(x) == "pydata" else (None, False, ext)
        if pterm != term and c[0] is not None:
            if pterm:
                c = (single(term, pterm, c[0]), False, ext)
            else:  # reduced to nothing: a 0-d COO holding its value as the fill value
                c = (sparse.COO, bool(sparse.einsum(f"{term}->", x).fill_value != 0), ext)
        product = c if k == 0 else mul(product, c)
    product_cls = product[0]
    return single(aligned, output, product_cls) or np.ndarray  # np.ndarray: a dense result


def _pydata(result: np.ndarray | SparseTensor, sparse_ops: list, cls: Any = None) -> Any:
    import sparse  # noqa: PLC0415 - a pydata operand came in: the package is there

    if cls is np.ndarray:  # sparse.einsum's result is dense here (`pydata_class`)
        return np.array(_dense(result))
    if cls is None:
        kinds = {type(x) for x in sparse_ops}
        cls = kinds.pop() if len(kinds) == 1 else sparse.COO
    if isinstance(result, SparseTensor):
        coords, vals = result.to_coo()
        coo = sparse.COO(coords, np.array(vals), shape=result.shape, has_duplicates=False, sorted=False)
    else:
        coo = _coo_from_dense(np.asarray(result))
    if coo.ndim == 0 or cls is sparse.COO:
        return coo
    return cls.from_coo(coo)


def _coo_from_dense(a: np.ndarray) -> Any:
    """``sparse.COO.from_numpy(a)`` (its non-zeros, in C order, own arrays; a float is zero when
    all its bits are, so -0.0 is stored as from_numpy stores it) without its
    ``np.unravel_index``, which costs ~40 ns a value: one native pass where it applies
    (`convert_native.coo_from_dense`), else coordinates by ``np.indices`` when every value is
    non-zero, by one ``divmod`` per axis otherwise."""
    import sparse  # noqa: PLC0415

    if a.ndim == 0:
        return sparse.COO.from_numpy(a)
    found = convert_native.coo_from_dense(a)  # one native pass where it applies
    if found is not None:
        return sparse.COO(found[0], found[1], shape=a.shape, has_duplicates=False, sorted=True)
    bits = a.view(f"i{a.dtype.itemsize}") if a.dtype.kind == "f" and a.dtype.itemsize in (2, 4, 8) else a
    flat = np.flatnonzero(bits)  # floats: -0.0 is stored, as from_numpy stores it
    if flat.shape[0] == a.size:
        coords = np.indices(a.shape, dtype=np.intp).reshape(a.ndim, -1)
    else:
        coords = np.empty((a.ndim, flat.shape[0]), np.intp)
        rest = flat
        for ax in reversed(range(a.ndim)):
            rest, coords[ax] = np.divmod(rest, a.shape[ax])
    return sparse.COO(coords, np.ascontiguousarray(a).ravel()[flat], shape=a.shape, has_duplicates=False, sorted=True)


def _scipy(result: SparseTensor, like: Any) -> Any:
    """A sampled 2-D result as ``like``'s class: built as CSR/CSC from its storage when that is
    its layout, else through COO, then in ``like``'s format."""
    import scipy.sparse as sp  # noqa: PLC0415 - a scipy operand came in

    matrix = isinstance(like, sp.spmatrix)
    if formats.is_scipy_compressed(tuple(formats.as_format(f) for f in result.levels)):
        lv = result.storage[1]
        csr = result.mode_order == (0, 1)
        kind = {(True, False): sp.csr_array, (True, True): sp.csr_matrix}
        kind.update({(False, False): sp.csc_array, (False, True): sp.csc_matrix})
        m = kind[csr, matrix]((np.array(result.vals), lv.crd.copy(), lv.pos.copy()), shape=result.shape)
    else:
        coords, vals = result.to_coo()
        m = (sp.coo_matrix if matrix else sp.coo_array)((np.array(vals), (coords[0], coords[1])), shape=result.shape)
    return m if m.format == like.format else m.asformat(like.format)


def _scipy_from_dense(dense: np.ndarray, like: Any) -> Any:
    """A dense 2-D result as ``like``'s scipy class (its format, array or matrix)."""
    return type(like)(dense)
