"""The innermost loops of a compiled sparse nest (`minijit.sparseauto.codegen`), for AVX2+FMA
(ymm vectors, ``vmaskmov`` tails) and AVX-512 (zmm vectors, opmask ``k1`` tails): a statement's
scalar code, the vectorized loop over a unit-stride dense index (axpy-like or dot product, masked
tail), the strided loop, and the instructions of the loops that hold an output row in registers
(the stationary row, the tight loop's step and fused dot product, the row update's load and step:
planned and driven by `codegen_rows.RowLoops`). `InnerLoops` is a mixin of the emitter; the
register and stack conventions are codegen's, the vector registers of each ISA are `VecRegs`
(`vec_regs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from asm.x86_64 import XMM, YMM, ZMM, Gpr, Vec, dword, qword
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rcx, rdi, rdx, rsi, rsp
from minijit.kernels.x86_64.common import Partial, Target, counted_loop
from minijit.sparseauto.codegen_rows import RowLoops, RowUpdate, Tight
from minijit.sparseauto.codegen_skeleton import PREFETCH_LINES, PREFETCH_ROW_BYTES, prefetch_ahead  # noqa: F401
from minijit.sparseauto.nest import Access, Compute, Loop

SIGNATURE = "void(const int64_t* args, int64_t begin, int64_t end)"
ISAS = ("avx2", "avx512")
#: registers that hold pointers in the vectorized inner loop
_PTR_REGS = (rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15)
_MAX_VEC_STATEMENTS = 3  # one broadcast register per vectorized statement


#: registers of a tight stationary loop (`InnerLoops._tight_loop`): not rax (the coordinate and
#: `_address`'s scratch), rcx and rdx (the walk's prefetch), rdi (`_scalar_product`'s scratch),
#: nor rbx (the args block)
_TIGHT_REGS = (rsi, rbp, r8, r9, r10, r11, r12, r13, r14, r15)


@dataclass(frozen=True)
class VecRegs:
    """The vector registers of the inner loops on one ISA: ``work`` holds products, loads and
    accumulators (``work[0]`` a scratch vector, ``work[1:]`` the stationary row's accumulators),
    ``bcast`` one broadcast scalar per vectorized statement (registers 12..14 on both ISAs: VEX
    encodes them, so a dot product's horizontal sum runs in them), ``mask`` the AVX2 tail mask
    (None on AVX-512, whose tails use the opmask ``k1``)."""

    work: tuple[Vec, ...]
    bcast: tuple[Vec, ...]
    mask: Vec | None


def vec_regs(t: Target) -> VecRegs:
    """AVX2: ymm0..11 work, ymm12..14 broadcast, ymm15 mask; AVX-512: zmm0..11 and zmm15..31
    work (28 accumulators for a stationary row), zmm12..14 broadcast."""
    if t.isa == "avx512":
        return VecRegs(tuple(ZMM[:12]) + tuple(ZMM[15:32]), tuple(ZMM[12:15]), None)
    return VecRegs(tuple(YMM[:12]), tuple(YMM[12:15]), YMM[15])


class InnerLoops(RowLoops):
    """The emitter's inner-loop stages (see `minijit.sparseauto.codegen` for the conventions)."""

    PTR_REGS = _PTR_REGS

    def _compute(self, c: Compute) -> None:
        """out += prod(ins), one element (scalar loads, multiplies and one add)."""
        a, t = self.a, self.t
        acc, x = XMM[0], XMM[1]
        for n, src in enumerate(c.ins):
            self._address(src, rdi)
            if n == 0:
                self._vmov_s(acc, t.smem(rdi))
            else:
                getattr(a, t.s("vmul"))(acc, acc, t.smem(rdi))
        self._address(c.out, rdi)
        self._vmov_s(x, t.smem(rdi))
        getattr(a, t.s("vadd"))(x, x, acc)
        self._vmov_s(t.smem(rdi), x)

    # ---------------------------------------------------------------- vectorized innermost loop

    def _tail(self, n: int) -> Partial | None:
        """The masked partial vector for the last ``n % lanes`` elements (None when there are
        none), its mask loaded (AVX2: from the table appended after the code; AVX-512: into k1)."""
        if not n % self.t.vl:
            return None
        if self.t.isa == "avx2" and self.table is None:
            self.table = self.a.new_label("mask")
        part = Partial(self.t, n % self.t.vl, maskreg=self.regs.mask, table=self.table)
        part.setup(self.a, rax)
        return part

    # ---------------------------------------------------------------- RowLoops' instructions

    TIGHT_REGS = _TIGHT_REGS

    @property
    def lanes(self) -> int:
        return self.t.vl

    def _row_vectors(self, n: int) -> int:
        return -(-n // self.t.vl)

    def _prefix_fits(self, statements: int, naccs: int) -> bool:
        return 2 * statements <= len(self.regs.work) - naccs

    def _scalable(self, step: int) -> bool:
        return step in (1, 2, 4, 8)

    def set_count(self, r: Gpr, n: int) -> None:
        self.a.mov(r.r32, n)

    def _row_accumulators(self, n: int) -> tuple[list[Vec], Partial | None]:
        """The accumulators of a row of n elements and its masked tail (its mask loaded)."""
        return list(self.regs.work[1 : 1 + self._row_vectors(n)]), self._tail(n)

    def _vzero(self, regs: list[Vec]) -> None:
        for r in regs:
            self.a.vxorps(r, r, r)

    def _vsum(self, accs: list[Vec], second: list[Vec]) -> None:
        for r, r2 in zip(accs, second, strict=True):
            getattr(self.a, self.t.v("vadd"))(r, r, r2)

    def _row_finish(self, c: Compute, j: str, accs: list[Vec], part: Partial | None, store: bool) -> None:
        """out += accumulators, once (store them: ``store_<T>``)."""
        a, t = self.a, self.t
        self._address(c.out, rdi, skip=j)
        tmp = self.regs.work[0]
        if store:
            a.label(f"store_{c.out.tensor}")
        for u, r in enumerate(accs):
            p = part if (part is not None and u == len(accs) - 1) else None
            if store:
                if p is None:
                    getattr(a, t.v("vmovu"))(t.vmem(rdi + u * t.vbytes), r)
                else:
                    p.store(a, rdi + u * t.vbytes, r)
            elif p is None:
                getattr(a, t.v("vadd"))(r, r, t.vmem(rdi + u * t.vbytes))
                getattr(a, t.v("vmovu"))(t.vmem(rdi + u * t.vbytes), r)
            else:
                p.load(a, tmp, rdi + u * t.vbytes)
                getattr(a, t.v("vadd"))(r, r, tmp)
                p.store(a, rdi + u * t.vbytes, r)

    def _tight_setup(self, loop: Loop, inner: Loop, plan: Tight) -> None:
        """A tight loop's invariant factors' product and, when nothing varies, its broadcast (after
        `_tight_pointers`)."""
        a, t = self.a, self.t
        bc, fixed = self.regs.bcast[0], XMM[14]
        per_iteration = bool(plan.scalars or plan.dots)  # else one broadcast before the loop
        if plan.fixed or not per_iteration:
            self._scalar_product(list(plan.fixed), self.bcast[0])
            self._vmov_s(fixed, t.smem(rsp + self.bcast[0]))
        if not per_iteration:
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, fixed)

    def _tight_step(self, loop: Loop, plan: Tight, accs: list[Vec], part: Partial | None) -> None:
        """One position of a tight loop: the prefetch and coordinate of a walk, a fused dot
        product, the scalar factors' product, broadcast, and the FMAs into ``accs``."""
        a, t = self.a, self.t
        x, walked = loop.index, self.nest.walks(loop)
        bc, prod, fixed = self.regs.bcast[0], self.regs.work[0], XMM[14]
        if walked:
            self._prefetch_rows(loop, walked[0], walked[0].indices.index(x), plan.p)
            a.mov(rax.r32, dword(plan.crd + plan.p * 4))  # the coordinate
        xr = rax if walked else plan.p
        for step, r in plan.offsets.items():
            a.imul(r, xr, step)

        def at(base: Gpr, step: int, disp: int = 0) -> object:
            """The address expression of a factor's element in this iteration."""
            if step < 0:  # the walked operand's values: by position
                return base + plan.p * t.es + disp
            if step == 0:
                return base + disp
            if step in plan.offsets:
                return base + plan.offsets[step] + disp
            return base + xr * step + disp

        s0 = XMM[0]  # the low lane of work[0] (ymm0/zmm0): free until the FMAs
        if plan.dots:  # the fused dot product, summed into a register (the temporary's value)
            s0 = self._tight_dot(plan, accs, at)
        if plan.scalars or plan.dots:  # the variant factors' product, times the invariant ones
            for n, (_, base, step) in enumerate(plan.scalars):
                if n == 0 and not plan.dots:
                    self._vmov_s(s0, t.smem(at(base, step)))
                else:
                    getattr(a, t.s("vmul"))(s0, s0, t.smem(at(base, step)))
            if plan.fixed:
                getattr(a, t.s("vmul"))(s0, s0, fixed)
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, s0)
        tmp = self.regs.bcast[1]
        for u, r in enumerate(accs):
            pp = part if (part is not None and u == len(accs) - 1) else None
            disp = u * t.vbytes
            if len(plan.vectors) == 1 and pp is None:
                ((_, base, step),) = plan.vectors
                getattr(a, t.v("vfmadd231"))(r, bc, t.vmem(at(base, step, disp)))
                continue
            for n, (_, base, step) in enumerate(plan.vectors):
                dst = prod if n == 0 else tmp
                self._vload(dst, at(base, step, disp), pp)
                if n:
                    getattr(a, t.v("vmul"))(prod, prod, tmp)
            getattr(a, t.v("vfmadd231"))(r, bc, prod)

    def _tight_dot(self, plan: Tight, accs: list[Vec], at: Callable[..., object]) -> Vec:
        """dot_<k>: the fused dot product's vectors, unrolled, in up to two accumulators the
        stationary row leaves free (the first vector multiplies, the rest accumulate), summed
        horizontally; returns the xmm whose low lane holds the sum."""
        a, t = self.a, self.t
        assert plan.dot_index is not None
        free = [r for r in self.regs.work[1:] if r not in accs]
        sums, prod = free[:2], self.regs.work[0]
        n = self.ext[plan.dot_index] // t.vl
        (_, b0, s0), *rest = plan.dots
        a.label(f"dot_{plan.dot_index}")
        for u in range(n):
            acc, disp, first = sums[u % len(sums)], u * t.vbytes, u < len(sums)
            if not rest:  # one factor: a sum
                if first:
                    getattr(a, t.v("vmovu"))(acc, t.vmem(at(b0, s0, disp)))
                else:
                    getattr(a, t.v("vadd"))(acc, acc, t.vmem(at(b0, s0, disp)))
                continue
            getattr(a, t.v("vmovu"))(prod, t.vmem(at(b0, s0, disp)))
            for _, b, st in rest[:-1]:
                getattr(a, t.v("vmul"))(prod, prod, t.vmem(at(b, st, disp)))
            _, b, st = rest[-1]
            if first:
                getattr(a, t.v("vmul"))(acc, prod, t.vmem(at(b, st, disp)))
            else:
                getattr(a, t.v("vfmadd231"))(acc, prod, t.vmem(at(b, st, disp)))
        return self._hsum(sums[: min(n, len(sums))])

    def _vload(self, dst: Vec, addr: object, part: Partial | None) -> None:
        """dst = the vector at ``addr``, or its first lanes under ``part``'s mask."""
        if part is None:
            getattr(self.a, self.t.v("vmovu"))(dst, self.t.vmem(addr))
        else:
            part.load(self.a, dst, addr)

    def _row_registers(self, n: int) -> tuple[list[Vec], list[Vec], Partial | None]:
        """A row update's row registers, its temporaries, and the row's masked tail."""
        naccs = self._row_vectors(n)
        row = list(self.regs.work[1 : 1 + naccs])
        return row, list(self.regs.work[1 + naccs : 1 + 2 * naccs]), self._tail(n)

    def _row_load(self, loop: Loop, plan: RowUpdate, regs: tuple[list[Vec], list[Vec], Partial | None]) -> None:
        """Before a row update: the invariant factors' product (broadcast when nothing varies),
        the j-factors' product in the row registers, the pointers at x = 0."""
        a, t = self.a, self.t
        row, tmps, part = regs
        inner = loop.body[0]
        assert isinstance(inner, Loop)
        c = inner.body[0]
        assert isinstance(c, Compute)
        x, j = loop.index, inner.index
        bc, fixed = self.regs.bcast[0], XMM[14]
        # the invariant factors: the scalars' product (broadcast now when nothing varies) ...
        if plan.fixed or not plan.scalars:
            self._scalar_product(list(plan.fixed), self.bcast[0])
            self._vmov_s(fixed, t.smem(rsp + self.bcast[0]))
        if not plan.scalars:
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, fixed)
        # ... and the j-factors' product, in registers
        skip = {x, j}
        for k, acc in enumerate(plan.row):
            self._address(acc, rdi, skip=skip)
            for u, r in enumerate(row):
                pp = part if (part is not None and u == len(row) - 1) else None
                dst = r if k == 0 else tmps[u]
                self._vload(dst, rdi + u * t.vbytes, pp)
                if k:
                    getattr(a, t.v("vmul"))(r, r, dst)
        # pointers at x = 0
        self._address(c.out, plan.out, skip=skip)
        for acc, base, _ in plan.scalars:
            self._address(acc, base, skip=skip)

    def _row_step(self, loop: Loop, plan: RowUpdate, regs: tuple[list[Vec], list[Vec], Partial | None]) -> None:
        """One x of a row update: broadcast the scalar factors' product, update the output row
        (load, FMA, store), step the pointers along x."""
        a, t = self.a, self.t
        row, tmps, part = regs
        bc, fixed, s0 = self.regs.bcast[0], XMM[14], XMM[0]
        if plan.scalars:  # the variant scalars' product, times the invariant one, broadcast
            for k, (_, base, _) in enumerate(plan.scalars):
                if k == 0:
                    self._vmov_s(s0, t.smem(base))
                else:
                    getattr(a, t.s("vmul"))(s0, s0, t.smem(base))
            if plan.fixed:
                getattr(a, t.s("vmul"))(s0, s0, fixed)
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, s0)
        for u, (r, tmp) in enumerate(zip(row, tmps, strict=True)):
            pp = part if (part is not None and u == len(row) - 1) else None
            disp = u * t.vbytes
            if pp is None:
                getattr(a, t.v("vmovu"))(tmp, t.vmem(plan.out + disp))
                getattr(a, t.v("vfmadd231"))(tmp, bc, r)
                getattr(a, t.v("vmovu"))(t.vmem(plan.out + disp), tmp)
            else:
                pp.load(a, tmp, plan.out + disp)
                getattr(a, t.v("vfmadd231"))(tmp, bc, r)
                pp.store(a, plan.out + disp, tmp)
        a.add(plan.out, plan.out_step)
        for _, base, st in plan.scalars:
            a.add(base, st)

    def _accumulate_row(self, j: str, jf: list[Gpr], accs: list[Vec], part: Partial | None) -> None:
        """acc_<j>: broadcast the scalar (its slot), then per vector the j-factors' product and
        an FMA into the row's accumulator."""
        a, t = self.a, self.t
        if part is not None and self._stationary_prefix:  # a loop before this one set its own mask
            part.setup(a, rax)
        bc, prod, tmp = self.regs.bcast[0], self.regs.work[0], self.regs.bcast[1]
        getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, t.smem(rsp + self.bcast[0]))
        a.label(f"acc_{j}")
        for u, r in enumerate(accs):
            p = part if (part is not None and u == len(accs) - 1) else None
            for n, x in enumerate(jf):
                dst = prod if n == 0 else tmp
                self._vload(dst, x + u * t.vbytes, p)
                if n:
                    getattr(a, t.v("vmul"))(prod, prod, tmp)
            getattr(a, t.v("vfmadd231"))(r, bc, prod)

    def _strided_loop(self, loop: Loop) -> None:
        """strided_<j>: an innermost dense loop over strided accesses, one element at a time with
        pointer increments (no address arithmetic per element)."""
        a, t, j = self.a, self.t, loop.index
        n = self.ext[j]
        stmts: tuple[Compute, ...] = loop.body  # type: ignore[assignment]
        if n == 0:
            return
        plan = self._inner_prologue(stmts, j)
        steps = []  # (pointer, byte stride along j)
        for c, (out, jf) in zip(stmts, plan, strict=True):
            accs = [x for x in c.ins if j in x.indices] + ([c.out] if out is not None else [])
            regs = jf + ([out] if out is not None else [])
            steps += [(r, self.strides[x.tensor][j] * t.es) for r, x in zip(regs, accs, strict=True)]
        work = [YMM[3 * s : 3 * s + 3] for s in range(len(stmts))]  # product, temporary, accumulator
        for s, (out, _) in enumerate(plan):
            self._vmov_s(XMM[12 + s], t.smem(rsp + self.bcast[s]))
            if out is None:
                a.vxorps(work[s][2], work[s][2], work[s][2])
        mul, add, fma = (getattr(a, t.s(m)) for m in ("vmul", "vadd", "vfmadd231"))

        def element() -> None:
            for s, (out, jf) in enumerate(plan):
                prod, tmp, acc = (XMM[YMM.index(r)] for r in work[s])
                self._vmov_s(prod, t.smem(jf[0]))
                for r in jf[1:]:
                    mul(prod, prod, t.smem(r))
                if out is None:  # dot product: acc += prod
                    add(acc, acc, prod)
                    continue
                self._vmov_s(tmp, t.smem(out))
                fma(tmp, XMM[12 + s], prod)
                self._vmov_s(t.smem(out), tmp)
            for r, step in steps:
                a.add(r, step)

        a.label(f"strided_{j}")
        counted_loop(a, rcx, n, element, f"strided_{j}_loop")
        for s, (out, _) in enumerate(plan):
            if out is None:  # out += scalar * sum (the accumulator's other lanes are zero)
                self._reduce_dot(stmts[s], [work[s][2]], self.bcast[s])

    def _vector_loop(self, loop: Loop) -> None:
        """vec_<j>: the statements of an innermost dense loop over vectors of j (see module doc)."""
        a, t, j = self.a, self.t, loop.index
        n = self.ext[j]
        self.vectorized.append(j)
        stmts: tuple[Compute, ...] = loop.body  # type: ignore[assignment]
        if n == 0:
            return
        # prologue: broadcast factors (the product of the factors without j) and base pointers
        lists = self._inner_prologue(stmts, j)
        plan = []  # per statement: (out pointer or None, factor pointers, broadcast register)
        for s, (out, jf) in enumerate(lists):
            bc = self.regs.bcast[s]
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, t.smem(rsp + self.bcast[s]))
            plan.append((out, jf, bc))
        ptrs = [r for out, jf, _ in plan for r in ([out] if out is not None else []) + jf]
        # Two registers per statement and unrolled vector: the product and, for an axpy-like
        # statement the loaded output, for a dot product its accumulator (a dot product loads
        # its middle and masked factors into its broadcast register, which its loop leaves
        # unused: the scalar is applied after the horizontal sum). Inside a stationary loop the
        # output row's accumulators are not ours to use.
        per_u = 2 * len(stmts)
        busy = set(self._stationary[1]) if self._stationary is not None else set()
        free = [r for r in self.regs.work if r not in busy]
        unroll = max(1, min(4, len(free) // per_u))
        work = [[free[u * per_u + 2 * s : u * per_u + 2 * s + 2] for s in range(len(stmts))] for u in range(unroll)]
        dots = [s for s, c in enumerate(stmts) if j not in c.out.indices]
        for u in range(unroll):
            for s in dots:
                acc = work[u][s][1]
                a.vxorps(acc, acc, acc)
        part = self._tail(n)

        def load(dst: Vec, r: Gpr, disp: int, p: Partial | None) -> None:
            if p is None:
                getattr(a, t.v("vmovu"))(dst, t.vmem(r + disp))
            else:
                p.load(a, dst, r + disp)

        def times(prod: Vec, r: Gpr, disp: int, p: Partial | None, tmp: Vec) -> None:
            """prod *= the vector at r + disp (a memory operand, or loaded masked into tmp)."""
            if p is None:
                getattr(a, t.v("vmul"))(prod, prod, t.vmem(r + disp))
            else:
                p.load(a, tmp, r + disp)
                getattr(a, t.v("vmul"))(prod, prod, tmp)

        def vector(u: int, disp: int, p: Partial | None) -> None:
            for s, (out, jf, bc) in enumerate(plan):
                prod, second = work[u][s]
                load(prod, jf[0], disp, p)
                if out is None:  # dot product: acc += prod * last factor
                    for r in jf[1:-1]:
                        times(prod, r, disp, p, bc)
                    if len(jf) == 1:
                        getattr(a, t.v("vadd"))(second, second, prod)
                    elif p is None:
                        getattr(a, t.v("vfmadd231"))(second, prod, t.vmem(jf[-1] + disp))
                    else:
                        p.load(a, bc, jf[-1] + disp)
                        getattr(a, t.v("vfmadd231"))(second, prod, bc)
                    continue
                for r in jf[1:]:
                    times(prod, r, disp, p, second)
                load(second, out, disp, p)
                getattr(a, t.v("vfmadd231"))(second, bc, prod)
                if p is None:
                    getattr(a, t.v("vmovu"))(t.vmem(out + disp), second)
                else:
                    p.store(a, out + disp, second)

        full = n // t.vl
        groups, rem = divmod(full, unroll)
        a.label(f"vec_{j}")

        def group() -> None:
            for u in range(unroll):
                vector(u, u * t.vbytes, None)
            for r in ptrs:
                a.add(r, unroll * t.vbytes)

        counted_loop(a, rcx, groups, group, f"vec_{j}_loop")
        for u in range(rem):
            vector(u, u * t.vbytes, None)
        if part is not None:
            a.label("vtail")
            vector(rem, rem * t.vbytes, part)
        for s in dots:  # epilogue: out += broadcast * horizontal sum of the accumulators
            self._reduce_dot(stmts[s], [work[u][s][1] for u in range(unroll)], self.bcast[s])

    def _scalar_product(self, factors: list[Access], slot: int) -> None:
        """The stack slot at offset ``slot`` = product of ``factors`` (1.0 when there are none)."""
        a, t = self.a, self.t
        if not factors:
            one = 0x3FF0000000000000 if t.es == 8 else 0x3F800000
            a.mov(rax, one)
            a.mov(qword(rsp + slot), rax)
            return
        x = XMM[0]
        for n, src in enumerate(factors):
            self._address(src, rdi)
            if n == 0:
                self._vmov_s(x, t.smem(rdi))
            else:
                getattr(a, t.s("vmul"))(x, x, t.smem(rdi))
        self._vmov_s(t.smem(rsp + slot), x)

    def _reduce_dot(self, c: Compute, accs: list[Vec], slot: int) -> None:
        """out += (scalar at stack offset ``slot``) * the horizontal sum of ``accs``."""
        a, t = self.a, self.t
        x = self._hsum(accs)
        getattr(a, t.s("vmul"))(x, x, t.smem(rsp + slot))
        self._address(c.out, rdi)
        getattr(a, t.s("vadd"))(x, x, t.smem(rdi))
        self._vmov_s(t.smem(rdi), x)

    def _hsum(self, accs: list[Vec]) -> Vec:
        """The sum of every lane of ``accs``, in the low lane of the returned xmm (the first
        accumulator's; XMM[13] is scratch; AVX-512: zmm accumulators are first summed into the
        broadcast register 12, dead after its loop, then halved to ymm12)."""
        a, t = self.a, self.t
        total = accs[0]
        if accs[0] in ZMM:
            total = self.regs.bcast[0]
            if len(accs) == 1:
                a.vmovaps(total, accs[0])
            else:
                getattr(a, t.v("vadd"))(total, accs[0], accs[1])
            accs = [total, *accs[2:]]
        for r in accs[1:]:
            getattr(a, t.v("vadd"))(total, total, r)
        if total in ZMM:
            high = YMM[13]
            a.vextractf64x4(high, total, 1)
            total = YMM[ZMM.index(total)]
            getattr(a, t.v("vadd"))(total, total, high)
        x, tmp = XMM[YMM.index(total)], XMM[13]
        a.vextractf128(tmp, total, 1)
        getattr(a, t.v("vadd"))(x, x, tmp)
        a.vunpckhpd(tmp, x, x)
        getattr(a, t.v("vadd"))(x, x, tmp)
        if t.es == 4:
            a.vshufps(tmp, x, x, 1)
            a.vaddss(x, x, tmp)
        return x
