"""Compile a sparse loop nest (`minijit.sparseauto.nest.Nest`) to x86-64 machine code, AVX2+FMA
or AVX-512 (F, VL): one generator, the ISA fixed at the top by its `Target` (ymm vectors of 8 fp32 /
4 fp64 lanes, 16 registers, ``vmaskmov`` tails with a mask table after the code; or zmm vectors of
16 fp32 / 8 fp64 lanes, 32 registers, opmask ``k1`` tails), the vector registers by
`minijit.sparseauto.codegen_inner.vec_regs`.

The emitted function is

    void nest(const int64_t* args, int64_t begin, int64_t end)

``args`` holds one address per storage array, in the order of `arg_slots` (per sparse operand:
``pos``/``crd`` and the length of ``crd`` of each compressed level, then ``vals``; per dense
operand its data; the output's data, or its ``vals`` when it samples a sparse operand's
pattern; one buffer per temporary). When `Program.split` is set the top loop runs only
iterations ``[begin, end)`` of its space (coordinates of a dense loop, positions of a
compressed walk), so threads can share the nest; otherwise ``begin``/``end`` are ignored.
Dense operands, the dense output and the temporaries are C-ordered over their indices; all
values share one dtype (float32 or float64); ``pos``/``crd`` are int32.

How each node compiles (the stages name the labels of the listing):

* **Loop, dense** (``dense_<i>``): the coordinate counts ``0..extent``.
* **Loop, one compressed level** (``walk_<T>_<i>``): the positions ``pos[parent]..pos[parent+1]``
  of that level; the coordinate is ``crd[p]``. Each iteration first prefetches (``prefetch_<i>``)
  the dense rows indexed by the coordinate some positions ahead (`prefetch_ahead`).
* **Loop, two compressed levels** (``merge_<i>``): a two-pointer intersection of the coordinates.
* On entering an iteration, the position of every sparse operand whose *dense* level is the
  loop's index becomes ``parent * size + coordinate``.
* **Temp** (``zero_<T>``): the temporary's buffer is zeroed with vector stores.
* **Compute, scalar** (``out += a*b*...``): addresses from coordinates and strides (dense) or the
  last level's position (sparse).
* **Innermost dense loop, vectorized** (``vec_<j>``, ``vtail``): when every access that uses
  ``j`` is dense with ``j`` last (stride 1) the loop runs over vectors: the factors without
  ``j`` are multiplied once and broadcast, each statement is an axpy-like update
  ``out[j] += s * x[j] * ...`` or a dot product ``out += s * sum_j x[j] * ...`` (vector
  accumulators, summed horizontally after the loop); the last ``extent % lanes`` elements run
  as one masked vector (``vmaskmov`` on AVX2, an opmask ``k1`` load/store on AVX-512).
* **Output row in registers** (``stationary_<j>``, ``acc_<j>``): a loop whose body ends with
  one vectorizable axpy-like loop over j whose output does not depend on the loop's index
  (SpMM's row of C across the walk of a row of A) accumulates in up to 11 (AVX2) or 28 (AVX-512)
  vector registers and
  adds them to memory once after the loop. Temporaries and vectorizable loops that leave that
  output alone may come first in the body (the fused SDDMM-SpMM: a dot product per j, then the
  axpy); their loops then use only the vector registers the accumulators leave.
* **Tight stationary loop** (``tight_walk_<T>_<i>``, ``tight_dense_<i>``, ``dot_<k>``): a stationary
  loop whose body is the inner loop alone, or a scalar temporary, the dot product that fills it
  and the inner loop that reads it (the fused SDDMM-SpMM), keeps its position, bounds, base
  pointers and loop-invariant scalar factors in registers; the dot product is unrolled and its
  sum stays in a register (`codegen_inner._tight_plan`).
* Vectorized loops take two registers per statement and unrolled vector (FMA with a memory
  operand for a dot product's last factor).
* **Innermost dense loop, strided** (``strided_<j>``): when the accesses that use ``j`` are
  dense but not all unit-stride, the same statements run one element at a time with every
  pointer advanced by its stride (no address arithmetic per element).

Everything else (loop variables, positions, walk bounds, broadcast scalars) lives in stack slots,
so the nest may be arbitrarily deep and branched; the innermost loops, and the tight stationary
loops around them, run in registers.
"""

from __future__ import annotations

from asm.x86_64 import XMM, Assembler, Gpr, Label, Mem, Vec, dword, ptr, qword
from asm.x86_64.registers import r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import Frame, Partial, Target, counted_loop, emit_mask_table
from minijit.sparseauto.codegen_inner import (
    _MAX_VEC_STATEMENTS,
    _PTR_REGS,
    ISAS,
    PREFETCH_ROW_BYTES,
    SIGNATURE,
    InnerLoops,
    prefetch_ahead,
    vec_regs,
)
from minijit.sparseauto.emitter import ArgSlot, NestEmitter, Program, arg_slots, sampled_operand, walk_nodes
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Node, Operand, Temp

__all__ = ["SIGNATURE", "ISAS", "ArgSlot", "Program", "arg_slots", "compile_nest", "sampled_operand"]


class _Emitter(NestEmitter, InnerLoops):
    """Walks the nest once and emits its code; one instance per compiled program."""

    MAX_VEC_STATEMENTS = _MAX_VEC_STATEMENTS
    POINTER_REGS = len(_PTR_REGS)

    def __init__(self, nest: Nest, extents: dict[str, int], dtype: str, isa: str) -> None:
        self._analyse(nest, extents)
        self.t = Target.of(dtype, isa)
        self.regs = vec_regs(self.t)
        self.a = Assembler(name=f"sparse_nest_{isa}_{dtype}")
        for name, st in self.strides.items():  # byte strides are 32-bit immediates of the code
            if any(v * self.t.es > 2**31 - 1 for v in st.values()):
                raise ValueError(f"dense tensor {name}: a stride of 2 GiB or more is not supported (extents {extents})")
        self.frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
        f = self.frame
        indices = sorted({i for o in nest.operands for i in o.indices})
        self.coord = {i: f.slot(f"coord_{i}") for i in indices}
        self.pos = {
            (o.name, k): f.slot(f"pos_{o.name}_{k}") for o in self.sparse.values() for k in range(len(o.levels))
        }
        self.ends = [(f.slot(f"end{n}_a"), f.slot(f"end{n}_b")) for n in range(len(self.loops))]
        for c in range(_MAX_VEC_STATEMENTS):
            f.slot(f"bcast{c}")
        self.bcast = [f.slots[f"bcast{c}"] for c in range(_MAX_VEC_STATEMENTS)]  # stack offsets
        self.begin, self.end = f.slot("begin"), f.slot("end")
        self.table = None  # AVX2 mask table label, emitted after the code when used
        #: (inner loop, accumulators, partial) while emitting a loop whose output stays in registers
        self._stationary: tuple[Loop, list[Vec], Partial | None] | None = None
        self._stationary_prefix = False  # the stationary loop's body has nodes before its inner loop
        self._store_row: Loop | None = None  # a stationary loop that stores its row (`_stored_whole`)
        self.split = self._split()

    # ---------------------------------------------------------------- helpers

    def _base(self, reg: Gpr, tensor: str, part: str, level: int | None = None) -> None:
        """reg = address of ``tensor``'s ``part`` (from the args block)."""
        self.a.mov(reg, qword(rbx + 8 * self.arg[(tensor, part, level)]))

    def _enter_iteration(self, loop: Loop) -> None:
        """Positions of dense levels at the loop's index: parent * size + coordinate."""
        a = self.a
        for o, k in self._dense_levels(loop):
            if k == 0:
                a.mov(rax, self.coord[loop.index])
            else:
                a.mov(rax, self.pos[(o.name, k - 1)])
                a.imul(rax, rax, self.ext[loop.index])
                a.add(rax, self.coord[loop.index])
            a.mov(self.pos[(o.name, k)], rax)

    def _address(self, acc: Access, reg: Gpr, skip: str | set[str] | None = None) -> None:
        """reg = address of the element ``acc`` refers to (``skip``: leave that index, or those
        indices, out, i.e. at 0)."""
        a, es = self.a, self.t.es
        skipped = {skip} if isinstance(skip, str) else set(skip or ())
        sparse = self.sparse.get(acc.tensor)
        if acc.tensor == self.nest.output.name:
            sparse = self.sampled  # a sparse output is stored at the sampled operand's positions
        if sparse is not None:
            level, row = self.out_row if acc.tensor == self.nest.output.name else (len(sparse.levels) - 1, 1)
            a.mov(reg, self.pos[(sparse.name, level)])
            if row != 1:  # a fibre output: its dense row under that position
                a.imul(reg, reg, row)
            self._base(rax, acc.tensor, "vals")
            a.lea(reg, ptr(rax + reg * es))
        else:
            self._base(reg, acc.tensor, "temp" if acc.tensor in self.temp_sizes else "data")
        for i in acc.indices:
            if i in skipped or i not in self.strides.get(acc.tensor, ()):
                continue
            step = self.strides[acc.tensor][i] * es
            a.mov(rax, self.coord[i])
            if step in (1, 2, 4, 8):
                a.lea(reg, ptr(reg + rax * step))
            else:
                a.imul(rax, rax, step)
                a.add(reg, rax)

    def _vmov_s(self, dst: object, src: object) -> None:
        getattr(self.a, self.t.s("vmov"))(dst, src)

    # ---------------------------------------------------------------- program

    def program(self) -> Program:
        a, f = self.a, self.frame
        f.enter(a)
        a.mov(rbx, rdi)  # args block
        a.mov(self.begin, rsi)
        a.mov(self.end, rdx)
        self._nodes(self.nest.body, top=True)
        f.leave(a)
        if self.table is not None:
            emit_mask_table(a, self.table)
        return Program(a, self.slots, dict(self.temp_sizes), self.split, tuple(self.vectorized))

    def _nodes(self, nodes: tuple[Node, ...], top: bool = False) -> None:
        for k, node in enumerate(nodes):
            split = self._split_here(node, top)  # the loop threads split: its own range only
            if isinstance(node, Temp):
                if not self._stored_whole(node, nodes[k + 1] if k + 1 < len(nodes) else None):
                    self._zero_temp(node)
            elif isinstance(node, Compute):
                self._compute(node)
            elif self._stationary is not None and node is self._stationary[0]:
                self._accumulate(node)
            elif not split and self._inner_kind(node) == "vector":
                self._vector_loop(node)
            elif not split and self._inner_kind(node) == "strided":
                self._strided_loop(node)
            elif self._stationary_inner(node) is not None:
                self._stationary_loop(node, split)
            elif not split and (row := self._row_update_plan(node)) is not None:
                self._row_update_loop(node, row)
            else:
                self._loop(node, split)

    # ---------------------------------------------------------------- temporaries

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

    def _zero_temp(self, temp: Temp) -> None:
        """zero_<T>: store zero vectors over the temporary's buffer, then the scalar tail."""
        a, t = self.a, self.t
        n = self.temp_sizes[temp.name]
        a.label(f"zero_{temp.name}")
        self._base(rdi, temp.name, "temp")
        zero = self.regs.work[0]
        a.vxorps(zero, zero, zero)

        def store() -> None:
            getattr(a, t.v("vmovu"))(t.vmem(rdi), zero)
            a.add(rdi, t.vbytes)

        counted_loop(a, rcx, n // t.vl, store, f"zero_{temp.name}_v")
        for e in range(n % t.vl):
            self._vmov_s(t.smem(rdi + e * t.es), XMM[0])

    # ---------------------------------------------------------------- loops

    def _dense_loop(self, loop: Loop, split: bool) -> None:
        """dense_<i>: for i in 0..extent (or begin..end)."""
        a, c = self.a, self.coord[loop.index]
        end = self.end if split else self.ext[loop.index]  # a stack slot or an immediate
        done = a.new_label(f"dense_{loop.index}_done")
        if split:
            a.mov(rax, self.begin)
        else:
            a.xor(rax.r32, rax.r32)
        a.mov(c, rax)
        a.cmp(rax, end)
        a.jge(done)
        top = a.label(f"dense_{loop.index}")
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._next(c, end, top)
        a.bind(done)

    def _next(self, counter: Mem, end: Mem | int, top: Label) -> None:
        """Loop latch: counter += 1; back to ``top`` while counter < end."""
        a = self.a
        a.mov(rax, counter)
        a.inc(rax)
        a.mov(counter, rax)
        a.cmp(rax, end)
        a.jl(top)

    def _fibre(self, o: Operand, k: int, p: Gpr, e: Gpr) -> None:
        """p, e = the position range of level k's fibre under the parent position."""
        a = self.a
        if k == 0:
            a.xor(rax.r32, rax.r32)
        else:
            a.mov(rax, self.pos[(o.name, k - 1)])
        self._base(rcx, o.name, "pos", k)
        a.mov(p.r32, dword(rcx + rax * 4))
        a.mov(e.r32, dword(rcx + rax * 4 + 4))

    def _walk_loop(self, loop: Loop, o: Operand, split: bool) -> None:
        """walk_<T>_<i>: for p in pos[parent]..pos[parent+1]: i = crd[p]."""
        a = self.a
        k = o.indices.index(loop.index)
        p, end = self.pos[(o.name, k)], self.ends[self.loop_id[id(loop)]][0]
        done = a.new_label(f"walk_{o.name}_{loop.index}_done")
        if split:  # the caller's range of level-0 positions
            a.mov(rdx, self.begin)
            a.mov(rax, self.end)
        else:
            self._fibre(o, k, rdx, rax)
        a.mov(p, rdx)
        a.mov(end, rax)
        a.cmp(rdx, rax)
        a.jge(done)
        top = a.label(f"walk_{o.name}_{loop.index}")
        self._prefetch_rows(loop, o, k, p)
        a.mov(rax, p)
        self._base(rcx, o.name, "crd", k)
        a.mov(rax.r32, dword(rcx + rax * 4))
        a.mov(self.coord[loop.index], rax)
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._next(p, end, top)
        a.bind(done)

    def _prefetch_rows(self, loop: Loop, o: Operand, k: int, p: Mem) -> None:
        """prefetch_<i>: the rows that iteration p + `prefetch_ahead` of the walk will read, of
        the dense operands whose first index is the walked one (random rows of B in SpMM, of
        C and D in SDDMM): their cache misses overlap this iteration's work. Positions past
        the fibre (the next fibres, walked next) count; only positions inside ``crd`` are
        looked up, and a prefetch never faults."""
        a = self.a
        read = {x.tensor: x for c in walk_nodes(loop.body) if isinstance(c, Compute) for x in c.ins}
        rows = [
            (x.tensor, self.strides[x.tensor][loop.index] * self.t.es)
            for x in read.values()
            if x.tensor in self.strides and x.tensor not in self.temp_sizes and x.indices[:1] == (loop.index,)
        ]
        if not rows:
            return
        lines = sum(-(-min(row_bytes, PREFETCH_ROW_BYTES) // 64) for _, row_bytes in rows)
        skip = a.new_label(f"prefetch_{loop.index}_skip")
        a.label(f"prefetch_{loop.index}")
        a.mov(rax, p)
        a.add(rax, prefetch_ahead(lines))  # the walk's next fibres follow in crd: look past this one
        a.cmp(rax, qword(rbx + 8 * self.arg[(o.name, "size", k)]))
        a.jge(skip)
        self._base(rcx, o.name, "crd", k)
        a.mov(rcx.r32, dword(rcx + rax * 4))  # the coordinate that many positions on
        for tensor, row_bytes in rows:
            a.imul(rdx, rcx, row_bytes)
            a.add(rdx, qword(rbx + 8 * self.arg[(tensor, "data", None)]))
            for line in range(0, min(row_bytes, PREFETCH_ROW_BYTES), 64):
                a.prefetcht0(ptr(rdx + line))
        a.bind(skip)

    def _merge_loop(self, loop: Loop, o1: Operand, o2: Operand) -> None:
        """merge_<i>: two-pointer intersection of two compressed levels' coordinates."""
        a = self.a
        k1, k2 = o1.indices.index(loop.index), o2.indices.index(loop.index)
        p1, p2 = self.pos[(o1.name, k1)], self.pos[(o2.name, k2)]
        e1, e2 = self.ends[self.loop_id[id(loop)]]
        self._fibre(o1, k1, rdx, rsi)
        a.mov(p1, rdx)
        a.mov(e1, rsi)
        self._fibre(o2, k2, rdx, rsi)
        a.mov(p2, rdx)
        a.mov(e2, rsi)
        done = a.new_label(f"merge_{loop.index}_done")
        adv1, adv2 = (
            a.new_label(f"merge_{loop.index}_next_{o1.name}"),
            a.new_label(f"merge_{loop.index}_next_{o2.name}"),
        )
        top = a.label(f"merge_{loop.index}")
        a.mov(rax, p1)
        a.cmp(rax, e1)
        a.jge(done)
        a.mov(rdx, p2)
        a.cmp(rdx, e2)
        a.jge(done)
        self._base(rcx, o1.name, "crd", k1)
        a.mov(rcx.r32, dword(rcx + rax * 4))
        self._base(rsi, o2.name, "crd", k2)
        a.mov(rsi.r32, dword(rsi + rdx * 4))
        a.cmp(rcx, rsi)
        a.jl(adv1)
        a.jg(adv2)
        a.mov(self.coord[loop.index], rcx)  # both hold the coordinate: the body runs
        self._enter_iteration(loop)
        self._nodes(loop.body)
        a.inc(p2)
        a.bind(adv1)
        a.inc(p1)
        a.jmp(top)
        a.bind(adv2)
        a.inc(p2)
        a.jmp(top)
        a.bind(done)

    # ---------------------------------------------------------------- scalar statement


def compile_nest(nest: Nest, extents: dict[str, int], dtype: str = "fp64", isa: str = "avx2") -> Program:
    """Emit the x86-64 code of ``nest`` for the index ``extents``, value ``dtype``
    ("fp32"/"fp64") and ``isa`` ("avx2": AVX2+FMA, "avx512": AVX-512 F/VL). Raises ValueError for
    an unsupported nest, dtype or isa."""
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    nest.validate()
    for i in {i for o in nest.operands for i in o.indices}:
        if i not in extents:
            raise ValueError(f"no extent for index {i!r}")
    return _Emitter(nest, dict(extents), dtype, isa).program()
