"""x86-64 binary primitives: ``out = in0 op in1`` element-wise (column-major, strides in elements).

``generate(m, n, dtype, ptype, isa)`` returns a Kernel
``void(const T* in0, const T* in1, T* out, int64_t ld0, int64_t ld1, int64_t ldo)``
over M x N matrices (``in0[m + n*ld0]`` ...). ``ld1 = 0`` broadcasts one
column of in1 over all columns (a bias add).

ptype: "add", "sub", "mul", "div", "min", "max". min/max equal
``np.minimum``/``np.maximum`` bit for bit: ``vmin/vmax(x0, x1)`` already
returns ``x1`` when ``x1`` is NaN or the two compare equal (as numpy does for
+-0); lanes where ``x0`` is NaN are then replaced by ``x0`` (compare
unordered + masked move on AVX-512, vblendv on AVX2).

Each column is covered by vectors: groups of four in a loop, single
vectors, then one masked partial vector.
"""

from __future__ import annotations

from asm.x86_64 import Assembler
from asm.x86_64.registers import k2, r8, r9, r10, r11, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import (
    LOG2,
    Frame,
    Partial,
    Target,
    build,
    check_choice,
    check_size,
    counted_loop,
    emit_column,
)
from minijit.runtime.kernel import Kernel

__all__ = ["generate", "PTYPES"]

PTYPES = ("add", "sub", "mul", "div", "min", "max")
MAX_SIZE = 1 << 16
UNORD_Q = 3


def signature(ctype: str) -> str:
    return f"void(const {ctype}* in0, const {ctype}* in1, {ctype}* out, int64_t ld0, int64_t ld1, int64_t ldo)"


def generate(m: int, n: int, dtype: str = "fp32", ptype: str = "add", isa: str = "avx512") -> Kernel:
    """Generate the binary kernel (see the module docstring). Bad arguments raise ValueError."""
    check_size("m", m, 1, MAX_SIZE)
    check_size("n", n, 1, MAX_SIZE)
    ptype = check_choice("ptype", ptype, PTYPES)
    t = Target.of(dtype, isa)
    a = Assembler(name="binary")
    _emit(a, t, m, n, ptype)
    return build(a, signature(t.ctype), f"binary_{ptype}_{dtype}_{isa}_{m}x{n}")


def _emit(a: Assembler, t: Target, m: int, n: int, ptype: str) -> None:
    ld0, ld1, ldo = rcx, r8, r9
    p0, p1, po = rax, r10, r11
    regs = t.vregs
    part = Partial.column_tail(a, t, m, maskreg=regs[15])
    frame = Frame(saved=[rbx, rbp])
    frame.enter(a)
    for r in (ld0, ld1, ldo):
        a.shl(r, LOG2[t.es])
    if part is not None:
        part.setup(a, rbx)
    vmov = getattr(a, t.v("vmovu"))

    def vector(u: int, disp: int, p: Partial | None) -> None:
        x0, x1, sel = regs[3 * u], regs[3 * u + 1], regs[3 * u + 2]
        for x, ptr_ in ((x0, p0), (x1, p1)):
            if p is not None:
                p.load(a, x, ptr_ + disp)
            else:
                vmov(x, t.vmem(ptr_ + disp))
        if ptype in ("min", "max"):
            # sel = vmin/vmax(x0, x1); where x0 is NaN: sel = x0
            getattr(a, t.v("v" + ptype))(sel, x0, x1)
            if t.isa == "avx512":
                getattr(a, t.v("vcmp"))(k2, x0, x0, UNORD_Q)
                getattr(a, t.v("vmova"))(sel.mask(k2), x0)
            else:
                getattr(a, t.v("vcmp"))(x1, x0, x0, UNORD_Q)
                getattr(a, t.v("vblendv"))(sel, sel, x0, x1)
            out = sel
        else:
            getattr(a, t.v("v" + ptype))(x0, x0, x1)
            out = x0
        if p is not None:
            p.store(a, po + disp, out)
        else:
            vmov(t.vmem(po + disp), out)

    def column() -> None:
        a.mov(p0, rdi)
        a.mov(p1, rsi)
        a.mov(po, rdx)
        emit_column(a, t, m, [p0, p1, po], rbp, vector, part)
        a.add(rdi, ld0)
        a.add(rsi, ld1)
        a.add(rdx, ldo)

    counted_loop(a, rbx, n, column, "n")
    frame.leave(a)
    if part is not None:
        part.emit_data(a)
