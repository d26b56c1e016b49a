"""A native thread team for compiled loop nests (x86-64 Linux): dispatch in a few microseconds.

`Team(workers)` starts ``workers`` POSIX threads (``pthread_create`` through
cffi) whose start routine is JIT-generated x86-64 code; `Team.run(fn, in0, in1,
out, n, threads)` calls the generated entry

    void team_run(team*, fn, in0, in1, out, int64_t n, int64_t threads)

with the GIL released: it splits ``[0, n)`` into ``c = min(threads, workers + 1,
n)`` contiguous chunks (sizes differ by at most one, larger ones first, as
`minijit.parallel.chunks`), publishes chunks 1..c-1 to workers 0..c-2, runs
chunk 0 itself and returns when every chunk is done. ``fn`` is the address of a
native ``void f(const void* in0, const void* in1, void* out, int64_t begin,
int64_t end)`` (a compiled loop nest; iterations, not bytes). Workers never touch
Python objects.

Shared state is one ordinary read-write numpy buffer (never executable); the
code lives in a W^X `ExecutableBuffer`. Layout (bytes, 64-byte aligned; each
worker slot on its own pair of cache lines):

    header  +0 pending (u32, futex word of the master)   +4 master_sleeping (u32)
            +8 started (u32, workers that picked up the current job)
            +64 workers (i64)  +72 spin (u32, ``pause`` iterations before a futex wait)
    slot i  at 128 + 128*i: +0 gen (u32, futex word)  +4 sleeping (u32)  +8 fn
            +16 in0  +24 in1  +32 out  +40 begin  +48 end  +56 header address  +64 claim (u32)

Protocol. The master writes a slot's job fields, resets its ``claim`` to 0, then increments ``gen`` with
``lock xadd`` (a full barrier), then reads ``sleeping`` and issues FUTEX_WAKE
only if it is set. A worker spins on ``gen`` with ``pause`` for a bounded count,
then sets ``sleeping`` with ``xchg`` (a full barrier), re-reads ``gen`` and calls
FUTEX_WAIT with the value it last saw, so the kernel re-checks the word: no wake-up
is lost (both sides store, fence, then load the other's word). A worker that sees a new
``gen`` claims the slot's chunk with ``xchg claim, 1`` and runs it only if it got 0; after
chunk 0 the master does the same for every slot of the job and runs the chunks no worker has
claimed (a worker not yet started, descheduled by a busy host or still waking, would finish
later than the master can). Whoever ran a chunk reports with ``lock xadd pending, -1``; a
worker that brings it to zero wakes the master if ``master_sleeping`` is set; the master waits
the same way on ``pending``. Job fields are written before ``claim`` is reset and read after
it is won (x86 stores are seen in order), so a claimed chunk's fields are never torn, even
when the master reuses a slot whose worker has not yet looked at the previous job (that worker
then finds the claim taken, or claims the new job); workers beyond ``c - 1`` are not touched
and keep waiting. ``fn == 0`` tells a
worker to exit (`close`). Spinning: `DEFAULT_SPIN` ``pause`` iterations, `OVERSUBSCRIBED_SPIN`
for calls with more threads than CPUs; the master stops early (`STALL_SPIN`) when a
worker has not picked up its chunk (``started``), i.e. is not on a CPU. Workers run with
every signal blocked.

Concurrency: one job at a time per team; concurrent callers are serialized by a
lock (each call's chunks are only as many as the team has threads anyway).
Fork: a child process has no workers; `run` refuses to run a team created in
another process (`minijit.parallel` makes a new one). Exit: `close` (also run
by a finalizer at interpreter exit) stops and joins the workers before the code
pages are unmapped; if a job is still running `EXIT_JOIN_TIMEOUT` s into that (a daemon thread's),
the workers are left running and their code and state stay allocated.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any

import cffi
import numpy as np

from asm.x86_64 import (
    Assembler,
    dword,
    eax,
    ebp,
    ebx,
    ecx,
    edx,
    esi,
    ptr,
    qword,
    r8,
    r9,
    r10,
    r10d,
    r12,
    r13,
    r14,
    r14d,
    r15,
    r15d,
    rax,
    rbp,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
    rsp,
)
from minijit.runtime.features import host
from minijit.runtime.memory import ExecutableBuffer

__all__ = ["Team", "unsupported_reason", "DEFAULT_SPIN"]

# shared-state layout (bytes)
PENDING, MSLEEP, STARTED, NWORKERS, SPIN = 0, 4, 8, 64, 72
HEADER = 128
GEN, SLEEPING, FN, IN0, IN1, OUT, BEGIN, END, TEAM, CLAIM = 0, 4, 8, 16, 24, 32, 40, 48, 56, 64
SLOT = 128
ALIGN = 128

# Linux x86-64
SYS_FUTEX = 202
FUTEX_WAIT_PRIVATE = 0 | 128
FUTEX_WAKE_PRIVATE = 1 | 128

#: ``pause`` iterations a waiting thread spins before it sleeps in the kernel (~0.25 ms on Zen 3:
#: longer than a futex wake-up takes on a VM, so back-to-back calls stay on the fast path) ...
DEFAULT_SPIN = 1 << 13
#: ... and when a job has more threads than this process has CPUs (spinning would steal them).
OVERSUBSCRIBED_SPIN = 1 << 5
#: The master stops spinning after this many ``pause`` iterations while a worker that was spinning
#: has not picked up its chunk: it is not on a CPU (the host is busy), and spinning would keep it
#: off ours. A worker the master had to wake from its futex gets `WOKEN_STALL_SPIN` (a wake-up takes
#: time; but if the kernel queued it on the master's CPU, spinning only delays it).
STALL_SPIN = 1 << 8
WOKEN_STALL_SPIN = 1 << 11
RUN_SIGNATURE = "void(*)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t)"
STOP_SIGNATURE = "void(*)(uintptr_t)"

_ffi = cffi.FFI()
_ffi.cdef(
    """
    typedef unsigned long pthread_t;
    typedef struct { unsigned long val[16]; } sigset_t;
    int pthread_create(pthread_t *thread, const void *attr, void *(*start)(void *), void *arg);
    int pthread_join(pthread_t thread, void **retval);
    int pthread_sigmask(int how, const sigset_t *set, sigset_t *old);
    int sigfillset(sigset_t *set);
    """
)
_SIG_SETMASK = 2
_libc: Any = None


def unsupported_reason() -> str | None:
    """Why the native team cannot run on this host (None when it can: Linux on x86-64)."""
    if host().isa != "x86_64":
        return f"the native team is x86-64 code; this host is {host().isa}"
    if not sys.platform.startswith("linux"):
        return f"the native team uses Linux futexes; this host runs {sys.platform}"
    return None


def _pthreads() -> Any:
    global _libc
    if _libc is None:
        lib = _ffi.dlopen(None)
        try:
            lib.pthread_create  # noqa: B018  (glibc >= 2.34 has it in libc)
        except AttributeError:
            lib = _ffi.dlopen("libpthread.so.0")
        _libc = lib
    return _libc


# -- code generation ----------------------------------------------------------------------------
def _futex(a: Assembler, word, op: int, value) -> None:
    """``futex(word, op, value, NULL)``; ``word`` an address expression, ``value`` an int or r32.
    Clobbers rax, rcx, rdx, rsi, rdi, r11 (and r10 for FUTEX_WAIT: the timeout)."""
    a.lea(rdi, ptr(word))
    a.mov(esi, op)
    a.mov(edx, value)
    if op == FUTEX_WAIT_PRIVATE:
        a.xor(r10d, r10d)  # no timeout
    a.mov(eax, SYS_FUTEX)
    a.syscall()


def _push_callee_saved(a: Assembler) -> None:
    for r in (rbx, rbp, r12, r13, r14, r15):
        a.push(r)


def _pop_callee_saved(a: Assembler) -> None:
    for r in (r15, r14, r13, r12, rbp, rbx):
        a.pop(r)


def _emit_worker(a: Assembler) -> None:
    """``void* worker(slot*)``: wait for a new ``gen``, run the slot's job, report, repeat."""
    _push_callee_saved(a)
    a.sub(rsp, 8)  # 8 (return address) + 48 + 8: rsp is 16-byte aligned at the calls below
    a.mov(r12, rdi)  # slot
    a.mov(rbx, qword(r12 + TEAM))  # header
    a.xor(r14d, r14d)  # the gen last seen (slots start at 0)
    wait, spin_l, got, woke, ext = (a.new_label(n) for n in ("wait", "spin", "got", "woke", "exit"))
    a.bind(wait)
    a.mov(r15d, dword(rbx + SPIN))
    a.bind(spin_l)
    a.mov(eax, dword(r12 + GEN))
    a.cmp(eax, r14d)
    a.jne(got)
    a.pause()
    a.dec(r15d)
    a.jnz(spin_l)
    # sleep: announce, re-check (Dekker with the master's lock xadd on gen), futex wait on gen == seen
    a.mov(eax, 1)
    a.xchg(dword(r12 + SLEEPING), eax)
    a.mov(eax, dword(r12 + GEN))
    a.cmp(eax, r14d)
    a.jne(woke)
    _futex(a, r12 + GEN, FUTEX_WAIT_PRIVATE, r14d)
    a.bind(woke)
    a.mov(dword(r12 + SLEEPING), 0)
    a.jmp(wait)
    a.bind(got)
    a.mov(r14d, eax)
    a.mov(rax, qword(r12 + FN))
    a.test(rax, rax)
    a.jz(ext)
    a.mov(ecx, 1)
    a.xchg(dword(r12 + CLAIM), ecx)  # claim the chunk (atomic): 1 back means the master ran it
    a.test(ecx, ecx)
    a.jnz(wait)
    a.mov(rax, qword(r12 + FN))  # the fields of the job claimed (written before its claim was reset)
    a.mov(ecx, 1)
    a.xadd(dword(rbx + STARTED), ecx, lock=True)  # picked up (the master's stall detection)
    a.mov(rdi, qword(r12 + IN0))
    a.mov(rsi, qword(r12 + IN1))
    a.mov(rdx, qword(r12 + OUT))
    a.mov(rcx, qword(r12 + BEGIN))
    a.mov(r8, qword(r12 + END))
    a.call(rax)
    a.mov(eax, -1)
    a.xadd(dword(rbx + PENDING), eax, lock=True)
    a.cmp(eax, 1)
    a.jne(wait)  # others still running
    a.cmp(dword(rbx + MSLEEP), 0)
    a.je(wait)
    _futex(a, rbx + PENDING, FUTEX_WAKE_PRIVATE, 1)
    a.jmp(wait)
    a.bind(ext)
    a.add(rsp, 8)
    _pop_callee_saved(a)
    a.xor(eax, eax)
    a.ret()


def _emit_run(a: Assembler) -> None:
    """``team_run(team, fn, in0, in1, out, n, threads)``: publish, run chunk 0, wait for the rest."""
    _push_callee_saved(a)
    a.sub(rsp, 40)  # locals: [rsp] base, [rsp+8] extra chunks left, [rsp+16] end of chunk 0, [rsp+24] workers,
    # [rsp+32] stall budget (pause iterations)
    threads = qword(rsp + 40 + 48 + 8)
    a.mov(r12, rdi)
    a.mov(r13, rsi)
    a.mov(rbx, rdx)
    a.mov(rbp, rcx)
    a.mov(r14, r8)
    a.mov(r15, r9)
    done, multi = a.new_label("done"), a.new_label("multi")
    a.test(r15, r15)
    a.jle(done)  # n <= 0: nothing to do
    # chunks = min(max(threads, 1), workers + 1, n)
    t1, t2, t3 = a.new_label("t"), a.new_label("t"), a.new_label("t")
    a.mov(rax, threads)
    a.cmp(rax, 1)
    a.jge(t1)
    a.mov(eax, 1)
    a.bind(t1)
    a.mov(rcx, qword(r12 + NWORKERS))
    a.add(rcx, 1)
    a.cmp(rax, rcx)
    a.jle(t2)
    a.mov(rax, rcx)
    a.bind(t2)
    a.cmp(rax, r15)
    a.jle(t3)
    a.mov(rax, r15)
    a.bind(t3)
    a.mov(rcx, rax)
    a.cmp(rcx, 1)
    a.jne(multi)
    a.mov(rdi, rbx)
    a.mov(rsi, rbp)
    a.mov(rdx, r14)
    a.xor(ecx, ecx)
    a.mov(r8, r15)
    a.call(r13)
    a.jmp(done)

    a.bind(multi)
    a.mov(rax, r15)
    a.xor(edx, edx)
    a.div(rcx)  # rax = base, rdx = extra (chunks that get one more)
    a.mov(qword(rsp), rax)
    a.mov(r9, rax)
    m0 = a.new_label("m0")
    a.test(rdx, rdx)
    a.jz(m0)
    a.add(r9, 1)
    a.sub(rdx, 1)
    a.bind(m0)
    a.mov(qword(rsp + 8), rdx)
    a.mov(qword(rsp + 16), r9)  # chunk 0 is [0, r9)
    a.lea(rax, ptr(rcx - 1))
    a.mov(dword(r12 + PENDING), eax)
    a.mov(dword(r12 + STARTED), 0)
    a.mov(qword(rsp + 24), rax)
    a.mov(qword(rsp + 32), STALL_SPIN)
    a.mov(r10, rax)  # workers to publish to
    a.lea(r8, ptr(r12 + HEADER))  # slot 0
    loop, l1, l2 = a.new_label("publish"), a.new_label("l"), a.new_label("l")
    a.bind(loop)  # r8 slot, r9 begin, r10 count (syscall keeps them)
    a.mov(rax, qword(rsp))
    a.cmp(qword(rsp + 8), 0)
    a.je(l1)
    a.sub(qword(rsp + 8), 1)
    a.add(rax, 1)
    a.bind(l1)
    a.mov(qword(r8 + FN), r13)
    a.mov(qword(r8 + IN0), rbx)
    a.mov(qword(r8 + IN1), rbp)
    a.mov(qword(r8 + OUT), r14)
    a.mov(qword(r8 + BEGIN), r9)
    a.add(r9, rax)
    a.mov(qword(r8 + END), r9)
    a.mov(dword(r8 + CLAIM), 0)  # after the fields: a worker that claims sees them
    a.mov(eax, 1)
    a.xadd(dword(r8 + GEN), eax, lock=True)  # publish; full barrier before reading `sleeping`
    a.cmp(dword(r8 + SLEEPING), 0)
    a.je(l2)
    _futex(a, r8 + GEN, FUTEX_WAKE_PRIVATE, 1)
    a.mov(qword(rsp + 32), WOKEN_STALL_SPIN)  # a worker is waking up: a late start is expected
    a.bind(l2)
    a.add(r8, SLOT)
    a.sub(r10, 1)
    a.jnz(loop)

    a.mov(rdi, rbx)  # chunk 0 on this thread
    a.mov(rsi, rbp)
    a.mov(rdx, r14)
    a.xor(ecx, ecx)
    a.mov(r8, qword(rsp + 16))
    a.call(r13)

    # claim every chunk no worker has claimed yet and run it here: a worker that has not started
    # by now (descheduled, or still waking) would finish it later than this thread can
    steal, stolen_next = a.new_label("steal"), a.new_label("steal_next")
    a.mov(rax, qword(rsp + 24))
    a.mov(qword(rsp + 8), rax)  # slots of this job left to try
    a.lea(r15, ptr(r12 + HEADER))
    a.bind(steal)
    a.mov(eax, 1)
    a.xchg(dword(r15 + CLAIM), eax)
    a.test(eax, eax)
    a.jnz(stolen_next)
    a.mov(ecx, 1)
    a.xadd(dword(r12 + STARTED), ecx, lock=True)
    a.mov(rdi, qword(r15 + IN0))
    a.mov(rsi, qword(r15 + IN1))
    a.mov(rdx, qword(r15 + OUT))
    a.mov(rcx, qword(r15 + BEGIN))
    a.mov(r8, qword(r15 + END))
    a.call(qword(r15 + FN))
    a.mov(eax, -1)
    a.xadd(dword(r12 + PENDING), eax, lock=True)  # no wake: this thread is the one that waits
    a.bind(stolen_next)
    a.add(r15, SLOT)
    a.sub(qword(rsp + 8), 1)
    a.jnz(steal)

    # wait: spin while pending != 0, at most `spin` times, and at most STALL_SPIN times while some
    # worker has not picked up its chunk; then sleep on pending
    wait, spin_l, woke, sleep, going = (a.new_label(n) for n in ("wait", "spin", "woke", "sleep", "going"))
    a.mov(ebx, dword(rsp + 24))  # workers in this job
    a.bind(wait)
    a.mov(r15d, dword(r12 + SPIN))
    a.mov(ebp, dword(rsp + 32))
    a.bind(spin_l)
    a.mov(eax, dword(r12 + PENDING))
    a.test(eax, eax)
    a.jz(done)
    a.pause()
    a.cmp(dword(r12 + STARTED), ebx)
    a.je(going)
    a.dec(ebp)
    a.jz(sleep)
    a.bind(going)
    a.dec(r15d)
    a.jnz(spin_l)
    a.bind(sleep)
    a.mov(eax, 1)
    a.xchg(dword(r12 + MSLEEP), eax)
    a.mov(edx, dword(r12 + PENDING))
    a.test(edx, edx)
    a.jz(woke)
    _futex(a, r12 + PENDING, FUTEX_WAIT_PRIVATE, edx)
    a.bind(woke)
    a.mov(dword(r12 + MSLEEP), 0)
    a.jmp(wait)

    a.bind(done)
    a.add(rsp, 40)
    _pop_callee_saved(a)
    a.ret()


def _emit_stop(a: Assembler) -> None:
    """``team_stop(team)``: every worker gets ``fn = 0`` (exit), a new ``gen`` and a wake."""
    end, loop = a.new_label("end"), a.new_label("stop")
    a.mov(r9, qword(rdi + NWORKERS))
    a.lea(r8, ptr(rdi + HEADER))
    a.test(r9, r9)
    a.jz(end)
    a.bind(loop)
    a.mov(qword(r8 + FN), 0)
    a.mov(eax, 1)
    a.xadd(dword(r8 + GEN), eax, lock=True)
    _futex(a, r8 + GEN, FUTEX_WAKE_PRIVATE, 1)
    a.add(r8, SLOT)
    a.sub(r9, 1)
    a.jnz(loop)
    a.bind(end)
    a.ret()


def generate() -> tuple[Assembler, dict[str, int]]:
    """The team's code: worker start routine, ``team_run`` and ``team_stop``; entry offsets in bytes."""
    a = Assembler(name="team")
    entries = {}
    for name, emit in (("worker", lambda: _emit_worker(a)), ("run", lambda: _emit_run(a))):
        while a.pos % 16:
            a.int3()
        entries[name] = a.pos
        emit()
    while a.pos % 16:
        a.int3()
    entries["stop"] = a.pos
    _emit_stop(a)
    return a, entries


# -- the team -----------------------------------------------------------------------------------
class _State(dict):
    """A team's mutable flags (``pid``, ``closed``), weakly tracked for the fork hook."""

    __hash__ = object.__hash__


_STATES: weakref.WeakSet[_State] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child inherits the teams' memory but none of their threads."""
    for state in list(_STATES):
        state["closed"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _as_int(name: str, value: object, lo: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    return int(value)


_ABANDONED: list[tuple[ExecutableBuffer, np.ndarray]] = []
#: Seconds the finalizer waits for a running job before it leaves the workers alone.
EXIT_JOIN_TIMEOUT = 2.0


def _shutdown(
    run_lock: threading.Lock, stop: Any, base: int, tids: list[int], code: ExecutableBuffer, state, memory
) -> None:
    """Stop and join the workers (finalizer; holds no reference to the Team, but keeps the
    workers' code and ``memory`` alive until they are joined)."""
    if not tids or os.getpid() != state["pid"]:
        return  # never started, or a forked child: the workers are not ours
    if not run_lock.acquire(timeout=EXIT_JOIN_TIMEOUT):
        # a job is still running (a daemon thread at interpreter exit): leave the workers, and keep
        # their code mapped and their state allocated for the rest of the process
        state["closed"] = True
        code._finalizer.detach()  # noqa: SLF001
        _ABANDONED.append((code, memory))
        return
    try:
        state["closed"] = True
        stop(base)
        lib = _pthreads()
        for tid in tids:
            lib.pthread_join(tid, _ffi.NULL)
        tids.clear()
    finally:
        run_lock.release()


class Team:
    """``workers`` native threads plus the calling thread; `run` dispatches a loop nest over them.

    ``spin``: ``pause`` iterations a waiting thread spins before it sleeps in a futex; by default
    `DEFAULT_SPIN`, or `OVERSUBSCRIBED_SPIN` for calls with more threads than the process has CPUs.
    Raises RuntimeError where `unsupported_reason()` says the host cannot run it.
    """

    def __init__(self, workers: int, *, spin: int | None = None) -> None:
        reason = unsupported_reason()
        if reason is not None:
            raise RuntimeError(reason)
        workers = _as_int("workers", workers, 0)
        if spin is not None and (not isinstance(spin, int) or isinstance(spin, bool) or not 1 <= spin < 1 << 31):
            raise ValueError(f"spin must be an int in 1..2**31-1 (pause iterations), got {spin!r}")
        self._fixed_spin = spin
        self._spin_threads = 0  # the thread count the current spin was chosen for
        self._cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        asm, entries = generate()
        self.listing = asm.listing()
        self._code = ExecutableBuffer(asm.code())
        addr = self._code.address
        self._run = _ffi.cast(RUN_SIGNATURE, addr + entries["run"])
        stop = _ffi.cast(STOP_SIGNATURE, addr + entries["stop"])
        raw = np.zeros(HEADER + SLOT * workers + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        self._memory = raw[skip : skip + HEADER + SLOT * workers]
        self._base = base = self._memory.ctypes.data
        self._memory[NWORKERS : NWORKERS + 8].view(np.int64)[0] = workers
        self._spin_word = self._memory[SPIN : SPIN + 4].view(np.uint32)
        self._spin_word[0] = spin or DEFAULT_SPIN
        for i in range(workers):
            self._memory[HEADER + SLOT * i + TEAM :][:8].view(np.uint64)[0] = base
        self.workers = workers
        self._lock = threading.Lock()
        self._state = _State(pid=os.getpid(), closed=False)
        self._tids: list[int] = []
        _STATES.add(self._state)
        self._finalizer = weakref.finalize(
            self, _shutdown, self._lock, stop, base, self._tids, self._code, self._state, self._memory
        )
        self._start(_ffi.cast("void *(*)(void *)", addr + entries["worker"]))

    def _start(self, routine: Any) -> None:
        lib = _pthreads()
        blocked, old = _ffi.new("sigset_t *"), _ffi.new("sigset_t *")
        lib.sigfillset(blocked)
        # workers inherit a mask with every signal blocked: Python's handlers run on Python threads
        if lib.pthread_sigmask(_SIG_SETMASK, blocked, old) != 0:
            raise OSError("pthread_sigmask failed")
        try:
            tid = _ffi.new("pthread_t *")
            for i in range(self.workers):
                slot = _ffi.cast("void *", self._base + HEADER + SLOT * i)
                err = lib.pthread_create(tid, _ffi.NULL, routine, slot)
                if err != 0:
                    self.close()  # stops the ones already started
                    raise OSError(err, f"pthread_create for team worker {i} failed: {os.strerror(err)}")
                self._tids.append(int(tid[0]))
        finally:
            lib.pthread_sigmask(_SIG_SETMASK, old, _ffi.NULL)

    @property
    def closed(self) -> bool:
        """True after `close` (or in a forked child, where the workers do not exist)."""
        return self._state["closed"]

    def run(self, fn: int, in0: int, in1: int, out: int, n: int, threads: int) -> bool:
        """Run ``fn(in0, in1, out, begin, end)`` over a static split of ``[0, n)`` (iterations) on
        ``min(threads, workers + 1, n)`` threads, the caller's included. Returns False (nothing ran)
        when the team is closed or was created in another process. Arguments are integers
        (addresses); the caller guarantees ``fn`` has the loop-nest signature."""
        if not (type(fn) is type(in0) is type(in1) is type(out) is type(n) is type(threads) is int) or (
            fn < 1 or in0 < 0 or in1 < 0 or out < 0 or n < 0 or threads < 1
        ):  # the slow path names the argument
            _as_int("fn", fn, 1)
            for name, value in (("in0", in0), ("in1", in1), ("out", out), ("n", n)):
                _as_int(name, value, 0)
            _as_int("threads", threads, 1)
            fn, in0, in1, out, n, threads = map(int, (fn, in0, in1, out, n, threads))
        if self._state["closed"]:  # also a forked child, whose copy of the lock may be held forever
            return False
        with self._lock:
            if self._state["closed"]:
                return False
            if threads != self._spin_threads and self._fixed_spin is None:
                over = min(threads, self.workers + 1) > self._cpus
                self._spin_word[0] = OVERSUBSCRIBED_SPIN if over else DEFAULT_SPIN
                self._spin_threads = threads
            self._run(self._base, fn, in0, in1, out, n, threads)
        return True

    @property
    def spin(self) -> int:
        """``pause`` iterations a waiting thread spins before it sleeps (the current setting)."""
        return int(self._spin_word[0])

    def close(self) -> None:
        """Stop and join the workers (waits for a running job). Idempotent."""
        if self._state["pid"] == os.getpid():
            with self._lock:  # after this no job starts: `run` checks the flag under the lock
                self._state["closed"] = True
        self._state["closed"] = True  # in a forked child the lock may be held by a thread that is gone
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Team {self.workers} workers{' closed' if self.closed else ''}>"
