"""Helpers shared by the AArch64 NEON and SVE generators.

Data type table, argument registers, parameter checks, and the AAPCS64 frame:
`prologue` saves the callee-saved registers a kernel uses (x19-x28, and the
low 64 bits d8-d15 of v8-v15), `epilogue` restores them and returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from asm.aarch64 import Assembler, X, mem, sp
from asm.aarch64.registers import ScalarReg, VecReg, XReg

__all__ = [
    "ARGS",
    "CALLEE_SAVED_V",
    "CALLEE_SAVED_X",
    "DTYPES",
    "DType",
    "Frame",
    "check_choice",
    "check_positive",
    "dtype_info",
    "epilogue",
    "prologue",
]

ARGS: tuple[XReg, ...] = tuple(X[i] for i in range(8))  # x0..x7: integer/pointer arguments
CALLEE_SAVED_X: tuple[int, ...] = tuple(range(19, 29))  # x19..x28
CALLEE_SAVED_V: tuple[int, ...] = tuple(range(8, 16))  # v8..v15 (low 64 bits: d8..d15)


@dataclass(frozen=True)
class DType:
    """One element type: C name, element size letter, bytes, lanes per 128-bit vector."""

    name: str
    ctype: str
    es: str  # "s" or "d"
    size: int  # bytes
    np: type

    @property
    def lanes(self) -> int:
        """Elements per 128-bit NEON vector."""
        return 16 // self.size

    @property
    def shift(self) -> int:
        """log2 of the element size (elements -> bytes)."""
        return self.size.bit_length() - 1

    def vec(self, idx: int, width: int | None = None) -> VecReg:
        """``v<idx>`` arranged for ``width`` elements: fp32 widths 1-2 give ``.2s``, else the full vector."""
        lanes = 2 if self.size == 4 and width is not None and width <= 2 else self.lanes
        return VecReg(idx, self.es, lanes)

    def scalar(self, idx: int) -> ScalarReg:
        """Scalar view ``s<idx>``/``d<idx>``."""
        return ScalarReg(idx, self.es)


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", "float", "s", 4, np.float32),
    "fp64": DType("fp64", "double", "d", 8, np.float64),
}


def dtype_info(dtype: str) -> DType:
    """The `DType` of ``dtype`` ("fp32"/"fp64"); ValueError otherwise."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def check_positive(limit: int = 1 << 20, **dims: int) -> None:
    """Every named size is an int in 1..limit (ValueError naming the first bad one)."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ValueError(f"{name} must be an integer in 1..{limit}, got {value!r}")


def check_choice(name: str, value: object, choices: Iterable[object]) -> None:
    """``value`` is one of ``choices`` (ValueError naming ``name`` otherwise)."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


@dataclass(frozen=True)
class Frame:
    """Callee-saved registers stored by `prologue`, and the frame size in bytes."""

    xregs: tuple[int, ...]
    vregs: tuple[int, ...]

    @property
    def size(self) -> int:
        n = len(self.xregs) + len(self.vregs)
        return 8 * (n + (n & 1))  # 16-byte aligned


def _slots(frame: Frame) -> list[tuple[list, int]]:
    """Register groups (pairs or singles, X and D apart) with their byte offsets in the frame."""
    out, slot = [], 0
    for regs in ([X[r] for r in frame.xregs], [ScalarReg(r, "d") for r in frame.vregs]):
        for i in range(0, len(regs), 2):
            group = regs[i : i + 2]
            out.append((group, 8 * slot))
            slot += len(group)
    return out


def prologue(a: Assembler, xregs: Iterable[int] = (), vregs: Iterable[int] = ()) -> Frame:
    """Save the callee-saved registers among ``xregs``/``vregs`` (register numbers) on the stack."""
    frame = Frame(
        tuple(sorted({r for r in xregs if r in CALLEE_SAVED_X})),
        tuple(sorted({r for r in vregs if r in CALLEE_SAVED_V})),
    )
    if frame.size:
        a.sub(sp, sp, frame.size)
    for group, off in _slots(frame):
        if len(group) == 2:
            a.stp(group[0], group[1], mem(sp, off))
        else:
            a.str(group[0], mem(sp, off))
    return frame


def epilogue(a: Assembler, frame: Frame) -> None:
    """Restore what `prologue` saved and return."""
    for group, off in _slots(frame):
        if len(group) == 2:
            a.ldp(group[0], group[1], mem(sp, off))
        else:
            a.ldr(group[0], mem(sp, off))
    if frame.size:
        a.add(sp, sp, frame.size)
    a.ret()
