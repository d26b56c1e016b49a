"""The AArch64 instructions of the row-in-registers loops (`codegen_rows.RowLoops`): a stationary
row's accumulators, the tight loop's step (with a fused dot product, ``dot_<k>``), the row update's
load and step.

A row of n elements takes ``n // lanes`` 128-bit NEON vectors and, for the last ``n % lanes``
elements, one register per element (its lane 0): `row_layout`. The code is NEON on both ISAs (a
vector-length agnostic SVE row would need as many registers as the shortest vectors do; NEON is
part of every SVE core). Scalar factors are multiplied in lane 0 of a register and the FMAs take
that lane by element (``fmla v.4s, v.4s, v.s[0]``): no broadcast.

Registers: accumulators v9-v23 then v2-v8 (a stationary loop's other loops use v0-v8 and
v24-v26: with such loops before the inner one the row takes v9-v23 only); v27 the product of a
position's row factors, v28 the position's scalar product, v29 a loaded factor, v30 the invariant
scalars' product; a fused dot product sums into the first two registers the row leaves.
General-purpose: x0-x7, x20-x28 for the counters and base pointers, x15-x17 for a position's row
and dot-product addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from asm.aarch64 import mem, sp, x9, x10, x14, x15, x16, x17
from asm.aarch64.registers import ScalarReg, VecReg, VReg, XReg
from minijit.kernels.aarch64.common import add_imm
from minijit.sparseauto.codegen_rows import RowLoops, RowUpdate, Tight
from minijit.sparseauto.nest import Compute, Loop

__all__ = ["RowLoops64", "row_layout"]

#: the row's accumulators, in the order they are taken (v0, v1: the scalar statements' registers)
_POOL = (*range(9, 24), *range(2, 9))
_PROD, _SCALAR, _TMP, _FIXED = 27, 28, 29, 30
#: general-purpose registers of a tight loop or a row update (not x9-x17: scratch; x18; x19: args)
TIGHT_REGS = tuple(XReg(i) for i in (*range(8), *range(20, 29)))
_ROW_ADDRS = (x15, x16, x17)  # a tight loop's row addresses at this position


@dataclass(frozen=True)
class _Regs:
    """``work[0]`` the scratch vector, ``work[1:]`` the accumulators (vector register numbers)."""

    work: tuple[int, ...]


def row_layout(n: int, lanes: int, es: int) -> list[tuple[int, int]]:
    """(byte offset, elements) of each register of a row of ``n`` elements: whole vectors, then
    the last ``n % lanes`` elements one per register."""
    full = [(u * 16, lanes) for u in range(n // lanes)]
    return full + [((n // lanes * lanes + e) * es, 1) for e in range(n % lanes)]


class RowLoops64(RowLoops):
    """`RowLoops` on AArch64 (see the module doc); a mixin of `codegen_aarch64._Emitter64`."""

    TIGHT_REGS = TIGHT_REGS
    PREFETCH_HOLDS = True
    regs = _Regs((_PROD, *_POOL))
    PREFIX_ACCUMULATORS = 15  # v9-v23: what a row may take when other loops run before its inner loop

    @property
    def lanes(self) -> int:
        return self.t.lanes

    def _row_vectors(self, n: int) -> int:
        return n // self.t.lanes + n % self.t.lanes

    def _prefix_fits(self, statements: int, naccs: int) -> bool:
        return naccs <= self.PREFIX_ACCUMULATORS

    def _scalable(self, step: int) -> bool:
        return step & (step - 1) == 0

    def set_count(self, r: XReg, n: int) -> None:
        self.a.mov(r, n)

    # ---------------------------------------------------------------- registers

    def _elem(self, idx: int) -> object:
        """Lane 0 of v<idx>, as a by-element operand."""
        return getattr(VReg(idx), self.t.es)[0]

    def _view(self, idx: int, width: int) -> ScalarReg:
        """v<idx> as the q register (a whole vector) or its s/d lane 0 (one element)."""
        return ScalarReg(idx, "q") if width > 1 else self._s(idx)

    def _row_layout(self, n: int) -> list[tuple[int, int]]:
        return row_layout(n, self.t.lanes, self.t.size)

    def _row_product(self, dst: int, addrs: list[XReg], off: int, width: int) -> None:
        """v<dst> = the product of the row factors at ``addrs`` + ``off`` (v29 the second's)."""
        a = self.a
        for k, r in enumerate(addrs):
            a.ldr(self._view(dst if k == 0 else _TMP, width), mem(r, off))
            if k:
                a.fmul(self._v(dst), self._v(dst), self._v(_TMP))

    # ---------------------------------------------------------------- stationary row

    def _row_accumulators(self, n: int) -> tuple[list[int], list[tuple[int, int]]]:
        return list(self.regs.work[1 : 1 + self._row_vectors(n)]), self._row_layout(n)

    def _vzero(self, regs: list[int]) -> None:
        for r in regs:
            self.a.movi(VecReg(r, "d", 2), 0)

    def _vsum(self, accs: list[int], second: list[int]) -> None:
        for r, r2 in zip(accs, second, strict=True):
            self.a.fadd(self._v(r), self._v(r), self._v(r2))

    def _row_finish(self, c: Compute, j: str, accs: list[int], part: list[tuple[int, int]], store: bool) -> None:
        """out += accumulators, once (store them: ``store_<T>``)."""
        a = self.a
        self._address(c.out, x9, skip=j)
        if store:
            a.label(f"store_{c.out.tensor}")
        for r, (off, width) in zip(accs, part, strict=True):
            if not store:
                a.ldr(self._view(_TMP, width), mem(x9, off))
                a.fadd(self._v(r), self._v(r), self._v(_TMP))
            a.str(self._view(r, width), mem(x9, off))

    def _accumulate_row(self, j: str, ptrs: list[XReg], accs: list[int], part: list[tuple[int, int]]) -> None:
        """acc_<j>: the scalar (its slot) in lane 0 of v30, then per register the j-factors'
        product and an FMA by element into the row's accumulator."""
        a = self.a
        a.ldr(self._s(_FIXED), mem(sp, self.bcast[0]))
        a.label(f"acc_{j}")
        for r, (off, width) in zip(accs, part, strict=True):
            self._row_product(_PROD, ptrs, off, width)
            a.fmla(self._v(r), self._v(_PROD), self._elem(_FIXED))

    # ---------------------------------------------------------------- tight loop

    def _tight_plan(self, loop: Loop, inner: Loop) -> Tight | None:
        plan = super()._tight_plan(loop, inner)
        fits = plan is not None and len(plan.vectors) + len(plan.dots) <= len(_ROW_ADDRS)
        return plan if fits else None

    def _tight_setup(self, loop: Loop, inner: Loop, plan: Tight) -> None:
        """The strides no shift scales, in their registers, and the invariant factors' product in
        v30."""
        for step, r in plan.offsets.items():
            self.a.mov(r, step)
        self._fixed_product(list(plan.fixed))

    def _fixed_product(self, factors: list) -> None:
        """v30 lane 0 = the product of ``factors`` (1.0 for none)."""
        self._scalar_product(factors, self.bcast[0])
        self.a.ldr(self._s(_FIXED), mem(sp, self.bcast[0]))

    def _at(self, dst: XReg, base: XReg, xr: XReg, step: int, plan: Tight) -> XReg:
        """The address of a factor at this x: ``base`` (step 0), else in ``dst``."""
        if step == 0:
            return base
        if step in plan.offsets:
            self.a.madd(dst, xr, plan.offsets[step], base)
        else:
            self.a.add(dst, base, xr, "lsl", step.bit_length() - 1)
        return dst

    def _tight_step(self, loop: Loop, plan: Tight, accs: list[int], part: list[tuple[int, int]]) -> None:
        """One position of a tight loop: the prefetch and coordinate of a walk, the scalar factors' product
        (v28), the row factors' addresses, and the FMAs into ``accs``."""
        a = self.a
        walked = self.nest.walks(loop)
        xr = x10 if walked else plan.p
        if walked:
            o = walked[0]
            held = None if plan.prefetch is None else (plan.crd, *plan.prefetch)
            self._prefetch_rows(loop, o, o.indices.index(loop.index), plan.p, held)
            a.ldr(x10.w, mem(plan.crd, plan.p, "lsl", 2))  # the coordinate
        bc = _FIXED
        if plan.dots:  # the fused dot product, summed into lane 0 of a register (the temporary)
            bc = self._tight_dot(plan, accs, xr)
        if plan.scalars or plan.dots:  # the variant factors' product, times the invariant ones
            if not plan.dots:
                bc = _SCALAR
            for n, (_, base, step) in enumerate(plan.scalars):
                dst = bc if n == 0 and not plan.dots else _TMP
                if step < 0:  # the walked operand's values: by position
                    a.ldr(self._s(dst), mem(base, plan.p, "lsl", self.t.shift))
                else:
                    a.ldr(self._s(dst), mem(self._at(x14, base, xr, step, plan)))
                if dst == _TMP:
                    a.fmul(self._v(bc), self._v(bc), self._v(_TMP))
            if plan.fixed:
                a.fmul(self._v(bc), self._v(bc), self._v(_FIXED))
        addrs = [
            self._at(r, base, xr, step, plan) for (_, base, step), r in zip(plan.vectors, _ROW_ADDRS, strict=False)
        ]
        for r, (off, width) in zip(accs, part, strict=True):
            self._row_product(_PROD, addrs, off, width)
            a.fmla(self._v(r), self._v(_PROD), self._elem(bc))

    def _tight_dot(self, plan: Tight, accs: list[int], xr: XReg) -> int:
        """dot_<k>: the fused dot product's vectors, unrolled, in up to two accumulators the row
        leaves free (the first vectors multiply, the rest accumulate), summed across lanes;
        returns the register whose lane 0 holds the sum."""
        a = self.a
        assert plan.dot_index is not None
        free = [r for r in self.regs.work[1:] if r not in accs]
        sums = free[:2]
        n = self.ext[plan.dot_index] // self.t.lanes
        regs = _ROW_ADDRS[len(plan.vectors) :]
        addrs = [self._at(r, base, xr, step, plan) for (_, base, step), r in zip(plan.dots, regs, strict=False)]
        a.label(f"dot_{plan.dot_index}")
        for u in range(n):
            acc, off, first = sums[u % len(sums)], u * 16, u < len(sums)
            if len(addrs) == 1:  # one factor: a sum
                a.ldr(ScalarReg(acc if first else _PROD, "q"), mem(addrs[0], off))
                if not first:
                    a.fadd(self._v(acc), self._v(acc), self._v(_PROD))
                continue
            self._row_product(_PROD, addrs[:-1], off, self.t.lanes)
            a.ldr(ScalarReg(_TMP, "q"), mem(addrs[-1], off))
            if first:
                a.fmul(self._v(acc), self._v(_PROD), self._v(_TMP))
            else:
                a.fmla(self._v(acc), self._v(_PROD), self._v(_TMP))
        total = sums[0]
        if n > 1 and len(sums) > 1:
            a.fadd(self._v(total), self._v(total), self._v(sums[1]))
        if self.t.size == 4:
            a.faddp(self._v(total), self._v(total), self._v(total))
            a.faddp(self._s(total), VecReg(total, "s", 2))
        else:
            a.faddp(self._s(total), self._v(total))
        return total

    # ---------------------------------------------------------------- row update

    def _row_registers(self, n: int) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        naccs = self._row_vectors(n)
        return list(self.regs.work[1 : 1 + naccs]), list(self.regs.work[1 + naccs : 1 + 2 * naccs]), self._row_layout(n)

    def _row_load(self, loop: Loop, plan: RowUpdate, regs: tuple[list[int], list[int], list]) -> None:
        """The invariant factors' product (v30; where there are some, or nothing varies), the
        j-factors' product in the row registers, the pointers at x = 0."""
        a = self.a
        row, tmps, part = regs
        inner = loop.body[0]
        assert isinstance(inner, Loop)
        c = inner.body[0]
        assert isinstance(c, Compute)
        skip = {loop.index, inner.index}
        if plan.fixed or not plan.scalars:
            self._fixed_product(list(plan.fixed))
        for k, acc in enumerate(plan.row):
            self._address(acc, x9, skip=skip)
            for r, tmp, (off, width) in zip(row, tmps, part, strict=True):
                a.ldr(self._view(r if k == 0 else tmp, width), mem(x9, off))
                if k:
                    a.fmul(self._v(r), self._v(r), self._v(tmp))
        self._address(c.out, plan.out, skip=skip)
        for acc, base, _ in plan.scalars:
            self._address(acc, base, skip=skip)

    def _row_step(self, loop: Loop, plan: RowUpdate, regs: tuple[list[int], list[int], list]) -> None:
        """One x: the scalar factors' product (v28), the output row updated by FMAs, the pointers
        stepped along x."""
        a = self.a
        row, tmps, part = regs
        bc = _FIXED
        if plan.scalars:
            bc = _SCALAR
            for n, (_, base, _) in enumerate(plan.scalars):
                a.ldr(self._s(_SCALAR if n == 0 else _TMP), mem(base))
                if n:
                    a.fmul(self._v(_SCALAR), self._v(_SCALAR), self._v(_TMP))
            if plan.fixed:
                a.fmul(self._v(_SCALAR), self._v(_SCALAR), self._v(_FIXED))
        for r, tmp, (off, width) in zip(row, tmps, part, strict=True):
            a.ldr(self._view(tmp, width), mem(plan.out, off))
            a.fmla(self._v(tmp), self._v(r), self._elem(bc))
            a.str(self._view(tmp, width), mem(plan.out, off))
        add_imm(a, plan.out, plan.out_step, x14)
        for _, base, st in plan.scalars:
            add_imm(a, base, st, x14)
