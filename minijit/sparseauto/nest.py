"""The loop-nest IR of the sparse auto-scheduler (seed 002): branched, multi-level loop nests.

A :class:`Nest` is a sequence of top-level nodes over named operands. Nodes are
:class:`Loop` (a loop over one index, with a body of nodes), :class:`Compute`
(``out[...] += prod(ins[...])``) and :class:`Temp` (a dense temporary declared at that
point of a body, zeroed each time control reaches the declaration).

Loop semantics (for code generation): a loop over index ``i`` walks the compressed level of
the sparse operand(s) whose next unvisited storage level is ``i`` (one such operand: its
positions; two: the intersection of their coordinates; none: the dense range
``0..extent(i)``). Dense accesses to ``i`` index directly. Operand storage order is the order
of :attr:`Operand.indices` (CSF/TACO style); ``levels[k]`` is the format of level ``k``, a
`minijit.sparseauto.formats.LevelFormat` the codegen iterates (``compiled``: `Dense`, a unique
`Compressed`; a name is converted); a loop walks the levels that are not ``full``.
The output is dense unless the expression samples a sparse operand's pattern (SDDMM-like).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Union

from minijit.sparseauto.formats import COMPRESSED, DENSE, LevelFormat, as_format

#: the level formats a nest holds (those the codegen iterates); each equals its name
LEVEL_FORMATS = (DENSE, COMPRESSED)


class PatternError(ValueError):
    """A sparse (sampled) output is written outside the walk of the operand whose pattern it has."""


def cached_hash(self: object) -> int:
    """``hash`` of a frozen dataclass's fields, computed once per object (nests share deep
    sub-trees, which the enumerator and the cost memo hash again and again). The cache lives in
    the instance ``__dict__`` and is left out of pickles (string hashes differ per process)."""
    d = self.__dict__
    h = d.get("_hash")
    if h is None:
        h = d["_hash"] = hash(tuple([d[name] for name in type(self).__dataclass_fields__]))
    return h


def fields_state(self: object) -> dict:
    """The pickle state of a frozen dataclass with cached values: its fields only."""
    return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{what} must be an identifier string, got {name!r}")


def _check_indices(what: str, indices: object) -> None:
    if not isinstance(indices, tuple):
        raise TypeError(f"{what}: indices must be a tuple of index names, got {indices!r}")
    for index in indices:
        _check_name(f"{what}: index", index)
    if len(set(indices)) != len(indices):
        raise ValueError(f"{what}: repeated index in {indices!r} (diagonals are not supported)")


@dataclass(frozen=True)
class Access:
    """A reference ``tensor(indices...)`` inside a :class:`Compute`."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    tensor: str
    indices: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_name("Access tensor", self.tensor)
        _check_indices(f"Access {self.tensor}", self.indices)

    def __str__(self) -> str:
        return f"{self.tensor}({','.join(self.indices)})"


@dataclass(frozen=True)
class Compute:
    """The statement ``out[...] += prod(ins[...])`` at the innermost point of its loops."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    out: Access
    ins: tuple[Access, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.out, Access):
            raise TypeError(f"Compute.out must be an Access, got {self.out!r}")
        if not isinstance(self.ins, tuple) or not self.ins:
            raise TypeError(f"Compute.ins must be a non-empty tuple of Access, got {self.ins!r}")
        for a in self.ins:
            if not isinstance(a, Access):
                raise TypeError(f"Compute.ins holds a non-Access {a!r}")

    @property
    def indices(self) -> frozenset[str]:
        """Every index the statement mentions."""
        return frozenset(self.out.indices).union(*(a.indices for a in self.ins))

    def __str__(self) -> str:
        return f"{self.out} += {'*'.join(str(a) for a in self.ins)}"


@dataclass(frozen=True)
class Temp:
    """A dense temporary ``name<indices>``, zeroed each time its declaration is reached."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    name: str
    indices: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_name("Temp name", self.name)
        _check_indices(f"Temp {self.name}", self.indices)

    def __str__(self) -> str:
        return f"{self.name}<{','.join(self.indices)}> = 0"


@dataclass(frozen=True)
class Loop:
    """A loop over ``index`` around ``body`` (see the module docstring for its iteration space)."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    index: str
    body: tuple[Node, ...]

    def __post_init__(self) -> None:
        _check_name("Loop index", self.index)
        if not isinstance(self.body, tuple) or not self.body:
            raise TypeError(f"Loop {self.index}: body must be a non-empty tuple of nodes")
        for node in self.body:
            if not isinstance(node, (Loop, Compute, Temp)):
                raise TypeError(f"Loop {self.index}: body holds a non-node {node!r}")

    @classmethod
    def built(cls, index: str, body: tuple[Node, ...]) -> Loop:
        """A loop from parts already checked (the schedule enumerator's own nodes): skips the
        type checks of ``__post_init__``; anything else must use ``Loop(index, body)``."""
        loop = object.__new__(cls)
        object.__setattr__(loop, "index", index)
        object.__setattr__(loop, "body", body)
        return loop

    # The per-loop caches below live in the instance __dict__ (functools.cached_property takes a
    # lock on every access in Python 3.11, which costing thousands of schedules notices).

    @property
    def reads(self) -> frozenset[str]:
        """The tensors the statements inside this loop read (computed once per loop)."""
        found = self.__dict__.get("_reads")
        if found is None:
            acc: set[str] = set()
            for node in self.body:
                if isinstance(node, Loop):
                    acc |= node.reads
                elif isinstance(node, Compute):
                    acc.update(a.tensor for a in node.ins)
            found = self.__dict__["_reads"] = frozenset(acc)
        return found

    @property
    def memo(self) -> dict:
        """Scratch space for analyses that memoize per loop (e.g. its cost under given enclosing
        loops); not part of the loop's value (equality, hash, pickles)."""
        found = self.__dict__.get("_memo")
        if found is None:
            found = self.__dict__["_memo"] = {}
        return found

    @property
    def temps(self) -> tuple[Temp, ...]:
        """The temporaries declared inside this loop, in program order (computed once per loop)."""
        found = self.__dict__.get("_temps")
        if found is None:
            found = self.__dict__["_temps"] = _temps(self.body)
        return found


Node = Union[Loop, Compute, Temp]  # noqa: UP007 - a runtime alias usable in isinstance-free hints


@dataclass(frozen=True)
class Operand:
    """A named tensor with its indices in storage order and one level format per index."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    name: str
    indices: tuple[str, ...]
    levels: tuple[LevelFormat, ...]

    def __post_init__(self) -> None:
        _check_name("Operand name", self.name)
        _check_indices(f"Operand {self.name}", self.indices)
        if not isinstance(self.levels, tuple) or len(self.levels) != len(self.indices):
            raise ValueError(
                f"Operand {self.name}: levels {self.levels!r} must be a tuple with one format per "
                f"index of {self.indices!r}"
            )
        levels = tuple(as_format(f, f"Operand {self.name}: level format") for f in self.levels)
        for level in levels:
            if not level.compiled:
                raise ValueError(
                    f"Operand {self.name}: level format {level.name!r} is not one the codegen iterates "
                    f"({', '.join(f.name for f in LEVEL_FORMATS)}); convert the tensor first (convert.to_compiled)"
                )
        object.__setattr__(self, "levels", levels)

    @property
    def sparse(self) -> bool:
        """True when some level is walked (not full)."""
        return any(f.sparse for f in self.levels)

    @classmethod
    def dense(cls, name: str, indices: tuple[str, ...]) -> Operand:
        """An all-dense operand."""
        return cls(name, tuple(indices), (DENSE,) * len(indices))

    def __str__(self) -> str:
        pairs = zip(self.indices, self.levels, strict=True)
        tags = ",".join(f"{i}:{f.tag}" for i, f in pairs)
        return f"{self.name}({tags})"


def _prefix_of(pattern: Operand, output: Operand) -> int:
    """How many leading levels (indices and formats) ``output`` shares with ``pattern`` when
    the rest of ``output`` is dense over indices ``pattern`` does not have and the shared
    levels hold a compressed one; 0 otherwise."""
    if not pattern.sparse:
        return 0
    p = 0
    while p < min(len(pattern.indices), len(output.indices)) and (
        (pattern.indices[p], pattern.levels[p]) == (output.indices[p], output.levels[p])
    ):
        p += 1
    rest = output.indices[p:]
    if (
        not any(f.sparse for f in pattern.levels[:p])
        or any(f.sparse for f in output.levels[p:])
        or set(rest) & set(pattern.indices)
    ):
        return 0
    if p < len(pattern.indices) and pattern.indices[p] in output.indices:
        return 0
    return p


def fibre_output(operands: tuple[Operand, ...], out_indices: tuple[str, ...], name: str) -> Operand | None:
    """An output stored under a sparse operand's fibres: the first sparse operand whose leading
    indices (at least one compressed level among them) are output indices and whose other
    indices are not; the output takes those leading levels, then dense levels over the rest of
    its indices in subscript order. TTM ``ijk,kl->ijl`` on a CSF ``B``: ``A(i:c,j:c,l:d)``,
    one dense row of ``L`` under each (i, j) fibre of ``B``. None when no operand qualifies."""
    for o in operands:
        p = 0
        while p < len(o.indices) and o.indices[p] in out_indices:
            p += 1
        rest = tuple(i for i in out_indices if i not in o.indices[:p])
        out = Operand(name, o.indices[:p] + rest, o.levels[:p] + (DENSE,) * len(rest))
        if _prefix_of(o, out):  # the one rule `Nest.pattern` samples by
            return out
    return None


def _temps(nodes: tuple[Node, ...]) -> tuple[Temp, ...]:
    found: list[Temp] = []
    for node in nodes:
        if isinstance(node, Temp):
            found.append(node)
        elif isinstance(node, Loop):
            found.extend(node.temps)
    return tuple(found)


def _walk(nodes: tuple[Node, ...]):
    for node in nodes:
        yield node
        if isinstance(node, Loop):
            yield from _walk(node.body)


@dataclass(frozen=True)
class Nest:
    """A branched multi-level loop nest computing ``output`` from ``operands``."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    operands: tuple[Operand, ...]
    output: Operand
    body: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.operands, tuple) or not all(isinstance(o, Operand) for o in self.operands):
            raise TypeError("Nest.operands must be a tuple of Operand")
        if not isinstance(self.output, Operand):
            raise TypeError(f"Nest.output must be an Operand, got {self.output!r}")
        if not isinstance(self.body, tuple) or not self.body:
            raise TypeError("Nest.body must be a non-empty tuple of nodes")
        for node in self.body:
            if not isinstance(node, (Loop, Compute, Temp)):
                raise TypeError(f"Nest.body holds a non-node {node!r}")

    @property
    def temps(self) -> tuple[Temp, ...]:
        """Every temporary declared in the nest, in program order."""
        return _temps(self.body)

    @property
    def computes(self) -> tuple[Compute, ...]:
        """Every statement of the nest, in program order."""
        return tuple(n for n in _walk(self.body) if isinstance(n, Compute))

    def operand(self, name: str) -> Operand:
        """The input operand called ``name`` (KeyError when there is none)."""
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(name)

    def validate(self) -> Nest:
        """Check the nest is well formed and legal; return it. Raises ValueError naming the fault.

        Checks: unique tensor names; every access matches its tensor's declared indices and is
        bound by enclosing loops; no loop rebinds an index; every enclosing loop index occurs in
        each statement below it (``+=`` would otherwise repeat); each sparse operand's indices
        are nested in its storage order; temporaries are declared over unbound indices, written
        before they are read and not written after being read; every input is read and the
        output written.
        """
        names = [o.name for o in self.operands] + [self.output.name]
        temps = self.temps
        names += [t.name for t in temps]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"Nest: tensor name {n!r} is used twice")
        known = {o.name: o.indices for o in self.operands}
        for idx in self.output.indices:
            if not any(idx in o.indices for o in self.operands):
                raise ValueError(f"Nest: output index {idx!r} occurs in no input operand")
        extent_known = {i for o in self.operands for i in o.indices}
        for t in temps:
            for idx in t.indices:
                if idx not in extent_known:
                    raise ValueError(f"Nest: temporary {t.name} index {idx!r} has no extent")
        read: set[str] = set()
        state: dict[str, str] = {}  # temporary -> "declared" | "written" | "read"
        outer: dict[str, tuple[str, ...]] = {}  # temporary -> loops around its declaration
        self._check_body(self.body, (), {}, known, read, state, outer)
        for o in self.operands:
            if o.name not in read:
                raise ValueError(f"Nest: operand {o.name} is never read")
        if state.get(self.output.name) != "written":
            raise ValueError(f"Nest: output {self.output.name} is never written")
        self.check_pattern()
        return self

    def check_pattern(self) -> None:
        """Raise :class:`PatternError` when a sparse output is written outside the walk of the
        input whose pattern it samples (a no-op for a dense output)."""
        if self.output.sparse:
            self._check_pattern(self.body, (), self.pattern())

    def pattern(self) -> Operand | None:
        """The input whose pattern a sparse output samples, else None: an input with the same
        indices and levels (SDDMM-like), or one whose leading levels are the output's leading
        levels, the output's other levels being dense over indices that input does not have (a
        fibre output, `fibre_output`). See `pattern_levels`.

        Raises ValueError when the output has a compressed level but no input matches it.
        """
        if not self.output.sparse:
            return None
        for o in self.operands:
            if _prefix_of(o, self.output):
                return o
        raise ValueError(
            f"Nest: output {self.output} has compressed levels but no input has the same indices and levels to "
            "sample (nor the same leading ones, the rest dense over indices it lacks: a fibre output)"
        )

    def pattern_levels(self) -> int:
        """How many leading levels a sparse output shares with `pattern` (all of them when it is
        SDDMM-like); its other levels are dense. 0 for a dense output."""
        pattern = self.pattern()
        return 0 if pattern is None else _prefix_of(pattern, self.output)

    def _check_pattern(self, body: tuple[Node, ...], loops: tuple[Loop, ...], pattern: Operand) -> None:
        shared = self.output.indices[: _prefix_of(pattern, self.output)]
        for node in body:
            if isinstance(node, Loop):
                self._check_pattern(node.body, (*loops, node), pattern)
            elif isinstance(node, Compute) and node.out.tensor == self.output.name:
                for loop in loops:
                    k = pattern.indices.index(loop.index) if loop.index in shared else -1
                    if k >= 0 and pattern.levels[k].sparse and pattern not in self.walks(loop):
                        raise PatternError(
                            f"Nest: sparse output {self.output.name} is written by {node} under a "
                            f"loop over {loop.index!r} that does not walk {pattern.name}"
                        )

    def _check_body(
        self,
        body: tuple[Node, ...],
        bound: tuple[str, ...],
        scope: dict[str, tuple[str, ...]],
        known: dict[str, tuple[str, ...]],
        read: set[str],
        state: dict[str, str],
        outer: dict[str, tuple[str, ...]],
    ) -> None:
        scope = dict(scope)
        for node in body:
            if isinstance(node, Temp):
                for idx in node.indices:
                    if idx in bound:
                        raise ValueError(
                            f"Nest: temporary {node.name} is declared inside the loop over its own index {idx!r}"
                        )
                scope[node.name] = node.indices
                outer[node.name] = bound
                state[node.name] = "declared"
            elif isinstance(node, Loop):
                if node.index in bound:
                    raise ValueError(f"Nest: loop over {node.index!r} nested in a loop over it")
                if node.index not in {i for o in self.operands for i in o.indices}:
                    raise ValueError(f"Nest: loop index {node.index!r} occurs in no operand")
                if not any(isinstance(c, Compute) for c in _walk(node.body)):
                    raise ValueError(f"Nest: loop over {node.index!r} contains no statement")
                self._check_body(node.body, (*bound, node.index), scope, known, read, state, outer)
            else:
                self._check_compute(node, bound, scope, known, read, state, outer)

    def _check_compute(
        self,
        c: Compute,
        bound: tuple[str, ...],
        scope: dict[str, tuple[str, ...]],
        known: dict[str, tuple[str, ...]],
        read: set[str],
        state: dict[str, str],
        outer: dict[str, tuple[str, ...]],
    ) -> None:
        # A temporary declared inside loops is implicitly indexed by them as well.
        implicit = {i for a in (c.out, *c.ins) if a.tensor in scope for i in outer[a.tensor]}
        factors = {i for a in c.ins for i in a.indices}
        factors |= {i for a in c.ins if a.tensor in scope for i in outer[a.tensor]}
        for idx in bound:
            if idx not in c.indices and idx not in implicit:
                raise ValueError(f"Nest: statement {c} sits inside the loop over {idx!r} but does not use it")
        for a in (c.out, *c.ins):
            for idx in a.indices:
                if idx not in bound:
                    raise ValueError(f"Nest: index {idx!r} of {a} is not bound by a loop")
        out = c.out
        if out.tensor == self.output.name:
            if out.indices != self.output.indices:
                raise ValueError(f"Nest: {out} does not match output indices {self.output.indices!r}")
        elif out.tensor in scope:
            if out.indices != scope[out.tensor]:
                raise ValueError(f"Nest: {out} does not match its declaration {scope[out.tensor]!r}")
            if state[out.tensor] == "read":
                raise ValueError(f"Nest: temporary {out.tensor} is written after it was read")
        else:
            raise ValueError(f"Nest: {out} writes neither the output nor a declared temporary")
        state[out.tensor] = "written"
        for a in c.ins:
            if a.tensor in known:
                decl = known[a.tensor]
            elif a.tensor in scope:
                decl = scope[a.tensor]
                if state[a.tensor] == "declared":
                    raise ValueError(f"Nest: temporary {a.tensor} is read before it is written")
                state[a.tensor] = "read"
            else:
                raise ValueError(f"Nest: {a} reads an unknown or out-of-scope tensor")
            if a.indices != decl:
                raise ValueError(f"Nest: {a} does not match declared indices {decl!r}")
            read.add(a.tensor)
            if a.tensor in known:
                op = self.operand(a.tensor)
                if op.sparse:
                    pos = [bound.index(i) for i in op.indices]
                    if pos != sorted(pos):
                        raise ValueError(
                            f"Nest: sparse operand {op.name} stores {op.indices!r} in that order "
                            f"but the loops nest them as "
                            f"{tuple(sorted(op.indices, key=bound.index))!r}"
                        )
        for idx in c.out.indices:
            if idx not in factors:
                raise ValueError(f"Nest: statement {c}: output index {idx!r} occurs in no factor")

    def __str__(self) -> str:
        lines = [
            f"# {self.output} = " + " * ".join(str(o) for o in self.operands),
        ]
        self._lines(self.body, 0, lines)
        return "\n".join(lines)

    def walks(self, loop: Loop) -> tuple[Operand, ...]:
        """The sparse operands whose compressed level for ``loop.index`` that loop walks.

        Empty: the loop runs over the dense range; one: over that operand's positions; two or
        more: over the intersection of their coordinates.
        """
        names = loop.reads
        return tuple(
            o
            for o in self.operands
            if o.name in names and loop.index in o.indices and o.levels[o.indices.index(loop.index)].sparse
        )

    def _lines(self, body: tuple[Node, ...], depth: int, lines: list[str]) -> None:
        pad = "  " * depth
        for node in body:
            if isinstance(node, Loop):
                pos = "_pos" if self.walks(node) else ""
                lines.append(f"{pad}for {node.index}{pos}:")
                self._lines(node.body, depth + 1, lines)
            else:
                lines.append(f"{pad}{node}")
