"""Einsum on minijit: subscripts, contraction paths, einsum trees whose nodes are TensorOperations.

import minijit
C = minijit.einsum("bhqd,bhkd->bhqk", Q, K)
plan = minijit.EinsumPlan("ij,jk,kl->il", (64, 32), (32, 48), (48, 16), dtype="float32")
plan(A, B, C)
S = minijit.einsum("bhqd,bhkd->bhqk", Q16, K16, target="cuda")  # fp16 in, fp32 out (a CudaEinsumPlan)
path, info = minijit.contract_path("ij,jk,kl->il", (64, 32), (32, 48), (48, 16))
C = minijit.tensordot(A, B, axes=([1], [0]))  # numpy's tensordot and transpose (an opt_einsum backend)

The names below and the submodules load on first use (``__getattr__``): importing the package
costs nothing beyond `minijit.einsum.tensordot`'s few lines; the JIT behind `einsum` and
`EinsumPlan` loads on the first call that needs it, the CUDA plan only for CUDA.
"""

from minijit._lazy import attach as _attach

# light (no JIT behind it): imported here so that ``minijit.einsum.tensordot`` is the function,
# not its module, as it always was
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

#: the public names that load on first use, and the module each comes from
_LAZY = {
    "CudaEinsumPlan": "minijit.einsum.cuda",
    "EinsumPlan": "minijit.einsum.plan",
    "Expression": "minijit.einsum.parse",
    "TreeNode": "minijit.einsum.parse",
    "contract_path": "minijit.einsum.api",
    "einsum": "minijit.einsum.api",
    "greedy_path": "minijit.einsum.path",
    "optimal_path": "minijit.einsum.path",
    "parse_subscripts": "minijit.einsum.parse",
    "parse_tree": "minijit.einsum.parse",
    "path_cost": "minijit.einsum.path",
}
#: the submodules importing the package used to load (its attributes ever since)
_SUBMODULES = frozenset("api builder cuda grammar lowering parse path plan views".split())


# a public name of `__all__` from its module (`_LAZY`), or a submodule of `_SUBMODULES`, imported
# when first asked for
__getattr__, __dir__ = _attach(__name__, globals(), _LAZY, _SUBMODULES)
