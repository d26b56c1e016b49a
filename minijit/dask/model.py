"""The chunk model of `minijit.dask`: block sizes from the bytes each task moves against its flops
(seed 001's IO reasoning), a per-task overhead and the threads of the cluster."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import dask.config
from dask.utils import parse_bytes

from minijit.einsum.parse import parse_subscripts

__all__ = ["block_sizes"]

#: the model's costs: seconds a scheduler spends per task; bytes per second that a block moves
#: between tasks (serialized, sent between worker processes, read back); flops per second of one
#: worker thread, by itemsize (the block kernel's rate, roughly; only ratios matter)
TASK_OVERHEAD_S = 1e-3
MOVE_BYTES_PER_S = 2e9
FLOPS_PER_S = {4: 5e10, 8: 2.5e10}


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
    return int(parse_bytes(dask.config.get("array.chunk-size")))


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
