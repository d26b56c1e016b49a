"""`minijit.einsum` with sparse operands: numpy's whole call, the SparseAuto kernels, the caller's
types (issue 53 parts 1-2).

`einsum` takes numpy's grammar (`minijit.einsum.grammar`: the sublist form, ``...``, implicit
outputs, repeated indices within an operand), then:

* a repeated index takes the operand's diagonal (a sparse operand: the stored values whose
  coordinates agree, O(nnz); a dense one: numpy's ``diagonal``);
* 0-d operands (numpy scalars, 0-d pydata arrays) are multiplied into the result;
* where more than two sparse operands share an index, the smallest are densified until two do
  (the generated merge co-iterates two compressed levels);
* sparse operands whose storage orders no single loop order visits in order are stored again
  (CSF, in the order of the first sparse operand's indices, then first appearance; O(nnz log nnz));
* the dtype is ``dtype`` or numpy's result type of the operands (pydata's rule: operands are
  cast to ``dtype`` first). float32/float64 run on the compiled kernels; integer and bool dtypes
  too, in float64, the result cast back (exact while every partial sum stays below 2**53 in
  magnitude); anything else (complex) is delegated to ``np.einsum`` on the densified operands;
  nothing numpy takes is refused;
* the result comes back in the operands' own types (`minijit.sparseauto.interop`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.sparseauto import interop
from minijit.sparseauto.tensor import SparseTensor, as_sparse

__all__ = ["einsum"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def einsum(subscripts: Any, operands: tuple, out: Any, optimize: Any, target: Any, dtype: Any, driver: Any) -> Any:
    """`minijit.einsum` on operands of which one at least is sparse (module docstring)."""
    from minijit.einsum import grammar  # noqa: PLC0415 - the dense grammar loads on first use
    from minijit.einsum.parse import expand_subscripts  # noqa: PLC0415

    if not isinstance(subscripts, str):
        subscripts, operands = grammar.sublist_subscripts(subscripts, operands)
    if target == "cuda" or driver is not None:
        raise ValueError(
            f"einsum with sparse operands runs on the native CPU, not target={target!r} "
            "(or emulated on 'aarch64-neon'/'aarch64-sve')"
        )
    optimize = grammar.normalize_optimize(optimize, len(operands))  # ValueError as numpy refuses it
    schedule = "linear" if optimize is False else "auto"  # an explicit pairwise path: the planner's
    target = "native" if isinstance(target, str) and target == "auto" else target
    ops = _pydata_trailing_ones(subscripts, [_operand(i, x) for i, x in enumerate(operands)])
    inputs, output = expand_subscripts(subscripts, tuple(len(x.shape) for x in ops))
    _check_sizes(inputs, ops)
    dt = _result_dtype(ops, dtype)
    if dtype is not None:
        ops = [x if x.dtype == dt else x.astype(dt) for x in ops]
    if dt not in _FLOATS and dt.kind not in "biu":  # complex and the rest: numpy's einsum, densified
        dense = np.einsum(f"{','.join(inputs)}->{output}", *[_densified(x).astype(dt) for x in ops])
        return _finish(np.asarray(dense), operands, None, dt, out, interop.pydata_class(inputs, output, ops))
    compute = dt if dt in _FLOATS else np.dtype(np.float64)
    terms, values, origin, factor = [], [], [], None
    for i, (term, x) in enumerate(zip(inputs, ops, strict=True)):
        if x.ndim == 0:  # a scalar operand: multiplied into the result
            v = _densified(x).astype(compute)
            factor = v if factor is None else factor * v
            continue
        term, x = _diagonal(term, x, compute)
        terms.append(term)
        values.append(x)
        origin.append(i)
    sampled = None
    if not any(interop.family(x) for x in values):  # no sparse operand left: the dense path
        if values:
            from minijit.einsum.api import einsum as dense_einsum  # noqa: PLC0415

            arrays = [np.asarray(x, compute) for x in values]
            result = dense_einsum(f"{','.join(terms)}->{output}", *arrays, optimize=optimize, target=target)
        else:
            result = np.ones((), compute)
    else:
        from minijit.sparseauto.api import evaluate  # noqa: PLC0415 - the planner loads on first use

        values = _in_one_order(terms, _at_most_two_per_index(terms, values), compute)
        result, k = evaluate(f"{','.join(terms)}->{output}", tuple(values), schedule=schedule, target=target)
        sampled = None if k is None else origin[k]
    if factor is not None:
        if isinstance(result, SparseTensor):
            result = result.with_vals(result.vals * factor)
        else:
            result = result * factor
    return _finish(result, operands, sampled, dt, out, interop.pydata_class(inputs, output, ops))


def _operand(i: int, x: Any) -> Any:
    """Operand ``i`` as a sparse array or a numpy array; ValueError for a pydata fill value."""
    if interop.family(x) is None:
        return np.asarray(x)
    fill = getattr(x, "fill_value", 0)
    if interop.family(x) == "pydata" and fill != 0 and len(x.shape):  # a 0-d COO holds its value there
        raise ValueError(f"einsum: operand {i} has fill value {fill}; sparse operands must have fill value 0")
    return x


def _pydata_trailing_ones(subscripts: str, ops: list) -> list:
    """pydata's leniency, for pydata operands only: one with more dims than its letters (and no
    ``...``) whose extra trailing dims are all 1 is read without them, as ``sparse.einsum``
    reshapes it (numpy refuses such a call)."""
    lhs = subscripts.replace(" ", "").split("->")[0].split(",")
    if len(lhs) != len(ops):
        return ops
    out = list(ops)
    for i, (term, x) in enumerate(zip(lhs, ops, strict=True)):
        extra = x.shape[len(term) :]
        if interop.family(x) == "pydata" and "." not in term and extra and all(n == 1 for n in extra):
            out[i] = x.reshape(x.shape[: len(term)])
    return out


def _at_most_two_per_index(terms: list[str], values: list) -> list:
    """The operands with at most two sparse ones sharing any index (the generated merge
    co-iterates two compressed levels): while an index has more, the sparse operand with the
    smallest dense size among them is densified (O(its dense size))."""
    out = list(values)
    while True:
        crowded = None
        for c in {c for t in terms for c in t}:
            holders = [i for i, t in enumerate(terms) if c in t and interop.family(out[i])]
            if len(holders) > 2:
                crowded = holders
                break
        if crowded is None:
            return out
        i = min(crowded, key=lambda i: int(np.prod(out[i].shape)))
        out[i] = _densified(out[i])


def _check_sizes(inputs: tuple[str, ...], ops: list) -> None:
    """ValueError naming the operand where an index has two sizes."""
    sizes: dict[str, int] = {}
    for i, (term, x) in enumerate(zip(inputs, ops, strict=True)):
        for c, n in zip(term, x.shape, strict=True):
            if sizes.setdefault(c, int(n)) != int(n):
                raise ValueError(f"einsum: operand {i}: index {c!r} has size {int(n)}, elsewhere {sizes[c]}")


def _result_dtype(ops: list, dtype: Any) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    return np.result_type(*[np.dtype(x.dtype) for x in ops])


def _densified(x: Any) -> np.ndarray:
    if isinstance(x, SparseTensor):
        return x.to_dense()
    if interop.family(x) == "pydata":
        return np.asarray(x.todense())
    if interop.family(x) == "scipy":
        return x.toarray()
    return np.asarray(x)


def _diagonal(term: str, x: Any, compute: np.dtype) -> tuple[str, Any]:
    """``x`` with each repeated index of ``term`` taken once (its first place): the diagonal."""
    if len(set(term)) == len(term):
        return term, x
    keep = [m for m, c in enumerate(term) if term.index(c) == m]
    new_term = "".join(term[m] for m in keep)
    if interop.family(x) is None:
        letters = np.array([keep.index(term.index(c)) for c in term])
        d = np.einsum(x, list(letters), list(range(len(keep))))  # numpy's diagonal as a view
        return new_term, np.ascontiguousarray(d)
    t = as_sparse(_floating(x, compute), "einsum operand", copy=False)
    coords, vals = t.to_coo()
    on = np.ones(coords.shape[1], bool)
    for m, c in enumerate(term):
        on &= coords[m] == coords[term.index(c)]
    shape = tuple(t.shape[m] for m in keep)
    return new_term, SparseTensor.from_coo(coords[keep][:, on], vals[on], shape, copy=False)


def _floating(x: Any, compute: np.dtype) -> Any:
    """A sparse operand with values of ``compute`` (integer and bool data converted)."""
    return x if np.dtype(x.dtype) == compute else x.astype(compute)


def _in_one_order(terms: list[str], values: list, compute: np.dtype) -> list:
    """The operands, sparse ones as `SparseTensor`; those whose storage orders contradict the
    others' (no loop order visits every sparse level in order) stored again as CSF in one global
    order: the first sparse operand's storage order, then letters in order of appearance."""
    out = [
        interop.operand(_floating(x, compute), f"operand {i}") if interop.family(x) else x for i, x in enumerate(values)
    ]
    orders = [tuple(terms[i][m] for m in x.mode_order) for i, x in enumerate(out) if isinstance(x, SparseTensor)]
    if _acyclic(orders):
        return out
    rank: dict[str, int] = {}
    for order in orders + [tuple(t) for t in terms]:
        for c in order:
            rank.setdefault(c, len(rank))
    for i, x in enumerate(out):
        if not isinstance(x, SparseTensor):
            continue
        want = tuple(sorted(range(x.ndim), key=lambda m, i=i: rank[terms[i][m]]))
        if want != x.mode_order:
            coords, vals = x.to_coo()
            out[i] = SparseTensor.from_coo(coords, vals, x.shape, None, want, copy=False)
    return out


def _acyclic(orders: list[tuple[str, ...]]) -> bool:
    """True when one order of the letters keeps every sequence of ``orders`` increasing."""
    after: dict[str, set[str]] = {}
    for order in orders:
        for a, b in zip(order, order[1:], strict=False):
            after.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(c: str) -> bool:  # depth-first: a letter met again while open closes a cycle
        if state.get(c) == 1:
            return False
        if state.get(c) == 2:
            return True
        state[c] = 1
        ok = all(visit(d) for d in after.get(c, ()))
        state[c] = 2
        return ok

    return all(visit(c) for c in list(after))


def _finish(result: Any, operands: tuple, sampled: int | None, dt: np.dtype, out: Any, pydata_cls: Any) -> Any:
    """The result in the operands' types and ``dt``, or written to ``out`` (dense only)."""
    if out is not None:
        if not isinstance(out, np.ndarray) or not isinstance(result, np.ndarray):
            raise TypeError("einsum with sparse operands: out= takes a numpy array, for a dense result only")
        if out.shape != result.shape:
            raise ValueError(f"out has shape {out.shape}, the result {result.shape}")
        np.copyto(out, result, casting="same_kind")
        return out
    if dt not in _FLOATS and isinstance(result, SparseTensor):
        result = result.to_dense()  # a SparseTensor holds float32/float64 only
    typed = interop.result_like(result, operands, sampled, pydata_cls)
    if np.dtype(typed.dtype) != dt:
        typed = typed.astype(dt)
    return typed
