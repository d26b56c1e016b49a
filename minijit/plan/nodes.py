"""The nodes of a plan tree: what `TensorOperation.setup` builds and `minijit.plan.run` walks.

A `Plan` is one set-up operation: its configuration and a body of nodes. Bodies are a `Kernel`
(the compiled loop nest), a `Pack` (copies into per-call buffers, then a kernel), a `Chunk`
(chunks of a dim, each a plan of its own) or a `Peel` (parts of a dim too large for the kernels,
each a plan at element offsets). Every node is frozen and holds no per-call state: a `Pack` takes
its buffers from a thread-safe pool for each call, so any plan may run from many threads at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minijit.blocking import Blocking
from minijit.cache import ScratchPool
from minijit.ir import TensorConfig
from minijit.kernels.loopnest import LoopNest
from minijit.packing import PackPlan, PanelPlan


@dataclass(frozen=True, eq=False)
class Kernel:
    """The compiled loop nest ``loopnest`` (``f(in0, in1, out, begin, end)``) over ``iterations``
    shared iterations on ``threads`` threads. ``raw``: its cffi function on a native target, None
    where it is emulated (then called with arrays). ``config``: the config compiled (packed
    operands' strides); ``primitives``: the first/main/last kernels it calls; ``nest``: its
    `LoopNest`; ``a_copy`` / ``n_outer``: the BRGEMM packs A itself / walks N outermost."""

    config: TensorConfig
    primitives: Mapping[str, Any]
    nest: LoopNest
    loopnest: Any
    raw: Any
    iterations: int
    threads: int
    a_copy: bool = False
    n_outer: bool = False


@dataclass(frozen=True, eq=False)
class Copy:
    """One copy into a packed buffer: ``plan`` run from element ``src`` of the operand to element
    ``dst`` of the buffer."""

    plan: Plan
    src: int
    dst: int


@dataclass(frozen=True, eq=False)
class Fill:
    """One packed buffer of ``elements`` for operand ``tensor`` ("in0" or "in1", the config's
    roles), filled by ``copies`` on every call; ``layout``: the `minijit.packing` plan that chose
    it (a padded A or micro-panels)."""

    tensor: str
    elements: int
    copies: tuple[Copy, ...]
    layout: PackPlan | PanelPlan

    @property
    def operand(self) -> int:
        return 0 if self.tensor == "in0" else 1


@dataclass(frozen=True, eq=False)
class Pack:
    """``fills`` (in order), then ``body`` on the buffers. ``pool`` hands each call its own tuple
    of ``(buffer, address)`` pairs, one per fill."""

    fills: tuple[Fill, ...]
    body: Kernel
    pool: ScratchPool


@dataclass(frozen=True, eq=False)
class Chunk:
    """``count`` chunks of dim ``dim``, ``steps`` bytes apart in in0, in1, out. ``kind`` "K": chunk
    ``i`` runs ``bodies[i]`` (the first keeps the first touch, the last the last touch), in order,
    each on its own threads. ``kind`` "M": every chunk runs ``bodies[0]`` (single-threaded), the
    chunks split over ``threads`` threads. Bodies run in this node's roles (never swapped)."""

    kind: str
    dim: int
    count: int
    steps: tuple[int, int, int]
    bodies: tuple[Plan, ...]
    threads: int


@dataclass(frozen=True, eq=False)
class Part:
    """One part of a peeled operation: ``plan`` run from element ``offsets`` of in0, in1, out
    (``byte_offsets`` in bytes), in the caller's roles."""

    offsets: tuple[int, int, int]
    byte_offsets: tuple[int, int, int]
    plan: Plan


@dataclass(frozen=True, eq=False)
class Peel:
    """``parts`` run in order (`minijit.peeling`: head and tail)."""

    parts: tuple[Part, ...]


Node = Kernel | Pack | Chunk | Peel


@dataclass(frozen=True, eq=False)
class Plan:
    """One set-up operation: ``config`` (the configuration it was set up from), ``body`` (what
    runs), ``swapped`` (the caller's in0 and in1 are exchanged before the body runs: the optimizer
    swapped the roles) and ``blocking`` (the cache model's choice, or None)."""

    config: TensorConfig
    body: Node
    swapped: bool = False
    blocking: Blocking | None = None


def head(node: Plan | Node) -> Kernel:
    """The first kernel the tree reaches (a peeled plan's head, a chunked plan's first chunk)."""
    while not isinstance(node, Kernel):
        node = _first_child(node)
    return node


def head_pack(node: Plan | Node) -> Pack | None:
    """The first `Pack` on the way to `head`, or None."""
    while not isinstance(node, Kernel):
        if isinstance(node, Pack):
            return node
        node = _first_child(node)
    return None


def _first_child(node: Plan | Node) -> Plan | Node:
    if isinstance(node, Plan | Pack):
        return node.body
    if isinstance(node, Chunk):
        return node.bodies[0]
    if isinstance(node, Peel):
        return node.parts[0].plan
    raise TypeError(f"not a plan node: {type(node).__name__}")
