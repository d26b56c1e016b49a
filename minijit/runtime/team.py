"""A native thread team for compiled loop nests (x86-64 Linux): dispatch in a few microseconds.

`Team(workers)` starts ``workers`` POSIX threads (``pthread_create`` through
cffi) whose start routine is JIT-generated x86-64 code; `Team.run(fn, in0, in1,
out, n, threads)` calls the generated entry

    void team_run(team*, fn, in0, in1, out, int64_t n, int64_t threads)

with the GIL released: it splits ``[0, n)`` into ``c = min(threads, workers + 1,
n)`` contiguous ranges (sizes differ by at most one, larger ones first, as
`minijit.parallel.chunks`: range 0 is the caller's, range ``1 + i`` worker ``i``'s), cuts
each range into up to `MAX_PIECES` pieces (`pieces`), wakes workers 0..c-2 and runs pieces
itself. Every thread runs its own range's pieces first, in order, then takes the pieces the
others have not claimed yet: with equal threads that is the static split, and a thread slowed
mid-call (a busy core, a vCPU the host takes away, a worker still waking up) hands the rest
of its range to the others instead of holding up the call. ``fn`` is the address of a
native ``void f(const void* in0, const void* in1, void* out, int64_t begin,
int64_t end)`` (a compiled loop nest; iterations, not bytes), called once per piece. Workers
never touch Python objects.

Shared state is one ordinary read-write numpy buffer (never executable); the
code (`minijit.runtime.team_code`) lives in a W^X `ExecutableBuffer`. Layout (bytes, 64-byte aligned; each
slot on its own pair of cache lines):

    header  +0 pending (u32, futex word of the master: pieces not yet reported)
            +4 master_sleeping (u32)  +8 job (u32, the last job's tag)  +12 ranges (u32)
            +16 fn  +24 in0  +32 in1  +40 out
            +64 workers (i64)  +72 spin (u32, ``pause`` iterations before a futex wait)
    slot s  at 128 + 128*s (s = 0 the caller's range, 1 + i worker i's):
            +0 gen (u32, worker i's futex word)  +4 sleeping (u32)  +8 quit (u32)
            +16 header address  +24 s
            +64 next (u64: job tag << 32 | pieces << 16 | next piece)  +72 begin  +80 end
            +88 grain (i64)  +96 pieces (u32)

Protocol. The master writes the job's fields and every range's begin, end, grain and
pieces, sets ``pending`` to the job's pieces, then each range's ``next`` to ``tag << 32 |
pieces << 16`` (a new tag per job), then wakes each worker: it increments the worker's ``gen``
with ``lock xadd`` (a full barrier), then reads ``sleeping`` and issues FUTEX_WAKE only if it is
set. A worker spins on ``gen`` with ``pause`` for a bounded count, then sets ``sleeping`` with
``xchg`` (a full barrier), re-reads ``gen`` and calls FUTEX_WAIT with the value it last saw, so
the kernel re-checks the word: no wake-up is lost (both sides store, fence, then load the
other's word).

A piece is claimed with ``lock cmpxchg`` on its range's ``next``, from (tag, pieces, i) to
(tag, pieces, i + 1) while i < pieces, the bound taken from the word itself: a range's begin,
end, grain and pieces fields may already be the next job's while its word is still the last
job's (all taken), so a bound read from them could let a stale word be claimed. The claimer
then reads the range's and the job's fields. A claimed piece keeps ``pending`` above zero, so
the job cannot end, nor its fields be rewritten, until it is reported: the fields read are the
claimed job's. A claim prepared on an older job's word fails on the tag (no ABA when a range is
reused; tags repeat after 2**32 jobs, hours of back-to-back dispatches that a stalled claimer
would have to sleep through). A thread reports the pieces it ran once, when none is left to
claim, with ``lock xadd pending``; a worker that brings it to zero wakes the master if
``master_sleeping`` is set; the master reports its own, then waits the same way on ``pending``
(spin, then futex). A worker that wakes late finds nothing to claim and reports nothing.
``quit`` (with a new ``gen``) tells a worker to exit (`close`). CPUs: in a team with one thread
per allowed CPU each worker is bound to one of the CPUs after the lowest (`pin_cpus`; smaller
teams, ``pin=False`` and ``MINIJIT_TEAM_PIN=0`` leave them floating), and `run` moves a caller
found on the CPU of a worker its job wakes off that CPU for the job (`Team._step_aside`).
Spinning: `DEFAULT_SPIN` ``pause`` iterations, `OVERSUBSCRIBED_SPIN` for calls with more
threads than CPUs. Workers run with every signal blocked.

Concurrency: one job at a time per team; concurrent callers are serialized by a
lock (each call's chunks are only as many as the team has threads anyway).
Fork: a child process has no workers; `run` refuses to run a team created in
another process (`minijit.parallel` makes a new one). Exit: `close` (also run
by a finalizer at interpreter exit) stops and joins the workers before the code
pages are unmapped; if a job is still running `EXIT_JOIN_TIMEOUT` s into that (a daemon thread's),
the workers are left running and their code and state stay allocated.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from typing import Any

import cffi
import numpy as np

from minijit.runtime.features import detected_host
from minijit.runtime.memory import ExecutableBuffer
from minijit.runtime.team_code import ALIGN, HEADER, MAX_PIECES, NWORKERS, SELF, SLOT, SPIN, TEAM, generate

__all__ = ["DEFAULT_SPIN", "MAX_PIECES", "Team", "generate", "pieces", "range_pieces", "unsupported_reason"]

#: the most iterations one `Team.run` takes (the piece arithmetic, ``length + pieces - 1``,
#: stays inside int64)
MAX_ITERATIONS = 1 << 62

#: ``pause`` iterations a waiting thread spins before it sleeps in the kernel (longer than a futex
#: wake-up takes on a VM, so back-to-back calls stay on the fast path) ...
DEFAULT_SPIN = 1 << 13
#: ... and when a job has more threads than this process has CPUs (spinning would steal them).
OVERSUBSCRIBED_SPIN = 1 << 5
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
    typedef struct { unsigned long bits[16]; } cpu_set_t;
    int pthread_setaffinity_np(pthread_t thread, size_t cpusetsize, const cpu_set_t *cpuset);
    int sched_getcpu(void);
    """
)
#: the CPU numbers a `cpu_set_t` holds (glibc: 1024 bits)
CPU_SET_BITS = 1024
_SIG_SETMASK = 2
_libc: Any = None


def unsupported_reason() -> str | None:
    """Why the native team cannot run on this host (None when it can: Linux on x86-64)."""
    if detected_host().isa != "x86_64":
        return f"the native team is x86-64 code; this host is {detected_host().isa}"
    if not sys.platform.startswith("linux"):
        return f"the native team uses Linux futexes; this host runs {sys.platform}"
    return None


def pin_default() -> bool:
    """Whether teams bind their workers to CPUs: ``MINIJIT_TEAM_PIN`` (``1``/``0``), default yes."""
    value = os.environ.get("MINIJIT_TEAM_PIN", "").strip().lower() or "1"
    if value not in ("0", "1"):
        raise ValueError(f"MINIJIT_TEAM_PIN must be 0 or 1, got {value!r}")
    return value == "1"


def pin_cpus(workers: int, allowed: set[int] | frozenset[int]) -> tuple[int, ...]:
    """The CPU each of ``workers`` workers is bound to: the allowed CPUs after the lowest, one
    each (the calling thread floats; `Team.run` moves it off a worker's CPU for a job), when the
    team fills the allowed CPUs exactly (``workers + 1`` of them, the default thread count).
    Otherwise none: with fewer CPUs a worker per CPU is impossible, and with more, processes
    that each run a smaller team (say 4 processes of 4 threads on 16 CPUs) would all bind
    theirs to the same first CPUs, where floating workers spread; also none when a CPU lies past
    `CPU_SET_BITS`.

    Why: a worker that slept in its futex wait is woken where the scheduler's wake-affine rule puts
    it, often on the caller's CPU; in a VM whose idle vCPU is halted nothing pulls one of the two
    away for many calls, and both share one CPU; binding and the caller stepping aside
    (`Team._step_aside`) keep calls at two-thread speed (bench/results/model_constants_measurements.md)."""
    cpus = sorted(allowed)
    if workers < 1 or len(cpus) != workers + 1 or cpus[-1] >= CPU_SET_BITS:
        return ()
    return tuple(cpus[1:])


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


@functools.lru_cache(maxsize=256)
def range_pieces(n: int, chunks: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The pieces `Team.run` cuts ``[0, n)`` (iterations) into when it runs ``chunks`` ranges (the
    static split of `minijit.parallel.chunks`), per range: one chunk is one call; otherwise each
    range splits into ``min(length, MAX_PIECES)`` pieces of ``ceil(length / that)`` iterations
    (the last one shorter). A thread drains its own range's pieces first, then takes others'.
    Cached: the dispatch of `minijit.parallel.run_pieces` reads it per call."""
    if min(chunks, n) <= 1:
        return (((0, n),),) if n > 0 else ()  # one thread: one call over everything
    out = []
    base, extra = divmod(n, min(chunks, n))
    begin = 0
    for i in range(min(chunks, n)):
        length = base + (i < extra)
        end = begin + length
        grain = -(-length // min(length, MAX_PIECES))
        out.append(tuple((b, min(b + grain, end)) for b in range(begin, end, grain)))
        begin = end
    return tuple(out)


def pieces(n: int, chunks: int) -> list[tuple[int, int]]:
    """Every piece of `range_pieces`, in order (range 0's first)."""
    return [piece for rng in range_pieces(n, chunks) for piece in rng]


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

    def __init__(self, workers: int, *, spin: int | None = None, pin: bool | None = None) -> None:
        reason = unsupported_reason()
        if reason is not None:
            raise RuntimeError(reason)
        workers = _as_int("workers", workers, 0)
        if spin is not None and (not isinstance(spin, int) or isinstance(spin, bool) or not 1 <= spin < 1 << 31):
            raise ValueError(f"spin must be an int in 1..2**31-1 (pause iterations), got {spin!r}")
        if pin is not None and not isinstance(pin, bool):
            raise ValueError(f"pin must be a bool or None, got {pin!r}")
        self._fixed_spin = spin
        self._spin_threads = 0  # the thread count the current spin was chosen for
        self._pin = pin_default() if pin is None else pin
        #: the CPU each worker is bound to (`pin_cpus`); empty when the workers float
        self.pinned: tuple[int, ...] = ()
        self._cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        asm, entries = generate()
        self.listing = asm.listing()
        self._code = ExecutableBuffer(asm.code())
        addr = self._code.address
        self._run = _ffi.cast(RUN_SIGNATURE, addr + entries["run"])
        stop = _ffi.cast(STOP_SIGNATURE, addr + entries["stop"])
        size = HEADER + SLOT * (workers + 1)  # slot 0: the caller's range; slot 1 + i: worker i's
        raw = np.zeros(size + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        self._memory = raw[skip : skip + size]
        self._base = base = self._memory.ctypes.data
        self._memory[NWORKERS : NWORKERS + 8].view(np.int64)[0] = workers
        self._spin_word = self._memory[SPIN : SPIN + 4].view(np.uint32)
        self._spin_word[0] = spin or DEFAULT_SPIN
        for s in range(workers + 1):
            self._memory[HEADER + SLOT * s + TEAM :][:8].view(np.uint64)[0] = base
            self._memory[HEADER + SLOT * s + SELF :][:8].view(np.uint64)[0] = s
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
                slot = _ffi.cast("void *", self._base + HEADER + SLOT * (i + 1))
                err = lib.pthread_create(tid, _ffi.NULL, routine, slot)
                if err != 0:
                    self.close()  # stops the ones already started
                    raise OSError(err, f"pthread_create for team worker {i} failed: {os.strerror(err)}")
                self._tids.append(int(tid[0]))
        finally:
            lib.pthread_sigmask(_SIG_SETMASK, old, _ffi.NULL)
        self._getcpu = lib.sched_getcpu  # the CPU the calling thread runs on (`run`)
        allowed = os.sched_getaffinity(0)
        cpus = pin_cpus(self.workers, allowed) if self._pin else ()

        def bind(thread: int, chosen: set[int] | frozenset[int]) -> bool:
            mask = _ffi.new("cpu_set_t *")
            for cpu in chosen:
                mask.bits[cpu // 64] |= 1 << (cpu % 64)
            return lib.pthread_setaffinity_np(thread, _ffi.sizeof("cpu_set_t"), mask) == 0

        bound = 0
        while bound < len(cpus) and bind(self._tids[bound], {cpus[bound]}):
            bound += 1
        if bound < len(cpus):  # a restricted host (a container's cgroup): every worker floats
            for thread in self._tids[:bound]:
                bind(thread, allowed)
            cpus = ()
        self.pinned = tuple(cpus)

    @property
    def closed(self) -> bool:
        """True after `close` (or in a forked child, where the workers do not exist)."""
        return self._state["closed"]

    def run(self, fn: int, in0: int, in1: int, out: int, n: int, threads: int) -> bool:
        """Run ``fn(in0, in1, out, begin, end)`` over ``[0, n)`` (iterations) on ``min(threads,
        workers + 1, n)`` threads, the caller's included: one call per piece (`pieces`), each
        thread its own range first, then what the others have not claimed. Returns False (nothing ran)
        when the team is closed or was created in another process. Arguments are integers
        (addresses); the caller guarantees ``fn`` has the loop-nest signature."""
        if not (type(fn) is type(in0) is type(in1) is type(out) is type(n) is type(threads) is int) or (
            fn < 1 or in0 < 0 or in1 < 0 or out < 0 or not 0 <= n <= MAX_ITERATIONS or threads < 1
        ):  # the slow path names the argument
            _as_int("fn", fn, 1)
            for name, value in (("in0", in0), ("in1", in1), ("out", out), ("n", n)):
                _as_int(name, value, 0)
            _as_int("threads", threads, 1)
            if n > MAX_ITERATIONS:
                raise ValueError(f"n must be at most {MAX_ITERATIONS} iterations (2**62), got {n}")
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
            away = self._step_aside(self._getcpu(), threads, n) if self.pinned else None
            try:
                self._run(self._base, fn, in0, in1, out, n, threads)
            finally:
                if away is not None:
                    os.sched_setaffinity(0, away)
        return True

    def _step_aside(self, cpu: int, threads: int, n: int) -> set[int] | None:
        """When the calling thread runs on ``cpu``, the CPU of a worker this job wakes, move it off
        that CPU for the job (its affinity without the workers' CPUs) and return the affinity to
        restore; else None. Two threads on one CPU would each run at half speed until the
        scheduler separates them, which in a VM with halted idle vCPUs takes many calls (see
        `pin_cpus`: 520^3 fp32 with pauses, 2-11 of 20 blocks at one-thread speed or slower with
        only the workers bound, none with the caller kept off their CPUs)."""
        if cpu not in self.pinned:
            return None
        used = self.pinned[: max(0, min(threads, self.workers + 1, n) - 1)]
        if cpu not in used:
            return None
        mask = os.sched_getaffinity(0)
        rest = mask.difference(used)
        if not rest:
            return None
        try:
            os.sched_setaffinity(0, rest)
        except OSError:  # a sandbox that forbids it: run where the caller is
            return None
        return mask

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
