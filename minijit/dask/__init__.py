"""Contractions on dask arrays with minijit's kernels in every block (the extra ``minijit[dask]``).

    import dask.array as da
    import minijit.dask
    a = da.random.random((20000, 8000), chunks=4000).astype("float32")
    c = minijit.dask.einsum("ij,jk->ik", a, a.T)   # a dask array: c.compute() runs it

`einsum` takes the grammar of `minijit.einsum` (``...``, implicit outputs, repeated indices as
diagonals, size-1 broadcasting, the sublist form, ``optimize``) and every dtype numpy's einsum
takes (bool, the integers, float16/32/64, longdouble, complex, object), with numpy's results:
integers wrap in the result dtype, bool sums are logical or (dask.array's own einsum sums bool and
small integers into int64 across blocks; numpy does not, nor does this); `tensordot` and `matmul`
are numpy's, spelled as einsum. An expression of three or more operands is split into pairwise
steps on minijit's contraction path (`minijit.contract_path`). Each step is one
`dask.array.blockwise` whose tasks call `minijit.einsum` on numpy blocks, keeping the contracted
indices as size-1 axes, and a tree reduction (`dask.array.reduction`, ``split_every`` blocks per
node) sums those partial blocks in the result dtype (numpy's ``+``: wrapping for integers, logical
or for bool). Only subscripts and numpy blocks travel: no kernel is pickled, every worker process JITs
and caches its own plans (`minijit.cache_info`), which its threads share.

Block sizes come from a data-movement model (`block_sizes`, in `minijit.dask.model`; seed 001's IO
reasoning): the bytes every task reads and writes against the flops it does, with the task overhead
of the scheduler and the threads of the cluster; ``chunks=`` overrides it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

try:
    import dask.array as da
except ImportError as e:  # pragma: no cover - exercised with dask hidden from sys.modules
    raise ImportError(
        f"minijit.dask needs dask.array and distributed, which are not installed ({e}):"
        " pip install minijit[dask]  (or: pip install 'dask[array]' distributed)"
    ) from e

import minijit
from minijit.dask.model import _choose, _cluster_threads, _default_block_bytes, block_sizes
from minijit.einsum import grammar as _grammar
from minijit.einsum import keywords as _keywords
from minijit.einsum.parse import expand_subscripts, parse_subscripts

__all__ = ["block_sizes", "einsum", "matmul", "tensordot"]

#: dtype kinds numpy's einsum computes in: bool, signed and unsigned integers, floats (float16 to
#: longdouble), complex, object (datetimes, strings and structured dtypes it refuses)
_KINDS = "biufcO"
#: the dtypes that convert to each other under the default ``casting`` (None), as `minijit.einsum`
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

Chunks = None | str | int | Mapping[str, int | Sequence[int]]


# ---------------------------------------------------------------------------------------------
# the block kernel and the reduction (module-level functions: pickled by name, nothing else)
# ---------------------------------------------------------------------------------------------
def _block_einsum(
    *blocks: np.ndarray, subscripts: str, extra: int, result_dtype: str, order: str | None = None
) -> np.ndarray:
    """One task: `minijit.einsum` on numpy blocks, with ``extra`` size-1 axes for the contracted
    indices; ``order``: the block's memory layout, as `minijit.einsum` takes it."""
    r = np.asarray(minijit.einsum(subscripts, *[np.asarray(b) for b in blocks], dtype=result_dtype, order=order))
    return r.reshape(r.shape + (1,) * extra) if extra else r


def _flatten(x: Any) -> list[np.ndarray]:
    return [y for e in x for y in _flatten(e)] if isinstance(x, list) else [x]


def _sum_blocks(x: Any, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """A node of the tree reduction: the sum of its partial blocks (nested lists), one new array,
    in their dtype with numpy's ``+`` (integers wrap as numpy's einsum does; bool: logical or)."""
    parts = _flatten(x)
    total = parts[0].copy() if len(parts) > 1 else parts[0]
    for p in parts[1:]:
        total += p
    return total if keepdims else total.reshape([n for k, n in enumerate(total.shape) if k not in axis])


def _keep(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return x


# ---------------------------------------------------------------------------------------------
# operands, chunks and the steps
# ---------------------------------------------------------------------------------------------
class _Diagonals:
    """A dask array seen by `minijit.einsum.grammar.canonicalize`: ``shape`` and numpy's ``diagonal``."""

    def __init__(self, x: da.Array) -> None:
        self.x, self.shape = x, x.shape

    def diagonal(self, offset: int, axis1: int, axis2: int) -> _Diagonals:
        return _Diagonals(da.diagonal(self.x, offset, axis1, axis2))


def _as_dask(i: int, x: Any, where: str) -> da.Array:
    """Operand ``i`` as a dask array of a dtype numpy's einsum takes (`_KINDS`), with known shape
    (numpy arrays, lists and scalars wrapped in one chunk)."""
    if not isinstance(x, da.Array):
        if hasattr(x, "__cuda_array_interface__") or getattr(x, "is_cuda", False):
            raise TypeError(f"{where}: operand {i} is a CUDA device array; minijit.dask runs numpy blocks on CPUs")
        x = da.from_array(np.asarray(x), chunks=-1)
    if x.dtype.kind not in _KINDS:
        raise TypeError(
            f"{where}: operand {i} has dtype {x.dtype}, which numpy's einsum does not take"
            " (bool, integers, floats, complex or object)"
        )
    if any(isinstance(n, float) and math.isnan(n) for n in x.shape):
        raise ValueError(f"{where}: operand {i} has unknown chunk sizes {x.shape}: call compute_chunk_sizes() first")
    return x


def _cast_allowed(arrays: Sequence[da.Array], dt: np.dtype, casting: str | None) -> bool:
    """Whether ``casting`` lets every operand be cast to the result dtype ``dt``; None (the
    default): numpy's 'safe', or float32/float64 operands to a float32/float64 result."""
    if casting is None:
        if dt in _FLOATS and all(x.dtype in _FLOATS for x in arrays):
            return True
        casting = "safe"
    return _keywords.cast_allowed(list(arrays), dt, None, casting)


def _check_chunks(chunks: Chunks, letters: str, sizes: Mapping[str, int]) -> dict[str, Any] | None:
    """``chunks=`` as a dict of index -> block size or chunk tuple (None: the model; {}: the inputs')."""
    if chunks is None:
        return None
    if isinstance(chunks, str):
        if chunks != "input":
            raise ValueError(f"einsum: chunks must be None, 'input', an int or a dict, got {chunks!r}")
        return {}
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ValueError(f"einsum: chunks must be a positive block size, got {chunks}")
        return {c: min(int(chunks), sizes[c]) or 1 for c in letters}
    if not isinstance(chunks, Mapping):
        raise TypeError(f"einsum: chunks must be None, 'input', an int or a dict, got {type(chunks).__name__}")
    out: dict[str, Any] = {}
    for c, v in chunks.items():
        if not isinstance(c, str) or c not in letters:
            raise ValueError(
                f"einsum: chunks names index {c!r}, which the subscripts do not use (they use {letters!r})"
            )
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            if v < 1:
                raise ValueError(f"einsum: chunks[{c!r}] must be a positive block size, got {v}")
            out[c] = min(int(v), sizes[c]) or 1
        else:
            try:
                t = tuple(int(n) for n in v)
            except TypeError:
                raise TypeError(f"einsum: chunks[{c!r}] must be an int or a tuple of ints, got {v!r}") from None
            if sum(t) != sizes[c] or any(n < 0 for n in t):
                raise ValueError(f"einsum: chunks[{c!r}] = {t} must be sizes adding up to {sizes[c]} (index {c!r})")
            out[c] = t
    return out


def _step(
    subs: Sequence[str],
    arrays: Sequence[da.Array],
    out: str,
    spec: dict[str, Any] | None,
    dt: np.dtype,
    split_every: int | None,
    order: str | None = None,
) -> da.Array:
    """One blockwise contraction of ``arrays`` (subscripts ``subs``) into ``out`` and the tree
    reduction of its contracted indices."""
    sizes = {c: int(n) for sub, x in zip(subs, arrays, strict=True) for c, n in zip(sub, x.shape, strict=True)}
    contracted = "".join(c for c in dict.fromkeys("".join(subs)) if c not in out)
    if spec != {}:  # the model (with the fixed indices of a dict), else the inputs' chunks
        fixed = spec or {}
        ints = {c: v for c, v in fixed.items() if isinstance(v, int)}
        model = _choose(subs, out, sizes, dt.itemsize, _default_block_bytes(), _cluster_threads(), ints)
        blocks = {c: fixed.get(c, model[c]) for c in sizes}
        arrays = [x.rechunk(tuple(blocks[c] for c in sub)) for sub, x in zip(subs, arrays, strict=True)]
    ndim = len(out) + len(contracted)
    res = da.blockwise(
        _block_einsum,
        out + contracted,
        *[a for pair in zip(arrays, subs, strict=True) for a in pair],
        token="minijit-einsum",
        adjust_chunks=dict.fromkeys(contracted, 1),
        dtype=dt,
        meta=np.empty((0,) * ndim, dt),
        subscripts=",".join(subs) + "->" + out,
        extra=len(contracted),
        result_dtype=dt.name,
        order=order,
    )
    if not contracted:
        return res
    return da.reduction(
        res,
        _keep,
        _sum_blocks,
        combine=_sum_blocks,
        axis=tuple(range(len(out), ndim)),
        keepdims=False,
        dtype=dt,
        split_every=split_every,
        concatenate=False,
        meta=np.empty((0,) * len(out), dt),
        name="minijit-einsum-sum",
    )


def einsum(
    subscripts: Any,
    *operands: Any,
    chunks: Chunks = None,
    optimize: Any = True,
    dtype: Any = None,
    split_every: int | None = None,
    order: Any = None,
    casting: Any = None,
) -> da.Array:
    """numpy's einsum on dask arrays, every block contracted by `minijit.einsum`; a dask array.

    ``operands``: dask arrays (others, e.g. numpy, are wrapped in one chunk) of any dtype numpy's
    einsum takes: bool, int8-int64, uint8-uint64, float16-longdouble, complex64-clongdouble,
    object. The result dtype is ``dtype`` or numpy's result type of the operands; the operands are
    cast to it (as numpy's einsum does) and every block is computed and summed in it: integers
    wrap as numpy's, bool multiplies with logical and and sums with logical or, float16 blocks
    are rounded to float16 before the reduction adds them (within float16 rounding of numpy's).
    The grammar of `minijit.einsum`.
    ``chunks``: None (default) lets the model pick every step's block sizes (`block_sizes`) and
    rechunks the operands to them; ``"input"`` keeps the operands' chunks (unified across operands,
    as `dask.array.einsum` does); an int is one block size for every index; a dict maps index
    letters to a block size or a tuple of chunk sizes (the indices it leaves out: the model's).
    ``optimize``: the contraction path of three or more operands, as `minijit.einsum` takes it.
    ``split_every``: blocks summed per node of the reduction tree (dask's default when None).
    ``order`` and ``casting`` as numpy's einsum takes them (`minijit.einsum.keywords`): ``order``
    lays out each block, ``casting`` is checked for the operands' cast to the result dtype
    (TypeError where the rule forbids it). The default None is `minijit.einsum`'s: numpy's 'safe',
    except that float32 and float64 convert to each other.
    Errors (subscripts, shapes, dtypes, chunks) are raised here, before any graph is built.
    """
    where = "minijit.dask.einsum"
    if isinstance(subscripts, str):
        wrapped: tuple = tuple(_Diagonals(_as_dask(i, x, where)) for i, x in enumerate(operands))
    else:  # numpy's sublist form: operands and sublists alternate
        subscripts, raw = _grammar.sublist_subscripts(subscripts, operands)
        wrapped = tuple(_Diagonals(_as_dask(i, x, where)) for i, x in enumerate(raw))
    subscripts, wrapped, optimize = _grammar.canonicalize(subscripts, wrapped, optimize)
    arrays = [w.x for w in wrapped]
    inputs, output = expand_subscripts(subscripts, tuple(x.ndim for x in arrays))
    expr = parse_subscripts(",".join(inputs) + "->" + output, *[x.shape for x in arrays])  # sizes, errors
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*[x.dtype for x in arrays])
    if dt.kind not in _KINDS:
        raise TypeError(
            f"{where}: dtype {dt} is not one numpy's einsum takes (bool, integers, floats, complex, object)"
        )
    if not _keywords.valid_order(order):
        raise ValueError(f"{where}: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if not _keywords.valid_casting(casting):
        raise ValueError(
            f"{where}: casting must be one of {', '.join(map(repr, _keywords.CASTINGS))} (got {casting!r})"
        )
    if not _cast_allowed(arrays, dt, casting):
        raise TypeError(
            f"{where}: cannot cast the operands ({', '.join(str(x.dtype) for x in arrays)}) to {dt}"
            f" with casting rule {casting or 'safe'!r}"
        )
    spec = _check_chunks(chunks, "".join(dict.fromkeys("".join(inputs))), expr.sizes)
    if split_every is not None and (not isinstance(split_every, (int, np.integer)) or split_every < 2):
        raise ValueError(
            f"{where}: split_every must be an int >= 2 (blocks summed per node) or None, got {split_every!r}"
        )
    if any(n == 0 for n in expr.sizes.values()):
        return da.zeros(tuple(expr.sizes[c] for c in output), dtype=dt, chunks=-1)
    # size-1 dims broadcast against a larger one are squeezed out of their operand
    subs = []
    for k, (sub, x) in enumerate(zip(inputs, arrays, strict=True)):
        drop = [ax for ax, c in enumerate(sub) if x.shape[ax] == 1 and expr.sizes[c] > 1]
        if drop:
            arrays[k] = x.reshape(tuple(n for ax, n in enumerate(x.shape) if ax not in drop))
            sub = "".join(c for ax, c in enumerate(sub) if ax not in drop)
        subs.append(sub)
    arrays = [x.astype(dt) if x.dtype != dt else x for x in arrays]
    steps = list(zip(subs, arrays, strict=True))
    if len(steps) > 2:
        full = ",".join(subs) + "->" + output
        path, _ = minijit.contract_path(full, *[x.shape for x in arrays], optimize=optimize, itemsize=dt.itemsize)
    else:
        path = [tuple(range(len(steps)))]
    for pick in path:
        chosen = [steps[k] for k in pick]
        rest = [s for k, s in enumerate(steps) if k not in pick]
        if rest:
            later = set("".join(s for s, _ in rest) + output)
            out = "".join(c for c in dict.fromkeys("".join(s for s, _ in chosen)) if c in later)
        else:
            out = output
        new = _step([s for s, _ in chosen], [x for _, x in chosen], out, spec, dt, split_every, order)
        steps = [*rest, (out, new)]
    return steps[0][1]


def tensordot(
    a: Any, b: Any, axes: int | Sequence[Any] = 2, *, chunks: Chunks = None, split_every: int | None = None
) -> da.Array:
    """numpy's tensordot on dask arrays, as an `einsum` (same ``chunks`` and ``split_every``; a
    ``chunks`` dict names operand 0's axes ``a``, ``b``, ``c``, ... in order and operand 1's other
    axes by the letters after them)."""
    a = _as_dask(0, a, "minijit.dask.tensordot")
    b = _as_dask(1, b, "minijit.dask.tensordot")
    if isinstance(axes, (int, np.integer)):
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ValueError(
                f"tensordot: axes={axes} must be in 0..{min(a.ndim, b.ndim)} for {a.ndim}-d and {b.ndim}-d"
            )
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        try:
            ax_a, ax_b = ([int(axes[k])] if np.ndim(axes[k]) == 0 else [int(v) for v in axes[k]] for k in (0, 1))
        except (TypeError, IndexError, ValueError):
            raise ValueError(f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}") from None
    if len(ax_a) != len(ax_b):
        raise ValueError(f"tensordot: {len(ax_a)} axes of operand 0 against {len(ax_b)} of operand 1")
    for name, axs, x in (("0", ax_a, a), ("1", ax_b, b)):
        for ax in axs:
            if not -x.ndim <= ax < x.ndim:
                raise ValueError(f"tensordot: axis {ax} is out of range for operand {name} ({x.ndim}-d)")
    ax_a = [ax % a.ndim for ax in ax_a]
    ax_b = [ax % b.ndim for ax in ax_b]
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    sa = letters[: a.ndim]
    sb = list(letters[a.ndim : a.ndim + b.ndim])
    for i, j in zip(ax_a, ax_b, strict=True):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: operand 0 axis {i} has size {a.shape[i]}, operand 1 axis {j} {b.shape[j]}")
        sb[j] = sa[i]
    out = "".join(c for k, c in enumerate(sa) if k not in ax_a) + "".join(c for k, c in enumerate(sb) if k not in ax_b)
    return einsum(f"{sa},{''.join(sb)}->{out}", a, b, chunks=chunks, split_every=split_every)


def matmul(a: Any, b: Any, *, chunks: Chunks = None, split_every: int | None = None) -> da.Array:
    """numpy's matmul on dask arrays (1-d operands promoted, batch dims broadcast), as the `einsum`
    ``...ij,...jk->...ik`` (a ``chunks`` dict names ``i``, ``j``, the contracted index, and ``k``)."""
    a = _as_dask(0, a, "minijit.dask.matmul")
    b = _as_dask(1, b, "minijit.dask.matmul")
    for i, x in enumerate((a, b)):
        if x.ndim == 0:
            raise ValueError(f"matmul: operand {i} is 0-d (a scalar); matmul needs at least 1 dim (use multiply)")
    sa = "j" if a.ndim == 1 else "...ij"
    sb = "j" if b.ndim == 1 else "...jk"
    out = ("..." if max(a.ndim, b.ndim) > 2 else "") + ("i" if a.ndim > 1 else "") + ("k" if b.ndim > 1 else "")
    if "..." not in out and (a.ndim > 1 or b.ndim > 1):
        out = "..." + out
    return einsum(f"{sa},{sb}->{out}", a, b, chunks=chunks, split_every=split_every)
