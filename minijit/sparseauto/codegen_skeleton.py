"""The control flow of a compiled sparse nest, written once for every ISA: the dispatch of the nest's
nodes, the dense loop, the walk of one compressed level, the two-pointer merge of two, the fibre
bounds, the positions of dense sparse levels and the address of an access. The per-ISA emitters
(`codegen` for x86-64, `codegen_aarch64`) supply instructions only, through `SparseISA`, as the
dense loop nest's `minijit.kernels.loopnest.SeqEmitter` does for its loops.

The skeleton names four scratch registers ``w[0..3]`` of the ISA (x86-64: rax, rdx, rcx, rsi;
AArch64: x10-x13). Loop variables, positions, walk bounds and broadcast scalars live in stack slots
(an ISA's slot is opaque here), so the nest may be arbitrarily deep and branched; the ISA's own
inner loops (vectorized, stationary, row updates) keep theirs in registers.
"""

from __future__ import annotations

from typing import Any, Protocol

from minijit.sparseauto.emitter import NestEmitter, Program, walk_nodes
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Node, Operand, Temp

__all__ = ["PREFETCH_LINES", "PREFETCH_ROW_BYTES", "SparseISA", "Skeleton", "check_nest", "prefetch_ahead"]

#: walks prefetch the dense rows of a later position, up to this many bytes per row (`prefetch_ahead`)
PREFETCH_ROW_BYTES = 512  # an output row kept in registers across a loop (`codegen_rows`)
PREFETCH_LINES = 64  # cache lines a walk keeps in flight


def prefetch_ahead(lines: int) -> int:
    """How many positions ahead a walk that prefetches ``lines`` cache lines per position looks:
    about `PREFETCH_LINES` lines in flight, 4 to 16 positions."""
    return max(4, min(16, PREFETCH_LINES // max(1, lines)))


Reg = Any  # an ISA's general-purpose register
Slot = Any  # an ISA's stack slot (x86-64: a qword memory operand; AArch64: a byte offset from sp)


class SparseISA(Protocol):
    """The instructions the skeleton asks of an ISA (registers are 64-bit general-purpose ones)."""

    w: tuple[Reg, Reg, Reg, Reg]  # the skeleton's scratch registers

    a: Any  # the ISA's assembler: ``new_label``, ``label`` and ``bind`` (the labels), code

    def load(self, r: Reg, slot: Slot) -> None:
        """r = the stack slot."""

    def store(self, slot: Slot, r: Reg) -> None:
        """The stack slot = r."""

    def zero(self, r: Reg) -> None:
        """r = 0."""

    def load_arg(self, r: Reg, index: int) -> None:
        """r = entry ``index`` of the args block."""

    def load_u32(self, dst: Reg, base: Reg, idx: Reg, disp: int = 0) -> None:
        """dst = the uint32 at base + 4 * idx + disp (bytes), zero-extended."""

    def cmp_slot(self, r: Reg, slot: Slot) -> None:
        """Compare r with a stack slot (signed)."""

    def cmp_imm(self, r: Reg, imm: int) -> None:
        """Compare r with a non-negative immediate (signed)."""

    BRANCHES: dict[str, str]  # the assembler's branch per condition: "lt", "ge", "gt" (signed), "always"

    def inc(self, r: Reg) -> None:
        """r += 1."""

    def inc_slot(self, slot: Slot) -> None:
        """The stack slot += 1."""

    def mul_imm(self, r: Reg, imm: int) -> None:
        """r *= imm."""

    def add_slot(self, r: Reg, slot: Slot) -> None:
        """r += the stack slot."""

    def move_plus(self, dst: Reg, src: Reg | Slot, imm: int) -> None:
        """dst = a register or a stack slot, plus a non-negative immediate."""

    def cmp_arg(self, r: Reg, index: int) -> None:
        """Compare r with entry ``index`` of the args block (signed)."""

    def row_address(self, dst: Reg, idx: Reg, row_bytes: int, base: int | Reg) -> None:
        """dst = ``base`` (entry ``base`` of the args block, an address, or a register) + idx *
        row_bytes."""

    def prefetch(self, r: Reg, disp: int) -> None:
        """Prefetch the cache line at r + disp (bytes) for reading; never faults."""

    def add_scaled(self, r: Reg, idx: Reg, step: int) -> None:
        """r += idx * step (idx may be clobbered)."""

    def scale_add(self, r: Reg, base: Reg, scale: int) -> None:
        """r = base + r * scale (scale 4 or 8)."""

    def prologue(self) -> None:
        """Enter the function: save registers, make the frame, keep args/begin/end."""

    def epilogue(self) -> None:
        """Leave the function (after the nest), with what the code needs after it."""


def check_nest(nest: Nest, extents: dict[str, int], isa: str, isas: tuple[str, ...]) -> None:
    """ValueError, before any code, for an ISA outside ``isas``, an invalid nest or an index
    without an extent."""
    if isa not in isas:
        raise ValueError(f"isa must be one of {isas}, got {isa!r}")
    nest.validate()
    for i in {i for o in nest.operands for i in o.indices}:
        if i not in extents:
            raise ValueError(f"no extent for index {i!r}")


class Skeleton(NestEmitter):
    """The nest's control flow against `SparseISA` (the subclass is the ISA). Inner-loop stages an
    ISA does not have are the hooks' defaults here: no stationary row, no row update, no strided
    loop; `_loop_kind` says which innermost loops the ISA vectorizes. The ISA's innermost loops
    start with `_inner_prologue`, which asks for ``PTR_REGS`` (the pointer registers of an
    innermost loop) and ``_scalar_product(factors, slot)`` (a stack slot = a product of scalar
    factors, 1.0 for none)."""

    begin: Slot
    end: Slot

    def _layout(self, slot: Any) -> None:
        """The stack slots of the loop variables: a coordinate per index, a position per sparse
        level, two bounds per loop (``slot(name)`` allocates one); and the split of the top loop."""
        indices = sorted({i for o in self.nest.operands for i in o.indices})
        self.coord = {i: slot(f"coord_{i}") for i in indices}
        self.pos = {(o.name, k): slot(f"pos_{o.name}_{k}") for o in self.sparse.values() for k in range(len(o.levels))}
        self.ends = [(slot(f"end{n}_a"), slot(f"end{n}_b")) for n in range(len(self.loops))]
        self.split = self._split()

    # ---------------------------------------------------------------- labels (every assembler's)

    def new_label(self, name: str) -> Any:
        """An unbound label."""
        return self.a.new_label(name)

    def here(self, name: str) -> Any:
        """A label bound at the current position."""
        return self.a.label(name)

    def bind(self, label: Any) -> None:
        """Bind a label of `new_label`."""
        self.a.bind(label)

    def branch(self, cond: str, label: Any) -> None:
        """Branch on the last compare ("lt", "ge", "gt": signed) or always ("always")."""
        getattr(self.a, self.BRANCHES[cond])(label)

    def jump(self, label: Any) -> None:
        self.branch("always", label)

    def cmp_reg(self, r: Reg, other: Reg) -> None:
        """Compare two registers (every assembler's ``cmp``)."""
        self.a.cmp(r, other)

    # ---------------------------------------------------------------- hooks an ISA may fill

    def _loop_kind(self, loop: Loop) -> str | None:
        """How this ISA compiles an innermost loop: "vector", "strided" or None (scalar)."""
        return self._inner_kind(loop)

    def _stored_whole(self, temp: Temp, nxt: Node | None) -> bool:
        return False

    def _stationary_inner(self, loop: Loop) -> Loop | None:
        return None

    def _row_update_plan(self, loop: Loop) -> Any:
        return None

    def _prefetch_ahead(self, lines: int) -> int:
        return prefetch_ahead(lines)

    # ---------------------------------------------------------------- program

    def program(self) -> Program:
        self.prologue()
        self._nodes(self.nest.body, top=True)
        self.epilogue()
        return Program(self.a, self.slots, dict(self.temp_sizes), self.split, tuple(self.vectorized))

    def _nodes(self, nodes: tuple[Node, ...], top: bool = False) -> None:
        for k, node in enumerate(nodes):
            split = self._split_here(node, top)  # the loop threads split: its own range only
            if isinstance(node, Temp):
                if not self._stored_whole(node, nodes[k + 1] if k + 1 < len(nodes) else None):
                    self._zero_temp(node)
            elif isinstance(node, Compute):
                self._compute(node)
            elif getattr(self, "_stationary", None) is not None and node is self._stationary[0]:
                self._accumulate(node)
            elif not split and self._loop_kind(node) == "vector":
                self._vector_loop(node)
            elif not split and self._loop_kind(node) == "strided":
                self._strided_loop(node)
            elif self._stationary_inner(node) is not None:
                self._stationary_loop(node, split)
            elif not split and (row := self._row_update_plan(node)) is not None:
                self._row_update_loop(node, row)
            else:
                self._loop(node, split)

    # ---------------------------------------------------------------- addresses and positions

    def _base(self, reg: Reg, tensor: str, part: str, level: int | None = None) -> None:
        """reg = address of ``tensor``'s ``part`` (from the args block)."""
        self.load_arg(reg, self.arg[(tensor, part, level)])

    def _enter_iteration(self, loop: Loop) -> None:
        """Positions of dense levels at the loop's index: parent * size + coordinate."""
        r = self.w[0]
        for o, k in self._dense_levels(loop):
            if k == 0:
                self.load(r, self.coord[loop.index])
            else:
                self.load(r, self.pos[(o.name, k - 1)])
                self.mul_imm(r, self.ext[loop.index])
                self.add_slot(r, self.coord[loop.index])
            self.store(self.pos[(o.name, k)], r)

    def _address(self, acc: Access, reg: Reg, skip: str | set[str] | None = None) -> None:
        """reg = address of the element ``acc`` refers to (``skip``: leave that index, or those
        indices, out, i.e. at 0); uses w[0]."""
        es, scratch = self.es, self.w[0]
        skipped = {skip} if isinstance(skip, str) else set(skip or ())
        sparse = self.sparse.get(acc.tensor)
        if acc.tensor == self.nest.output.name:
            sparse = self.sampled  # a sparse output is stored at the sampled operand's positions
        if sparse is not None:
            level, row = self.out_row if acc.tensor == self.nest.output.name else (len(sparse.levels) - 1, 1)
            self.load(reg, self.pos[(sparse.name, level)])
            if row != 1:  # a fibre output: its dense row under that position
                self.mul_imm(reg, row)
            self._base(scratch, acc.tensor, "vals")
            self.scale_add(reg, scratch, es)
        else:
            self._base(reg, acc.tensor, "temp" if acc.tensor in self.temp_sizes else "data")
        for i in acc.indices:
            if i in skipped or i not in self.strides.get(acc.tensor, ()):
                continue
            self.load(scratch, self.coord[i])
            self.add_scaled(reg, scratch, self.strides[acc.tensor][i] * es)

    def _fibre(self, o: Operand, k: int, lo: Reg, hi: Reg) -> None:
        """lo, hi = the position range of level k's fibre under the parent position (uses w[0],
        w[2]; ``lo`` may not be w[0])."""
        idx, base = self.w[0], self.w[2]
        if k == 0:
            self.zero(idx)
        else:
            self.load(idx, self.pos[(o.name, k - 1)])
        self._base(base, o.name, "pos", k)
        self.load_u32(lo, base, idx)
        self.load_u32(hi, base, idx, 4)

    # ---------------------------------------------------------------- innermost loops

    def _inner_prologue(
        self, stmts: tuple[Compute, ...], j: str, with_out: bool = True
    ) -> list[tuple[Reg | None, list[Reg]]]:
        """Before an innermost loop over j: each statement's product of the factors without j in
        its stack slot, and pointers (at j = 0) to its accesses with j: (out or None, factors);
        ``with_out=False`` leaves the out pointer (None)."""
        for s, c in enumerate(stmts):
            self._scalar_product([x for x in c.ins if j not in x.indices], self.bcast[s])
        regs = iter(self.PTR_REGS)
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

    # ---------------------------------------------------------------- loops

    def _next(self, counter: Slot, end: Slot | int, top: Any) -> None:
        """Loop latch: counter += 1; back to ``top`` while counter < end (a slot or an immediate)."""
        r = self.w[0]
        self.load(r, counter)
        self.inc(r)
        self.store(counter, r)
        self._cmp_bound(r, end)
        self.branch("lt", top)

    def _cmp_bound(self, r: Reg, end: Slot | int) -> None:
        """Compare r with a loop bound: an `_Imm` immediate or a stack slot."""
        if isinstance(end, _Imm):
            self.cmp_imm(r, int(end))
        else:
            self.cmp_slot(r, end)

    def _dense_loop(self, loop: Loop, split: bool) -> None:
        """dense_<i>: for i in 0..extent (or begin..end)."""
        r, c = self.w[0], self.coord[loop.index]
        end = self.end if split else _Imm(self.ext[loop.index])  # a stack slot or an immediate
        done = self.new_label(f"dense_{loop.index}_done")
        if split:
            self.load(r, self.begin)
        else:
            self.zero(r)
        self.store(c, r)
        self._cmp_bound(r, end)
        self.branch("ge", done)
        top = self.here(f"dense_{loop.index}")
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._next(c, end, top)
        self.bind(done)

    def _walk_loop(self, loop: Loop, o: Operand, split: bool) -> None:
        """walk_<T>_<i>: for p in pos[parent]..pos[parent+1]: i = crd[p]."""
        idx, lo, crd = self.w[0], self.w[1], self.w[2]
        k = o.indices.index(loop.index)
        p, end = self.pos[(o.name, k)], self.ends[self.loop_id[id(loop)]][0]
        done = self.new_label(f"walk_{o.name}_{loop.index}_done")
        if split:  # the caller's range of level-0 positions
            self.load(lo, self.begin)
            self.load(idx, self.end)
        else:
            self._fibre(o, k, lo, idx)
        self.store(p, lo)
        self.store(end, idx)
        self.cmp_reg(lo, idx)
        self.branch("ge", done)
        top = self.here(f"walk_{o.name}_{loop.index}")
        self._prefetch_rows(loop, o, k, p)
        self.load(idx, p)
        self._base(crd, o.name, "crd", k)
        self.load_u32(idx, crd, idx)
        self.store(self.coord[loop.index], idx)
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._next(p, end, top)
        self.bind(done)

    def _prefetch_rows_of(self, loop: Loop) -> list[tuple[str, int]]:
        """The dense operands a walk over ``loop`` prefetches (their first index is the walked
        one: random rows of B in SpMM, of C and D in SDDMM) and their row bytes."""
        read = {x.tensor: x for c in walk_nodes(loop.body) if isinstance(c, Compute) for x in c.ins}
        return [
            (x.tensor, self.strides[x.tensor][loop.index] * self.es)
            for x in read.values()
            if x.tensor in self.strides and x.tensor not in self.temp_sizes and x.indices[:1] == (loop.index,)
        ]

    def _prefetch_rows(
        self, loop: Loop, o: Operand, k: int, p: Reg | Slot, held: tuple[Reg, Reg, tuple[Reg, ...]] | None = None
    ) -> None:
        """prefetch_<i>: the rows that iteration p + `prefetch_ahead` of the walk will read
        (`_prefetch_rows_of`): their cache misses overlap this iteration's work. Positions past
        the fibre (the next fibres, walked next) count; only positions inside ``crd`` are
        looked up, and a prefetch never faults. ``p``: the position, a register or a slot;
        ``held``: registers holding the level's ``crd`` and its size and the rows' bases (else
        they are read from the args block)."""
        idx, row, crd = self.w[0], self.w[1], self.w[2]
        rows = self._prefetch_rows_of(loop)
        if not rows:
            return
        lines = sum(-(-min(row_bytes, PREFETCH_ROW_BYTES) // 64) for _, row_bytes in rows)
        skip = self.new_label(f"prefetch_{loop.index}_skip")
        self.here(f"prefetch_{loop.index}")
        self.move_plus(idx, p, self._prefetch_ahead(lines))  # the next fibres follow in crd: look past this one
        if held is None:
            self.cmp_arg(idx, self.arg[(o.name, "size", k)])
        else:
            self.cmp_reg(idx, held[1])
        self.branch("ge", skip)
        if held is None:
            self._base(crd, o.name, "crd", k)
        self.load_u32(crd, crd if held is None else held[0], idx)  # the coordinate that many positions on
        for n, (tensor, row_bytes) in enumerate(rows):
            base = self.arg[(tensor, "data", None)] if held is None else held[2][n]
            self.row_address(row, crd, row_bytes, base)
            for line in range(0, min(row_bytes, PREFETCH_ROW_BYTES), 64):
                self.prefetch(row, line)
        self.bind(skip)

    def _merge_loop(self, loop: Loop, o1: Operand, o2: Operand) -> None:
        """merge_<i>: two-pointer intersection of two compressed levels' coordinates."""
        q1, q2, c1, c2 = self.w[0], self.w[1], self.w[2], self.w[3]
        k1, k2 = o1.indices.index(loop.index), o2.indices.index(loop.index)
        p1, p2 = self.pos[(o1.name, k1)], self.pos[(o2.name, k2)]
        e1, e2 = self.ends[self.loop_id[id(loop)]]
        for o, k, p, e in ((o1, k1, p1, e1), (o2, k2, p2, e2)):
            self._fibre(o, k, q2, c2)
            self.store(p, q2)
            self.store(e, c2)
        done = self.new_label(f"merge_{loop.index}_done")
        adv1 = self.new_label(f"merge_{loop.index}_next_{o1.name}")
        adv2 = self.new_label(f"merge_{loop.index}_next_{o2.name}")
        top = self.here(f"merge_{loop.index}")
        for q, p, e in ((q1, p1, e1), (q2, p2, e2)):  # either fibre done: the intersection is
            self.load(q, p)
            self.cmp_slot(q, e)
            self.branch("ge", done)
        self._base(c1, o1.name, "crd", k1)
        self.load_u32(c1, c1, q1)
        self._base(c2, o2.name, "crd", k2)
        self.load_u32(c2, c2, q2)
        self.cmp_reg(c1, c2)
        self.branch("lt", adv1)
        self.branch("gt", adv2)
        self.store(self.coord[loop.index], c1)  # both hold the coordinate: the body runs
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self.inc_slot(p2)
        self.bind(adv1)
        self.inc_slot(p1)
        self.jump(top)
        self.bind(adv2)
        self.inc_slot(p2)
        self.jump(top)
        self.bind(done)


class _Imm(int):
    """An immediate loop bound (AArch64 slots are integers too)."""
