"""W^X executable memory: permissions, contents, release."""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

import pytest

from minijit.runtime import memory
from minijit.runtime.memory import ExecutableBuffer, page_size
from tests.minijit.helpers import mapping_perms

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")


def assert_w_xor_x(perms: str | None) -> None:
    assert perms is not None
    assert not ("w" in perms and "x" in perms), perms


def test_code_is_copied_and_mapped_read_execute() -> None:
    code = bytes(range(256)) * 3 + b"\xc3"
    buf = ExecutableBuffer(code)
    try:
        assert buf.size == len(code)
        assert buf.mapped_size % page_size() == 0 and buf.mapped_size >= len(code)
        assert buf.address % page_size() == 0
        assert ctypes.string_at(buf.address, buf.size) == code
        for offset in range(0, buf.mapped_size, page_size()):
            perms = mapping_perms(buf.address + offset)
            assert perms == "r-xp"
            assert_w_xor_x(perms)
    finally:
        buf.close()


def test_multi_page_code() -> None:
    code = b"\x90" * (3 * page_size() + 17) + b"\xc3"
    with ExecutableBuffer(code) as buf:
        assert buf.mapped_size == 4 * page_size()
        assert mapping_perms(buf.address + buf.mapped_size - 1) == "r-xp"
        assert ctypes.string_at(buf.address, buf.size) == code


class _SpyLibc:
    """Forwards to the real libc and records every protection requested."""

    def __init__(self, real: Any, break_mprotect: bool = False) -> None:
        self.real = real
        self.prots: list[int] = []
        self.mapped: list[int] = []
        self.break_mprotect = break_mprotect

    def mmap(self, addr: Any, length: int, prot: int, flags: int, fd: int, off: int) -> Any:
        self.prots.append(prot)
        ptr = self.real.mmap(addr, length, prot, flags, fd, off)
        self.mapped.append(int(ptr))  # ctypes: the address as an int
        return ptr

    def mprotect(self, addr: Any, length: int, prot: int) -> int:
        self.prots.append(prot)
        if self.break_mprotect:  # misaligned address: the real call fails with EINVAL
            return self.real.mprotect(addr + 1, length, prot)
        return self.real.mprotect(addr, length, prot)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_never_writable_and_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _SpyLibc(memory._libc)
    monkeypatch.setattr(memory, "_libc", spy)
    buf = ExecutableBuffer(b"\xc3")
    buf.close()
    assert spy.prots, "no mmap/mprotect seen"
    both = memory._PROT_WRITE | memory._PROT_EXEC
    assert all(p & both != both for p in spy.prots), spy.prots
    assert spy.prots[-1] == memory._PROT_READ | memory._PROT_EXEC


def test_mprotect_failure_raises_oserror_and_unmaps(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _SpyLibc(memory._libc, break_mprotect=True)
    monkeypatch.setattr(memory, "_libc", spy)
    with pytest.raises(OSError, match="mprotect") as info:
        ExecutableBuffer(b"\xc3" * 100)
    assert info.value.errno == 22  # EINVAL
    # The read-write pages were unmapped again.
    assert len(spy.mapped) == 1
    assert mapping_perms(spy.mapped[0]) is None


def test_empty_code_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        ExecutableBuffer(b"")


def test_close_unmaps_and_is_idempotent() -> None:
    buf = ExecutableBuffer(b"\xc3" * 64)
    address = buf.address
    assert mapping_perms(address) == "r-xp"
    buf.close()
    assert buf.closed
    assert mapping_perms(address) != "r-xp"
    buf.close()
    with pytest.raises(ValueError, match="closed"):
        _ = buf.address
    assert "closed" in repr(buf)


def test_freed_when_collected() -> None:
    buf = ExecutableBuffer(b"\xc3" * 64)
    address = buf.address
    assert mapping_perms(address) == "r-xp"
    del buf
    gc.collect()
    perms = mapping_perms(address)
    assert perms is None or "x" not in perms


def test_icache_flush_resolves_and_runs() -> None:
    # A no-op on x86-64 (libgcc_s's __clear_cache returns at once); real work on AArch64.
    flush = memory._resolve_icache_flush()
    with ExecutableBuffer(b"\xc3" * 32) as buf:
        flush(buf.address, buf.size)
        memory._flush_icache(buf.address, buf.size)
