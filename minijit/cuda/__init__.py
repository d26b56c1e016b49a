"""CUDA target: tensor-core GEMM/BRGEMM kernels emitted as PTX (:mod:`minijit.cuda.gemm`),
strided elementwise unary/binary kernels (:mod:`minijit.cuda.elementwise`) and
:class:`CudaTensorOperation` (:mod:`minijit.cuda.operation`), which runs GEMM/BRGEMM and
elementwise tensor operations on an NVIDIA GPU through ``ptx.driver``."""

from minijit.cuda.gemm import GemmKernel, GemmSpec, default_spec, generate, simulate
from minijit.cuda.operation import CudaTensorOperation

__all__ = ["CudaTensorOperation", "GemmKernel", "GemmSpec", "default_spec", "generate", "simulate"]
