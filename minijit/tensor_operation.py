"""`TensorOperation`: setup/execute of a tensor operation on JIT-generated primitives.

    op = TensorOperation(target="native")
    op.setup("fp32", "zero", "brgemm", "relu", dim_types, exec_types, dim_sizes,
             strides_in0, strides_in1, strides_out)
    op.execute(A, B, C)

Strides are in elements of C-contiguous arrays, relative to each array's first
element or to an explicit element offset (`minijit.arrays` states the rule;
negative strides need an offset). `setup` validates the
configuration (raising `SetupError` naming the offending dimension), runs the
optimizer when asked or when no prim dims are given, generates the first-touch,
main and last-touch primitives and compiles the seq loops and kernel calls into
one machine-code function (`minijit.kernels.loopnest`). `execute` checks the
arrays (dtype, writeability, C-contiguity, every reachable element inside each
array) before any machine code runs, then splits the shared iteration space over threads.
"""

from __future__ import annotations

import math
import queue
from typing import Any

import cffi
import numpy as np
from numpy.lib.stride_tricks import as_strided

from minijit import arrays, blocking, kernels, optimizer, packing, parallel, peeling, reference, targets
from minijit.arrays import Offsets
from minijit.cache import ScratchPool
from minijit.errors import SetupError, error_t
from minijit.ir import TensorConfig, dim_t, exec_t, ptype_t
from minijit.operation import Operation
from minijit.kernels.loopnest import Call, Loop, LoopNest
from minijit.runtime import features

GEMM_PTYPES = (ptype_t.gemm, ptype_t.brgemm)
UNARY_PTYPES = (ptype_t.zero, ptype_t.copy, ptype_t.relu)
BINARY_PTYPES = (ptype_t.add, ptype_t.sub, ptype_t.mul, ptype_t.div, ptype_t.min, ptype_t.max)
TENSORS = ("in0", "in1", "out")
Array = np.ndarray | None  # an input; None where the operation does not use it
RAW_SIGNATURE = "void(*)(uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t)"
_FFI = cffi.FFI()
#: GEMM/BRGEMM operations with fewer multiply-adds than this run on the calling thread only.
PARALLEL_MIN_ELEMENTS = 1 << 20
#: elementwise operations (copies, packing passes) moving fewer bytes (read + written) than this
#: run on the calling thread only: a 1 MiB fp32 copy (2 MiB moved) takes 44 us on one Zen 3 core
#: and 34 us on two, with the team's dispatch included
PARALLEL_MIN_BYTES = 1 << 20


#: the kernel packs A itself (``a_copy``) only when at most this many kernel calls read each A block
A_COPY_MAX_REUSE = 4
#: ``n_outer`` kernels: the least bytes of C a call walks down each column (prim M x item), and
#: the share of the last-level cache the call's A block may take (`TensorOperation._kernel_n_outer`)
N_OUTER_MIN_RUN, N_OUTER_LLC_SHARE = 2048, 8
#: chunked execution (`TensorOperation._a_chunks`): the largest share of the last-level cache one
#: chunk's A may take, and the most the whole B may take (it is re-read by every chunk)
CHUNK_LLC_SHARE = 8
#: K chunks (`TensorOperation._k_chunks`): the largest share of the last-level cache one chunk's A
#: may take, and the most C may take (every chunk reads and writes all of C)
K_CHUNK_LLC_SHARE, K_CHUNK_OUT_SHARE = 4, 16
#: a chunk's A is packed into micro-panels from this many columns of N that reuse it (it is copied
#: from memory in any case; `minijit.packing.PANEL_REUSE_N` elsewhere)
CHUNK_PANEL_REUSE_N = 1


def _reach_bytes(config: TensorConfig, tensor: str) -> int:
    """Bytes from the first to the last element of ``tensor`` that ``config`` reaches."""
    lo, hi = config.offset_range(tensor)
    return (hi - lo + 1) * config.dtype.itemsize


class TensorOperation(Operation):
    """A tensor operation compiled for one target.

    ``target``: "native" (AVX-512/AVX2 on x86-64, SVE/NEON on AArch64),
    "x86_64-avx512", "x86_64-avx2", "aarch64-neon", "aarch64-sve" (AArch64 on a
    non-ARM host runs in the qemu emulation worker at ``sve_vl`` bits; for
    correctness, not speed), or "cuda" (GEMM/BRGEMM on tensor cores, unary/binary
    elementwise ops: returns a `minijit.cuda.CudaTensorOperation`, same setup/execute
    interface; ``device=`` and ``driver=`` go to it).
    ``num_threads`` defaults to MINIJIT_NUM_THREADS / OMP_NUM_THREADS / the CPU count.

    After `setup`: ``config`` (the compiled `TensorConfig`), ``blocking`` (the cache model's
    choice), ``pack_plan`` / ``panel_plans`` / ``packed_operands`` (what ``execute`` copies before
    the kernels run), ``a_copy`` (x86-64: the BRGEMM kernel packs A itself), ``n_outer`` (x86-64:
    the kernel walks its N blocks outermost), ``chunks`` and ``chunk_dim`` (x86-64: the operation runs
    in that many chunks of that dim, a K dim or the outer M loop, each chunk's A packed and computed
    before the next), ``listing()``.

    A set-up operation is not changed by ``execute``: the packed buffers a call writes come from
    the operation's pool, one set per call running at once, so one operation may run from many
    threads (multi-threaded calls share the one native team, which takes them in turn).
    """

    @classmethod
    def _implementation(cls, target: str = "native", *args: Any, **kwargs: Any) -> tuple[type, tuple, dict]:
        """The class serving ``target`` and its arguments (`minijit.operation.OperationMeta`)."""
        if target == "cuda":
            from minijit.cuda.operation import CudaTensorOperation

            unknown = set(kwargs) - {"device", "driver"}
            if unknown or args:
                raise TypeError(f"target 'cuda' takes no {', '.join(sorted(unknown)) or 'positional'} argument")
            return CudaTensorOperation, (), kwargs
        return cls, (target, *args), kwargs

    def __init__(
        self, target: str = "native", *, num_threads: int | None = None, sve_vl: int = 128, pack: bool = True
    ) -> None:
        self.target_info = targets.get_cpu(target, sve_vl=sve_vl)
        self.target = self.target_info.name  # the name; ``target_info`` is the `minijit.targets` object
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        self.num_threads = num_threads or parallel.default_threads()
        self.sve_vl = sve_vl
        self.native = self.target_info.native
        self.config: TensorConfig | None = None
        self.primitives: dict[str, Any] = {}
        self.nest: LoopNest | None = None
        self._loopnest = None
        self._iterations = 0
        self._threads = 1
        self._ranges: dict[str, tuple[int, int]] = {}
        self._np_dtype: np.dtype | None = None  # the set-up config's numpy dtype (execute compares it)
        self._uses = (True, True)  # the config's uses_in0, uses_in1 (execute reads them per call)
        self._quick: tuple | None = None  # `_quick_check`: the fast path of execute's array checks
        self.pack = bool(pack)
        self.pack_plan: packing.PackPlan | None = None
        self._pack_op: TensorOperation | None = None
        self._packed: np.ndarray | None = None
        self.blocking: blocking.Blocking | None = None
        self.a_copy = False
        self.n_outer = False
        # set by an owning operation for its pack copies: out is a private buffer that never
        # overlaps in0, so plain copies may store whole vectors that spill into later columns
        self._private_out = False
        self.panel_plans: dict[str, packing.PanelPlan] = {}
        self._panel_packs: list[tuple[str, list[tuple[TensorOperation, int, int]], np.ndarray]] = []
        # the packed buffers belong to a call (DESIGN.md 12): each call takes a set (packed A or
        # None, {tensor: micro-panel buffer}) from this pool; the buffers above are its first set
        self._scratch: ScratchPool | None = None
        # chunked execution: (idle single-thread operations on one M chunk, or None for K chunks,
        # chunk count, the byte steps of in0, in1, out between chunks); None: the whole operation
        # runs at once. K chunks run in order, chunk i on ``_chunk_ops[i]`` (the first carries the
        # first touch, the last the last touch)
        self._chunked: tuple[queue.SimpleQueue | None, int, tuple[int, int, int]] | None = None
        self._chunk_ops: list[TensorOperation] = []
        # peeled execution (`minijit.peeling`): the head and tail operations, each with the element
        # offsets of its origins in in0, in1, out (the caller's roles), run in order
        self.parts: list[tuple[TensorOperation, tuple[int, int, int]]] = []
        self.chunks = 1
        self.chunk_dim: int | None = None  # the chunked dim (an index into the config's dims)
        self._chunking = True  # False for the chunk operations themselves
        self._chunk_part = False  # True for a chunk operation: its A is read from memory once

    # -- setup ---------------------------------------------------------------------------------
    def setup(
        self,
        dtype,
        prim_first,
        prim_main,
        prim_last,
        dim_types,
        exec_types,
        dim_sizes,
        strides_in0,
        strides_in1,
        strides_out,
        *,
        optimize: bool | None = None,
        thread_target: int | None = None,
        max_kernel_size: int | None = None,
        min_kernel_size: int = optimizer.DEFAULT_MIN_KERNEL_SIZE,
    ) -> error_t:
        """Validate, optionally optimize, generate the kernels; returns ``error_t.success``.

        Arguments follow mini_jit (enums or their names; lists of equal length;
        strides in elements). ``optimize``: run `minijit.optimize` first (default:
        only when no dim has exec type prim). ``max_kernel_size`` (elements per prim dim):
        by default a GEMM/BRGEMM gets its M, N and K prim sizes from the cache model
        (`minijit.blocking`, shown as ``self.blocking``) and other dims
        `optimizer.DEFAULT_MAX_KERNEL_SIZE`; a number applies to every dim. Raises
        `SetupError` on any invalid configuration; the operation is then left without a
        configuration.
        """
        self.config, self.primitives, self.nest, self._loopnest = None, {}, None, None
        self.pack_plan, self._pack_op, self._packed = None, None, None
        self.panel_plans, self._panel_packs, self._quick, self._scratch = {}, [], None, None
        self._chunked, self._chunk_ops, self.chunks, self.chunk_dim = None, [], 1, None
        self.parts = []
        lists = (dim_types, exec_types, dim_sizes, strides_in0, strides_in1, strides_out)
        config = TensorConfig.from_lists(dtype, prim_first, prim_main, prim_last, *lists)
        if optimize is None:
            optimize = not config.has_prims
        if not optimize:
            self.blocking = None
            return self.setup_config(config)
        return self._setup_optimized(config, thread_target, max_kernel_size, min_kernel_size)

    def _setup_optimized(
        self, config: TensorConfig, thread_target: int | None, max_kernel_size: int | None, min_kernel_size: int
    ) -> error_t:
        """`minijit.optimize` ``config`` (the cache model's prim sizes for a GEMM), then set it up;
        a dim that leaves a prim over the kernels' limit and has no divisor that fits is peeled
        (`minijit.peeling`): head and tail are set up (and run) as operations of their own."""
        threads = thread_target or self.num_threads
        if _too_small_to_split(config):
            # it runs on the calling thread (see `setup_config`): shape it for one thread, not for
            # a split it will not get (96^3 fp32 on 2 threads ran as two 48-row halves on one
            # thread, with a packing pass: 25.8 us against 18.2 us set up for one, Zen 4)
            threads = 1
        self.blocking = None
        if max_kernel_size is None and config.prim_main in GEMM_PTYPES:
            self.blocking = self._blocking(optimizer.swap_operands(config), threads)  # the kernel's roles
        limit = self.target_info.max_prim_size
        clip = (lambda size: size) if limit is None else (lambda size: min(size, limit))  # noqa: E731
        sizes = None if self.blocking is None else {t: clip(v) for t, v in self.blocking.sizes().items()}
        optimized = optimizer.optimize(
            config,
            thread_target=threads,
            max_kernel_size=clip(optimizer.DEFAULT_MAX_KERNEL_SIZE if max_kernel_size is None else max_kernel_size),
            min_kernel_size=min_kernel_size,
            max_sizes=sizes,
            max_br=None if self.blocking is None else self.blocking.br,
        )
        split = peeling.peel(config) if peeling.oversized(optimized, limit) else None
        if split is None:
            return self.setup_config(optimized)
        parts = []
        for part in split:
            op = TensorOperation(self.target, num_threads=self.num_threads, sve_vl=self.sve_vl, pack=self.pack)
            op._setup_optimized(part.config, thread_target, max_kernel_size, min_kernel_size)
            parts.append((op, part.offsets))
        head = parts[0][0]
        self.config, self.primitives, self.nest, self._loopnest = config, head.primitives, head.nest, head._loopnest
        self.blocking, self.pack_plan, self.panel_plans = head.blocking, head.pack_plan, head.panel_plans
        self._set_checks(config)
        self.parts = parts
        return error_t.success

    def _set_checks(self, config: TensorConfig) -> None:
        """What `execute` checks the arrays against: ``config``'s reach per tensor (elements), its
        dtype, which inputs it reads, and the quick path's arguments."""
        self._ranges = {t: config.offset_range(t) for t in TENSORS}
        self._np_dtype = np.dtype(config.dtype.numpy)
        self._uses = (config.uses_in0, config.uses_in1)
        self._quick = _quick_check(config, self._ranges, self._np_dtype)

    def _blocking(self, config: TensorConfig, threads: int) -> blocking.Blocking:
        """The cache model's prim sizes for a GEMM-like config (M, N, K = products of their dims)."""
        shape = tuple(math.prod(d.size for d in config.dims if d.type is t) for t in (dim_t.m, dim_t.n, dim_t.k))
        return blocking.choose(
            shape, config.dtype.itemsize, self.target_info, threads=threads, column_bytes=self._panel_column()
        )

    def _panel_column(self) -> int:
        """Bytes of one column of the register block of A on this target."""
        return self.target_info.panel_column_bytes

    def setup_config(self, config: TensorConfig) -> error_t:
        """Set up from a validated `TensorConfig` (e.g. the result of `minijit.optimize`).

        GEMM/BRGEMM configs whose A panels would thrash L1 or L2 (or whose A is transposed) get a
        packed A (`minijit.packing`; ``pack=False`` at construction turns that off): each
        ``execute`` first copies A into a panel-ordered buffer, and the kernels read that. ``self.config`` stays the
        caller's configuration; ``pack_plan`` says what was packed and why."""
        config.validate_executable()
        self._chunked, self._chunk_ops, self.chunks, self.chunk_dim = None, [], 1, None
        self._quick, self._scratch = None, None  # set again with the new configuration
        self.parts = []
        gemv = _one_column(config, self.target_info)  # A is read once: no copy of it pays
        chunks = None if gemv else self._a_chunks(config)
        if chunks is not None:
            return self._setup_chunks(config, *chunks)  # the caller's config, then the merged one
        a_panels = None if gemv else self._panel_packing(config, "in0")
        n_outer = a_panels is not None and self._kernel_n_outer(config)
        a_copy = a_panels is not None and not n_outer and self._kernel_copies_a(config)
        if a_copy:  # the kernel packs A itself: no copy pass before it
            a_panels = None
        plan, pack_op = (None, None) if a_panels or a_copy or gemv else self._packing(config)
        compiled = a_panels[0].main if a_panels else plan.main if plan is not None else config
        b_panels = None if gemv else self._panel_packing(compiled, "in1")
        compiled = b_panels[0].main if b_panels else compiled
        panel_args = {f"{x}_panel": p[0].panel for x, p in (("a", a_panels), ("b", b_panels)) if p}
        primitives, calls = self._primitives(compiled, a_copy=a_copy, n_outer=n_outer, **panel_args)
        itemsize = config.dtype.itemsize
        loops = tuple(
            Loop(
                d.size,
                tuple(s * itemsize for s in d.strides),
                shared=d.exec is exec_t.shared,
                k=d.type is dim_t.k,
            )
            for d in compiled.loop_dims
        )
        nest = LoopNest(loops, calls["main"], calls.get("first"), calls.get("last"))
        self._loopnest = kernels.compile_loopnest(nest, target=self.target_info)
        if self.native:  # addresses are checked by execute(); the call itself takes plain integers
            self._raw = _FFI.cast(RAW_SIGNATURE, self._loopnest.address)
        self.config, self.primitives, self.nest = config, primitives, nest
        self.pack_plan, self._pack_op = plan, pack_op
        self._packed = None if plan is None else packing.aligned_empty(plan.elements, config.dtype.numpy)
        self.panel_plans = {p[0].tensor: p[0] for p in (a_panels, b_panels) if p}
        self.a_copy, self.n_outer = a_copy, n_outer
        self._panel_packs = [
            (plan.tensor, ops, packing.aligned_empty(plan.elements, config.dtype.numpy))
            for plan, ops in (p for p in (a_panels, b_panels) if p)
        ]
        self._scratch = None
        if self._packed is not None or self._panel_packs:
            first = (self._packed, {t: buf for t, _, buf in self._panel_packs})
            self._scratch = ScratchPool(self._new_scratch, items=(first,))
        self._iterations = nest.iterations
        self._set_checks(config)
        # tiny operations run on the calling thread: a pool round trip costs ~10-20 us
        small = _too_small_to_split(config)
        self._threads = 1 if small or self._iterations == 1 else self.num_threads
        return error_t.success

    def _a_chunks(self, config: TensorConfig) -> tuple[TensorConfig, str, int, int, int] | None:
        """``(config', kind, dim, size, count)`` when ``config`` should run in ``count`` chunks of
        ``size`` indices of its dim ``dim``, each chunk's A packed and computed before the next.
        Taken on x86-64 when A (in0) is larger than half of the last-level cache and B (in1) takes
        at most 1/`CHUNK_LLC_SHARE` of it: packing all of A first writes the packed copy to memory
        and the kernels read it back, where a chunk's A block is packed into a buffer that stays in
        the cache for its kernels.

        ``kind`` "k" (`_k_chunks`, tried first): chunks of a K dim, A's block of one chunk a
        contiguous run of memory. ``kind`` "m" (A packed, micro-panels or padded): chunks of the
        outermost loop dim, an M dim that B does not walk (A is then read once, chunk by chunk),
        one index of it reading at most the share of A; ``config'`` is ``config`` with the leading
        loop dims that split one dim (such as the threads' shared dim) merged back into one.
        Measured on a Zen 3 core, fp32 C-order, M chunks against packing all of A, before the cache
        model saw the kernel's roles (these shapes now take K chunks or none): 1 thread 64 x 4096 x
        4096 1.01-1.30x, 32 x 4096 x 4096 (padded A) 1.26x, 128 x 4096 x 4096 1.08x, 256 x 4096 x
        4096 1.04x; 2 threads (chunks split over them, one chunk operation each) 1.19x, 1.19x,
        1.10x, 1.04x."""
        if not (self._chunking and not self._chunk_part and self.pack and self.native):
            return None
        if not self.target_info.chunks_a or config.prim_main not in GEMM_PTYPES:
            return None
        if config.prim.m is None or config.prim.n is None:
            return None
        rows = self.target_info.panel_rows(config.dtype.name)
        llc = features.last_level_cache_bytes()
        a_bytes, b_bytes = (_reach_bytes(config, t) for t in ("in0", "in1"))
        if a_bytes <= llc // 2 or b_bytes > llc // CHUNK_LLC_SHARE:
            return None
        k_chunks = self._k_chunks(config, rows, llc)
        if k_chunks is not None:
            return config, "k", *k_chunks
        if packing.plan_panels(config, rows, tensor="in0") is None and packing.plan_packing(config) is None:
            return None  # A is not packed: nothing to keep in the cache
        dims = list(config.dims)
        outer = next((i for i, d in enumerate(dims) if d.exec is not exec_t.prim), None)
        if outer is None:
            return None
        while outer + 1 < len(dims) and dims[outer + 1].exec is not exec_t.prim:
            d, e = dims[outer], dims[outer + 1]
            if d.type is not e.type or any(s != e.size * t for s, t in zip(d.strides, e.strides, strict=True)):
                break
            dims[outer : outer + 2] = [e.with_(size=d.size * e.size, exec=exec_t.seq)]
        config = config.with_dims(dims)
        d = dims[outer]
        if d.type is not dim_t.m or d.stride_in1 != 0 or d.stride_in0 == 0 or d.size < 2:
            return None
        share, block = llc // CHUNK_LLC_SHARE, a_bytes // d.size  # block: the A of one index of the dim
        fits = [c for c in range(1, d.size) if d.size % c == 0 and c * block <= share]
        if not fits:  # one index alone is over the share (a prim M of 1024 rows of a 4096-deep A)
            return None
        return config, "m", outer, max(fits), d.size // max(fits)

    def _k_chunks(self, config: TensorConfig, rows: int, llc: int) -> tuple[int, int, int] | None:
        """``(dim, size, count)``: K chunks of ``config`` (see `_a_chunks`), or None. The chunked
        dim is the K dim (a loop or the BR dim; not the prim K) with the largest A stride; a chunk
        of it is the largest divisor of its size whose A block takes at most
        1/`K_CHUNK_LLC_SHARE` of the last-level cache (``llc`` bytes) and is one contiguous run
        (A's M extent is its whole leading dimension); C takes at most 1/`K_CHUNK_OUT_SHARE` of it
        (every chunk reads and writes all of C), and the chunk's A is packed into micro-panels of
        ``rows`` rows. The chunks run in order (first touch on the first, last touch on the last),
        each on every thread. Measured on a Zen 3 core, fp32, against packing all of A
        (`bench/gemm_chunks.py`): 1 thread 64 x 4096 x 4096 C-order 1.10-1.24x, 128 x 4096 x 4096
        0.98-1.01x, F-order 4096 x 64 x 4096 1.11x; 2 threads 1.18x, 0.95x, 1.05x."""
        if _reach_bytes(config, "out") > llc // K_CHUNK_OUT_SHARE:
            return None
        dims, prim = config.dims, config.prim
        ks = [i for i, d in enumerate(dims) if d.type is dim_t.k and i != prim.k and d.size > 1]
        if not ks:
            return None
        dim = max(ks, key=lambda i: abs(dims[i].stride_in0))
        d = dims[dim]
        for size in sorted((c for c in range(1, d.size) if d.size % c == 0), reverse=True):
            part = config.with_dims([d.with_(size=size) if i == dim else e for i, e in enumerate(dims)])
            a_bytes = _reach_bytes(part, "in0")
            if a_bytes > llc // K_CHUNK_LLC_SHARE:
                continue
            dense = math.prod(e.size for e in part.dims if e.stride_in0 != 0) * config.dtype.itemsize
            if a_bytes != dense or packing.plan_panels(part, rows, tensor="in0", min_reuse=CHUNK_PANEL_REUSE_N) is None:
                return None  # A's chunk has gaps (a padded leading dim), or would not be panel-packed
            return dim, size, d.size // size
        return None

    def _setup_chunks(
        self, caller: TensorConfig, config: TensorConfig, kind: str, dim: int, size: int, count: int
    ) -> error_t:
        """Set up chunked execution (`_a_chunks`). M chunks: one single-thread operation on a
        chunk's config per thread that runs chunks (each owns its packed buffers), the chunks split
        over the threads statically. K chunks: one operation on every thread per distinct chunk
        config (the first chunk keeps the first touch, the last the last touch), run in order."""
        part = config.with_dims([d.with_(size=size) if i == dim else d for i, d in enumerate(config.dims)])

        def chunk_op(cfg: TensorConfig, threads: int) -> TensorOperation:
            op = TensorOperation(self.target, num_threads=threads, sve_vl=self.sve_vl, pack=self.pack)
            op._chunking, op._chunk_part = False, True
            op.setup_config(cfg)
            return op

        idle: queue.SimpleQueue | None = None
        if kind == "m":
            ops = [chunk_op(part, 1) for _ in range(min(self.num_threads, count))]
            idle = queue.SimpleQueue()
            for op in ops:
                idle.put(op)
            threads = len(ops)
        else:
            touches = [
                (part.prim_first if i == 0 else ptype_t.none, part.prim_last if i == count - 1 else ptype_t.none)
                for i in range(count)
            ]
            built = {
                t: chunk_op(part.with_dims(part.dims, prim_first=t[0], prim_last=t[1]), self.num_threads)
                for t in dict.fromkeys(touches)
            }
            ops = [built[t] for t in touches]
            threads = ops[0]._threads
        first, item, d = ops[0], config.dtype.itemsize, config.dims[dim]
        steps = tuple(size * s * item for s in d.strides)
        self.config, self.primitives, self.nest, self._loopnest = caller, first.primitives, first.nest, first._loopnest
        self.pack_plan, self.panel_plans = first.pack_plan, first.panel_plans
        self.a_copy, self.n_outer = first.a_copy, first.n_outer
        self._chunked, self._chunk_ops, self.chunks, self.chunk_dim = (idle, count, steps), ops, count, dim
        self._iterations = count
        self._set_checks(config)
        self._threads = threads
        return error_t.success

    def _run_chunks(self, a0: int, a1: int, ao: int) -> None:
        """Every chunk (`_a_chunks`): its A packed, then its kernels; M chunks on up to one thread
        per chunk operation, K chunks in order; addresses in the config's roles."""
        idle, count, (s0, s1, so) = self._chunked
        if idle is None:  # K chunks: each chunk operation splits its chunk over the threads
            for i, op in enumerate(self._chunk_ops):
                op._pack_and_run(a0 + i * s0, a1 + i * s1, ao + i * so)
            return

        def run(begin: int, end: int) -> None:
            op = idle.get()
            try:
                for i in range(begin, end):
                    op._pack_and_run(a0 + i * s0, a1 + i * s1, ao + i * so)
            finally:
                idle.put(op)

        if self._threads == 1:
            run(0, count)
        else:
            parallel.run_range(run, count, self._threads)

    def _packing(self, config: TensorConfig) -> tuple[packing.PackPlan | None, TensorOperation | None]:
        """The packing plan of in0 and the copy operation that performs it (None, None when
        packing is off, does not pay, or the copy cannot be generated)."""
        plan = packing.plan_packing(config) if self.pack else None
        if plan is None:
            return None, None
        op = TensorOperation(self.target, num_threads=self.num_threads, sve_vl=self.sve_vl, pack=False)
        try:
            op.setup_config(optimizer.optimize(plan.copy, thread_target=self.num_threads))
        except SetupError:
            return None, None
        return plan, op

    @property
    def packed_operands(self) -> frozenset[str]:
        """The operands ("in0", "in1", config roles) that ``execute`` copies into packed buffers
        before the kernels run (padded A, or x86-64 micro-panels); their layouts are absorbed."""
        return frozenset({"in0"} if self.pack_plan is not None else ()) | frozenset(self.panel_plans)

    def _panel_packing(self, config: TensorConfig, tensor: str) -> tuple[packing.PanelPlan, list] | None:
        """The micro-panel packing of ``tensor`` (x86-64 targets run natively) and its copy
        operations with their (source, buffer) element offsets; None when packing is off or
        does not pay (`minijit.packing.plan_panels`)."""
        if not self.pack or not self.native or not self.target_info.packs_panels:
            return None
        t = self.target_info
        width = t.panel_rows(config.dtype.name) if tensor == "in0" else t.panel_width()
        reuse = CHUNK_PANEL_REUSE_N if self._chunk_part and tensor == "in0" else None
        plan = packing.plan_panels(config, width, tensor=tensor, min_reuse=reuse)
        if plan is None:
            return None
        ops = []
        for copy, src, dst in plan.copies:
            op = TensorOperation(self.target, num_threads=self.num_threads, sve_vl=self.sve_vl, pack=False)
            op._private_out = True
            try:
                op.setup_config(optimizer.optimize(copy, thread_target=self.num_threads))
            except SetupError:
                return None
            ops.append((op, src, dst))
        return plan, ops

    def _kernel_n_outer(self, config: TensorConfig) -> bool:
        """Whether the x86-64 BRGEMM kernel, its A packed in micro-panels, should walk its N blocks
        outermost (``n_outer``: for each register block of columns, every M block; the BLIS order)
        instead of its M blocks: C is then read and written down its columns, `N_OUTER_MIN_RUN`
        bytes or more each, which the prefetchers stream, where the M-outer order touches each C
        block ``ldc`` apart and waits on its misses; the B columns of a block stay in L1, and the
        call's whole A block (prim M x K x BR) is re-read once per block of columns, so it must
        stay in the cache: at most the last-level cache / `N_OUTER_LLC_SHARE`. Measured on a Zen 3
        core, fp32 C-order, 1 thread, against the M-outer order: 4096^2 x 64 1.53x (above numpy),
        2048^2 x 32 1.76x, 4096^2 x 128 1.26x, 2048^2 x 256 1.08x, 1024^3 (A block 4 MiB) 1.06x;
        2048^3 (8 MiB) 0.96x and 4096^3 (16 MiB) 0.69x (excluded by the share); 8192 x 128 x 128
        (prim M 128: runs of 512 B) 0.93x (excluded by the run). Never in a chunk operation
        (`_k_chunks`: its A, just packed, is read once in the M-outer order; 8/32/64/128 x 4096 x
        4096 C-order 1.03-1.14x the n_outer order)."""
        if self._chunk_part:
            return False
        roles, dims = config.prim, config.dims
        size = lambda role: 1 if role is None else dims[role].size  # noqa: E731
        if roles.m is None or roles.n is None:
            return False
        item = config.dtype.itemsize
        block = size(roles.m) * size(roles.k) * size(roles.br) * item
        return (
            size(roles.m) * item >= N_OUTER_MIN_RUN and block <= features.last_level_cache_bytes() // N_OUTER_LLC_SHARE
        )

    def _kernel_copies_a(self, config: TensorConfig) -> bool:
        """Whether the x86-64 BRGEMM should pack A itself (``a_copy``) instead of a copy pass into
        micro-panels: the prim M has unit stride in in0, the kernel's stack buffer fits
        (`minijit.kernels.x86_64.brgemm.a_copy_fits`), one call's A (prim M x K x BR) takes at
        most half of L2, and at most `A_COPY_MAX_REUSE` calls read the same A block (the loops
        that leave in0 in place). The kernel reads the caller's A once per call, in strided
        columns: from L2 that hides behind the FMAs, from L3 or memory it does not, and a panel
        copy made once serves every call that re-reads A. Measured on a Zen 3 core, fp32, 1 thread:
        256^3 85-88 -> 90-95 GFLOPS, 256 x 1024 x 256 (2 calls per A block) +4 %, 128 x 2048 x 256
        (4) +5 %; the seed's 32^3 prims (32 calls) -2..-5 %, 512^3 (A block 1 MiB) -4 %, 2048^3 -13 %."""
        if self._chunk_part or not self.target_info.copies_a:  # a chunk's A comes from memory: one copy pass
            return False
        roles, dims = config.prim, config.dims
        size = lambda role: 1 if role is None else dims[role].size  # noqa: E731
        if roles.m is None or (size(roles.m) > 1 and dims[roles.m].stride_in0 != 1):
            return False
        block = size(roles.m) * size(roles.k) * size(roles.br) * config.dtype.itemsize
        reuse = math.prod(d.size for d in config.loop_dims if d.stride_in0 == 0)
        if block > features.cache_geometries()[1].size // 2 or reuse > A_COPY_MAX_REUSE:
            return False
        sizes = (size(roles.m), size(roles.n), size(roles.k), size(roles.br))
        return self.target_info.a_copy_fits(*sizes, config.dtype.name)

    def _new_scratch(self) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """One call's packed buffers: A's (`pack_plan`) or None, and the micro-panel buffers."""
        dtype = self._np_dtype
        packed = None if self.pack_plan is None else packing.aligned_empty(self.pack_plan.elements, dtype)
        return packed, {t: packing.aligned_empty(buf.size, dtype) for t, _, buf in self._panel_packs}

    def _pack_panels(self, a0: int, a1: int, bufs: dict[str, np.ndarray]) -> tuple[int, int]:
        """Copy A (at address ``a0``) and/or B (``a1``) into this call's micro-panel buffers
        ``bufs``; returns the addresses the kernels read."""
        addr = {"in0": a0, "in1": a1}
        for tensor, ops, _ in self._panel_packs:
            buf = bufs[tensor]
            item, base = buf.itemsize, buf.ctypes.data
            for op, src, dst in ops:
                op.execute_ptr(addr[tensor] + src * item, 0, base + dst * item)
            addr[tensor] = base
        return addr["in0"], addr["in1"]

    def _primitives(
        self,
        cfg: TensorConfig,
        a_panel: int | None = None,
        b_panel: int | None = None,
        a_copy: bool = False,
        n_outer: bool = False,
    ) -> tuple[dict[str, Any], dict[str, Call]]:
        """Generate first/main/last kernels and the calls the loop nest makes to them (``a_panel``,
        ``b_panel``: in0 / in1 are packed in x86-64 micro-panels that many elements apart)."""
        dims, roles, main = cfg.dims, cfg.prim, cfg.prim_main
        common = {"dtype": cfg.dtype.name, "target": self.target_info}
        prims: dict[str, Any] = {}
        calls: dict[str, Call] = {}
        fused: dict[str, str] = {}  # touches the main kernel applies itself: first zero, last relu

        def stride(role: int | None, tensor: str) -> int:
            return 0 if role is None else dims[role].stride(tensor)

        def size(role: int | None) -> int:
            return 1 if role is None else dims[role].size

        def fail(role: int | None, what: str) -> SetupError:
            at = f"dim {role} ({dims[role]})" if role is not None else "prim dims"
            return SetupError(error_t.wrong_stride, f"{at}: {what}", dim=role)

        if main in GEMM_PTYPES:
            m, n, k, br = roles.m, roles.n, roles.k, roles.br

            def unit(role: int | None, tensor: str) -> bool:  # a size-1 dim may have any stride
                return size(role) == 1 or stride(role, tensor) == 1

            trans_c = not unit(m, "out")  # a strided y: one column of C, the kernels' transposed C
            if trans_c and size(n) != 1:
                raise fail(
                    m,
                    f"prim M needs unit stride in out (column-major C), got {stride(m, 'out')}; only a C of one"
                    " column (prim N of size 1) may be strided",
                )
            trans_a = not unit(m, "in0")
            if trans_a and not unit(k, "in0"):
                raise fail(m, "prim M (or prim K, transposed) needs unit stride in in0")
            trans_b = not unit(k, "in1")
            if trans_b and not unit(n, "in1"):
                raise fail(k, "prim K (or prim N, transposed) needs unit stride in in1")
            lda = stride(m if trans_a else k, "in0")
            ldb = stride(k if trans_b else n, "in1")
            ldc = stride(m, "out") if trans_c else stride(n, "out")
            # x86-64: a first touch zero / last touch relu runs inside the kernel when every K is in
            # the prim (each call then writes its C block once, final) and the kernel is the vector
            # BRGEMM or the GEMV; C crosses memory once
            if self.target_info.fuses_touches and not any(d.type is dim_t.k for d in cfg.loop_dims):
                vector = size(n) == 1 or not (trans_a or trans_c)  # the GEMV kernel, or the vector BRGEMM
            else:
                vector = False
            if vector:
                fused = {
                    w: p.name
                    for w, p, f in (("first", cfg.prim_first, ptype_t.zero), ("last", cfg.prim_last, ptype_t.relu))
                    if p is f
                }
            prims["main"] = self._kernel(
                kernels.brgemm,
                size(m),
                size(n),
                size(k),
                size(br),
                trans_a=trans_a,
                trans_b=trans_b,
                trans_c=trans_c,
                **{name: v for name, v in (("a_panel", a_panel), ("b_panel", b_panel)) if v is not None},
                **{f"{x}_c": True for x in fused.values()},
                **({"a_copy": True} if a_copy else {}),
                **({"n_outer": True} if n_outer and not trans_a else {}),
                **common,
            )
            calls["main"] = Call(
                prims["main"].address, ("in0", "in1", "out", lda, ldb, ldc, stride(br, "in0"), stride(br, "in1"))
            )
        elif main in UNARY_PTYPES:
            m, n = roles.m, roles.n
            src = "out" if main is ptype_t.zero else "in0"
            if stride(m, src) != 1 and size(m) > 1:
                raise fail(m, f"the unit-stride prim dim of {src} must be the first prim role")
            trans = main is not ptype_t.zero and stride(m, "out") != 1 and size(m) > 1
            if trans and stride(n, "out") != 1 and size(n) > 1:
                raise fail(n, "a transposing unary op needs a unit-stride prim dim in out")
            ldb = stride(m if trans else n, "out")
            # B rows (columns) back to back, e.g. a packed panel: unmasked edge stores (plain copies
            # only into a private buffer: in place, a spill would clobber elements not yet read)
            dense = ldb == size(n) if trans else self._private_out and ldb == size(m) and size(n) > 1
            prims["main"] = self._kernel(
                kernels.unary, size(m), size(n), trans_b=trans, ptype=main.name, dense_b=dense, **common
            )
            a_ptr = "out" if main is ptype_t.zero else "in0"
            calls["main"] = Call(prims["main"].address, (a_ptr, "out", stride(n, src), ldb))
        elif main in BINARY_PTYPES:
            m, n = roles.m, roles.n
            for t in TENSORS:
                if stride(m, t) != 1 and size(m) > 1:
                    raise fail(m, f"binary ops need unit stride in {t} on the first prim dim, got {stride(m, t)}")
            prims["main"] = self._kernel(kernels.binary, size(m), size(n), ptype=main.name, **common)
            calls["main"] = Call(
                prims["main"].address,
                ("in0", "in1", "out", stride(n, "in0"), stride(n, "in1"), stride(n, "out")),
            )
        else:
            raise SetupError(error_t.wrong_ptype, f"main primitive {main.name} is not supported")

        # first/last touch: a unary op in place on the output block (column-major, unit stride M;
        # a transposing unary main has its unit-stride out dim in the N role)
        out_m, out_n = (roles.m, roles.n)
        if stride(out_m, "out") != 1 and size(out_m) > 1:
            out_m, out_n = out_n, out_m
        for which, ptype in (("first", cfg.prim_first), ("last", cfg.prim_last)):
            if ptype in (ptype_t.none, ptype_t.copy) or which in fused:  # copy in place changes nothing
                continue
            if ptype not in UNARY_PTYPES:
                raise SetupError(error_t.wrong_ptype, f"{which} touch must be none/zero/relu/copy, got {ptype.name}")
            if stride(out_m, "out") != 1 and size(out_m) > 1:
                raise fail(out_m, f"{which} touch needs unit stride in out on the first prim dim")
            prims[which] = self._kernel(kernels.unary, size(out_m), size(out_n), ptype=ptype.name, **common)
            ldo = stride(out_n, "out")
            calls[which] = Call(prims[which].address, ("out", "out", ldo, ldo))
        return prims, calls

    def _kernel(self, generator, *args, **kwargs):
        try:  # every target generates every transposed BRGEMM form itself (no NEON stand-in on SVE)
            return generator(*args, **kwargs)
        except NotImplementedError as e:
            raise SetupError(error_t.wrong_ptype, f"target {self.target}: {e}") from None
        except ValueError as e:
            raise SetupError(error_t.wrong_size, f"target {self.target}: {e}") from None

    # -- execute -------------------------------------------------------------------------------
    def _check(self, name: str, arr: Any, used: bool, offset: int, label: str) -> int:
        """TypeError/ValueError naming the caller's argument ``label`` unless ``arr`` is safe to
        hand to machine code as tensor ``name`` (the rule of `minijit.arrays`); returns the
        address of element ``offset``. Runs three times per ``execute``: it reads each attribute
        once and calls nothing for an array that passes."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{label} must be a numpy array, got {type(arr).__name__}")
        dtype = arr.dtype
        if dtype is not self._np_dtype and dtype != self._np_dtype:
            raise TypeError(f"{label} has dtype {dtype}, the operation was set up for {self._np_dtype}")
        flags = arr.flags
        if name == "out" and not flags.writeable:
            raise ValueError("out is read-only")
        if not used:
            return arrays.address(arr)
        if not flags.c_contiguous:
            arrays.require_c_contiguous(label, arr.shape, arr.strides, arr.itemsize)
        lo, hi = self._ranges[name]
        if offset + lo < 0 or offset + hi >= arr.size:
            arrays.require_reach(label, lo, hi, offset, arr.size)
        return arrays.address(arr) + offset * dtype.itemsize

    def _arrays(self, in0, in1, out, offsets=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._checked(in0, in1, out, offsets)[:3]

    def _checked(self, in0, in1, out, offsets=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
        """The three arrays in the config's roles (missing inputs replaced, in0/in1 exchanged when
        the optimizer swapped them) and the checked addresses of their origins."""
        cfg = self.config
        if cfg is None:
            raise RuntimeError("execute before a successful setup")
        o0, o1, oo = (0, 0, 0) if offsets is None else arrays.check_offsets(offsets)
        labels = ("in0", "in1")
        if cfg.inputs_swapped:
            in0, in1, o0, o1, labels = in1, in0, o1, o0, ("in1", "in0")
        uses_in0, uses_in1 = self._uses
        if in0 is None and uses_in0:
            raise TypeError(f"{labels[0]} is required for this operation")
        if in1 is None and uses_in1:
            raise TypeError(f"{labels[1]} is required for this operation")
        if in0 is None:
            in0, o0 = out, oo
        if in1 is None:
            in1, o1 = in0, o0
        a0 = self._check("in0", in0, uses_in0, o0, labels[0])
        a1 = self._check("in1", in1, uses_in1, o1, labels[1])
        ao = self._check("out", out, True, oo, "out")
        return in0, in1, out, a0, a1, ao

    def execute(self, in0: Array, in1: Array, out: np.ndarray, *, offsets: Offsets = None) -> None:
        """Run the operation on numpy arrays (``in1`` None for unary ops, ``in0`` None for zero).

        Arrays must be C-contiguous (numpy's default layout, any shape): the configured strides
        count their elements from the first one, or from element ``offsets[i]`` of in0, in1, out
        (elements; lets negative strides reach back into a buffer). Every element the strides
        reach must lie inside each array. A strided view, a transpose or a Fortran-order array
        raises ValueError naming it (`minijit.arrays`), as do bad dtypes (TypeError), before
        anything runs. ``out`` is updated in place: with first touch ``none`` the main primitive
        accumulates into it (C += A·B for a GEMM), so initialize it or use first touch ``zero``.
        """
        quick, addrs = self._quick, None  # quick: (dtype, bytes each array must hold) or None
        if quick is not None and offsets is None:
            x0, x1 = (in1, in0) if self.config.inputs_swapped else (in0, in1)  # the config's roles
            addrs = arrays.quick_addresses(x0, x1, out, *quick)
        if addrs is None:  # the full checks: they raise naming the argument, or pass
            in0, in1, out, a0, a1, ao = self._checked(in0, in1, out, offsets)
        else:
            in0, in1, (a0, a1, ao) = x0, x1, addrs
        self._dispatch(in0, in1, out, a0, a1, ao)

    def _dispatch(self, in0, in1, out, a0: int, a1: int, ao: int) -> None:
        """Run on checked arrays and addresses (in the config's roles): the parts of a peeled
        operation in order, the chunks, or the packing copies and then the loop nest."""
        if self.parts:  # the caller's config: never swapped; each part in its own roles
            item = self._np_dtype.itemsize
            for op, (o0, o1, oo) in self.parts:
                args = (in0, in1, out, a0 + o0 * item, a1 + o1 * item, ao + oo * item)
                if op.config.inputs_swapped:
                    args = (in1, in0, out, args[4], args[3], args[5])
                op._dispatch(*args)
            return
        if self._chunked is not None:  # native only: the operands' reach was checked above
            self._run_chunks(a0, a1, ao)
            return
        if self._scratch is not None:
            scratch = self._scratch.acquire()  # this call's packed buffers
            try:
                packed, bufs = scratch
                if bufs:  # native only: the operands' reach was checked above
                    a0, a1 = self._pack_panels(a0, a1, bufs)
                    in0, in1 = bufs.get("in0", in0), bufs.get("in1", in1)
                if packed is not None:
                    origin = (a0 - in0.ctypes.data) // in0.itemsize
                    self._pack_op.execute(in0, None, packed, offsets=(origin, 0, 0))
                    in0, a0 = packed, packed.ctypes.data
                self._execute_checked(in0, in1, out, a0, a1, ao)
            finally:
                self._scratch.release(scratch)
            return
        self._execute_checked(in0, in1, out, a0, a1, ao)

    def _execute_checked(self, in0, in1, out, a0: int, a1: int, ao: int) -> None:
        if not self.native:  # emulated: one call, the worker copies the arrays in and out
            views = [_origin_view(arr, addr) for arr, addr in ((in0, a0), (in1, a1), (out, ao))]
            self._loopnest(*views, 0, self._iterations)
            return
        self._run(a0, a1, ao)

    def execute_ptr(self, addr_in0: int, addr_in1: int, addr_out: int) -> None:
        """Unchecked execute on raw addresses (native targets only). The caller guarantees
        that every element the strides reach is valid memory of the right dtype."""
        if self.config is None:
            raise RuntimeError("execute_ptr before a successful setup")
        if not self.native:
            raise ValueError(f"execute_ptr needs a native target; {self.target} is emulated on this host")
        for name, v in (("addr_in0", addr_in0), ("addr_in1", addr_in1), ("addr_out", addr_out)):
            if not isinstance(v, int) or v < 0:
                raise TypeError(f"{name} must be a non-negative int address, got {v!r}")
        if self.parts:  # each part in its own roles
            item = self._np_dtype.itemsize
            for op, (o0, o1, oo) in self.parts:
                op.execute_ptr(addr_in0 + o0 * item, addr_in1 + o1 * item, addr_out + oo * item)
            return
        if self.config.inputs_swapped:
            addr_in0, addr_in1 = addr_in1, addr_in0
        if self._chunked is not None:
            self._run_chunks(addr_in0, addr_in1, addr_out)
            return
        if self._scratch is not None:
            self._pack_and_run(addr_in0, addr_in1, addr_out)
            return
        self._run(addr_in0, addr_in1, addr_out)

    def _pack_and_run(self, a0: int, a1: int, ao: int) -> None:
        """Pack what the operation packs into this call's buffers, then run the kernels (native;
        addresses in the config's roles)."""
        if self._scratch is None:
            self._run(a0, a1, ao)
            return
        scratch = self._scratch.acquire()
        try:
            packed, bufs = scratch
            if bufs:
                a0, a1 = self._pack_panels(a0, a1, bufs)
            if packed is not None:
                self._pack_op.execute_ptr(a0, 0, packed.ctypes.data)
                a0 = packed.ctypes.data
            self._run(a0, a1, ao)
        finally:
            self._scratch.release(scratch)

    def _run(self, a0: int, a1: int, ao: int) -> None:
        """The compiled loop nest over all iterations: on this thread, or split over the native
        team (`minijit.parallel.run_loopnest`; the thread pool where the team cannot run)."""
        if self._threads == 1:
            self._raw(a0, a1, ao, 0, self._iterations)
            return
        parallel.run_loopnest(self._loopnest.address, a0, a1, ao, self._iterations, self._threads)

    def execute_iter(self, in0: Array, in1: Array, out: np.ndarray, *, offsets: Offsets = None) -> None:
        """The pure-Python reference path (seed 004 §5.2 recursion with numpy primitives); same
        arguments and checks as `execute`."""
        in0, in1, out, a0, a1, ao = self._checked(in0, in1, out, offsets)
        pairs = ((in0, a0), (in1, a1), (out, ao))
        origins = [(addr - arr.ctypes.data) // arr.itemsize for arr, addr in pairs]
        flat0, flat1, flat_out = (arr.reshape(-1) for arr, _ in pairs)
        reference.execute_iter(self.config, flat0, flat1, flat_out, offsets=origins)

    # -- inspection ----------------------------------------------------------------------------
    def listing(self) -> str:
        """Assembly of every generated kernel (first/main/last touch and the loop nest)."""
        if self.config is None:
            raise RuntimeError("listing before a successful setup")
        parts = ["\n".join(f"// {line}" for line in [self.target, *str(self.config).splitlines()])]
        if self.parts:
            for i, (op, offsets) in enumerate(self.parts):
                name = ("head", "tail")[i] if len(self.parts) == 2 else f"part {i}"
                parts.append(
                    f"// peeled (minijit.peeling): the {name}, from elements {offsets} of in0, in1, out, set up on"
                    f" its own:\n{_tagged(op.listing(), f'// {name}: ')}"
                )
            return "\n".join(parts)
        if self.blocking is not None:
            parts.append(f"// blocking (minijit.blocking): {self.blocking.reason}")
            parts.append(f"// compiled (minijit.blocking.call_footprint): {self._call_footprint()}")
        if self._chunked is not None:
            idle, count, steps = self._chunked
            if idle is None:
                touches = {(op.config.prim_first.name, op.config.prim_last.name) for op in self._chunk_ops}
                what = (
                    f"// chunked: {count} chunks of K dim {self.chunk_dim} (in0, in1, out {steps} bytes apart), each"
                    " chunk's A (one contiguous run) packed into a buffer that stays in the cache and computed"
                    f" before the next, in order on every thread (first/last touch per chunk: {sorted(touches)});"
                    " the first chunk:"
                )
            else:
                what = (
                    f"// chunked: {count} chunks of the outermost loop dim (in0, in1, out {steps} bytes apart), each"
                    " packed into a buffer that stays in the cache and computed before the next; one chunk:"
                )
            parts.append(what)
            parts.append(_tagged(self._chunk_ops[0].listing(), "// chunk: "))
            return "\n".join(parts)
        if self.pack_plan is not None:
            main = str(self.pack_plan.main).splitlines()[1:]
            parts.append("\n".join(f"// {line}" for line in [self.pack_plan.describe(), "kernels run on:", *main]))
            parts.append(_tagged(self._pack_op.listing(), "// pack: "))
        if self.n_outer:
            parts.append(
                "// kernel order n_outer: each register block of N columns walks every M block (C streamed down"
                " its columns, the call's A block re-read from the cache per block of columns)"
            )
        if self.a_copy:
            parts.append(
                "// pack in0 inside the kernel (a_copy): each M block's first N block stores its A rows into a"
                " stack buffer that the other N blocks read; no copy pass over in0"
            )
        for tensor, ops, _ in self._panel_packs:
            parts.append(f"// {self.panel_plans[tensor].describe()}")
            for i, (op, _, _) in enumerate(ops):
                parts.append(_tagged(op.listing(), f"// pack {tensor} ({i + 1}/{len(ops)}): "))
        for name, k in {**self.primitives, "loopnest": self._loopnest}.items():
            parts.append(f"// ---- {name}: {getattr(k, 'name', name)} at {k.address:#x}\n{k.listing}")
        return "\n".join(parts)

    def _call_footprint(self) -> str:
        """`minijit.blocking.call_footprint` of the compiled GEMM kernel (prim sizes, BR steps)."""
        cfg = self.config
        roles, dims = cfg.prim, cfg.dims
        size = lambda role: 1 if role is None else dims[role].size  # noqa: E731
        item = cfg.dtype.itemsize
        mr = max(1, self._panel_column() // item)
        return blocking.call_footprint(size(roles.m), size(roles.n), size(roles.k), size(roles.br), item, mr)

    def __repr__(self) -> str:
        state = "not set up" if self.config is None else f"{len(self.config.dims)} dims"
        return f"<TensorOperation {self.target} threads={self.num_threads} {state}>"

    # -- read-only views of the set-up plan (benchmarks and tools read these) -------------------
    @property
    def iterations(self) -> int:
        """Iterations the loop nest shares among threads (a chunked operation: its chunk count); 0 before setup."""
        return self._iterations

    @property
    def threads_used(self) -> int:
        """Threads one ``execute`` runs on: 1 for operations too small to split, else at most ``num_threads``."""
        return self._threads

    @property
    def chunk_kind(self) -> str | None:
        """The chunks the operation runs in: "M" (of the outermost loop), "K" (of a K dim) or None (whole)."""
        if self._chunked is None:
            return None
        return "K" if self._chunked[0] is None else "M"

    def call_footprint(self) -> str:
        """What one compiled kernel call reads (`minijit.blocking.call_footprint`); needs a GEMM blocking."""
        if self.config is None or self.blocking is None:
            raise RuntimeError("call_footprint needs an operation set up with a GEMM blocking")
        return self._call_footprint()

    # -- the Operation protocol ------------------------------------------------------------------
    @property
    def flops(self) -> int:
        """Floating-point operations of one call (`TensorConfig.flops`); 0 before setup."""
        return 0 if self.config is None else self.config.flops()

    def info(self) -> dict[str, Any]:
        """Target, dtype, dim sizes, main kernel and thread count of the set-up operation."""
        cfg = self.config
        main = self.primitives.get("main") if cfg is not None else None
        return {
            "target": self.target,
            "dtype": None if cfg is None else cfg.dtype.name,
            "shapes": None if cfg is None else [d.size for d in cfg.dims],
            "kernel": getattr(main, "name", None),
            "threads": self.num_threads,
            "flops": self.flops,
        }


def _quick_check(config: TensorConfig, ranges: dict, dtype: np.dtype) -> tuple | None:
    """The arguments of `minijit.arrays.quick_addresses` after the arrays for an operation that
    reads both inputs from their first elements on (GEMM/BRGEMM, binary ops): the dtype and the
    bytes each array must hold; None where `execute` always runs the full checks."""
    if not (config.uses_in0 and config.uses_in1) or any(ranges[t][0] < 0 for t in TENSORS):
        return None
    return (dtype, *((ranges[t][1] + 1) * dtype.itemsize for t in TENSORS))


def _one_column(config: TensorConfig, target: targets.CpuTarget) -> bool:
    """Whether ``config`` is a GEMV on a target with a GEMV kernel (x86-64): a GEMM/BRGEMM whose N
    dims all have size 1, any layout (x or y strided, A either way). The GEMV kernel reads each
    element of A once, in sequential streams, so no copy of an operand pays: no panels, padding or
    chunks."""
    if not target.has_gemv or config.prim_main not in GEMM_PTYPES:
        return False
    return math.prod(d.size for d in config.dims if d.type is dim_t.n) == 1


def _too_small_to_split(config: TensorConfig) -> bool:
    """Whether ``config`` runs faster on the calling thread than split over a team: GEMMs by
    their multiply-adds (`PARALLEL_MIN_ELEMENTS`), elementwise ops by the bytes they read and
    write (`PARALLEL_MIN_BYTES`)."""
    if config.prim_main in GEMM_PTYPES:
        return config.num_elements() < PARALLEL_MIN_ELEMENTS
    tensors = 1 + config.uses_in0 + config.uses_in1  # out, and the inputs it reads
    return config.num_elements() * config.dtype.itemsize * tensors < PARALLEL_MIN_BYTES


def _tagged(listing: str, tag: str) -> str:
    """A sub-operation's listing with its comment lines marked by ``tag``."""
    return "\n".join(line.replace("// ", tag, 1) if line.startswith("// ") else line for line in listing.splitlines())


def _origin_view(arr: np.ndarray, address: int) -> np.ndarray:
    """A view of C-contiguous ``arr`` whose first element is at ``address`` and whose memory span
    is still the whole array (what the emulation worker copies in and out)."""
    flat = arr.reshape(-1)
    offset = (address - arr.ctypes.data) // arr.itemsize
    if offset == 0 or flat.size == 0:
        return arr
    last = flat.size - 1 - offset
    # two by two elements: origin, element 0, the last element, origin again
    return as_strided(flat[offset:], shape=(2, 2), strides=(-offset * arr.itemsize, last * arr.itemsize))
