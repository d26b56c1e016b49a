"""x86-64 (System V) emitter for a `LoopNest`: the seq loops and kernel calls as one function.

Register use (callee-saved, so kernel calls keep them): rbx/rbp/r12 current
pointers in0/in1/out, r13 shared index, r14 end, r15 unused. The frame holds
the 7th/8th outgoing call arguments at [rsp], [rsp+8], the base pointers at
[rsp+16..40) and one down-counting slot per seq loop from [rsp+40].
"""

from __future__ import annotations

from asm.x86_64 import Assembler, qword, r8, r9, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp
from minijit.kernels.loopnest import SIGNATURE, TENSORS, Call, LoopNest, emit_seq_loops
from minijit.runtime import load

POINTERS = (rbx, rbp, r12)
ARG_REGS = (rdi, rsi, rdx, rcx, r8, r9)
SAVED = (rbx, rbp, r12, r13, r14, r15)
BASES_AT = 16
COUNTERS_AT = 40


def _fits32(v: int) -> bool:
    return -(1 << 31) <= v < 1 << 31


def _add_const(a: Assembler, reg, value: int) -> None:
    """reg += value (any 64-bit value)."""
    if value == 0:
        return
    if _fits32(value):
        a.add(reg, value)
    else:
        a.mov(rax, value)
        a.add(reg, rax)


def _call(a: Assembler, call: Call) -> None:
    """System V call: six register arguments, the 7th and 8th in the outgoing slots."""
    for i, arg in enumerate(call.args):
        src = POINTERS[TENSORS.index(arg)] if isinstance(arg, str) else arg
        if i < 6:
            a.mov(ARG_REGS[i], src)
        elif isinstance(src, int) and not _fits32(src):
            a.mov(rax, src)
            a.mov(qword(rsp + 8 * (i - 6)), rax)
        else:
            a.mov(qword(rsp + 8 * (i - 6)), src)
    a.mov(rax, call.address)
    a.call(rax)


def _slot(i: int):
    return qword(rsp + COUNTERS_AT + 8 * i)


class _Emitter:
    """`minijit.kernels.loopnest.SeqEmitter` for x86-64: counters at [rsp + 40 + 8*i]."""

    def __init__(self, a: Assembler) -> None:
        self.a = a
        self.here, self.new_label, self.bind = a.label, a.new_label, a.bind

    def counter_init(self, i: int, size: int) -> None:
        self.a.mov(rax, size)
        self.a.mov(_slot(i), rax)

    def counter_loop(self, i: int, body) -> None:
        self.a.dec(_slot(i))
        self.a.jne(body)

    def skip_unless_counter(self, i: int, value: int, skip) -> None:
        self.a.mov(rax, value)
        self.a.cmp(_slot(i), rax)
        self.a.jne(skip)

    def advance(self, strides: tuple[int, int, int]) -> None:
        for ptr, stride in zip(POINTERS, strides, strict=True):
            _add_const(self.a, ptr, stride)

    def call(self, call: Call) -> None:
        _call(self.a, call)


def program(plan: LoopNest) -> Assembler:
    """The loop nest as an Assembler (prints as a listing)."""
    a = Assembler()
    seq = plan.seq_loops
    shared = plan.shared_loops
    # after 6 pushes rsp is 8 mod 16: the frame is 8 mod 16 so calls see an aligned stack
    frame = COUNTERS_AT + 8 * len(seq)
    frame += (8 - frame) % 16

    # -- prologue: callee-saved registers, frame, bases and range
    for r in SAVED:
        a.push(r)
    a.sub(rsp, frame)
    for i, r in enumerate((rdi, rsi, rdx)):
        a.mov(qword(rsp + BASES_AT + 8 * i), r)
    a.mov(r13, rcx)
    a.mov(r14, r8)
    done = a.new_label("done")
    a.cmp(r13, r14)
    a.jge(done)

    # -- shared iteration: pointers = bases + index decomposed over the shared loops
    top = a.label("shared")
    for i, ptr in enumerate(POINTERS):
        a.mov(ptr, qword(rsp + BASES_AT + 8 * i))
    if shared:
        a.mov(rax, r13)
        for depth, loop in enumerate(reversed(shared)):
            if depth < len(shared) - 1:  # innermost shared loop varies fastest: rdx = index, rax = rest
                a.xor(rdx, rdx)
                a.mov(rcx, loop.size)
                a.div(rcx)
                idx = rdx
            else:
                idx = rax
            for ptr, stride in zip(POINTERS, loop.strides, strict=True):
                if stride:
                    a.mov(rsi, idx)
                    if _fits32(stride):
                        a.imul(rsi, rsi, stride)
                    else:
                        a.mov(rdi, stride)
                        a.imul(rsi, rdi)
                    a.add(ptr, rsi)

    # -- seq loops and kernel calls; counters live in the frame
    emit_seq_loops(plan, _Emitter(a))
    a.inc(r13)
    a.cmp(r13, r14)
    a.jl(top)

    # -- epilogue
    a.bind(done)
    a.add(rsp, frame)
    for r in reversed(SAVED):
        a.pop(r)
    a.ret()
    return a


def generate(plan: LoopNest):
    """Compile ``plan`` into a native Kernel with `minijit.kernels.loopnest.SIGNATURE`."""
    a = program(plan)
    return load(a.code(), SIGNATURE, isa="x86_64", name="loopnest", listing=a.listing())
