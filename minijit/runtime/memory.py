"""W^X executable memory for generated machine code.

`ExecutableBuffer(code)` maps fresh anonymous pages read-write, copies the
code in, and then flips them to read-execute with ``mprotect`` (docs/decisions.md,
"Executable memory is W^X"). No page is ever writable and executable at once.
On AArch64 the instruction cache is flushed for the range. On Apple silicon the pages are
mapped with ``MAP_JIT`` and written between ``pthread_jit_write_protect_np``
toggles, as the platform requires.

mmap, mprotect and munmap go through ctypes (no compiler and no C parser needed: loading a
cached kernel stays cheap); the AArch64 and Apple-only calls through cffi in ABI mode. Every
failure raises OSError with the C errno.
"""

from __future__ import annotations

import ctypes
import mmap as _mmap
import os
import sys
import threading
import weakref
from typing import Any

from minijit.runtime.features import detected_host

__all__ = ["ExecutableBuffer", "page_size"]

_PROT_READ = _mmap.PROT_READ
_PROT_WRITE = _mmap.PROT_WRITE
_PROT_EXEC = _mmap.PROT_EXEC
_MAP_PRIVATE = _mmap.MAP_PRIVATE
_MAP_ANONYMOUS = getattr(_mmap, "MAP_ANONYMOUS", 0x1000 if sys.platform == "darwin" else 0x20)
_MAP_JIT = 0x800  # <sys/mman.h> on macOS


def _bind_libc() -> Any:
    """libc's mmap/mprotect/munmap through ctypes (no C parser to load, errno kept)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64)
    libc.mprotect.restype = ctypes.c_int
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return libc


_libc: Any = _bind_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value

_lock = threading.Lock()
_icache: Any = None  # callable(start: int, size: int) -> None, resolved lazily
_apple_jit: Any = None  # libpthread with pthread_jit_write_protect_np on Apple silicon


def page_size() -> int:
    """The VM page size in bytes (16 KiB on Apple silicon, usually 4 KiB elsewhere)."""
    return _mmap.PAGESIZE


def _is_apple_silicon() -> bool:
    return sys.platform == "darwin" and detected_host().isa == "aarch64"


def _oserror(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what} failed: {os.strerror(err) if err else 'unknown error'}")


def _resolve_icache_flush() -> Any:
    """Return a function flushing the instruction cache for [start, start+size) bytes."""
    import cffi

    if sys.platform == "darwin":
        ffi = cffi.FFI()
        ffi.cdef("void sys_icache_invalidate(void *start, size_t len);")
        lib = ffi.dlopen(None)
        return lambda start, size: lib.sys_icache_invalidate(ffi.cast("void *", start), size)
    ffi = cffi.FFI()
    ffi.cdef("void __clear_cache(char *begin, char *end);")
    for name in ("libgcc_s.so.1", "libgcc_s.so", None):
        try:
            lib = ffi.dlopen(name)
            fn = lib.__clear_cache
        except (OSError, AttributeError):
            continue
        return lambda start, size: fn(ffi.cast("char *", start), ffi.cast("char *", start + size))
    # Linux arm64 without libgcc_s: the kernel's set_pte_at() (__sync_icache_dcache)
    # already cleans D-cache to PoU and invalidates the I-cache when mprotect makes
    # a user page executable, so skipping the explicit flush is still correct.
    return lambda start, size: None


def _flush_icache(start: int, size: int) -> None:
    global _icache
    if detected_host().isa != "aarch64":
        return  # x86-64 keeps instruction and data caches coherent
    if _icache is None:
        with _lock:
            if _icache is None:
                _icache = _resolve_icache_flush()
    _icache(start, size)


def _jit_write_protect(enabled: bool) -> None:
    """Toggle this thread's view of MAP_JIT pages (Apple silicon only)."""
    global _apple_jit
    if _apple_jit is None:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("void pthread_jit_write_protect_np(int enabled);")
        _apple_jit = ffi.dlopen(None)
    _apple_jit.pthread_jit_write_protect_np(1 if enabled else 0)


def _unmap(address: int, length: int) -> None:
    if _libc.munmap(address, length) != 0:
        raise _oserror("munmap")


class ExecutableBuffer:
    """Machine code in its own read-execute pages.

    ``size`` is the code length in bytes; ``mapped_size`` is that rounded up
    to whole pages. The mapping is released by ``close()`` (idempotent) or when
    the buffer is garbage collected.
    """

    def __init__(self, code: bytes | bytearray | memoryview) -> None:
        data = bytes(code)
        if not data:
            raise ValueError("ExecutableBuffer: code is empty (0 bytes)")
        page = page_size()
        length = (len(data) + page - 1) // page * page
        apple = _is_apple_silicon()
        flags = _MAP_PRIVATE | _MAP_ANONYMOUS
        prot = _PROT_READ | _PROT_WRITE
        if apple:
            # MAP_JIT pages carry RWX as their maximum protection, but each thread
            # only ever sees them RW or RX depending on pthread_jit_write_protect_np.
            flags |= _MAP_JIT
            prot |= _PROT_EXEC
        ptr = _libc.mmap(None, length, prot, flags, -1, 0)
        address = ptr or 0
        if address == _MAP_FAILED or address == 0:
            raise _oserror(f"mmap of {length} bytes")
        # Registered before anything else can fail, so the pages never leak.
        self._finalizer = weakref.finalize(self, _unmap, address, length)
        try:
            if apple:
                _jit_write_protect(False)
            try:
                ctypes.memmove(address, data, len(data))
            finally:
                if apple:
                    _jit_write_protect(True)
            # On Apple silicon mprotect on MAP_JIT pages is refused (macOS >= 11.2);
            # the per-thread write protection toggled above already keeps them RX.
            if not apple and _libc.mprotect(address, length, _PROT_READ | _PROT_EXEC) != 0:
                raise _oserror("mprotect(PROT_READ|PROT_EXEC)")
            _flush_icache(address, len(data))
        except BaseException:
            self._finalizer()
            raise
        self._address = address
        self._size = len(data)
        self._mapped_size = length

    @property
    def address(self) -> int:
        """Address of the first code byte. Raises ValueError once closed."""
        if not self._finalizer.alive:
            raise ValueError("ExecutableBuffer is closed")
        return self._address

    @property
    def size(self) -> int:
        """Code length in bytes."""
        return self._size

    @property
    def mapped_size(self) -> int:
        """Length of the mapping in bytes (whole pages)."""
        return self._mapped_size

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Unmap the pages. Safe to call more than once."""
        self._finalizer()

    def __enter__(self) -> ExecutableBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<ExecutableBuffer closed, {self._size} bytes>"
        return f"<ExecutableBuffer at {self._address:#x}, {self._size} bytes>"
