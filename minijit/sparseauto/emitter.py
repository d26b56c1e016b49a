"""What the sparse-nest compilers (`codegen` for x86-64, `codegen_aarch64`) share: the layout of the
``args`` block, the compiled `Program`, and `NestEmitter`, the target-independent analysis of a
nest (which loop threads split, which sparse levels a loop enters, how an innermost loop can be
vectorized) and the dispatch of a loop by the levels it walks. See `codegen` for the ABI.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Node, Operand

__all__ = ["ArgSlot", "NestEmitter", "Program", "arg_slots", "c_strides", "dense_size", "sampled_operand", "walk_nodes"]


@dataclass(frozen=True)
class ArgSlot:
    """One entry of the ``args`` block: the address of ``tensor``'s ``part`` ("pos", "crd",
    "vals", "data", "temp") of storage ``level`` (compressed parts only), or for "size" the
    number of entries of that level's ``crd`` (an integer, not an address)."""

    tensor: str
    part: str
    level: int | None = None


def sampled_operand(nest: Nest) -> Operand | None:
    """The sparse operand whose pattern a sparse output samples (SDDMM-like: same indices and
    levels), None for a dense output. ValueError when no operand matches, or when the output is
    written outside the walk of that operand's compressed levels (`Nest.check_pattern`)."""
    pattern = nest.pattern()
    nest.check_pattern()
    return pattern


def arg_slots(nest: Nest) -> tuple[ArgSlot, ...]:
    """The layout of the ``args`` block (see the module docstring)."""
    slots: list[ArgSlot] = []
    for o in nest.operands:
        if o.sparse:
            for k, fmt in enumerate(o.levels):  # the format names its parts: pos, crd, size of a walked level
                slots += [ArgSlot(o.name, part, k) for part in fmt.slots]
            slots.append(ArgSlot(o.name, "vals"))
        else:
            slots.append(ArgSlot(o.name, "data"))
    slots.append(ArgSlot(nest.output.name, "vals" if sampled_operand(nest) else "data"))
    slots += [ArgSlot(t.name, "temp") for t in nest.temps]
    return tuple(slots)


@dataclass(frozen=True)
class Program:
    """A compiled nest: the assembler (code and listing), the ``args`` layout, temporary sizes
    (elements), and the split of the top loop (None, ``("dense", extent)`` or
    ``("walk", operand name)``: its level-0 positions)."""

    asm: Any  # the target's assembler: code and listing
    slots: tuple[ArgSlot, ...]
    temp_sizes: dict[str, int]
    split: tuple[str, object] | None
    vectorized: tuple[str, ...]


def walk_nodes(nodes: tuple[Node, ...]) -> Iterator[Node]:
    """Every node of ``nodes`` and below, in program order."""
    for n in nodes:
        yield n
        if isinstance(n, Loop):
            yield from walk_nodes(n.body)


def dense_size(extents: dict[str, int], indices: tuple[str, ...]) -> int:
    """Elements of a dense tensor over ``indices``."""
    n = 1
    for i in indices:
        n *= extents[i]
    return n


def c_strides(extents: dict[str, int], indices: tuple[str, ...]) -> dict[str, int]:
    """C-order element strides of a dense tensor over ``indices``."""
    out, s = {}, 1
    for i in reversed(indices):
        out[i] = s
        s *= extents[i]
    return out


class NestEmitter:
    """The target-independent part of an emitter. A subclass sets `MAX_VEC_STATEMENTS` and
    `POINTER_REGS` (its vectorized loop's register budget), calls `_analyse`, and provides
    ``_dense_loop``, ``_walk_loop`` and ``_merge_loop``."""

    MAX_VEC_STATEMENTS: int
    POINTER_REGS: int

    def _analyse(self, nest: Nest, extents: dict[str, int]) -> None:
        """The facts about ``nest`` at ``extents`` every stage reads (no code emitted)."""
        self.nest, self.ext = nest, extents
        self.slots = arg_slots(nest)
        self.arg = {(s.tensor, s.part, s.level): i for i, s in enumerate(self.slots)}
        self.sparse = {o.name: o for o in nest.operands if o.sparse}
        self.sampled = sampled_operand(nest)
        dense_like = [o for o in nest.operands if not o.sparse] + list(nest.temps)
        if self.sampled is None:
            dense_like.append(nest.output)
        self.strides = {x.name: c_strides(extents, x.indices) for x in dense_like}
        #: a sparse output: the level of `sampled` whose positions it is stored at, and the
        #: elements under each position (its dense trailing levels, C-ordered: `strides`)
        self.out_row: tuple[int, int] | None = None
        if self.sampled is not None:
            shared = nest.pattern_levels()
            rest = nest.output.indices[shared:]
            self.out_row = (shared - 1, dense_size(extents, rest))
            if self.out_row[1] > 2**31 - 1:
                raise ValueError(f"sparse output {nest.output}: a dense row of 2**31 elements or more is not supported")
            if rest:
                self.strides[nest.output.name] = c_strides(extents, rest)
        self.temp_sizes = {t.name: dense_size(extents, t.indices) for t in nest.temps}
        self.loops = [n for n in walk_nodes(nest.body) if isinstance(n, Loop)]
        self.loop_id = {id(lp): n for n, lp in enumerate(self.loops)}
        self.vectorized: list[str] = []

    def _split(self) -> tuple[str, object] | None:
        """Can threads split the top loop? Only the last top-level node, a loop over an output
        index, dense or walking one operand's first level. The nodes before it (a top-level
        temporary and the loops that fill it, as the TTM chain's ``T<k,m> = C*D``) may write only
        temporaries: each thread runs them on its own temporaries, then its range of the loop."""
        *prefix, last = self.nest.body
        if not isinstance(last, Loop) or last.index not in self.nest.output.indices:
            return None
        if any(c.out.tensor == self.nest.output.name for c in walk_nodes(tuple(prefix)) if isinstance(c, Compute)):
            return None
        walked = self.nest.walks(last)
        if not walked:
            return ("dense", self.ext[last.index])
        if len(walked) == 1:
            return ("walk", walked[0].name)
        return None

    def _split_here(self, node: Node, top: bool) -> bool:
        """Is ``node`` the loop whose iterations ``[begin, end)`` select (see `_split`)?"""
        return top and self.split is not None and node is self.nest.body[-1]

    def _dense_levels(self, loop: Loop) -> list[tuple[Operand, int]]:
        """Sparse operands read below ``loop`` (and the pattern of a sparse output written below
        it) whose dense level is the loop's index."""
        below = [c for c in walk_nodes(loop.body) if isinstance(c, Compute)]
        read = {a.tensor for c in below for a in c.ins}
        if self.sampled is not None and any(c.out.tensor == self.nest.output.name for c in below):
            read.add(self.sampled.name)
        out = []
        for o in self.sparse.values():
            if o.name in read and loop.index in o.indices:
                k = o.indices.index(loop.index)
                if o.levels[k].full:
                    out.append((o, k))
        return out

    def _loop(self, loop: Loop, split: bool) -> None:
        walked = self.nest.walks(loop)
        if not walked:
            self._dense_loop(loop, split)
        elif len(walked) == 1:
            self._walk_loop(loop, walked[0], split)
        elif len(walked) == 2:
            self._merge_loop(loop, walked[0], walked[1])
        else:
            names = ", ".join(o.name for o in walked)
            raise ValueError(
                f"loop over {loop.index!r} co-iterates {len(walked)} compressed levels ({names}); at most 2"
            )

    def _contiguous(self, acc: Access, j: str) -> bool:
        """``acc`` is a dense tensor (operand, dense output or temporary), or a sparse output's
        dense trailing levels, with ``j`` last."""
        return j in self.strides.get(acc.tensor, ()) and acc.indices[-1:] == (j,)

    def _inner_kind(self, loop: Loop) -> str | None:
        """How an innermost dense loop over j compiles: "vector" (every access using j is dense
        with j last), "strided" (dense, any stride: scalar with pointer increments), or None
        (the general scalar path)."""
        j = loop.index
        if self.nest.walks(loop) or not all(isinstance(n, Compute) for n in loop.body):
            return None
        stmts: tuple[Compute, ...] = loop.body  # type: ignore[assignment]
        if len(stmts) > self.MAX_VEC_STATEMENTS:
            return None
        written = {c.out.tensor for c in stmts}
        pointers, contiguous = 0, True
        for c in stmts:
            uses = [x for x in (*c.ins, c.out) if j in x.indices]
            if any(j not in self.strides.get(x.tensor, ()) for x in uses):
                return None  # a sparse access or a sparse output's shared level uses j
            if any(x.tensor in written for x in c.ins if j not in x.indices):
                return None  # a broadcast factor this loop writes: keep the scalar order
            if not any(j in x.indices for x in c.ins):
                return None  # out[j] += s or out += s, extent times: rare, stays scalar
            contiguous &= all(self._contiguous(x, j) for x in uses)
            pointers += len(uses)
        if pointers > self.POINTER_REGS:
            return None
        return "vector" if contiguous else "strided"
