"""CUDA: GEMM/BRGEMM on tensor cores (mma.sync for sm_80+, wgmma/TMA for sm_90a) and elementwise
ops; operations run through `minijit.cuda.operation.CudaTensorOperation`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from minijit.targets.base import Target


@dataclass(frozen=True)
class CudaTarget(Target):
    family: ClassVar[str] = "cuda"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "tf32", "fp32")
    operations: ClassVar[dict[str, str]] = {
        "TensorOperation": "minijit.cuda.operation:CudaTensorOperation",
        "EinsumPlan": "minijit.einsum.cuda:CudaEinsumPlan",
        "SpMM": "minijit.sparse.spmm_cuda:CudaSpMM",
    }

    @property
    def name(self) -> str:
        return "cuda"
