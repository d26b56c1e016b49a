"""Simulated global memory: the address map, the allocations, gathers and scatters, and SimError."""

from __future__ import annotations

import threading
from functools import cache

import numpy as np

SHARED_BASE = 1024  #: shared-window address of the first .shared array (0..1023 is invalid)
GENERIC_SHARED = 1 << 48  #: generic address of shared-window address 0 (cvta.shared)
GLOBAL_BASE = 1 << 40  #: first global allocation
PARAM_BASE = 1 << 47  #: generic address of the kernel parameters (cvta.param of .param-space address 0)
_GAP = 4096  #: unallocated bytes between global allocations (out-of-bounds accesses fault)
_MASK = {1: 1, 8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}
_U64 = np.uint64


class SimError(Exception):
    """A kernel did something undefined (or the simulator does not support it)."""


@cache
def _arange(n: int) -> np.ndarray:
    """np.arange(n) (int64), read-only: shared by every caller."""
    a = np.arange(n, dtype=np.int64)
    a.flags.writeable = False
    return a


def _add_at(a: np.ndarray, idx: np.ndarray, v: int) -> None:
    """np.add.at(a, idx, v) for an integer array ``a`` (repeated indices add repeatedly), by
    counting the indices: much faster than np.add.at. Indices outside ``a`` go to np.add.at."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= a.size or a.ndim != 1:
        np.add.at(a, idx, v)  # its error, or its wrap-around of negative indices
        return
    counts = np.bincount(idx.reshape(-1).astype(np.int64) - lo, minlength=hi - lo + 1)
    a[lo : hi + 1] += counts.astype(a.dtype) * a.dtype.type(v)


# --------------------------------------------------------------------------- global memory


class Memory:
    """Simulated global memory: separate allocations with unmapped gaps between them."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._bufs: list[np.ndarray] = []
        self._next = GLOBAL_BASE
        self._table: tuple = (None, -1, None, None)  # (_bases, its length, bases, ends as arrays)
        self._lock = threading.Lock()  # allocations from several host threads (as cuMemAlloc allows)

    def alloc(self, nbytes: int, align: int = 256) -> int:
        """A zeroed allocation of ``nbytes`` bytes; returns its device address."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        buf = np.zeros(max(nbytes, 1), np.uint8)
        with self._lock:
            base = -(-self._next // align) * align
            self._bufs.append(buf)  # before its base: a reader that finds the base finds the buffer
            self._bases.append(base)
            self._next = base + max(nbytes, 1) + _GAP
        return base

    def upload(self, host: np.ndarray) -> int:
        """Copy ``host`` (any dtype, C-contiguous bytes) into a new allocation; its address."""
        raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
        addr = self.alloc(raw.size)
        self.write(addr, raw)
        return addr

    def _buffer(self, addr: int, nbytes: int) -> tuple[np.ndarray, int]:
        i = int(np.searchsorted(self._bases, addr, side="right")) - 1
        if i < 0 or addr + nbytes > self._bases[i] + self._bufs[i].size:
            raise SimError(f"host access to {nbytes} bytes at {addr:#x}: not inside one allocation")
        return self._bufs[i], addr - self._bases[i]

    def write(self, addr: int, host: np.ndarray) -> None:
        """Copy the bytes of ``host`` to device address ``addr``."""
        raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
        buf, off = self._buffer(addr, raw.size)
        buf[off : off + raw.size] = raw

    def read(self, addr: int, dtype, count: int) -> np.ndarray:
        """``count`` elements of ``dtype`` from device address ``addr`` (a copy)."""
        dt = np.dtype(dtype)
        buf, off = self._buffer(addr, dt.itemsize * count)
        return buf[off : off + dt.itemsize * count].copy().view(dt)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end addresses of the allocations (arrays, rebuilt after an allocation)."""
        lst, size, bases, ends = self._table
        if lst is not self._bases or size != len(self._bases):
            bases = np.asarray(self._bases, _U64)
            ends = bases + np.asarray([b.size for b in self._bufs[: len(bases)]], _U64)
            self._table = (self._bases, len(bases), bases, ends)
        return bases, ends

    def locate(self, addrs: np.ndarray, width: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        """(allocation index, offset) of each address; SimError unless [a, a+width) is mapped."""
        a = addrs.astype(_U64)
        if len(self._bases) == 0:
            raise SimError(f"{what} at {int(a[0]):#x}: no global memory is allocated")
        bases, ends = self._arrays()
        i = np.searchsorted(bases, a, side="right") - 1
        ok = i >= 0
        ic = np.maximum(i, 0)
        ok &= a + _U64(width) <= ends[ic]
        if np.count_nonzero(ok) != ok.size:
            bad = int(a[~ok][0])
            raise SimError(f"{what} of {width} bytes at {bad:#x} is outside every allocation")
        return ic, (a - bases[ic]).astype(np.int64)

    def gather(self, addrs: np.ndarray, width: int, what: str) -> np.ndarray:
        """Bytes (n, width) at each address."""
        idx, off = self.locate(addrs, width, what)
        cols = _arange(width)
        if idx.size and not np.count_nonzero(idx != idx[0]):  # all in one allocation
            return self._bufs[idx[0]][off[:, None] + cols]
        out = np.empty((addrs.size, width), np.uint8)
        for j in np.unique(idx):
            sel = idx == j
            out[sel] = self._bufs[j][off[sel, None] + cols]
        return out

    def scatter(self, addrs: np.ndarray, data: np.ndarray, what: str) -> None:
        """Store bytes ``data`` (n, width) at each address (later threads win on overlap)."""
        width = data.shape[1]
        idx, off = self.locate(addrs, width, what)
        cols = _arange(width)
        if idx.size and not np.count_nonzero(idx != idx[0]):  # all in one allocation
            self._bufs[idx[0]][off[:, None] + cols] = data
            return
        for j in np.unique(idx):
            sel = idx == j
            self._bufs[j][off[sel, None] + cols] = data[sel]
