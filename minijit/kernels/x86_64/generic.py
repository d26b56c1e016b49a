"""The generic-tier GEMM kernel on x86-64 (AVX2 and AVX-512): every size, stride and the batch
count are run-time arguments (`minijit.kernels.generic`: ``f(a, b, c, args)``), so one kernel per
(ISA, dtype, epilogue) serves every shape.

Blocking: the full register block of the BRGEMM (`brgemm_plan.NB`: 2 vectors x 6 columns on AVX2,
4 x 6 on AVX-512). Columns run in blocks of 6, the last 1-5 columns as one narrower block; rows
in blocks of the full vectors, the last 1..vl*mv rows as 1..mv vectors whose last one is masked
(AVX2: ``vmaskmov`` with a mask from a table, AVX-512: ``k1`` from a table of opmasks), so no
lane outside M is read or written. Each block: C in (or zeros), K steps of A vectors x broadcast
B elements (one FMA per element and step, in K order), the epilogue (`minijit.kernels.epilogue`,
elementwise: relu) on the accumulators, C out.
"""

from __future__ import annotations

from asm.x86_64 import Assembler, Gpr, Label, Vec, k1, ptr, qword, rip, word
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels import generic as spec
from minijit.kernels.epilogue import Epilogue
from minijit.kernels.x86_64.brgemm_plan import NB
from minijit.kernels.x86_64.common import (
    CALLEE_SAVED,
    LOG2,
    EpilogueCode,
    Frame,
    Target,
    build,
    check_epilogue,
    emit_mask_table,
)

__all__ = ["generate", "name", "program"]

# general purpose registers
A_T, B_T, C_T, ARGS = rdi, rsi, rdx, rcx  # batch bases of A, B, C; the args array
LDA, LDBK, LDBN, LDC = r8, r9, r10, r11  # strides in bytes: A column, B along K, B along N, C column
PA, PB, PB3, KC = r12, r13, r14, r15  # A walk, B walk (columns 0-2 and 3-5), K counter
A_M, C_M = rbx, rbp  # A and C at the current row block
B_COL = (PB, (PB, LDBN, 1), (PB, LDBN, 2), PB3, (PB3, LDBN, 1), (PB3, LDBN, 2))  # B column j


def _arg(name: str):
    return ARGS + spec.OFFSET[name]


class GenericGemm:
    """One generic kernel being emitted: its register block, frame, labels and epilogue."""

    def __init__(self, a: Assembler, t: Target, epilogue: Epilogue = Epilogue.NONE) -> None:
        self.a, self.t, self.epilogue = a, t, epilogue
        self.mv = max(NB[t.isa])  # vectors of M in the full block
        self.nb = NB[t.isa][self.mv]  # columns of N in the full block
        self.mb = self.mv * t.vl  # rows of the full block
        regs = t.vregs
        self.acc = [[regs[i * self.nb + j] for j in range(self.nb)] for i in range(self.mv)]
        base = self.mv * self.nb
        self.va = regs[base : base + self.mv]
        self.vb = regs[base + self.mv : base + self.mv + 2]
        # AVX2's mask vector takes the second B register in masked blocks
        self.maskreg: Vec | None = regs[base + self.mv + 1] if t.isa == "avx2" else None
        self.frame = Frame(list(CALLEE_SAVED))
        self.slots = {s: self.frame.slot(s) for s in ("batch", "b_n", "c_n", "cols", "rows")}
        self.mask_table: Label = a.new_label("masks")

    # -- stages ----------------------------------------------------------------------------------
    def emit(self) -> None:
        a, t, s = self.a, self.t, self.slots
        self.frame.enter(a)
        self.strides()
        done = a.new_label("done")
        a.mov(rax, qword(_arg("batch")))
        a.test(rax, rax)
        a.jz(done)
        a.mov(s["batch"], rax)
        top = a.label("batch")
        self.columns()
        # next batch: A, B, C move by their batch strides
        for reg, name in ((A_T, "batch_a"), (B_T, "batch_b"), (C_T, "batch_c")):
            a.mov(rax, qword(_arg(name)))
            a.shl(rax, LOG2[t.es])
            a.add(reg, rax)
        a.dec(s["batch"])
        a.jnz(top)
        a.bind(done)
        self.frame.leave(a)
        self.data()

    def strides(self) -> None:
        """The four strides, elements -> bytes."""
        for reg, name in ((LDA, "lda"), (LDBK, "ldb_k"), (LDBN, "ldb_n"), (LDC, "ldc")):
            self.a.mov(reg, qword(_arg(name)))
            self.a.shl(reg, LOG2[self.t.es])

    def columns(self) -> None:
        """Column blocks of `nb` while they last, then one block of the 1..nb-1 columns left."""
        a, s = self.a, self.slots
        a.mov(s["b_n"], B_T)
        a.mov(s["c_n"], C_T)
        a.mov(rax, qword(_arg("n")))
        a.mov(s["cols"], rax)
        top, tail, end = a.new_label("cols"), a.new_label("col_tail"), a.new_label("cols_done")
        a.bind(top)
        a.mov(rax, s["cols"])
        a.cmp(rax, self.nb)
        a.jl(tail)
        self.rows(self.nb)
        # next column block: B and C move by nb columns
        a.mov(rax, LDBN)
        a.imul(rax, rax, self.nb)
        a.add(s["b_n"], rax)
        a.mov(rax, LDC)
        a.imul(rax, rax, self.nb)
        a.add(s["c_n"], rax)
        a.sub(s["cols"], self.nb)
        a.jmp(top)
        a.bind(tail)
        widths = {w: a.new_label(f"cols{w}") for w in range(1, self.nb)}
        for w, label in widths.items():
            a.cmp(rax, w)
            a.je(label)
        a.jmp(end)
        for w, label in widths.items():
            a.bind(label)
            self.rows(w)
            a.jmp(end)
        a.bind(end)

    def rows(self, w: int) -> None:
        """The row blocks of one column block of ``w`` columns: full blocks, then the 1..mb-1 rows
        left as 1..mv vectors (the last masked)."""
        a, t, s = self.a, self.t, self.slots
        a.mov(A_M, A_T)
        a.mov(C_M, s["c_n"])
        a.mov(rax, qword(_arg("m")))
        a.mov(s["rows"], rax)
        top, tail, end = a.new_label(f"rows{w}"), a.new_label(f"row_tail{w}"), a.new_label(f"rows{w}_done")
        a.bind(top)
        a.mov(rax, s["rows"])
        a.cmp(rax, self.mb)
        a.jl(tail)
        self.block(self.mv, w, masked=False)
        a.add(A_M, self.mb * t.es)
        a.add(C_M, self.mb * t.es)
        a.sub(s["rows"], self.mb)
        a.jmp(top)
        a.bind(tail)
        a.test(rax, rax)
        a.jz(end)
        vectors = {v: a.new_label(f"rows{w}_v{v}") for v in range(1, self.mv + 1)}
        for v, label in vectors.items():  # rows <= v * vl: v vectors
            if v < self.mv:
                a.cmp(rax, v * t.vl)
                a.jle(label)
            else:
                a.jmp(label)
        for v, label in vectors.items():
            a.bind(label)
            self.mask(v)
            self.block(v, w, masked=True)
            a.jmp(end)
        a.bind(end)

    def mask(self, v: int) -> None:
        """The mask of the last of ``v`` vectors for the ``rows`` (in rax) left: its lane count
        ``rows - (v-1)*vl`` (1..vl) picks a table entry."""
        a, t = self.a, self.t
        a.mov(KC, rax)
        if v > 1:
            a.sub(KC, (v - 1) * t.vl)
        a.lea(PA, ptr(rip + self.mask_table))
        if t.isa == "avx512":  # 16-bit opmasks (1 << count) - 1
            a.kmovw(k1, word(PA + KC * 2))
        else:  # ymm ones then zeros: table + (vl - count) * es
            a.neg(KC)
            a.add(KC, t.vl)
            a.vmovups(self.maskreg, t.vmem(PA + KC * t.es))

    def block(self, v: int, w: int, masked: bool) -> None:
        """One ``v`` vectors x ``w`` columns block at A_M, C_M: C in, K steps, the epilogue, C out."""
        a, t = self.a, self.t
        zero, ksteps, out = a.new_label("zero"), a.new_label("k"), a.new_label("c_out")
        acc = [row[:w] for row in self.acc[:v]]
        a.cmp(qword(_arg("accumulate")), 0)
        a.je(zero)
        self.c_columns(v, w, masked, lambda vec, mem, last: self.load(vec, mem, last))
        a.jmp(ksteps)
        a.bind(zero)
        for row in acc:
            for x in row:
                getattr(a, t.v("vxor"))(x, x, x)
        a.bind(ksteps)
        a.mov(PA, A_M)
        a.mov(PB, self.slots["b_n"])
        a.lea(PB3, ptr(LDBN + LDBN * 2))
        a.add(PB3, PB)
        a.mov(KC, qword(_arg("k")))
        a.test(KC, KC)
        a.jz(out)
        top = a.label("kk")
        for i in range(v):
            self.load(self.va[i], t.vmem(PA + i * t.vbytes), masked and i == v - 1)
        bregs = self.vb[:1] if masked and self.maskreg is not None else self.vb
        for j in range(w):
            b = bregs[j % len(bregs)]
            getattr(a, t.s("vbroadcast"))(b, t.smem(_addr(B_COL[j])))
            for i in range(v):
                getattr(a, t.v("vfmadd231"))(acc[i][j], self.va[i], b)
        a.add(PA, LDA)
        a.add(PB, LDBK)
        a.add(PB3, LDBK)
        a.dec(KC)
        a.jnz(top)
        a.bind(out)
        # the epilogue on the accumulators, column by column (the first A register is free now)
        EpilogueCode(a, t, self.epilogue, self.va[0]).emit([acc[i][j] for j in range(w) for i in range(v)])
        self.c_columns(v, w, masked, lambda vec, mem, last: self.store(mem, vec, last))

    def c_columns(self, v: int, w: int, masked: bool, each) -> None:
        """``each(acc, memory, masked_lane)`` over the block's C vectors, column by column."""
        a, t = self.a, self.t
        a.mov(rax, C_M)
        for j in range(w):
            for i in range(v):
                each(self.acc[i][j], t.vmem(rax + i * t.vbytes), masked and i == v - 1)
            if j < w - 1:
                a.add(rax, LDC)

    def load(self, dst: Vec, mem, masked: bool) -> None:
        a, t = self.a, self.t
        if not masked:
            getattr(a, t.v("vmovu"))(dst, mem)
        elif t.isa == "avx512":
            getattr(a, t.v("vmovu"))(dst.maskz(k1), mem)
        else:
            getattr(a, t.v("vmaskmov"))(dst, self.maskreg, mem)

    def store(self, mem, src: Vec, masked: bool) -> None:
        a, t = self.a, self.t
        if not masked:
            getattr(a, t.v("vmovu"))(mem, src)
        elif t.isa == "avx512":
            getattr(a, t.v("vmovu"))(mem.mask(k1), src)
        else:
            getattr(a, t.v("vmaskmov"))(mem, self.maskreg, src)

    def data(self) -> None:
        """The mask table after the code."""
        a = self.a
        if self.t.isa == "avx512":
            a.bind(self.mask_table)
            a.db(b"".join(((1 << c) - 1).to_bytes(2, "little") for c in range(17)))
        else:
            emit_mask_table(a, self.mask_table)


def _addr(spec_: Gpr | tuple):
    if isinstance(spec_, Gpr):
        return spec_
    base, index, scale = spec_
    return base + index * scale


def name(dtype: str, isa: str, epilogue: Epilogue | str | None = None) -> str:
    """The kernel's name: ``generic_gemm_<dtype>_<isa>`` and the epilogue's tag (``_r``: relu)."""
    return f"generic_gemm_{dtype}_{isa}{check_epilogue(epilogue, 'generic GEMM').tag}"


def program(dtype: str, isa: str, epilogue: Epilogue | str | None = None) -> Assembler:
    """The assembled generic GEMM for ``dtype`` ("fp32", "fp64"), ``isa`` ("avx2", "avx512") and
    ``epilogue`` (an elementwise `Epilogue` or its text; None: none)."""
    t = Target.of(dtype, isa)
    ep = check_epilogue(epilogue, "generic GEMM")
    a = Assembler(name="generic_gemm")
    GenericGemm(a, t, ep).emit()
    return a


def generate(dtype: str, isa: str, epilogue: Epilogue | str | None = None):
    """The generic GEMM kernel (`minijit.kernels.generic`) for ``dtype``, ``isa`` and ``epilogue``."""
    t = Target.of(dtype, isa)
    return build(program(dtype, isa, epilogue), spec.signature(t.ctype), name(dtype, isa, epilogue))
