"""Compile a sparse loop nest (`minijit.sparseauto.nest.Nest`) to AArch64 machine code (NEON or SVE).

The emitted function has the x86-64 compiler's ABI (`minijit.sparseauto.codegen`):

    void nest(const int64_t* args, int64_t begin, int64_t end)     // x0, x1, x2

with the same ``args`` block (`codegen.arg_slots`), the same `codegen.Program` metadata and the same
split of the top loop over ``[begin, end)``. The outer stages follow the x86-64 compiler and carry
the same label names in the listing:

* **Loop, dense** (``dense_<i>``), **one compressed level** (``walk_<T>_<i>``), **two compressed
  levels** (``merge_<i>``: a two-pointer intersection); entering an iteration sets the position of
  every sparse operand whose dense level is the loop's index to ``parent * size + coordinate``.
* **Temp** (``zero_<T>``): the temporary's buffer is zeroed element by element.
* **Compute, scalar**: addresses from coordinates and strides (dense) or the last level's position
  (sparse); the arithmetic runs in lane 0 of vector registers (a scalar load zeroes the others).
* **Innermost dense loop, vectorized** (``vec_<j>``): where `NestEmitter._inner_kind` finds every
  access that uses ``j`` dense with ``j`` last, each statement is an axpy-like update
  ``out[j] += s * x[j] * ...`` or a dot product ``out += s * sum_j x[j] * ...``, with the factors
  without ``j`` multiplied once and broadcast. NEON runs whole 128-bit vectors and the last
  ``extent % lanes`` elements one at a time (``vtail_<j>``); SVE runs predicated vectors of any
  length, ``whilelt`` making the last one partial. Dot products sum their accumulator across
  lanes after the loop (``faddp``/``faddv``).

Every other loop (strided, co-iterating, sampled outputs) runs the scalar statement. Loop
variables, positions, walk bounds and broadcast scalars live in stack slots, so the nest may be
arbitrarily deep and branched. Registers: x19 holds ``args``; x9-x17 are scratch; the vectorized
loop's pointers are x0-x7 and x20-x28; v0-v8 hold products, loaded factors and accumulators,
v24-v26 the broadcast scalars (z registers under SVE). The code is meant for correctness in the
emulator first (no prefetch, no registers kept across loops).
"""

from __future__ import annotations

from asm.aarch64 import Assembler, P, mem, post, sp, wzr, x9, x10, x11, x12, x13, x14, x15, x16, x17, x19, xzr
from asm.aarch64.registers import ScalarReg, VecReg, VReg, XReg, ZVec
from minijit.kernels.aarch64.common import DType, dtype_info, epilogue, loop, prologue, sp_adjust
from minijit.sparseauto.emitter import NestEmitter, Program
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Node, Operand, Temp

__all__ = ["ISAS", "compile_nest_aarch64"]

ISAS = ("neon", "sve")
ARGS = x19  # the args block, for the whole function
#: pointers of the vectorized loop's accesses (x18 is the platform register, x19 holds args)
_PTR_REGS = tuple(XReg(i) for i in (*range(8), *range(20, 29)))
_BCAST = 24  # v24.. (z24..): one broadcast scalar per vectorized statement
_MAX_STATEMENTS = 3  # statements of a vectorized loop: v0-v8 (3 each), v24-v26
_CALLEE_X = tuple(range(19, 29))
_CALLEE_V = tuple(range(8, 16))


class _Frame:
    """Named 8-byte stack slots above sp (offsets in bytes)."""

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}

    def slot(self, name: str) -> int:
        self.slots[name] = 8 * len(self.slots)
        return self.slots[name]

    @property
    def size(self) -> int:
        return -(-8 * len(self.slots) // 16) * 16


class _Emitter64(NestEmitter):
    """Walks the nest once and emits its AArch64 code; one instance per compiled program."""

    MAX_VEC_STATEMENTS = _MAX_STATEMENTS
    POINTER_REGS = len(_PTR_REGS)

    def __init__(self, nest: Nest, extents: dict[str, int], dtype: str, isa: str) -> None:
        self._analyse(nest, extents)
        self.isa = isa
        self.t: DType = dtype_info(dtype)
        self.a = Assembler(name=f"sparse_nest_{isa}_{dtype}")
        f = self.frame = _Frame()
        self.begin, self.end = f.slot("begin"), f.slot("end")
        self.bcast = [f.slot(f"bcast{s}") for s in range(_MAX_STATEMENTS)]  # low: `add xd, sp, #imm12`
        indices = sorted({i for o in nest.operands for i in o.indices})
        self.coord = {i: f.slot(f"coord_{i}") for i in indices}
        self.pos = {
            (o.name, k): f.slot(f"pos_{o.name}_{k}") for o in self.sparse.values() for k in range(len(o.levels))
        }
        self.ends = [(f.slot(f"end{n}_a"), f.slot(f"end{n}_b")) for n in range(len(self.loops))]
        self.split = self._split()

    # ---------------------------------------------------------------- helpers

    def _ld(self, reg: XReg, slot: int) -> None:
        self.a.ldr(reg, mem(sp, slot))

    def _st(self, reg: XReg, slot: int) -> None:
        self.a.str(reg, mem(sp, slot))

    def _base(self, reg: XReg, tensor: str, part: str, level: int | None = None) -> None:
        """reg = address of ``tensor``'s ``part`` (from the args block)."""
        self.a.ldr(reg, mem(ARGS, 8 * self.arg[(tensor, part, level)]))

    def _s(self, idx: int) -> ScalarReg:
        """The scalar view (s/d) of v<idx>."""
        return self.t.scalar(idx)

    def _v(self, idx: int) -> VecReg:
        """v<idx> as a full 128-bit vector of the dtype."""
        return self.t.vec(idx)

    def _z(self, idx: int) -> ZVec:
        return self.t.z(idx)

    def _enter_iteration(self, loop: Loop) -> None:
        """Positions of dense levels at the loop's index: parent * size + coordinate."""
        a = self.a
        for o, k in self._dense_levels(loop):
            if k == 0:
                self._ld(x10, self.coord[loop.index])
            else:
                self._ld(x10, self.pos[(o.name, k - 1)])
                a.mov(x11, self.ext[loop.index])
                self._ld(x12, self.coord[loop.index])
                a.madd(x10, x10, x11, x12)
            self._st(x10, self.pos[(o.name, k)])

    def _address(self, acc: Access, reg: XReg, skip: str | None = None) -> None:
        """reg = address of the element ``acc`` refers to (``skip``: that index left at 0); uses x10, x11."""
        a, es = self.a, self.t.size
        sparse = self.sparse.get(acc.tensor)
        if acc.tensor == self.nest.output.name:
            sparse = self.sampled  # a sparse output is stored at the sampled operand's positions
        if sparse is not None:
            level, row = self.out_row if acc.tensor == self.nest.output.name else (len(sparse.levels) - 1, 1)
            self._ld(x10, self.pos[(sparse.name, level)])
            if row != 1:  # a fibre output: its dense row under that position
                a.mov(x11, row)
                a.madd(x10, x10, x11, xzr)
            self._base(reg, acc.tensor, "vals")
            a.add(reg, reg, x10, "lsl", self.t.shift)
        else:
            self._base(reg, acc.tensor, "temp" if acc.tensor in self.temp_sizes else "data")
        for i in acc.indices:
            step = self.strides.get(acc.tensor, {}).get(i, 0) * es
            if i == skip or step == 0:
                continue
            self._ld(x10, self.coord[i])
            if step & (step - 1) == 0:
                a.add(reg, reg, x10, "lsl", step.bit_length() - 1)
            else:
                a.mov(x11, step)
                a.madd(reg, x10, x11, reg)

    # ---------------------------------------------------------------- program

    def program(self) -> Program:
        a, f = self.a, self.frame
        saved = prologue(a, _CALLEE_X, _CALLEE_V)
        sp_adjust(a, f.size, alloc=True)
        a.mov(ARGS, XReg(0))
        self._st(XReg(1), self.begin)
        self._st(XReg(2), self.end)
        if self.isa == "sve":
            a.ptrue(getattr(P[0], self.t.es))
        self._nodes(self.nest.body, top=True)
        sp_adjust(a, f.size, alloc=False)
        epilogue(a, saved)
        return Program(a, self.slots, dict(self.temp_sizes), self.split, tuple(self.vectorized))

    def _nodes(self, nodes: tuple[Node, ...], top: bool = False) -> None:
        for node in nodes:
            split = self._split_here(node, top)
            if isinstance(node, Temp):
                self._zero_temp(node)
            elif isinstance(node, Compute):
                self._compute(node)
            elif not split and self._vectorizable(node):
                self._vector_loop(node)
            else:
                self._loop(node, split)

    def _vectorizable(self, loop: Loop) -> bool:
        """`NestEmitter._inner_kind` says "vector", and what `_vector_loop` relies on holds: at most
        `_MAX_STATEMENTS` statements, every access that uses j dense with j last, pointers
        for all of them."""
        if self._inner_kind(loop) != "vector":
            return False
        j, stmts = loop.index, loop.body
        uses = [x for c in stmts if isinstance(c, Compute) for x in (*c.ins, c.out) if j in x.indices]
        return (
            len(stmts) <= _MAX_STATEMENTS
            and all(isinstance(c, Compute) for c in stmts)
            and all(self._contiguous(x, j) for x in uses)
            and len(uses) <= len(_PTR_REGS)
        )

    # ---------------------------------------------------------------- temporaries and statements

    def _zero_temp(self, temp: Temp) -> None:
        """zero_<T>: store zero over the temporary's buffer, one element at a time."""
        a, es = self.a, self.t.size
        a.label(f"zero_{temp.name}")
        self._base(x9, temp.name, "temp")
        zr = xzr if es == 8 else wzr
        loop(a, x10, self.temp_sizes[temp.name], lambda: a.str(zr, post(x9, es)), f"zero_{temp.name}_loop")

    def _product(self, factors: list[Access], dst: int) -> None:
        """Lane 0 of v<dst> = product of ``factors`` (at least one; the other lanes end zero);
        uses x9-x11 and v<dst + 1>."""
        a = self.a
        for n, src in enumerate(factors):
            self._address(src, x9)
            a.ldr(self._s(dst if n == 0 else dst + 1), mem(x9))
            if n:
                a.fmul(self._v(dst), self._v(dst), self._v(dst + 1))

    def _scalar_to_slot(self, factors: list[Access], slot: int) -> None:
        """The stack ``slot`` = product of ``factors`` (1.0 when there are none); uses x9-x11, v0, v1."""
        a = self.a
        if not factors:
            one = 0x3FF0000000000000 if self.t.size == 8 else 0x3F800000
            a.mov(x9, one)
            a.str(x9 if self.t.size == 8 else x9.w, mem(sp, slot))
            return
        self._product(factors, 0)
        a.str(self._s(0), mem(sp, slot))

    def _compute(self, c: Compute) -> None:
        """out += prod(ins), one element (lane 0 of v0, v1)."""
        a = self.a
        self._product(list(c.ins), 0)
        self._address(c.out, x9)
        a.ldr(self._s(1), mem(x9))
        a.fadd(self._v(1), self._v(1), self._v(0))
        a.str(self._s(1), mem(x9))

    # ---------------------------------------------------------------- loops

    def _dense_loop(self, loop: Loop, split: bool) -> None:
        """dense_<i>: for i in 0..extent (or begin..end)."""
        a, c = self.a, self.coord[loop.index]
        done = a.new_label(f"dense_{loop.index}_done")

        def load_end() -> None:
            if split:
                self._ld(x11, self.end)
            else:
                a.mov(x11, self.ext[loop.index])

        if split:
            self._ld(x10, self.begin)
        else:
            a.mov(x10, 0)
        self._st(x10, c)
        load_end()
        a.cmp(x10, x11)
        a.b_ge(done)
        top = a.label(f"dense_{loop.index}")
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._ld(x10, c)
        a.add(x10, x10, 1)
        self._st(x10, c)
        load_end()
        a.cmp(x10, x11)
        a.b_lt(top)
        a.bind(done)

    def _fibre(self, o: Operand, k: int, p: XReg, e: XReg) -> None:
        """p, e = the position range of level k's fibre under the parent position (uses x9, x12)."""
        a = self.a
        if k == 0:
            a.mov(x9, 0)
        else:
            self._ld(x9, self.pos[(o.name, k - 1)])
        self._base(x12, o.name, "pos", k)
        a.add(x12, x12, x9, "lsl", 2)
        a.ldr(p.w, mem(x12))
        a.ldr(e.w, mem(x12, 4))

    def _walk_loop(self, loop: Loop, o: Operand, split: bool) -> None:
        """walk_<T>_<i>: for p in pos[parent]..pos[parent+1]: i = crd[p]."""
        a = self.a
        k = o.indices.index(loop.index)
        p, end = self.pos[(o.name, k)], self.ends[self.loop_id[id(loop)]][0]
        done = a.new_label(f"walk_{o.name}_{loop.index}_done")
        if split:  # the caller's range of level-0 positions
            self._ld(x10, self.begin)
            self._ld(x11, self.end)
        else:
            self._fibre(o, k, x10, x11)
        self._st(x10, p)
        self._st(x11, end)
        a.cmp(x10, x11)
        a.b_ge(done)
        top = a.label(f"walk_{o.name}_{loop.index}")
        self._ld(x10, p)
        self._base(x12, o.name, "crd", k)
        a.ldr(x10.w, mem(x12, x10, "lsl", 2))
        self._st(x10, self.coord[loop.index])
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._ld(x10, p)
        a.add(x10, x10, 1)
        self._st(x10, p)
        self._ld(x11, end)
        a.cmp(x10, x11)
        a.b_lt(top)
        a.bind(done)

    def _bump(self, slot: int) -> None:
        """The stack slot += 1."""
        self._ld(x10, slot)
        self.a.add(x10, x10, 1)
        self._st(x10, slot)

    def _merge_loop(self, loop: Loop, o1: Operand, o2: Operand) -> None:
        """merge_<i>: two-pointer intersection of two compressed levels' coordinates."""
        a = self.a
        k1, k2 = o1.indices.index(loop.index), o2.indices.index(loop.index)
        p1, p2 = self.pos[(o1.name, k1)], self.pos[(o2.name, k2)]
        e1, e2 = self.ends[self.loop_id[id(loop)]]
        for o, k, p, e in ((o1, k1, p1, e1), (o2, k2, p2, e2)):
            self._fibre(o, k, x10, x11)
            self._st(x10, p)
            self._st(x11, e)
        done = a.new_label(f"merge_{loop.index}_done")
        adv1 = a.new_label(f"merge_{loop.index}_next_{o1.name}")
        adv2 = a.new_label(f"merge_{loop.index}_next_{o2.name}")
        top = a.label(f"merge_{loop.index}")
        self._ld(x10, p1)
        self._ld(x11, e1)
        a.cmp(x10, x11)
        a.b_ge(done)
        self._ld(x12, p2)
        self._ld(x13, e2)
        a.cmp(x12, x13)
        a.b_ge(done)
        self._base(x14, o1.name, "crd", k1)
        a.ldr(x14.w, mem(x14, x10, "lsl", 2))
        self._base(x15, o2.name, "crd", k2)
        a.ldr(x15.w, mem(x15, x12, "lsl", 2))
        a.cmp(x14, x15)
        a.b_lt(adv1)
        a.b_gt(adv2)
        self._st(x14, self.coord[loop.index])  # both hold the coordinate: the body runs
        self._enter_iteration(loop)
        self._nodes(loop.body)
        self._bump(p2)
        a.bind(adv1)
        self._bump(p1)
        a.b(top)
        a.bind(adv2)
        self._bump(p2)
        a.b(top)
        a.bind(done)

    # ---------------------------------------------------------------- vectorized innermost loop

    def _vector_loop(self, loop: Loop) -> None:
        """vec_<j>: the statements of an innermost dense unit-stride loop over vectors of j."""
        a, j = self.a, loop.index
        n = self.ext[j]
        self.vectorized.append(j)
        stmts: tuple[Compute, ...] = loop.body  # type: ignore[assignment]
        if n == 0:
            return
        # prologue: each statement's product of the factors without j, and pointers at j = 0
        for s, c in enumerate(stmts):
            self._scalar_to_slot([x for x in c.ins if j not in x.indices], self.bcast[s])
        regs = iter(_PTR_REGS)
        plan: list[tuple[XReg | None, list[XReg]]] = []  # (out pointer or None: a dot product, factors)
        for c in stmts:
            jf = []
            for x in c.ins:
                if j in x.indices:
                    jf.append(next(regs))
                    self._address(x, jf[-1], skip=j)
            out = None
            if j in c.out.indices:
                out = next(regs)
                self._address(c.out, out, skip=j)
            plan.append((out, jf))
        a.label(f"vec_{j}")
        if self.isa == "sve":
            self._sve_loop(n, plan)
        else:
            self._neon_loop(n, plan, j)
        for s, (c, (out, _)) in enumerate(zip(stmts, plan, strict=True)):
            if out is None:
                self._reduce_dot(c, 3 * s + 2, self.bcast[s])

    def _neon_loop(self, n: int, plan: list[tuple[XReg | None, list[XReg]]], j: str) -> None:
        """Whole 128-bit vectors, then the last ``n % lanes`` elements one at a time (lane 0)."""
        a, t = self.a, self.t
        for s, (out, _) in enumerate(plan):
            b = _BCAST + s
            a.ldr(self._s(b), mem(sp, self.bcast[s]))
            a.dup(self._v(b), getattr(VReg(b), t.es)[0])
            if out is None:
                a.movi(VecReg(3 * s + 2, "d", 2), 0)

        def step(width: int) -> None:
            nbytes = width * t.size

            def ld(idx: int, r: XReg, advance: bool) -> None:
                view = ScalarReg(idx, "q") if width > 1 else self._s(idx)
                a.ldr(view, post(r, nbytes) if advance else mem(r))

            for s, (out, jf) in enumerate(plan):
                prod, tmp, acc = 3 * s, 3 * s + 1, 3 * s + 2
                ld(prod, jf[0], True)
                for r in jf[1:]:
                    ld(tmp, r, True)
                    a.fmul(self._v(prod), self._v(prod), self._v(tmp))
                if out is None:  # dot product: acc += prod
                    a.fadd(self._v(acc), self._v(acc), self._v(prod))
                    continue
                ld(tmp, out, False)
                a.fmla(self._v(tmp), self._v(prod), self._v(_BCAST + s))
                view = ScalarReg(tmp, "q") if width > 1 else self._s(tmp)
                a.str(view, post(out, nbytes))

        loop(a, x16, n // t.lanes, lambda: step(t.lanes), f"vec_{j}_loop")
        if n % t.lanes:
            a.label(f"vtail_{j}")
            loop(a, x16, n % t.lanes, lambda: step(1), f"vtail_{j}_loop")

    def _sve_loop(self, n: int, plan: list[tuple[XReg | None, list[XReg]]]) -> None:
        """Predicated vectors of any length: ``whilelt`` over the element index x16 < x17 = n."""
        a, t = self.a, self.t
        pred = P[1]
        for s, (out, _) in enumerate(plan):
            a.add(x9, sp, self.bcast[s])
            t.ld1r(a, self._z(_BCAST + s), P[0].z, mem(x9))
            if out is None:
                a.dup(self._z(3 * s + 2), 0)
        a.mov(x16, 0)
        a.mov(x17, n)
        a.whilelt(getattr(pred, t.es), x16, x17)
        top = a.label("sve_step")
        for s, (out, jf) in enumerate(plan):
            prod, tmp, acc = (self._z(3 * s + u) for u in range(3))
            t.ld1(a, prod, pred.z, mem(jf[0], x16, "lsl", t.shift))
            for r in jf[1:]:
                t.ld1(a, tmp, pred.z, mem(r, x16, "lsl", t.shift))
                a.fmul(prod, prod, tmp)
            if out is None:  # dot product: acc += prod on the active lanes
                a.fadd(acc, pred.m, acc, prod)
                continue
            t.ld1(a, tmp, pred.z, mem(out, x16, "lsl", t.shift))
            a.fmla(tmp, pred.m, prod, self._z(_BCAST + s))
            t.st1(a, tmp, pred, mem(out, x16, "lsl", t.shift))
        t.inc(a, x16)
        a.whilelt(getattr(pred, t.es), x16, x17)
        a.b_first(top)

    def _reduce_dot(self, c: Compute, acc: int, slot: int) -> None:
        """out += (scalar in stack ``slot``) * the sum of v<acc>'s (z<acc>'s) lanes."""
        a, t = self.a, self.t
        if self.isa == "sve":
            a.faddv(self._s(acc), P[0], self._z(acc))
        elif t.size == 4:
            a.faddp(self._v(acc), self._v(acc), self._v(acc))
            a.faddp(self._s(acc), VecReg(acc, "s", 2))
        else:
            a.faddp(self._s(acc), self._v(acc))
        tmp = acc - 1
        a.ldr(self._s(tmp), mem(sp, slot))
        a.fmul(self._v(acc), self._v(acc), self._v(tmp))
        self._address(c.out, x9)
        a.ldr(self._s(tmp), mem(x9))
        a.fadd(self._v(tmp), self._v(tmp), self._v(acc))
        a.str(self._s(tmp), mem(x9))


def compile_nest_aarch64(nest: Nest, extents: dict[str, int], dtype: str = "fp64", isa: str = "neon") -> Program:
    """Emit the AArch64 code of ``nest`` for the index ``extents``, value ``dtype`` ("fp32"/"fp64")
    and ``isa`` ("neon" or "sve": vector-length agnostic). Raises ValueError for an unsupported
    nest, dtype or isa."""
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    dtype_info(dtype)
    nest.validate()
    for i in {i for o in nest.operands for i in o.indices}:
        if i not in extents:
            raise ValueError(f"no extent for index {i!r}")
    return _Emitter64(nest, dict(extents), dtype, isa).program()
