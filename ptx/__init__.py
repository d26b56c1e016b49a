"""PTX as text: module/kernel builder with typed virtual registers, mma fragment
layouts and a warp model, ptxas -> cubin, and the CUDA driver (load, launch, memory).

This layer knows nothing about tensors. ``ptx.driver`` imports cuda-bindings
lazily; everything else needs only the standard library and numpy.
"""

from . import mma, toolchain, types
from .builder import Addr, Kernel, Label, Module, NotPred, Param, Reg, Shared, Special, addr, sreg
from .errors import CudaError, PtxError, PtxTypeError, PtxVersionError
from .toolchain import Cubin, FunctionInfo, compile, find_ptxas

__all__ = [
    "Addr",
    "CudaError",
    "Cubin",
    "FunctionInfo",
    "Kernel",
    "Label",
    "Module",
    "NotPred",
    "Param",
    "PtxError",
    "PtxTypeError",
    "PtxVersionError",
    "Reg",
    "Shared",
    "Special",
    "addr",
    "compile",
    "find_ptxas",
    "mma",
    "sreg",
    "toolchain",
    "types",
]
