"""`TensorOperation`: setup/execute of a tensor operation on JIT-generated primitives.

    op = TensorOperation(target="native")
    op.setup("fp32", "zero", "brgemm", "relu", dim_types, exec_types, dim_sizes,
             strides_in0, strides_in1, strides_out)
    op.execute(A, B, C)

Strides are in elements of each array's dense block (C order, F order or any axis
permutation), from its lowest address or from an explicit element offset
(`minijit.arrays` states the rule;
negative strides need an offset). `setup` validates the configuration (raising
`SetupError` naming the offending dimension), runs the optimizer when asked or
when no prim dims are given, and builds a frozen plan tree (`minijit.plan`): the
first-touch, main and last-touch primitives and the compiled loop nest
(`minijit.kernels.loopnest`), under the packing copies, chunks or peeled parts the
mode choices (`minijit.schedule`) pick. `execute` checks the arrays (dtype,
writeability, one dense block, every reachable element inside each array) before any
machine code runs, then runs the plan (`minijit.plan.run`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit import arrays, optimizer, packing, parallel, reference, schedule, targets
from minijit import plan as plans
from minijit import tune as tuning
from minijit.arrays import Offsets
from minijit.errors import error_t
from minijit.ir import TensorConfig
from minijit.kernels.loopnest import LoopNest
from minijit.operation import Operation
from minijit.schedule import PARALLEL_MIN_BYTES, PARALLEL_MIN_ELEMENTS, Rules

__all__ = ["PARALLEL_MIN_BYTES", "PARALLEL_MIN_ELEMENTS", "TensorOperation"]

TENSORS = ("in0", "in1", "out")
Array = np.ndarray | None  # an input; None where the operation does not use it
_run = plans.run  # the one runner (`minijit.plan.run`), bound once: execute is a hot path


class TensorOperation(Operation):
    """A tensor operation compiled for one target.

    ``target``: "native" (AVX-512/AVX2 on x86-64, SVE/NEON on AArch64),
    "x86_64-avx512", "x86_64-avx2", "aarch64-neon", "aarch64-sve" (AArch64 on a
    non-ARM host runs in the qemu emulation worker at ``sve_vl`` bits; for
    correctness, not speed), or "cuda" (GEMM/BRGEMM on tensor cores, unary/binary
    elementwise ops: returns a `minijit.cuda.CudaTensorOperation`, same setup/execute
    interface; ``device=`` and ``driver=`` go to it). ``target`` stays the name;
    ``target_info`` is the `minijit.targets` object.
    ``num_threads`` defaults to MINIJIT_NUM_THREADS / OMP_NUM_THREADS / the CPU count.
    ``pack=False`` turns packed operands (and chunks) off; ``rules`` (`minijit.schedule.Rules`)
    switches single mode choices off. A GEMM's blocking comes from this CPU's tuned entry when one
    exists (`minijit.tune_store`, written by ``minijit tune``), else the cache model; ``tune=True``
    (or a budget in seconds) times the model's best few at `setup` when no entry exists and stores
    the winner (`minijit.tune`).

    After `setup`: ``plan`` (the frozen `minijit.plan.Plan` that ``execute`` runs), ``config``
    (the compiled `TensorConfig`), ``blocking`` (the cache model's choice), ``pack_plan`` /
    ``panel_plans`` / ``packed_operands`` (what ``execute`` copies before the kernels run),
    ``a_copy`` (x86-64: the BRGEMM kernel packs A itself), ``n_outer`` (x86-64: the kernel walks
    its N blocks outermost), ``chunks`` and ``chunk_dim`` (x86-64: the operation runs in that many
    chunks of that dim, a K dim or the outer M loop), ``parts`` (peeled parts), ``listing()``.

    A set-up operation is not changed by ``execute``: the packed buffers a call writes come from a
    pool, one set per call running at once, so one operation may run from many threads
    (multi-threaded calls share the one native team, which takes them in turn).
    """

    @classmethod
    def _implementation(cls, target: str = "native", *args: Any, **kwargs: Any) -> tuple[type, tuple, dict]:
        """The class serving ``target`` and its arguments (`minijit.operation.OperationMeta`)."""
        if target == "cuda":
            unknown = set(kwargs) - {"device", "driver"}
            if unknown or args:
                raise TypeError(f"target 'cuda' takes no {', '.join(sorted(unknown)) or 'positional'} argument")
            return targets.get("cuda").operation_class(cls), (), kwargs
        return cls, (target, *args), kwargs

    def __init__(
        self,
        target: str = "native",
        *,
        num_threads: int | None = None,
        sve_vl: int = 128,
        pack: bool = True,
        rules: Rules | None = None,
        tune: bool | float = False,
    ) -> None:
        self.target_info = targets.get_cpu(target, sve_vl=sve_vl)
        self.target = self.target_info.name
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        if rules is not None and not isinstance(rules, Rules):
            raise TypeError(f"rules must be a minijit.schedule.Rules, got {type(rules).__name__}")
        self.num_threads = num_threads or parallel.default_threads()
        self.sve_vl = sve_vl
        self.native = self.target_info.native
        self.pack = bool(pack)
        if isinstance(tune, bool):
            tuner = tuning.setup_tuner() if tune else None
        elif isinstance(tune, int | float) and tune > 0:
            tuner = tuning.setup_tuner(float(tune))
        else:
            raise ValueError(f"tune must be a bool or a positive number of seconds, got {tune!r}")
        self._env = plans.Env(
            self.target_info, self.num_threads, self.native, self.pack, rules or schedule.DEFAULT_RULES, tuner=tuner
        )
        self._install(None)

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
        self._reset()
        lists = (dim_types, exec_types, dim_sizes, strides_in0, strides_in1, strides_out)
        config = TensorConfig.from_lists(self._config_dtype(dtype, prim_main), prim_first, prim_main, prim_last, *lists)
        if optimize is None:
            optimize = not config.has_prims
        options = {
            "thread_target": thread_target,
            "max_kernel_size": max_kernel_size,
            "min_kernel_size": min_kernel_size,
        }
        return self._setup_lists(config, dtype, optimize, options)

    # the two steps of `setup` a target's operation replaces (`minijit.cuda.operation`)
    def _reset(self) -> None:
        """Leave the operation without a configuration (a failed setup keeps it so)."""
        self._install(None)

    def _config_dtype(self, dtype, prim_main) -> Any:
        """The dtype `TensorConfig.from_lists` gets for ``setup``'s ``dtype``."""
        return dtype

    def _setup_lists(self, config: TensorConfig, dtype, optimize: bool, options: dict[str, Any]) -> error_t:
        """`setup` after parsing: plan ``config`` as given, or optimized with ``options``."""
        if not optimize:
            self._install(plans.configured(config, self._env))
        else:
            self._install(plans.optimized(config, self._env, **options))
        return error_t.success

    def setup_config(self, config: TensorConfig) -> error_t:
        """Set up from a validated `TensorConfig` (e.g. the result of `minijit.optimize`).

        GEMM/BRGEMM configs whose A panels would thrash L1 or L2 (or whose A is transposed) get a
        packed A (`minijit.packing`; ``pack=False`` at construction turns that off): each
        ``execute`` first copies A into a panel-ordered buffer, and the kernels read that.
        ``self.config`` stays the caller's configuration; ``pack_plan`` says what was packed and why."""
        self._install(None)
        self._install(plans.configured(config, self._env))
        return error_t.success

    def _install(self, plan: plans.Plan | None) -> None:
        """Make ``plan`` the operation's (None: not set up), with what `execute` checks the arrays
        against: the config's reach per tensor (elements), its dtype, which inputs it reads, and
        the quick path's arguments."""
        self.plan = plan
        self.config: TensorConfig | None = None if plan is None else plan.config
        self._body = None if plan is None else plan.body
        self._quick: tuple | None = None  # `_quick_check`: the fast path of execute's array checks
        if plan is None:
            self._ranges: dict[str, tuple[int, int]] = {}
            self._np_dtype: np.dtype | None = None
            self._uses = (True, True)
            return
        config = plan.config
        self._ranges = {t: config.offset_range(t) for t in TENSORS}
        self._np_dtype = np.dtype(config.dtype.numpy)
        self._uses = (config.uses_in0, config.uses_in1)
        self._quick = _quick_check(config, self._ranges, self._np_dtype)

    # -- execute -------------------------------------------------------------------------------
    def execute(self, in0: Array, in1: Array, out: np.ndarray, *, offsets: Offsets = None) -> None:
        """Run the operation on numpy arrays (``in1`` None for unary ops, ``in0`` None for zero).

        Each array must fill one dense block (C order, F order or any axis permutation, any
        shape; `minijit.arrays`): the configured strides count elements of that block from its
        lowest address, or from element ``offsets[i]`` of in0, in1, out (elements; lets negative
        strides reach back into a buffer). Every element the strides reach must lie inside each
        block. A view with gaps or negative strides raises ValueError naming it, as do bad dtypes
        (TypeError), before anything runs. ``out`` is updated in place: with first touch ``none`` the main primitive
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
        _run(self._body, a0, a1, ao, None if self.native else _blocks(in0, in1, out))

    def execute_ptr(self, addr_in0: int, addr_in1: int, addr_out: int) -> None:
        """Unchecked execute on raw addresses (native targets only). The caller guarantees
        that every element the strides reach is valid memory of the right dtype."""
        if self.plan is None:
            raise RuntimeError("execute_ptr before a successful setup")
        if not self.native:
            raise ValueError(f"execute_ptr needs a native target; {self.target} is emulated on this host")
        for name, v in (("addr_in0", addr_in0), ("addr_in1", addr_in1), ("addr_out", addr_out)):
            if not isinstance(v, int) or v < 0:
                raise TypeError(f"{name} must be a non-negative int address, got {v!r}")
        if self.plan.swapped:  # the config's roles
            addr_in0, addr_in1 = addr_in1, addr_in0
        _run(self._body, addr_in0, addr_in1, addr_out)

    def execute_iter(self, in0: Array, in1: Array, out: np.ndarray, *, offsets: Offsets = None) -> None:
        """The pure-Python reference path (seed 004's recursion with numpy primitives); same
        arguments and checks as `execute`."""
        in0, in1, out, a0, a1, ao = self._checked(in0, in1, out, offsets)
        pairs = ((in0, a0), (in1, a1), (out, ao))
        origins = [(addr - arr.ctypes.data) // arr.itemsize for arr, addr in pairs]
        flat0, flat1, flat_out = (arr.reshape(-1) for arr, _ in pairs)
        reference.execute_iter(self.config, flat0, flat1, flat_out, offsets=origins)

    def _check(self, name: str, arr: Any, used: bool, offset: int, label: str) -> tuple[np.ndarray, int]:
        """TypeError/ValueError naming the caller's argument ``label`` unless ``arr`` is safe to
        hand to machine code as tensor ``name`` (the rule of `minijit.arrays`); returns the array
        as a C-contiguous view of its dense block (``arr`` itself when C-contiguous or unused) and
        the address of element ``offset`` of that block. Runs three times per ``execute``: it
        reads each attribute once and calls nothing for a C-contiguous array that passes."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{label} must be a numpy array, got {type(arr).__name__}")
        dtype = arr.dtype
        if dtype is not self._np_dtype and dtype != self._np_dtype:
            raise TypeError(f"{label} has dtype {dtype}, the operation was set up for {self._np_dtype}")
        flags = arr.flags
        if name == "out" and not flags.writeable:
            raise ValueError("out is read-only")
        if not used:
            return arr, arrays.address(arr)
        if not flags.c_contiguous:  # F order or permuted axes: the block it fills, else ValueError
            arr = arrays.dense_view(label, arr)
        lo, hi = self._ranges[name]
        if offset + lo < 0 or offset + hi >= arr.size:
            arrays.require_reach(label, lo, hi, offset, arr.size)
        return arr, arrays.address(arr) + offset * dtype.itemsize

    def _checked(self, in0, in1, out, offsets=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
        """The three arrays in the config's roles (missing inputs replaced, in0/in1 exchanged when
        the optimizer swapped them; each used one as a C-contiguous view of its dense block) and
        the checked addresses of their origins."""
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
        in0, a0 = self._check("in0", in0, uses_in0, o0, labels[0])
        in1, a1 = self._check("in1", in1, uses_in1, o1, labels[1])
        out, ao = self._check("out", out, True, oo, "out")
        return in0, in1, out, a0, a1, ao

    # -- inspection ----------------------------------------------------------------------------
    def listing(self) -> str:
        """The plan tree as comment lines (`minijit.plan.listing`) over the assembly of every
        generated kernel (first/main/last touch and the loop nest)."""
        if self.plan is None:
            raise RuntimeError("listing before a successful setup")
        return plans.listing(self.plan, self.target_info)

    def __repr__(self) -> str:
        state = "not set up" if self.config is None else f"{len(self.config.dims)} dims"
        return f"<TensorOperation {self.target} threads={self.num_threads} {state}>"

    # -- read-only views of the set-up plan (benchmarks and tools read these) -------------------
    @property
    def blocking(self):
        """The cache model's choice (`minijit.blocking.Blocking`; a peeled operation: its head's), or None."""
        return None if self.plan is None else self.plan.blocking

    @property
    def _kernel(self) -> plans.Kernel | None:
        return None if self.plan is None else plans.head(self.plan)

    @property
    def primitives(self) -> dict[str, Any]:
        """The first/main/last-touch kernels (a chunked or peeled operation: its first chunk's / head's)."""
        k = self._kernel
        return {} if k is None else dict(k.primitives)

    @property
    def nest(self) -> LoopNest | None:
        """The `LoopNest` the kernels run in (first chunk's / head's), or None."""
        k = self._kernel
        return None if k is None else k.nest

    @property
    def loopnest(self) -> Any:
        """The compiled loop nest (a `minijit.runtime.Kernel`: ``address``, ``code``, ``listing``), or None."""
        k = self._kernel
        return None if k is None else k.loopnest

    @property
    def a_copy(self) -> bool:
        """x86-64: the BRGEMM kernel packs A itself."""
        k = self._kernel
        return k is not None and k.a_copy

    @property
    def n_outer(self) -> bool:
        """x86-64: the BRGEMM kernel walks its N blocks outermost."""
        k = self._kernel
        return k is not None and k.n_outer

    def _fills(self) -> tuple[plans.Fill, ...]:
        pack = None if self.plan is None else plans.head_pack(self.plan)
        return () if pack is None else pack.fills

    @property
    def pack_plan(self) -> packing.PackPlan | None:
        """The padded A that ``execute`` copies (`minijit.packing.plan_packing`), or None."""
        return next((f.layout for f in self._fills() if isinstance(f.layout, packing.PackPlan)), None)

    @property
    def panel_plans(self) -> dict[str, packing.PanelPlan]:
        """The operands ``execute`` copies into micro-panels, by config role."""
        return {f.tensor: f.layout for f in self._fills() if isinstance(f.layout, packing.PanelPlan)}

    @property
    def packed_operands(self) -> frozenset[str]:
        """The operands ("in0", "in1", config roles) that ``execute`` copies into packed buffers
        before the kernels run (padded A, or x86-64 micro-panels); their layouts are absorbed."""
        return frozenset(f.tensor for f in self._fills())

    @property
    def _chunk(self) -> plans.Chunk | None:
        return self._body if isinstance(self._body, plans.Chunk) else None

    @property
    def chunks(self) -> int:
        """The chunks the operation runs in (1: whole)."""
        c = self._chunk
        return 1 if c is None else c.count

    @property
    def chunk_dim(self) -> int | None:
        """The chunked dim (an index into the config's dims), or None."""
        c = self._chunk
        return None if c is None else c.dim

    @property
    def chunk_kind(self) -> str | None:
        """The chunks the operation runs in: "M" (of the outermost loop), "K" (of a K dim) or None (whole)."""
        c = self._chunk
        return None if c is None else c.kind

    @property
    def parts(self) -> list[tuple[plans.Plan, tuple[int, int, int]]]:
        """A peeled operation's parts (`minijit.peeling`): each part's plan (``config``, ...) and the
        element offsets of its origins in in0, in1, out; [] when not peeled."""
        body = self._body
        return [(p.plan, p.offsets) for p in body.parts] if isinstance(body, plans.Peel) else []

    @property
    def iterations(self) -> int:
        """Iterations the loop nest shares among threads (a chunked operation: its chunk count; a
        peeled one: its head's); 0 before setup."""
        if self.plan is None:
            return 0
        c = self._chunk
        return c.count if c is not None else self._kernel.iterations

    @property
    def threads_used(self) -> int:
        """Threads one ``execute`` runs on: 1 for operations too small to split, else at most ``num_threads``."""
        body = self._body
        if body is None:
            return 1
        if isinstance(body, plans.Chunk):
            return body.threads
        if isinstance(body, plans.Peel):
            return max(plans.head(p.plan).threads for p in body.parts)
        return plans.head(body).threads

    def call_footprint(self) -> str:
        """What one compiled kernel call reads (`minijit.blocking.call_footprint`); needs a GEMM blocking."""
        if self.config is None or self.blocking is None:
            raise RuntimeError("call_footprint needs an operation set up with a GEMM blocking")
        return plans.footprint(self.config, self.target_info)

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


def _blocks(*checked: np.ndarray) -> tuple[np.ndarray, ...]:
    """The checked arrays with an F-order one (from the quick path) as its transpose, a
    C-contiguous view of the same block, as the emulated runner's views need (`minijit.plan.run`;
    the full checks hand it the blocks already, and an array the operation does not use as is)."""
    return tuple(x.T if not x.flags.c_contiguous and x.flags.f_contiguous else x for x in checked)


def _quick_check(config: TensorConfig, ranges: dict, dtype: np.dtype) -> tuple | None:
    """The arguments of `minijit.arrays.quick_addresses` after the arrays for an operation that
    reads both inputs from their first elements on (GEMM/BRGEMM, binary ops): the dtype and the
    bytes each array must hold; None where `execute` always runs the full checks."""
    if not (config.uses_in0 and config.uses_in1) or any(ranges[t][0] < 0 for t in TENSORS):
        return None
    return (dtype, *((ranges[t][1] + 1) * dtype.itemsize for t in TENSORS))
