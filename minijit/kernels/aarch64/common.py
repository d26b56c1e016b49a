"""Helpers shared by the AArch64 NEON and SVE generators.

Data type table (NEON and SVE views of fp32/fp64), argument registers,
parameter checks, the kernels' C signatures, the AAPCS64 frame (`prologue`
saves the callee-saved registers a kernel uses: x19-x28, and the low 64 bits
d8-d15 of v8-v15; `epilogue` restores them and returns), and `generator`, which
makes the ``generate`` that loads a kernel with `minijit.runtime.load`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from asm.aarch64 import Assembler, X, Z, mem, post, pre, sp
from asm.aarch64.registers import ScalarReg, VecReg, XReg, ZVec

__all__ = [
    "ARGS",
    "CALLEE_SAVED_V",
    "CALLEE_SAVED_X",
    "DTYPES",
    "DType",
    "Frame",
    "binary_signature",
    "brgemm_signature",
    "check_bools",
    "check_choice",
    "check_positive",
    "dtype_info",
    "epilogue",
    "generator",
    "prologue",
    "unary_signature",
]

ARGS: tuple[XReg, ...] = tuple(X[i] for i in range(8))  # x0..x7: integer/pointer arguments
CALLEE_SAVED_X: tuple[int, ...] = tuple(range(19, 29))  # x19..x28
CALLEE_SAVED_V: tuple[int, ...] = tuple(range(8, 16))  # v8..v15 (low 64 bits: d8..d15)


@dataclass(frozen=True)
class DType:
    """One element type: C name, element size letter, bytes, lanes per 128-bit vector; SVE forms."""

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

    # -- SVE ---------------------------------------------------------------------------
    @property
    def suffix(self) -> str:
        """Memory element suffix of the SVE loads/stores and counts (ld1w/ld1d, cntw/cntd)."""
        return "w" if self.size == 4 else "d"

    def z(self, idx: int) -> ZVec:
        """``z<idx>`` with this element size."""
        return getattr(Z[idx], self.es)

    def ld1(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "ld1" + self.suffix)(*ops)

    def st1(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "st1" + self.suffix)(*ops)

    def ld1r(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "ld1r" + self.suffix)(*ops)

    def cnt(self, a: Assembler, rd: XReg) -> None:
        getattr(a, "cnt" + self.suffix)(rd)

    def inc(self, a: Assembler, rd: XReg, mul: int = 1) -> None:
        getattr(a, "inc" + self.suffix)(rd, "all", mul)


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", "float", "s", 4, np.float32),
    "fp64": DType("fp64", "double", "d", 8, np.float64),
}


def dtype_info(dtype: str) -> DType:
    """The `DType` of ``dtype`` ("fp32"/"fp64"); ValueError otherwise."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def check_positive(limit: int | None = 1 << 20, **dims: object) -> None:
    """Every named size is an int in 1..limit, or >= 1 without a limit (ValueError naming the first bad one)."""
    wanted = "an int >= 1" if limit is None else f"an integer in 1..{limit}"
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (limit is not None and value > limit):
            raise ValueError(f"{name} must be {wanted}, got {value!r}")


def check_choice(name: str, value: object, choices: Iterable[object], show: Callable[[object], str] = repr) -> None:
    """``value`` is one of ``choices`` (ValueError naming ``name`` and the choices, each as ``show`` gives it)."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(show, choices))}, got {value!r}")


def check_bools(**flags: object) -> None:
    """Every named flag is a bool (ValueError naming the first that is not)."""
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")


# -- C signatures ------------------------------------------------------------------------
def brgemm_signature(dtype: str = "fp32") -> str:
    """The C signature of a BRGEMM kernel of ``dtype``."""
    t = dtype_info(dtype).ctype
    return (
        f"void(const {t}* a, const {t}* b, {t}* c, int64_t lda, int64_t ldb, int64_t ldc,"
        " int64_t br_stride_a, int64_t br_stride_b)"
    )


def unary_signature(dtype: str = "fp32") -> str:
    """The C signature of a unary kernel of ``dtype``."""
    t = dtype_info(dtype).ctype
    return f"void(const {t}* a, {t}* b, int64_t lda, int64_t ldb)"


def binary_signature(dtype: str = "fp32") -> str:
    """The C signature of a binary kernel of ``dtype``."""
    t = dtype_info(dtype).ctype
    return f"void(const {t}* in0, const {t}* in1, {t}* out, int64_t ld0, int64_t ld1, int64_t ldo)"


def generator(
    program: Callable[..., Any],
    signature: Callable[[str], str],
    doc: str,
    name: Callable[..., str] | None = None,
    sve_vl_before: str | None = None,
) -> Callable[..., Any]:
    """A ``generate`` function for ``program``: JIT its kernel with `minijit.runtime.load`.

    ``generate`` takes the parameters of ``program``, with ``sve_vl: int = 128``
    added before the parameter ``sve_vl_before`` (else last), and returns the
    callable kernel: native on an AArch64 host, else emulated at SVE length
    ``sve_vl`` bits. ``program`` returns an `Assembler` (or a tuple starting
    with one) and has a ``dtype`` parameter, which picks the C ``signature``.
    The kernel is named ``name(**arguments)`` (all of ``program``'s, defaults
    filled in), or after the Assembler.
    """
    sig = inspect.signature(program)
    params = list(sig.parameters.values())
    at = [p.name for p in params].index(sve_vl_before) if sve_vl_before else len(params)
    params.insert(
        at, inspect.Parameter("sve_vl", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=128, annotation="int")
    )
    gen_sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)

    def generate(*args: Any, **kwargs: Any) -> Any:
        from minijit.runtime import load

        bound = gen_sig.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        sve_vl = arguments.pop("sve_vl")
        a = program(**arguments)
        if isinstance(a, tuple):
            a = a[0]
        kernel_name = name(**arguments) if name else a.name
        c_sig = signature(arguments["dtype"])
        return load(a.code(), c_sig, isa="aarch64", name=kernel_name, listing=a.listing(), sve_vl=sve_vl)

    generate.__signature__ = gen_sig  # type: ignore[attr-defined]
    generate.__doc__ = doc
    generate.__module__ = program.__module__
    return generate


@dataclass(frozen=True)
class Frame:
    """Callee-saved registers stored by `prologue`, and the frame size in bytes.

    ``writeback``: the first store allocates the frame (pre-indexed) and the
    last load frees it (post-indexed), instead of a separate ``sub``/``add`` of sp.
    """

    xregs: tuple[int, ...]
    vregs: tuple[int, ...]
    writeback: bool = False

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


def prologue(a: Assembler, xregs: Iterable[int] = (), vregs: Iterable[int] = (), writeback: bool = False) -> Frame:
    """Save the callee-saved registers among ``xregs``/``vregs`` (register numbers) on the stack.

    ``writeback``: allocate the frame with the first store (see `Frame`).
    """
    frame = Frame(
        tuple(sorted({r for r in xregs if r in CALLEE_SAVED_X})),
        tuple(sorted({r for r in vregs if r in CALLEE_SAVED_V})),
        writeback,
    )
    if frame.size and not writeback:
        a.sub(sp, sp, frame.size)
    for group, off in _slots(frame):
        addr = pre(sp, -frame.size) if writeback and off == 0 else mem(sp, off)
        if len(group) == 2:
            a.stp(group[0], group[1], addr)
        else:
            a.str(group[0], addr)
    return frame


def epilogue(a: Assembler, frame: Frame) -> None:
    """Restore what `prologue` saved (with ``writeback``: last slot first) and return."""
    slots = _slots(frame)
    for group, off in reversed(slots) if frame.writeback else slots:
        addr = post(sp, frame.size) if frame.writeback and off == 0 else mem(sp, off)
        if len(group) == 2:
            a.ldp(group[0], group[1], addr)
        else:
            a.ldr(group[0], addr)
    if frame.size and not frame.writeback:
        a.add(sp, sp, frame.size)
    a.ret()
