"""Shared pieces of the x86-64 primitive generators.

`Target` bundles what depends on the data type and the vector ISA (element
size, lanes per vector, register file, ps/pd mnemonics, masked partial-vector
loads and stores). `Frame` is the System V prologue/epilogue: it saves the
callee-saved registers a kernel uses, reserves stack slots for spilled
scalars, and knows where the stack-passed arguments live. `build` turns an
Assembler into a `Kernel` that keeps its listing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asm.x86_64 import (
    YMM,
    ZMM,
    Assembler,
    Gpr,
    KReg,
    Label,
    Mem,
    Vec,
    dword,
    k1,
    ptr,
    qword,
    rip,
    rsp,
    ymmword,
    zmmword,
)
from asm.x86_64.registers import r12, r13, r14, r15, rax, rbp, rbx
from minijit.kernels.epilogue import Epilogue, checked
from minijit.runtime.kernel import Kernel

DTYPES = {"fp32": (4, "float"), "fp64": (8, "double")}
#: the integer dtypes (wrapping two's-complement multiply-adds) of the kernels that take them
#: (`Target.of` with ``ints=True``: the BRGEMM); every other generator refuses them
INT_DTYPES = {"s32": (4, "int32_t"), "s64": (8, "int64_t")}
ISAS = ("avx512", "avx2")
CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)
#: bytes of a page: frames larger than this are touched page by page on entry (`Frame.enter`)
PAGE = 4096
LOG2 = {1: 0, 2: 1, 4: 2, 8: 3}


def check_size(name: str, value: object, lo: int = 1, hi: int = 1 << 20) -> int:
    """A positive integer size, else ValueError naming the parameter."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value  # type: ignore[return-value]


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


@dataclass(frozen=True)
class Target:
    """Data type x vector ISA: sizes, registers and mnemonics of one kernel."""

    dtype: str
    isa: str

    @staticmethod
    def of(dtype: object, isa: object, ints: bool = False) -> Target:
        """Validated target (ValueError naming ``dtype`` or ``isa``); ``ints``: the generator
        also takes the integer dtypes (`INT_DTYPES`)."""
        names = (*DTYPES, *INT_DTYPES) if ints else tuple(DTYPES)
        return Target(check_choice("dtype", dtype, names), check_choice("isa", isa, ISAS))

    @property
    def is_int(self) -> bool:
        """Whether the elements are integers (`INT_DTYPES`)."""
        return self.dtype in INT_DTYPES

    @property
    def es(self) -> int:
        """Element bytes."""
        return (INT_DTYPES if self.is_int else DTYPES)[self.dtype][0]

    @property
    def ctype(self) -> str:
        return (INT_DTYPES if self.is_int else DTYPES)[self.dtype][1]

    @property
    def vbytes(self) -> int:
        return 64 if self.isa == "avx512" else 32

    @property
    def vl(self) -> int:
        """Elements per vector register."""
        return self.vbytes // self.es

    @property
    def vregs(self) -> list[Vec]:
        """The vector register file: zmm0..31 or ymm0..15."""
        return list(ZMM) if self.isa == "avx512" else list(YMM[:16])

    def v(self, name: str) -> str:
        """Packed mnemonic: ``v("vfmadd231")`` -> ``vfmadd231ps``/``vfmadd231pd``."""
        return name + ("ps" if self.es == 4 else "pd")

    def s(self, name: str) -> str:
        """Scalar mnemonic: ``s("vmov")`` -> ``vmovss``/``vmovsd``."""
        return name + ("ss" if self.es == 4 else "sd")

    def vmem(self, addr: object) -> Mem:
        return zmmword(addr) if self.isa == "avx512" else ymmword(addr)

    def smem(self, addr: object) -> Mem:
        return dword(addr) if self.es == 4 else qword(addr)


@dataclass
class Partial:
    """Loads and stores of a partial vector (the first ``count`` lanes), by opmask or vmaskmov.

    AVX-512 uses ``k1`` (set by `setup`); AVX2 uses a mask vector register
    loaded from a constant table that `emit_data` (or `emit_mask_table`, for a table several
    partials share) appends after the code.
    """

    t: Target
    count: int
    maskreg: Vec | None = None
    k: KReg = k1
    table: Label | None = None

    @staticmethod
    def column_tail(a: Assembler, t: Target, m: int, maskreg: Vec) -> Partial | None:
        """The partial vector for the last ``m % vl`` elements of a column (None when there are none),
        with a new mask table label on AVX2 (``emit_data`` appends the table)."""
        if not m % t.vl:
            return None
        table = a.new_label("mask") if t.isa == "avx2" else None
        return Partial(t, m % t.vl, maskreg=maskreg, table=table)

    def emit_data(self, a: Assembler) -> None:
        """Append the mask table after the code (AVX2; nothing on AVX-512)."""
        if self.table is not None:
            emit_mask_table(a, self.table)

    def setup(self, a: Assembler, scratch: Gpr) -> None:
        """Materialize the mask (opmask register or mask vector)."""
        if self.t.isa == "avx512":
            a.mov(scratch.r32, (1 << self.count) - 1)
            a.kmovw(self.k, scratch.r32)
        else:
            assert self.maskreg is not None and self.table is not None
            a.vmovups(self.maskreg, ymmword(rip + self.table + (self.t.vl - self.count) * self.t.es))

    def load(self, a: Assembler, dst: Vec, addr: object) -> None:
        if self.t.isa == "avx512":
            getattr(a, self.t.v("vmovu"))(dst.maskz(self.k), self.t.vmem(addr))
        else:
            getattr(a, self.t.v("vmaskmov"))(dst, self.maskreg, self.t.vmem(addr))

    def store(self, a: Assembler, addr: object, src: Vec) -> None:
        if self.t.isa == "avx512":
            getattr(a, self.t.v("vmovu"))(self.t.vmem(addr).mask(self.k), src)
        else:
            getattr(a, self.t.v("vmaskmov"))(self.t.vmem(addr), self.maskreg, src)


def emit_mask_table(a: Assembler, label: Label) -> None:
    """32 bytes of ones then 32 zero bytes: ``table + (vl - count) * es`` is a count-lane mask."""
    a.bind(label)
    a.db(b"\xff" * 32)
    a.db(b"\x00" * 32)


@dataclass
class Frame:
    """Prologue/epilogue with callee-saved registers and 8-byte stack slots.

    ``slot(name)`` allocates a local; ``arg(i)`` is stack argument ``i``
    (0 = the seventh integer argument) as a qword operand, valid after
    `enter` and before `leave`.
    """

    saved: list[Gpr]
    slots: dict[str, int] = field(default_factory=dict)
    buffers: dict[str, int] = field(default_factory=dict)

    def slot(self, name: str) -> Mem:
        if name not in self.slots:
            self.slots[name] = 8 * len(self.slots)
        return qword(rsp + self.slots[name])

    def buffer(self, name: str, nbytes: int) -> Mem:
        """A ``nbytes`` scratch area on the stack, 64-byte aligned (one cache line per 64 bytes);
        returns the slot that holds its address after `enter`. Allocate every slot and buffer
        before `enter`."""
        if nbytes <= 0:
            raise ValueError(f"buffer {name!r}: nbytes must be positive, got {nbytes}")
        self.buffers[name] = -(-nbytes // 64) * 64
        return self.slot(f"{name}_address")

    @property
    def size(self) -> int:
        return 8 * len(self.slots) + sum(n + 64 for n in self.buffers.values())

    def arg(self, i: int) -> Mem:
        return qword(rsp + self.size + 8 * len(self.saved) + 8 + 8 * i)

    def enter(self, a: Assembler) -> None:
        for r in self.saved:
            a.push(r)
        if self.size:
            # touch a frame larger than a page one page at a time, top down: a thread whose stack
            # is too small then faults on its guard page instead of writing past it
            for below in range(PAGE, self.size + 1, PAGE):
                a.mov(qword(rsp - below), 0)
            a.sub(rsp, self.size)
        offset = 8 * len(self.slots)
        for name, nbytes in self.buffers.items():  # aligned address of each buffer -> its slot
            a.lea(rax, ptr(rsp + offset + 63))
            a.and_(rax, -64)
            a.mov(qword(rsp + self.slots[f"{name}_address"]), rax)
            offset += nbytes + 64

    def leave(self, a: Assembler) -> None:
        if self.size:
            a.add(rsp, self.size)
        for r in reversed(self.saved):
            a.pop(r)
        a.vzeroupper()
        a.ret()


def counted_loop(a: Assembler, counter: Gpr | Mem, count: int, body, name: str) -> None:
    """``for counter = count..1: body()`` (nothing for count 0, straight-line for count 1)."""
    if count <= 0:
        return
    if count == 1:
        body()
        return
    a.mov(counter.r32 if isinstance(counter, Gpr) else counter, count)
    top = a.label(name)
    body()
    a.dec(counter)
    a.jnz(top)


def strided_copy(
    a: Assembler,
    t: Target,
    count: int,
    strided: Gpr,
    contig: Gpr,
    step: Gpr,
    step3: Gpr,
    counter: Gpr | Mem,
    tmp: Vec,
    gather: bool,
) -> None:
    """Copy ``count`` elements between a strided run (pointer ``strided``, ``step`` / ``step3``:
    registers holding its stride and 3 strides in bytes) and a contiguous one (``contig``):
    strided -> contiguous with ``gather``, else back. Both pointers end past their runs."""
    mov = getattr(a, t.s("vmov"))
    offsets = (None, (step, 1), (step, 2), (step3, 1))

    def one(j: int, disp: int) -> None:
        off = offsets[j]
        far = t.smem(strided if off is None else strided + off[0] * off[1])
        near = t.smem(contig + disp)
        mov(tmp, far if gather else near)
        mov(near if gather else far, tmp)

    def four() -> None:
        for j in range(4):
            one(j, j * t.es)
        a.lea(strided, ptr(strided + step * 4))
        a.add(contig, 4 * t.es)

    counted_loop(a, counter, count // 4, four, "copy")
    for _ in range(count % 4):
        one(0, 0)
        a.add(strided, step)
        a.add(contig, t.es)


def relu(a: Assembler, t: Target, x: Vec, zero: Vec, scalar: bool = False) -> None:
    """x = max(0, x) + 0 (-0 -> +0, NaN kept), as the unary relu kernel."""
    name = t.s if scalar else t.v
    getattr(a, name("vmax"))(x, zero, x)
    getattr(a, name("vadd"))(x, x, zero)


#: the epilogue operations (`minijit.kernels.epilogue`) the x86-64 kernels emit on accumulators
EPILOGUE_OPS = frozenset({"relu"})


def check_epilogue(value: object, where: str) -> Epilogue:
    """``value`` (an `Epilogue`, its text or None) as an elementwise epilogue these kernels emit, else
    ValueError / TypeError naming ``where`` (`minijit.kernels.epilogue.checked`)."""
    return checked(value, EPILOGUE_OPS, where)


class EpilogueCode:
    """The emission of an elementwise `Epilogue` on x86-64 registers: `setup` once (its constants
    into ``scratch``, a vector register the caller leaves free: relu's zero), then `apply` on each
    accumulator (``scalar``: the low element of an xmm register only). The none epilogue emits
    nothing."""

    def __init__(self, a: Assembler, t: Target, epilogue: Epilogue, scratch: Vec) -> None:
        self.a, self.t, self.scratch = a, t, scratch
        self.epilogue = epilogue.require(EPILOGUE_OPS, "x86-64 kernels")

    def setup(self) -> None:
        """A listing label naming the epilogue (no bytes), then the operations' constants into the
        scratch register (relu: zero, the full register)."""
        if not self.epilogue:
            return
        self.a.label("epilogue_" + "_".join(self.epilogue.ops))
        if "relu" in self.epilogue.ops:
            getattr(self.a, self.t.v("vxor"))(self.scratch, self.scratch, self.scratch)

    def apply(self, x: Vec, scalar: bool = False) -> None:
        """Every operation, in order, on ``x`` in place."""
        zero = self.scratch.xmm if scalar else self.scratch
        for op in self.epilogue.ops:
            if op == "relu":
                relu(self.a, self.t, x, zero, scalar)

    def emit(self, regs: list[Vec]) -> None:
        """`setup`, then `apply` on each register of ``regs`` in order."""
        if self.epilogue:
            self.setup()
            for x in regs:
                self.apply(x)


def element_loops(
    a: Assembler,
    m: tuple[Gpr | Mem, int, str],
    n: tuple[Gpr | Mem, int, str],
    element,
    walk: list[tuple[Gpr, object, object]],
    advance: list[tuple[object, object]],
) -> None:
    """Scalar loops over ``n`` columns of ``m`` elements; ``m`` and ``n`` are (counter, count, label).

    Each column starts every walking pointer of ``walk`` (``(ptr, base, step)``) at ``base``,
    runs ``element()`` m times, each followed by ``ptr += step``, then adds each ``(reg, step)``
    of ``advance``.
    """
    m_counter, m_count, m_label = m
    n_counter, n_count, n_label = n

    def element_step() -> None:
        element()
        for reg, _, step in walk:
            a.add(reg, step)

    def column() -> None:
        for reg, base, _ in walk:
            a.mov(reg, base)
        counted_loop(a, m_counter, m_count, element_step, m_label)
        for reg, step in advance:
            a.add(reg, step)

    counted_loop(a, n_counter, n_count, column, n_label)


def brgemm_signature(ctype: str) -> str:
    """The C signature of the BRGEMM kernels (`brgemm`, and `gemv` for one column)."""
    return (
        f"void(const {ctype}* a, const {ctype}* b, {ctype}* c, int64_t lda, int64_t ldb, int64_t ldc,"
        " int64_t br_stride_a, int64_t br_stride_b)"
    )


def build(a: Assembler, signature: str, name: str) -> Kernel:
    """A native Kernel of the assembled code, carrying its listing."""
    return Kernel(a.code(), signature, name=name, listing=a.listing(), isa="x86_64")


def emit_column(a: Assembler, t: Target, m: int, ptrs: list[Gpr], counter: Gpr, body, part: Partial | None) -> None:
    """Cover the ``m`` contiguous elements of one column: ``body(u, disp, part)`` handles one vector
    at byte offset ``disp`` from every pointer in ``ptrs`` (``u`` = 0..3 picks registers).

    Groups of 4 full vectors run in a loop that advances the pointers; the
    remaining full vectors and the masked partial vector (``part``) follow.
    """
    full, last = divmod(m, t.vl)
    groups, rem = divmod(full, 4)

    def group() -> None:
        for u in range(4):
            body(u, u * t.vbytes, None)
        for p in ptrs:
            a.add(p, 4 * t.vbytes)

    counted_loop(a, counter, groups, group, "mv")
    for u in range(rem):
        body(u, u * t.vbytes, None)
    if last:
        body(rem, rem * t.vbytes, part)
