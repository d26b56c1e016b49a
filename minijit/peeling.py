"""Peeling: a dim too large for one kernel call, set up as two operations along it.

`minijit.optimizer.split_dims` splits a dim only by its divisors, so a dim larger than the
kernels take (the target's `max_prim_size`: 65536 elements on x86-64) that has no fitting
divisor (an odd 100003, a prime) would reach a kernel whole, and setup would fail. `peel` cuts
such a dim into a head of whole `PEEL_BLOCK` s, which the optimizer then splits by its divisors,
and a tail of the rest (fewer than `PEEL_BLOCK` indices). Each part is a config of its own: the
same dims and strides with the peeled dim's size changed, starting `Part.offsets` elements into
in0, in1 and out. Along a K dim both parts add into the same out, in order: the head keeps the
first touch and the tail the last; along any other dim the parts write disjoint parts of out and
each keeps both touches."""

from __future__ import annotations

from dataclasses import dataclass

from minijit.ir import TensorConfig, dim_t, exec_t, ptype_t

__all__ = ["PEEL_BLOCK", "Part", "oversized", "peel"]

#: the head of a peeled dim is a multiple of this many indices (elements): a multiple of every
#: split the optimizer looks for (M dims by 16, 12, 8 or 2; N by 4 or 2; prims up to 256)
PEEL_BLOCK = 256


@dataclass(frozen=True)
class Part:
    """One part of a peeled operation: its config and where it starts in in0, in1, out
    (elements from the caller's origins; the peeled dim's head size times its strides)."""

    config: TensorConfig
    offsets: tuple[int, int, int]


def oversized(config: TensorConfig, limit: int | None) -> bool:
    """Whether a prim dim of ``config`` has more than ``limit`` indices (None: no limit)."""
    return limit is not None and any(d.exec is exec_t.prim and d.size > limit for d in config.dims)


def peel(config: TensorConfig) -> tuple[Part, Part] | None:
    """``config`` (before optimization) as a head and a tail along its largest dim that is larger
    than `PEEL_BLOCK` and not a multiple of it; None when there is no such dim."""
    dims = config.dims
    candidates = [i for i, d in enumerate(dims) if d.size > PEEL_BLOCK and d.size % PEEL_BLOCK]
    if not candidates:
        return None
    i = max(candidates, key=lambda j: dims[j].size)
    d = dims[i]
    head = d.size - d.size % PEEL_BLOCK
    reduces = d.type is dim_t.k  # both parts accumulate into the same out

    def part(size: int, start: int, first: ptype_t, last: ptype_t) -> Part:
        sized = config.with_dims(
            [x.with_(size=size) if j == i else x for j, x in enumerate(dims)], prim_first=first, prim_last=last
        )
        return Part(sized, tuple(start * s for s in d.strides))

    first, last = config.prim_first, config.prim_last
    return (
        part(head, 0, first, ptype_t.none if reduces else last),
        part(d.size - head, head, ptype_t.none if reduces else first, last),
    )
