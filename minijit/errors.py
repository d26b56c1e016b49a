"""Error codes and the setup exception of the TensorOperation backend (mini_jit's ``error_t``)."""

from __future__ import annotations

import enum


class error_t(enum.Enum):  # noqa: N801 - mirrors mini_jit's naming
    """Result codes of setup/validation, named like mini_jit's ``error_t``."""

    success = "success"
    #: Dimension types or the number/kind of prim dims do not fit the primitive.
    wrong_dimension = "wrong_dimension"
    #: Unsupported data type.
    wrong_dtype = "wrong_dtype"
    #: Unsupported primitive type (or one not allowed in that position, e.g. GEMM as first touch).
    wrong_ptype = "wrong_ptype"
    #: Execution type not allowed here (or dims in an illegal order: shared, seq, prim).
    wrong_exec_type = "wrong_exec_type"
    #: A stride that is inconsistent with the dimension type (e.g. a K dim with an output stride).
    wrong_stride = "wrong_stride"
    #: A dimension size < 1 (or not an integer).
    wrong_size = "wrong_size"
    #: A K dimension marked shared (reductions are never parallelized).
    shared_k = "shared_k"
    #: The setup lists (dim types, exec types, sizes, strides) differ in length.
    wrong_length = "wrong_length"
    #: An array passed to execute has the wrong type, rank or dtype, or is read-only.
    wrong_array = "wrong_array"
    #: The strides reach an element outside an array passed to execute.
    out_of_bounds = "out_of_bounds"
    #: The plan would allocate more than ``minijit.limits.MAX_BYTES`` bytes for itself.
    too_large = "too_large"


class SetupError(ValueError):
    """A configuration or argument the backend rejects.

    ``code`` is the :class:`error_t`; ``dim`` the offending dimension index (``None`` when the
    problem is not tied to one dimension). The message names the dimension index and value.
    """

    def __init__(self, code: error_t, message: str, *, dim: int | None = None) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.dim = dim
        self.message = message
