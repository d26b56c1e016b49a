"""ISA-independent description of a compiled loop nest (docs/decisions.md, "The loop nest is
compiled too").

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
from typing import Any, Protocol

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


class SeqEmitter(Protocol):
    """What an ISA emitter provides for `emit_seq_loops` (counter ``i`` is seq loop ``i``)."""

    def here(self, name: str) -> Any:
        """Create a label bound at the current position."""

    def new_label(self, name: str) -> Any:
        """Create an unbound label."""

    def bind(self, label: Any) -> None:
        """Bind a label created by `new_label`."""

    def counter_init(self, i: int, size: int) -> None:
        """Set counter ``i`` to ``size``."""

    def counter_loop(self, i: int, body: Any) -> None:
        """Decrement counter ``i``; branch to ``body`` unless it reached zero."""

    def skip_unless_counter(self, i: int, value: int, skip: Any) -> None:
        """Branch to ``skip`` unless counter ``i`` equals ``value``."""

    def advance(self, strides: tuple[int, int, int]) -> None:
        """Add byte offsets to the in0/in1/out pointers."""

    def call(self, call: Call) -> None:
        """Call a kernel with the current pointers and constants."""


def emit_seq_loops(plan: LoopNest, e: SeqEmitter) -> None:
    """Emit the seq loops (counting down from size to 1) around the first/main/last calls.

    The first touch runs when every seq K counter is at its first iteration
    (== size), the last touch when every one is at its last (== 1). Pointers
    are rewound after each loop, so each level leaves them where it found them.
    """
    seq = plan.seq_loops
    k_slots = [i for i, lp in enumerate(seq) if lp.k]

    def touch(which: str, call: Call) -> None:
        skip = e.new_label(f"skip_{which}")
        for i in k_slots:
            e.skip_unless_counter(i, seq[i].size if which == "first" else 1, skip)
        e.call(call)
        e.bind(skip)

    def level(i: int) -> None:
        if i == len(seq):  # innermost: first touch, main, last touch
            if plan.first:
                touch("first", plan.first)
            e.call(plan.main)
            if plan.last:
                touch("last", plan.last)
            return
        loop = seq[i]
        e.counter_init(i, loop.size)
        body = e.here(f"seq{i}")
        level(i + 1)
        e.advance(loop.strides)
        e.counter_loop(i, body)
        e.advance(tuple(-s * loop.size for s in loop.strides))

    level(0)
