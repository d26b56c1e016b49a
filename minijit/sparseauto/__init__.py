"""Sparse tensor contractions auto-scheduled the SparseAuto way (seed 002).

The planner (``nest``, ``graph``, ``schedules``, ``complexity``, ``prune``, ``smt``, ``plan``)
is pure Python; code generation and execution live beside it.
"""

from minijit.sparseauto.nest import COMPRESSED, DENSE, Access, Compute, Loop, Nest, Node, Operand, Temp
from minijit.sparseauto.plan import SparsePlan, sparse_plan

__all__ = [
    "COMPRESSED",
    "DENSE",
    "Access",
    "Compute",
    "Loop",
    "Nest",
    "Node",
    "Operand",
    "Temp",
    "SparsePlan",
    "sparse_plan",
]
