"""Input precisions of the TCA-SpMM kernels: what S and B are rounded to before the tensor cores.

All three accumulate in fp32 (C is float32). ``fp16`` and ``bf16`` use ``mma.m16n8k8`` with the
f16/bf16 fragment layout (two 16-bit elements per register); ``tf32`` takes fp32 S and B,
rounds each element with ``cvt.rna.tf32.f32`` in the kernel and uses ``mma.m16n8k8.tf32``
(one element per register). In device memory S's values and B are 2-byte (fp16, bf16 bit
patterns) or 4-byte (fp32) elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptx import mma as M

__all__ = ["PRECISIONS", "Precision", "precision"]


@dataclass(frozen=True)
class Precision:
    """One kernel input precision.

    ``name``: the ``dtype=`` a user passes; ``mma``: the ptx mma type; ``bytes``: bytes per S value
    and B element in device memory; ``device_dtype``: the element type a device B must have
    ("float16", "bfloat16", "float32")."""

    name: str
    mma: str
    bytes: int
    device_dtype: str

    def __post_init__(self) -> None:
        if self.mma not in ("f16", "bf16", "tf32"):
            raise ValueError(f"mma must be f16, bf16 or tf32, got {self.mma!r}")
        if self.bytes != (4 if self.mma == "tf32" else 2):
            raise ValueError(f"{self.mma} elements are {4 if self.mma == 'tf32' else 2} bytes, got {self.bytes}")

    @property
    def shift(self) -> int:
        """log2(bytes)."""
        return self.bytes.bit_length() - 1

    @property
    def smem_type(self) -> str:
        """The PTX bit type of one element in shared memory."""
        return "b16" if self.bytes == 2 else "b32"

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded as the tensor cores see it, as float64 (fp16/bf16: nearest even; tf32: cvt.rna)."""
        x = np.asarray(x, np.float32)
        if self.mma == "tf32":
            return M.round_tf32(x).astype(np.float64)
        return M.quantize(self.mma, x).astype(np.float64)

    def device_array(self, x: np.ndarray) -> np.ndarray:
        """``x`` as the kernel reads it from device memory: float16, bf16 bit patterns (uint16) or
        float32, rounded through float32 as `quantize` rounds (`ptx.mma.encode`)."""
        return np.ascontiguousarray(M.encode(self.mma, x))


PRECISIONS: dict[str, Precision] = {
    "fp16": Precision("fp16", "f16", 2, "float16"),
    "bf16": Precision("bf16", "bf16", 2, "bfloat16"),
    "tf32": Precision("tf32", "tf32", 4, "float32"),
}


def precision(dtype: object) -> Precision:
    """The `Precision` named ``dtype`` ("fp16", "bf16", "tf32"); ValueError naming the choices."""
    if not isinstance(dtype, str) or dtype not in PRECISIONS:
        raise ValueError(f"dtype must be one of {tuple(PRECISIONS)} for the tensor-core kernels, got {dtype!r}")
    return PRECISIONS[dtype]
