"""Contractions on dask arrays with minijit's kernels in every block (the extra ``minijit[dask]``).

    import dask.array as da
    import minijit.dask
    a = da.random.random((20000, 8000), chunks=4000).astype("float32")
    c = minijit.dask.einsum("ij,jk->ik", a, a.T)   # a dask array: c.compute() runs it

`einsum` takes the grammar of `minijit.einsum` (``...``, implicit outputs, repeated indices as
diagonals, size-1 broadcasting, the sublist form, ``optimize``); `tensordot` and `matmul` are
numpy's, spelled as einsum. An expression of three or more operands is split into pairwise steps
on minijit's contraction path (`minijit.contract_path`). Each step is one `dask.array.blockwise`
whose tasks call `minijit.einsum` on numpy blocks, keeping the contracted indices as size-1 axes,
and a tree reduction (`dask.array.reduction`, ``split_every`` blocks per node) sums those partial
blocks. Only subscripts and numpy blocks travel: no kernel is pickled, every worker process JITs
and caches its own plans (`minijit.cache_info`), which its threads share.

Block sizes come from a data-movement model (`block_sizes`, in the spirit of seed 001): the bytes
every task reads and writes against the flops it does, with the task overhead of the scheduler and
the threads of the cluster; ``chunks=`` overrides it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as e:  # pragma: no cover - exercised with dask hidden from sys.modules
    raise ImportError(
        f"minijit.dask needs dask.array and distributed, which are not installed ({e}):"
        " pip install minijit[dask]  (or: pip install 'dask[array]' distributed)"
    ) from e

import minijit
from minijit.einsum import grammar as _grammar
from minijit.einsum.parse import expand_subscripts, parse_subscripts

__all__ = ["block_sizes", "einsum", "matmul", "tensordot"]

#: the model's costs: seconds a scheduler spends per task; bytes per second that a block moves
#: between tasks (serialized, sent between worker processes, read back); flops per second of one
#: worker thread, by itemsize (the block kernel's rate, roughly; only ratios matter)
TASK_OVERHEAD_S = 1e-3
MOVE_BYTES_PER_S = 2e9
FLOPS_PER_S = {4: 5e10, 8: 2.5e10}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

Chunks = None | str | int | Mapping[str, int | Sequence[int]]


# ---------------------------------------------------------------------------------------------
# the block kernel and the reduction (module-level functions: pickled by name, nothing else)
# ---------------------------------------------------------------------------------------------
def _block_einsum(*blocks: np.ndarray, subscripts: str, extra: int, result_dtype: str) -> np.ndarray:
    """One task: `minijit.einsum` on numpy blocks, with ``extra`` size-1 axes for the contracted indices."""
    r = np.asarray(minijit.einsum(subscripts, *[np.asarray(b) for b in blocks], dtype=result_dtype))
    return r.reshape(r.shape + (1,) * extra) if extra else r


def _flatten(x: Any) -> list[np.ndarray]:
    return [y for e in x for y in _flatten(e)] if isinstance(x, list) else [x]


def _sum_blocks(x: Any, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """A node of the tree reduction: the sum of its partial blocks (nested lists), one new array."""
    parts = _flatten(x)
    total = parts[0].copy() if len(parts) > 1 else parts[0]
    for p in parts[1:]:
        total += p
    return total if keepdims else total.reshape([n for k, n in enumerate(total.shape) if k not in axis])


def _keep(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return x


# ---------------------------------------------------------------------------------------------
# the chunk model
# ---------------------------------------------------------------------------------------------
def _cluster_threads() -> int:
    """Threads that run tasks: those of the current `distributed` client, else this machine's CPUs."""
    try:
        from distributed import default_client
    except ImportError:
        pass
    else:
        try:
            return max(1, sum(default_client().nthreads().values()))
        except ValueError:  # no client
            pass
    return max(1, os.cpu_count() or 1)


def _model_time(
    inputs: Sequence[str],
    output: str,
    sizes: Mapping[str, int],
    nblocks: Mapping[str, int],
    itemsize: int,
    threads: int,
) -> float:
    """Seconds the model expects for one blockwise step split into ``nblocks`` blocks per index."""
    block = {c: -(-sizes[c] // n) for c, n in nblocks.items()}
    tasks = math.prod(nblocks.values())
    flops = (2 if len(inputs) > 1 else 1) * math.prod(block.values())
    compute = -(-tasks // threads) * flops / FLOPS_PER_S.get(itemsize, FLOPS_PER_S[8])
    # every operand is read once per block of the indices it lacks; every partial output block is
    # written once and read back by the reduction
    reads = sum(
        math.prod(sizes[c] for c in sub) * math.prod(nblocks[c] for c in sizes if c not in sub) for sub in inputs
    )
    partials = math.prod(nblocks[c] for c in sizes if c not in output)
    writes = math.prod(sizes[c] for c in output) * partials * (2 if partials > 1 else 1)
    return compute + (reads + writes) * itemsize / MOVE_BYTES_PER_S + tasks * TASK_OVERHEAD_S


def _largest_block(inputs: Sequence[str], output: str, sizes: Mapping[str, int], nblocks: Mapping[str, int]) -> str:
    """The operand or output subscripts whose block holds the most elements."""
    return max((*inputs, output), key=lambda sub: math.prod(-(-sizes[c] // nblocks[c]) for c in sub))


def _choose(
    inputs: Sequence[str],
    output: str,
    sizes: Mapping[str, int],
    itemsize: int,
    block_bytes: int,
    threads: int,
    fixed: Mapping[str, int],
) -> dict[str, int]:
    """Block size per index: every block (operand or output) within ``block_bytes``, then the
    split that lowers `_model_time` most, one doubling of an index's block count at a time."""
    nblocks = {c: -(-sizes[c] // fixed[c]) if c in fixed else 1 for c in sizes}
    free = [c for c in sizes if c not in fixed]

    def time_with(c: str) -> float:
        trial = dict(nblocks, **{c: min(2 * nblocks[c], sizes[c])})
        return _model_time(inputs, output, sizes, trial, itemsize, threads)

    while True:
        big = _largest_block(inputs, output, sizes, nblocks)
        if math.prod(-(-sizes[c] // nblocks[c]) for c in big) * itemsize <= block_bytes:
            break
        can = [c for c in big if c in free and nblocks[c] < sizes[c]]
        if not can:
            break
        c = min(can, key=time_with)
        nblocks[c] = min(2 * nblocks[c], sizes[c])
    now = _model_time(inputs, output, sizes, nblocks, itemsize, threads)
    while True:
        can = [c for c in free if nblocks[c] < sizes[c]]
        if not can:
            break
        c = min(can, key=time_with)
        t = time_with(c)
        if t >= now * 0.99:
            break
        nblocks[c], now = min(2 * nblocks[c], sizes[c]), t
    return {c: -(-sizes[c] // nblocks[c]) if sizes[c] else 0 for c in sizes}


def _default_block_bytes() -> int:
    return int(dask.utils.parse_bytes(dask.config.get("array.chunk-size")))


def block_sizes(
    subscripts: str,
    *shapes: Sequence[int],
    itemsize: int = 4,
    block_bytes: int | None = None,
    threads: int | None = None,
) -> dict[str, int]:
    """The block size (elements) the model picks for every index of a one-step contraction
    (`einsum` applies it to each pairwise step of a longer expression).

    Every operand and output block stays within ``block_bytes`` (default: dask's
    ``array.chunk-size``); among those, the split with the least modelled time: the task's
    flops at a worker thread's rate in waves over ``threads`` (default: the threads of the current
    `distributed` client, else the CPUs), plus the bytes all tasks read (each operand once per
    block of the indices it lacks) and write (the partial output blocks, read back by the
    reduction), plus a fixed overhead per task. Indices are keyed by their letters in the
    expanded subscripts (``...`` dims by the letters `minijit.einsum.parse.expand_subscripts` gives).
    """
    expr = parse_subscripts(subscripts, *shapes)
    return _choose(
        expr.inputs,
        expr.output,
        expr.sizes,
        itemsize,
        block_bytes or _default_block_bytes(),
        threads or _cluster_threads(),
        {},
    )


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
    """Operand ``i`` as a float32/float64 dask array with known shape (numpy and the like wrapped)."""
    if not isinstance(x, da.Array):
        if hasattr(x, "__cuda_array_interface__") or getattr(x, "is_cuda", False):
            raise TypeError(f"{where}: operand {i} is a CUDA device array; minijit.dask runs numpy blocks on CPUs")
        x = da.from_array(np.asarray(x), chunks=-1)
    if x.dtype not in _DTYPES:
        raise TypeError(f"{where}: operand {i} has dtype {x.dtype}; only float32 and float64 are supported")
    if any(isinstance(n, float) and math.isnan(n) for n in x.shape):
        raise ValueError(f"{where}: operand {i} has unknown chunk sizes {x.shape}: call compute_chunk_sizes() first")
    return x


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
) -> da.Array:
    """numpy's einsum on dask arrays, every block contracted by `minijit.einsum`; a dask array.

    ``operands``: dask arrays (others, e.g. numpy, are wrapped in one chunk), float32 or float64;
    the result dtype is ``dtype`` or their result type. The grammar of `minijit.einsum`.
    ``chunks``: None (default) lets the model pick every step's block sizes (`block_sizes`) and
    rechunks the operands to them; ``"input"`` keeps the operands' chunks (unified across operands,
    as `dask.array.einsum` does); an int is one block size for every index; a dict maps index
    letters to a block size or a tuple of chunk sizes (the indices it leaves out: the model's).
    ``optimize``: the contraction path of three or more operands, as `minijit.einsum` takes it.
    ``split_every``: blocks summed per node of the reduction tree (dask's default when None).
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
    if dt not in _DTYPES:
        raise TypeError(f"{where}: dtype must be float32 or float64, got {dt}")
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
        new = _step([s for s, _ in chosen], [x for _, x in chosen], out, spec, dt, split_every)
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
