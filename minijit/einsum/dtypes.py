"""Which path a `minijit.einsum` call takes: minijit's compiled kernels (float32/float64 operands,
result and ``out``; or int32/int64 numpy arrays with an int32/int64 result, `INT_DTYPES`, wrapping
as numpy's, bit for bit) or numpy's own einsum, which gets every call numpy accepts that has no
compiled path (other integers, bool, float16, longdouble, complex, object, integers mixed with
floats, a dtype or ``out`` of such a kind, a cast the ``casting`` rule forbids, integer calls on
a target without integer kernels) and every misuse numpy refuses by its keywords (no
operands, an unknown ``order`` or ``casting``, a bad ``dtype`` or ``out``), so that results and
errors are numpy's, bit for bit. `numpy_reason` says why a call is numpy's (None: compiled);
`explain` says it in words, or lists the compiled plan. Of the calls `numpy_reason` gives to
numpy, `minijit.einsum.widen.route` takes back those it computes on these kernels (complex,
float16, bool, other integers; `minijit.einsum.api` asks it), so numpy's einsum runs the rest.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from minijit.einsum import keywords as _kw
from minijit.einsum.cached import DTYPES

try:  # numpy's function itself, whatever ``numpy.einsum`` has been replaced by
    from numpy._core.einsumfunc import einsum as _numpy_einsum
except ImportError:  # pragma: no cover - numpy < 2
    from numpy.core.einsumfunc import einsum as _numpy_einsum

__all__ = ["AUTO", "COMPILED", "INT_DTYPES", "MISSING", "compiled_dtype", "explain", "numpy_einsum", "numpy_reason"]

#: the integer dtypes minijit compiles (numpy arrays of them, a result of them), minijit names
INT_DTYPES = {np.dtype(np.int32): "s32", np.dtype(np.int64): "s64"}
#: every dtype an `EinsumPlan` computes in, and its minijit name
COMPILED = {**DTYPES, **INT_DTYPES}


def compiled_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype an `EinsumPlan` computes in (`COMPILED`), else TypeError."""
    dt = np.dtype(dtype)
    if dt not in COMPILED:
        raise TypeError(f"einsum: dtype {dt} is not supported (float32, float64, int32 or int64)")
    return dt


class _Missing:
    """The ``subscripts`` of a call that passed none (numpy raises ValueError for it)."""

    def __repr__(self) -> str:
        return "<no subscripts>"


#: the default of `minijit.einsum`'s ``subscripts``: a call without arguments
MISSING = _Missing()


class _Auto:
    """`minijit.einsum`'s default ``optimize``: True on the compiled path; numpy's own default
    (False) when numpy's einsum runs the call, whose result or error can depend on it."""

    def __repr__(self) -> str:
        return "True"


#: the default of `minijit.einsum`'s ``optimize`` (True, or numpy's default for numpy's einsum)
AUTO = _Auto()

#: plain operands numpy converts itself (their dtype is read through np.asarray, which is cheap)
_PLAIN = (np.generic, int, float, complex, bool, list, tuple, type(None))


def _array_operands(subscripts: Any, operands: tuple) -> list[Any]:
    """The operands of a call, without the sublists of numpy's sublist form."""
    if isinstance(subscripts, str):
        return list(operands)
    return [subscripts, *operands][0::2][: (len(operands) + 1) // 2]


def numpy_reason(
    subscripts: Any, operands: tuple, out: Any, dtype: Any, order: Any, casting: Any, target: Any, driver: Any
) -> str | None:
    """Why numpy's einsum runs this call (a short text), or None when minijit compiles it.

    Looks only at numpy arrays and plain operands (scalars, lists: their dtype); other host arrays
    (torch CPU tensors) are read after conversion by `host_reason`, device arrays are the CUDA
    plan's. ``target="cuda"`` or a ``driver``: None (the CUDA plan takes its own dtypes)."""
    if type(subscripts) is str and order is None and casting is None and dtype is None and out is None:
        for x in operands:  # the common call: float32/float64 numpy arrays, no keywords
            if type(x) is not np.ndarray or x.dtype not in DTYPES:
                break
        else:
            return None
    if subscripts is MISSING:
        return "no subscripts or operands"
    if not _kw.valid_order(order):
        return f"order={order!r} (numpy's error)"
    if not _kw.valid_casting(casting):
        return f"casting={casting!r} (numpy's error)"
    if target == "cuda" or driver is not None:
        return None
    ints = _int_reason(subscripts, operands, out, dtype, casting, target)
    if ints is not False:
        return ints
    if dtype is not None:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            return f"dtype={dtype!r} (numpy's error)"
        if dt not in DTYPES:
            return f"dtype={dt} has no compiled path"
    if out is not None:
        if isinstance(out, np.ndarray):
            if out.dtype not in DTYPES:
                return f"out has dtype {out.dtype}, which has no compiled path"
        elif isinstance(out, (_PLAIN, str, bytes)):
            return f"out is a {type(out).__name__} (numpy's error)"
    arrays = []
    for i, x in enumerate(_array_operands(subscripts, operands)):
        if isinstance(x, _PLAIN):
            try:
                x = np.asarray(x)
            except (ValueError, TypeError):
                return f"operand {i} is not an array numpy reads as one (numpy's error)"
        if not isinstance(x, np.ndarray) or not hasattr(x, "dtype"):
            continue
        if x.dtype not in DTYPES:
            return f"operand {i} has dtype {x.dtype}, which has no compiled path"
        arrays.append(x)
    return _cast_reason(arrays, dtype, out, casting)


def _int_reason(subscripts: Any, operands: tuple, out: Any, dtype: Any, casting: Any, target: Any) -> str | None | bool:
    """For a call whose array operands are all integers: None when the compiled integer path
    takes it (numpy arrays of `INT_DTYPES`, a result of them, ``out`` of the result's dtype, a
    cast numpy's rule allows: 'safe' where ``casting`` is None, a target with integer kernels),
    else why numpy's einsum runs it; False for any other call (not all integers: the float rules)."""
    xs = _array_operands(subscripts, operands)
    if not xs or not all(isinstance(x, np.ndarray) and x.dtype.kind in "iub" for x in xs):
        return False
    if out is None and dtype is None and _is_view(subscripts, operands) and all(x.dtype in INT_DTYPES for x in xs):
        return "a permutation or diagonal of one operand (numpy's einsum returns a view of it)"
    return _int_rule(xs, out, dtype, casting, target)


def _int_rule(xs: list[np.ndarray], out: Any, dtype: Any, casting: Any, target: Any) -> str | None:
    """`_int_reason` for integer operands ``xs`` (numpy arrays), whatever their call's form."""
    for i, x in enumerate(xs):
        if x.dtype not in INT_DTYPES:
            return f"operand {i} has dtype {x.dtype}, which has no compiled path"
    try:
        dt = np.dtype(dtype) if dtype is not None else np.result_type(*xs)
    except TypeError:
        return f"dtype={dtype!r} (numpy's error)"
    if dt not in INT_DTYPES:
        return f"dtype={dt} has no compiled path for integer operands"
    if out is not None and not (isinstance(out, np.ndarray) and out.dtype == dt):
        return f"out is not a numpy array of the result's dtype {dt} (numpy's rules)"
    if not _kw.cast_allowed(xs, dt, out, "safe" if casting is None else casting):
        return f"casting={casting or 'safe'!r} forbids a cast of this call (numpy's error)"
    if not _int_target(target, INT_DTYPES[dt]):
        return f"target {target!r} has no {dt} kernels"
    return None


def _is_view(subscripts: Any, operands: tuple) -> bool:
    """Whether numpy's einsum returns a view for this call: one operand and no summed index (a
    permutation, a diagonal of repeated indices with an explicit output); str or sublist form."""
    if isinstance(subscripts, str):
        if len(operands) != 1:
            return False
        text = subscripts.replace(" ", "").replace("...", "")
        left, arrow, right = text.partition("->")
        labels, output = list(left), (list(right) if arrow else None)
    else:  # einsum(a, sublist[, output sublist])
        if len(operands) not in (1, 2):
            return False
        try:
            labels = [x for x in operands[0] if x is not Ellipsis]
            output = None if len(operands) == 1 else [x for x in operands[1] if x is not Ellipsis]
            set(labels), set(output or ())  # noqa: B018 - hashable labels, else not a view numpy takes
        except TypeError:
            return False
    if output is None:  # implicit output: the indices that occur once; a repeated one is summed
        return len(set(labels)) == len(labels)
    return set(labels) <= set(output)


def _int_target(target: Any, name: str) -> bool:
    """Whether ``target`` ("auto"/"native", a CPU target name or object) has BRGEMM kernels for
    the integer dtype ``name`` ("s32"/"s64")."""
    return _int_target_named(target, name) if isinstance(target, str) else _int_target_of(target, name)


@functools.lru_cache(maxsize=64)
def _int_target_named(target: str, name: str) -> bool:
    return _int_target_of(target, name)


def _int_target_of(target: Any, name: str) -> bool:
    from minijit import targets  # noqa: PLC0415 - light: the registry, not the generators

    try:
        t = targets.get("native" if target == "auto" else target)
    except (KeyError, ValueError, TypeError):
        return False
    return name in getattr(t, "int_dtypes", ())


def host_reason(arrays: list[np.ndarray], out: Any, dtype: Any, casting: str) -> str | None:
    """`numpy_reason` for host arrays already converted to numpy (torch CPU tensors, DLPack) on
    the native CPU: integers by the integer rules, the rest by the float ones."""
    if arrays and all(x.dtype.kind in "iub" for x in arrays):
        return _int_rule(arrays, out, dtype, casting, "native")
    for i, x in enumerate(arrays):
        if x.dtype not in DTYPES:
            return f"operand {i} has dtype {x.dtype}, which has no compiled path"
    if out is not None and getattr(out, "dtype", None) is not None and out.dtype not in DTYPES:
        return f"out has dtype {out.dtype}, which has no compiled path"
    return _cast_reason(arrays, dtype, out, casting)


def _cast_reason(arrays: list[np.ndarray], dtype: Any, out: Any, casting: str | None) -> str | None:
    if not arrays or casting is None or casting == "unsafe":
        return None  # None: float32 <-> float64 are 'same_kind', the only casts left to check here
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*arrays)
    if not _kw.cast_allowed(arrays, dt, out, casting):
        return f"casting={casting!r} forbids a cast of this call (numpy's error)"
    return None


def numpy_einsum(subscripts: Any, operands: tuple | list, **kwargs: Any) -> Any:
    """numpy's einsum (the function itself, even where ``numpy.einsum`` has been replaced) on the
    call as given: the same result, the same errors. ``subscripts`` `MISSING`: no arguments; a
    keyword that is None (or ``optimize`` `AUTO`) is left out, numpy's default applies."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None and v is not AUTO}
    if subscripts is MISSING:
        return _numpy_einsum(*operands, **kwargs)
    return _numpy_einsum(subscripts, *operands, **kwargs)


def explain(reason: str | None, subscripts: Any, operands: tuple, *, optimize: Any, target: str, dtype: Any) -> str:
    """The path a call takes, in words: "numpy.einsum: <why>" for a delegated call, else
    "minijit compiled:" and the plan's listing (its tree and kernels; the CUDA plan's for CUDA)."""
    if reason is not None:
        return f"numpy.einsum: {reason}"
    from minijit.einsum import grammar  # noqa: PLC0415 - the planner loads on first use
    from minijit.einsum.plan import EinsumPlan  # noqa: PLC0415
    from minijit.runtime.device_arrays import host_array  # noqa: PLC0415

    optimize = True if optimize is AUTO else optimize
    subscripts, operands, optimize = grammar.canonicalize(subscripts, operands, optimize)
    arrays = [x if isinstance(x, np.ndarray) else host_array(x, f"einsum: operand {i}") for i, x in enumerate(operands)]
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*arrays)
    plan = EinsumPlan(subscripts, *[x.shape for x in arrays], dtype=dt, target=target, optimize=optimize)
    return "minijit compiled:\n" + plan.listing(configs=False)
