"""AArch64 emitter for a `LoopNest`: the seq loops and kernel calls as one function.

Register use (all callee-saved, so kernel calls keep them):
x19/x20/x21 base pointers in0/in1/out, x22 shared index, x23 end,
x24/x25/x26 current pointers in0/in1/out. Seq loop counters count down in a
stack frame (one 8-byte slot per seq loop).
"""

from __future__ import annotations

from asm.aarch64 import (
    Assembler,
    X,
    mem,
    post,
    pre,
    sp,
    x0,
    x1,
    x2,
    x3,
    x4,
    x9,
    x10,
    x11,
    x12,
    x13,
    x19,
    x20,
    x21,
    x22,
    x23,
    x24,
    x25,
    x26,
    x29,
    x30,
)
from minijit.kernels.loopnest import SIGNATURE, Call, LoopNest, emit_seq_loops
from minijit.runtime import load

POINTERS = (x24, x25, x26)
BASES = (x19, x20, x21)


def _add_const(a: Assembler, reg, value: int) -> None:
    """reg += value (any 64-bit value)."""
    if value == 0:
        return
    if 0 < value <= 4095:
        a.add(reg, reg, value)
    elif -4095 <= value < 0:
        a.sub(reg, reg, -value)
    else:
        a.mov(x10, value)
        a.add(reg, reg, x10)


def _call(a: Assembler, call: Call) -> None:
    """Load the arguments into x0..x7 and call the kernel."""
    for i, arg in enumerate(call.args):
        if isinstance(arg, str):
            a.mov(X[i], POINTERS[("in0", "in1", "out").index(arg)])
        else:
            a.mov(X[i], arg)
    a.mov(x9, call.address)
    a.blr(x9)


class _Emitter:
    """`minijit.kernels.loopnest.SeqEmitter` for AArch64: counters at [sp, #8*i]."""

    def __init__(self, a: Assembler) -> None:
        self.a = a
        self.here, self.new_label, self.bind = a.label, a.new_label, a.bind

    def counter_init(self, i: int, size: int) -> None:
        self.a.mov(x9, size)
        self.a.str(x9, mem(sp, 8 * i))

    def counter_loop(self, i: int, body) -> None:
        self.a.ldr(x9, mem(sp, 8 * i))
        self.a.subs(x9, x9, 1)
        self.a.str(x9, mem(sp, 8 * i))
        self.a.b_ne(body)

    def skip_unless_counter(self, i: int, value: int, skip) -> None:
        self.a.ldr(x9, mem(sp, 8 * i))
        self.a.mov(x10, value)
        self.a.cmp(x9, x10)
        self.a.b_ne(skip)

    def advance(self, strides: tuple[int, int, int]) -> None:
        for ptr, stride in zip(POINTERS, strides, strict=True):
            _add_const(self.a, ptr, stride)

    def call(self, call: Call) -> None:
        _call(self.a, call)


def program(plan: LoopNest) -> Assembler:
    """The loop nest as an Assembler (prints as a listing)."""
    a = Assembler(name="loopnest")
    shared = plan.shared_loops
    frame = (8 * len(plan.seq_loops) + 15) // 16 * 16

    # -- prologue: frame record, callee-saved registers, counter slots
    a.stp(x29, x30, pre(sp, -80))
    a.mov(x29, sp)
    a.stp(x19, x20, mem(sp, 16))
    a.stp(x21, x22, mem(sp, 32))
    a.stp(x23, x24, mem(sp, 48))
    a.stp(x25, x26, mem(sp, 64))
    if frame:
        a.sub(sp, sp, frame)
    for base, arg in zip(BASES, (x0, x1, x2), strict=True):
        a.mov(base, arg)
    a.mov(x22, x3)
    a.mov(x23, x4)
    done = a.new_label("done")
    a.cmp(x22, x23)
    a.b_cond("ge", done)

    # -- shared iteration: pointers = bases + index decomposed over the shared loops
    top = a.label("shared")
    for ptr, base in zip(POINTERS, BASES, strict=True):
        a.mov(ptr, base)
    if shared:
        a.mov(x9, x22)
        for depth, loop in enumerate(reversed(shared)):
            idx = x9
            if depth < len(shared) - 1:  # innermost shared loop varies fastest
                a.mov(x10, loop.size)
                a.udiv(x11, x9, x10)
                a.msub(x12, x11, x10, x9)
                idx = x12
            for ptr, stride in zip(POINTERS, loop.strides, strict=True):
                if stride:
                    a.mov(x13, stride)
                    a.madd(ptr, idx, x13, ptr)
            if idx is x12:
                a.mov(x9, x11)

    # -- seq loops and kernel calls; counters live in the frame
    emit_seq_loops(plan, _Emitter(a))
    a.add(x22, x22, 1)
    a.cmp(x22, x23)
    a.b_lt(top)

    # -- epilogue
    a.bind(done)
    if frame:
        a.add(sp, sp, frame)
    a.ldp(x19, x20, mem(sp, 16))
    a.ldp(x21, x22, mem(sp, 32))
    a.ldp(x23, x24, mem(sp, 48))
    a.ldp(x25, x26, mem(sp, 64))
    a.ldp(x29, x30, post(sp, 80))
    a.ret()
    return a


def generate(plan: LoopNest, sve_vl: int = 128):
    """Compile ``plan``; the callable has the signature `minijit.kernels.loopnest.SIGNATURE`."""
    a = program(plan)
    return load(a.code(), SIGNATURE, isa="aarch64", name="loopnest", listing=a.listing(), sve_vl=sve_vl)
