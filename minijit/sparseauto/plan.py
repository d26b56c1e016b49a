"""``sparse_plan``: the SparseAuto pipeline for one expression, printable (seed 002).

Enumerate the schedules (fission/fusion), attach symbolic costs, prune by memory depth, by the
depth poset and the symbolic Pareto frontier, optionally by SMT under user constraints, and
choose one with the concrete sizes and non-zero counts when they are known.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from minijit.sparseauto.complexity import Assumptions, Cost, cost
from minijit.sparseauto.convert import to_compiled
from minijit.sparseauto.formats import DENSE, as_format
from minijit.sparseauto.graph import IterationGraph, parse_subscripts
from minijit.sparseauto.nest import LEVEL_FORMATS, Nest, Operand
from minijit.sparseauto.nest import fibre_output as nest_fibre_output
from minijit.sparseauto.prune import (
    DEFAULT_MAX_MEMORY_DEPTH,
    Bucket,
    Candidate,
    Choice,
    MachineCosts,
    buckets,
    choose,
    depth_poset_stage,
    environment,
    frontier_stage,
)
from minijit.sparseauto.schedules import (
    DEFAULT_LIMIT,
    ScheduleSpace,
    default_linear,
    enumerate_schedules,
    renumbered,
)
from minijit.sparseauto.smt import DEFAULT_TIMEOUT_MS, SmtResult, smt_stage
from minijit.sparseauto.tensor import SparseTensor

_INPUT_NAMES = "BCDEFGHIJKLMNOPQRSUVWXYZ"


@dataclass(frozen=True, eq=False)
class SparsePlan:
    """The candidate schedules of one expression, the pruning stages' survivors and the choice.

    ``str(plan)`` (or :meth:`listing`) prints the frontier as loop nests with their time and
    memory complexity, the default linear schedule and the choice. ``chosen`` is the chosen
    :class:`Nest` (None until sizes and non-zero counts are known; see :meth:`choose`).
    """

    subscripts: str
    operands: tuple[Operand, ...]
    output: Operand
    sizes: Mapping[str, int] | None
    nnz: Mapping[str, object] | None
    space: ScheduleSpace
    stage1: tuple[Candidate, ...]
    stage2: tuple[Candidate, ...]
    frontier_buckets: tuple[Bucket, ...]
    smt: SmtResult
    max_memory_depth: int
    memory_limit: float | None
    choice: Choice | None
    note: str
    assumptions: Assumptions = field(repr=False)
    machine: MachineCosts | None = None  # stage 4's weights (None: the seed's iterations)

    @property
    def chosen(self) -> Nest | None:
        """The chosen schedule (None when sizes or non-zero counts are unknown). Usually on the
        frontier; stage 5 may pick a stage-1 schedule of equal evaluated time and lower cache
        cost instead."""
        return None if self.choice is None else self.choice.candidate.nest

    def schedules(self) -> tuple[Nest, ...]:
        """Every enumerated schedule."""
        return self.space.nests

    def frontier(self) -> tuple[Nest, ...]:
        """The schedules of the buckets that survive stages 1-3."""
        return tuple(c.nest for b in self.smt.kept for c in b.candidates)

    def frontier_candidates(self) -> tuple[Candidate, ...]:
        """The frontier's schedules with their costs."""
        return tuple(c for b in self.smt.kept for c in b.candidates)

    def default_linear(self) -> Nest:
        """TACO's default schedule: one fused nest in the natural order, no temporaries."""
        return default_linear(self.operands, self.output)

    def choose(
        self,
        sizes: Mapping[str, int],
        nnz: Mapping[str, object] | None = None,
        memory_limit: float | None = None,
    ) -> Choice:
        """Stages 4-5 with these concrete sizes and counts (the frontier is not recomputed)."""
        env = environment(self.operands, sizes, nnz)
        limit = self.memory_limit if memory_limit is None else memory_limit
        linear = self.default_linear()
        return choose(
            self.frontier_candidates(), env, sizes, limit, self.stage1, self.machine, Candidate(linear, cost(linear))
        )

    def listing(self, every: bool = False) -> str:
        """The plan as text; ``every`` lists each frontier schedule, not one per bucket."""
        lines = [f"sparse plan for {self.subscripts!r}: {self.output} = " + " * ".join(map(str, self.operands))]
        lines.append(
            f"stages: 1 memory depth <= {self.max_memory_depth} (while enumerating): "
            f"{self.space.message()}; 2 depth poset: {len(self.stage2)}, frontier "
            f"{len(self.frontier_buckets)} buckets; 3 {self.smt.message}"
        )
        for k, b in enumerate(self.smt.kept, 1):
            lines.append(f"frontier [{k}] time O({b.time}), memory O({b.memory}), {len(b.candidates)} schedule(s)")
            shown = b.candidates if every else b.candidates[:1]
            for c in shown:
                lines.append(f"  {c.cost}")
                lines.extend("    " + line for line in str(renumbered(c.nest)).splitlines()[1:])
        linear = self.default_linear()
        lines.append(f"default linear schedule (TACO): {cost(linear)}")
        lines.extend("    " + line for line in str(linear).splitlines()[1:])
        if self.choice is None:
            lines.append(f"4 run-time choice: pending ({self.note})")
        else:
            ch = self.choice
            lines.append(
                f"4 run-time choice: time {ch.time:.4g}{'' if ch.unit == 'iterations' else ' ' + ch.unit}, "
                f"memory {ch.memory:.4g} elements "
                f"({ch.reason}); {ch.candidate.cost}"
            )
            lines.extend("    " + line for line in str(renumbered(ch.candidate.nest)).splitlines()[1:])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.listing()


def vector_lanes(target: object, dtype: object) -> int:
    """Elements of ``dtype`` per vector register of the sparse code for ``target`` (a CPU target
    name of `minijit.targets` or a `CpuTarget`; SVE: at its ``sve_vl``): the target's own
    `CpuTarget.vector_lanes`."""
    from minijit import targets

    return targets.get_cpu(target).vector_lanes(dtype)  # type: ignore[arg-type]


def native_lanes(operands: tuple[object, ...] = ()) -> int:
    """`vector_lanes` of this host's target (`minijit.targets.native`, the one `minijit.einsum`
    compiles for) for the dtype of ``operands``: float32 when each has a float32 ``dtype``, else
    float64."""
    import numpy as np

    single = bool(operands) and all(np.dtype(getattr(o, "dtype", np.float64)) == np.float32 for o in operands)
    return vector_lanes("native", np.float32 if single else np.float64)


def _describe(k: int, term: tuple[str, ...], desc: object, taken: set[str]) -> tuple[Operand, dict, object]:
    """Operand, sizes and nnz (or per-level counts) of one operand description."""
    what = f"operand {k} ({''.join(term)})"
    if isinstance(desc, Operand):
        if sorted(desc.indices) != sorted(term):
            raise ValueError(f"{what}: Operand {desc.name} has indices {desc.indices!r}, not a permutation of {term!r}")
        return desc, {}, None
    shape = getattr(desc, "shape", None)
    if shape is None:
        raise TypeError(f"{what}: expected an Operand or an object with .shape, got {type(desc).__name__}")
    shape = tuple(shape)
    if len(shape) != len(term):
        raise ValueError(f"{what}: shape {shape} has {len(shape)} modes but the subscripts give {len(term)}")
    for s in shape:
        if not isinstance(s, int) or s < 1:
            raise ValueError(f"{what}: shape {shape} must hold positive ints")
    order = tuple(getattr(desc, "mode_order", None) or range(len(term)))
    if sorted(order) != list(range(len(term))):
        raise ValueError(f"{what}: mode_order {order!r} is not a permutation of 0..{len(term) - 1}")
    levels = tuple(getattr(desc, "levels", None) or (DENSE,) * len(term))
    if isinstance(desc, SparseTensor) and not all(f.compiled for f in levels):
        # a format the codegen cannot iterate (COO's singleton, blocked): planned as its CSF form
        desc = to_compiled(desc)
        levels = desc.levels
    try:
        levels = tuple(as_format(f) for f in levels)
    except ValueError:
        levels = ()
    if len(levels) != len(term) or not all(f.compiled for f in levels):
        names = tuple(f.name for f in LEVEL_FORMATS)
        raise ValueError(f"{what}: levels {getattr(desc, 'levels', None)!r} must be {len(term)} formats from {names}")
    name = next(n for n in _INPUT_NAMES if n not in taken)
    indices = tuple(term[m] for m in order)
    operand = Operand(name, indices, levels)
    sizes = dict(zip(term, shape, strict=True))
    counts: object = None
    if operand.sparse:
        storage = getattr(desc, "storage", None)
        crd = [getattr(lv, "crd", None) for lv in storage] if storage is not None else None
        if crd is not None and len(crd) == len(levels):
            counts = [len(c) for c, f in zip(crd, levels, strict=True) if f.sparse]
            if any(c is None for c, f in zip(crd, levels, strict=True) if f.sparse):
                counts = None
        if counts is None and isinstance(getattr(desc, "nnz", None), int):
            counts = int(desc.nnz)
    return operand, sizes, counts


_GC_LOCK = threading.Lock()
_gc_pauses = 0  # plannings running in any thread (under _GC_LOCK)
_gc_was_enabled = False  # the collector's state when the first of them began


@contextlib.contextmanager
def _no_cyclic_gc():
    """Pause the cyclic garbage collector while any thread plans; the last planning to finish
    restores the state the first one found (a per-call save/restore would leave it off when
    two threads overlap). Planning allocates tens of thousands of small acyclic objects (nodes,
    nests, polynomials) that live until the plan is built; each collection the allocations
    trigger walks all of them again (about half of the planning time of a 4-operand
    expression). Reference counting still frees what planning drops."""
    global _gc_pauses, _gc_was_enabled
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


@functools.lru_cache(maxsize=64)
def _stages(
    operands: tuple[Operand, ...],
    output: Operand,
    limit: int,
    max_memory_depth: int,
    constraints: tuple | None,
    smt_timeout_ms: int,
) -> tuple[ScheduleSpace, tuple[Candidate, ...], tuple[Candidate, ...], tuple[Bucket, ...], SmtResult, Assumptions]:
    """Stages 1-3 for one expression structure (cached: sizes and counts only enter stage 4)."""
    with _no_cyclic_gc():
        # Stage 1 (memory depth) runs inside the enumeration: no subtree with a deeper temporary.
        space = enumerate_schedules(operands, output, limit, max_memory_depth)
        assumptions = Assumptions(operands)
        stage1 = tuple(Candidate(n, cost(n)) for n in space.nests)
        stage2 = depth_poset_stage(stage1, assumptions)
        front = frontier_stage(buckets(stage2, assumptions), assumptions)
        smt = smt_stage(front, operands, dict(constraints) if constraints else None, smt_timeout_ms)
    return space, stage1, stage2, front, smt, assumptions


def sparse_plan(
    subscripts: str,
    *operands: object,
    sizes: Mapping[str, int] | None = None,
    nnz: Mapping[str, object] | None = None,
    constraints: Mapping[str, object] | None = None,
    max_memory_depth: int = DEFAULT_MAX_MEMORY_DEPTH,
    memory_limit: float | None = None,
    limit: int = DEFAULT_LIMIT,
    smt_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    fibre_output: bool = False,
    lanes: int | str | None = "native",
) -> SparsePlan:
    """Plan ``subscripts`` (einsum, one-letter indices) over ``operands`` the SparseAuto way.

    Each operand is an :class:`Operand` (storage order and level formats) or any object with
    ``.shape`` and optionally ``.levels`` (formats in storage order), ``.mode_order``,
    ``.nnz`` and ``.storage`` (levels with ``.crd``, for exact per-level counts); numpy arrays
    are all dense. Unnamed operands are called B, C, D, ... and the output A. ``sizes`` maps
    index -> extent and ``nnz`` maps operand name -> stored values (or per-level counts),
    overriding what the operands tell. ``constraints`` feed the SMT stage (see ``smt.py``).
    ``memory_limit`` caps the temporaries' elements in the run-time choice (default: half the
    last-level cache in float64 elements). The output samples a sparse input (SDDMM-like) when
    that input has exactly the output's indices; it then has that input's storage order and
    levels. ``fibre_output=True`` stores any other output under a sparse input's fibres where
    one qualifies (`nest.fibre_output`: TTM's ``A(i:c,j:c,l:d)``). ``lanes``: the vector lanes
    of the code's dtype on the target, which make the run-time choice weigh each statement by
    the code it compiles to and weigh the default linear schedule too (`prune.MachineCosts`);
    "native" (the default) is this host's for the operands' dtype, as ``minijit.einsum`` plans
    on it; None keeps the seed's iteration counts. Stages 1-3 are cached per expression
    structure (bounded), so planning the same expression again with other sizes re-plans
    nothing but the run-time choice.
    """
    if not isinstance(fibre_output, bool):
        raise TypeError(f"fibre_output must be True or False, got {fibre_output!r}")
    if lanes == "native":
        lanes = native_lanes(operands)
    if isinstance(lanes, str):
        raise ValueError(f"lanes must be a positive int, 'native' or None, got {lanes!r}")
    machine = None if lanes is None else MachineCosts(lanes)
    terms, out_term = parse_subscripts(subscripts, len(operands))
    taken = {o.name for o in operands if isinstance(o, Operand)}
    ops: list[Operand] = []
    found_sizes: dict[str, int] = {}
    found_nnz: dict[str, object] = {}
    for k, (term, desc) in enumerate(zip(terms, operands, strict=True)):
        op, op_sizes, counts = _describe(k, term, desc, taken)
        taken.add(op.name)
        ops.append(op)
        for i, s in op_sizes.items():
            if i in found_sizes and found_sizes[i] != s:
                raise ValueError(
                    f"index {i!r}: operand {k} ({''.join(term)}) has extent {s}, another has {found_sizes[i]}"
                )
            found_sizes[i] = s
        if counts is not None:
            found_nnz[op.name] = counts
    names = [o.name for o in ops]
    if len(set(names)) != len(names):
        raise ValueError(f"operand names {names} repeat")
    out_name = next(n for n in ("A", "Out", "Result") if n not in taken)
    output = Operand.dense(out_name, out_term)
    for o in ops:
        if o.sparse and sorted(o.indices) == sorted(out_term):
            output = Operand(out_name, o.indices, o.levels)
            break
    else:
        if fibre_output:
            output = nest_fibre_output(tuple(ops), tuple(out_term), out_name) or output
    operands_t = tuple(ops)
    IterationGraph(operands_t, output)
    all_sizes = {**found_sizes, **dict(sizes or {})}
    all_nnz = {**found_nnz, **dict(nnz or {})}

    for name, value, low in (
        ("limit", limit, 1),
        ("max_memory_depth", max_memory_depth, 0),
        ("smt_timeout_ms", smt_timeout_ms, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if constraints is not None and not isinstance(constraints, Mapping):
        raise TypeError(f"constraints must be a mapping, got {type(constraints).__name__}")
    key = None
    if constraints:
        key = tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in constraints.items()))
    space, stage1, stage2, front, smt, assumptions = _stages(
        operands_t, output, limit, max_memory_depth, key, smt_timeout_ms
    )

    needed = {i for o in operands_t for i in o.indices}
    missing = sorted(needed - set(all_sizes))
    missing_nnz = [o.name for o in operands_t if o.sparse and o.name not in all_nnz]
    choice = None
    note = ""
    if missing:
        note = f"no size for {', '.join(missing)}"
    elif missing_nnz:
        note = f"no non-zero count for {', '.join(missing_nnz)}"
    else:
        if memory_limit is None:
            from minijit.runtime.features import last_level_cache_bytes

            memory_limit = last_level_cache_bytes() / 2 / 8
        env = environment(operands_t, all_sizes, all_nnz)
        cands = tuple(c for b in smt.kept for c in b.candidates)
        linear = default_linear(operands_t, output)
        choice = choose(cands, env, all_sizes, memory_limit, stage1, machine, Candidate(linear, cost(linear)))
    return SparsePlan(
        subscripts=subscripts,
        operands=operands_t,
        output=output,
        sizes=all_sizes or None,
        nnz=all_nnz or None,
        space=space,
        stage1=stage1,
        stage2=stage2,
        frontier_buckets=front,
        smt=smt,
        max_memory_depth=max_memory_depth,
        memory_limit=memory_limit,
        choice=choice,
        note=note,
        assumptions=assumptions,
        machine=machine,
    )


__all__ = ["Cost", "SparsePlan", "sparse_plan"]
