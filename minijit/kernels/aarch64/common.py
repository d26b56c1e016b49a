"""Helpers shared by the AArch64 NEON and SVE generators.

Data type table (NEON and SVE views of fp32/fp64), argument registers,
parameter checks, the kernels' C signatures, `KernelKind` (a kind's ``program`` and
``generate``, which loads a kernel with `minijit.runtime.load`), small emitters (loops, stack and
immediate arithmetic), and the AAPCS64 frame (`prologue` saves the callee-saved registers a kernel
uses: x19-x28, and the low 64 bits d8-d15 of v8-v15; `epilogue` restores them and returns).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from asm.aarch64 import Assembler, X, Z, mem, post, pre, sp
from asm.aarch64.registers import ScalarReg, VecReg, XReg, ZVec
from minijit.kernels.epilogue import Epilogue, checked

__all__ = [
    "ARGS",
    "CALLEE_SAVED_V",
    "CALLEE_SAVED_X",
    "DTYPES",
    "DType",
    "EPILOGUE_OPS",
    "EpilogueCode",
    "Frame",
    "GEMV_X_SLOTS",
    "binary_signature",
    "brgemm_signature",
    "check_args",
    "check_bools",
    "check_choice",
    "check_epilogue",
    "check_positive",
    "dtype_info",
    "epilogue",
    "KernelKind",
    "add_imm",
    "kernel_name",
    "load_kernel",
    "loop",
    "sp_adjust",
    "sp_plus",
    "swap_operands",
    "gemv_row_passes",
    "gemv_x_chunks",
    "prologue",
    "unary_signature",
]

ARGS: tuple[XReg, ...] = tuple(X[i] for i in range(8))  # x0..x7: integer/pointer arguments
CALLEE_SAVED_X: tuple[int, ...] = tuple(range(19, 29))  # x19..x28
CALLEE_SAVED_V: tuple[int, ...] = tuple(range(8, 16))  # v8..v15 (low 64 bits: d8..d15)


@dataclass(frozen=True)
class DType:
    """One element type: C name, element size letter, bytes, lanes per 128-bit vector; SVE forms."""

    name: str
    ctype: str
    es: str  # "s" or "d"
    size: int  # bytes
    np: type

    @property
    def is_int(self) -> bool:
        """Whether the elements are (wrapping) integers (`INT_DTYPES`)."""
        return np.dtype(self.np).kind == "i"

    @property
    def lanes(self) -> int:
        """Elements per 128-bit NEON vector."""
        return 16 // self.size

    @property
    def shift(self) -> int:
        """log2 of the element size (elements -> bytes)."""
        return self.size.bit_length() - 1

    def vec(self, idx: int, width: int | None = None) -> VecReg:
        """``v<idx>`` arranged for ``width`` elements: fp32 widths 1-2 give ``.2s``, else the full vector."""
        lanes = 2 if self.size == 4 and width is not None and width <= 2 else self.lanes
        return VecReg(idx, self.es, lanes)

    def scalar(self, idx: int) -> ScalarReg:
        """Scalar view ``s<idx>``/``d<idx>``."""
        return ScalarReg(idx, self.es)

    # -- SVE ---------------------------------------------------------------------------
    @property
    def suffix(self) -> str:
        """Memory element suffix of the SVE loads/stores and counts (ld1w/ld1d, cntw/cntd)."""
        return "w" if self.size == 4 else "d"

    def z(self, idx: int) -> ZVec:
        """``z<idx>`` with this element size."""
        return getattr(Z[idx], self.es)

    def ld1(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "ld1" + self.suffix)(*ops)

    def st1(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "st1" + self.suffix)(*ops)

    def ld1r(self, a: Assembler, *ops: Any) -> None:
        getattr(a, "ld1r" + self.suffix)(*ops)

    def cnt(self, a: Assembler, rd: XReg) -> None:
        getattr(a, "cnt" + self.suffix)(rd)

    def inc(self, a: Assembler, rd: XReg, mul: int = 1) -> None:
        getattr(a, "inc" + self.suffix)(rd, "all", mul)


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", "float", "s", 4, np.float32),
    "fp64": DType("fp64", "double", "d", 8, np.float64),
}


#: the integer dtypes of the kernels that take them (`dtype_info` with ``ints``: the BRGEMMs)
INT_DTYPES: dict[str, DType] = {
    "s32": DType("s32", "int32_t", "s", 4, np.int32),
    "s64": DType("s64", "int64_t", "d", 8, np.int64),
}


def dtype_info(dtype: str, ints: tuple[str, ...] = ()) -> DType:
    """The `DType` of ``dtype`` ("fp32"/"fp64", or one of the integer dtypes ``ints`` the caller
    takes); ValueError otherwise."""
    if dtype in ints and dtype in INT_DTYPES:
        return INT_DTYPES[dtype]
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join((*DTYPES, *ints))}, got {dtype!r}")
    return DTYPES[dtype]


def check_positive(limit: int | None = 1 << 20, **dims: object) -> None:
    """Every named size is an int in 1..limit, or >= 1 without a limit (ValueError naming the first bad one)."""
    wanted = "an int >= 1" if limit is None else f"an integer in 1..{limit}"
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (limit is not None and value > limit):
            raise ValueError(f"{name} must be {wanted}, got {value!r}")


def check_choice(name: str, value: object, choices: Iterable[object], show: Callable[[object], str] = repr) -> None:
    """``value`` is one of ``choices`` (ValueError naming ``name`` and the choices, each as ``show`` gives it)."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(show, choices))}, got {value!r}")


def check_bools(**flags: object) -> None:
    """Every named flag is a bool (ValueError naming the first that is not)."""
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")


def check_args(
    limit: int | None, dtype: str, flags: dict[str, object], ints: tuple[str, ...] = (), **sizes: object
) -> DType:
    """A kernel's arguments: the ``sizes`` (`check_positive` up to ``limit``), ``dtype`` (float, or
    one of the integer dtypes ``ints``), then the bool ``flags``; returns the `DType` (ValueError
    naming the first bad argument)."""
    check_positive(limit, **sizes)
    t = dtype_info(dtype, ints)
    check_bools(**flags)
    return t


# -- fused epilogues ---------------------------------------------------------------------
#: the epilogue operations (`minijit.kernels.epilogue`) the AArch64 kernels emit on accumulators
EPILOGUE_OPS = frozenset({"relu"})


def check_epilogue(value: object, where: str) -> Epilogue:
    """``value`` (an `Epilogue`, its text or None) as an epilogue these kernels emit, else
    ValueError / TypeError naming ``where`` (`minijit.kernels.epilogue.checked`)."""
    return checked(value, EPILOGUE_OPS, where)


class EpilogueCode:
    """The emission of an elementwise `Epilogue` on NEON accumulator registers: `setup` once (its
    constants into the vector register ``scratch``, which the caller leaves free: relu's zero),
    then `apply` on each accumulator (``v<idx>``, the full 128 bits: lanes past a partial store
    are never stored). relu is ``fmax(x, +0)``: NaN stays NaN, -0 gives +0 (as the unary kernel).
    The none epilogue emits nothing."""

    def __init__(self, a: Assembler, t: DType, epilogue: Epilogue, scratch: int) -> None:
        self.a, self.t, self.scratch = a, t, scratch
        self.epilogue = epilogue.require(EPILOGUE_OPS, "AArch64 kernels")

    def setup(self) -> None:
        """A listing label naming the epilogue (no bytes), then its constants (relu: zero)."""
        if not self.epilogue:
            return
        self.a.label("epilogue_" + "_".join(self.epilogue.ops))
        if "relu" in self.epilogue.ops:
            self.a.movi(VecReg(self.scratch, "d", 2), 0)

    def apply(self, idx: int) -> None:
        t = self.t
        for op in self.epilogue.ops:
            if op == "relu":
                self.a.fmax(t.vec(idx), t.vec(idx), t.vec(self.scratch))

    def emit(self, regs: Iterable[int]) -> None:
        """`setup`, then `apply` on each register index of ``regs`` in order."""
        if self.epilogue:
            self.setup()
            for idx in regs:
                self.apply(idx)


# -- C signatures ------------------------------------------------------------------------
def brgemm_signature(dtype: str = "fp32") -> str:
    """The C signature of a BRGEMM kernel of ``dtype`` (float or `INT_DTYPES`)."""
    t = dtype_info(dtype, tuple(INT_DTYPES)).ctype
    return (
        f"void(const {t}* a, const {t}* b, {t}* c, int64_t lda, int64_t ldb, int64_t ldc,"
        " int64_t br_stride_a, int64_t br_stride_b)"
    )


def unary_signature(dtype: str = "fp32") -> str:
    """The C signature of a unary kernel of ``dtype``."""
    t = dtype_info(dtype).ctype
    return f"void(const {t}* a, {t}* b, int64_t lda, int64_t ldb)"


def binary_signature(dtype: str = "fp32") -> str:
    """The C signature of a binary kernel of ``dtype``."""
    t = dtype_info(dtype).ctype
    return f"void(const {t}* in0, const {t}* in1, {t}* out, int64_t ld0, int64_t ld1, int64_t ldo)"


def load_kernel(a: Assembler, signature: str, name: str, sve_vl: int = 128) -> Any:
    """The callable kernel of ``a`` (`minijit.runtime.load`): native on an AArch64 host, else
    emulated at SVE length ``sve_vl`` bits; named ``name``, with the C ``signature``."""
    from minijit.runtime import load

    return load(a.code(), signature, isa="aarch64", name=name, listing=a.listing(), sve_vl=sve_vl)


def kernel_name(kind: str, shape: str, dtype: str, **flags: bool) -> str:
    """``<kind>_<shape>_<dtype>`` and ``_ta`` / ``_tb`` / ... for each set transpose flag."""
    return f"{kind}_{shape}_{dtype}" + "".join(f"_{f[0]}{f[-1]}" for f, on in flags.items() if on)


class KernelKind:
    """The public face of one kernel kind on one ISA (`gemv.NeonGemv`, `brgemm.SveBrgemm`, ...): ``program``
    emits the kernel (an `Assembler`, or one and a listing), `generate` loads it, named by
    ``name`` (``program``'s arguments), with the C ``signature(dtype)``."""

    ISA: ClassVar[str]
    program: ClassVar[Callable[..., Any]]
    name: ClassVar[Callable[..., str]]
    signature: ClassVar[Callable[[str], str]]

    @classmethod
    def generate(cls, *args: Any, sve_vl: int = 128, **kwargs: Any) -> Any:
        """JIT the kernel of ``program(*args, **kwargs)``: native on an AArch64 host, else emulated
        at SVE length ``sve_vl`` bits (`minijit.runtime.load`). Bad arguments raise ValueError."""
        bound = inspect.signature(cls.program).bind(*args, **kwargs)
        bound.apply_defaults()
        a = cls.program(*bound.args, **bound.kwargs)
        if isinstance(a, tuple):
            a = a[0]
        return load_kernel(a, cls.signature(bound.arguments["dtype"]), cls.name(**bound.arguments), sve_vl)


# -- small emitters ------------------------------------------------------------------------
def loop(a: Assembler, cnt: XReg, count: int, body: Callable[[], None], name: str, inline_one: bool = True) -> None:
    """``body`` ``count`` times: nothing for 0, inline for 1 (with ``inline_one``), else a loop
    counting ``cnt`` down."""
    if count == 1 and inline_one:
        body()
    elif count >= 1:
        a.mov(cnt, count)
        top = a.label(name)
        body()
        a.subs(cnt, cnt, 1)
        a.b_ne(top)


def sp_plus(a: Assembler, rd: XReg, offset: int) -> None:
    """rd = sp + ``offset`` (a 12-bit immediate)."""
    if offset:
        a.add(rd, sp, offset)
    else:
        a.mov(rd, sp)


def sp_adjust(a: Assembler, size: int, alloc: bool) -> None:
    """sp -= size (``alloc``) or += size, in immediates; ``size`` a multiple of 16 below 16 MiB."""
    op = a.sub if alloc else a.add
    if size >> 12:
        op(sp, sp, size >> 12, "lsl", 12)
    if size & 0xFFF:
        op(sp, sp, size & 0xFFF)


def add_imm(a: Assembler, rd: XReg, value: int, tmp: XReg) -> None:
    """rd += value (>= 0): an immediate (or one shifted by 12), else through ``tmp``."""
    if value < 4096:
        a.add(rd, rd, value)
    elif value % 4096 == 0 and value >> 12 < 4096:
        a.add(rd, rd, value >> 12, "lsl", 12)
    else:
        a.mov(tmp, value)
        a.add(rd, rd, tmp)


def swap_operands(a: Assembler, tmp: XReg) -> None:
    """Cᵀ = Bᵀ·Aᵀ: swap the BRGEMM arguments a / b, lda / ldb and the BR strides (through ``tmp``)."""
    a_, b_, _, lda, ldb, _, br_a, br_b = ARGS
    for x, y in ((a_, b_), (lda, ldb), (br_a, br_b)):
        a.mov(tmp, x)
        a.mov(x, y)
        a.mov(y, tmp)


@dataclass(frozen=True)
class Frame:
    """Callee-saved registers stored by `prologue`, and the frame size in bytes.

    ``writeback``: the first store allocates the frame (pre-indexed) and the
    last load frees it (post-indexed), instead of a separate ``sub``/``add`` of sp.
    """

    xregs: tuple[int, ...]
    vregs: tuple[int, ...]
    writeback: bool = False

    @property
    def size(self) -> int:
        n = len(self.xregs) + len(self.vregs)
        return 8 * (n + (n & 1))  # 16-byte aligned


def _slots(frame: Frame) -> list[tuple[list, int]]:
    """Register groups (pairs or singles, X and D apart) with their byte offsets in the frame."""
    out, slot = [], 0
    for regs in ([X[r] for r in frame.xregs], [ScalarReg(r, "d") for r in frame.vregs]):
        for i in range(0, len(regs), 2):
            group = regs[i : i + 2]
            out.append((group, 8 * slot))
            slot += len(group)
    return out


def prologue(a: Assembler, xregs: Iterable[int] = (), vregs: Iterable[int] = (), writeback: bool = False) -> Frame:
    """Save the callee-saved registers among ``xregs``/``vregs`` (register numbers) on the stack.

    ``writeback``: allocate the frame with the first store (see `Frame`).
    """
    frame = Frame(
        tuple(sorted({r for r in xregs if r in CALLEE_SAVED_X})),
        tuple(sorted({r for r in vregs if r in CALLEE_SAVED_V})),
        writeback,
    )
    if frame.size and not writeback:
        a.sub(sp, sp, frame.size)
    for group, off in _slots(frame):
        addr = pre(sp, -frame.size) if writeback and off == 0 else mem(sp, off)
        if len(group) == 2:
            a.stp(group[0], group[1], addr)
        else:
            a.str(group[0], addr)
    return frame


def epilogue(a: Assembler, frame: Frame) -> None:
    """Restore what `prologue` saved (with ``writeback``: last slot first) and return."""
    slots = _slots(frame)
    for group, off in reversed(slots) if frame.writeback else slots:
        addr = post(sp, frame.size) if frame.writeback and off == 0 else mem(sp, off)
        if len(group) == 2:
            a.ldp(group[0], group[1], addr)
        else:
            a.ldr(group[0], addr)
    if frame.size and not frame.writeback:
        a.add(sp, sp, frame.size)
    a.ret()


# -- GEMV row form: a strided x copied into its stack buffer in chunks ---------------------
#: bytes at sp below a chunked x buffer: `gemv_row_passes`' slots (A and x at the chunk, y, x's BR
#: stride, A and x at the BR step, the BR step counter)
GEMV_X_SLOTS = 64


def gemv_x_chunks(k: int, br: int, es: int, cap: int, piece: int) -> tuple[int, int]:
    """GEMV row form with a strided x (``br`` BR steps of ``k`` elements of ``es`` bytes) copied
    into a stack buffer of ``cap`` bytes: the (BR steps, K elements) copied at a time. ``cap`` is
    rounded down to a multiple of ``piece`` bytes (at least one); all of x when it fits, else whole
    BR steps per chunk when one step's K does, else one step's K in pieces of that size (so every
    piece but the last is a whole multiple of ``piece``)."""
    elements = max(cap // piece, 1) * piece // es
    if br * k <= elements:
        return br, k
    if k <= elements:
        return elements // k, k
    return 1, elements


def gemv_row_passes(
    a: Assembler,
    k: int,
    br: int,
    es: int,
    chunks: tuple[int, int],
    copy: Callable[[int, int], None] | None,
    rows: Callable[[int, int], None],
    cnt: XReg,
    scratch: tuple[XReg, XReg],
) -> None:
    """The GEMV row form over x (``br`` BR steps of ``k`` elements of ``es`` bytes) in ``chunks``
    (`gemv_x_chunks`' (BR steps, K elements)): ``copy(steps, count)`` (a strided x into the stack
    buffer; None: x is contiguous), then ``rows(steps, count)`` (every row group adds its dot
    products into y), once for all of x, or for each chunk with the brgemm arguments as for that
    chunk alone: A (x0) and x (x1) at the chunk, y (x2) at its start, x's BR stride (x7); LDB (x4,
    bytes) and BR_A (x6, bytes) are read. Chunks are whole BR steps (a remainder chunk last), or
    one BR step at a time with its K in pieces (a remainder piece last); their state is kept in
    the `GEMV_X_SLOTS` bytes at sp (below the buffer), counted with ``cnt`` and updated with the
    two ``scratch`` registers between chunks."""

    def body(steps: int, count: int) -> None:
        if copy is not None:
            copy(steps, count)
        rows(steps, count)

    bc, kc = chunks
    if (bc, kc) == (br, k):
        body(br, k)
        return
    a_, x_, y_, _, ldb, _, br_a, br_b = ARGS
    t0, t1 = scratch
    s_a, s_x, s_y, s_bsb, s_a_br, s_x_br, s_br = range(0, 56, 8)
    state = ((a_, s_a), (x_, s_x), (y_, s_y), (br_b, s_bsb))
    for reg, slot in state:
        a.str(reg, mem(sp, slot))

    def chunk(steps: int, count: int) -> None:
        for reg, slot in state:
            a.ldr(reg, mem(sp, slot))
        body(steps, count)

    def advance(slot: int, count: int, stride: XReg | None) -> None:
        """The slot += ``count`` x ``stride`` (a register), or ``count`` bytes."""
        a.mov(t0, count)
        a.ldr(t1, mem(sp, slot))
        if stride is None:
            a.add(t1, t1, t0)
        else:
            a.madd(t1, t0, stride, t1)
        a.str(t1, mem(sp, slot))

    def loop(count: int, step: Callable[[], None], name: str, slot: int | None = None) -> None:
        """``step`` ``count`` times, counting ``cnt`` down (kept in ``slot`` across a ``step``
        that counts with it too)."""
        if count == 1:
            step()
            return
        a.mov(cnt, count)
        top = a.label(name)
        if slot is not None:
            a.str(cnt, mem(sp, slot))
        step()
        if slot is not None:
            a.ldr(cnt, mem(sp, slot))
        a.subs(cnt, cnt, 1)
        a.b_ne(top)

    if kc == k:  # whole BR steps per chunk: A and x on by bc steps

        def steps_chunk() -> None:
            chunk(bc, k)
            advance(s_a, bc, br_a)
            a.ldr(br_b, mem(sp, s_bsb))
            advance(s_x, bc, br_b)

        loop(br // bc, steps_chunk, "x_chunks")
        if br % bc:
            chunk(br % bc, k)
        return

    def piece() -> None:  # A on by kc elements, x by kc strides
        chunk(1, kc)
        advance(s_a, kc * es, None)
        advance(s_x, kc, ldb)

    def br_step() -> None:  # one BR step's K in pieces, then the next step from this one's start
        if br > 1:
            for slot, start in ((s_a, s_a_br), (s_x, s_x_br)):
                a.ldr(t1, mem(sp, slot))
                a.str(t1, mem(sp, start))
        loop(k // kc, piece, "k_pieces")
        if k % kc:
            chunk(1, k % kc)
        if br > 1:
            a.ldr(br_b, mem(sp, s_bsb))
            for slot, start, stride in ((s_a, s_a_br, br_a), (s_x, s_x_br, br_b)):
                a.ldr(t1, mem(sp, start))
                a.add(t1, t1, stride)
                a.str(t1, mem(sp, slot))

    loop(br, br_step, "br_steps", s_br)
