"""Level formats of sparse storage as objects (TACO's mode formats), one class per format.

A `SparseTensor` stores ``ndim`` levels; each level's format is one of these objects. A format
knows three things, so no other module compares format names:

* its **iteration**: how a level's positions and coordinates are walked under the positions of
  the level above (``parents`` of them): `iterate` (every position's parent and coordinate, in
  numpy), `positions` (how many), `carry` (position bounds carried down one level);
* its **assembly**: how its arrays are built from coordinates sorted in storage order
  (`assemble`), and how given arrays are checked (`check`);
* its **capabilities** (`Capabilities`): full (every coordinate stored), ordered, unique,
  locate (random access by coordinate), branchless (one position per parent position),
  compiled (the loop-nest codegen iterates it directly) and the argument slots it passes to
  generated code (`slots`).

The formats:

========================  ==========================================================  =====================
format                    positions under parent position ``q``                     arrays
========================  ==========================================================  =====================
`Dense` (n)               ``q * n + c`` for every coordinate ``c`` in ``0..n-1``    none
`Compressed` (n)          ``pos[q] .. pos[q+1]-1``, coordinate ``crd[p]``           ``pos``, ``crd``
`Singleton` (n)           exactly ``q``, coordinate ``crd[q]``                      ``crd``
`Blocked` (n, block b)    ``pos[q]*b .. pos[q+1]*b-1``: stored block ``s`` holds    ``pos``, ``crd``
                          coordinates ``crd[s]*b + t``, ``t`` in ``0..b-1``
========================  ==========================================================  =====================

``Compressed(unique=False)`` allows a coordinate twice under one parent: COO is
``(Compressed(unique=False), Singleton(), ...)``. `Blocked` is the blocked-row level: a matrix
``(Dense, Blocked(b))`` stores each row as aligned blocks of ``b`` columns, every value of a
stored block kept (explicit zeros), i.e. BCSR with ``1 x b`` blocks; block coordinates past the
mode's size (the last block of a size that ``b`` does not divide) are padding, never a stored
coordinate. Formats the codegen cannot iterate (``compiled`` false) are converted to the
`lowered` format (CSF-like: dense and unique compressed levels) before planning
(`minijit.sparseauto.convert.to_compiled`).

A format object compares equal to its `name` string (``Dense() == "dense"``), so code and data
written when formats were strings keep working; new code asks the object.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import ClassVar

import numpy as np

__all__ = [
    "COMPRESSED",
    "DENSE",
    "SINGLETON",
    "Assembled",
    "Blocked",
    "Capabilities",
    "Compressed",
    "Dense",
    "LevelFormat",
    "Singleton",
    "as_format",
    "check_chain",
    "format_names",
    "is_scipy_compressed",
]

INDEX_MAX = 2**31 - 1  # coordinates, positions and level sizes must fit int32


@dataclass(frozen=True)
class Capabilities:
    """What a level format offers the planner and the codegen (TACO's level properties)."""

    full: bool  # every coordinate of the mode is stored under every parent position
    ordered: bool  # coordinates increase along a parent's positions
    unique: bool  # no coordinate twice under one parent position
    locate: bool  # the position of coordinate c under parent q is computed in O(1)
    branchless: bool  # exactly one position per parent position
    compiled: bool  # the loop-nest codegen iterates this level directly


@dataclass(frozen=True)
class Assembled:
    """A level built by `LevelFormat.assemble`: its arrays (None where the format has none), each
    entry's position in it (int64, one per entry) and its number of positions."""

    pos: np.ndarray | None
    crd: np.ndarray | None
    position: np.ndarray
    positions: int


def _index(name: str, x: object) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{name} must be an integer array, got {arr.dtype}")
    return arr.astype(np.int64)


def _frozen32(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    out = []
    for a in arrays:
        b = a.astype(np.int32)  # a copy: checked values stay so
        b.flags.writeable = False
        out.append(b)
    return tuple(out)


def _check_pos(k: int, pos: np.ndarray, parents: int, entries: int) -> None:
    if pos.shape[0] != parents + 1:
        raise ValueError(f"level {k} pos has length {pos.shape[0]}, expected parent positions + 1 = {parents + 1}")
    if pos[0] != 0:
        raise ValueError(f"level {k} pos[0] must be 0, got {pos[0]}")
    step = np.diff(pos)
    if (step < 0).any():
        q = int(np.argmax(step < 0))
        raise ValueError(f"level {k} pos is not monotone: pos[{q + 1}] = {pos[q + 1]} < pos[{q}] = {pos[q]}")
    if pos[-1] != entries:
        raise ValueError(f"level {k}: pos[-1] = {pos[-1]} but crd has {entries} entries")


def _check_range(k: int, crd: np.ndarray, bound: int, what: str = "size") -> None:
    if crd.size and (int(crd.min()) < 0 or int(crd.max()) >= bound):
        j = int(np.argmax((crd < 0) | (crd >= bound)))
        raise ValueError(f"level {k} crd[{j}] = {crd[j]} is out of range for {what} {bound}")


def first_unsorted(pos: np.ndarray, crd: np.ndarray, strict: bool = True) -> int | None:
    """The first ``j`` where ``crd[j + 1] <= crd[j]`` (``<`` when not ``strict``) inside one fibre
    (``pos`` delimits the fibres; both 1-D integer arrays, ``pos`` non-decreasing from 0 to
    ``len(crd)``), or None when every fibre is increasing."""
    if crd.shape[0] < 2:
        return None
    step = np.diff(crd)
    down = step <= 0 if strict else step < 0
    starts = pos[1:-1]  # a fibre's first entry may be below the previous fibre's last
    starts = starts[(starts > 0) & (starts < crd.shape[0])]
    down[starts - 1] = False
    if not down.any():
        return None
    return int(np.argmax(down))


def _check_sorted(k: int, pos: np.ndarray, crd: np.ndarray, unique: bool) -> None:
    j = first_unsorted(pos, crd, strict=unique)
    if j is not None:
        order = "strictly increasing" if unique else "non-decreasing"
        raise ValueError(
            f"level {k} crd is not {order} within a fibre: crd[{j}] = {crd[j]}, crd[{j + 1}] = {crd[j + 1]}"
            + (" (sorted, no duplicates)" if unique else " (sorted)")
        )


@dataclass(frozen=True, eq=False)
class LevelFormat:
    """One level format (abstract). Subclasses set `name`, `tag`, `iteration`, `capabilities`
    and implement `check`, `positions`, `iterate`, `carry`, `assemble`."""

    #: the arrays the level stores, by name ("pos", "crd")
    arrays: ClassVar[tuple[str, ...]] = ()
    #: how the level is walked: "range" (dense), "segment" (pos/crd), "parent" (crd of the
    #: parent's position), "blocks" (pos/crd of blocks of coordinates)
    iteration: ClassVar[str] = ""
    #: the one-letter tag of nest listings
    tag: ClassVar[str] = "?"

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    # the capabilities the planner and the codegen ask most, by name (computed once per object)
    @cached_property
    def full(self) -> bool:
        """Every coordinate stored: the level is indexed, never walked."""
        return self.capabilities.full

    @cached_property
    def sparse(self) -> bool:
        """Not full: a loop over this level's mode walks its stored coordinates."""
        return not self.capabilities.full

    @cached_property
    def compiled(self) -> bool:
        """The loop-nest codegen iterates this level directly."""
        return self.capabilities.compiled

    @cached_property
    def slots(self) -> tuple[str, ...]:
        """The parts of the generated code's argument block for this level (compiled formats):
        ``("pos", "crd", "size")`` for a walked level, none for a dense one."""
        return ("pos", "crd", "size") if self.compiled and self.sparse else ()

    @property
    def pads(self) -> bool:
        """Iteration may yield coordinates past the mode's size (padding, never stored ones)."""
        return False

    @property
    def segmented(self) -> bool:
        """The positions under parent ``q`` are ``pos[q] .. pos[q+1]-1`` with coordinates ``crd``
        (what a CSR row kernel walks; repeated coordinates are summed by it)."""
        return False

    def lowered(self) -> LevelFormat:
        """The compiled format with the same coordinates (itself when compiled)."""
        return self

    # ------------------------------------------------------------------ protocol

    def check(
        self, k: int, size: int, pos: object, crd: object, parents: int
    ) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        """Validated ``(pos, crd, positions)`` of level ``k`` (read-only int32 copies, None where
        the format has no such array) under ``parents`` parent positions; ValueError/TypeError
        naming the level and array otherwise."""
        raise NotImplementedError

    def positions(self, size: int, pos: np.ndarray | None, crd: np.ndarray | None, parents: int) -> int:
        """How many positions the level has under ``parents`` parent positions."""
        raise NotImplementedError

    def iterate(
        self, size: int, pos: np.ndarray | None, crd: np.ndarray | None, parents: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(parent, coordinate)`` of every position of the level, in position order (int64)."""
        raise NotImplementedError

    def carry(self, size: int, pos: np.ndarray | None, bounds: np.ndarray) -> np.ndarray:
        """Position bounds of the level above carried down to this level's positions (int64)."""
        raise NotImplementedError

    def assemble(self, coords: np.ndarray, parent: np.ndarray, parents: int, size: int) -> Assembled:
        """The level over entries with coordinates ``coords`` (int64, this level's mode) whose
        positions in the level above are ``parent`` (``parents`` of them), the entries sorted by
        (parent, coordinate) and distinct over all levels."""
        raise NotImplementedError

    # ------------------------------------------------------------------ identity

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):  # formats were strings once: "dense" == Dense()
            return other == self.name
        return type(other) is type(self) and all(getattr(other, f.name) == getattr(self, f.name) for f in fields(self))

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name


def _segments(pos: np.ndarray, parents: int) -> np.ndarray:
    return np.repeat(np.arange(parents, dtype=np.int64), np.diff(pos))


def _fibre_starts(parent: np.ndarray, key: np.ndarray | None) -> np.ndarray:
    """Indices of the entries that start a new (parent, key) group (entries sorted)."""
    new = np.ones(parent.shape[0], bool)
    if parent.shape[0]:
        diff = parent[1:] != parent[:-1]
        if key is not None:
            diff |= key[1:] != key[:-1]
        new[1:] = diff
    return new


def _pos_of(parent_of_item: np.ndarray, parents: int) -> np.ndarray:
    counts = np.bincount(parent_of_item, minlength=parents) if parents else np.zeros(0, np.int64)
    pos = np.zeros(parents + 1, np.int64)
    np.cumsum(counts, out=pos[1:])
    return pos


@dataclass(frozen=True, eq=False)
class Dense(LevelFormat):
    """Every coordinate ``0..n-1`` under every parent position; position ``q * n + c``."""

    iteration: ClassVar[str] = "range"
    tag: ClassVar[str] = "d"

    @property
    def name(self) -> str:
        return "dense"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(full=True, ordered=True, unique=True, locate=True, branchless=False, compiled=True)

    def check(self, k, size, pos, crd, parents):  # noqa: ANN001, ANN201 - see LevelFormat
        return None, None, parents * size

    def positions(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return parents * size

    def iterate(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        p = np.arange(parents * size, dtype=np.int64)
        return p // max(size, 1), p % max(size, 1)

    def carry(self, size, pos, bounds):  # noqa: ANN001, ANN201
        return bounds * size

    def assemble(self, coords, parent, parents, size):  # noqa: ANN001, ANN201
        return Assembled(None, None, parent * size + coords, parents * size)


@dataclass(frozen=True, eq=False)
class Compressed(LevelFormat):
    """``pos`` (one entry per parent position plus one) and ``crd``: the coordinates under parent
    ``q`` are ``crd[pos[q]:pos[q+1]]``, increasing (strictly when ``unique``)."""

    unique: bool = True
    arrays: ClassVar[tuple[str, ...]] = ("pos", "crd")
    iteration: ClassVar[str] = "segment"
    tag: ClassVar[str] = "c"

    def __post_init__(self) -> None:
        if not isinstance(self.unique, bool):
            raise TypeError(f"Compressed: unique must be True or False, got {self.unique!r}")

    @property
    def name(self) -> str:
        return "compressed" if self.unique else "compressed_nonunique"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            full=False, ordered=True, unique=self.unique, locate=False, branchless=False, compiled=self.unique
        )

    @property
    def segmented(self) -> bool:
        return True

    def lowered(self) -> LevelFormat:
        return self if self.unique else Compressed()

    def check(self, k, size, pos, crd, parents):  # noqa: ANN001, ANN201
        if pos is None or crd is None:
            raise ValueError(f"level {k} is {self.name} but lacks pos or crd")
        p, c = _index(f"level {k} pos", pos), _index(f"level {k} crd", crd)
        _check_pos(k, p, parents, c.shape[0])
        _check_range(k, c, size)
        _check_sorted(k, p, c, self.unique)
        p32, c32 = _frozen32(p, c)
        return p32, c32, int(c.shape[0])

    def positions(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return int(crd.shape[0])

    def iterate(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return _segments(pos, parents), crd.astype(np.int64)

    def carry(self, size, pos, bounds):  # noqa: ANN001, ANN201
        return pos[bounds].astype(np.int64)

    def assemble(self, coords, parent, parents, size):  # noqa: ANN001, ANN201
        # unique: one position per (parent, coordinate); non-unique: one per entry
        new = _fibre_starts(parent, coords) if self.unique else np.ones(parent.shape[0], bool)
        first = new.nonzero()[0]
        pos = _pos_of(parent[first], parents)
        return Assembled(pos, coords[first], np.cumsum(new) - 1, int(first.shape[0]))


@dataclass(frozen=True, eq=False)
class Singleton(LevelFormat):
    """One coordinate per parent position: position ``q``'s coordinate is ``crd[q]`` (COO's
    lower levels, under a non-unique compressed or another singleton level)."""

    arrays: ClassVar[tuple[str, ...]] = ("crd",)
    iteration: ClassVar[str] = "parent"
    tag: ClassVar[str] = "s"

    @property
    def name(self) -> str:
        return "singleton"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(full=False, ordered=True, unique=True, locate=False, branchless=True, compiled=False)

    def lowered(self) -> LevelFormat:
        return Compressed()

    def check(self, k, size, pos, crd, parents):  # noqa: ANN001, ANN201
        if crd is None:
            raise ValueError(f"level {k} is singleton but lacks crd")
        if pos is not None:
            raise ValueError(f"level {k} is singleton: it has no pos")
        c = _index(f"level {k} crd", crd)
        if c.shape[0] != parents:
            raise ValueError(f"level {k} crd has {c.shape[0]} entries, a singleton level one per parent ({parents})")
        _check_range(k, c, size)
        (c32,) = _frozen32(c)
        return None, c32, parents

    def positions(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return parents

    def iterate(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return np.arange(parents, dtype=np.int64), crd.astype(np.int64)

    def carry(self, size, pos, bounds):  # noqa: ANN001, ANN201
        return bounds

    def assemble(self, coords, parent, parents, size):  # noqa: ANN001, ANN201
        if parent.shape[0] != parents or (parents and (np.diff(parent) != 1).any()):
            raise ValueError(
                "a singleton level needs one entry per position of the level above (a non-unique compressed "
                "or singleton level there)"
            )
        return Assembled(None, coords, parent.copy(), parents)


@dataclass(frozen=True, eq=False)
class Blocked(LevelFormat):
    """The blocked-row level: ``pos``/``crd`` over aligned blocks of ``block`` coordinates; stored
    block ``s`` (coordinates ``crd[s]*block .. +block-1``) has positions ``s*block + t``, every
    value of the block kept (explicit zeros). Coordinates ``>= size`` (padding of the last block)
    are never stored coordinates."""

    block: int = 4
    arrays: ClassVar[tuple[str, ...]] = ("pos", "crd")
    iteration: ClassVar[str] = "blocks"
    tag: ClassVar[str] = "b"

    def __post_init__(self) -> None:
        if isinstance(self.block, bool) or not isinstance(self.block, int | np.integer):
            raise TypeError(f"Blocked: block must be an int, got {self.block!r}")
        if not 1 <= int(self.block) <= 4096:
            raise ValueError(f"Blocked: block must be in 1..4096 (coordinates per block), got {self.block}")

    @property
    def name(self) -> str:
        return f"blocked{int(self.block)}"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(full=False, ordered=True, unique=True, locate=False, branchless=False, compiled=False)

    @property
    def pads(self) -> bool:
        return True

    def lowered(self) -> LevelFormat:
        return Compressed()

    def _blocks(self, size: int) -> int:
        return -(-size // self.block)

    def check(self, k, size, pos, crd, parents):  # noqa: ANN001, ANN201
        if pos is None or crd is None:
            raise ValueError(f"level {k} is {self.name} but lacks pos or crd")
        p, c = _index(f"level {k} pos", pos), _index(f"level {k} crd", crd)
        _check_pos(k, p, parents, c.shape[0])
        _check_range(k, c, self._blocks(size), "block count")
        _check_sorted(k, p, c, True)
        p32, c32 = _frozen32(p, c)
        return p32, c32, int(c.shape[0]) * self.block

    def positions(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        return int(crd.shape[0]) * self.block

    def iterate(self, size, pos, crd, parents):  # noqa: ANN001, ANN201
        b = self.block
        blocks = crd.shape[0]
        par = np.repeat(_segments(pos, parents), b)
        coord = (crd.astype(np.int64)[:, None] * b + np.arange(b, dtype=np.int64)[None, :]).reshape(blocks * b)
        return par, coord

    def carry(self, size, pos, bounds):  # noqa: ANN001, ANN201
        return pos[bounds].astype(np.int64) * self.block

    def assemble(self, coords, parent, parents, size):  # noqa: ANN001, ANN201
        b = self.block
        blk = coords // b
        new = _fibre_starts(parent, blk)
        first = new.nonzero()[0]
        pos = _pos_of(parent[first], parents)
        return Assembled(pos, blk[first], (np.cumsum(new) - 1) * b + coords % b, int(first.shape[0]) * b)


DENSE = Dense()
COMPRESSED = Compressed()
SINGLETON = Singleton()
_BY_NAME = {f.name: f for f in (DENSE, COMPRESSED, Compressed(unique=False), SINGLETON)}


def check_chain(levels: tuple[LevelFormat, ...]) -> None:
    """ValueError unless a level that repeats coordinates (not ``unique``) is the last level or has
    a branchless level (one position per parent position) below it: a dense or compressed level
    under repeated coordinates would store one coordinate twice."""
    for k, f in enumerate(levels[:-1]):
        if not f.capabilities.unique and not levels[k + 1].capabilities.branchless:
            raise ValueError(
                f"levels[{k}] ({f.name}) repeats coordinates: it must be the last level or have a branchless "
                f"level (singleton) below it, not {levels[k + 1].name}"
            )


def is_scipy_compressed(levels: tuple[LevelFormat, ...]) -> bool:
    """Whether ``levels`` store a matrix as scipy's CSR/CSC arrays do: two levels, the first full
    (the rows, or columns), the second segmented with unique coordinates (``indptr`` = its pos,
    ``indices`` = its crd)."""
    return (
        len(levels) == 2
        and levels[0].full
        and levels[1].segmented
        and levels[1].capabilities.unique
        and levels[1].iteration == "segment"
    )


def format_names() -> tuple[str, ...]:
    """The names `as_format` accepts (``"blocked<b>"`` too, for a block of ``b``)."""
    return (*_BY_NAME, "blocked<b>")


def as_format(f: object, what: str = "level format") -> LevelFormat:
    """``f`` as a level format object: a `LevelFormat` as is, or its name ("dense",
    "compressed", "compressed_nonunique", "singleton", "blocked<b>"); ValueError naming
    ``what`` otherwise."""
    if isinstance(f, LevelFormat):
        return f
    if isinstance(f, str):
        if f in _BY_NAME:
            return _BY_NAME[f]
        if f.startswith("blocked") and f[7:].isdigit():
            return Blocked(int(f[7:]))
    raise ValueError(f"{what} {f!r} is not one of {format_names()} (nor a LevelFormat)")
