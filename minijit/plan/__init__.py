"""Plan trees: what `TensorOperation.setup` builds (`build`), runs (`run`) and prints (`listing`).

    Plan(config, body, swapped, blocking)       one set-up operation
      body: Kernel(loop nest, primitives, iterations, threads)
            Pack(fills: copies into per-call buffers, body: Kernel)
            Chunk(kind "M" | "K", count, steps, bodies: Plans)
            Peel(parts: Plans at element offsets)

Every node is frozen; scratch buffers come from a pool per call, so one plan may run from many
threads at once (docs/decisions.md, "Plans are immutable and shareable").
"""

from __future__ import annotations

from minijit.plan.build import Env, configured, optimized
from minijit.plan.listing import footprint, listing
from minijit.plan.nodes import Chunk, Copy, Fill, Kernel, Node, Pack, Part, Peel, Plan, head, head_pack
from minijit.plan.run import run, run_plan

__all__ = [
    "Chunk",
    "Copy",
    "Env",
    "Fill",
    "Kernel",
    "Node",
    "Pack",
    "Part",
    "Peel",
    "Plan",
    "configured",
    "footprint",
    "head",
    "head_pack",
    "listing",
    "optimized",
    "run",
    "run_plan",
]
