"""The innermost loops of a compiled sparse nest (`minijit.sparseauto.codegen`), for AVX2+FMA
(ymm vectors, ``vmaskmov`` tails) and AVX-512 (zmm vectors, opmask ``k1`` tails): a statement's
scalar code, the vectorized loop over a unit-stride dense index (axpy-like or dot product, masked
tail), the output row held in registers across a loop (``stationary``), and the strided loop.
`InnerLoops` is a mixin of the emitter; the register and stack conventions are codegen's, the
vector registers of each ISA are `VecRegs` (`vec_regs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from asm.x86_64 import XMM, YMM, ZMM, Gpr, Vec, dword, qword
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rcx, rdi, rdx, rsi, rsp
from minijit.kernels.x86_64.common import Partial, Target, counted_loop
from minijit.sparseauto.nest import Access, Compute, Loop, Temp

SIGNATURE = "void(const int64_t* args, int64_t begin, int64_t end)"
ISAS = ("avx2", "avx512")
#: registers that hold pointers in the vectorized inner loop
_PTR_REGS = (rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15)
_MAX_VEC_STATEMENTS = 3  # one broadcast register per vectorized statement
#: walks prefetch the dense rows of a later position, up to this many bytes per row (`prefetch_ahead`)
PREFETCH_ROW_BYTES = 512  # an output row kept in registers across a loop (`_stationary_loop`)
PREFETCH_LINES = 64  # cache lines a walk keeps in flight


def prefetch_ahead(lines: int) -> int:
    """How many positions ahead a walk that prefetches ``lines`` cache lines per position looks:
    about `PREFETCH_LINES` lines in flight, 4 to 16 positions."""
    return max(4, min(16, PREFETCH_LINES // max(1, lines)))


#: registers of a tight stationary loop (`InnerLoops._tight_loop`): not rax (the coordinate and
#: `_address`'s scratch), rcx and rdx (the walk's prefetch), rdi (`_scalar_product`'s scratch),
#: nor rbx (the args block)
_TIGHT_REGS = (rsi, rbp, r8, r9, r10, r11, r12, r13, r14, r15)


@dataclass(frozen=True)
class _Tight:
    """The registers of a tight stationary loop: position/counter, end, the walked level's
    ``crd``, the variant scalar factors with their bases and byte strides along the loop's index
    (negative: the walked operand's values, indexed by position), the invariant scalar factors,
    the j-factors with their bases and strides (0: invariant), the offset registers of
    strides an address cannot scale, and a fused dot product's factors (`_fused_dot`)."""

    p: Gpr
    end: Gpr
    crd: Gpr | None
    scalars: tuple[tuple[Access, Gpr, int], ...]
    fixed: tuple[Access, ...]
    vectors: tuple[tuple[Access, Gpr, int], ...]
    offsets: dict[int, Gpr]
    dots: tuple[tuple[Access, Gpr, int], ...] = ()
    dot_index: str | None = None


@dataclass(frozen=True)
class _RowUpdate:
    """The registers of a row update (`InnerLoops._row_update_loop`): counter, end, the output
    row's pointer and byte step along the loop's index, the variant scalar factors' pointers
    and steps, the invariant scalar factors, and the j-factors held in registers."""

    p: Gpr
    end: Gpr
    out: Gpr
    out_step: int
    scalars: tuple[tuple[Access, Gpr, int], ...]
    fixed: tuple[Access, ...]
    row: tuple[Access, ...]


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


class InnerLoops:
    """The emitter's inner-loop stages (see `minijit.sparseauto.codegen` for the conventions)."""

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

    def _inner_prologue(
        self, stmts: tuple[Compute, ...], j: str, with_out: bool = True
    ) -> list[tuple[Gpr | None, list[Gpr]]]:
        """Before an innermost loop over j: each statement's product of the factors without j in
        its stack slot, and pointers (at j = 0) to its accesses with j: (out or None, factors);
        ``with_out=False`` leaves the out pointer (None)."""
        for s, c in enumerate(stmts):
            self._scalar_product([x for x in c.ins if j not in x.indices], self.bcast[s])
        regs = iter(_PTR_REGS)
        plan = []
        for c in stmts:
            jf = []
            for x in c.ins:
                if j in x.indices:
                    r = next(regs)
                    self._address(x, r, skip=j)
                    jf.append(r)
            out = None
            if with_out and j in c.out.indices:
                out = next(regs)
                self._address(c.out, out, skip=j)
            plan.append((out, jf))
        return plan

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

    def _stationary_inner(self, loop: Loop) -> Loop | None:
        """The inner loop of ``loop`` when its output row can stay in registers across ``loop``:
        the body ends with one vectorizable loop over j with one axpy-like statement whose
        output does not depend on ``loop``'s index (SpMM's row of C across the walk of a row
        of A) and fits the accumulator registers. Before it the body may hold temporaries and
        vectorizable loops that neither read nor write that output and fit the registers the
        accumulators leave (the SDDMM-SpMM fusion: ``T = C(i,:).D(j,:)`` per j, then
        ``A(i,:) += B(i,j)*T*E(j,:)``)."""
        if not loop.body or not isinstance(loop.body[-1], Loop) or self._stationary is not None:
            return None
        inner = loop.body[-1]
        if self._inner_kind(inner) != "vector" or len(inner.body) != 1:
            return None
        c = inner.body[0]
        assert isinstance(c, Compute)
        if loop.index in c.out.indices or inner.index not in c.out.indices:
            return None
        if any(x.tensor == c.out.tensor for x in c.ins):
            return None
        naccs = -(-self.ext[inner.index] // self.t.vl)
        if naccs > len(self.regs.work) - 1:
            return None
        for node in loop.body[:-1]:
            if isinstance(node, Temp):
                continue
            if not isinstance(node, Loop) or self._inner_kind(node) != "vector":
                return None
            stmts = node.body
            if any(x.tensor == c.out.tensor for s in stmts for x in (s.out, *s.ins)):  # type: ignore[union-attr]
                return None
            if 2 * len(stmts) > len(self.regs.work) - naccs:
                return None
        return inner

    def _stationary_loop(self, loop: Loop, split: bool) -> None:
        """stationary_<j>: zero accumulators for the output row, run ``loop`` with the inner loop
        accumulating into them (`_accumulate`), then add them to the output row once."""
        a, t = self.a, self.t
        inner = self._stationary_inner(loop)
        assert inner is not None
        c = inner.body[0]
        assert isinstance(c, Compute)
        n, j = self.ext[inner.index], inner.index
        accs = list(self.regs.work[1 : 1 - (-n // t.vl)])
        part = self._tail(n)
        a.label(f"stationary_{j}")
        for r in accs:
            a.vxorps(r, r, r)
        self.vectorized.append(j)
        self._stationary = (inner, accs, part)
        self._stationary_prefix = len(loop.body) > 1
        try:
            plan = self._tight_plan(loop, inner)
            if plan is None:
                self._loop(loop, split)
            else:
                self._tight_loop(loop, inner, split, plan)
        finally:
            self._stationary = None
            self._stationary_prefix = False
        self._address(c.out, rdi, skip=j)  # out += accumulators, once
        tmp = self.regs.work[0]
        store = self._store_row is loop  # the row is a whole temporary this loop sets first
        if store:
            a.label(f"store_{c.out.tensor}")
            self._store_row = None
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

    def _tight_plan(self, loop: Loop, inner: Loop) -> _Tight | None:
        """The register plan of a stationary loop that runs tight (`_tight_loop`): its body is
        the inner loop alone (SpMM's walk of a row of A, the TTM chain's walk of a fibre), or a
        scalar temporary, a dot product into it and the inner loop that reads it (the fused
        SDDMM-SpMM: ``T = C(i,:).D(j,:)`` then ``A(i,:) += B(i,j)*T*E(j,:)``), the temporary
        then held in a register. None where the loop needs the general path (a merge, positions
        of dense sparse levels, another body, a dot product with a tail or over 16 vectors, too
        few registers)."""
        x = loop.index
        walked = self.nest.walks(loop)
        if len(walked) > 1 or self._dense_levels(loop):
            return None
        c = inner.body[0]
        assert isinstance(c, Compute)
        dot = self._fused_dot(loop, inner)
        if len(loop.body) != 1 and dot is None:
            return None
        temp = None if dot is None else dot.out.tensor
        regs = iter(_TIGHT_REGS)
        try:
            p, end = next(regs), next(regs)
            crd = next(regs) if walked else None

            def along(acc: Access) -> int:
                return self.strides[acc.tensor].get(x, 0) * self.t.es

            scalars: list[tuple[Access, Gpr, int]] = []  # variant scalar factors: base, stride along x
            fixed: list[Access] = []  # scalar factors that do not change in the loop
            vectors: list[tuple[Access, Gpr, int]] = []  # j-factors: (access, base, byte stride along x)
            for acc in c.ins:
                if acc.tensor == temp:
                    continue  # the dot product's value, in a register
                if inner.index in acc.indices:
                    vectors.append((acc, next(regs), along(acc)))
                elif walked and acc.tensor == walked[0].name:  # the walked operand's values, by position
                    if walked[0].indices[-1] != x:
                        return None
                    scalars.append((acc, next(regs), -self.t.es))  # negative: indexed by position
                elif x in acc.indices:
                    if acc.tensor in self.sparse:
                        return None
                    scalars.append((acc, next(regs), along(acc)))
                else:
                    fixed.append(acc)
            dots = tuple((acc, next(regs), along(acc)) for acc in (dot.ins if dot is not None else ()))
            steps = {st for _, _, st in scalars if st > 0} | {st for _, _, st in vectors + list(dots) if st}
            offsets = {}  # byte stride -> register holding x * stride (strides an address cannot scale)
            for step in sorted(steps):
                if step not in (1, 2, 4, 8):
                    offsets[step] = next(regs)
        except StopIteration:
            return None
        index = None if dot is None else loop.body[1].index  # type: ignore[union-attr]
        return _Tight(p, end, crd, tuple(scalars), tuple(fixed), tuple(vectors), offsets, dots, index)

    def _fused_dot(self, loop: Loop, inner: Loop) -> Compute | None:
        """The dot product of a body ``[Temp T<>, for k: T() += x(k)*y(k)..., inner]`` whose inner
        statement reads ``T()`` once and nothing else touches T, every factor dense with k (no
        scalar part), k a whole number of vectors (at most 16) and a vector register left for
        its accumulator; else None."""
        if len(loop.body) != 3:
            return None
        temp, dl, _ = loop.body
        if not isinstance(temp, Temp) or temp.indices or not isinstance(dl, Loop) or len(dl.body) != 1:
            return None
        d, c = dl.body[0], inner.body[0]
        assert isinstance(c, Compute)
        if not isinstance(d, Compute) or self._inner_kind(dl) != "vector" or d.out.tensor != temp.name:
            return None
        if any(dl.index not in acc.indices or acc.tensor == temp.name for acc in d.ins):
            return None
        if [acc.tensor for acc in c.ins].count(temp.name) != 1 or c.out.tensor == temp.name:
            return None
        n = self.ext[dl.index]
        assert self._stationary is not None
        free = len(self.regs.work) - 1 - len(self._stationary[1])
        if n == 0 or n % self.t.vl or n // self.t.vl > 16 or free < 1:
            return None
        return d

    def _tight_loop(self, loop: Loop, inner: Loop, split: bool, plan: _Tight) -> None:
        """tight_walk_<T>_<x> / tight_dense_<x>: a stationary loop with its counter, bounds, base
        pointers and loop-invariant scalar factors in registers: per iteration only the
        coordinate, a fused dot product (`_tight_dot`), the variant factors' product and its
        broadcast, and the accumulating FMAs."""
        a, t = self.a, self.t
        assert self._stationary is not None
        _, accs, part = self._stationary
        c = inner.body[0]
        assert isinstance(c, Compute)
        x, walked = loop.index, self.nest.walks(loop)
        bc, fixed = self.regs.bcast[0], XMM[14]
        name = f"tight_walk_{walked[0].name}_{x}" if walked else f"tight_dense_{x}"
        done = a.new_label(f"{name}_done")
        # bounds: the fibre under the parent, or 0..extent (never a split top loop: threads split
        # a loop over an output index, and a stationary loop's output does not have its index)
        assert not split
        if walked:
            o = walked[0]
            self._fibre(o, o.indices.index(x), plan.p, plan.end)
        else:
            a.xor(plan.p.r32, plan.p.r32)
            a.mov(plan.end.r32, self.ext[x])
        a.cmp(plan.p, plan.end)
        a.jge(done)
        # base pointers (x's own offset left out), the invariant factors' product and broadcast
        if walked:
            o = walked[0]
            self._base(plan.crd, o.name, "crd", o.indices.index(x))
        skip = {x, inner.index}
        for acc, base, _ in plan.vectors:
            self._address(acc, base, skip=skip)
        for acc, base, step in plan.scalars:
            if step < 0:
                self._base(base, acc.tensor, "vals")
            else:
                self._address(acc, base, skip=skip)
        for acc, base, _ in plan.dots:
            self._address(acc, base, skip={x, plan.dot_index})
        per_iteration = bool(plan.scalars or plan.dots)  # else one broadcast before the loop
        if plan.fixed or not per_iteration:
            self._scalar_product(list(plan.fixed), self.bcast[0])
            self._vmov_s(fixed, t.smem(rsp + self.bcast[0]))
        if not per_iteration:
            getattr(a, "vbroadcastss" if t.es == 4 else "vbroadcastsd")(bc, fixed)
        if plan.dot_index is not None:
            self.vectorized.append(plan.dot_index)
        second = self._second_accumulators(plan, accs)
        paired = bool(second)
        if paired:
            for r in second:
                a.vxorps(r, r, r)
        top = a.label(name)
        self._tight_step(loop, plan, accs, part)
        if paired:
            rest = a.new_label(f"{name}_pairs_done")
            a.inc(plan.p)
            a.cmp(plan.p, plan.end)
            a.jge(rest)
            self._tight_step(loop, plan, second, part)
        a.inc(plan.p)
        a.cmp(plan.p, plan.end)
        a.jl(top)
        if paired:
            a.bind(rest)
            for r, r2 in zip(accs, second, strict=True):
                getattr(a, t.v("vadd"))(r, r, r2)
        a.bind(done)

    def _second_accumulators(self, plan: _Tight, accs: list[Vec]) -> list[Vec]:
        """A second set of accumulators for a tight loop, positions alternating between the two
        sets so that each FMA chain waits on every other position only; [] where the registers
        do not allow it or a fused dot product uses them."""
        second = list(self.regs.work[1 + len(accs) : 1 + 2 * len(accs)])
        return second if not plan.dots and len(second) == len(accs) else []

    def _tight_step(self, loop: Loop, plan: _Tight, accs: list[Vec], part: Partial | None) -> None:
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

    def _tight_dot(self, plan: _Tight, accs: list[Vec], at: Callable[..., object]) -> Vec:
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

    def _row_update_plan(self, loop: Loop) -> _RowUpdate | None:
        """The plan of a dense loop over x whose body is one vectorizable loop over j with one
        axpy-like statement ``out(x, j) += s(x) * ... * r(j) * ...`` whose j-factors do not
        depend on x (TTMc's ``A(i,l,m) += C(j,l)*T(m)``): the row ``r`` then stays in registers
        across x (`_row_update_loop`). None where another path applies: a walk or a dense level
        of a sparse operand at x, an output without x or j last, a j-factor with x, a factor the
        loop writes, inside a stationary loop, or too few registers."""
        if self._stationary is not None or self.nest.walks(loop) or self._dense_levels(loop):
            return None
        if len(loop.body) != 1 or not isinstance(loop.body[0], Loop):
            return None
        inner = loop.body[0]
        if self._inner_kind(inner) != "vector" or len(inner.body) != 1:
            return None
        c = inner.body[0]
        assert isinstance(c, Compute)
        x, j = loop.index, inner.index
        if not self._contiguous(c.out, j) or any(acc.tensor == c.out.tensor for acc in c.ins):
            return None
        es = self.t.es

        def step(acc: Access) -> int:
            return self.strides[acc.tensor].get(x, 0) * es if x in acc.indices else 0

        if step(c.out) == 0:
            return None  # the output row does not move with x: a stationary loop's case
        row = tuple(acc for acc in c.ins if j in acc.indices)
        if not row or any(x in acc.indices for acc in row):
            return None
        naccs = -(-self.ext[j] // self.t.vl)
        if 2 * naccs + 1 > len(self.regs.work):
            return None
        regs = iter(_TIGHT_REGS)
        try:
            p, end, out = next(regs), next(regs), next(regs)
            scalars = []
            for acc in c.ins:
                if j not in acc.indices and x in acc.indices:
                    if acc.tensor in self.sparse or x not in self.strides.get(acc.tensor, ()):
                        return None
                    scalars.append((acc, next(regs), step(acc)))
        except StopIteration:
            return None
        fixed = tuple(acc for acc in c.ins if j not in acc.indices and x not in acc.indices)
        return _RowUpdate(p, end, out, step(c.out), tuple(scalars), fixed, row)

    def _row_update_loop(self, loop: Loop, plan: _RowUpdate) -> None:
        """row_<x>_<j>: load the j-factors' product into registers once, then per x broadcast
        the scalar factors' product and update the output row (load, FMA, store), the pointers
        stepping by their strides along x."""
        a, t = self.a, self.t
        inner = loop.body[0]
        assert isinstance(inner, Loop)
        c = inner.body[0]
        assert isinstance(c, Compute)
        x, j = loop.index, inner.index
        n = self.ext[j]
        self.vectorized.append(j)
        naccs = -(-n // t.vl)
        row = list(self.regs.work[1 : 1 + naccs])
        tmps = list(self.regs.work[1 + naccs : 1 + 2 * naccs])
        part = self._tail(n)
        bc, fixed, s0 = self.regs.bcast[0], XMM[14], XMM[0]
        a.label(f"row_{x}_{j}")
        if self.ext[x] == 0 or n == 0:
            return
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
                pp = part if (part is not None and u == naccs - 1) else None
                dst = r if k == 0 else tmps[u]
                self._vload(dst, rdi + u * t.vbytes, pp)
                if k:
                    getattr(a, t.v("vmul"))(r, r, dst)
        # pointers at x = 0, the counter and its end
        self._address(c.out, plan.out, skip=skip)
        for acc, base, _ in plan.scalars:
            self._address(acc, base, skip=skip)
        a.xor(plan.p.r32, plan.p.r32)
        a.mov(plan.end.r32, self.ext[x])
        top = a.label(f"row_{x}_{j}_loop")
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
            pp = part if (part is not None and u == naccs - 1) else None
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
        a.inc(plan.p)
        a.cmp(plan.p, plan.end)
        a.jl(top)

    def _accumulate(self, inner: Loop) -> None:
        """acc_<j>: the inner statement of a stationary loop: acc[j] += s * x[j] * ..."""
        a, t = self.a, self.t
        assert self._stationary is not None
        _, accs, part = self._stationary
        c = inner.body[0]
        assert isinstance(c, Compute)
        j = inner.index
        ((_, jf),) = self._inner_prologue((c,), j, with_out=False)
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
