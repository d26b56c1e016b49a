"""ISA-independent description of a compiled loop nest (DESIGN.md decision 5).

A `LoopNest` is what the per-ISA emitters (`minijit.kernels.aarch64.loopnest`,
`minijit.kernels.x86_64.loopnest`) turn into one machine-code function

    void f(const void* in0, const void* in1, void* out, int64_t begin, int64_t end)

that runs iterations ``[begin, end)`` of the flattened shared iteration space.
Inside each shared iteration the seq loops run nested in list order; at the
innermost level the first-touch call runs when every seq K loop is at its first
iteration, then the main call, then the last-touch call when every seq K loop is
at its last iteration. Pointers advance by byte strides; the kernel calls get
the current pointers and constant arguments.

This module knows loops and calls, not tensors: the TensorOperation backend
builds the plan from a TensorConfig.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TENSORS = ("in0", "in1", "out")
SIGNATURE = "void(const void* in0, const void* in1, void* out, int64_t begin, int64_t end)"


@dataclass(frozen=True)
class Loop:
    """One loop: ``size`` iterations, pointer steps in BYTES for (in0, in1, out)."""

    size: int
    strides: tuple[int, int, int]
    shared: bool = False
    k: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"loop size must be an int >= 1, got {self.size!r}")
        if len(self.strides) != 3 or not all(isinstance(s, int) for s in self.strides):
            raise ValueError(f"loop strides must be three ints (bytes), got {self.strides!r}")
        if self.shared and self.k:
            raise ValueError("a K loop cannot be shared")


@dataclass(frozen=True)
class Call:
    """A kernel call: code address and up to 8 arguments.

    An argument is "in0", "in1" or "out" (the current pointer) or an int constant.
    """

    address: int
    args: tuple[int | str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.address, int) or self.address <= 0:
            raise ValueError(f"call address must be a positive int, got {self.address!r}")
        if len(self.args) > 8:
            raise ValueError(f"a call takes at most 8 arguments, got {len(self.args)}")
        for a in self.args:
            if not (a in TENSORS or isinstance(a, int) and -(1 << 63) <= a < 1 << 64):
                raise ValueError(f"call argument must be in0/in1/out or a 64-bit int, got {a!r}")


@dataclass(frozen=True)
class LoopNest:
    """Loops (shared ones first, then seq, outermost first) around first/main/last calls."""

    loops: tuple[Loop, ...]
    main: Call
    first: Call | None = None
    last: Call | None = None

    def __post_init__(self) -> None:
        seen_seq = False
        for i, loop in enumerate(self.loops):
            if loop.shared and seen_seq:
                raise ValueError(f"loop {i}: shared loops must come before all seq loops")
            seen_seq = seen_seq or not loop.shared

    @property
    def shared_loops(self) -> tuple[Loop, ...]:
        return tuple(lp for lp in self.loops if lp.shared)

    @property
    def seq_loops(self) -> tuple[Loop, ...]:
        return tuple(lp for lp in self.loops if not lp.shared)

    @property
    def iterations(self) -> int:
        """Size of the flattened shared iteration space (1 without shared loops)."""
        return math.prod(lp.size for lp in self.shared_loops)
