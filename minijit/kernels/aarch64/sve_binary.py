"""SVE binary primitives, vector-length agnostic: OUT = IN0 op IN1 element-wise.

Column-major M x N matrices, strides in elements (``in0[m + n*ld0]``...). The
kernel

    void f(const T* in0, const T* in1, T* out, int64_t ld0, int64_t ld1, int64_t ldo)

computes ``add``, ``sub``, ``mul``, ``div``, ``min`` or ``max``; ``ld1 = 0``
broadcasts one column of IN1 over all columns. ``min``/``max`` are SVE
``fmin``/``fmax``: a NaN in either input gives NaN, like ``np.minimum`` and
``np.maximum``; for zeros of opposite sign they return -0.0 (min) and +0.0
(max), where numpy returns its second argument.

Per column, up to 4 vectors of M per step, one ``whilelt`` predicate each
(lanes counted with ``cntw``/``cntd`` at run time).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from asm.aarch64 import Assembler, P, mem, x0, x1, x2, x3, x4, x5, x12, x13, x14
from minijit.kernels.aarch64.common import DType, binary_signature, check_choice, check_positive, dtype_info, generator
from minijit.kernels.aarch64.sve_unary import column_sweep

__all__ = ["PTYPES", "generate", "program", "signature"]

PTYPES = ("add", "sub", "mul", "div", "min", "max")
IN0, IN1, OUT, LD0, LD1, LDO = x0, x1, x2, x3, x4, x5
X0, X1, XO = x12, x13, x14  # the three columns at row I (sve_unary.column_sweep keeps I, m, counter in x8..x11)


signature = binary_signature


def _op(a: Assembler, ptype: str, zd: Any, zm: Any) -> None:
    """zd = zd op zm (all lanes; inactive lanes are never stored)."""
    if ptype in ("add", "sub", "mul"):
        getattr(a, "f" + ptype)(zd, zd, zm)
    else:
        getattr(a, {"div": "fdiv", "min": "fmin", "max": "fmax"}[ptype])(zd, P[0].m, zd, zm)


def _step(a: Assembler, t: DType, ptype: str, nv: int) -> None:
    """``nv`` vectors: in0 -> z0.., in1 -> z4.., the op, the result stored from z0.."""
    for v in range(nv):
        t.ld1(a, t.z(v), P[v + 1].z, mem(X0, vl=v))
        t.ld1(a, t.z(4 + v), P[v + 1].z, mem(X1, vl=v))
    for v in range(nv):
        _op(a, ptype, t.z(v), t.z(4 + v))
    for v in range(nv):
        t.st1(a, t.z(v), P[v + 1], mem(XO, vl=v))


def program(m: int, n: int, dtype: str = "fp32", ptype: str = "add") -> Assembler:
    """The binary kernel as an `Assembler` (``code()``, ``listing()``). Raises ValueError."""
    check_positive(None, m=m, n=n)
    check_choice("ptype", ptype, PTYPES, show=str)
    t = dtype_info(dtype)
    a = Assembler(name=f"sve_binary_{ptype}_{dtype}_{m}x{n}")
    for r in (LD0, LD1, LDO):  # strides to bytes
        a.lsl(r, r, t.shift)
    a.ptrue(getattr(P[0], t.es))
    # next column: ld1 = 0 keeps the same column of in1
    column_sweep(a, t, m, n, [(IN0, LD0, X0), (IN1, LD1, X1), (OUT, LDO, XO)], partial(_step, a, t, ptype))
    a.ret()
    return a


generate = generator(
    program, signature, "A callable binary kernel (native on AArch64, else emulated at SVE length ``sve_vl`` bits)."
)
