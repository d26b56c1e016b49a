"""Sparse tensor contractions auto-scheduled the SparseAuto way (seed 002).

The planner (``nest``, ``graph``, ``schedules``, ``complexity``, ``prune``, ``smt``, ``plan``)
is pure Python; code generation and execution live beside it.
"""

from minijit.sparseauto.api import compile_einsum, sparse_einsum
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.nest import COMPRESSED, DENSE, Access, Compute, Loop, Nest, Node, Operand, Temp
from minijit.sparseauto.plan import SparsePlan, sparse_plan
from minijit.sparseauto.tensor import SparseTensor

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
    "SparseContraction",
    "SparseTensor",
    "compile_einsum",
    "sparse_einsum",
]
