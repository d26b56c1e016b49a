"""The AArch64 emulation harness: a minimal static ELF emitted by `asm.aarch64`.

It runs under ``qemu-aarch64`` and serves requests on stdin/stdout. Every
request is 80 bytes: ten little-endian u64 ``(cmd, a0..a8)``. Every reply that
is not raw data is 32 bytes ``(status, r0, r1, r2)``.

======  ==========================================  =============================
cmd     request                                     reply
======  ==========================================  =============================
0       exit                                        (process exits 0)
1       syscall a0 with args a1..a6                 (OK, x0, 0, 0)
2       write a1 bytes from stdin to address a0     (OK, 0, 0, 0)
3       read a1 bytes at address a0                 the raw bytes
4       call a0(a1..a8)                             (OK, x0, d0 bits, 0)
======  ==========================================  =============================

A signal in emulated code (SIGSEGV, SIGILL, SIGBUS, SIGFPE, SIGTRAP) runs a
handler on an alternate stack that replies ``(FAULT, signo, pc, fault
address)`` and exits with status 3. Short reads/writes on the pipes are
retried; end of input exits with status 4.
"""

from __future__ import annotations

import functools
import struct

from asm.aarch64 import Assembler, X, d0, mem, sp, x0, x1, x2, x3, x8, x9, x10, x11, x19, x20, xzr

BASE_ADDRESS = 0x400000
CMD_EXIT, CMD_SYSCALL, CMD_WRITE, CMD_READ, CMD_CALL = range(5)
STATUS_OK = 0
STATUS_FAULT = 0xFA17
REQUEST = struct.Struct("<10Q")
REPLY = struct.Struct("<4Q")

SYS_READ, SYS_WRITE, SYS_EXIT_GROUP = 63, 64, 94
SYS_SIGALTSTACK, SYS_RT_SIGACTION = 132, 134
SA_SIGINFO, SA_ONSTACK = 4, 0x08000000
FAULT_SIGNALS = (4, 5, 7, 8, 11)  # SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV
ALTSTACK_BYTES = 64 * 1024
# struct ucontext (arm64): uc_mcontext at 176; sigcontext = fault_address, regs[31], sp, pc
UC_FAULT_ADDRESS = 176
UC_PC = 176 + 8 + 31 * 8 + 8


def _syscall(a: Assembler, nr: int) -> None:
    a.mov(x8, nr)
    a.svc(0)


def _transfer_loop(a: Assembler, fd: int, nr: int) -> None:
    """Subroutine body: move x1 bytes between fd and buffer x0, retrying short transfers."""
    # x10 = cursor, x11 = bytes left
    a.mov(x10, x0)
    a.mov(x11, x1)
    top, done, dead = a.new_label("xfer"), a.new_label("xfer_done"), a.new_label("xfer_dead")
    a.bind(top)
    a.cbz(x11, done)
    a.mov(x0, fd)
    a.mov(x1, x10)
    a.mov(x2, x11)
    _syscall(a, nr)
    a.cmp(x0, 0)
    a.b_cond("le", dead)
    a.add(x10, x10, x0)
    a.sub(x11, x11, x0)
    a.b(top)
    a.bind(dead)  # EOF or error on a pipe: nothing sensible is left to do
    a.mov(x0, 4)
    _syscall(a, SYS_EXIT_GROUP)
    a.bind(done)
    a.ret()


@functools.lru_cache(maxsize=1)
def harness_program() -> Assembler:
    """The harness as an Assembler (so it prints as a listing)."""
    a = Assembler(name="harness")
    read_full, write_full, handler = a.new_label("read_full"), a.new_label("write_full"), a.new_label("fault")
    loop = a.new_label("loop")
    cmds = {c: a.new_label(f"cmd{c}") for c in range(5)}

    # -- _start: 128 bytes of request/reply buffer at x19, signal alternate stack below it
    a.sub(sp, sp, 128)
    a.mov(x19, sp)
    a.sub(sp, sp, ALTSTACK_BYTES >> 12, "lsl", 12)
    a.mov(x20, sp)
    a.sub(sp, sp, 64)
    # sigaltstack({ss_sp = x20, ss_flags = 0, ss_size}, NULL)
    a.str(x20, mem(sp, 0))
    a.str(xzr, mem(sp, 8))
    a.mov(x9, ALTSTACK_BYTES)
    a.str(x9, mem(sp, 16))
    a.mov(x0, sp)
    a.mov(x1, 0)
    _syscall(a, SYS_SIGALTSTACK)
    # rt_sigaction(sig, {handler, SA_SIGINFO|SA_ONSTACK, 0, mask 0}, NULL, 8) for each fault signal
    for sig in FAULT_SIGNALS:
        a.adr(x9, handler)
        a.str(x9, mem(sp, 0))
        a.mov(x9, SA_SIGINFO | SA_ONSTACK)
        a.str(x9, mem(sp, 8))
        a.stp(xzr, xzr, mem(sp, 16))
        a.mov(x0, sig)
        a.mov(x1, sp)
        a.mov(x2, 0)
        a.mov(x3, 8)
        _syscall(a, SYS_RT_SIGACTION)
    a.add(sp, sp, 64)

    # -- main loop: read a request and dispatch on its command
    a.bind(loop)
    a.mov(x0, x19)
    a.mov(x1, REQUEST.size)
    a.bl(read_full)
    a.ldr(x9, mem(x19, 0))
    for c, target in cmds.items():
        a.cmp(x9, c)
        a.b_eq(target)
    a.b(cmds[CMD_EXIT])  # unknown command: exit

    # cmd 0: exit(0)
    a.bind(cmds[CMD_EXIT])
    a.mov(x0, 0)
    _syscall(a, SYS_EXIT_GROUP)

    # cmd 1: syscall a0(a1..a6)
    a.bind(cmds[CMD_SYSCALL])
    a.ldr(x8, mem(x19, 8))
    for i in range(6):
        a.ldr(X[i], mem(x19, 16 + 8 * i))
    a.svc(0)
    reply = a.new_label("reply")
    a.b(reply)

    # cmd 2: read a1 bytes from stdin into a0
    a.bind(cmds[CMD_WRITE])
    a.ldr(x0, mem(x19, 8))
    a.ldr(x1, mem(x19, 16))
    a.bl(read_full)
    a.mov(x0, 0)
    a.b(reply)

    # cmd 3: write a1 bytes at a0 to stdout (raw, no status)
    a.bind(cmds[CMD_READ])
    a.ldr(x0, mem(x19, 8))
    a.ldr(x1, mem(x19, 16))
    a.bl(write_full)
    a.b(loop)

    # cmd 4: call a0(a1..a8), reply x0 and d0
    a.bind(cmds[CMD_CALL])
    a.ldr(x9, mem(x19, 8))
    for i in range(8):
        a.ldr(X[i], mem(x19, 16 + 8 * i))
    a.blr(x9)
    a.str(d0, mem(x19, 16))

    # reply (OK, x0, [x19+16], 0)
    a.bind(reply)
    a.str(x0, mem(x19, 8))
    a.mov(x9, STATUS_OK)
    a.str(x9, mem(x19, 0))
    a.str(xzr, mem(x19, 24))
    a.mov(x0, x19)
    a.mov(x1, REPLY.size)
    a.bl(write_full)
    a.b(loop)

    # -- subroutines: full reads and writes on the pipes
    a.bind(read_full)
    _transfer_loop(a, 0, SYS_READ)
    a.bind(write_full)
    _transfer_loop(a, 1, SYS_WRITE)

    # -- fault handler(signo x0, siginfo x1, ucontext x2): reply FAULT and exit(3)
    a.bind(handler)
    a.sub(sp, sp, 32)
    a.mov(x9, STATUS_FAULT)
    a.str(x9, mem(sp, 0))
    a.str(x0, mem(sp, 8))
    a.mov(x9, UC_PC)
    a.ldr(x10, mem(x2, x9))
    a.str(x10, mem(sp, 16))
    a.ldr(x10, mem(x2, UC_FAULT_ADDRESS))
    a.str(x10, mem(sp, 24))
    a.mov(x0, sp)
    a.mov(x1, REPLY.size)
    a.bl(write_full)
    a.mov(x0, 3)
    _syscall(a, SYS_EXIT_GROUP)
    return a


def elf(code: bytes, base: int = BASE_ADDRESS) -> bytes:
    """A static AArch64 ELF executable: one read+execute PT_LOAD segment, entry at the code."""
    ehsize, phsize = 64, 56
    entry = base + ehsize + phsize
    total = ehsize + phsize + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1, SysV
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 183, 1, entry, ehsize, 0, 0, ehsize, phsize, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x10000)
    return header + phdr + code


@functools.lru_cache(maxsize=1)
def harness_elf() -> bytes:
    """The harness as ELF bytes."""
    return elf(harness_program().code())
