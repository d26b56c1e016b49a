"""Threads for a compiled sparse nest on x86-64: its top loop's weighted ranges run through
`minijit.parallel.run_loopnest` (minijit's native team: a dispatch of a few microseconds, or the
Python pool where the team is off), by a trampoline of the loop-nest signature.

The nest's own signature is ``void nest(const int64_t* args, int64_t begin, int64_t end)``
(`minijit.sparseauto.codegen`), and each thread needs an args block of its own (its
temporaries). The trampoline

    void sparse_trampoline(const int64_t* ctx, uintptr_t, uintptr_t, int64_t p0, int64_t p1)

claims a free args block (``xchg`` on the block's flag), calls the nest once for the top-loop
iterations ``bounds[p0] .. bounds[p1]`` of the ranges ``[p0, p1)`` it was given, and frees
the block. ``ctx`` holds int64 words (`CTX`): the flags' address, the blocks' address, the
block stride in bytes, the bounds' address, the nest's address and the block count. With one
block per range a claim always finds one: no more threads than ranges run the job.
"""

from __future__ import annotations

import threading

import numpy as np

from asm.x86_64 import Assembler, qword
from asm.x86_64.registers import r8, r12, r13, r14, r15, rax, rbx, rcx, rdi, rdx, rsi
from minijit.arrays import address

__all__ = ["CTX", "run_ranges", "trampoline_code"]

#: the ctx words, in order (byte offset = 8 * index)
CTX = ("flags", "blocks", "stride", "bounds", "nest", "count")
_OFF = {name: 8 * n for n, name in enumerate(CTX)}

_TRAMPOLINE = None
_LOAD_LOCK = threading.Lock()


def trampoline_code() -> Assembler:
    """The trampoline (module doc); callee-saved registers hold its state across the nest's call."""
    a = Assembler(name="sparse_trampoline")
    saved = (rbx, r12, r13, r14, r15)  # five pushes: rsp is 16-byte aligned at the call
    for r in saved:
        a.push(r)
    a.mov(rbx, rdi)  # ctx
    a.mov(r12, rcx)  # first range
    a.mov(r13, r8)  # end range
    a.mov(r14, qword(rbx + _OFF["flags"]))
    got, again = a.new_label("got"), a.new_label("claim")
    a.bind(again)  # claim the first free block: its flag 0 -> 1
    a.xor(r15.r32, r15.r32)
    top = a.label("claim_next")
    a.mov(rax.r32, 1)
    a.xchg(qword(r14 + r15 * 8), rax)  # a locked swap: a full barrier
    a.test(rax, rax)
    a.jz(got)
    a.inc(r15)
    a.cmp(r15, qword(rbx + _OFF["count"]))
    a.jl(top)
    a.pause()  # every block taken: only when more threads than blocks run (never by run_ranges)
    a.jmp(again)
    a.bind(got)  # the nest over bounds[p0] .. bounds[p1] with block r15
    a.mov(rdi, r15)
    a.imul(rdi, qword(rbx + _OFF["stride"]))
    a.add(rdi, qword(rbx + _OFF["blocks"]))
    a.mov(rax, qword(rbx + _OFF["bounds"]))
    a.mov(rsi, qword(rax + r12 * 8))
    a.mov(rdx, qword(rax + r13 * 8))
    a.call(qword(rbx + _OFF["nest"]))
    a.xor(rax.r32, rax.r32)
    a.mov(qword(r14 + r15 * 8), rax)  # free the block (x86 stores are ordered after the nest's)
    for r in reversed(saved):
        a.pop(r)
    a.ret()
    return a


def _trampoline() -> int:
    """The trampoline's entry address (loaded once per process, W^X)."""
    global _TRAMPOLINE
    with _LOAD_LOCK:
        if _TRAMPOLINE is None:
            from minijit.parallel import LOOPNEST_SIGNATURE
            from minijit.runtime import load

            a = trampoline_code()
            sig = LOOPNEST_SIGNATURE.replace("(*)", "")
            _TRAMPOLINE = load(a.code(), sig, isa="x86_64", name=a.name, listing=a.listing(), unchecked=True)
        return _TRAMPOLINE.address


def run_ranges(nest_address: int, blocks: np.ndarray, ranges: list[tuple[int, int]]) -> None:
    """Run the nest at ``nest_address`` over ``ranges`` (top-loop iterations ``[begin, end)``,
    contiguous and ascending) on up to ``len(ranges)`` threads, row ``t`` of ``blocks`` (int64
    addresses, C-ordered, one row per range) the args block of whichever thread claims it. The
    caller vouches for the nest and for what the blocks point to; the shapes are checked here."""
    from minijit.parallel import run_loopnest

    n = len(ranges)
    if isinstance(nest_address, bool) or not isinstance(nest_address, int) or nest_address <= 0:
        raise ValueError(f"nest_address must be a positive int (a code address), got {nest_address!r}")
    if n == 0:
        raise ValueError("ranges must hold at least one range")
    if any(b < 0 or e < b for b, e in ranges):
        raise ValueError(f"every range must be [begin, end) with 0 <= begin <= end, got {ranges}")
    if blocks.dtype != np.int64 or blocks.ndim != 2:
        raise ValueError(f"blocks must be a 2-d int64 array, got {blocks.dtype} of shape {blocks.shape}")
    if blocks.shape[0] != n:
        raise ValueError(f"blocks must have one row per range ({n} rows), got {blocks.shape[0]}")
    if not blocks.flags.c_contiguous:
        raise ValueError("blocks must be C-ordered (one args block per row)")
    if any(b1 != e0 for (_, e0), (b1, _) in zip(ranges, ranges[1:], strict=False)):
        raise ValueError(f"ranges must be contiguous, got {ranges}")
    # one buffer: the trampoline's context (6 words), the blocks' flags (n), the bounds (n + 1)
    buf = np.zeros(6 + 2 * n + 1, np.int64)
    base = address(buf)
    buf[:6] = (base + 48, address(blocks), blocks.strides[0], base + 48 + 8 * n, nest_address, n)
    buf[6 + n] = ranges[0][0]
    buf[7 + n :] = [e for _, e in ranges]
    run_loopnest(_trampoline(), base, 0, 0, n, n)  # buf and blocks live until it returns
