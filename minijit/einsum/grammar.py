"""numpy's whole einsum grammar in front of the plans: what `minijit.einsum` and
`minijit.contract_path` take beyond the plain expressions an `EinsumPlan` runs.

`canonicalize` turns a call into one a plan runs:

* numpy's sublist form (``einsum(a, [0, 1], b, [1, 2], [0, 2])``) into subscripts;
* a repeated index within one operand (``"ii->i"``, ``"ii"``, ``"iij->j"``, ``"ij,jj->i"``) into that
  operand's diagonal, a view (numpy, torch and cupy arrays have ``diagonal``), and the subscripts
  into explicit ones with ``...`` spelled out (`minijit.einsum.parse.expand_subscripts`);
* ``optimize`` in any form numpy takes into one a plan takes (`normalize_optimize`).

Plain expressions (no repeated index, a bool or path name for ``optimize``) pass through as they
are; ``...``, implicit outputs and size-1 broadcasting are the parser's (`parse_subscripts`).
"""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Any

import numpy as np

from minijit.einsum.parse import _shape, expand_subscripts

__all__ = ["InvalidPathError", "canonicalize", "normalize_optimize", "sublist_subscripts"]


class InvalidPathError(ValueError, RuntimeError):
    """An explicit ``optimize`` path that does not contract the operands into one: a ValueError
    as minijit raises for bad arguments, and the RuntimeError numpy's einsum raises for it."""


#: numpy's sublist indices 0..51 as letters (0-25: A-Z, 26-51: a-z)
_SUBLIST_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@lru_cache(maxsize=1024)
def _has_repeats(subscripts: str) -> bool:
    """True when a letter occurs twice within one operand's subscripts."""
    lhs = subscripts.split("->", 1)[0]
    for part in lhs.split(","):
        letters = part.replace(".", "").replace(" ", "")
        if len(set(letters)) != len(letters):
            return True
    return False


def canonicalize(
    subscripts: Any, operands: tuple, optimize: Any = True, *, shapes_only: bool = False
) -> tuple[str, tuple, Any]:
    """``(subscripts, operands, optimize)`` for a plan: sublists turned into subscripts, each
    repeated index's diagonal taken (arrays: a read-only view; ``shapes_only``: the operands are
    shapes and the shape of the diagonal is returned), with the subscripts then explicit, and
    ``optimize`` normalized (`normalize_optimize`). ValueError as numpy refuses (see
    `expand_subscripts`; a repeated index whose dims differ in size)."""
    simple = optimize is True or optimize is False or optimize == "greedy" or optimize == "optimal"
    if type(subscripts) is str and simple and not _has_repeats(subscripts):
        return subscripts, operands, optimize  # the plain expression: as it is
    if not isinstance(subscripts, str):
        subscripts, operands = sublist_subscripts(subscripts, operands)
    if _has_repeats(subscripts):
        if shapes_only:
            operands = tuple(_shape(x) for x in operands)
        else:
            operands = tuple(_diagonal_source(i, x) for i, x in enumerate(operands))
        inputs, output = expand_subscripts(subscripts, tuple(len(x if shapes_only else x.shape) for x in operands))
        subs = []
        diagonals = []
        for i, (sub, x) in enumerate(zip(inputs, operands, strict=True)):
            sub, x = _diagonal(i, sub, x, shapes_only)
            subs.append(sub)
            diagonals.append(x)
        subscripts, operands = ",".join(subs) + "->" + output, tuple(diagonals)
    if not simple:
        optimize = normalize_optimize(optimize, len(operands))
    return subscripts, operands, optimize


def _diagonal_source(i: int, x: Any) -> Any:
    """Operand ``i`` as something with ``.shape`` and ``.diagonal`` (numpy, torch, cupy as they
    are; other host arrays through `minijit.runtime.device_arrays.host_array`). TypeError naming
    it for a CUDA device array without ``.diagonal`` (a bare ``__cuda_array_interface__`` or DLPack
    object): minijit has no device diagonal for it."""
    if hasattr(x, "shape") and hasattr(x, "diagonal"):
        return x
    from minijit.runtime.device_arrays import device_kind, host_array

    name = f"einsum: operand {i}"
    if device_kind(x, name) == "cuda":
        raise TypeError(
            f"{name} repeats an index (a diagonal) and is a CUDA device array without .diagonal: pass it as a"
            " torch or cupy array, or take the diagonal first"
        )
    return host_array(x, name)


def _diagonal(i: int, sub: str, x: Any, shapes_only: bool) -> tuple[str, Any]:
    """Operand ``i`` (indices ``sub``) with every repeated index taken once: the diagonal over its
    occurrences, appended last (as numpy's ``diagonal`` puts it)."""
    letters = list(sub)
    shape = tuple(x) if shapes_only else tuple(x.shape)
    while True:
        dup = next((c for k, c in enumerate(letters) if c in letters[k + 1 :]), None)
        if dup is None:
            break
        a1 = letters.index(dup)
        a2 = letters.index(dup, a1 + 1)
        if shape[a1] != shape[a2]:
            raise ValueError(
                f"einsum: operand {i} ({sub!r}) has sizes {shape[a1]} and {shape[a2]} for the repeated index"
                f" {dup!r} (a diagonal needs equal sizes)"
            )
        keep = [k for k in range(len(letters)) if k not in (a1, a2)]
        letters = [letters[k] for k in keep] + [dup]
        shape = tuple(shape[k] for k in keep) + (shape[a1],)
        if not shapes_only:
            x = x.diagonal(0, a1, a2)
    if shapes_only:
        return "".join(letters), shape
    if getattr(x, "is_cuda", False) or hasattr(x, "__cuda_array_interface__"):
        x = x.contiguous() if hasattr(x, "contiguous") else x.copy()  # CUDA plans read dense operands
    return "".join(letters), x


def _sublist(items: Any, where: str) -> str:
    if isinstance(items, str) or not hasattr(items, "__iter__"):
        raise TypeError(f"einsum: {where} must be a list of ints in [0, 52) and Ellipsis, got {items!r}")
    out = []
    for s in items:
        if s is Ellipsis:
            out.append("...")
            continue
        try:
            k = operator.index(s)
        except TypeError:
            raise TypeError(f"einsum: {where}: each subscript must be an int or Ellipsis, got {s!r}") from None
        if not 0 <= k < len(_SUBLIST_LETTERS):
            raise ValueError(f"einsum: {where}: subscript {k} is not within the valid range [0, 52)")
        out.append(_SUBLIST_LETTERS[k])
    return "".join(out)


def sublist_subscripts(first: Any, rest: tuple) -> tuple[str, tuple]:
    """numpy's sublist form ``(op0, sublist0, op1, sublist1, ..., [sublist_out])`` as
    ``(subscripts, operands)``; index ``k`` is the letter ``A-Z`` (0-25) or ``a-z`` (26-51)."""
    args = (first, *rest)
    out = None
    if len(args) % 2:
        args, out = args[:-1], args[-1]
    if not args:
        raise TypeError(
            f"einsum: subscripts must be a str, got {type(first).__name__} (numpy's sublist form:"
            " op0, [indices], op1, [indices], ..., [output indices])"
        )
    subs = ",".join(_sublist(s, f"sublist of operand {i}") for i, s in enumerate(args[1::2]))
    if out is not None:
        subs += "->" + _sublist(out, "output sublist")
    return subs, tuple(args[0::2])


def normalize_optimize(optimize: Any, n: int) -> bool | str | list[tuple[int, int]]:
    """``optimize`` as numpy's einsum takes it, for ``n`` operands, as a plan takes it: a bool
    (None: False), "greedy" or "optimal" (also as numpy's ``(name, memory_limit)``; the limit is
    not applied), or an explicit path in ``np.einsum_path``'s format (``["einsum_path", (0, 1),
    ...]`` or the bare steps) as pairwise steps: each step names operands of the current list
    (non-negative, distinct), which are contracted and their result appended last; a step of one
    operand only moves it last, a step of three or more becomes pairwise steps. ValueError for
    anything else and for a path that does not end in one operand."""
    if optimize is None:
        return False
    if isinstance(optimize, (bool, np.bool_)):
        return bool(optimize)
    if isinstance(optimize, str):
        if optimize in ("greedy", "optimal"):
            return optimize
        raise ValueError(f"einsum: optimize must be a bool, 'greedy', 'optimal' or a path, got {optimize!r}")
    if isinstance(optimize, (list, tuple)):
        if (
            len(optimize) == 2
            and isinstance(optimize[0], str)
            and optimize[0] != "einsum_path"
            and isinstance(optimize[1], (int, float, np.integer, np.floating))
        ):
            return normalize_optimize(optimize[0], n)  # numpy's (path name, memory limit)
        return _pairwise_path(optimize, n)
    raise ValueError(f"einsum: optimize must be a bool, 'greedy', 'optimal' or a path, got {optimize!r}")


def _pairwise_path(path: list | tuple, n: int) -> list[tuple[int, int]]:
    steps = list(path)
    if steps and isinstance(steps[0], str):
        if steps[0] != "einsum_path":
            raise ValueError(f"einsum: an explicit path starts with 'einsum_path' or a step, got {steps[0]!r}")
        steps = steps[1:]
    theirs = list(range(n))  # numpy's operand list: node ids
    ours = list(range(n))  # the plan's (pairwise steps)
    new = n
    pairs: list[tuple[int, int]] = []
    for step in steps:
        try:
            idx = [operator.index(k) for k in step]
        except TypeError:
            raise ValueError(f"einsum: path step {step!r} must be a tuple of operand positions (ints)") from None
        if not idx or len(set(idx)) != len(idx) or any(not 0 <= k < len(theirs) for k in idx):
            raise ValueError(
                f"einsum: path step {tuple(step)!r} must name different operands of the {len(theirs)} left"
                f" (positions 0..{len(theirs) - 1}) in path {list(path)!r}"
            )
        nodes = [theirs[k] for k in idx]
        for k in sorted(idx, reverse=True):
            theirs.pop(k)
        cur = nodes[0]
        for node in nodes[1:]:
            i, j = sorted((ours.index(cur), ours.index(node)))
            pairs.append((i, j))
            ours.pop(j)
            ours.pop(i)
            ours.append(new)
            cur, new = new, new + 1
        theirs.append(cur)
    if len(theirs) != 1:
        raise InvalidPathError(f"einsum: path {list(path)!r} leaves {len(theirs)} of {n} operands, not one")
    return pairs
