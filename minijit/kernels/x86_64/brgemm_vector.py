"""The vector path of the x86-64 BRGEMM (`minijit.kernels.x86_64.brgemm`, ``trans_a`` and
``trans_c`` false): `VectorKernel` emits the loops over M and N blocks (or N outermost, or the BR
loop outside), `Block` one mv x nb register block of C: C in, the next columns' prefetch, the A
and B pointers, BR x K FMAs (K unrolled by `UNROLL`, A copied or read from the copy), the fused
epilogue (`minijit.kernels.epilogue`: relu), C out. Blocking decisions are in `brgemm_plan`."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from asm.x86_64 import Assembler, Gpr, Mem, bcst, dword, ptr, qword, ymmword, zmmword
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.epilogue import Epilogue
from minijit.kernels.x86_64.brgemm_plan import (
    A_NEXT_HINT,
    B_GROUPS,
    UNROLL,
    blocking,
    n_tail,
    next_panel_prefetch,
)
from minijit.kernels.x86_64.common import LOG2, EpilogueCode, Frame, Partial, Target, counted_loop, emit_mask_table
from minijit.kernels.x86_64.muladd import MulAdd

__all__ = ["Block", "VectorKernel"]

# general purpose registers
A_M, B_N, C_N = rdi, rsi, rdx  # A at the M block; B and C at the N block (br = 0)
LDA, LDB, LDC = rcx, r8, r9  # leading dimensions in bytes
LDA3, LDB3 = r10, r11  # 3 * lda, 3 * ldb
PA, KC, BRC = rax, rbx, rbp  # A pointer, K counter, BR counter
PB = (r12, r13, r14, r15)  # B column-group pointers (5 columns each) or the B row pointer (trans_b)
SCR = PB[-1]  # walks the copied A buffer while the first N block fills it (``a_copy``)
A_NEXT = r15  # the next A panel's prefetch pointer (free unless B has 4 column groups, or a_copy)
A_ROWS = (None, LDA, (LDA, 2), LDA3)  # A row k + kk: pa + A_ROWS[kk]
B_OFFS = (None, LDB, (LDB, 2), LDB3, (LDB, 4))  # B column 5g + r: pb[g] + B_OFFS[r] (row kk with trans_b)
assert len(PB) == B_GROUPS


def at(base: Gpr, off: Any, disp: int = 0) -> Any:
    """``base + off + disp``: ``off`` None, a register, or (register, scale)."""
    if off is None:
        return base + disp
    reg, scale = off if isinstance(off, tuple) else (off, 1)
    return base + reg * scale + disp


@lru_cache(maxsize=4096)
def operand(size: Any, base: Gpr, off: Any = None, disp: int = 0) -> Mem:
    """The memory operand ``size(at(base, off, disp))`` (``size``: `ptr`, `bcst`, `dword`, ...),
    built once: a kernel names the same few hundred addresses in every block, and so do the
    kernels of other shapes (memory operands are immutable)."""
    return size(at(base, off, disp))


class VectorKernel:
    """One vector-path kernel being emitted: its blocking, stack frame and loops."""

    def __init__(
        self,
        a: Assembler,
        t: Target,
        m: int,
        n: int,
        k: int,
        br: int,
        trans_b: bool,
        br_outer: bool,
        b_panel: int | None,
        a_panel: int | None,
        zero_c: bool = False,
        epilogue: Epilogue = Epilogue.NONE,
        a_copy: bool = False,
        n_outer: bool = False,
    ) -> None:
        self.a, self.t, self.n, self.k, self.trans_b = a, t, n, k, trans_b
        self.br_outer, self.b_panel, self.a_panel = br_outer, b_panel, a_panel
        self.zero_c, self.epilogue, self.a_copy, self.n_outer = zero_c, epilogue, a_copy, n_outer
        self.es, self.vb = es, vb = t.es, t.vbytes
        self.vsize = zmmword if t.isa == "avx512" else ymmword  # `Target.vmem` / `Target.smem` as `operand` sizes
        self.ssize = dword if es == 4 else qword
        self.br_total, self.br = br, (1 if br_outer else br)  # `br`: BR steps inside one block
        self.blocks = blocks = blocking(m, t.isa, t.dtype, uniform_nb=b_panel is not None or n_outer, a_copy=a_copy)
        self.k_loops, self.k_rem = divmod(k, UNROLL)
        self.k_adv = self.k_loops * UNROLL  # rows the pointers advance per BR step (the remainder uses offsets)
        masked = t.isa == "avx2" and any(last < t.vl for *_, last in blocks)
        self.table = a.new_label("mask") if masked else None
        self.frame = frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
        names = ("b", "c_m", "m_count", "n_count", "da", "db")
        self.s_b, self.s_c, self.s_mc, self.s_nc, self.s_da, self.s_db = (frame.slot(x) for x in names)
        self.s_a0, self.s_c0 = frame.slot("a0"), frame.slot("c0")  # BR-outer: A_br and C bases; N-outer: A base
        self.s_next = frame.slot("a_next")  # packed A, M-outer: where the next N block's prefetch starts
        # bytes of one M block's packed A panel (every K row of every BR step): what the blocks prefetch
        self.a_next_bytes = 0 if a_panel is None or n_outer or br_outer or a_copy else a_panel * es
        self.s_bstep = {nb: frame.slot(f"b_step{nb}") for _, _, nb, _ in blocks}
        self.s_cstep = {nb: frame.slot(f"c_step{nb}") for _, _, nb, _ in blocks}
        # copied A: one M block's rows (the full block's vectors) for every K row of every BR step
        rows = max(mv for _, mv, _, _ in blocks) * vb
        self.s_acopy = frame.buffer("a_copy", rows * k * self.br) if a_copy else None

    def emit(self) -> None:
        """Prologue, the blocks (M outermost, N outermost, or BR outside both), epilogue."""
        self.prologue()
        if self.br_outer:
            counted_loop(self.a, BRC, self.br_total, self.br_pass, "br_outer")
        elif self.n_outer:
            self.n_outer_blocks()
        else:
            self.m_blocks()
        self.frame.leave(self.a)
        if self.table is not None:
            emit_mask_table(self.a, self.table)

    def b_place(self, j: int, kk: int) -> tuple[Gpr, Any, int]:
        """B column j at K row kk of the step as `at`'s ``(base, off, disp)``."""
        if self.trans_b:
            return PB[0], B_OFFS[kk], j * self.es
        g, r = divmod(j, 5)
        return PB[g], B_OFFS[r], kk * self.es

    def prologue(self) -> None:
        """Strides to bytes, BR pointer deltas, per-block pointer steps."""
        a, es, frame = self.a, self.es, self.frame
        frame.enter(a)
        for r in (LDA, LDB, LDC):
            a.shl(r, LOG2[es])
        a.lea(LDA3, ptr(LDA + LDA * 2))
        a.lea(LDB3, ptr(LDB + LDB * 2))
        a.mov(self.s_b, B_N)
        a.mov(self.s_c, C_N)
        if self.br > 1:
            # da = br_stride_a - k_adv*lda, db = br_stride_b - k_adv*(es | ldb)  (bytes)
            a.mov(rax, frame.arg(0))
            a.shl(rax, LOG2[es])
            a.imul(rbx, LDA, self.k_adv)
            a.sub(rax, rbx)
            a.mov(self.s_da, rax)
            a.mov(rax, frame.arg(1))
            a.shl(rax, LOG2[es])
            if self.trans_b:
                a.imul(rbx, LDB, self.k_adv)
                a.sub(rax, rbx)
            elif self.k_adv:
                a.sub(rax, self.k_adv * es)
            a.mov(self.s_db, rax)
        elif self.br_outer:  # da, db = the BR strides in bytes
            for i, slot in ((0, self.s_da), (1, self.s_db)):
                a.mov(rax, frame.arg(i))
                a.shl(rax, LOG2[es])
                a.mov(slot, rax)
            a.mov(self.s_a0, A_M)
            a.mov(self.s_c0, C_N)
        for nb in self.s_bstep:
            if not self.trans_b:
                a.imul(rax, LDB, nb)
                a.mov(self.s_bstep[nb], rax)
            a.imul(rax, LDC, nb)
            a.mov(self.s_cstep[nb], rax)

    def block(
        self, mv: int, nb: int, part: Partial | None, prefetch: bool = True, a_from: str = "a", a_next=(0, 0)
    ) -> None:
        """One mv x nb block of C (see `Block`)."""
        Block(self, mv, nb, part, a_from).emit(prefetch, a_next)

    def partial(self, last: int) -> Partial | None:
        """The masked last vector of a block whose last vector has ``last`` lanes (set up here)."""
        if last >= self.t.vl:
            return None
        part = Partial(self.t, last, maskreg=self.t.vregs[-1], table=self.table)
        part.setup(self.a, rax)
        return part

    def next_columns(self, w: int, c_ptr: Any) -> None:
        """B_N and ``c_ptr`` (C's register or slot) ``w`` columns on: the next packed B panel (a
        full block), the next rows (trans_b: B rows are n), or ``w`` columns of ``ldb``."""
        a = self.a
        if self.b_panel is not None:
            a.add(B_N, self.b_panel * self.es)
        elif self.trans_b:
            a.add(B_N, w * self.es)
        else:
            a.imul(PA, LDB, w)
            a.add(B_N, PA)
        a.imul(PA, LDC, w)
        a.add(c_ptr, PA)

    def n_blocks(self, mv: int, nb: int, part: Partial | None) -> None:
        """All N blocks of one M block: full nb-column blocks, then the narrower remainder."""
        a = self.a
        a.mov(B_N, self.s_b)
        a.mov(C_N, self.s_c)
        full_count, widths = n_tail(self.n, nb, mv, self.b_panel is not None)
        # this M block's N blocks prefetch the next A panel between them (A_NEXT must be free)
        free = self.trans_b or -(-max([nb, *widths]) // 5) < len(PB)
        panel = self.a_next_bytes if free else 0
        lines = next_panel_prefetch(panel, full_count + len(widths), self.br, self.k_loops)

        def full(a_from: str = "a") -> None:
            self.block(mv, nb, part, a_from=a_from, a_next=lines)
            if self.b_panel is not None:  # the next packed micro-panel
                a.add(B_N, self.b_panel * self.es)
            elif self.trans_b:
                a.add(B_N, nb * self.es)
            else:
                a.add(B_N, self.s_bstep[nb])
            a.add(C_N, self.s_cstep[nb])

        # copied A: the first block fills the buffer, the others read it
        first, rest = ("copy", "buffer") if self.a_copy else ("a", "a")
        if full_count and self.a_copy:
            full(first)
        counted_loop(a, self.s_nc, full_count - (1 if self.a_copy else 0), lambda: full(rest), "n")
        for i, w in enumerate(widths):
            more = i < len(widths) - 1
            self.block(mv, w, part, prefetch=more, a_from=first if full_count + i == 0 else rest, a_next=lines)
            if more:  # the next tail block
                self.next_columns(w, C_N)

    def m_blocks(self) -> None:
        """M blocks outermost (full blocks, then the remainder), each over every N block."""
        a = self.a
        for count, mv, nb, last in self.blocks:
            part = self.partial(last)

            def m_block(mv: int = mv, nb: int = nb, part: Partial | None = part) -> None:
                if self.a_next_bytes:  # the next M block's A panel starts one panel on
                    a.lea(rax, ptr(A_M + self.a_next_bytes))
                    a.mov(self.s_next, rax)
                self.n_blocks(mv, nb, part)
                a.add(A_M, mv * self.vb if self.a_panel is None else self.a_panel * self.es)  # next M block (or panel)
                a.add(self.s_c, mv * self.vb)

            counted_loop(a, self.s_mc, count, m_block, "m")

    def n_outer_blocks(self) -> None:
        """N blocks outermost, each walking every M block: C is read and written down its columns,
        ``nb`` sequential streams, and the A block is re-read per N block (from L2)."""
        a, blocks = self.a, self.blocks
        a.mov(self.s_a0, A_M)
        a.mov(B_N, self.s_b)
        full_count, widths = n_tail(self.n, blocks[0][2], blocks[0][1], self.b_panel is not None)

        def n_block(w: int) -> None:
            a.mov(A_M, self.s_a0)
            a.mov(C_N, self.s_c)
            for count, mv, _, last in blocks:
                part = self.partial(last)

                def m_step(mv: int = mv, part: Partial | None = part) -> None:
                    self.block(mv, w, part, prefetch=False)
                    a.add(A_M, mv * self.vb if self.a_panel is None else self.a_panel * self.es)  # next M block
                    a.add(C_N, mv * self.vb)

                counted_loop(a, self.s_mc, count, m_step, "m")
            self.next_columns(w, self.s_c)

        counted_loop(a, self.s_nc, full_count, lambda: n_block(blocks[0][2]), "n")
        for w in widths:
            n_block(w)

    def br_pass(self) -> None:
        """BR outside the blocks: every M block for one BR step, then A_br and B_br on."""
        a = self.a
        a.mov(A_M, self.s_a0)
        a.mov(rax, self.s_c0)
        a.mov(self.s_c, rax)
        self.m_blocks()
        a.mov(rax, self.s_da)
        a.add(self.s_a0, rax)
        a.mov(rax, self.s_db)
        a.add(self.s_b, rax)


class Block:
    """One mv x nb block of C at C_N: load (or zero), BR x K FMAs, the epilogue, store. ``a_from``: A is
    read from the caller's ``a`` ("a"), also stored into the copied-A buffer ("copy"), or read
    from that buffer ("buffer", ``mv * vb`` bytes a row)."""

    def __init__(self, kern: VectorKernel, mv: int, nb: int, part: Partial | None, a_from: str) -> None:
        self.kern, self.a, self.t = kern, kern.a, kern.t
        self.mv, self.nb, self.part, self.a_from = mv, nb, part, a_from
        self.col = mv * kern.vb  # bytes of one K row of the copied A
        regs = self.t.vregs
        self.madd = madd = MulAdd(self.a, self.t, mv)  # the dtype's multiply-add and its registers
        self.acc = [[regs[j * mv + i] for j in range(nb)] for i in range(mv)]
        # the second accumulators of a split multiply-add (int64 on AVX2), after the first
        x0 = mv * nb
        self.cross = [[regs[x0 + j * mv + i] for j in range(nb)] for i in range(mv)] if madd.chains == 2 else None
        a0 = mv * nb * madd.chains
        self.av = regs[a0 : a0 + mv]
        self.embedded = self.t.isa == "avx512" and mv == 1  # B as an EVEX {1toN} operand
        self.bc = regs[a0 + mv : a0 + mv + madd.n_b]
        self.scratch = regs[a0 + mv + madd.n_b : a0 + mv + madd.n_b + madd.n_scratch]
        top = a0 + mv + madd.n_b + madd.n_scratch  # registers in use; AVX2's mask is the last one
        assert top <= len(regs) - (1 if part is not None and self.t.isa == "avx2" else 0), (mv, nb, self.t)
        self.vmovups = self.a.vmovups

    def emit(self, prefetch: bool, a_next: tuple[int, int]) -> None:
        """The block; ``prefetch``: the next nb columns of C are the next block's. ``a_next``: the
        next A panel's lines prefetched from ``s_next`` on (`brgemm_plan.next_panel_prefetch`)."""
        a, kern = self.a, self.kern
        self.c_in()
        if prefetch:
            self.c_prefetch()
        self.pointers()
        per_iter, pf_iters = a_next  # `per_iter` lines in each of the first `pf_iters` K iterations
        if pf_iters:
            a.mov(A_NEXT, kern.s_next)
        counted_loop(a, BRC, kern.br, lambda: self.br_step(per_iter, pf_iters), "br")
        if pf_iters:
            a.mov(kern.s_next, A_NEXT)
        if kern.epilogue:
            self.epilogue()
        self.c_out()

    def vload(self, i: int, dst: Any, base: Gpr, off: Any = None, disp: int = 0) -> None:
        """Vector ``i`` of the block's rows from ``at(base, off, disp)`` (the last one masked in a
        partial block)."""
        if self.part is not None and i == self.mv - 1:
            self.part.load(self.a, dst, at(base, off, disp))
        else:
            self.vmovups(dst, operand(self.kern.vsize, base, off, disp))

    def c_in(self) -> None:
        """The accumulators: zero (a fused first touch: C is not read) or the C block (a split
        multiply-add's second accumulators: zero)."""
        a, t = self.a, self.t
        if self.cross is not None:
            self.madd.start([x for row in self.cross for x in row])
        if self.kern.zero_c:
            for j in range(self.nb):
                for i in range(self.mv):
                    getattr(a, t.v("vxor"))(self.acc[i][j], self.acc[i][j], self.acc[i][j])
            return
        a.mov(PA, C_N)
        for j in range(self.nb):
            for i in range(self.mv):
                self.vload(i, self.acc[i][j], PA, None, i * self.kern.vb)
            if j < self.nb - 1:
                a.add(PA, LDC)

    def c_prefetch(self) -> None:
        """Prefetch the next N block's C columns (a hint: never faults), hiding their miss."""
        a, kern, nb = self.a, self.kern, self.nb
        if nb in kern.s_cstep:
            a.mov(PA, C_N)
            a.add(PA, kern.s_cstep[nb])
        else:
            a.imul(PA, LDC, nb)
            a.add(PA, C_N)
        for j in range(nb):  # every line of the column's rows, at any alignment of C
            for line in range(0, self.mv * kern.vb, 64):
                a.prefetcht0(operand(ptr, PA, None, line))
            a.prefetcht0(operand(ptr, PA, None, self.mv * kern.vb - 1))
            if j < nb - 1:
                a.add(PA, LDC)

    def pointers(self) -> None:
        """PA at A (or the copied A), SCR at the buffer being filled, the B column-group pointers."""
        a, kern = self.a, self.kern
        a.mov(PA, kern.s_acopy if self.a_from == "buffer" else A_M)
        if self.a_from == "copy":
            a.mov(SCR, kern.s_acopy)
        a.mov(PB[0], B_N)
        if not kern.trans_b:
            for g in range(1, -(-self.nb // 5)):
                a.lea(PB[g], ptr(PB[g - 1] + LDB * 4))
                a.add(PB[g], LDB)

    def k_step(self, kk: int) -> None:
        """K row kk of the step: mv A vectors (copied on), then per column a B broadcast and mv FMAs."""
        kern, col, vb, vsize, vmovups = self.kern, self.col, self.kern.vb, self.kern.vsize, self.vmovups
        av, acc = self.av, self.acc
        for i in range(self.mv):
            if self.a_from == "buffer":  # masked lanes were stored as zeros
                vmovups(av[i], operand(vsize, PA, None, kk * col + i * vb))
                continue
            self.vload(i, av[i], PA, A_ROWS[kk], i * vb)
            if self.a_from == "copy":
                vmovups(operand(vsize, SCR, None, kk * col + i * vb), av[i])
        madd, cross, n_b = self.madd, self.cross, len(self.bc)
        for j in range(self.nb):
            place = kern.b_place(j, kk)
            b = operand(kern.ssize, *place)
            bb = operand(bcst, *place) if self.embedded else None
            # consecutive columns alternate B registers (a split multiply-add uses both in each)
            regs = (self.bc, self.scratch) if madd.split64 else ((self.bc[j % n_b],), self.scratch)
            xs = None if cross is None else [cross[i][j] for i in range(self.mv)]
            madd.column([acc[i][j] for i in range(self.mv)], xs, av, b, bb, regs)

    def k_unrolled(self, pf: int = 0) -> None:
        """UNROLL K rows (``pf`` lines of the next A panel between them), then every pointer on."""
        a, kern = self.a, self.kern
        for kk in range(UNROLL):
            self.k_step(kk)
            if kk < pf:  # one line of the next A panel, between the FMA groups
                getattr(a, A_NEXT_HINT)(operand(ptr, A_NEXT, None, kk * 64))
        if pf:
            a.add(A_NEXT, pf * 64)
        if self.a_from == "buffer":
            a.add(PA, UNROLL * self.col)
        else:
            a.lea(PA, ptr(PA + LDA * 4))
        if self.a_from == "copy":
            a.add(SCR, UNROLL * self.col)
        if kern.trans_b:
            a.lea(PB[0], ptr(PB[0] + LDB * 4))
        else:
            for g in range(-(-self.nb // 5)):
                a.add(PB[g], UNROLL * kern.es)

    def br_step(self, per_iter: int, pf_iters: int) -> None:
        """One BR step: K in unrolled iterations (the first ``pf_iters`` prefetching), the K
        remainder, then A_br and B_br on (the copied A's rows run on past the K remainder)."""
        a, kern, k_rem = self.a, self.kern, self.kern.k_rem
        counted_loop(a, KC, pf_iters, lambda: self.k_unrolled(per_iter), "k_pf")  # K, prefetching
        counted_loop(a, KC, kern.k_loops - pf_iters, self.k_unrolled, "k")  # K, unrolled by 4
        for kk in range(k_rem):  # K remainder
            self.k_step(kk)
        if kern.br > 1:
            if self.a_from != "buffer":
                a.add(PA, kern.s_da)
            elif k_rem:
                a.add(PA, k_rem * self.col)
            if self.a_from == "copy" and k_rem:
                a.add(SCR, k_rem * self.col)
            for g in range(1 if kern.trans_b else -(-self.nb // 5)):
                a.add(PB[g], kern.s_db)

    def epilogue(self) -> None:
        """The fused epilogue on the accumulators, column by column (relu, a last touch: max(0, x)
        + 0, as the unary kernel); the first A register (free after the FMAs) holds its constants."""
        accs = [self.acc[i][j] for j in range(self.nb) for i in range(self.mv)]
        EpilogueCode(self.a, self.t, self.kern.epilogue, self.av[0]).emit(accs)

    def c_out(self) -> None:
        """The accumulators -> the C block (a split multiply-add's halves folded first, the A
        register free after the K loop as scratch)."""
        a = self.a
        if self.cross is not None:
            for j in range(self.nb):
                for i in range(self.mv):
                    self.madd.finish(self.acc[i][j], self.cross[i][j], self.av[0])
        a.mov(PA, C_N)
        for j in range(self.nb):
            for i in range(self.mv):
                if self.part is not None and i == self.mv - 1:
                    self.part.store(a, PA + i * self.kern.vb, self.acc[i][j])
                else:
                    self.vmovups(operand(self.kern.vsize, PA, None, i * self.kern.vb), self.acc[i][j])
            if j < self.nb - 1:
                a.add(PA, LDC)
