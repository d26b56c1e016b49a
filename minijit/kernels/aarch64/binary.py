"""AArch64 binary primitives, NEON and SVE: out = in0 op in1, element-wise (column-major, strides in elements).

`NeonBinary` and `SveBinary` give ``program(m, n, dtype, ptype)`` and ``generate(..., sve_vl)``, a
kernel ``void(const T* in0, const T* in1, T* out, int64_t ld0, int64_t ld1, int64_t ldo)``. All
three are M x N (``x[m + n*ld]``); ``ld1 = 0`` (or ``ld0 = 0``) reuses one column for every n: a
bias add. ``ptype``: add, sub, mul, div, min, max. ``fmin``/``fmax`` return NaN when either input
is NaN, as ``np.minimum`` and ``np.maximum`` do; for zeros of opposite sign they return -0.0
(min) and +0.0 (max), where numpy's result depends on its SIMD backend.

Per column an element-wise sweep: NEON 4 q registers from each input a step (post-indexed ldp),
then q/d/s pieces (`pieces.column_sweep`); SVE up to 4 ``whilelt``-predicated vectors a step
(`predicated.column_sweep`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from asm.aarch64 import Assembler, P, mem, x0, x1, x2, x3, x4, x5, x12, x13, x14
from minijit.kernels.aarch64.common import DType, KernelKind, binary_signature, check_args, check_choice
from minijit.kernels.aarch64.pieces import column_sweep as neon_sweep
from minijit.kernels.aarch64.predicated import column_sweep as sve_sweep

__all__ = ["Binary", "NeonBinary", "SveBinary"]

IN0, IN1, OUT, LD0, LD1, LDO = x0, x1, x2, x3, x4, x5  # arguments (strides -> bytes)


class Binary(KernelKind):
    """One binary kernel being emitted: checks, names and the entry both ISAs share; a subclass
    gives the ISA's sweep."""

    MAX_SIZE: ClassVar[int | None]  # largest m, n (None: any)
    PTYPES: ClassVar[dict[str, str]] = {
        "add": "fadd",
        "sub": "fsub",
        "mul": "fmul",
        "div": "fdiv",
        "min": "fmin",
        "max": "fmax",
    }
    signature = staticmethod(binary_signature)

    def __init__(self, a: Assembler, t: DType, ptype: str) -> None:
        self.a, self.t, self.ptype = a, t, ptype

    @classmethod
    def program(cls, m: int, n: int, dtype: str = "fp32", ptype: str = "add") -> Assembler:
        """The binary kernel as an `Assembler` (``code()``, ``listing()``). Bad arguments raise ValueError."""
        t = check_args(cls.MAX_SIZE, dtype, {}, m=m, n=n)
        check_choice("ptype", ptype, cls.PTYPES)
        a = Assembler(name=cls.name(m, n, dtype, ptype))
        for r in (LD0, LD1, LDO):  # element strides -> bytes
            a.lsl(r, r, t.shift)
        cls(a, t, ptype).sweep(m, n)
        a.ret()
        return a

    @classmethod
    def name(cls, m: int, n: int, dtype: str, ptype: str) -> str:
        return f"{cls.ISA}_binary_{ptype}_{m}x{n}_{dtype}"

    def sweep(self, m: int, n: int) -> None: ...  # every column of out


class NeonBinary(Binary):
    """NEON: the result in place of in0's q registers."""

    ISA = "neon"
    MAX_SIZE = 1 << 20

    def op(self, a: Assembler, t: DType, ins: list[list[int]], width: int) -> list[int]:
        for r0, r1 in zip(ins[0], ins[1], strict=True):  # result in place of in0
            getattr(a, self.PTYPES[self.ptype])(t.vec(r0, width), t.vec(r0, width), t.vec(r1, width))
        return ins[0]

    def sweep(self, m: int, n: int) -> None:
        neon_sweep(self.a, self.t, m, n, [(IN0, LD0), (IN1, LD1)], (OUT, LDO), self.op)


X0, X1, XO = x12, x13, x14  # SVE: the three columns at row I (the sweep keeps I, m, counter in x8..x11)


class SveBinary(Binary):
    """SVE: in0 -> z0.., in1 -> z4.., all lanes operated on (inactive lanes are never stored)."""

    ISA = "sve"
    MAX_SIZE = None

    def sweep(self, m: int, n: int) -> None:
        self.a.ptrue(getattr(P[0], self.t.es))
        # next column: ld1 = 0 keeps the same column of in1
        sve_sweep(self.a, self.t, m, n, [(IN0, LD0, X0), (IN1, LD1, X1), (OUT, LDO, XO)], self.step)

    def step(self, nv: int) -> None:
        """``nv`` vectors: in0 -> z0.., in1 -> z4.., the op, the result stored from z0.."""
        a, t = self.a, self.t
        for v in range(nv):
            t.ld1(a, t.z(v), P[v + 1].z, mem(X0, vl=v))
            t.ld1(a, t.z(4 + v), P[v + 1].z, mem(X1, vl=v))
        for v in range(nv):
            self.op(t.z(v), t.z(4 + v))
        for v in range(nv):
            t.st1(a, t.z(v), P[v + 1], mem(XO, vl=v))

    def op(self, zd: Any, zm: Any) -> None:
        """zd = zd op zm: add, sub and mul unpredicated, div, min and max under p0."""
        mnemonic = self.PTYPES[self.ptype]
        if self.ptype in ("add", "sub", "mul"):
            getattr(self.a, mnemonic)(zd, zd, zm)
        else:
            getattr(self.a, mnemonic)(zd, P[0].m, zd, zm)
