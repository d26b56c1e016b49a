"""Run AArch64 code on any host: a persistent ``qemu-aarch64`` worker.

The worker runs the harness of `minijit.runtime.harness` (a static ELF emitted
by `asm.aarch64`, no cross compiler) and is driven over pipes: map, write and
read memory, call code with up to 8 integer arguments. One worker per SVE
vector length (128..2048 bits) is shared process-wide; calls are serialized.
Requests go out in batches, each one wait for the worker: a call maps its
arrays in one round trip, copies them in and runs in the next, copies results
back in a third; memory released (a call's arrays, collected code) is
unmapped with the next request.

Code addresses are assigned by the host, not by qemu: each `Worker` hands out
page-aligned addresses from its own guest range ``[CODE_BASE, CODE_END)``
(monotonically, never reused), far below where qemu places mappings made
without an address (data regions; at or above 0x40_0000_0000 on 64-bit hosts),
and maps code exactly there (``MAP_FIXED_NOREPLACE``, the returned address is
checked: qemu 7.2 treats the flag as a hint). A fault in emulated code raises
`EmulatorFault` naming the signal and the faulting pc; the worker exits and is
restarted on the next request, and the fresh worker places the code of every
live `EmulatedKernel` again at its old address before serving anything, so
kernels that call each other by absolute address keep working. Emulation
proves correctness only; it is never timed.

Environment:

``MINIJIT_EMU_TIMEOUT`` (seconds, default 120)
    A request whose reply has not arrived after this long is abandoned: the
    worker is killed and `EmulatorError` raised. This bounds code that keeps
    running (an endless loop in a kernel, or very slow emulation).
``MINIJIT_EMU_IDLE_TIMEOUT`` (seconds, default 5; 0 turns the check off)
    While a reply is pending, the worker process is watched through
    ``/proc/<pid>/stat``: a worker that is alive but neither running nor
    runnable and has used no CPU time for this long is blocked (in a system
    call, or deadlocked) and will never answer; it is killed and
    `EmulatorError` raised within seconds instead of after the full timeout.
    A worker that keeps using CPU is never stopped by this check. Without
    ``/proc`` (not Linux) only ``MINIJIT_EMU_TIMEOUT`` applies.
"""

from __future__ import annotations

import atexit
import math
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any

import numpy as np

from minijit.runtime.emulator_regions import Regions
from minijit.runtime.harness import (
    CMD_CALL,
    CMD_EXIT,
    CMD_READ,
    CMD_SYSCALL,
    CMD_WRITE,
    REPLY,
    REQUEST,
    STATUS_FAULT,
    STATUS_OK,
    harness_elf,
)
from minijit.runtime.signature import SCALAR_TYPES, Signature

SYS_MUNMAP, SYS_MMAP, SYS_MPROTECT = 215, 222, 226
_LIVE: weakref.WeakSet = weakref.WeakSet()  # every Worker of this process
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000
PAGE = 4096
SVE_LENGTHS = (128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048)
SME_LENGTHS = (128, 256, 512, 1024, 2048)  # streaming vector lengths (SME: powers of two only)
# guest addresses for code: 64 GiB .. 256 GiB, above the harness ELF (0x400000) and below
# qemu's TASK_UNMAPPED_BASE for 64-bit guests on 64-bit hosts (0x40_0000_0000), where
# mappings without an address start (qemu 7.2 puts the guest stack at 0x55_0000_0000
# and data after it)
CODE_BASE = 0x10_0000_0000
CODE_END = 0x40_0000_0000


def _env_seconds(name: str, default: float, *, zero_ok: bool) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 or (zero_ok and value == 0)) or math.isinf(value):
        need = "a number of seconds >= 0 (0: off)" if zero_ok else "a number of seconds > 0"
        raise ValueError(f"{name} must be {need}, got {raw!r}")
    return value


DEFAULT_TIMEOUT_S = _env_seconds("MINIJIT_EMU_TIMEOUT", 120.0, zero_ok=False)
DEFAULT_IDLE_TIMEOUT_S = _env_seconds("MINIJIT_EMU_IDLE_TIMEOUT", 5.0, zero_ok=True)


class EmulatorError(RuntimeError):
    """The emulation worker could not be started or stopped answering."""


class EmulatorFault(EmulatorError):
    """Emulated code raised a signal (bad address, illegal instruction, ...)."""

    def __init__(self, signo: int, pc: int, address: int) -> None:
        try:
            name = signal.Signals(signo).name
        except ValueError:
            name = f"signal {signo}"
        super().__init__(f"{name} in emulated code at pc={pc:#x} (fault address {address:#x})")
        self.signo, self.pc, self.address = signo, pc, address


def find_qemu() -> str:
    """Path of ``qemu-aarch64`` (``MINIJIT_QEMU`` overrides); EmulatorError when missing."""
    path = os.environ.get("MINIJIT_QEMU") or shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if not path:
        raise EmulatorError("qemu-aarch64 not found: install Debian package 'qemu-user' or set MINIJIT_QEMU")
    return path


def _page_round(n: int) -> int:
    return max(PAGE, (n + PAGE - 1) // PAGE * PAGE)


# one request: (cmd, args, payload, size of a raw reply; 0: a status reply)
_Request = tuple[int, tuple[int, ...], bytes, int]
#: bytes that any pipe buffers (Linux shrinks a pipe to one page at the least)
PIPE_MIN = 4096


def _pack(cmd: int, args: tuple[int, ...]) -> bytes:
    return REQUEST.pack(cmd, *(a & 0xFFFFFFFFFFFFFFFF for a in args), *(0,) * (9 - len(args)))


def _syscall(nr: int, *args: int) -> _Request:
    return (CMD_SYSCALL, (nr, *args), b"", 0)


def _write(address: int, data: bytes) -> _Request:
    return (CMD_WRITE, (address, len(data)), bytes(data), 0)


def _syscall_result(nr: int, r0: int) -> int:
    """x0 of syscall ``nr``; OSError for a negative errno."""
    if r0 >= 1 << 63:
        errno = (1 << 64) - r0
        raise OSError(errno, f"syscall {nr} failed in the emulation worker: {os.strerror(errno)}")
    return r0


def _batches(requests: list[_Request]) -> list[list[_Request]]:
    """``requests`` in consecutive parts that can each be written whole before any reply is
    read without a deadlock: the worker blocks writing replies once the reply pipe is full, and
    then reads no more requests. A part's requests fit the request pipe, or the replies of all
    but its last request (the worker writes that one after reading the whole part) fit the
    reply pipe."""
    parts: list[list[_Request]] = []
    sent = replied = 0  # bytes of the current part's requests; of its replies
    for req in requests:
        size = REQUEST.size + len(req[2])
        if not parts or (sent + size > PIPE_MIN and replied > PIPE_MIN):
            parts.append([])
            sent = replied = 0
        parts[-1].append(req)
        sent += size
        replied += req[3] or REPLY.size
    return parts


def _cpu_and_state(pid: int) -> tuple[int, str] | None:
    """(utime + stime in clock ticks, state letter) of a process; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        # "pid (comm) state ppid ..." ; comm may hold spaces and parentheses
        fields = data[data.rindex(b")") + 1 :].split()
        return int(fields[11]) + int(fields[12]), fields[0].decode("ascii", "replace")
    except (OSError, ValueError, IndexError):
        return None


_HARNESS_PATH: str | None = None
_HARNESS_LOCK = threading.Lock()


def _harness_path() -> str:
    global _HARNESS_PATH
    with _HARNESS_LOCK:
        if _HARNESS_PATH is None or not os.path.exists(_HARNESS_PATH):
            fd, path = tempfile.mkstemp(prefix="minijit-harness-", suffix=".elf")
            with os.fdopen(fd, "wb") as f:
                f.write(harness_elf())
            os.chmod(path, 0o700)
            _HARNESS_PATH = path
        return _HARNESS_PATH


class Worker:
    """One qemu-aarch64 process at a fixed SVE vector length (bits), and with ``sme_vl`` a fixed
    streaming (SME) vector length in bits and no FEAT_SME_FA64 (as on the Apple M4: NEON and SVE
    gathers fault in streaming mode); ``sme_vl`` None: qemu's defaults (256 bits, FA64 on).

    ``timeout`` and ``idle_timeout`` (seconds; default from ``MINIJIT_EMU_TIMEOUT``
    and ``MINIJIT_EMU_IDLE_TIMEOUT``) bound the wait for each reply, see the module
    docstring. Code registered with `add_code` lives at a fixed address and is
    placed again whenever the process is restarted.
    """

    def __init__(
        self,
        sve_vl: int = 128,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        sme_vl: int | None = None,
    ) -> None:
        if sve_vl not in SVE_LENGTHS:
            raise ValueError(f"sve_vl must be a multiple of 128 in 128..2048 bits, got {sve_vl}")
        if sme_vl is not None and sme_vl not in SME_LENGTHS:
            raise ValueError(f"sme_vl must be None or one of {', '.join(map(str, SME_LENGTHS))} bits, got {sme_vl!r}")
        self.sve_vl, self.sme_vl = sve_vl, sme_vl
        self.timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
        self.idle_timeout = DEFAULT_IDLE_TIMEOUT_S if idle_timeout is None else idle_timeout
        self.generation = 0
        self.lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._code_next = CODE_BASE
        self._code: dict[int, bytes] = {}  # address -> code placed in every generation
        self._retired: list[tuple[int, int]] = []  # (address, size) of released code, to unmap
        _LIVE.add(self)  # stopped at exit (`_stop_workers_at_exit`)

    # -- process -----------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        cpu = f"max,sve{self.sve_vl}=on,sve-default-vector-length={self.sve_vl // 8}"
        if self.sme_vl is not None:
            cpu += f",sme-default-vector-length={self.sme_vl // 8},sme_fa64=off"
        proc = subprocess.Popen(
            [find_qemu(), "-cpu", cpu, _harness_path()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.generation += 1
        return proc

    def _live(self) -> subprocess.Popen:
        """The running process; a fresh one first gets all registered code placed again."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()  # reap a dead one, close its pipes
        self._proc = self._start()
        try:
            self._retired.clear()  # nothing of the old process is mapped in the new one
            if self._code:
                self._place_many(list(self._code.copy().items()))
        except BaseException:
            self._kill()
            raise
        return self._proc

    @property
    def proc(self) -> subprocess.Popen:
        """The worker process (started, with its code placed, when not running)."""
        with self.lock:
            return self._live()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                f.close()

    def close(self) -> None:
        """Ask the worker to exit (it is restarted on the next request)."""
        with self.lock:
            if self._proc is not None and self._proc.poll() is None:
                try:
                    self._send(CMD_EXIT)
                    self._proc.wait(timeout=5)
                except (OSError, EmulatorError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    # -- protocol ----------------------------------------------------------------
    # A request goes to the live process (started if needed) and its reply is read
    # from that same process: a worker that exits right after replying (a fault)
    # leaves its reply in the pipe, and a process started in between must not be
    # asked for a reply it never got a request for.
    def _send(self, cmd: int, *args: int, payload: bytes = b"") -> None:
        self._write_requests(self._live(), _pack(cmd, args) + payload)

    def _write_requests(self, proc: subprocess.Popen, data: bytes) -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died("while sending a request")

    def _exchange(self, requests: list[_Request]) -> list[Any]:
        """Send ``requests`` back to back and read their replies in order: ``(r0, r1, r2)`` of a
        status reply, the bytes of a read (``raw`` > 0). One wait for the worker per batch
        instead of one per request; a batch goes out in parts where both pipes could fill up
        (`_batches`). Code released with `remove_code` or `unmap_later` is unmapped first (the
        replies of those munmaps are not checked: a region that is gone is fine)."""
        proc = self._live()
        todo: list[_Request] = []
        while self._retired:
            address, size = self._retired.pop()
            todo.append((CMD_SYSCALL, (SYS_MUNMAP, address, _page_round(size)), b"", 0))
        skip = len(todo)
        todo.extend(requests)
        replies: list[Any] = []
        for batch in _batches(todo):
            self._write_requests(proc, b"".join(_pack(cmd, args) + payload for cmd, args, payload, _ in batch))
            replies.extend(self._recv(raw) if raw else self._reply() for _, _, _, raw in batch)
        return replies[skip:]

    def _recv(self, n: int) -> bytes:
        proc = self._proc
        if proc is None:
            raise EmulatorError("no emulation worker is waiting to reply")
        fd = proc.stdout.fileno()
        chunks, left = [], n
        while left:
            self._wait_readable(proc, fd)
            chunk = os.read(fd, left)
            if not chunk:
                self._died("before replying")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _wait_readable(self, proc: subprocess.Popen, fd: int) -> None:
        """Return once ``fd`` has data (or EOF); kill the worker and raise when it hangs."""
        start = time.monotonic()
        deadline = start + self.timeout
        idle = self.idle_timeout
        watch = idle > 0
        poll = min(0.5, max(0.02, idle / 5))
        last_cpu, last_progress = -1, start
        while True:
            now = time.monotonic()
            if now >= deadline:
                self._kill()
                raise EmulatorError(f"emulated code did not answer within {self.timeout:g} s (worker restarted)")
            ready, _, _ = select.select([fd], [], [], min(deadline - now, poll) if watch else deadline - now)
            if ready:
                return
            sample = _cpu_and_state(proc.pid) if watch else None
            if sample is None:
                watch = False  # no /proc: the plain timeout only
                continue
            cpu, state = sample
            now = time.monotonic()
            if cpu != last_cpu or state == "R":  # using CPU, or waiting for a CPU: healthy
                last_cpu, last_progress = cpu, now
            elif now - last_progress >= idle:
                self._kill()
                raise EmulatorError(
                    f"emulation worker was idle: no CPU time used for {now - last_progress:.1f} s while a reply "
                    f"was pending (state {state}: blocked in a system call or deadlocked); worker restarted "
                    f"(MINIJIT_EMU_IDLE_TIMEOUT={idle:g})"
                )

    def _died(self, when: str):
        proc = self._proc
        err = b""
        if proc is not None:
            try:
                proc.wait(timeout=5)
                err = proc.stderr.read() or b""
            except (OSError, subprocess.TimeoutExpired):
                pass
        code = proc.returncode if proc is not None else None
        self._kill()
        raise EmulatorError(f"qemu-aarch64 worker died {when} (exit {code}): {err.decode(errors='replace').strip()}")

    def _reply(self) -> tuple[int, int, int]:
        status, r0, r1, r2 = REPLY.unpack(self._recv(REPLY.size))
        if status == STATUS_FAULT:
            self._kill()
            raise EmulatorFault(r0, r1, r2)
        if status != STATUS_OK:
            self._kill()
            raise EmulatorError(f"worker sent an unknown status {status:#x}")
        return r0, r1, r2

    # -- requests ----------------------------------------------------------------
    def syscall(self, nr: int, *args: int) -> int:
        """Run Linux syscall ``nr`` in the worker; returns x0 (negative errno raises OSError)."""
        with self.lock:
            r0 = self._exchange([_syscall(nr, *args)])[0][0]
        return _syscall_result(nr, r0)

    def mmap(self, size: int, prot: int = PROT_READ | PROT_WRITE, address: int = 0) -> int:
        """Map ``size`` bytes (rounded up to pages), at exactly ``address`` when it is given.

        EmulatorError when that range is taken (qemu 7.2 treats MAP_FIXED_NOREPLACE as a
        hint and maps elsewhere; that mapping is removed again).
        """
        flags = MAP_PRIVATE | MAP_ANONYMOUS | (MAP_FIXED_NOREPLACE if address else 0)
        with self.lock:
            try:
                got = self.syscall(SYS_MMAP, address, _page_round(size), prot, flags, (1 << 64) - 1, 0)
            except OSError as e:
                if not address:
                    raise
                raise EmulatorError(f"could not map {size} bytes at {address:#x} in the worker: {e.strerror}") from e
            if address and got != address:
                self.munmap(got, size)
                raise EmulatorError(f"could not map {size} bytes at {address:#x} in the worker (got {got:#x})")
        return got

    def mmap_many(self, sizes: list[int]) -> list[int]:
        """Map one read+write region of each size (bytes, rounded up to pages) in one round trip;
        their addresses in order. OSError as `mmap` when one fails (the others are unmapped)."""
        prot, flags = PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
        with self.lock:
            replies = self._exchange(
                [_syscall(SYS_MMAP, 0, _page_round(n), prot, flags, (1 << 64) - 1, 0) for n in sizes]
            )
            got = [r[0] for r in replies]
            failed = [r0 for r0 in got if r0 >= 1 << 63]
            if failed:
                for address, size in zip(got, sizes, strict=True):
                    if address < 1 << 63:
                        self.unmap_later(address, size)
                _syscall_result(SYS_MMAP, failed[0])
        return got

    def munmap(self, address: int, size: int) -> None:
        self.syscall(SYS_MUNMAP, address, _page_round(size))

    def mprotect(self, address: int, size: int, prot: int) -> None:
        self.syscall(SYS_MPROTECT, address, _page_round(size), prot)

    def write(self, address: int, data: bytes) -> None:
        """Copy ``data`` into worker memory at ``address``."""
        self.write_many([(address, data)])

    def write_many(self, writes: list[tuple[int, bytes]]) -> None:
        """Copy each ``(address, data)`` into worker memory, all in one round trip."""
        requests = [_write(address, data) for address, data in writes if data]
        if requests:
            with self.lock:
                self._exchange(requests)

    def read(self, address: int, size: int) -> bytes:
        """Copy ``size`` bytes of worker memory at ``address``."""
        return self.read_many([(address, size)])[0]

    def read_many(self, reads: list[tuple[int, int]]) -> list[bytes]:
        """Copy ``size`` bytes of worker memory at each ``(address, size)``, in one round trip."""
        requests = [(CMD_READ, (address, size), b"", size) for address, size in reads if size > 0]
        with self.lock:
            got = iter(self._exchange(requests) if requests else [])
        return [next(got) if size > 0 else b"" for _, size in reads]

    def call(self, address: int, *args: int, writes: list[tuple[int, bytes]] | None = None) -> tuple[int, int]:
        """Call code at ``address`` with up to 8 integer arguments; returns (x0, d0 bits).
        ``writes``: ``(address, data)`` copied into worker memory first, in the same round trip."""
        if len(args) > 8:
            raise ValueError(f"at most 8 integer arguments can be passed, got {len(args)}")
        requests = [_write(at, data) for at, data in writes or () if data]
        requests.append((CMD_CALL, (address, *args), b"", 0))
        with self.lock:
            r0, r1, _ = self._exchange(requests)[-1]
        return r0, r1

    # -- code ----------------------------------------------------------------------
    def _code_address(self, size: int) -> int:
        """A fresh page-aligned guest address for ``size`` bytes of code (never handed out twice)."""
        address = self._code_next
        if address + _page_round(size) > CODE_END:
            raise EmulatorError(f"the worker's code range {CODE_BASE:#x}..{CODE_END:#x} is used up")
        self._code_next = address + _page_round(size)
        return address

    def _place(self, code: bytes, address: int) -> None:
        """Map code read+write at exactly ``address``, copy it, make it read+execute (W^X)."""
        self._place_many([(address, code)])

    def _place_many(self, items: list[tuple[int, bytes]]) -> None:
        """`_place` each ``(address, code)``: every mapping in one round trip (each checked),
        then every copy and mprotect in another."""
        flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE
        maps = [
            _syscall(SYS_MMAP, a, _page_round(len(c)), PROT_READ | PROT_WRITE, flags, (1 << 64) - 1, 0)
            for a, c in items
        ]
        got = [r[0] for r in self._exchange(maps)]
        problem = None
        for (address, code), r0 in zip(items, got, strict=True):
            if r0 >= 1 << 63:
                why = f"syscall {SYS_MMAP} failed in the emulation worker: {os.strerror((1 << 64) - r0)}"
                problem = problem or f"could not map {len(code)} bytes at {address:#x} in the worker: {why}"
            elif r0 != address:
                self.unmap_later(r0, len(code))
                problem = problem or f"could not map {len(code)} bytes at {address:#x} in the worker (got {r0:#x})"
        if problem is not None:
            for (address, code), r0 in zip(items, got, strict=True):
                if r0 == address:
                    self.unmap_later(address, len(code))
            raise EmulatorError(problem)
        requests: list[_Request] = []
        for address, code in items:
            requests += [
                _write(address, code),
                _syscall(SYS_MPROTECT, address, _page_round(len(code)), PROT_READ | PROT_EXEC),
            ]
        for r0, _, _ in self._exchange(requests)[1::2]:
            _syscall_result(SYS_MPROTECT, r0)

    def load_code(self, code: bytes, address: int = 0) -> int:
        """Place code once (not again after a restart): at ``address``, else at a fresh code
        address. `add_code` places code that must survive restarts."""
        if not code:
            raise ValueError("code must not be empty")
        with self.lock:
            self._live()
            address = address or self._code_address(len(code))
            self._place(bytes(code), address)
            return address

    def add_code(self, code: bytes) -> int:
        """Place code at a fresh address that it keeps for the life of this Worker: a restarted
        process gets it placed again before any other request. `remove_code` releases it."""
        if not code:
            raise ValueError("code must not be empty")
        code = bytes(code)
        with self.lock:
            address = self._code_address(len(code))
            self._code[address] = code
            try:
                if self._proc is not None and self._proc.poll() is None:
                    self._place(code, address)  # (released code is unmapped first)
                # else: placed when the process starts
            except BaseException:
                self._code.pop(address, None)
                raise
            return address

    def remove_code(self, address: int) -> None:
        """Forget code placed with `add_code` and unmap it with the next request.

        Takes no lock and sends nothing, so it is safe in a finalizer."""
        code = self._code.pop(address, None)
        if code is not None:
            self.unmap_later(address, len(code))

    def unmap_later(self, address: int, size: int) -> None:
        """Unmap ``size`` bytes at ``address`` of the running process with the next request
        (in its round trip; failures ignored). Takes no lock and sends nothing; a process
        started before then never mapped it, and nothing is unmapped there."""
        self._retired.append((address, size))

    def vector_length(self) -> int:
        """The SVE vector length the worker runs at, read with ``rdvl`` (bits)."""
        from asm.aarch64 import Assembler, x0

        a = Assembler()
        a.rdvl(x0, 1)
        a.ret()
        with self.lock:
            addr = self.load_code(a.code())
            try:
                return self.call(addr)[0] * 8
            finally:
                if self._proc is not None:
                    self.munmap(addr, 4)


_WORKERS: dict[tuple[int, int | None], Worker] = {}
_WORKERS_LOCK = threading.Lock()


def worker(sve_vl: int = 128, sme_vl: int | None = None) -> Worker:
    """The process-wide worker for an SVE vector length and a streaming vector length (bits;
    ``sme_vl`` None: qemu's default)."""
    with _WORKERS_LOCK:
        if (sve_vl, sme_vl) not in _WORKERS:
            _WORKERS[sve_vl, sme_vl] = Worker(sve_vl, sme_vl=sme_vl)
        return _WORKERS[sve_vl, sme_vl]


_CREATOR = os.getpid()


def _stop_workers_at_exit() -> None:
    """Kill this process's qemu workers and close their pipes at interpreter exit (no process or
    pipe left for the garbage collector to warn about). A worker another thread still holds is
    left alone, and a forked child never touches its parent's workers."""
    if os.getpid() != _CREATOR:
        return
    for w in list(_LIVE):
        if w.lock.acquire(blocking=False):
            try:
                w._kill()
            finally:
                w.lock.release()


atexit.register(_stop_workers_at_exit)


class EmulatedKernel:
    """AArch64 code called like a native `Kernel`, executed in a qemu worker.

    The code gets a fixed address in its worker (`Worker.add_code`) for the
    kernel's lifetime, also across worker restarts; it is unmapped when the
    kernel is collected. Array arguments are copied into worker memory (the
    whole byte range each array spans; arrays sharing memory share one region),
    the code runs, and arrays passed to non-const pointers are copied back.
    Nothing is copied back when the call faults.
    """

    def __init__(
        self,
        code: bytes,
        signature: str | Signature,
        *,
        name: str = "kernel",
        listing: str = "",
        sve_vl: int = 128,
        unchecked: bool = False,
        sme_vl: int | None = None,
    ) -> None:
        if not code:
            raise ValueError("code must not be empty")
        self.code = bytes(code)
        self.signature = Signature.parse(signature)
        if len(self.signature.args) > 8:
            raise ValueError("emulated kernels take at most 8 arguments")
        if any(a.kind in ("float", "double") for a in self.signature.args):
            raise ValueError("emulated kernels take integer and pointer arguments only")
        self.name, self.listing, self.unchecked = name, listing, unchecked
        self.isa = "aarch64"
        self.worker = worker(sve_vl, sme_vl)
        self._address = self.worker.add_code(self.code)
        fin = weakref.finalize(self, self.worker.remove_code, self._address)
        fin.atexit = False

    @property
    def address(self) -> int:
        """Address of the code inside the worker (stable across worker restarts)."""
        return self._address

    @property
    def size(self) -> int:
        return len(self.code)

    def __call__(self, *args: Any) -> Any:
        args = self.signature.check(args, unchecked=self.unchecked)
        with self.worker.lock:
            regions = Regions(self.worker)
            try:
                placed = {}
                for i, (spec, value) in enumerate(zip(self.signature.args, args, strict=True)):
                    if isinstance(value, np.ndarray):
                        placed[i] = regions.place(value, writable=not spec.const)
                regions.map()  # copied in with the call: one round trip for both
                ints = [regions.address_of(placed[i]) if i in placed else int(v) for i, v in enumerate(args)]
                r0, d0 = self.worker.call(self._address, *ints, writes=regions.writes())
                regions.download()
            finally:
                regions.free()
        return _result(self.signature, r0, d0)

    def __repr__(self) -> str:
        return f"<EmulatedKernel {self.name} ({self.signature}) {len(self.code)} bytes, SVE {self.worker.sve_vl} bits>"


def _result(sig: Signature, r0: int, d0: int) -> Any:
    if sig.ret == "void":
        return None
    if sig.ret == "double":
        return struct.unpack("<d", d0.to_bytes(8, "little"))[0]
    if sig.ret == "float":
        return struct.unpack("<f", (d0 & 0xFFFFFFFF).to_bytes(4, "little"))[0]
    scalar = SCALAR_TYPES[sig.ret_ctype]
    value = r0 & ((1 << scalar.bits) - 1)
    if scalar.signed and value >> (scalar.bits - 1):
        value -= 1 << scalar.bits
    return value
