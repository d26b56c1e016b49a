"""The native thread team (`minijit.runtime.team`) and its use by `minijit.parallel` / TensorOperation.

Each dispatch runs a JIT-generated marker kernel that adds 1 to ``out[2 i]`` and stores
the call's ``begin`` in ``out[2 i + 1]`` for every iteration ``i`` of its call, so a test
sees that every iteration ran exactly once and in the piece `team_mod.pieces` assigns it
(on the native team and on the Python pool alike).
Hangs (lost wake-ups, exit) are guarded by running those scenarios in a subprocess with a
timeout. TensorOperations are compared with numpy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from asm.x86_64 import Assembler, ptr, qword, r8, r9, r10, rax, rcx, rdi, rdx, rsi, rsp
from minijit import parallel
from minijit.runtime import Kernel
from minijit.runtime import team as team_mod
from minijit.tensor_operation import TensorOperation

NATIVE_TEAM = team_mod.unsupported_reason() is None
needs_team = pytest.mark.skipif(not NATIVE_TEAM, reason=str(team_mod.unsupported_reason()))
LOOPNEST = "void(const void*, const void*, void*, int64_t, int64_t)"


def marker_code(pause: bool = False, stack: bool = False, slow_from: bool = False) -> bytes:
    """``f(in0, in1, out, begin, end)``: ``out[2i] += 1; out[2i+1] = begin`` for i in [begin, end)
    (int64 ``out``); with ``pause``, ``in0`` is a count of ``pause`` iterations per element (slow chunks),
    with ``slow_from`` only for elements ``i >= in1``;
    with ``stack``, ``out[2i+1]`` is the stack pointer instead (which thread, from which call site)."""
    a = Assembler()
    done, loop, fast = a.new_label("done"), a.new_label("loop"), a.new_label("fast")
    a.mov(rax, rsp if stack else rcx)
    a.cmp(rcx, r8)
    a.jge(done)
    a.bind(loop)
    if pause:
        if slow_from:
            a.cmp(rcx, rsi)
            a.jl(fast)
        a.mov(r10, rdi)
        spin = a.label("spin")
        a.pause()
        a.sub(r10, 1)
        a.jg(spin)
    a.bind(fast)
    a.lea(r9, ptr(rcx + rcx))
    a.add(qword(rdx + r9 * 8), 1)
    a.mov(qword(rdx + r9 * 8 + 8), rax)
    a.add(rcx, 1)
    a.cmp(rcx, r8)
    a.jl(loop)
    a.bind(done)
    a.ret()
    return a.code()


@pytest.fixture(scope="module")
def marker() -> Kernel:
    return Kernel(marker_code(), LOOPNEST, name="marker")


@pytest.fixture(scope="module")
def slow_marker() -> Kernel:
    return Kernel(marker_code(pause=True), LOOPNEST, name="slow_marker")


@pytest.fixture(scope="module")
def team3():
    t = team_mod.Team(3)
    yield t
    t.close()


def expected_marks(n: int, chunks: int, split=None) -> np.ndarray:
    """What the marker leaves after one run split into ``chunks`` ranges: the team's pieces
    (`team_mod.pieces`), or ``split``'s (e.g. `parallel.chunks`, the Python pool's)."""
    want = np.zeros((max(n, 1), 2), np.int64)
    for begin, end in (split or team_mod.pieces)(n, chunks) if n else []:
        want[begin:end, 0] = 1
        want[begin:end, 1] = begin
    return want


def run_marker(run, fn: int, n: int, threads: int, pauses: int = 0) -> np.ndarray:
    out = np.zeros((max(n, 1), 2), np.int64)
    run(fn, pauses, 0, out.ctypes.data, n, threads)
    return out


# ------------------------------------------------------------------------------------ code
def test_team_code_matches_llvm_mc() -> None:
    """The whole generated program (worker, team_run, team_stop; labels included) reassembles
    with llvm-mc to the same bytes."""
    a, entries = team_mod.generate()
    assert sorted(entries) == ["claim", "run", "stop", "worker"]
    assert a.code() == llvm.assemble(a.listing(), triple=llvm.X86_64_TRIPLE, mattr="")
    text = a.listing()
    for needle in ("lock xadd", "lock cmpxchg", "xchg", "pause", "syscall"):
        assert needle in text


@needs_team
@pytest.mark.parametrize("spin", [0, -1, 1 << 31, True, 1.5])
def test_team_rejects_bad_spin(spin) -> None:
    with pytest.raises(ValueError, match="spin must be"):
        team_mod.Team(1, spin=spin)


@needs_team
def test_spin_follows_oversubscription(team3, marker) -> None:
    """Calls with more threads than CPUs spin briefly before sleeping; others spin long."""
    for threads in (1, 2, 4, 2):
        run_marker(team3.run, marker.address, 4, threads)
        over = min(threads, team3.workers + 1) > team3._cpus
        assert team3.spin == (team_mod.OVERSUBSCRIBED_SPIN if over else team_mod.DEFAULT_SPIN)
    assert team_mod.Team(1, spin=7).spin == 7


# ----------------------------------------------------------------------------- CPU binding
def test_pin_cpus_gives_each_worker_its_own_cpu_after_the_lowest() -> None:
    """Only a team that fills the allowed CPUs is bound: a smaller one floats (several processes
    with small teams would otherwise share the first CPUs), a larger one cannot be."""
    assert team_mod.pin_cpus(1, {0, 1}) == (1,)
    assert team_mod.pin_cpus(4, {0, 1, 2, 3, 4}) == (1, 2, 3, 4)
    assert team_mod.pin_cpus(3, {0, 1, 2, 3, 4}) == ()  # 4 threads on 5 CPUs: floating
    assert team_mod.pin_cpus(2, {8, 3, 5}) == (5, 8)  # a taskset mask: its CPUs in order
    assert team_mod.pin_cpus(2, {0, 1}) == ()  # fewer CPUs than threads: nobody is bound
    assert team_mod.pin_cpus(0, {0, 1}) == ()
    assert team_mod.pin_cpus(1, {0, team_mod.CPU_SET_BITS}) == ()  # past what a cpu_set_t holds


def test_pin_default_reads_the_environment(monkeypatch) -> None:
    for value, want in (("", True), ("1", True), ("0", False), (" 0 ", False)):
        monkeypatch.setenv("MINIJIT_TEAM_PIN", value)
        assert team_mod.pin_default() is want
    monkeypatch.setenv("MINIJIT_TEAM_PIN", "yes")
    with pytest.raises(ValueError, match="MINIJIT_TEAM_PIN must be 0 or 1"):
        team_mod.pin_default()


def thread_cpu_lists() -> list[str]:
    """Every thread's Cpus_allowed_list of this process."""
    import os

    out = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            out += [line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list")]
    return out


@needs_team
@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="binding needs 2 CPUs")
def test_workers_are_bound_and_the_caller_steps_aside(monkeypatch, marker) -> None:
    """A team of one thread per allowed CPU binds worker i to the allowed CPU i + 1 (threads whose
    allowed list is that CPU alone); ``pin=False`` binds nothing. A caller found on worker 0's CPU
    is moved off it for a job that wakes worker 0 (its affinity without the CPU) and given its
    affinity back after; a caller elsewhere, or a one-thread job, is left alone; the marks are
    the same."""
    import os

    with pytest.raises(ValueError, match="pin must be"):
        team_mod.Team(1, pin=1)
    allowed = sorted(os.sched_getaffinity(0))
    workers, cpu = len(allowed) - 1, allowed[1]
    on = {"cpu": cpu}
    libc = team_mod._pthreads()

    class Libc:  # the real libc, but the caller "runs on" on["cpu"]
        def sched_getcpu(self) -> int:
            return on["cpu"]

        def __getattr__(self, name):
            return getattr(libc, name)

    fake = Libc()
    monkeypatch.setattr(team_mod, "_pthreads", lambda: fake)
    team = team_mod.Team(workers, pin=True)
    floating = team_mod.Team(workers, pin=False)
    try:
        assert team.pinned == tuple(allowed[1:]) and floating.pinned == ()
        lists = thread_cpu_lists()
        assert all(lists.count(str(c)) >= 1 for c in allowed[1:])
        calls = []
        real = os.sched_setaffinity
        monkeypatch.setattr(os, "sched_setaffinity", lambda pid, mask: calls.append(set(mask)) or real(pid, mask))
        mask = os.sched_getaffinity(0)
        for threads, where, moved in ((2, cpu, True), (1, cpu, False), (2, -1, False)):
            calls.clear()
            on["cpu"] = where
            np.testing.assert_array_equal(run_marker(team.run, marker.address, 6, threads), expected_marks(6, threads))
            # a 2-thread job wakes worker 0 only: the caller leaves that CPU (the others stay allowed)
            assert calls == ([mask - {cpu}, mask] if moved else [])
            assert os.sched_getaffinity(0) == mask
        calls.clear()
        on["cpu"] = cpu
        run_marker(floating.run, marker.address, 6, 2)
        assert calls == []

        def refuse(pid, mask):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "sched_setaffinity", refuse)  # a sandbox: the job runs where it is
        np.testing.assert_array_equal(run_marker(team.run, marker.address, 6, 2), expected_marks(6, 2))
        assert os.sched_getaffinity(0) == mask
    finally:
        team.close()
        floating.close()


@needs_team
@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="binding needs 2 CPUs")
def test_a_refused_binding_leaves_every_worker_floating(monkeypatch, marker) -> None:
    """The second worker's binding fails (a container's cgroup): the first is given the whole
    allowed set back, ``pinned`` is empty, and the team still computes every piece."""
    import os

    allowed = os.sched_getaffinity(0)
    cpu = sorted(allowed)[1]
    libc = team_mod._pthreads()
    calls = []

    class Libc:
        def pthread_setaffinity_np(self, thread, size, mask):
            chosen = {c for c in range(team_mod.CPU_SET_BITS) if mask.bits[c // 64] >> (c % 64) & 1}
            calls.append((thread, chosen))
            return 22 if len(calls) == 2 else libc.pthread_setaffinity_np(thread, size, mask)

        def __getattr__(self, name):
            return getattr(libc, name)

    fake = Libc()
    monkeypatch.setattr(team_mod, "_pthreads", lambda: fake)
    monkeypatch.setattr(team_mod, "pin_cpus", lambda workers, cpus: (cpu, cpu))
    team = team_mod.Team(2, pin=True)
    try:
        first, second = team._tids
        assert calls == [(first, {cpu}), (second, {cpu}), (first, set(allowed))]
        assert team.pinned == ()
        np.testing.assert_array_equal(run_marker(team.run, marker.address, 9, 3), expected_marks(9, 3))
    finally:
        team.close()


# ----------------------------------------------------------------------------- team.run
@needs_team
def test_every_iteration_once_in_its_piece(team3, marker) -> None:
    """n = 0..12 and threads = 1..6 on a 3-worker team (so up to 4 chunks; fewer when n is
    smaller): same team, thread counts varying from call to call."""
    for n in range(13):
        for threads in (1, 2, 3, 4, 5, 6, 2, 1):
            got = run_marker(team3.run, marker.address, n, threads)
            chunks = min(threads, team3.workers + 1, max(n, 1))
            np.testing.assert_array_equal(got, expected_marks(n, chunks), err_msg=f"n={n} threads={threads}")


@needs_team
def test_run_rejects_bad_arguments(team3, marker) -> None:
    out = np.zeros(4, np.int64).ctypes.data
    for kwargs, name in (
        ({"n": -1}, "n"),
        ({"threads": 0}, "threads"),
        ({"fn": 0}, "fn"),
        ({"out": -5}, "out"),
        ({"n": 2.0}, "n"),
        ({"in0": "x"}, "in0"),
        ({"n": team_mod.MAX_ITERATIONS + 1}, "n"),
    ):
        args = {"fn": marker.address, "in0": 0, "in1": 0, "out": out, "n": 2, "threads": 2, **kwargs}
        with pytest.raises(ValueError, match=f"^{name} must be"):
            team3.run(**args)
    with pytest.raises(ValueError, match="^workers must be"):
        team_mod.Team(-1)


@needs_team
def test_closed_team_runs_nothing(marker) -> None:
    t = team_mod.Team(1)
    assert np.array_equal(run_marker(t.run, marker.address, 3, 2), expected_marks(3, 2))
    t.close()
    t.close()  # idempotent
    out = np.zeros((3, 2), np.int64)
    assert t.run(marker.address, 0, 0, out.ctypes.data, 3, 2) is False
    assert not out.any() and t.closed


@needs_team
def test_concurrent_callers_on_one_team(team3, marker) -> None:
    """Four Python threads dispatch on the same team at once (serialized by its lock)."""
    errors: list[str] = []

    def caller(k: int) -> None:
        for i in range(150):
            n, threads = 1 + (i * 7 + k) % 9, 1 + (i + k) % 4
            got = run_marker(team3.run, marker.address, n, threads)
            if not np.array_equal(got, expected_marks(n, min(threads, n))):
                errors.append(f"caller {k}: n={n} threads={threads}")

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors[:5]


# ------------------------------------------------------------------ subprocess scenarios
def run_script(body: str, timeout: float = 60) -> str:
    """Run ``body`` in a fresh interpreter (a hang fails the test instead of blocking pytest)."""
    prelude = textwrap.dedent(
        """
        import os, sys, threading, time
        import numpy as np
        from minijit import parallel
        from minijit.runtime import Kernel
        from minijit.runtime import team as team_mod
        from tests.minijit.runtime.test_team import LOOPNEST, expected_marks, marker_code, run_marker
        marker = Kernel(marker_code(), LOOPNEST)
        slow = Kernel(marker_code(pause=True), LOOPNEST)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


@needs_team
def test_stress_many_short_dispatches() -> None:
    """10000 dispatches alternating 2..4 threads and n = 1..9, each checked; must finish well
    inside the timeout (no lost wake-up, no piece claimed from a range the master is rewriting
    for the next job: a claim bounded by the range's ``pieces`` field instead of its ``next``
    word hung this test about one run in four on 2 cores)."""
    out = run_script(
        """
        t = team_mod.Team(3, spin=64)  # a short spin: workers and master go through the futex often
        bad = 0
        for i in range(10000):
            n, threads = 1 + i % 9, 2 + i % 3
            got = run_marker(t.run, marker.address, n, threads)
            if i % 97 == 0 and not np.array_equal(got, expected_marks(n, min(threads, n))):
                bad += 1
            elif got[:, 0].sum() != n:
                bad += 1
        print("bad", bad)
        """
    )
    assert out.split() == ["bad", "0"]


@needs_team
def test_slow_chunks_and_sleeping_workers() -> None:
    """Chunks that take longer than the spin window make the master sleep in its futex, and
    idle gaps make workers sleep in theirs; every call must still complete."""
    out = run_script(
        """
        t = team_mod.Team(3, spin=256)
        ok = True
        for pauses, gap in ((20000, 0.0), (0, 0.02), (5000, 0.02), (0, 0.0), (20000, 0.02)):
            time.sleep(gap)  # > spin window: workers are asleep in FUTEX_WAIT
            got = run_marker(t.run, slow.address, 7, 4, pauses)
            ok = ok and np.array_equal(got, expected_marks(7, 4))
        print(ok)
        """
    )
    assert out.split() == ["True"]


@needs_team
def test_master_runs_chunks_no_worker_has_claimed() -> None:
    """After its own range the master claims every piece no worker has started and runs it (a
    worker that is descheduled or still waking would finish later): with the worker asleep in its
    futex, the master runs range 1 itself, from the call site of range 0 (same stack pointer).
    Every iteration still runs exactly once, in its piece."""
    out = run_script(
        """
        stack = Kernel(marker_code(stack=True), LOOPNEST, name="stack_marker")
        t = team_mod.Team(1, spin=16)
        stolen = 0
        for _ in range(50):
            time.sleep(0.005)  # > the spin window: the worker sleeps in FUTEX_WAIT
            got = run_marker(t.run, stack.address, 2, 2)
            assert (got[:, 0] == 1).all(), got
            stolen += int(got[1, 1] == got[0, 1])
        print(stolen > 0)
        """
    )
    assert out.split() == ["True"]


@needs_team
def test_an_idle_thread_takes_pieces_of_a_slow_range() -> None:
    """A range whose iterations are slow (the second half of [0, 16) on two threads) is not left
    to its owner alone: once the master has run its own fast range it claims the slow range's
    remaining pieces (`team_mod.pieces`: one iteration each here), so some of them run on the
    master's stack. Every iteration still runs exactly once."""
    out = run_script(
        """
        slow = Kernel(marker_code(pause=True, stack=True, slow_from=True), LOOPNEST, name="slow_tail")
        t = team_mod.Team(1)
        assert team_mod.pieces(16, 2) == [(i, i + 1) for i in range(16)]
        taken = 0
        for _ in range(10):
            out = np.zeros((16, 2), np.int64)
            t.run(slow.address, 20000, 8, out.ctypes.data, 16, 2)  # ~0.5 ms per slow iteration
            assert (out[:, 0] == 1).all(), out
            master = out[0, 1]  # range 0 is fast: the master runs it before the worker could take any
            taken += int((out[8:, 1] == master).any())
            if taken >= 3:
                break
        print(taken >= 3)
        """
    )
    assert out.split() == ["True"]


@needs_team
def test_exit_does_not_hang() -> None:
    """The interpreter exits with workers spinning, with workers asleep in the futex, and with a
    daemon thread's job still running."""
    run_script(
        """
        a = team_mod.Team(2)
        run_marker(a.run, marker.address, 5, 3)  # workers spinning at exit
        b = team_mod.Team(1, spin=16)
        run_marker(b.run, marker.address, 5, 2)
        time.sleep(0.05)  # b's worker sleeps in FUTEX_WAIT
        c = team_mod.Team(1)
        job = threading.Thread(target=run_marker, args=(c.run, slow.address, 4, 2, 2_000_000), daemon=True)
        job.start()  # ~0.1 s of pauses per element
        time.sleep(0.05)
        """,
        timeout=30,
    )


@needs_team
def test_exit_leaves_a_long_job_alone() -> None:
    """A daemon thread's job that outlasts `EXIT_JOIN_TIMEOUT` at exit: the workers are left
    running with their code kept mapped; the interpreter exits cleanly, without a crash."""
    run_script(
        """
        team_mod.EXIT_JOIN_TIMEOUT = 0.1
        address = slow.address
        slow._buffer._finalizer.detach()  # the job's own code must outlive exit (not the team's concern)
        c = team_mod.Team(1)
        job = threading.Thread(target=run_marker, args=(c.run, address, 4, 2, 10_000_000), daemon=True)
        job.start()  # ~0.3 s of pauses per element, 2 elements per chunk
        time.sleep(0.05)
        """,
        timeout=30,
    )


@needs_team
def test_fork_child_gets_a_new_team() -> None:
    """After os.fork the child's inherited team refuses to run (it has no workers) and
    `parallel.run_loopnest` builds a new one."""
    out = run_script(
        """
        old = parallel.team(3)
        run_marker(parallel.run_loopnest, marker.address, 6, 3)
        pid = os.fork()
        if pid == 0:
            ok = old.closed and not old.run(marker.address, 0, 0, 0, 6, 3)
            got = run_marker(parallel.run_loopnest, marker.address, 6, 3)
            ok = ok and np.array_equal(got, expected_marks(6, 3)) and parallel.team(3) is not old
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        got = run_marker(parallel.run_loopnest, marker.address, 6, 3)
        print("parent", np.array_equal(got, expected_marks(6, 3)) and parallel.team(3) is old)
        """
    )
    assert out.split() == ["child", "0", "parent", "True"]


# ---------------------------------------------------------------------- parallel / backends
def test_python_backend_runs_loopnests(marker) -> None:
    with parallel.forced_backend("python"):
        assert parallel.backend() == "python"
        for n in range(10):
            for threads in (1, 2, 3):
                got = run_marker(parallel.run_loopnest, marker.address, n, threads)
                want = expected_marks(n, min(threads, max(n, 1)))  # the native team's pieces
                np.testing.assert_array_equal(got, want, err_msg=f"n={n} threads={threads}")


def test_backend_from_environment(monkeypatch) -> None:
    try:
        monkeypatch.setenv("MINIJIT_TEAM", "python")
        assert parallel.reload_backend() == "python"
        monkeypatch.setenv("MINIJIT_TEAM", "Native")
        assert parallel.reload_backend() == ("native" if NATIVE_TEAM else "python")
        monkeypatch.setenv("MINIJIT_TEAM", "openmp")
        with pytest.raises(ValueError, match="MINIJIT_TEAM must be one of native, python, got 'openmp'"):
            parallel.reload_backend()
        monkeypatch.setattr(team_mod, "unsupported_reason", lambda: "the native team is x86-64 code")
        monkeypatch.delenv("MINIJIT_TEAM")
        assert parallel.reload_backend() == "python"  # e.g. an AArch64 host
        with pytest.raises(RuntimeError, match="x86-64 code"):
            with parallel.forced_backend("native"):
                pass
        with pytest.raises(ValueError, match="backend must be one of"):
            with parallel.forced_backend("omp"):
                pass
    finally:
        monkeypatch.undo()
        parallel.reload_backend()


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 17, 100])
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_run_pieces_calls_each_piece_once(n: int, threads: int) -> None:
    """`parallel.run_pieces` calls ``fn`` once per piece of `team_mod.range_pieces` (the native
    team's schedule), each on one thread, and nothing for n = 0."""
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def record(begin: int, end: int) -> None:
        with lock:
            seen.append((begin, end))

    parallel.run_pieces(record, n, threads)
    assert sorted(seen) == team_mod.pieces(n, threads)
    assert sum(e - b for b, e in seen) == n


def test_run_pieces_hands_a_slow_range_to_the_caller() -> None:
    """The pool runs the team's schedule: on two threads, range 1 (iterations 8..15, one piece
    each) sleeps 20 ms per piece while range 0 returns at once, so the calling thread, done with
    its own range, claims some of range 1's pieces while the worker sleeps in its first."""
    owner: dict[int, int] = {}
    lock = threading.Lock()

    def piece(begin: int, end: int) -> None:
        if begin >= 8:
            time.sleep(0.02)
        with lock:
            owner[begin] = threading.get_ident()

    parallel.run_pieces(piece, 16, 2)
    assert sorted(owner) == list(range(16))
    main = threading.get_ident()
    assert all(owner[i] == main for i in range(8))  # range 0 is the caller's own
    assert any(owner[i] == main for i in range(8, 16))


@pytest.mark.parametrize(("n", "threads"), [(4, 4), (16, 2)])
def test_run_pieces_waits_for_every_thread_before_raising(n: int, threads: int) -> None:
    """An exception in a piece (here the caller's first) is raised only after the other threads
    are done: they may be writing the caller's buffers. They run on, so every other piece ran
    (with claims, n=16: the worker also takes the caller's abandoned pieces)."""
    done: list[int] = []

    def piece(begin: int, end: int) -> None:
        if begin == 0:
            raise KeyError("piece 0")
        time.sleep(0.01)
        done.append(begin)

    with pytest.raises(KeyError, match="piece 0"):
        parallel.run_pieces(piece, n, threads)
    assert sorted(done) == [b for b, _ in team_mod.pieces(n, threads)][1:]


def test_run_range_still_takes_python_callables() -> None:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def record(begin: int, end: int) -> None:
        with lock:
            seen.append((begin, end))

    parallel.run_range(record, 10, 3)
    assert sorted(seen) == parallel.chunks(10, 3) == [(0, 4), (4, 7), (7, 10)]


# ------------------------------------------------------------------------ TensorOperation
def shared_gemm(s: int, m: int, n: int, k: int, threads: int) -> TensorOperation:
    """C[:, j-block] = A @ B[:, j-block] over ``s`` shared column blocks (column-major, fp32)."""
    op = TensorOperation(num_threads=threads)
    op.setup(
        "fp32", "none", "gemm", "none",
        ["n", "m", "n", "k"], ["shared", "prim", "prim", "prim"], [s, m, n, k],
        [0, 1, 0, m], [k * n, 0, k, 1], [m * n, 1, m, 0],
    )  # fmt: skip
    return op


@pytest.fixture
def parallel_always(monkeypatch):
    from minijit import schedule

    monkeypatch.setattr(schedule, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(schedule, "PARALLEL_MIN_BYTES", 0)


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("backend", ["native", "python"] if NATIVE_TEAM else ["python"])
@settings(max_examples=6, deadline=None)
@given(threads=st.integers(1, 4), s=st.integers(1, 9), m=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_threaded_gemm_matches_numpy(backend: str, threads: int, s: int, m: int, seed: int) -> None:
    n, k = 3, 5
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (k, m)).astype(np.float32)  # column-major M x K
    B = rng.uniform(-1, 1, (s * n, k)).astype(np.float32)  # column-major K x (s N)
    C = rng.uniform(-1, 1, (s * n, m)).astype(np.float32)
    want = C + B @ A
    op = shared_gemm(s, m, n, k, threads)
    assert op.threads_used == (1 if s == 1 else threads)
    with parallel.forced_backend(backend):
        op.execute(A, B, C)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("parallel_always")
def test_threaded_operations_from_several_python_threads() -> None:
    """Four Python threads each execute their own threaded operation 40 times at once."""
    errors: list[str] = []

    def worker(i: int) -> None:
        s, m = 3 + i, 4 + 3 * i
        op = shared_gemm(s, m, 3, 5, threads=2 + i % 3)
        rng = np.random.default_rng(i)
        A = rng.uniform(-1, 1, (5, m)).astype(np.float32)
        B = rng.uniform(-1, 1, (s * 3, 5)).astype(np.float32)
        for _ in range(40):
            C = np.zeros((s * 3, m), np.float32)
            op.execute(A, B, C)
            if not np.allclose(C, B @ A, rtol=1e-5, atol=1e-5):
                errors.append(f"thread {i}")

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    assert not errors, errors


@needs_team
@pytest.mark.usefixtures("parallel_always")
def test_tensor_operation_dispatches_on_the_team(monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    real = team_mod.Team.run

    def spy(self, fn, in0, in1, out, n, threads):
        calls.append((n, threads))
        return real(self, fn, in0, in1, out, n, threads)

    monkeypatch.setattr(team_mod.Team, "run", spy)
    op = shared_gemm(5, 8, 3, 5, threads=2)
    A, B = np.ones((5, 8), np.float32), np.ones((15, 5), np.float32)
    C = np.zeros((15, 8), np.float32)
    with parallel.forced_backend("native"):
        op.execute(A, B, C)
    assert calls == [(5, 2)]
    np.testing.assert_array_equal(C, np.full((15, 8), 5.0, np.float32))


# ------------------------------------------------------------------------------- benchmark
def test_dispatch_benchmark_runs_every_backend() -> None:
    """`minijit.bench.dispatch` at tiny counts: one row per backend and case, plausible times."""
    from minijit.bench import dispatch

    rows = dispatch.measure(threads=2, gemm_sizes=(32,), gemm_threads=(2,), calls=200, gemm_calls=10)
    backends = dispatch.available_backends()
    assert [(r.case, r.backend) for r in rows] == [
        *(("no-op loop nest", b) for b in backends),
        ("execute() 8-elem add", "caller"),  # one thread: the checks and the call, no dispatch
        *(("gemm-32 C-order", b) for b in backends),
    ]
    for r in rows:
        assert 0 < r.p10 <= r.seconds <= r.p90 < 1.0
        assert r.threads == (1 if r.backend == "caller" else 2)
    text = dispatch.report(rows)
    assert len(text.splitlines()) == 1 + len(rows) and "median us" in text
