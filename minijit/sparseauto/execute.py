"""`SparseContraction`: a sparse loop nest compiled to machine code, and its checked execution.

Setup validates the nest against the index extents and dtype, then generates the code once
for the target (x86-64: `minijit.sparseauto.codegen`; AArch64 NEON/SVE:
`minijit.sparseauto.codegen_aarch64`, run in the qemu worker on other hosts).
`execute(*operands)` checks every operand against the nest (type, level formats, level sizes,
dtype) before the code runs, allocates the output, and returns it: a dense numpy array C-ordered
over the output's indices, or, when the output samples a sparse operand's pattern (SDDMM-like), a
`SparseTensor` with that operand's storage.

Operands come in the order of ``nest.operands``: a `SparseTensor` whose storage levels follow
the operand's indices (its level ``k`` has the extent of ``indices[k]``), or a numpy array whose
axes are the operand's indices in order (non-contiguous arrays are copied).

Temporaries are allocated once per contraction and thread (a thread-local cache; threaded calls
take sets from a pool), so a contraction may run from several threads at once. The top loop is
split when the code allows it (`Program.split`), into ranges of about equal work (the
statements executed below each iteration), which run on minijit's native team through
`minijit.sparseauto.dispatch` (or its Python pool where the team is off). In the emulator the
ranges run one after another, over one copy of the arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import cffi
import numpy as np

from minijit.arrays import address
from minijit.errors import SetupError, error_t
from minijit.limits import check_alloc
from minijit.sparseauto.codegen import SIGNATURE, Program, sampled_operand
from minijit.sparseauto.emitter import dense_size
from minijit.sparseauto.formats import DENSE
from minijit.sparseauto.nest import Compute, Loop, Nest, Operand
from minijit.sparseauto.tensor import INDEX_MAX, Level, SparseTensor
from minijit.targets import CpuTarget

__all__ = ["DTYPES", "RowSpMM", "SparseContraction", "cpu_target", "row_spmm_accepts"]

DTYPES = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64"}
#: iterations of the top loop per thread, or work (iterations plus the stored values below
#: them), below which fewer threads run the nest: a split gives each thread at least one
_MIN_SPLIT = 64
_MIN_WORK = 8192
_FFI = cffi.FFI()


def _check_extents(nest: Nest, extents: object) -> dict[str, int]:
    if not isinstance(extents, Mapping):
        raise TypeError(f"extents must be a mapping index -> size, got {type(extents).__name__}")
    out = {}
    for i in sorted({i for o in (*nest.operands, nest.output) for i in o.indices}):
        if i not in extents:
            raise SetupError(error_t.wrong_size, f"index {i!r} has no extent")
        n = extents[i]
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 0 <= int(n) <= INDEX_MAX:
            raise SetupError(error_t.wrong_size, f"extent of index {i!r} must be an int in 0..{INDEX_MAX}, got {n!r}")
        out[i] = int(n)
    return out


def cpu_target(target: object, sve_vl: int = 128) -> CpuTarget:
    """The CPU target object of ``target`` ("native", a name of `minijit.targets.CPU_TARGETS` or a
    `CpuTarget`; ``sve_vl``: bits, for "aarch64-sve"); ValueError naming the choices otherwise
    (CUDA included: sparse contractions compile for CPUs only)."""
    from minijit import targets

    return targets.get_cpu(target, sve_vl=sve_vl)  # type: ignore[arg-type]


def _positions(t: SparseTensor, level: int) -> int:
    """How many positions storage level ``level`` of ``t`` has."""
    count = 1
    for lv in t.storage[: level + 1]:
        count = lv.format.positions(lv.size, lv.pos, lv.crd, count)
    return count


def _leaves(t: SparseTensor, level: int | None = None) -> np.ndarray:
    """Positions of storage level ``level`` (default: the last, the stored values) below each
    position of the first level: the first level's position bounds carried down through each
    level's ``pos`` (compressed) or size (dense), O(first-level positions * levels)."""
    last = len(t.storage) - 1 if level is None else level
    bounds = np.arange(_positions(t, 0) + 1, dtype=np.int64)
    for lv in t.storage[1 : last + 1]:
        bounds = lv.format.carry(lv.size, lv.pos, bounds)
    return np.diff(bounds)


def statement_work(nest: Nest, x: Operand, extents: Mapping[str, int]) -> list[tuple[int, int]] | None:
    """How the statements under the nest's last top-level loop scale with ``x``'s storage: one
    ``(level, factor)`` per statement, which runs ``factor`` times per position of ``x``'s level
    ``level`` (its loops over ``x``'s indices bind levels ``0..level`` in order; ``factor`` is
    the product of the extents of its dense loops over other indices). None when a statement's
    loops do not follow ``x``'s levels from the top, or walk another sparse operand (unknown work)."""
    top = nest.body[-1]
    out: list[tuple[int, int]] = []

    def visit(loop: Loop, depth: int, factor: int) -> bool:
        walked = nest.walks(loop)
        if loop.index in x.indices:
            k = x.indices.index(loop.index)
            if k != depth or (x.levels[k].sparse and x not in walked) or (x.levels[k].full and walked):
                return False
            depth += 1
        elif walked:
            return False
        else:
            factor *= extents[loop.index]
        for node in loop.body:
            if isinstance(node, Loop):
                if not visit(node, depth, factor):
                    return False
            elif isinstance(node, Compute):
                out.append((depth - 1, factor))
        return True

    if not isinstance(top, Loop) or not x.indices or top.index != x.indices[0]:
        return None
    return out if visit(top, 0, 1) else None


def row_spmm_accepts(t: object) -> bool:
    """Does `RowSpMM` take ``t``: a float32 matrix stored by rows (mode order (0, 1)) whose first
    level is full (every row, indexed) and whose second is segmented (a row's positions are
    ``pos[r] .. pos[r+1]-1`` with columns ``crd``), as its formats say: CSR, duplicates allowed."""
    return (
        isinstance(t, SparseTensor)
        and t.ndim == 2
        and t.mode_order == (0, 1)
        and t.dtype == np.float32
        and t.levels[0].full
        and t.levels[1].segmented
    )


class RowSpMM:
    """``C = S @ B`` for a CSR-like `SparseTensor` ``S`` (`row_spmm_accepts`): the shared layer's
    route for ``ij,jk->ik`` with a sparse first operand, float32, on a CPU whose target has a
    CSR row kernel (`CpuTarget.spmm`: AVX-512/AVX2/NEON, specialised on N). Rows are split over
    minijit's thread pool into ranges of about equal cost (non-zeros + rows). ``B``: K x N
    float32, C-contiguous; ``C``: M x N float32, C-contiguous, overwritten (elements)."""

    def __init__(self, s: SparseTensor, n: int, target: CpuTarget, threads: int = 1, kernel: Any = None) -> None:
        if not row_spmm_accepts(s):
            raise ValueError(f"RowSpMM takes a float32 matrix with a full then a segmented level (CSR), got {s!r}")
        self.n, self.target, self.threads = int(n), target, max(1, int(threads))
        #: the target's CSR row kernel for N = n (a given one is reused: its generation costs ms)
        self.kernel = kernel if kernel is not None else target.spmm(self.n)
        self.use(s)

    def use(self, s: SparseTensor) -> None:
        """Run on ``s`` from now on (same shape; new values or a new pattern)."""
        if not row_spmm_accepts(s):
            raise ValueError(f"RowSpMM takes a float32 matrix with a full then a segmented level (CSR), got {s!r}")
        lv = s.storage[1]
        self.s, self.pos, self.crd, self.vals = s, lv.pos, lv.crd, s.vals
        if self.crd.shape[0] == 0:  # the kernel's pointers must reference something
            self.crd, self.vals = np.zeros(1, np.int32), np.zeros(1, np.float32)
        self.splits = self._row_splits()

    def _row_splits(self) -> list[tuple[int, int]]:
        """Contiguous row ranges of about equal cost (nnz + rows)."""
        m = self.s.shape[0]
        if m == 0:
            return []
        cost = self.pos.astype(np.int64) + np.arange(m + 1)
        parts = max(1, min(self.threads, m))
        cuts = np.searchsorted(cost, np.linspace(0, cost[-1], parts + 1)[1:-1])
        bounds = [0, *sorted({int(x) for x in cuts if 0 < x < m}), m]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def run(self, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """``c[:] = S @ b`` (both checked by the caller: float32, C-contiguous, K x N and M x N)."""
        pos, crd, vals, kern = self.pos, self.crd, self.vals, self.kernel

        def rows(r0: int, r1: int) -> None:
            kern(pos[r0:], crd, vals, b, c[r0:], r1 - r0)

        if len(self.splits) <= 1:
            for r0, r1 in self.splits:
                rows(r0, r1)
            return c
        from minijit.parallel import _pool

        pool = _pool(len(self.splits) - 1)
        futures = [pool.submit(rows, r0, r1) for r0, r1 in self.splits[1:]]
        rows(*self.splits[0])
        for f in futures:
            f.result()
        return c


class SparseContraction:
    """A compiled `Nest`: ``SparseContraction(nest, extents, dtype)``; call `execute`.

    ``extents``: index -> size. ``dtype``: float32 or float64 (every operand's). ``threads``:
    workers for the split top loop (default: minijit's pool size). ``plan``: the planner's
    `SparsePlan` that chose the nest, kept for printing (None for a nest given directly).
    ``target``: "native", a CPU target name of `minijit.targets` or a `CpuTarget`; the target
    compiles the nest (`CpuTarget.sparse_program`). x86-64 targets run the code of their ISA
    ("x86_64-avx2": AVX2+FMA, "x86_64-avx512": AVX-512; "native" is the host's best,
    `minijit.targets.native`, as for dense operations; ``isa`` overrides the ISA within the
    target's family, and code the host's CPU lacks the extensions for is refused),
    "aarch64-neon"/"aarch64-sve" the AArch64 code (`codegen_aarch64`): natively on an AArch64
    host, else in the emulator at ``sve_vl`` bits (a target object brings its own), the top
    loop's ranges one after another. ``self.target`` is the target compiled for (the override
    applied), ``self.isa`` its ISA.
    """

    def __init__(
        self,
        nest: Nest,
        extents: Mapping[str, int],
        dtype: object = np.float64,
        *,
        threads: int | None = None,
        isa: str | None = None,
        plan: object = None,
        target: str | CpuTarget = "native",
        sve_vl: int = 128,
    ) -> None:
        if not isinstance(nest, Nest):
            raise TypeError(f"nest must be a minijit.sparseauto.nest.Nest, got {type(nest).__name__}")
        try:
            self.dtype = np.dtype(dtype)  # type: ignore[arg-type]
        except TypeError as e:
            raise SetupError(error_t.wrong_dtype, f"dtype: not a dtype: {dtype!r}") from e
        if self.dtype not in DTYPES:
            raise SetupError(error_t.wrong_dtype, f"dtype must be float32 or float64, got {self.dtype}")
        try:
            nest.validate()
            self.sampled = sampled_operand(nest)
        except ValueError as e:
            raise SetupError(error_t.wrong_dimension, str(e)) from e
        self.nest = nest
        self.plan = plan
        self.extents = _check_extents(nest, extents)
        for t in nest.temps:
            size = int(np.prod([self.extents[i] for i in t.indices], dtype=np.int64))
            check_alloc(size * self.dtype.itemsize, f"temporary {t.name}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        from minijit.parallel import default_threads

        self.threads = threads if threads is not None else default_threads()
        self.target = cpu_target(target, sve_vl)
        if isa is not None:  # the same family at another ISA (ValueError for another family's)
            self.target = replace(self.target, isa=isa)
        self.isa = self.target.isa  # the code's ISA
        try:
            self.program: Program = self.target.sparse_program(nest, self.extents, DTYPES[self.dtype])
        except ValueError as e:
            raise SetupError(error_t.wrong_dimension, str(e)) from e
        t = self.target
        if not t.supported and (t.native or not t.emulable):  # the emulator runs any AArch64 ISA
            raise RuntimeError(
                f"target {t.name}: sparse contractions compile to {t.family} {t.extensions} code; "
                f"this host has no {t.extensions} and cannot run it"
            )
        from minijit.runtime import load

        self._emulated = not t.native
        prog = self.program.asm
        sve_bits = getattr(t, "sve_vl", 128)
        self._kernel = load(
            prog.code(), SIGNATURE, isa=t.family, name=prog.name, listing=prog.listing(), sve_vl=sve_bits
        )
        self._local = threading.local()
        self._temp_pool: list[dict[str, np.ndarray]] = []  # temporaries for threaded calls
        self._pool_lock = threading.Lock()
        #: the nest's entry, called without the generic signature checks: execute checked the
        #: operands, and the args block is built here (the kernel object stays referenced)
        self._entry = (
            _FFI.cast("void(*)(intptr_t, int64_t, int64_t)", self._kernel.address) if not self._emulated else None
        )
        self._last_ranges: tuple[tuple, list[tuple[int, int]]] | None = None
        self._statement_work: dict[str, list[tuple[int, int]] | None] = {}

    # ---------------------------------------------------------------- inspection

    def listing(self) -> str:
        """The loop nest, then the generated assembly (Intel syntax on x86-64)."""
        vec = ", ".join(self.program.vectorized) or "none"
        head = f"{self.nest}\n# target {self.target.name}, extents {self.extents}, dtype {self.dtype}"
        head += f", vectorized loops: {vec}"
        if self.program.split:
            head += f", top loop split over threads ({self.program.split[0]})"
        return head + "\n" + self._kernel.listing

    def __repr__(self) -> str:
        return f"<SparseContraction {self.nest.output} dtype={self.dtype} extents={self.extents}>"

    # ---------------------------------------------------------------- checks

    def _check_sparse(self, o: Operand, x: object) -> SparseTensor:
        if not isinstance(x, SparseTensor):
            raise TypeError(f"operand {o.name} must be a SparseTensor (levels {o.levels}), got {type(x).__name__}")
        if x.levels != o.levels:
            raise ValueError(f"operand {o.name}: levels {x.levels}, the nest needs {o.levels}")
        for k, lv in enumerate(x.storage):
            if lv.size != self.extents[o.indices[k]]:
                raise ValueError(
                    f"operand {o.name}: level {k} ({o.indices[k]}) has size {lv.size}, "
                    f"extent is {self.extents[o.indices[k]]}"
                )
        if x.dtype != self.dtype:
            raise TypeError(f"operand {o.name}: dtype {x.dtype}, the contraction is {self.dtype}")
        return x

    def _check_dense(self, o: Operand, x: object) -> np.ndarray:
        if not isinstance(x, np.ndarray):
            raise TypeError(f"operand {o.name} must be a numpy array, got {type(x).__name__}")
        want = tuple(self.extents[i] for i in o.indices)
        if x.shape != want:
            raise ValueError(f"operand {o.name}: shape {x.shape}, expected {want} (indices {o.indices})")
        if x.dtype != self.dtype:
            raise TypeError(f"operand {o.name}: dtype {x.dtype}, the contraction is {self.dtype}")
        return np.ascontiguousarray(x)

    # ---------------------------------------------------------------- execution

    def execute(self, *operands: Any) -> np.ndarray | SparseTensor:
        """Run the contraction on ``operands`` (in ``nest.operands`` order); returns the output."""
        ops = self.nest.operands
        if len(operands) != len(ops):
            raise TypeError(f"expected {len(ops)} operands ({', '.join(o.name for o in ops)}), got {len(operands)}")
        arrays: dict[tuple[str, str, int | None], Any] = {}  # arrays, and "size" integers
        tensors: dict[str, SparseTensor] = {}
        for o, x in zip(ops, operands, strict=True):
            if o.sparse:
                t = tensors[o.name] = self._check_sparse(o, x)
                for k, lv in enumerate(t.storage):  # the parts the level's format passes (`arg_slots`)
                    for part in lv.format.slots:
                        arrays[(o.name, part, k)] = lv.crd.shape[0] if part == "size" else getattr(lv, part)  # type: ignore[union-attr]
                arrays[(o.name, "vals", None)] = t.vals
            else:
                arrays[(o.name, "data", None)] = self._check_dense(o, x)
        out_op = self.nest.output
        if self.sampled is not None:
            pattern = tensors[self.sampled.name]
            shared = self.nest.pattern_levels()
            storage = pattern.storage[:shared] + tuple(Level(DENSE, self.extents[i]) for i in out_op.indices[shared:])
            rows = _positions(pattern, shared - 1)  # a fibre output: one dense row per position there
            out = np.zeros(rows * dense_size(self.extents, out_op.indices[shared:]), self.dtype)
            arrays[(out_op.name, "vals", None)] = out
        else:
            out = np.zeros(tuple(self.extents[i] for i in out_op.indices), self.dtype)
            arrays[(out_op.name, "data", None)] = out
        if out.size:
            self._run(arrays, tensors)
        if self.sampled is None:
            return out
        shape = tuple(self.extents[i] for i in out_op.indices)
        return SparseTensor._trusted(shape, storage, out, tuple(range(len(shape))))

    def _new_temps(self) -> dict[str, np.ndarray]:
        return {name: np.zeros(max(1, n), self.dtype) for name, n in self.program.temp_sizes.items()}

    def _addresses(self, arrays: dict, temps: dict[str, np.ndarray]) -> list[int]:
        """An args block: the addresses of the operands' arrays (and sizes) and of ``temps``
        (read each call: an array that owns its data may be resized in place, its data moved)."""
        addr = []
        for s in self.program.slots:
            x = temps[s.tensor] if s.part == "temp" else arrays[(s.tensor, s.part, s.level)]
            addr.append(x if s.part == "size" else address(x))
        return addr

    def _args(self, arrays: dict) -> np.ndarray:
        """The args block for this thread: addresses of the operands' arrays and its temporaries."""
        temps = getattr(self._local, "temps", None)
        if temps is None:
            temps = self._local.temps = self._new_temps()
        return np.array(self._addresses(arrays, temps), np.int64)

    def _take_temps(self, n: int) -> list[dict[str, np.ndarray]]:
        """``n`` sets of temporaries no other call holds (kept between calls: `_give_temps`)."""
        with self._pool_lock:
            sets = [self._temp_pool.pop() for _ in range(min(n, len(self._temp_pool)))]
        return sets + [self._new_temps() for _ in range(n - len(sets))]

    def _give_temps(self, sets: list[dict[str, np.ndarray]]) -> None:
        with self._pool_lock:
            self._temp_pool.extend(sets[: max(0, self.threads - len(self._temp_pool))])

    def _ranges(self, tensors: dict[str, SparseTensor]) -> list[tuple[int, int]]:
        """The top loop's iterations split into up to ``threads`` ranges of about equal work."""
        split = self.program.split
        if split is None:
            return [(0, 0)]
        kind, what = split
        top = self.nest.body[-1].index  # type: ignore[union-attr]  # the split loop (codegen._split)
        if kind == "walk":  # the walked operand's first level's positions, else a range of extent `what`
            n = int(tensors[str(what)].storage[0].crd.shape[0])  # type: ignore[union-attr]
        else:
            n = int(what)  # type: ignore[arg-type]
        by_count = n // _MIN_SPLIT
        if min(self.threads, n) <= 1 or (by_count < 2 and n + self._nnz_bound(tensors) < 2 * _MIN_WORK):
            return [(0, n)]
        # the last split is reused for the same tensors: any split of [0, n) is correct, the
        # weights only balance it (so a reused id() can cost balance, never correctness)
        key = (n, tuple(id(t) for t in tensors.values()))
        cached = self._last_ranges
        if cached is not None and cached[0] == key:
            return cached[1]
        weight = self._work(tensors, str(what) if kind == "walk" else None)
        if weight is None and kind != "walk":
            weight = np.ones(n, np.int64)
            for o in self.nest.operands:  # a sparse operand stored by the top index weighs its rows
                if o.sparse and o.indices[0] == top and o.levels[0].full:
                    weight = weight + _leaves(tensors[o.name])
        elif weight is None:
            weight = 1 + _leaves(tensors[str(what)])
        cost = np.concatenate(([0], np.cumsum(weight)))
        # as many parts as threads, each with _MIN_SPLIT iterations or _MIN_WORK work (so a few
        # heavy slices split too)
        parts = max(1, min(self.threads, n, max(by_count, int(cost[-1]) // _MIN_WORK)))
        if parts == 1:
            self._last_ranges = (key, [(0, n)])
            return [(0, n)]
        cuts = np.searchsorted(cost, np.linspace(0, cost[-1], parts + 1)[1:-1])
        bounds = [0, *sorted({int(c) for c in cuts if 0 < c < n}), n]
        ranges = list(zip(bounds[:-1], bounds[1:], strict=True))
        self._last_ranges = (key, ranges)
        return ranges

    def _work(self, tensors: dict[str, SparseTensor], walked: str | None) -> np.ndarray | None:
        """Statement executions below each iteration of the split loop, plus one: from the
        walked operand (or the one sparse operand stored by a dense top index) and
        `statement_work`; None where the statements' work does not follow one operand's levels."""
        top = self.nest.body[-1].index  # type: ignore[union-attr]
        if walked is None:
            stored = [o for o in self.nest.operands if o.sparse and o.indices[0] == top and o.levels[0].full]
            if len(stored) != 1:
                return None
            walked = stored[0].name
        per = self._statement_work.get(walked, ())
        if per == ():  # once per walked operand (a pure function of the nest; a race recomputes it)
            x = next(o for o in self.nest.operands if o.name == walked)
            per = self._statement_work[walked] = statement_work(self.nest, x, self.extents)
        if per is None:
            return None
        t = tensors[walked]
        weight = np.ones_like(_leaves(t, 0))  # one per position of the first level
        for level, factor in per:
            weight += factor * _leaves(t, level)
        return weight

    @staticmethod
    def _nnz_bound(tensors: dict[str, SparseTensor]) -> int:
        """The stored values of all sparse operands: at least the work the weights count below
        the top loop, and cheap, to skip weighing a split that cannot pay."""
        return sum(t.nnz for t in tensors.values())

    def _run(self, arrays: dict, tensors: dict[str, SparseTensor]) -> None:
        """The nest over the top loop's ranges: one range on this thread; several on minijit's
        threads (`minijit.sparseauto.dispatch`), each thread with its own temporaries."""
        ranges = self._ranges(tensors)
        if self._emulated:
            self._run_emulated(arrays, ranges)
            return
        if len(ranges) == 1:
            args = self._args(arrays)
            self._entry(address(args), *ranges[0])
            return
        from minijit.sparseauto.dispatch import run_ranges

        sets = self._take_temps(len(ranges))
        try:
            blocks = np.tile(np.array(self._addresses(arrays, sets[0]), np.int64), (len(sets), 1))
            for k, s in enumerate(self.program.slots):  # the blocks differ in their temporaries only
                if s.part == "temp":
                    blocks[1:, k] = [address(t[s.tensor]) for t in sets[1:]]
            run_ranges(self._kernel.address, blocks, ranges)
        finally:
            self._give_temps(sets)

    def _run_emulated(self, arrays: dict, ranges: list[tuple[int, int]]) -> None:
        """The AArch64 code in the emulator: every array the args block names is copied into the
        worker, the args block is written with the worker's addresses, the top loop's ranges run
        one after another, and the output is copied back."""
        from minijit.runtime.emulator_regions import Regions

        kern = self._kernel
        w = kern.worker
        out_name = self.nest.output.name
        temps = self._new_temps()
        with w.lock:
            regions = Regions(w)
            try:
                placed: dict[int, int] = {}
                for k, s in enumerate(self.program.slots):
                    if s.part == "size":
                        continue
                    x = temps[s.tensor] if s.part == "temp" else arrays[(s.tensor, s.part, s.level)]
                    placed[k] = regions.place(x, writable=s.tensor == out_name)
                args = np.zeros(max(1, len(self.program.slots)), np.int64)
                block = regions.place(args, writable=False)
                regions.upload()
                for k, s in enumerate(self.program.slots):
                    args[k] = arrays[(s.tensor, s.part, s.level)] if s.part == "size" else regions.address_of(placed[k])
                w.write(regions.address_of(block), args.tobytes())
                for b, e in ranges:
                    w.call(kern.address, regions.address_of(block), b, e)
                regions.download()
            finally:
                regions.free()
