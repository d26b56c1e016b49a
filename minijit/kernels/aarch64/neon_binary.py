"""NEON binary primitives: out = in0 op in1, element-wise (column-major, strides in elements).

    void f(const T* in0, const T* in1, T* out, int64_t ld0, int64_t ld1, int64_t ldo)

All three are M x N (``x[m + n*ld]``). ``ld1 = 0`` (or ``ld0 = 0``) reuses one
column for every n: a bias add. ``ptype``: add, sub, mul, div, min, max.
``fmin``/``fmax`` return NaN when either input is NaN, as ``np.minimum`` and
``np.maximum`` do (for the tie -0.0 vs +0.0 numpy's result depends on its
SIMD backend; here fmin gives -0.0 and fmax +0.0).

Per column: a loop of 4 q registers from each input (post-indexed ldp), the
op, 4 q registers stored; then the rest of the column as q/d/s pieces
(`neon_unary.column_sweep`).
"""

from __future__ import annotations

from asm.aarch64 import Assembler, x0, x1, x2, x3, x4, x5
from minijit.kernels.aarch64.common import DType, binary_signature, check_choice, check_positive, dtype_info, generator
from minijit.kernels.aarch64.neon_unary import Op, column_sweep

__all__ = ["PTYPES", "generate", "program", "signature"]

PTYPES = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "min": "fmin", "max": "fmax"}


signature = binary_signature


def _binary_op(mnemonic: str) -> Op:
    def op(a: Assembler, t: DType, ins: list[list[int]], width: int) -> list[int]:
        for r0, r1 in zip(ins[0], ins[1], strict=True):  # result in place of in0
            getattr(a, mnemonic)(t.vec(r0, width), t.vec(r0, width), t.vec(r1, width))
        return ins[0]

    return op


def program(m: int, n: int, dtype: str = "fp32", ptype: str = "add") -> Assembler:
    """The binary kernel as an `Assembler` (no callee-saved registers are used)."""
    check_positive(m=m, n=n)
    t = dtype_info(dtype)
    check_choice("ptype", ptype, PTYPES)
    a = Assembler(name=f"neon_binary_{ptype}")
    for r in (x3, x4, x5):  # element strides -> bytes
        a.lsl(r, r, t.shift)
    column_sweep(a, t, m, n, [(x0, x3), (x1, x4)], (x2, x5), _binary_op(PTYPES[ptype]))
    a.ret()
    return a


def _name(m: int, n: int, dtype: str, ptype: str) -> str:
    return f"neon_binary_{ptype}_{m}x{n}_{dtype}"


generate = generator(
    program, signature, "JIT a binary kernel; returns the callable from `minijit.runtime.load`.", _name
)
