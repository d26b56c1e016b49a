"""Host arrays mirrored into the emulation worker's memory for one call (`EmulatedKernel`)."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from minijit.runtime.emulator import Worker


class Regions:
    """Host arrays mirrored into worker memory for one call.

    Each array's byte range is copied; ranges that overlap are merged into one
    region so that aliasing arrays alias in the worker too.
    """

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.arrays: list[tuple[int, int, int, bool]] = []  # (data pointer, lo, hi, writable)
        self.spans: list[list[Any]] = []  # [lo, hi, writable, worker address]
        self.generation = -1  # of the worker process the spans are mapped in

    def place(self, arr: np.ndarray, writable: bool) -> int:
        lo, hi = _byte_bounds(arr)
        self.arrays.append((arr.ctypes.data, lo, hi, writable))
        return len(self.arrays) - 1

    def upload(self) -> None:
        """Map every region in the worker and copy the arrays in (two round trips)."""
        self.map()
        self.w.write_many(self.writes())

    def map(self) -> None:
        """Map every region in the worker (one round trip); `writes` are what copies them in."""
        merged: list[list[Any]] = []
        for _, lo, hi, writable in sorted(self.arrays, key=lambda t: t[1]):
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
                merged[-1][2] = merged[-1][2] or writable
            else:
                merged.append([lo, hi, writable, 0])
        self.spans = merged
        if not merged:
            return
        addresses = self.w.mmap_many([max(hi - lo, 1) for lo, hi, _, _ in merged])
        self.generation = self.w.generation
        for span, address in zip(merged, addresses, strict=True):
            span[3] = address

    def writes(self) -> list[tuple[int, bytes]]:
        """``(worker address, bytes)`` of every mapped region: the host arrays' contents now."""
        return [(addr, ctypes.string_at(lo, hi - lo)) for lo, hi, _, addr in self.spans if addr and hi > lo]

    def address_of(self, index: int) -> int:
        data, lo, hi, _ = self.arrays[index]
        for s_lo, s_hi, _, addr in self.spans:
            if s_lo <= lo and hi <= s_hi:
                return addr + (data - s_lo)
        raise AssertionError("array was not placed")

    def download(self) -> None:
        """Copy the writable regions back into the host arrays (one round trip)."""
        spans = [(lo, hi, addr) for lo, hi, writable, addr in self.spans if writable and hi > lo]
        for (lo, hi, _), data in zip(spans, self.w.read_many([(addr, hi - lo) for lo, hi, addr in spans]), strict=True):
            ctypes.memmove(lo, data, hi - lo)

    def free(self) -> None:
        """Release the regions: unmapped with the worker's next request (no round trip now)."""
        if self.w._proc is None or self.w.generation != self.generation:
            return  # the process they were mapped in is gone (a fault): nothing to unmap
        for lo, hi, _, addr in self.spans:
            if addr:
                self.w.unmap_later(addr, max(hi - lo, 1))


def _byte_bounds(arr: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds  # type: ignore[attr-defined]
    lo, hi = byte_bounds(arr)
    return lo, hi
