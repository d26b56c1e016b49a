"""Conversions into `SparseTensor` storage at memory speed (issue 53 part 3).

Canonical input, coordinates strictly increasing in storage order (sorted, no duplicates: what
a pydata ``sparse.COO`` holds, a scipy CSR/CSC with ``has_canonical_format``, a ``GCXS``), is
converted in O(nnz) vectorised passes with no sort: one linear key per entry verifies the
order (`is_canonical`), and the levels are read off bottom-up where the key over the levels
above changes (`_canonical_levels`). Flags such as scipy's ``has_canonical_format`` are never
trusted: the generated code indexes memory with these coordinates, so every order and range is
checked here. Anything else (unsorted, duplicated) is sorted once (``np.lexsort``, O(nnz log
nnz)) and its duplicates summed, as scipy and pydata do.

With ``share=True`` (the einsum path, which converts inside one call) index and value arrays
that already have the storage's layout and dtype (int32 ``indptr``/``indices``, a float32/float64
``data``) are used as read-only views of the caller's arrays, never written; by default they are
copied, so a tensor kept by the caller does not change when the scipy/pydata array does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from minijit.sparseauto.formats import COMPRESSED, DENSE, LevelFormat
from minijit.sparseauto.tensor import INDEX_MAX, Level, SparseTensor, first_unsorted

__all__ = ["from_compressed", "from_sorted_or_not", "is_canonical", "to_compiled"]


def is_canonical(cs: np.ndarray, sizes: Sequence[int]) -> tuple[bool, np.ndarray | None]:
    """``(canonical, prefix_key)`` for coordinates ``cs`` (levels x nnz, storage order, within
    ``sizes``): canonical when the entries are strictly increasing lexicographically (sorted,
    no duplicates). ``prefix_key`` (canonical input whose sizes' product fits int64, else None):
    every entry's linear position over all levels but the last. About 2 passes per level."""
    nd, nnz = cs.shape
    if math.prod(sizes) < 2**63:  # one linear key: strictly increasing iff canonical
        prefix = cs[0].astype(np.int64)
        for k in range(1, nd - 1):
            np.multiply(prefix, sizes[k], out=prefix)
            np.add(prefix, cs[k], out=prefix)
        key = prefix * sizes[-1] + cs[-1] if nd > 1 else prefix
        if nnz > 1 and np.less_equal(key[1:], key[:-1]).any():
            return False, None
        return True, prefix if nd > 1 else None
    changed = np.zeros(max(nnz - 1, 0), bool)  # per level: the first level that differs must go up
    for k in range(nd):
        a, b = cs[k, :-1], cs[k, 1:]
        if (np.less(b, a) & ~changed).any():
            return False, None
        changed |= np.not_equal(b, a)
    return bool(changed.all()), None


def _index(x: np.ndarray, share: bool) -> np.ndarray:
    """``x`` (values known to fit int32) as a read-only C-contiguous int32 array: a view where
    ``share`` and it already is one, else a copy."""
    if share and x.dtype == np.int32 and x.flags.c_contiguous:
        v = x.view()
    else:
        v = np.ascontiguousarray(x, dtype=np.int32)
        if v is x or v.base is x:
            v = v.copy()
    v.flags.writeable = False
    return v


def _values(x: np.ndarray, dt: np.dtype, share: bool) -> np.ndarray:
    """``x`` as a read-only C-contiguous array of ``dt``: a view where ``share`` allows it."""
    if share and x.dtype == dt and x.flags.c_contiguous:
        v = x.view()
    else:
        v = np.array(x, dt, order="C")
    v.flags.writeable = False
    return v


def _canonical_levels(
    cs: np.ndarray, prefix: np.ndarray, sizes: Sequence[int], levels: Sequence[LevelFormat], share: bool
) -> list[Level]:
    """The levels (full ones first, then unique compressed ones) of canonical coordinates
    ``cs`` (storage order, sizes ``sizes``), bottom-up: the entries of level ``k`` are distinct
    over levels ``0..k``, so each is one position and its coordinate is ``crd``; where the linear
    key over levels ``0..k-1`` changes a position of level ``k - 1`` starts (``pos``), and those
    entries, far fewer under long fibres, are the entries of level ``k - 1``. ``prefix``: the
    linear key over levels ``0..nd-2`` (`is_canonical`)."""
    nd = cs.shape[0]
    storage: list[Level] = []
    cur, key = list(cs), prefix  # the coordinates of level k's positions, per level 0..k
    for k in reversed(range(nd)):
        n, m = sizes[k], cur[0].shape[0]
        if levels[k].full:  # dense levels above: every parent position exists
            storage.extend(Level(levels[j], sizes[j]) for j in reversed(range(k + 1)))
            break
        if m > INDEX_MAX:
            raise ValueError(f"level {k} would have {m} positions, more than {INDEX_MAX}")
        crd = _index(cur[k], share)
        if k > 0 and key is None:  # the linear key over levels 0..k-1
            key = cur[0].astype(np.int64)
            for j in range(1, k):
                np.multiply(key, sizes[j], out=key)
                np.add(key, cur[j], out=key)
        if k == 0:  # one parent: the whole level
            pos = np.array([0, m], np.int32)
        elif levels[k - 1].full:  # the parents are every linear position of the dense levels
            parents = math.prod(sizes[:k])
            if parents > INDEX_MAX:
                raise ValueError(f"levels 0..{k - 1} would have {parents} positions, more than {INDEX_MAX}")
            pos = np.searchsorted(key, np.arange(parents + 1, dtype=np.int64)).astype(np.int32)
        else:
            new = np.empty(m, bool)
            if m:
                new[0] = True
                np.not_equal(key[1:], key[:-1], out=new[1:])
            first = new.nonzero()[0]
            pos = np.empty(first.shape[0] + 1, np.int32)
            pos[:-1] = first
            pos[-1] = m
            cur, key = [row.take(first) for row in cur[:k]], None
        pos.flags.writeable = False
        storage.append(Level(levels[k], n, pos, crd))
    return storage[::-1]


def from_sorted_or_not(
    c: np.ndarray,
    v: np.ndarray,
    shape: tuple[int, ...],
    levels: tuple[LevelFormat, ...],
    order: tuple[int, ...],
    dt: np.dtype,
    share: bool = False,
) -> SparseTensor:
    """A tensor from checked coordinates ``c`` (ndim x nnz integers within ``shape``, mode
    order) and values ``v`` (1-D, nnz): canonical input in O(nnz) (no sort); otherwise sorted once
    (``np.lexsort``, O(nnz log nnz)) with duplicates summed."""
    cs = c if order == tuple(range(len(order))) else c[list(order)]
    sizes = [shape[m] for m in order]
    canonical, prefix = is_canonical(cs, sizes)
    # the O(nnz) read-off: full levels on top, then walked levels the codegen iterates (CSR, CSF)
    first = next((k for k, f in enumerate(levels) if f.sparse), None)
    simple = first is not None and all(f.compiled and f.sparse for f in levels[first:])
    if canonical and simple and (prefix is not None or len(levels) == 1):
        storage = _canonical_levels(cs, prefix, sizes, levels, share)
        return SparseTensor._trusted(shape, tuple(storage), _values(v, dt, share), order)
    if not canonical:  # sort once; duplicates are summed below
        perm = np.lexsort(cs[::-1])
        cs, v = cs[:, perm], v[perm]
    return _general(cs, v, sizes, levels, shape, order, dt)


def _general(
    cs: np.ndarray,
    v: np.ndarray,
    sizes: Sequence[int],
    levels: tuple[LevelFormat, ...],
    shape: tuple[int, ...],
    order: tuple[int, ...],
    dt: np.dtype,
) -> SparseTensor:
    """Any level formats from sorted coordinates ``cs`` (storage order; duplicates allowed,
    summed first): each level's format assembles its arrays (`LevelFormat.assemble`)."""
    cs = cs.astype(np.int64, copy=False)
    v = v.astype(dt, copy=False)
    nnz = cs.shape[1]
    if nnz > 1:  # sum duplicates: entries equal on every level
        new = np.ones(nnz, bool)
        np.any(cs[:, 1:] != cs[:, :-1], axis=0, out=new[1:])
        if not new.all():
            first = new.nonzero()[0]
            cs, v = cs[:, first], np.add.reduceat(v, first)
    storage: list[Level] = []
    parent = np.zeros(cs.shape[1], np.int64)  # position of each entry in the level above
    parents = 1
    for k, fmt in enumerate(levels):
        built = fmt.assemble(cs[k], parent, parents, sizes[k])
        storage.append(Level(fmt, sizes[k], built.pos, built.crd))
        parent, parents = built.position, built.positions
        if parents > INDEX_MAX:
            raise ValueError(f"level {k} would have {parents} positions, more than {INDEX_MAX}")
    vals = np.zeros(parents, dt)
    vals[parent] = v
    return SparseTensor(shape, storage, vals, order)


def to_compiled(t: SparseTensor) -> SparseTensor:
    """``t`` itself when the codegen iterates every level (`LevelFormat.compiled`), else the same
    values over each level's `LevelFormat.lowered` format (COO -> CSF, blocked -> compressed,
    explicit zeros of blocks kept): one O(nnz) pass over ``t``'s sorted coordinates."""
    if all(f.compiled for f in t.levels):
        return t
    coords, vals = t.to_coo()
    levels = tuple(f.lowered() for f in t.levels)
    return from_sorted_or_not(coords, vals, t.shape, levels, t.mode_order, t.dtype, share=True)


def from_compressed(
    shape: tuple[int, int],
    order: tuple[int, int],
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    dt: np.dtype,
    share: bool = False,
) -> SparseTensor | None:
    """A CSR-like tensor (``(Dense(), Compressed())`` in mode order ``order``) straight from
    checked ``indptr`` (outer + 1 entries from 0, non-decreasing) and ``indices`` (within the
    inner size, ``indptr[-1]`` of them), when every row is strictly increasing (canonical); None
    otherwise (the caller sums duplicates and sorts). O(nnz), no copy with ``share`` where
    the arrays are int32 and ``data`` has dtype ``dt``."""
    nnz = int(indptr[-1])
    indices, data = indices[:nnz], data[:nnz]
    if first_unsorted(indptr, indices) is not None:
        return None
    outer, inner = shape[order[0]], shape[order[1]]
    if nnz > INDEX_MAX:
        raise ValueError(f"{nnz} stored values, more than {INDEX_MAX}")
    storage = (Level(DENSE, outer), Level(COMPRESSED, inner, _index(indptr, share), _index(indices, share)))
    return SparseTensor._trusted(shape, storage, _values(data, dt, share), order)
