"""minijit: a pure-Python JIT for tensor operations.

    from minijit import TensorOperation, dtype_t, ptype_t, dim_t, exec_t, SetupError
    op = TensorOperation(target="native")
    op.setup("fp32", "zero", "brgemm", "relu", dim_types, exec_types, dim_sizes,
             strides_in0, strides_in1, strides_out)
    op.execute(in0, in1, out)

Emitters live in the sibling packages `asm` (AArch64, x86-64) and `ptx`.

``import minijit`` loads this file, the `minijit.einsum` package's index and the host einsum's
fast path (the generic tier: `minijit.einsum.api`, `minijit.einsum.generic`, `minijit.jit`, the
code cache); every other public name (`__all__`) and the submodules an import used to bring
along (``minijit.ir``, ``minijit.packing``, ...) load on first use (PEP 562 ``__getattr__``), so a
program pays for the planner, the code generators, cffi's C parser, the CUDA, sparse and dask
paths only once it uses them.
"""

# the package's index, no JIT behind it (`minijit.einsum.__getattr__`): imported here so that the
# attribute ``minijit.einsum`` is the function, not the package, whichever submodule a program
# imports first. The import binds the package to ``einsum`` here; removed, the name resolves
# through `__getattr__` to `minijit.einsum.api.einsum`.
import minijit.einsum as _einsum_package  # noqa: F401 - see above

# the host einsum's fast path (`minijit.einsum.api` and what a call the generic tier serves needs:
# no planner, no code generator, no C parser), loaded here so that a process's first einsum on a
# warm code cache costs about what numpy's call does
import minijit.einsum.api as _einsum_api  # noqa: F401 - see above
from minijit._lazy import attach as _attach
from minijit.einsum.tensordot import tensordot, transpose

globals().pop("einsum", None)


def _cache_owners() -> None:
    """Import the modules whose caches are created at import (so every cache is listed)."""
    import minijit.cuda.operation  # noqa: F401, PLC0415 - its kernel cache
    import minijit.einsum.plan  # noqa: F401, PLC0415 - einsum.plans, einsum.operations
    import minijit.kernels  # noqa: F401, PLC0415 - kernels, loopnests


def cache_info() -> dict[str, dict[str, int]]:
    """Every bounded cache of minijit by name (``einsum.plans``, ``einsum.operations``,
    ``kernels``, ``cuda.kernels``): hits, misses, size and maxsize (`minijit.cache.LRUCache`)."""
    _cache_owners()
    from minijit import cache  # noqa: PLC0415

    return cache.cache_info()


def cache_clear() -> None:
    """Empty every cache of minijit (plans, operations and kernels in use stay alive)."""
    _cache_owners()
    from minijit import cache  # noqa: PLC0415

    cache.cache_clear()


__all__ = [
    "AttentionPlan",
    "Dimension",
    "EinsumPlan",
    "SetupError",
    "SparseTensor",
    "TensorConfig",
    "TensorOperation",
    "cache_clear",
    "cache_info",
    "contract_path",
    "dim_t",
    "dtype_t",
    "einsum",
    "error_t",
    "exec_t",
    "optimize",
    "ptype_t",
    "scaled_dot_product_attention",
    "sparse_einsum",
    "sparse_plan",
    "tensordot",
    "transpose",
]
__version__ = "0.1.0"

#: the public names that load on first use, and the module each comes from
_LAZY = {
    "AttentionPlan": "minijit.attention.api",
    "Dimension": "minijit.ir",
    "EinsumPlan": "minijit.einsum.plan",
    "SetupError": "minijit.errors",
    "SparseTensor": "minijit.sparseauto",
    "TensorConfig": "minijit.ir",
    "TensorOperation": "minijit.tensor_operation",
    "contract_path": "minijit.einsum.api",
    "dim_t": "minijit.ir",
    "dtype_t": "minijit.ir",
    "einsum": "minijit.einsum.api",
    "error_t": "minijit.errors",
    "exec_t": "minijit.ir",
    "optimize": "minijit.optimizer",
    "ptype_t": "minijit.ir",
    "scaled_dot_product_attention": "minijit.attention.api",
    "sparse_einsum": "minijit.sparseauto",
    "sparse_plan": "minijit.sparseauto",
}
#: the submodules ``import minijit`` used to load (attributes of the package ever since): they
#: load when first named as an attribute (``minijit.ir``) too
_SUBMODULES = frozenset(
    "arrays blocking cache errors ir kernels limits operation optimizer packing parallel peeling plan reference"
    " runtime schedule targets tensor_operation tune tune_store".split()
)


# a public name of `__all__` from its module (`_LAZY`), or a submodule of `_SUBMODULES`, imported
# when first asked for
__getattr__, __dir__ = _attach(__name__, globals(), _LAZY, _SUBMODULES)
