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

The loops over the nest (dense, walk, merge), the fibre bounds, the positions and the addresses are
the shared skeleton's (`minijit.sparseauto.codegen_skeleton`); this module supplies its x86-64
instructions, `codegen_inner` the inner loops. How each node compiles (the stages name the labels
of the listing):

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
  sum stays in a register (`codegen_rows.RowLoops._tight_plan`).
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

from asm.x86_64 import XMM, Assembler, Gpr, Mem, Vec, dword, ptr, qword
from asm.x86_64.registers import r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels.x86_64.common import Frame, Partial, Target, counted_loop, emit_mask_table
from minijit.sparseauto.codegen_inner import (
    _MAX_VEC_STATEMENTS,
    _PTR_REGS,
    ISAS,
    SIGNATURE,
    InnerLoops,
    prefetch_ahead,
    vec_regs,
)
from minijit.sparseauto.codegen_skeleton import Skeleton, check_nest
from minijit.sparseauto.emitter import ArgSlot, Program, arg_slots, sampled_operand
from minijit.sparseauto.nest import Loop, Nest, Temp

__all__ = ["SIGNATURE", "ISAS", "ArgSlot", "Program", "arg_slots", "compile_nest", "sampled_operand"]


class _Emitter(InnerLoops, Skeleton):
    """The x86-64 instructions of `codegen_skeleton.SparseISA` and the inner loops of
    `codegen_inner.InnerLoops`; one instance per compiled program."""

    MAX_VEC_STATEMENTS = _MAX_VEC_STATEMENTS
    POINTER_REGS = len(_PTR_REGS)
    w = (rax, rdx, rcx, rsi)  # the skeleton's scratch registers
    BRANCHES = {"lt": "jl", "ge": "jge", "gt": "jg", "always": "jmp"}

    def __init__(self, nest: Nest, extents: dict[str, int], dtype: str, isa: str) -> None:
        self._analyse(nest, extents)
        self.t = Target.of(dtype, isa)
        self.es = self.t.es
        self.regs = vec_regs(self.t)
        self.a = Assembler(name=f"sparse_nest_{isa}_{dtype}")
        for name, st in self.strides.items():  # byte strides are 32-bit immediates of the code
            if any(v * self.t.es > 2**31 - 1 for v in st.values()):
                raise ValueError(f"dense tensor {name}: a stride of 2 GiB or more is not supported (extents {extents})")
        self.frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
        f = self.frame
        self._layout(f.slot)
        for c in range(_MAX_VEC_STATEMENTS):
            f.slot(f"bcast{c}")
        self.bcast = [f.slots[f"bcast{c}"] for c in range(_MAX_VEC_STATEMENTS)]  # stack offsets
        self.begin, self.end = f.slot("begin"), f.slot("end")
        self.table = None  # AVX2 mask table label, emitted after the code when used
        #: (inner loop, accumulators, partial) while emitting a loop whose output stays in registers
        self._stationary: tuple[Loop, list[Vec], Partial | None] | None = None
        self._stationary_prefix = False  # the stationary loop's body has nodes before its inner loop
        self._store_row: Loop | None = None  # a stationary loop that stores its row (`_stored_whole`)

    # ---------------------------------------------------------------- SparseISA

    def load(self, r: Gpr, slot: Mem) -> None:
        self.a.mov(r, slot)

    def store(self, slot: Mem, r: Gpr) -> None:
        self.a.mov(slot, r)

    def zero(self, r: Gpr) -> None:
        self.a.xor(r.r32, r.r32)

    def load_arg(self, r: Gpr, index: int) -> None:
        self.a.mov(r, qword(rbx + 8 * index))

    def load_u32(self, dst: Gpr, base: Gpr, idx: Gpr, disp: int = 0) -> None:
        self.a.mov(dst.r32, dword(base + idx * 4 + disp) if disp else dword(base + idx * 4))

    def cmp_slot(self, r: Gpr, slot: Mem) -> None:
        self.a.cmp(r, slot)

    def cmp_imm(self, r: Gpr, imm: int) -> None:
        self.a.cmp(r, imm)

    def inc(self, r: Gpr) -> None:
        self.a.inc(r)

    def inc_slot(self, slot: Mem) -> None:
        self.a.inc(slot)

    def mul_imm(self, r: Gpr, imm: int) -> None:
        self.a.imul(r, r, imm)

    def add_slot(self, r: Gpr, slot: Mem) -> None:
        self.a.add(r, slot)

    def move_plus(self, dst: Gpr, src: Gpr | Mem, imm: int) -> None:
        self.a.mov(dst, src)
        self.a.add(dst, imm)

    def cmp_arg(self, r: Gpr, index: int) -> None:
        self.a.cmp(r, qword(rbx + 8 * index))

    def row_address(self, dst: Gpr, idx: Gpr, row_bytes: int, base: int | Gpr) -> None:
        self.a.imul(dst, idx, row_bytes)
        self.a.add(dst, qword(rbx + 8 * base) if isinstance(base, int) else base)

    def prefetch(self, r: Gpr, disp: int) -> None:
        self.a.prefetcht0(ptr(r + disp))

    def add_scaled(self, r: Gpr, idx: Gpr, step: int) -> None:
        if step in (1, 2, 4, 8):
            self.a.lea(r, ptr(r + idx * step))
        else:
            self.a.imul(idx, idx, step)
            self.a.add(r, idx)

    def scale_add(self, r: Gpr, base: Gpr, scale: int) -> None:
        self.a.lea(r, ptr(base + r * scale))

    def prologue(self) -> None:
        a = self.a
        self.frame.enter(a)
        a.mov(rbx, rdi)  # args block
        a.mov(self.begin, rsi)
        a.mov(self.end, rdx)

    def epilogue(self) -> None:
        self.frame.leave(self.a)
        if self.table is not None:
            emit_mask_table(self.a, self.table)

    # ---------------------------------------------------------------- helpers

    def _vmov_s(self, dst: object, src: object) -> None:
        getattr(self.a, self.t.s("vmov"))(dst, src)

    # ---------------------------------------------------------------- temporaries

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

    def _prefetch_ahead(self, lines: int) -> int:
        return prefetch_ahead(lines)  # this module's name: a bench may replace it (bench/sparse_ab.py)


def compile_nest(nest: Nest, extents: dict[str, int], dtype: str = "fp64", isa: str = "avx2") -> Program:
    """Emit the x86-64 code of ``nest`` for the index ``extents``, value ``dtype``
    ("fp32"/"fp64") and ``isa`` ("avx2": AVX2+FMA, "avx512": AVX-512 F/VL). Raises ValueError for
    an unsupported nest, dtype or isa."""
    check_nest(nest, extents, isa, ISAS)
    return _Emitter(nest, dict(extents), dtype, isa).program()
