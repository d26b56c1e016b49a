"""minijit: a pure-Python JIT for tensor operations.

    from minijit import TensorOperation, dtype_t, ptype_t, dim_t, exec_t, SetupError
    op = TensorOperation(target="native")
    op.setup("fp32", "zero", "brgemm", "relu", dim_types, exec_types, dim_sizes,
             strides_in0, strides_in1, strides_out)
    op.execute(in0, in1, out)

Emitters live in the sibling packages `asm` (AArch64, x86-64) and `ptx`.
"""

from minijit import cache as _cache
from minijit.einsum import EinsumPlan, contract_path, einsum, tensordot, transpose
from minijit.errors import SetupError, error_t
from minijit.ir import Dimension, TensorConfig, dim_t, dtype_t, exec_t, ptype_t
from minijit.optimizer import optimize
from minijit.tensor_operation import TensorOperation


def _cache_owners() -> None:
    """Import the modules whose caches are created at import (so every cache is listed)."""
    import minijit.cuda.operation  # noqa: F401, PLC0415 - its kernel cache


def cache_info() -> dict[str, dict[str, int]]:
    """Every bounded cache of minijit by name (``einsum.plans``, ``einsum.operations``,
    ``kernels``, ``cuda.kernels``): hits, misses, size and maxsize (`minijit.cache.LRUCache`)."""
    _cache_owners()
    return _cache.cache_info()


def cache_clear() -> None:
    """Empty every cache of minijit (plans, operations and kernels in use stay alive)."""
    _cache_owners()
    _cache.cache_clear()


__all__ = [
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
    "sparse_einsum",
    "sparse_plan",
    "tensordot",
    "transpose",
]
__version__ = "0.1.0"

#: the SparseAuto path loads on first use (`minijit.sparseauto`)
_SPARSE = ("SparseTensor", "sparse_plan", "sparse_einsum")


def __getattr__(name: str):
    """``minijit.SparseTensor``, ``minijit.sparse_plan`` and ``minijit.sparse_einsum`` (from
    `minijit.sparseauto`, imported when first asked for)."""
    if name in _SPARSE:
        import minijit.sparseauto as sparseauto  # noqa: PLC0415

        return getattr(sparseauto, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
