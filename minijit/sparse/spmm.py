"""``SpMM``: C = S @ B for a CSR matrix S, planned once per sparsity pattern.

``SpMM(..., target=...)`` builds a `CpuSpMM` (`minijit.sparse.spmm_cpu`) or a `CudaSpMM`
(`minijit.sparse.spmm_cuda`); both are `SpMM`s (`minijit.operation.Operation`).

    op = SpMM(S, n=256, target="cuda")        # or target="native"
    op.execute(B, C)                           # C[:] = S @ B
    op.update_values(new_data)                 # same pattern, new values: no re-planning
    C = spmm(S, B)                             # one-shot, native

Operands: ``S`` a ``scipy.sparse`` CSR matrix or ``(indptr, indices, data,
shape)`` (validated by `minijit.sparse.csr.as_csr`); with ``target="cuda"``
also a torch ``sparse_csr`` tensor or ``(indptr, indices, data, shape)`` of
device arrays (`minijit.sparse.device.host_csr`: read back once, validated and
planned on the host, before any launch); ``B`` K x N, float16 or float32;
``C`` M x N float32, overwritten. Host B and C may be row-major (C order) or
column-major (F order): one dense block each (`minijit.arrays`); views with gaps
are refused. The kernels read B and write C row-major: an F-order B, or one whose
dtype is not the kernel's, is converted (one copy) per call, and an F-order C is
computed into a row-major scratch and copied in.

Targets and precision (``dtype`` is chosen at construction, since the kernel is
specialised for it; it is not inferred from B):

* ``target="cuda"``: TCA-SpMM tensor-core kernels (`minijit.sparse.tca`), fp32
  accumulation, ``dtype`` "fp16" (default), "bf16" or "tf32" (fp32 S and B
  rounded with cvt.rna.tf32.f32); a device B must hold float16, bfloat16 or
  float32 respectively (numpy B is converted on upload); ``plan`` is the
  seed-003 warp assignment (`minijit.sparse.plan`).
  ``strategy`` "tca" (seed 003), "window" (row windows) or "auto" (the one
  `window_plan.choose_strategy` picks). ``reorder`` (row windows only): "auto" reorders the
  rows (`minijit.sparse.reorder`) when that saves at least `window_plan.MIN_REORDER_GAIN` of
  the window mma instructions, "rows" always, "none" never. The kernel stores C through the
  plan's row table, so C is in the caller's row order either way; ``reordered`` and
  ``row_order`` record the choice (shown in ``repr`` and `SpMM.plan_summary`).
  ``window_rows`` (row windows only): 16 (tiles are the mma's A), 8 (FlashSparse's
  swap-and-transpose: C^T = B^T S^T, 8-row windows, fewer padded zeros on scattered columns) or
  None (default: whichever issues fewer mma instructions); after construction the chosen plan's
  rows per window (None for seed 003's plan).
* ``target="native"`` (dtype "fp32" by default): JIT'd CPU kernel
  (`minijit.sparse.cpu`; AVX-512/AVX2 on x86-64, NEON on AArch64), rows split
  over the minijit thread pool by nnz. ``dtype="fp16"`` rounds S and B to
  fp16 first (the GPU's input precision) and computes in fp32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit import targets
from minijit.operation import Operation
from minijit.sparse.csr import Csr, as_csr, check_dense, check_out
from minijit.sparse.plan import Plan, make_plan
from minijit.sparse.precision import precision

__all__ = ["SpMM", "spmm"]

TARGETS = ("cuda", "native")
#: cuda work splits: seed 003's plan ("tca"), row windows split by non-zeros ("window"), or the
#: one `window_plan.choose_strategy` picks from the pattern ("auto")
STRATEGIES = ("auto", "tca", "window")
#: row reordering for the row-window strategy (`minijit.sparse.reorder`)
REORDERS = ("auto", "none", "rows")
DTYPES = {"native": ("fp16", "fp32"), "cuda": ("fp16", "bf16", "tf32")}


class SpMM(Operation):
    """C = S @ B for one sparsity pattern and N (see the module docstring).

    ``SpMM(csr, n, dtype=None, target="cuda", *, ...)``: ``target="native"`` builds a
    `minijit.sparse.spmm_cpu.CpuSpMM` (``threads``, ``isa``), ``target="cuda"`` a
    `minijit.sparse.spmm_cuda.CudaSpMM` (``driver``, ``seg_chunks``, ``strategy``, ``reorder``,
    ``window_rows``). ``seg_chunks``: 64-nnz chunks per multiblock_per_row block of seed 003's
    plan (the cuda kernel's, and the numpy `model`'s on both targets).
    """

    target: str

    @classmethod
    def _implementation(cls, csr: object, n: int, dtype: str | None = None, target: str = "cuda", **kwargs: Any):
        """The subclass serving ``target`` (`minijit.operation.OperationMeta`)."""
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        return targets.get(target).operation_class(cls), (csr, n, dtype), kwargs

    def _checked_args(self, n: int, dtype: str | None) -> str:
        """``dtype`` (None: this target's default) after checking it and ``n``; ValueError otherwise."""
        from minijit.sparse import cpu

        if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= int(n) <= cpu.MAX_N:
            raise ValueError(f"n must be an int in 1..{cpu.MAX_N}, got {n!r}")
        dtype = dtype if dtype is not None else DTYPES[self.target][0 if self.target == "cuda" else 1]
        if dtype not in DTYPES[self.target]:
            hint = " (fp32 inputs on the tensor cores: dtype='tf32')" if dtype == "fp32" else ""
            raise ValueError(
                f"dtype must be one of {DTYPES[self.target]} for target={self.target!r}, got {dtype!r}{hint}"
            )
        return dtype

    def _init_common(self, csr: object, n: int, dtype: str, seg_chunks: int) -> None:
        """The pattern (validated), N, dtype and the float32 values."""
        self.dtype = dtype
        self.csr: Csr = as_csr(csr)
        self.n = int(n)
        self.seg_chunks = seg_chunks
        self._plan: Plan | None = None
        self._data32 = self._values(self.csr.data)

    def __repr__(self) -> str:
        m, k = self.csr.shape
        return (
            f"SpMM({m}x{k}, nnz={self.csr.nnz}, n={self.n}, dtype={self.dtype!r}, target={self.target!r},"
            f" strategy={self.strategy!r}{self._repr_extra()})"
        )

    def _repr_extra(self) -> str:
        """What this target adds to ``repr``."""
        return ""

    # ------------------------------------------------------------------ the protocol
    def setup(self) -> None:
        """Nothing to do: an SpMM is planned by its constructor (the `Operation` protocol)."""

    @property
    def flops(self) -> int:
        """2 per multiply-add: 2 * nnz * N."""
        return 2 * self.csr.nnz * self.n

    def info(self) -> dict[str, Any]:
        """Target, dtype, shapes (S, B, C), kernel family and strategy, nnz, flops."""
        m, k = self.csr.shape
        return {
            "target": self.target,
            "dtype": self.dtype,
            "shapes": [(m, k), (k, self.n), (m, self.n)],
            "kernel": self._kernel_name(),
            "strategy": self.strategy,
            "nnz": self.csr.nnz,
            "flops": self.flops,
        }

    def listing(self) -> str:
        """``repr`` and the plan in words."""
        return f"{self!r}\n{self.plan_summary()}"

    def _kernel_name(self) -> str:
        raise NotImplementedError

    def plan_summary(self) -> str:
        """The chosen strategy and its plan, in words."""
        return f"seed 003: {self.plan.summary()}"

    # ------------------------------------------------------------------ common
    @property
    def shape(self) -> tuple[int, int]:
        return self.csr.shape

    @property
    def plan(self) -> Plan:
        """The TCA-SpMM warp plan (built on first use for native targets)."""
        if self._plan is None:
            self._plan = make_plan(self.csr.indptr, self.n, self.seg_chunks)
        return self._plan

    def _values(self, data: np.ndarray) -> np.ndarray:
        d = np.asarray(data, dtype=np.float32)
        if self.dtype == "fp16":
            d = d.astype(np.float16).astype(np.float32)
        return np.ascontiguousarray(d)

    def update_values(self, data: np.ndarray) -> None:
        """New non-zero values for the same pattern (length nnz, float, contiguous); the plan is kept."""
        if not isinstance(data, np.ndarray):
            raise TypeError(f"data must be a numpy array, got {type(data).__name__}")
        if data.ndim != 1 or data.shape[0] != self.csr.nnz:
            raise ValueError(f"data must be 1-D with nnz = {self.csr.nnz} entries, got shape {data.shape}")
        if data.dtype not in (np.float16, np.float32, np.float64):
            raise TypeError(f"data must be float16, float32 or float64, got {data.dtype}")
        if not data.flags.c_contiguous:
            raise ValueError("data must be contiguous")
        self.csr = Csr(self.csr.indptr, self.csr.indices, data, self.csr.shape)
        self._data32 = self._values(data)
        self._upload_values(data)

    def _upload_values(self, data: np.ndarray) -> None:
        """Where the target keeps its own copy of the values (the device), refresh it."""

    def _check(self, b: object, c: object) -> tuple[np.ndarray, np.ndarray]:
        m, k = self.csr.shape
        b = check_dense(b, k, self.n)
        c = check_out(c, m, self.n)
        return b, c

    def model(self, b: np.ndarray) -> np.ndarray:
        """The numpy model of the TCA-SpMM kernels for ``b`` (any target; for checking)."""
        from minijit.sparse import model

        m, k = self.csr.shape
        b = check_dense(b, k, self.n)
        dt = self.dtype if self.dtype in ("bf16", "tf32") else "fp16"
        if self.strategy == "window":
            from minijit.sparse import window_plan

            return window_plan.model(self._wplan, self.csr.data, b, precision(dt).quantize)
        return model.tca_spmm(self.plan, self.csr, np.asarray(b, np.float32), dt)


def spmm(s: object, b: np.ndarray, target: str = "native", dtype: str | None = None) -> np.ndarray:
    """One-shot ``S @ B`` (float32 result); plans and JITs on every call, so prefer `SpMM` for repeats."""
    csr = as_csr(s)
    if not isinstance(b, np.ndarray) or b.ndim != 2:
        raise TypeError("B must be a 2-D numpy array")
    op = SpMM(csr, b.shape[1], dtype=dtype, target=target)
    c = np.empty((csr.shape[0], b.shape[1]), np.float32)
    return op.execute(b, c)
