"""The loops that keep an output row in vector registers, planned and driven once for every ISA: a
stationary loop (SpMM's row of C across the walk of a row of A), its tight form (position, bounds,
base pointers and invariant factors in registers, two accumulator sets alternating: ``paired``),
the fused dot product of SDDMM-SpMM, the row update (TTMc's ``A(i,l,m) += C(j,l)*T(m)``, the row
``T`` held in registers across ``l``) and the temporary a stationary row stores whole.

`RowLoops` is a mixin of a `codegen_skeleton.Skeleton` emitter. What it asks of the ISA, beyond
`codegen_skeleton.SparseISA`:

* ``TIGHT_REGS``: the general-purpose registers a tight loop or a row update may hold;
* ``regs.work``: the vector registers (``work[0]`` scratch, ``work[1:]`` accumulators);
* ``lanes``: elements per vector; ``_row_vectors(n)``: vector registers a row of n elements takes;
  ``_prefix_fits(statements, naccs)``: whether vectorized loops of that many statements may run
  before the inner loop of a stationary row of ``naccs`` registers;
  ``_scalable(step)``: whether an address scales an index by ``step`` bytes itself;
* ``FUSED_DOT``: whether the ISA fuses a dot product into a tight loop (`_fused_dot`);
* the emission: ``_row_accumulators``, ``_vzero``, ``_vsum``, ``_row_finish``, ``_tight_setup``
  (after `_tight_pointers`),
  ``_tight_step``, ``_accumulate_row``, ``_row_registers``, ``_row_load``, ``_row_step`` and
  ``set_count`` (r = a non-negative 32-bit immediate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minijit.sparseauto.nest import Access, Compute, Loop, Node, Temp

__all__ = ["RowLoops", "RowUpdate", "Tight"]

Reg = Any


@dataclass(frozen=True)
class Tight:
    """The registers of a tight stationary loop: position/counter, end, the walked level's
    ``crd``, the variant scalar factors with their bases and byte strides along the loop's index
    (negative: the walked operand's values, indexed by position), the invariant scalar factors,
    the j-factors with their bases and strides (0: invariant), the offset registers of
    strides an address cannot scale, and a fused dot product's factors (`RowLoops._fused_dot`)."""

    p: Reg
    end: Reg
    crd: Reg | None
    scalars: tuple[tuple[Access, Reg, int], ...]
    fixed: tuple[Access, ...]
    vectors: tuple[tuple[Access, Reg, int], ...]
    offsets: dict[int, Reg]
    dots: tuple[tuple[Access, Reg, int], ...] = ()
    dot_index: str | None = None
    #: registers holding the walked level's size and the prefetched rows' bases (`PREFETCH_HOLDS`)
    prefetch: tuple[Reg, tuple[Reg, ...]] | None = None


@dataclass(frozen=True)
class RowUpdate:
    """The registers of a row update (`_row_update_loop`): counter, end, the output row's pointer
    and byte step along the loop's index, the variant scalar factors' pointers and steps, the
    invariant scalar factors, and the j-factors held in registers."""

    p: Reg
    end: Reg
    out: Reg
    out_step: int
    scalars: tuple[tuple[Access, Reg, int], ...]
    fixed: tuple[Access, ...]
    row: tuple[Access, ...]


class RowLoops:
    """The plans and the control flow of the row-in-registers loops (see the module doc)."""

    FUSED_DOT = True
    PREFETCH_HOLDS = False  # a tight walk holds its prefetch's size and row bases in registers
    #: (inner loop, accumulators, the ISA's tail) while emitting a loop whose output stays in registers
    _stationary: tuple[Loop, list[Any], Any] | None = None
    _stationary_prefix = False  # the stationary loop's body has nodes before its inner loop
    _store_row: Loop | None = None  # a stationary loop that stores its row (`_stored_whole`)

    # ---------------------------------------------------------------- plans

    def _stored_whole(self, temp: Temp, nxt: Node | None) -> bool:
        """True (and ``nxt`` marked to store its row instead of adding it) when ``nxt`` is a
        stationary loop whose row is the whole temporary ``T<j>`` (TTMc's ``T(m) += B*D(k,m)``
        over a fibre): its accumulators start at zero, so storing them zeroes ``T`` too."""
        if not isinstance(nxt, Loop) or len(temp.indices) != 1:
            return False
        inner = self._stationary_inner(nxt)
        if inner is None or inner.index != temp.indices[0]:
            return False
        c = inner.body[0]
        if not isinstance(c, Compute) or c.out.tensor != temp.name or c.out.indices != temp.indices:
            return False
        if self.temp_sizes[temp.name] != self.ext[inner.index]:
            return False
        self._store_row = nxt
        return True

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
        if self._loop_kind(inner) != "vector" or len(inner.body) != 1:
            return None
        c = inner.body[0]
        assert isinstance(c, Compute)
        if loop.index in c.out.indices or inner.index not in c.out.indices:
            return None
        if any(x.tensor == c.out.tensor for x in c.ins):
            return None
        naccs = self._row_vectors(self.ext[inner.index])
        if naccs > len(self.regs.work) - 1:
            return None
        for node in loop.body[:-1]:
            if isinstance(node, Temp):
                continue
            if not isinstance(node, Loop) or self._loop_kind(node) != "vector":
                return None
            stmts = node.body
            if any(x.tensor == c.out.tensor for s in stmts for x in (s.out, *s.ins)):  # type: ignore[union-attr]
                return None
            if not self._prefix_fits(len(stmts), naccs):
                return None
        return inner

    def _tight_plan(self, loop: Loop, inner: Loop) -> Tight | None:
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
        regs = iter(self.TIGHT_REGS)
        try:
            p, end = next(regs), next(regs)
            crd = next(regs) if walked else None

            def along(acc: Access) -> int:
                return self.strides[acc.tensor].get(x, 0) * self.es

            scalars: list[tuple[Access, Reg, int]] = []  # variant scalar factors: base, stride along x
            fixed: list[Access] = []  # scalar factors that do not change in the loop
            vectors: list[tuple[Access, Reg, int]] = []  # j-factors: (access, base, byte stride along x)
            for acc in c.ins:
                if acc.tensor == temp:
                    continue  # the dot product's value, in a register
                if inner.index in acc.indices:
                    vectors.append((acc, next(regs), along(acc)))
                elif walked and acc.tensor == walked[0].name:  # the walked operand's values, by position
                    if walked[0].indices[-1] != x:
                        return None
                    scalars.append((acc, next(regs), -self.es))  # negative: indexed by position
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
                if not self._scalable(step):
                    offsets[step] = next(regs)
        except StopIteration:
            return None
        index = None if dot is None else loop.body[1].index  # type: ignore[union-attr]
        held = None
        if walked and self.PREFETCH_HOLDS and (rows := self._prefetch_rows_of(loop)):
            try:
                held = (next(regs), tuple(next(regs) for _ in rows))
            except StopIteration:
                held = None  # the prefetch reads them from the args block
        return Tight(p, end, crd, tuple(scalars), tuple(fixed), tuple(vectors), offsets, dots, index, held)

    def _fused_dot(self, loop: Loop, inner: Loop) -> Compute | None:
        """The dot product of a body ``[Temp T<>, for k: T() += x(k)*y(k)..., inner]`` whose inner
        statement reads ``T()`` once and nothing else touches T, every factor dense with k (no
        scalar part), k a whole number of vectors (at most 16) and a vector register left for
        its accumulator; else None (always on an ISA without ``FUSED_DOT``)."""
        if len(loop.body) != 3 or not self.FUSED_DOT:
            return None
        temp, dl, _ = loop.body
        if not isinstance(temp, Temp) or temp.indices or not isinstance(dl, Loop) or len(dl.body) != 1:
            return None
        d, c = dl.body[0], inner.body[0]
        assert isinstance(c, Compute)
        if not isinstance(d, Compute) or self._loop_kind(dl) != "vector" or d.out.tensor != temp.name:
            return None
        if any(dl.index not in acc.indices or acc.tensor == temp.name for acc in d.ins):
            return None
        if [acc.tensor for acc in c.ins].count(temp.name) != 1 or c.out.tensor == temp.name:
            return None
        n = self.ext[dl.index]
        assert self._stationary is not None
        free = len(self.regs.work) - 1 - len(self._stationary[1])
        if n == 0 or n % self.lanes or n // self.lanes > 16 or free < 1:
            return None
        return d

    def _second_accumulators(self, plan: Tight, accs: list[Any]) -> list[Any]:
        """A second set of accumulators for a tight loop, positions alternating between the two
        sets so that each FMA chain waits on every other position only; [] where the registers
        do not allow it or a fused dot product uses them."""
        second = list(self.regs.work[1 + len(accs) : 1 + 2 * len(accs)])
        return second if not plan.dots and len(second) == len(accs) else []

    def _row_update_plan(self, loop: Loop) -> RowUpdate | None:
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
        if self._loop_kind(inner) != "vector" or len(inner.body) != 1:
            return None
        c = inner.body[0]
        assert isinstance(c, Compute)
        x, j = loop.index, inner.index
        if not self._contiguous(c.out, j) or any(acc.tensor == c.out.tensor for acc in c.ins):
            return None

        def step(acc: Access) -> int:
            return self.strides[acc.tensor].get(x, 0) * self.es if x in acc.indices else 0

        if step(c.out) == 0:
            return None  # the output row does not move with x: a stationary loop's case
        row = tuple(acc for acc in c.ins if j in acc.indices)
        if not row or any(x in acc.indices for acc in row):
            return None
        naccs = self._row_vectors(self.ext[j])
        if 2 * naccs + 1 > len(self.regs.work):
            return None
        regs = iter(self.TIGHT_REGS)
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
        return RowUpdate(p, end, out, step(c.out), tuple(scalars), fixed, row)

    # ---------------------------------------------------------------- control flow

    def _stationary_loop(self, loop: Loop, split: bool) -> None:
        """stationary_<j>: zero accumulators for the output row, run ``loop`` with the inner loop
        accumulating into them (`_accumulate`, or the tight loop), then add them to the output
        row once (store them, when the row is a whole temporary the loop sets first)."""
        inner = self._stationary_inner(loop)
        assert inner is not None
        c = inner.body[0]
        assert isinstance(c, Compute)
        n, j = self.ext[inner.index], inner.index
        accs, part = self._row_accumulators(n)
        self.here(f"stationary_{j}")
        self._vzero(accs)
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
        store = self._store_row is loop  # the row is a whole temporary this loop sets first
        if store:
            self._store_row = None
        self._row_finish(c, j, accs, part, store)

    def _accumulate(self, inner: Loop) -> None:
        """acc_<j>: the inner statement of a stationary loop on the general path: acc[j] += s *
        x[j] * ... (the scalar product in its slot, pointers to the j-factors; the ISA's
        `_accumulate_row` then updates the accumulators)."""
        assert self._stationary is not None
        _, accs, part = self._stationary
        c = inner.body[0]
        assert isinstance(c, Compute)
        ((_, jf),) = self._inner_prologue((c,), inner.index, with_out=False)
        self._accumulate_row(inner.index, jf, accs, part)

    def _tight_loop(self, loop: Loop, inner: Loop, split: bool, plan: Tight) -> None:
        """tight_walk_<T>_<x> / tight_dense_<x>: a stationary loop with its counter, bounds, base
        pointers and loop-invariant scalar factors in registers (`_tight_setup`): per iteration
        (`_tight_step`) only the coordinate, a fused dot product, the variant factors' product
        and its broadcast, and the accumulating FMAs; two accumulator sets alternate
        (``_pairs_done``) where the registers allow."""
        assert self._stationary is not None
        _, accs, part = self._stationary
        x, walked = loop.index, self.nest.walks(loop)
        name = f"tight_walk_{walked[0].name}_{x}" if walked else f"tight_dense_{x}"
        done = self.new_label(f"{name}_done")
        # bounds: the fibre under the parent, or 0..extent (never a split top loop: threads split
        # a loop over an output index, and a stationary loop's output does not have its index)
        assert not split
        if walked:
            o = walked[0]
            self._fibre(o, o.indices.index(x), plan.p, plan.end)
        else:
            self.zero(plan.p)
            self.set_count(plan.end, self.ext[x])
        self.cmp_reg(plan.p, plan.end)
        self.branch("ge", done)
        self._tight_pointers(loop, inner, plan)
        self._tight_setup(loop, inner, plan)
        if plan.dot_index is not None:
            self.vectorized.append(plan.dot_index)
        second = self._second_accumulators(plan, accs)
        paired = bool(second)
        if paired:
            self._vzero(second)
        top = self.here(name)
        self._tight_step(loop, plan, accs, part)
        if paired:
            rest = self.new_label(f"{name}_pairs_done")
            self.inc(plan.p)
            self.cmp_reg(plan.p, plan.end)
            self.branch("ge", rest)
            self._tight_step(loop, plan, second, part)
        self.inc(plan.p)
        self.cmp_reg(plan.p, plan.end)
        self.branch("lt", top)
        if paired:
            self.bind(rest)
            self._vsum(accs, second)
        self.bind(done)

    def _row_update_loop(self, loop: Loop, plan: RowUpdate) -> None:
        """row_<x>_<j>: load the j-factors' product into registers once (`_row_load`), then per
        x broadcast the scalar factors' product and update the output row (`_row_step`), the
        pointers stepping by their strides along x."""
        inner = loop.body[0]
        assert isinstance(inner, Loop)
        x, j = loop.index, inner.index
        n = self.ext[j]
        self.vectorized.append(j)
        regs = self._row_registers(n)
        self.here(f"row_{x}_{j}")
        if self.ext[x] == 0 or n == 0:
            return
        self._row_load(loop, plan, regs)
        self.zero(plan.p)
        self.set_count(plan.end, self.ext[x])
        top = self.here(f"row_{x}_{j}_loop")
        self._row_step(loop, plan, regs)
        self.inc(plan.p)
        self.cmp_reg(plan.p, plan.end)
        self.branch("lt", top)

    def _tight_pointers(self, loop: Loop, inner: Loop, plan: Tight) -> None:
        """A tight loop's base pointers: the walked level's ``crd``, the row factors' and the
        scalar factors' (x's own offset left out; the walked operand's values by position), a
        fused dot product's, and what its prefetch holds."""
        x, walked = loop.index, self.nest.walks(loop)
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
        if plan.prefetch is not None:
            o = walked[0]
            size, bases = plan.prefetch
            self.load_arg(size, self.arg[(o.name, "size", o.indices.index(x))])
            for (tensor, _), base in zip(self._prefetch_rows_of(loop), bases, strict=True):
                self._base(base, tensor, "data")
