"""Einsum on minijit: subscripts, contraction paths, einsum trees whose nodes are TensorOperations.

import minijit
C = minijit.einsum("bhqd,bhkd->bhqk", Q, K)
plan = minijit.EinsumPlan("ij,jk,kl->il", (64, 32), (32, 48), (48, 16), dtype="float32")
plan(A, B, C)
S = minijit.einsum("bhqd,bhkd->bhqk", Q16, K16, target="cuda")  # fp16 in, fp32 out (a CudaEinsumPlan)
path, info = minijit.contract_path("ij,jk,kl->il", (64, 32), (32, 48), (48, 16))
"""

from minijit.einsum.cuda import CudaEinsumPlan
from minijit.einsum.parse import Expression, TreeNode, parse_subscripts, parse_tree
from minijit.einsum.path import greedy_path, optimal_path, path_cost
from minijit.einsum.plan import EinsumPlan, contract_path, einsum

__all__ = [
    "CudaEinsumPlan",
    "EinsumPlan",
    "Expression",
    "TreeNode",
    "contract_path",
    "einsum",
    "greedy_path",
    "optimal_path",
    "parse_subscripts",
    "parse_tree",
    "path_cost",
]
