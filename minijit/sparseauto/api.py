"""`sparse_einsum`: einsum with sparse operands, scheduled (seed 002) and compiled by the JIT.

    out = sparse_einsum("ijk,jl,kl->il", T, B, C)           # T sparse (scipy/pydata/SparseTensor)

Sparse operands may be `SparseTensor`, scipy.sparse CSR/CSC/COO or pydata ``sparse.COO``/``GCXS``;
dense operands are numpy arrays. Values are float32 when every operand is float32, else float64
(operands are converted). The output is a dense numpy array, except when the output indices are
exactly those of a sparse operand (SDDMM-like: the product samples its pattern): then it is a
`SparseTensor` with that operand's pattern and formats, in the output's mode order. With
``fibre_output=True`` an output whose leading indices are a sparse operand's leading levels and
whose other indices that operand lacks is a `SparseTensor` too: those levels (sharing the
operand's ``pos``/``crd``), then dense levels. TTM ``ijk,kl->ijl`` on a CSF tensor then holds one
row of ``L`` values per (i, j) fibre instead of a dense ``I*J*L`` array.

``schedule="linear"`` is TACO's default (one loop nest, no temporaries); ``"auto"`` asks the
planner (`minijit.sparseauto.plan`) for its choice at these sizes and non-zero counts.
Compiled contractions are cached per (subscripts, formats, shapes, dtype, schedule, threads),
so a repeated call re-plans and re-compiles nothing; the schedule is the one chosen with the
non-zero counts of the first call (`compile_einsum` returns it, with the plan, for printing).
Every check runs before any code is generated.

``target``: the native CPU (x86-64: AVX-512 code on a host with it, else AVX2+FMA),
"x86_64-avx2", "x86_64-avx512", or "aarch64-neon"/"aarch64-sve" (a target name of
`minijit.targets`, or a `CpuTarget` such as ``AArch64Target("sve", sve_vl=256)``): AArch64 code,
run natively on an AArch64 host and in the qemu emulator elsewhere (``sve_vl`` bits).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from minijit.sparseauto.convert import to_compiled
from minijit.sparseauto.execute import SparseContraction, cpu_target
from minijit.sparseauto.graph import parse_subscripts
from minijit.sparseauto.nest import Nest, Operand
from minijit.sparseauto.nest import fibre_output as nest_fibre_output
from minijit.sparseauto.schedules import default_linear
from minijit.sparseauto.tensor import SparseTensor, as_sparse, is_sparse

__all__ = ["SCHEDULES", "compile_einsum", "evaluate", "sparse_einsum"]

SCHEDULES = ("auto", "linear")
_CACHE_SIZE = 64
_cache: OrderedDict[tuple, tuple[SparseContraction, tuple[int, ...] | None]] = OrderedDict()
_cache_lock = threading.Lock()


def _names(n: int) -> tuple[tuple[str, ...], str]:
    """Operand names ``A, B, ...`` (``X0, X1, ...`` past 25) and an output name they do not use."""
    names = tuple(chr(ord("A") + k) if n <= 25 else f"X{k}" for k in range(n))
    return names, "Out"


def _convert(operands: tuple[Any, ...]) -> tuple[list[SparseTensor | np.ndarray], np.dtype]:
    """Sparse operands -> SparseTensor, dense -> numpy; one float dtype for all."""
    out: list[SparseTensor | np.ndarray] = []
    for k, x in enumerate(operands):
        if is_sparse(x):
            if not isinstance(x, SparseTensor) and np.dtype(x.dtype).kind in "iub":  # type: ignore[attr-defined]
                x = x.astype(np.float64)  # type: ignore[attr-defined]  # integer scipy/pydata data, as numpy does
            t = to_compiled(as_sparse(x, f"operand {k}", copy=False))  # COO, blocked: their CSF form
            out.append(t if any(f.sparse for f in t.levels) else t.to_dense())  # all-dense levels: a dense operand
            continue
        if not isinstance(x, np.ndarray):
            raise TypeError(
                f"operand {k} must be a numpy array or a sparse tensor (SparseTensor, scipy.sparse, pydata "
                f"sparse), got {type(x).__name__}"
            )
        if x.dtype.kind not in "fiub" or x.dtype == np.float16:
            raise TypeError(f"operand {k}: dtype {x.dtype} is not supported (float32 or float64)")
        out.append(x)
    if not any(is_sparse(x) for x in operands):
        raise ValueError("sparse_einsum needs at least one sparse operand (use minijit.einsum for dense ones)")
    dtype = np.dtype(np.float32) if all(x.dtype == np.float32 for x in out) else np.dtype(np.float64)
    out = [x.astype(dtype) if x.dtype != dtype else x for x in out]
    return out, dtype


def _operands(
    terms: tuple[tuple[str, ...], ...], values: list[SparseTensor | np.ndarray]
) -> tuple[tuple[Operand, ...], dict[str, int]]:
    """The nest operands (sparse: indices in storage order) and every index's extent."""
    names, _ = _names(len(values))
    ops, extents = [], {}
    for k, (term, x, name) in enumerate(zip(terms, values, names, strict=True)):
        if len(term) != x.ndim:
            raise ValueError(f"operand {k} has {x.ndim} modes, subscripts name {len(term)} ({''.join(term)!r})")
        for m, idx in enumerate(term):
            n = int(x.shape[m])
            if extents.setdefault(idx, n) != n:
                raise ValueError(f"operand {k}: index {idx!r} has size {n}, another operand gives {extents[idx]}")
        if isinstance(x, SparseTensor):
            ops.append(Operand(name, tuple(term[m] for m in x.mode_order), x.levels))
        else:
            ops.append(Operand.dense(name, term))
    return tuple(ops), extents


def _output(
    ops: tuple[Operand, ...], out_term: tuple[str, ...], fibre_output: bool = False
) -> tuple[Operand, tuple[int, ...] | None]:
    """The output operand: a sparse operand's pattern when the output indices are exactly its
    indices (SDDMM-like), with the output's mode order; with ``fibre_output``, stored under a
    sparse operand's fibres where one qualifies (`nest.fibre_output`; ValueError where none
    does); else dense in subscript order."""
    _, name = _names(len(ops))
    for o in ops:
        if o.sparse and sorted(o.indices) == sorted(out_term) and len(out_term) == len(o.indices):
            return Operand(name, o.indices, o.levels), tuple(out_term.index(i) for i in o.indices)
    if fibre_output:
        out = nest_fibre_output(ops, tuple(out_term), name)
        if out is None:
            raise ValueError(
                f"fibre_output: no sparse operand has leading indices (with a compressed level) among the output's "
                f"{''.join(out_term)!r} and no other index in it"
            )
        return out, tuple(out_term.index(i) for i in out.indices)
    return Operand.dense(name, out_term), None


def _planned(
    subscripts: str,
    values: list,
    ops: tuple[Operand, ...],
    out: Operand,
    extents: dict[str, int],
    fibre_output: bool = False,
    lanes: int | None = None,
) -> tuple[Nest, object]:
    """The planner's choice at these sizes and non-zero counts (each statement weighed by the
    code it compiles to at ``lanes`` vector lanes), and the plan (printable)."""
    from minijit.sparseauto.plan import sparse_plan

    plan = sparse_plan(subscripts, *values, sizes=extents, fibre_output=fibre_output, lanes=lanes)
    nest = plan.chosen if plan.chosen is not None else plan.default_linear()
    # the planner names operands itself: map its nest onto ours (same order, same storage)
    for mine, theirs in zip(ops, nest.operands, strict=True):
        if (mine.indices, mine.levels) != (theirs.indices, theirs.levels):
            raise RuntimeError(f"internal: planner operand {theirs} does not match {mine}")
    if (nest.output.indices, nest.output.levels) != (out.indices, out.levels):
        raise RuntimeError(f"internal: planner output {nest.output} does not match {out}")
    return nest, plan


def _key(subscripts: str, values: list, dtype: np.dtype, schedule: str, fibre_output: bool = False) -> tuple:
    parts: list[object] = [subscripts.replace(" ", ""), dtype.str, schedule, bool(fibre_output)]
    for x in values:
        if isinstance(x, SparseTensor):
            parts.append(("sparse", x.shape, x.levels, x.mode_order))
        else:
            parts.append(("dense", x.shape))
    return tuple(parts)


def compile_einsum(
    subscripts: str,
    *operands: Any,
    schedule: str = "auto",
    threads: int | None = None,
    target: Any = "native",
    sve_vl: int = 128,
    fibre_output: bool = False,
) -> tuple[SparseContraction, tuple[int, ...] | None]:
    """The (cached) compiled contraction for these operands' formats, shapes and dtype, and the
    mode order of a sparse output (None for a dense one). ``target``/``sve_vl``: see
    `SparseContraction` ("native", "aarch64-neon", "aarch64-sve", ... or a `CpuTarget`);
    ``fibre_output``: see `sparse_einsum`."""
    tgt = cpu_target(target, sve_vl)
    values, dtype = _convert(operands)
    return _compiled(subscripts, values, dtype, schedule, threads, tgt, fibre_output)


def _compiled(
    subscripts: str,
    values: list,
    dtype: np.dtype,
    schedule: str,
    threads: int | None,
    target: Any,
    fibre_output: bool = False,
) -> tuple[SparseContraction, tuple[int, ...] | None]:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not isinstance(fibre_output, bool):
        raise TypeError(f"fibre_output must be True or False, got {fibre_output!r}")
    key = _key(subscripts, values, dtype, schedule, fibre_output) + (threads, target)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    terms, out_term = parse_subscripts(subscripts, len(values))
    ops, extents = _operands(terms, values)
    out, order = _output(ops, out_term, fibre_output)
    plan = None
    if schedule == "linear" or 0 in extents.values():  # the planner needs positive sizes
        nest = default_linear(ops, out)
    else:
        from minijit.sparseauto.plan import vector_lanes

        lanes = vector_lanes(target, dtype)
        nest, plan = _planned(subscripts, values, ops, out, extents, fibre_output, lanes)
    compiled = SparseContraction(nest, extents, dtype, threads=threads, plan=plan, target=target)
    with _cache_lock:
        _cache[key] = (compiled, order)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled, order


def sparse_einsum(
    subscripts: str,
    *operands: Any,
    schedule: str = "auto",
    threads: int | None = None,
    target: Any = "native",
    sve_vl: int = 128,
    fibre_output: bool = False,
) -> np.ndarray | SparseTensor:
    """Evaluate ``subscripts`` (numpy einsum notation, single-letter indices, no ``...``) on
    sparse and dense ``operands``; see the module docstring for types, dtypes, the output and
    the targets. ``fibre_output=True`` returns an output that is not SDDMM-like as a
    `SparseTensor` stored under a sparse operand's fibres (ValueError where none qualifies)."""
    return evaluate(subscripts, operands, schedule, threads, target, sve_vl, fibre_output)[0]


def evaluate(
    subscripts: str,
    operands: tuple,
    schedule: str = "auto",
    threads: int | None = None,
    target: Any = "native",
    sve_vl: int = 128,
    fibre_output: bool = False,
) -> tuple[np.ndarray | SparseTensor, int | None]:
    """`sparse_einsum`'s result and, for a sampled output (SDDMM-like), the position of the
    operand whose pattern it has (None otherwise)."""
    tgt = cpu_target(target, sve_vl)
    values, dtype = _convert(operands)
    compiled, order = _compiled(subscripts, values, dtype, schedule, threads, tgt, fibre_output)
    result = compiled.execute(*values)
    if order is None:
        return result, None
    assert isinstance(result, SparseTensor)
    shape = [0] * len(order)
    for k, m in enumerate(order):
        shape[m] = result.shape[k]
    terms, out_term = parse_subscripts(subscripts, len(values))
    sampled = next(
        (
            k
            for k, (term, x) in enumerate(zip(terms, values, strict=True))
            if isinstance(x, SparseTensor) and sorted(term) == sorted(out_term) and len(term) == len(out_term)
        ),
        None,
    )
    return SparseTensor._trusted(tuple(shape), result.storage, result.vals, order), sampled
