"""Einsum on minijit: subscripts, contraction paths, einsum trees whose nodes are TensorOperations.

import minijit
C = minijit.einsum("bhqd,bhkd->bhqk", Q, K)
plan = minijit.EinsumPlan("ij,jk,kl->il", (64, 32), (32, 48), (48, 16), dtype="float32")
plan(A, B, C)
S = minijit.einsum("bhqd,bhkd->bhqk", Q16, K16, target="cuda")  # fp16 in, fp32 out (a CudaEinsumPlan)
path, info = minijit.contract_path("ij,jk,kl->il", (64, 32), (32, 48), (48, 16))
C = minijit.tensordot(A, B, axes=([1], [0]))  # numpy's tensordot and transpose (an opt_einsum backend)
"""

from minijit.einsum.api import contract_path, einsum
from minijit.einsum.cuda import CudaEinsumPlan
from minijit.einsum.parse import Expression, TreeNode, parse_subscripts, parse_tree
from minijit.einsum.path import greedy_path, optimal_path, path_cost
from minijit.einsum.plan import EinsumPlan
from minijit.einsum.tensordot import tensordot, transpose

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
    "tensordot",
    "transpose",
]
