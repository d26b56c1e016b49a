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

from typing import Any

from asm.aarch64 import Assembler, P, mem, x0, x1, x2, x3, x4, x5, x8, x9, x10, x11, x12, x13, x14
from minijit.kernels.aarch64.sve_brgemm import _dtype, _positive, _Type, max_vectors

__all__ = ["PTYPES", "generate", "program", "signature"]

PTYPES = ("add", "sub", "mul", "div", "min", "max")
IN0, IN1, OUT, LD0, LD1, LDO = x0, x1, x2, x3, x4, x5
I, M_REG, COUNT, TMP = x8, x9, x10, x11  # row offset (elements), m, column counter, scratch
X0, X1, XO = x12, x13, x14  # the three columns at row I


def signature(dtype: str = "fp32") -> str:
    """The C signature of a binary kernel of ``dtype``."""
    t = _dtype(dtype).ctype
    return f"void(const {t}* in0, const {t}* in1, {t}* out, int64_t ld0, int64_t ld1, int64_t ldo)"


def _op(a: Assembler, ptype: str, zd: Any, zm: Any) -> None:
    """zd = zd op zm (all lanes; inactive lanes are never stored)."""
    if ptype in ("add", "sub", "mul"):
        getattr(a, "f" + ptype)(zd, zd, zm)
    else:
        getattr(a, {"div": "fdiv", "min": "fmin", "max": "fmax"}[ptype])(zd, P[0].m, zd, zm)


def program(m: int, n: int, dtype: str = "fp32", ptype: str = "add") -> Assembler:
    """The binary kernel as an `Assembler` (``code()``, ``listing()``). Raises ValueError."""
    _positive(m=m, n=n)
    if ptype not in PTYPES:
        raise ValueError(f"ptype must be one of {', '.join(PTYPES)}, got {ptype!r}")
    t: _Type = _dtype(dtype)
    nv = max_vectors(m, t)  # vectors per step
    preds = [getattr(P[v + 1], t.es) for v in range(nv)]
    a = Assembler(name=f"sve_binary_{ptype}_{dtype}_{m}x{n}")
    for r in (LD0, LD1, LDO):  # strides to bytes
        a.lsl(r, r, t.shift)
    a.ptrue(getattr(P[0], t.es))
    a.mov(M_REG, m)
    a.mov(COUNT, n)
    col = a.label("col")
    a.mov(I, 0)
    row = a.label("row")
    end = a.new_label("col_end")
    # predicates of the nv vectors at I; none active: column done
    a.whilelt(preds[0], I, M_REG)
    a.b_none(end)
    for v in range(1, nv):
        if v == 1:
            a.mov(TMP, I)
        t.inc(a, TMP)
        a.whilelt(preds[v], TMP, M_REG)
    a.add(X0, IN0, I, "lsl", t.shift)
    a.add(X1, IN1, I, "lsl", t.shift)
    a.add(XO, OUT, I, "lsl", t.shift)
    for v in range(nv):  # in0 -> z0.., in1 -> z4..
        t.ld1(a, t.z(v), P[v + 1].z, mem(X0, vl=v))
        t.ld1(a, t.z(4 + v), P[v + 1].z, mem(X1, vl=v))
    for v in range(nv):
        _op(a, ptype, t.z(v), t.z(4 + v))
    for v in range(nv):
        t.st1(a, t.z(v), P[v + 1], mem(XO, vl=v))
    t.inc(a, I, nv)
    a.b(row)
    a.bind(end)
    a.add(IN0, IN0, LD0)  # next column (ld1 = 0: the same column of in1)
    a.add(IN1, IN1, LD1)
    a.add(OUT, OUT, LDO)
    a.subs(COUNT, COUNT, 1)
    a.b_ne(col)
    a.ret()
    return a


def generate(m: int, n: int, dtype: str = "fp32", ptype: str = "add", sve_vl: int = 128):
    """A callable binary kernel (native on AArch64, else emulated at SVE length ``sve_vl`` bits)."""
    from minijit.runtime import load

    a = program(m, n, dtype, ptype)
    return load(a.code(), signature(dtype), isa="aarch64", name=a.name, listing=a.listing(), sve_vl=sve_vl)
