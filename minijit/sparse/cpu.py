"""JIT'd CPU CSR SpMM kernels: ``C = S @ B``, fp32, B and C row-major (K x N, M x N).

Both generators specialise on N and emit one function

    void spmm(const int32_t* indptr, const int32_t* indices, const float* data,
              const float* b, float* c, int64_t rows)

that computes ``rows`` rows starting at ``indptr[0]``'s row (callers pass
views ``indptr[r0:]``, ``c[r0:]``, so threads split rows without more
arguments). Per row, N is covered by column blocks held in accumulator
registers for the row's whole nnz loop: for every non-zero the value is
broadcast and one FMA per accumulator multiplies the B row slice into it;
then the block is stored once. Empty rows store zeros.

* x86-64 (`x86_program`): AVX-512 blocks of up to 24 zmm (384 columns), the
  last vector under opmask k1 (masked FMA with a memory operand: no read past
  a B row); AVX2 blocks of up to 12 ymm, the last vector via ``vmaskmovps``.
* AArch64 (`neon_program`): NEON blocks of up to 16 q registers (v16-v31),
  then the N % 4 tail as a 2- and/or 1-lane piece (``ldr d``/``ldr s``).
"""

from __future__ import annotations

from asm.x86_64 import Assembler as X86Assembler
from asm.x86_64 import dword
from asm.x86_64.registers import r8, r9, r10, r11, rax, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import Frame, Partial, Target, emit_mask_table

__all__ = ["MAX_N", "SIGNATURE", "neon_program", "x86_program", "generate"]

SIGNATURE = (
    "void(const int32_t* indptr, const int32_t* indices, const float* data, const float* b, float* c, int64_t rows)"
)
MAX_N = 1 << 16
X86_BLOCK = {"avx512": 24, "avx2": 12}  # accumulator vectors per column block
NEON_BLOCK = 16


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise ValueError(f"n must be an int in 1..{MAX_N}, got {n!r}")
    return n


def _blocks(n: int, vl: int, per_block: int) -> list[tuple[int, int, int]]:
    """Column blocks ``(first column, vectors, lanes of the last vector)``."""
    out = []
    col = 0
    while col < n:
        cols = min(n - col, per_block * vl)
        nv = -(-cols // vl)
        out.append((col, nv, cols - (nv - 1) * vl))
        col += cols
    return out


def x86_program(n: int, isa: str = "avx512") -> X86Assembler:
    """The x86-64 kernel as an Assembler (``isa`` "avx512" or "avx2")."""
    n = _check_n(n)
    t = Target.of("fp32", isa)
    a = X86Assembler(name=f"spmm_csr_{isa}_n{n}")
    blocks = _blocks(n, t.vl, X86_BLOCK[isa])
    needs_mask = any(last < t.vl for _, _, last in blocks)
    table = a.new_label("mask") if (needs_mask and isa == "avx2") else None
    regs = t.vregs
    bc = regs[X86_BLOCK[isa]]  # broadcast value
    tmp = regs[X86_BLOCK[isa] + 1]  # AVX2: masked B load
    maskv = regs[X86_BLOCK[isa] + 2]  # AVX2: mask vector
    row_bytes = 4 * n
    frame = Frame(saved=[rbx])
    frame.enter(a)
    done = a.new_label("done")
    a.test(r9, r9)
    a.jle(done)
    top = a.label("row")
    a.mov(rax.r32, dword(rdi))  # j = indptr[0]
    a.mov(r10.r32, dword(rdi + 4))  # end = indptr[1]
    for col0, nv, last in blocks:
        part = Partial(t, last, maskreg=maskv, table=table) if last < t.vl else None
        if part is not None:
            part.setup(a, r11)
        acc = regs[:nv]
        for r in acc:
            a.vxorps(r, r, r)
        a.mov(r11, rax)
        store = a.new_label("store")
        a.cmp(r11, r10)
        a.jge(store)
        nz = a.label("nz")
        a.mov(rbx.r32, dword(rsi + r11 * 4))  # column index
        a.imul(rbx, rbx, row_bytes)
        a.add(rbx, rcx)
        a.vbroadcastss(bc, dword(rdx + r11 * 4))
        for u, r in enumerate(acc):
            src = t.vmem(rbx + 4 * col0 + u * t.vbytes)
            if part is not None and u == nv - 1:
                if isa == "avx512":
                    a.vfmadd231ps(r.mask(part.k), bc, src)
                else:
                    part.load(a, tmp, rbx + 4 * col0 + u * t.vbytes)
                    a.vfmadd231ps(r, bc, tmp)
            else:
                a.vfmadd231ps(r, bc, src)
        a.inc(r11)
        a.cmp(r11, r10)
        a.jl(nz)
        a.bind(store)
        for u, r in enumerate(acc):
            dst = r8 + 4 * col0 + u * t.vbytes
            if part is not None and u == nv - 1:
                part.store(a, dst, r)
            else:
                a.vmovups(t.vmem(dst), r)
    a.add(rdi, 4)
    a.add(r8, row_bytes)
    a.dec(r9)
    a.jnz(top)
    a.bind(done)
    frame.leave(a)
    if table is not None:
        emit_mask_table(a, table)
    return a


def neon_program(n: int):
    """The AArch64 NEON kernel as an ``asm.aarch64`` Assembler."""
    from asm.aarch64 import Assembler, V, mem
    from asm.aarch64.registers import w6, w7, w9, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13

    n = _check_n(n)
    a = Assembler(name=f"spmm_csr_neon_n{n}")
    full, tail = divmod(n, 4)
    blocks = []  # (first column, [(width, byte offset)])
    col = 0
    while col < 4 * full:
        nv = min(NEON_BLOCK, full - col // 4)
        blocks.append((col, [(4, 16 * u) for u in range(nv)]))
        col += 4 * nv
    if tail:
        pieces, off = [], 0
        for w in (2, 1):
            if tail & w:
                pieces.append((w, off))
                off += 4 * w
        blocks.append((col, pieces))
    row_bytes = 4 * n
    done = a.new_label("done")
    a.cmp(x5, 0)
    a.b_cond("le", done)
    a.mov_imm(x12, row_bytes)
    top = a.label("row")
    a.ldr(w6, mem(x0))
    a.ldr(w7, mem(x0, 4))
    bc = V[0]

    def vreg(i: int, w: int):
        r = V[16 + i]
        return r.s4 if w == 4 else r.s2

    for col0, pieces in blocks:
        for i in range(len(pieces)):
            r = V[16 + i]
            a.eor(r.b16, r.b16, r.b16)
        a.mov_imm(x13, 4 * col0)
        a.add(x13, x3, x13)  # B + first column of the block
        a.mov(x8, x6)
        store = a.new_label("store")
        a.cmp(x8, x7)
        a.b_cond("ge", store)
        nz = a.label("nz")
        a.ldr(w9, mem(x1, x8, "lsl", 2))
        a.madd(x11, x9, x12, x13)
        a.add(x10, x2, x8, "lsl", 2)
        a.ld1r(bc.s4, mem(x10))
        for i, (w, off) in enumerate(pieces):
            src = V[1 + (i % 4)]
            a.ldr({4: src.Q, 2: src.D, 1: src.S}[w], mem(x11, off))
            a.fmla(vreg(i, w), src.s4 if w == 4 else src.s2, bc.s4 if w == 4 else bc.s2)
        a.add(x8, x8, 1)
        a.cmp(x8, x7)
        a.b_cond("lt", nz)
        a.bind(store)
        a.mov_imm(x10, 4 * col0)
        a.add(x10, x4, x10)
        for i, (w, off) in enumerate(pieces):
            r = V[16 + i]
            a.str({4: r.Q, 2: r.D, 1: r.S}[w], mem(x10, off))
    a.add(x0, x0, 4)
    a.add(x4, x4, x12)
    a.sub(x5, x5, 1)
    a.cbnz(x5, top)
    a.bind(done)
    a.ret()
    return a


def generate(n: int, isa: str):
    """A callable kernel for ``isa``: "avx512"/"avx2" (native x86-64) or "neon" (AArch64, native or emulated)."""
    from minijit.runtime import load

    if isa == "neon":
        prog = neon_program(n)
        return load(prog.code(), SIGNATURE, isa="aarch64", name=f"spmm_neon_n{n}", listing=prog.listing())
    prog = x86_program(n, isa)
    return load(prog.code(), SIGNATURE, isa="x86_64", name=f"spmm_{isa}_n{n}", listing=prog.listing())
