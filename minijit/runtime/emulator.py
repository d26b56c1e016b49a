"""Run AArch64 code on any host: a persistent ``qemu-aarch64`` worker.

The worker runs the harness of `minijit.runtime.harness` (a static ELF emitted
by `asm.aarch64`, no cross compiler) and is driven over pipes: map, write and
read memory, call code with up to 8 integer arguments. One worker per SVE
vector length (128..2048 bits) is shared process-wide; calls are serialized.

A fault in emulated code raises `EmulatorFault` naming the signal and the
faulting pc; the worker is restarted on the next use and code loaded through
`EmulatedKernel` is placed again at the same addresses, so kernels that call
each other by absolute address keep working. Emulation proves correctness only;
it is never timed.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

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
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000
PAGE = 4096
SVE_LENGTHS = (128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048)
DEFAULT_TIMEOUT_S = float(os.environ.get("MINIJIT_EMU_TIMEOUT", "120"))


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
    """One qemu-aarch64 process at a fixed SVE vector length (bits)."""

    def __init__(self, sve_vl: int = 128, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        if sve_vl not in SVE_LENGTHS:
            raise ValueError(f"sve_vl must be a multiple of 128 in 128..2048 bits, got {sve_vl}")
        self.sve_vl = sve_vl
        self.timeout = timeout
        self.generation = 0
        self.lock = threading.RLock()
        self._proc: subprocess.Popen | None = None

    # -- process -----------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        cpu = f"max,sve{self.sve_vl}=on,sve-default-vector-length={self.sve_vl // 8}"
        proc = subprocess.Popen(
            [find_qemu(), "-cpu", cpu, _harness_path()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.generation += 1
        return proc

    @property
    def proc(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                f.close()
            self._proc = None

    def close(self) -> None:
        """Ask the worker to exit (it is restarted on the next request)."""
        with self.lock:
            if self._proc is not None and self._proc.poll() is None:
                try:
                    self._send(CMD_EXIT)
                    self._proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    # -- protocol ----------------------------------------------------------------
    def _send(self, cmd: int, *args: int, payload: bytes = b"") -> None:
        vals = [a & 0xFFFFFFFFFFFFFFFF for a in args] + [0] * (9 - len(args))
        try:
            self.proc.stdin.write(REQUEST.pack(cmd, *vals) + payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died("while sending a request")

    def _recv(self, n: int) -> bytes:
        out = self.proc.stdout
        fd = out.fileno()
        chunks, left = [], n
        while left:
            ready, _, _ = select.select([fd], [], [], self.timeout)
            if not ready:
                self._kill()
                raise EmulatorError(f"emulated code did not answer within {self.timeout:.0f} s (worker restarted)")
            chunk = os.read(fd, left)
            if not chunk:
                self._died("before replying")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

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
            self._send(CMD_SYSCALL, nr, *args)
            r0 = self._reply()[0]
        if r0 >= 1 << 63:
            errno = (1 << 64) - r0
            raise OSError(errno, f"syscall {nr} failed in the emulation worker: {os.strerror(errno)}")
        return r0

    def mmap(self, size: int, prot: int = PROT_READ | PROT_WRITE, address: int = 0) -> int:
        """Map ``size`` bytes (rounded up to pages); ``address`` is a fixed, non-replacing hint."""
        flags = MAP_PRIVATE | MAP_ANONYMOUS | (MAP_FIXED_NOREPLACE if address else 0)
        got = self.syscall(SYS_MMAP, address, _page_round(size), prot, flags, (1 << 64) - 1, 0)
        if address and got != address:
            raise EmulatorError(f"could not map {size} bytes at {address:#x} in the worker (got {got:#x})")
        return got

    def munmap(self, address: int, size: int) -> None:
        self.syscall(SYS_MUNMAP, address, _page_round(size))

    def mprotect(self, address: int, size: int, prot: int) -> None:
        self.syscall(SYS_MPROTECT, address, _page_round(size), prot)

    def write(self, address: int, data: bytes) -> None:
        """Copy ``data`` into worker memory at ``address``."""
        if not data:
            return
        with self.lock:
            self._send(CMD_WRITE, address, len(data), payload=bytes(data))
            self._reply()

    def read(self, address: int, size: int) -> bytes:
        """Copy ``size`` bytes of worker memory at ``address``."""
        if size <= 0:
            return b""
        with self.lock:
            self._send(CMD_READ, address, size)
            return self._recv(size)

    def call(self, address: int, *args: int) -> tuple[int, int]:
        """Call code at ``address`` with up to 8 integer arguments; returns (x0, d0 bits)."""
        if len(args) > 8:
            raise ValueError(f"at most 8 integer arguments can be passed, got {len(args)}")
        with self.lock:
            self._send(CMD_CALL, address, *args)
            r0, r1, _ = self._reply()
        return r0, r1

    def load_code(self, code: bytes, address: int = 0) -> int:
        """Map code read+write, copy it, then make it read+execute (W^X in the guest too)."""
        with self.lock:
            addr = self.mmap(len(code), PROT_READ | PROT_WRITE, address)
            self.write(addr, code)
            self.mprotect(addr, len(code), PROT_READ | PROT_EXEC)
            return addr

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
                self.munmap(addr, 4)


_WORKERS: dict[int, Worker] = {}
_WORKERS_LOCK = threading.Lock()


def worker(sve_vl: int = 128) -> Worker:
    """The process-wide worker for an SVE vector length (bits)."""
    with _WORKERS_LOCK:
        if sve_vl not in _WORKERS:
            _WORKERS[sve_vl] = Worker(sve_vl)
        return _WORKERS[sve_vl]


@dataclass
class _Placement:
    generation: int
    address: int


class EmulatedKernel:
    """AArch64 code called like a native `Kernel`, executed in a qemu worker.

    Array arguments are copied into worker memory (the whole byte range each
    array spans; arrays sharing memory share one region), the code runs, and
    arrays passed to non-const pointers are copied back. Nothing is copied
    back when the call faults.
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
        self.worker = worker(sve_vl)
        self._placement: _Placement | None = None
        self._fixed_address: int | None = None

    @property
    def address(self) -> int:
        """Address of the code inside the worker (stable across worker restarts)."""
        with self.worker.lock:
            w = self.worker
            if self._placement is None or self._placement.generation != w.generation or w._proc is None:
                w.proc  # noqa: B018  (start the worker so that its generation is current)
                addr = w.load_code(self.code, self._fixed_address or 0)
                self._fixed_address = addr
                self._placement = _Placement(w.generation, addr)
            return self._placement.address

    @property
    def size(self) -> int:
        return len(self.code)

    def __call__(self, *args: Any) -> Any:
        args = self.signature.check(args, unchecked=self.unchecked)
        with self.worker.lock:
            address = self.address
            regions = _Regions(self.worker)
            try:
                placed = {}
                for i, (spec, value) in enumerate(zip(self.signature.args, args, strict=True)):
                    if isinstance(value, np.ndarray):
                        placed[i] = regions.place(value, writable=not spec.const)
                regions.upload()
                ints = [regions.address_of(placed[i]) if i in placed else int(v) for i, v in enumerate(args)]
                r0, d0 = self.worker.call(address, *ints)
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


class _Regions:
    """Host arrays mirrored into worker memory for one call.

    Each array's byte range is copied; ranges that overlap are merged into one
    region so that aliasing arrays alias in the worker too.
    """

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.arrays: list[tuple[int, int, int, bool]] = []  # (data pointer, lo, hi, writable)
        self.spans: list[list[Any]] = []  # [lo, hi, writable, worker address]

    def place(self, arr: np.ndarray, writable: bool) -> int:
        lo, hi = _byte_bounds(arr)
        self.arrays.append((arr.ctypes.data, lo, hi, writable))
        return len(self.arrays) - 1

    def upload(self) -> None:
        merged: list[list[Any]] = []
        for _, lo, hi, writable in sorted(self.arrays, key=lambda t: t[1]):
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
                merged[-1][2] = merged[-1][2] or writable
            else:
                merged.append([lo, hi, writable, 0])
        self.spans = merged
        for span in self.spans:
            span[3] = self.w.mmap(max(span[1] - span[0], 1))
            self.w.write(span[3], ctypes.string_at(span[0], span[1] - span[0]))

    def address_of(self, index: int) -> int:
        data, lo, hi, _ = self.arrays[index]
        for s_lo, s_hi, _, addr in self.spans:
            if s_lo <= lo and hi <= s_hi:
                return addr + (data - s_lo)
        raise AssertionError("array was not placed")

    def download(self) -> None:
        for lo, hi, writable, addr in self.spans:
            if writable and hi > lo:
                ctypes.memmove(lo, self.w.read(addr, hi - lo), hi - lo)

    def free(self) -> None:
        for lo, hi, _, addr in self.spans:
            if addr:
                try:
                    self.w.munmap(addr, max(hi - lo, 1))
                except (OSError, EmulatorError):
                    pass


def _byte_bounds(arr: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds  # type: ignore[attr-defined]
    lo, hi = byte_bounds(arr)
    return lo, hi
