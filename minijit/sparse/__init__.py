"""Sparse x dense matrix multiplication (SpMM) on CSR: TCA-SpMM on tensor cores, JIT'd CPU kernels.

    from minijit.sparse import SpMM, spmm
    op = SpMM(S, n=256, target="cuda")     # fp16 TCA-SpMM (seed 003); target="native": CPU, fp32
    op.execute(B, C)                       # C = S @ B, C float32 row-major
    op.update_values(data)                 # new values, same pattern and plan

Modules: `csr` (validation), `device` (device arrays and CSR on the device),
`precision` (fp16, bf16, tf32 inputs), `plan` (docs/seeds/003_tca_spmm.txt section 4.2 warp/block
preprocessing), `layout` (index formulas shared by the emitter and the model),
`model` (numpy model of the tensor-core kernels), `tca` (PTX emitter),
`window_plan` / `window_kernel` (the second strategy: row windows split by
non-zeros), `reorder` (row orders that put rows sharing columns in one window:
denser 16 x 8 tiles), `cpu` (x86-64 and AArch64 kernels), `spmm` (the API).
"""

from minijit.sparse.csr import Csr, as_csr
from minijit.sparse.plan import Plan, make_plan
from minijit.sparse.spmm import SpMM, spmm

__all__ = ["Csr", "Plan", "SpMM", "as_csr", "make_plan", "spmm"]
