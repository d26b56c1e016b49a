"""Compile a sparse loop nest (`minijit.sparseauto.nest.Nest`) to AArch64 machine code (NEON or SVE).

The emitted function has the x86-64 compiler's ABI (`minijit.sparseauto.codegen`):

    void nest(const int64_t* args, int64_t begin, int64_t end)     // x0, x1, x2

with the same ``args`` block (`codegen.arg_slots`), the same `codegen.Program` metadata and the same
split of the top loop over ``[begin, end)``. The outer stages are the shared skeleton's
(`minijit.sparseauto.codegen_skeleton`: this module supplies its instructions) and carry the same
label names in the listing as on x86-64:

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

* **Output row in registers** (``stationary_<j>``, ``acc_<j>``, ``tight_walk_<T>_<i>``,
  ``tight_dense_<i>``, ``dot_<k>``, ``row_<x>_<j>``, ``store_<T>``): the x86-64 compiler's
  stationary, tight (paired accumulators, fused dot product) and row-update loops, planned and
  driven by `codegen_rows.RowLoops`, in NEON instructions on both ISAs (`codegen_aarch64_rows`).

Every other loop (strided, co-iterating, sampled outputs) runs the scalar statement. Loop
variables, positions, walk bounds and broadcast scalars live in stack slots, so the nest may be
arbitrarily deep and branched. Registers: x19 holds ``args``; x10-x13 are the skeleton's scratch
registers, x14 the skeleton instructions' own; x9, x15-x17 are the inner loops' scratch; the vectorized
loop's pointers are x0-x7 and x20-x28; v0-v8 hold products, loaded factors and accumulators,
v24-v26 the broadcast scalars (z registers under SVE). Walks prefetch the dense rows a later
position reads (``prfm pldl1keep``, the skeleton's ``prefetch_<i>``); the loops that keep an
output row in registers are `codegen_aarch64_rows`.
"""

from __future__ import annotations

from asm.aarch64 import Assembler, P, mem, post, sp, wzr, x9, x10, x11, x12, x13, x14, x16, x17, x19, xzr
from asm.aarch64.registers import ScalarReg, VecReg, VReg, XReg, ZVec
from minijit.kernels.aarch64.common import DType, dtype_info, epilogue, loop, prologue, sp_adjust
from minijit.sparseauto.codegen_aarch64_rows import RowLoops64
from minijit.sparseauto.codegen_skeleton import Skeleton, check_nest
from minijit.sparseauto.emitter import Program
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Temp

__all__ = ["ISAS", "compile_nest_aarch64"]

ISAS = ("neon", "sve")
ARGS = x19  # the args block, for the whole function
_SCRATCH = x14  # the SparseISA instructions' own scratch register
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


class _Emitter64(RowLoops64, Skeleton):
    """The AArch64 instructions of `codegen_skeleton.SparseISA` and the inner loops; one instance
    per compiled program."""

    MAX_VEC_STATEMENTS = _MAX_STATEMENTS
    POINTER_REGS = len(_PTR_REGS)
    PTR_REGS = _PTR_REGS
    w = (x10, x11, x12, x13)  # the skeleton's scratch registers (x14 is the instructions' own)
    BRANCHES = {"lt": "b_lt", "ge": "b_ge", "gt": "b_gt", "always": "b"}

    def __init__(self, nest: Nest, extents: dict[str, int], dtype: str, isa: str) -> None:
        self._analyse(nest, extents)
        self.isa = isa
        self.t: DType = dtype_info(dtype)
        self.es = self.t.size
        self.a = Assembler(name=f"sparse_nest_{isa}_{dtype}")
        f = self.frame = _Frame()
        self._layout(f.slot)
        self.bcast = [f.slot(f"bcast{s}") for s in range(_MAX_STATEMENTS)]
        self.begin, self.end = f.slot("begin"), f.slot("end")

    # ---------------------------------------------------------------- SparseISA

    def load(self, r: XReg, slot: int) -> None:
        self.a.ldr(r, mem(sp, slot))

    def store(self, slot: int, r: XReg) -> None:
        self.a.str(r, mem(sp, slot))

    def zero(self, r: XReg) -> None:
        self.a.mov(r, 0)

    def load_arg(self, r: XReg, index: int) -> None:
        self.a.ldr(r, mem(ARGS, 8 * index))

    def load_u32(self, dst: XReg, base: XReg, idx: XReg, disp: int = 0) -> None:
        if disp:
            self.a.add(_SCRATCH, base, idx, "lsl", 2)
            self.a.ldr(dst.w, mem(_SCRATCH, disp))
        else:
            self.a.ldr(dst.w, mem(base, idx, "lsl", 2))

    def cmp_slot(self, r: XReg, slot: int) -> None:
        self.load(_SCRATCH, slot)
        self.a.cmp(r, _SCRATCH)

    def cmp_imm(self, r: XReg, imm: int) -> None:
        if imm < 4096:
            self.a.cmp(r, imm)
        else:
            self.a.mov(_SCRATCH, imm)
            self.a.cmp(r, _SCRATCH)

    def inc(self, r: XReg) -> None:
        self.a.add(r, r, 1)

    def inc_slot(self, slot: int) -> None:
        self.load(_SCRATCH, slot)
        self.inc(_SCRATCH)
        self.store(slot, _SCRATCH)

    def mul_imm(self, r: XReg, imm: int) -> None:
        self.a.mov(_SCRATCH, imm)
        self.a.mul(r, r, _SCRATCH)

    def add_slot(self, r: XReg, slot: int) -> None:
        self.load(_SCRATCH, slot)
        self.a.add(r, r, _SCRATCH)

    def move_plus(self, dst: XReg, src: XReg | int, imm: int) -> None:
        if isinstance(src, int):
            self.load(dst, src)
            src = dst
        self.a.add(dst, src, imm)

    def cmp_arg(self, r: XReg, index: int) -> None:
        self.load_arg(_SCRATCH, index)
        self.a.cmp(r, _SCRATCH)

    def row_address(self, dst: XReg, idx: XReg, row_bytes: int, base: int | XReg) -> None:
        if isinstance(base, int):
            self.load_arg(_SCRATCH, base)
            base = _SCRATCH
        if row_bytes and row_bytes & (row_bytes - 1) == 0:
            self.a.add(dst, base, idx, "lsl", row_bytes.bit_length() - 1)
        else:
            self.a.mov(dst, row_bytes)
            self.a.madd(dst, idx, dst, base)

    def prefetch(self, r: XReg, disp: int) -> None:
        self.a.prfm("pldl1keep", mem(r, disp))

    def add_scaled(self, r: XReg, idx: XReg, step: int) -> None:
        if step == 0:
            return
        if step & (step - 1) == 0:
            self.a.add(r, r, idx, "lsl", step.bit_length() - 1)
        else:
            self.a.mov(_SCRATCH, step)
            self.a.madd(r, idx, _SCRATCH, r)

    def scale_add(self, r: XReg, base: XReg, scale: int) -> None:
        self.a.add(r, base, r, "lsl", scale.bit_length() - 1)

    def prologue(self) -> None:
        a = self.a
        self._saved = prologue(a, _CALLEE_X, _CALLEE_V)
        sp_adjust(a, self.frame.size, alloc=True)
        a.mov(ARGS, XReg(0))
        self.store(self.begin, XReg(1))
        self.store(self.end, XReg(2))
        if self.isa == "sve":
            a.ptrue(getattr(P[0], self.t.es))

    def epilogue(self) -> None:
        sp_adjust(self.a, self.frame.size, alloc=False)
        epilogue(self.a, self._saved)

    # ---------------------------------------------------------------- helpers

    def _s(self, idx: int) -> ScalarReg:
        """The scalar view (s/d) of v<idx>."""
        return self.t.scalar(idx)

    def _v(self, idx: int) -> VecReg:
        """v<idx> as a full 128-bit vector of the dtype."""
        return self.t.vec(idx)

    def _z(self, idx: int) -> ZVec:
        return self.t.z(idx)

    def _loop_kind(self, loop: Loop) -> str | None:
        return "vector" if self._vectorizable(loop) else None

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

    def _scalar_product(self, factors: list[Access], slot: int) -> None:
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

    # ---------------------------------------------------------------- vectorized innermost loop

    def _vector_loop(self, loop: Loop) -> None:
        """vec_<j>: the statements of an innermost dense unit-stride loop over vectors of j."""
        a, j = self.a, loop.index
        n = self.ext[j]
        self.vectorized.append(j)
        stmts: tuple[Compute, ...] = loop.body  # type: ignore[assignment]
        if n == 0:
            return
        plan = self._inner_prologue(stmts, j)  # broadcast factors in slots, pointers at j = 0
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
    check_nest(nest, extents, isa, ISAS)
    dtype_info(dtype)
    return _Emitter64(nest, dict(extents), dtype, isa).program()
