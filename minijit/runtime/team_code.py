"""The machine code of the native thread team (`minijit.runtime.team`, x86-64 Linux): the worker
start routine, ``team_run``, ``team_stop`` and the piece claimer they share, and the shared-state
layout they read (bytes). `minijit.runtime.team`'s docstring gives the layout and the protocol
(claims by ``lock cmpxchg`` on a range's tagged ``next`` word, wake-ups through futexes)."""

from __future__ import annotations

from asm.x86_64 import (
    Assembler,
    Label,
    dword,
    eax,
    ecx,
    edx,
    esi,
    ptr,
    qword,
    r8,
    r9,
    r10,
    r10d,
    r11,
    r12,
    r12d,
    r13,
    r13d,
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

__all__ = ["MAX_PIECES", "generate"]

# shared-state layout (bytes)
PENDING, MSLEEP, JOB, CHUNKS, FN, IN0, IN1, OUT, NWORKERS, SPIN = 0, 4, 8, 12, 16, 24, 32, 40, 64, 72
HEADER = 128
GEN, SLEEPING, QUIT, TEAM, SELF, NEXT, BEGIN, END, GRAIN, PIECES = 0, 4, 8, 16, 24, 64, 72, 80, 88, 96
SLOT = 128
ALIGN = 128
#: a range (one thread's static chunk) is cut into at most this many pieces that others may take
MAX_PIECES = 8

# Linux x86-64
SYS_FUTEX = 202
FUTEX_WAIT_PRIVATE = 0 | 128
FUTEX_WAKE_PRIVATE = 1 | 128


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


def _emit_claim(a: Assembler) -> None:
    """``int64_t claim(header*, int64_t own)``: run pieces of the current job until none is left;
    returns how many it ran. Visits range ``own`` first (the static chunk), then the others in
    turn. A piece is claimed with ``lock cmpxchg`` on its range's ``next`` word (job tag, pieces,
    next piece: a claim prepared for a finished job fails on the tag, and the bound is the word's
    own, never a field the master may be rewriting for the next job); the range's and the job's
    fields are read only after the claim is won: the job cannot end (nor its fields change) while
    a claimed piece is unreported. Clobbers the caller-saved registers."""
    _push_callee_saved(a)
    a.sub(rsp, 8)  # 8 (return address) + 48 + 8: rsp is 16-byte aligned at the call of fn
    a.mov(rbx, rdi)  # header
    a.mov(r14, rsi)  # the range being drained
    a.xor(r13d, r13d)  # pieces run
    a.mov(r12d, dword(rbx + CHUNKS))  # ranges of the job (a newer job's count is as good: claims check)
    a.mov(rbp, r12)  # ranges left to visit
    first, visit, retry, nxt, wrap, done, short = (
        a.new_label(n) for n in ("first", "visit", "retry", "next", "wrap", "done", "short")
    )
    a.cmp(r14, r12)
    a.jb(first)
    a.xor(r14d, r14d)  # own range beyond this job's: start at range 0
    a.bind(first)
    a.bind(visit)
    a.mov(r15, r14)
    a.shl(r15, 7)  # SLOT == 128
    a.lea(r15, ptr(rbx + r15 + HEADER))
    a.mov(rax, qword(r15 + NEXT))
    a.bind(retry)
    # the bound comes from the word itself: the range's other fields may already be the next
    # job's while this word is still the finished job's (its pieces all taken)
    a.mov(ecx, eax)
    a.shr(ecx, 16)  # pieces of the range
    a.mov(edx, eax)
    a.and_(edx, 0xFFFF)  # next piece
    a.cmp(edx, ecx)
    a.jae(nxt)  # every piece of this range is taken
    a.lea(rcx, ptr(rax + 1))
    a.cmpxchg(qword(r15 + NEXT), rcx, lock=True)
    a.jne(retry)  # rax holds the word another thread left
    a.and_(eax, 0xFFFF)  # the piece index
    a.imul(rax, qword(r15 + GRAIN))
    a.add(rax, qword(r15 + BEGIN))
    a.mov(rcx, rax)  # begin of the piece
    a.add(rax, qword(r15 + GRAIN))
    a.mov(r8, qword(r15 + END))
    a.cmp(rax, r8)
    a.jge(short)
    a.mov(r8, rax)  # end of the piece: min(begin + grain, end of the range)
    a.bind(short)
    a.mov(rdi, qword(rbx + IN0))
    a.mov(rsi, qword(rbx + IN1))
    a.mov(rdx, qword(rbx + OUT))
    a.call(qword(rbx + FN))
    a.add(r13, 1)
    a.mov(rax, qword(r15 + NEXT))
    a.jmp(retry)
    a.bind(nxt)
    a.sub(rbp, 1)
    a.jz(done)
    a.add(r14, 1)
    a.cmp(r14, r12)
    a.jb(wrap)
    a.xor(r14d, r14d)
    a.bind(wrap)
    a.jmp(visit)
    a.bind(done)
    a.mov(rax, r13)
    a.add(rsp, 8)
    _pop_callee_saved(a)
    a.ret()


def _spin_then_sleep(
    a: Assembler,
    labels: tuple[Label, Label, Label, Label | None],
    spin: object,
    word: object,
    flag: object,
    ready: object,
    reread: object,
    expect: object,
    out: Label,
) -> None:
    """Wait until ``ready(reg, label)`` (a test of the 32-bit ``word`` loaded into ``reg`` and a
    branch to ``label`` when it holds) branches to ``out``: spin ``[spin]`` times with ``pause``,
    then announce the sleep (``xchg`` 1 into ``flag``: a full barrier), re-read ``word`` into
    ``reread`` and, unless it is ready now, FUTEX_WAIT while it still holds ``expect``; on any
    wake-up clear ``flag`` and start over. ``labels``: (wait, spin, woke, sleep or None)."""
    wait, spin_l, woke, sleep = labels
    a.bind(wait)
    a.mov(r15d, spin)
    a.bind(spin_l)
    a.mov(eax, dword(word))
    ready(eax, out)
    a.pause()
    a.dec(r15d)
    a.jnz(spin_l)
    if sleep is not None:
        a.bind(sleep)
    a.mov(eax, 1)
    a.xchg(dword(flag), eax)
    a.mov(reread, dword(word))
    ready(reread, woke)
    _futex(a, word, FUTEX_WAIT_PRIVATE, expect)
    a.bind(woke)
    a.mov(dword(flag), 0)
    a.jmp(wait)


def _emit_worker(a: Assembler, claim: Label) -> None:
    """``void* worker(slot*)``: wait for a new ``gen``, run pieces (``claim``), report, repeat."""
    _push_callee_saved(a)
    a.sub(rsp, 8)  # 8 (return address) + 48 + 8: rsp is 16-byte aligned at the calls below
    a.mov(r12, rdi)  # slot
    a.mov(rbx, qword(r12 + TEAM))  # header
    a.xor(r14d, r14d)  # the gen last seen (slots start at 0)
    wait, spin_l, got, woke, ext = (a.new_label(n) for n in ("wait", "spin", "got", "woke", "exit"))

    def new_gen(reg: object, label: Label) -> None:
        a.cmp(reg, r14d)
        a.jne(label)

    # sleep: announce, re-check (Dekker with the master's lock xadd on gen), futex wait on gen == seen
    _spin_then_sleep(
        a, (wait, spin_l, woke, None), dword(rbx + SPIN), r12 + GEN, r12 + SLEEPING, new_gen, eax, r14d, got
    )
    a.bind(got)
    a.mov(r14d, eax)
    a.cmp(dword(r12 + QUIT), 0)
    a.jne(ext)
    a.mov(rdi, rbx)
    a.mov(rsi, qword(r12 + SELF))
    a.call(claim)
    a.test(eax, eax)
    a.jz(wait)  # nothing left to run (a late start, or the job ended)
    a.mov(ecx, eax)
    a.neg(ecx)
    a.xadd(dword(rbx + PENDING), ecx, lock=True)  # report; ecx = pieces pending before
    a.cmp(ecx, eax)
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


def _emit_run(a: Assembler, claim: Label) -> None:
    """``team_run(team, fn, in0, in1, out, n, threads)``: lay out the ranges and their pieces,
    publish, wake the workers, run pieces (own range first), wait for the rest; one thread: one
    call of fn over everything. r12 team, r13 fn, rbx in0, rbp in1, r14 out, r15 n."""
    _push_callee_saved(a)
    a.sub(rsp, 24)  # locals: [rsp] base, [rsp+8] extra (ranges that get one more), [rsp+16] pieces
    for dst, src in ((r12, rdi), (r13, rsi), (rbx, rdx), (rbp, rcx), (r14, r8), (r15, r9)):
        a.mov(dst, src)
    done, multi = a.new_label("done"), a.new_label("multi")
    a.test(r15, r15)
    a.jle(done)  # n <= 0: nothing to do
    _run_ranges(a, qword(rsp + 24 + 48 + 8))
    a.cmp(rcx, 1)
    a.jne(multi)
    a.mov(rdi, rbx)  # one range: fn(in0, in1, out, 0, n) here
    a.mov(rsi, rbp)
    a.mov(rdx, r14)
    a.xor(ecx, ecx)
    a.mov(r8, r15)
    a.call(r13)
    a.jmp(done)

    a.bind(multi)
    _run_lay_out(a)
    _run_publish(a)
    # run pieces here: range 0 first, then whatever the workers have not claimed
    a.mov(rdi, r12)
    a.xor(esi, esi)
    a.call(claim)
    a.neg(eax)
    a.xadd(dword(r12 + PENDING), eax, lock=True)  # no wake: this thread is the one that waits
    # wait: spin while pending != 0, at most `spin` times, then sleep on pending
    labels = tuple(a.new_label(n) for n in ("wait", "spin", "woke", "sleep"))

    def all_reported(reg: object, label: Label) -> None:
        a.test(reg, reg)
        a.jz(label)

    _spin_then_sleep(a, labels, dword(r12 + SPIN), r12 + PENDING, r12 + MSLEEP, all_reported, edx, edx, done)

    a.bind(done)
    a.add(rsp, 24)
    _pop_callee_saved(a)
    a.ret()


def _run_ranges(a: Assembler, threads: object) -> None:
    """rcx = rax = the job's ranges: min(max(threads, 1), workers + 1, n)."""
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


def _run_lay_out(a: Assembler) -> None:
    """The job's fields (read by whoever wins a piece), then each range's begin, end, grain and
    pieces (rcx ranges of n = r15 iterations); ``pending`` = all pieces, before any can be claimed.
    r13 = the ranges from here on."""
    a.mov(qword(r12 + FN), r13)
    a.mov(qword(r12 + IN0), rbx)
    a.mov(qword(r12 + IN1), rbp)
    a.mov(qword(r12 + OUT), r14)
    a.mov(dword(r12 + CHUNKS), ecx)
    a.mov(rax, r15)
    a.xor(edx, edx)
    a.div(rcx)  # rax = base, rdx = extra (ranges that get one more)
    a.mov(qword(rsp), rax)
    a.mov(qword(rsp + 8), rdx)
    a.mov(qword(rsp + 16), 0)
    a.mov(r13, rcx)  # ranges
    a.lea(r8, ptr(r12 + HEADER))  # range 0 (the caller's)
    a.xor(r9, r9)  # begin of the range
    a.mov(r10, rcx)
    lay, l1, l2 = a.new_label("lay"), a.new_label("l"), a.new_label("l")
    a.bind(lay)  # r8 slot, r9 begin, r10 ranges left
    a.mov(r11, qword(rsp))
    a.cmp(qword(rsp + 8), 0)
    a.je(l1)
    a.sub(qword(rsp + 8), 1)
    a.add(r11, 1)
    a.bind(l1)  # r11 = length of this range (>= 1)
    a.mov(qword(r8 + BEGIN), r9)
    a.add(r9, r11)
    a.mov(qword(r8 + END), r9)
    # pieces = min(length, MAX_PIECES); grain = ceil(length / pieces); pieces = ceil(length / grain)
    a.mov(ecx, MAX_PIECES)
    a.cmp(r11, rcx)
    a.jae(l2)
    a.mov(rcx, r11)
    a.bind(l2)
    a.lea(rax, ptr(r11 + rcx - 1))
    a.xor(edx, edx)
    a.div(rcx)
    a.mov(qword(r8 + GRAIN), rax)
    a.mov(rcx, rax)
    a.lea(rax, ptr(r11 + rcx - 1))
    a.xor(edx, edx)
    a.div(rcx)
    a.mov(dword(r8 + PIECES), eax)
    a.add(qword(rsp + 16), rax)
    a.add(r8, SLOT)
    a.sub(r10, 1)
    a.jnz(lay)
    a.mov(rax, qword(rsp + 16))
    a.mov(dword(r12 + PENDING), eax)  # before any piece can be claimed, so before any report


def _run_publish(a: Assembler) -> None:
    """Each range's next = (tag << 32 | pieces << 16 | 0), after its fields (a new job tag); then
    wake workers 0..ranges-2: ``lock xadd`` on gen (a full barrier), FUTEX_WAKE if it sleeps."""
    a.mov(eax, dword(r12 + JOB))
    a.add(eax, 1)
    a.mov(dword(r12 + JOB), eax)
    a.shl(rax, 32)
    a.lea(r8, ptr(r12 + HEADER))
    a.mov(r10, r13)
    pub, wake, w1 = a.new_label("publish"), a.new_label("wake"), a.new_label("w")
    a.bind(pub)
    a.mov(ecx, dword(r8 + PIECES))
    a.shl(ecx, 16)
    a.or_(rcx, rax)
    a.mov(qword(r8 + NEXT), rcx)
    a.add(r8, SLOT)
    a.sub(r10, 1)
    a.jnz(pub)
    a.lea(r8, ptr(r12 + HEADER + SLOT))  # worker 0's slot
    a.lea(r10, ptr(r13 - 1))
    a.bind(wake)  # r8 slot, r10 count (syscall keeps them)
    a.mov(eax, 1)
    a.xadd(dword(r8 + GEN), eax, lock=True)  # wake-up; full barrier before reading `sleeping`
    a.cmp(dword(r8 + SLEEPING), 0)
    a.je(w1)
    _futex(a, r8 + GEN, FUTEX_WAKE_PRIVATE, 1)
    a.bind(w1)
    a.add(r8, SLOT)
    a.sub(r10, 1)
    a.jnz(wake)


def _emit_stop(a: Assembler) -> None:
    """``team_stop(team)``: every worker gets ``quit``, a new ``gen`` and a wake."""
    end, loop = a.new_label("end"), a.new_label("stop")
    a.mov(r9, qword(rdi + NWORKERS))
    a.lea(r8, ptr(rdi + HEADER + SLOT))
    a.test(r9, r9)
    a.jz(end)
    a.bind(loop)
    a.mov(dword(r8 + QUIT), 1)
    a.mov(eax, 1)
    a.xadd(dword(r8 + GEN), eax, lock=True)
    _futex(a, r8 + GEN, FUTEX_WAKE_PRIVATE, 1)
    a.add(r8, SLOT)
    a.sub(r9, 1)
    a.jnz(loop)
    a.bind(end)
    a.ret()


def generate() -> tuple[Assembler, dict[str, int]]:
    """The team's code: worker start routine, ``team_run``, ``team_stop`` and the piece claimer
    they share; entry offsets in bytes."""
    a = Assembler(name="team")
    claim = a.new_label("claim")
    entries = {}
    for name, emit in (
        ("worker", lambda: _emit_worker(a, claim)),
        ("run", lambda: _emit_run(a, claim)),
        ("stop", lambda: _emit_stop(a)),
        ("claim", lambda: (a.bind(claim), _emit_claim(a))),
    ):
        while a.pos % 16:
            a.int3()
        entries[name] = a.pos
        emit()
    return a, entries
