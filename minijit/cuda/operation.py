"""`CudaTensorOperation`: tensor operations on an NVIDIA GPU: GEMM/BRGEMM on tensor cores,
unary (zero, copy, relu) and binary (add, sub, mul, div, min, max) elementwise ops.

    op = CudaTensorOperation()
    op.setup("fp16", "zero", "brgemm", "relu", dim_types, exec_types, dim_sizes,
             strides_in0, strides_in1, strides_out)
    op.execute(A, B, C)          # torch/cupy device tensors, or numpy arrays (copied)

Same ``setup``/``execute`` interface as :class:`minijit.TensorOperation`. One kernel launch per
``execute``, or two when the tile model (:mod:`minijit.cuda.tiling`, ``op.tile_plan``) splits K:
the partials kernel into a workspace, then the reduction (:mod:`minijit.cuda.splitk`) into C.

GEMM and BRGEMM main primitives (:mod:`minijit.cuda.gemm`):

- prim dims (M, N, K and the BRGEMM batch-reduce K) are the GEMM the kernel tiles over CTAs;
- K loop dims (seq; K is never shared) and the BR dim become the kernel's reduction table: the
  kernel walks all of them inside the CTA, accumulating in registers, so first and last touch are
  applied once per output block, in the epilogue;
- every non-K loop dim (shared, and seq M/N/C dims, whose iterations write disjoint output blocks
  and may run in any order) becomes an entry of the batch table, i.e. ``gridDim.z``.

Types: ``dtype`` names the *input* type: "fp32" (run as tf32: inputs rounded with
cvt.rna.tf32.f32, fp32 accumulation), "fp16" or "bf16". Output is always fp32. Layouts: all 8
orientations of A, B and C: A needs unit stride on its prim M or K dim, B on its prim K or N dim,
C on its prim M or N dim. An N-contiguous C is computed as C^T = B^T A^T (the config's in0/in1
and M/N roles exchange, ``config.inputs_swapped``; ``execute`` still takes the caller's order),
which leaves 4 kernel variants (`gemm.GemmSpec` ``a_major``/``b_major``; a transposed operand
tile is read with ``ldmatrix.trans`` for fp16/bf16, scalar fragment loads for tf32). An operand
with no unit stride on either of its prim dims raises ``SetupError(wrong_stride)`` naming the dim.

Arrays: torch tensors (any dtype above, incl. bfloat16), objects with ``__cuda_array_interface__``
(cupy; fp16/fp32), objects with ``__dlpack__`` on a CUDA device (read from their capsule by
`minijit.runtime.device_arrays`; fp16/fp32), and numpy arrays. numpy arrays are **copied** to the
device before the launch (the whole memory span they cover) and ``out`` is copied back after it;
bf16 host data is passed as uint16 bit patterns (or an ml_dtypes bfloat16 array). Before anything
is launched every array is checked like on the CPU path: dtype, writeability of ``out``, and every
element the strides reach (`TensorConfig.offset_range`) inside the array's memory.

Elementwise main primitives (:mod:`minijit.cuda.elementwise`): ``zero``, ``copy`` (alias
``identity``), ``relu``, ``add``, ``sub``, ``mul``, ``div``, ``min``, ``max``, with the CPU path's
semantics (numpy's: min/max/relu propagate NaN like ``np.minimum``/``np.maximum``). Every dim runs
in the one launch, whatever its exec type (exec types and ``optimize`` are ignored: the kernel
sorts the dims by output stride and fuses contiguous ones itself); any strides the config accepts
work: permutations/transpositions (trus -> turs), negative strides, stride 0 (broadcast) in an
input. The first touch is not run (the main primitive overwrites every output element); the last
touch ReLU is applied to the result, zero makes the whole operation a zero. Types: fp32 in and out
only (``dtype`` "fp32"); fp16/bf16 raise ``SetupError(wrong_dtype)``. ``execute(in0, None, out)``
for unary ops, ``execute(None, None, out)`` for zero; inputs may overlap ``out`` only element for
element (in place). :meth:`CudaTensorOperation.reference` computes the same in numpy.

``setup`` needs no GPU (it validates and generates PTX); ``execute`` raises ``RuntimeError`` when
``ptx.driver.available()`` is False. :meth:`CudaTensorOperation.simulate` runs the same GEMM launch
(tables, parameters, kernel spec) through the numpy model of :func:`minijit.cuda.gemm.simulate`.
:meth:`CudaTensorOperation.launch_args` gives the kernel name, grid, block and arguments of the
launch ``execute`` makes, for tensors at given device addresses (e.g. in a simulated device);
:meth:`CudaTensorOperation.ptx` the kernel's PTX text.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from minijit import arrays, optimizer
from minijit.arrays import Offsets
from minijit.cache import LRUCache
from minijit.cuda import elementwise, gemm
from minijit.cuda.launch import KERNEL_CACHE_SIZE, Launches, _generated, _kernels, _loaded  # noqa: F401
from minijit.cuda.tables import _offsets, _swapped
from minijit.errors import SetupError, error_t
from minijit.ir import BINARY_PTYPES, GEMM_PTYPES, UNARY_PTYPES, TensorConfig, dim_t, exec_t, ptype_t
from minijit.limits import check_alloc
from minijit.operation import absent
from minijit.runtime import device_arrays
from minijit.tensor_operation import TensorOperation

#: setup dtype -> kernel input type
DTYPES = {"fp32": "tf32", "tf32": "tf32", "fp16": "f16", "f16": "f16", "bf16": "bf16"}
#: setup dtype -> elementwise kernel type
EW_DTYPES = {"fp32": "f32", "f32": "f32", "float32": "f32"}
ELEMENTWISE_PTYPES = UNARY_PTYPES | BINARY_PTYPES
#: GEMM kernel families (CudaTensorOperation(family=...), $MINIJIT_CUDA_FAMILY)
FAMILIES = ("auto", "sm90a", "mma.sync")
_OUT_TYPES = ({"float32"}, {"torch.float32"}, {"<f4"})
#: kernel input type -> accepted element types of in0/in1 (numpy dtype names / torch names)
_IN_TYPES = {
    "f16": ({"float16"}, {"torch.float16"}, {"<f2"}),
    "bf16": ({"uint16", "bfloat16"}, {"torch.bfloat16"}, set()),
    "tf32": _OUT_TYPES,
    "f32": _OUT_TYPES,
}
MAX_BATCH = 65535  # gridDim.z
#: prepared launches kept per operation (keyed by the operands' device addresses)
LAUNCH_CACHE = 16


Array = np.ndarray | None  # an input; None where the operation does not use it


class _Array:
    """A validated argument (one dense block, `minijit.arrays`): device address of the block's
    first element, or a host array to copy (a C-contiguous view of its block); the strides count
    from ``origin`` bytes after the first element. (A slotted class,
    not a dataclass: one is built per argument per launch.)"""

    __slots__ = ("name", "ptr", "host", "nbytes", "keep", "origin")

    def __init__(self, name: str, ptr: int, host: np.ndarray | None, nbytes: int, keep: Any = None) -> None:
        self.name = name
        self.ptr = ptr  # device address of element 0 (0 for host arrays until staged)
        self.host = host
        self.nbytes = nbytes  # size of the array
        self.keep = keep
        self.origin = 0  # byte offset of the element the strides count from

    @property
    def address(self) -> int:
        return self.ptr + self.origin


def _dtype_name(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    key = name.strip().lower()
    if key not in DTYPES:
        raise SetupError(error_t.wrong_dtype, f"dtype {name!r}: the CUDA target takes fp32 (as tf32), fp16 or bf16")
    return DTYPES[key]


def _ew_dtype(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    key = name.strip().lower()
    if key not in EW_DTYPES:
        raise SetupError(
            error_t.wrong_dtype,
            f"dtype {name!r}: elementwise ops on the CUDA target take fp32 in and out (fp16/bf16 are GEMM only)",
        )
    return EW_DTYPES[key]


def _elementwise(prim_main) -> bool:
    try:
        return ptype_t(prim_main) in ELEMENTWISE_PTYPES
    except ValueError:
        return False


def _flat_bytes(arr: np.ndarray) -> np.ndarray:
    """uint8 view of the memory of C-contiguous ``arr`` (`minijit.arrays.dense_view`)."""
    return arr.reshape(-1).view(np.uint8)


class CudaTensorOperation(Launches, TensorOperation):
    """A GEMM/BRGEMM (sm_80 or newer) or elementwise tensor operation compiled for an NVIDIA GPU.

    ``TensorOperation(target="cuda", ...)`` builds one; its own ``__init__`` replaces the CPU
    operation's (none of the CPU plan's attributes exist here)."""

    target = "cuda"
    native = False

    def __init__(self, device: int = 0, driver=None, family: str | None = None) -> None:
        """``driver``: the module launches go through, `ptx.driver` by default; `ptx.simdriver`
        runs the same kernels in the PTX simulator (no GPU; slow, for tests; numpy arrays).
        ``family``: GEMM kernel family, "auto" (default; also ``$MINIJIT_CUDA_FAMILY``), "sm90a"
        (wgmma/TMA, :mod:`minijit.cuda.gemm_sm90`) or "mma.sync" (:mod:`minijit.cuda.gemm`)."""
        import os  # noqa: PLC0415

        from ptx.driver import resolve  # noqa: PLC0415

        fam = family or os.environ.get("MINIJIT_CUDA_FAMILY") or "auto"
        if fam not in FAMILIES:
            raise ValueError(f"family {fam!r}: one of {FAMILIES}")
        self.family = fam
        self.driver = resolve(driver)
        self.device_ordinal = device
        self._vec_cache: dict = {}
        self._launches = LRUCache(LAUNCH_CACHE)  # (device, addresses) -> prepared launch(es), see _launcher
        self._ranges: dict = {}
        self.config: TensorConfig | None = None
        self.dtype: str | None = None
        self.spec: gemm.GemmSpec | None = None
        self.plan: elementwise.Plan | None = None

    # -- setup: `TensorOperation.setup` parses the lists; these steps are the GPU's -----------------
    def _reset(self) -> None:
        self.config = self.spec = self.plan = None

    def _config_dtype(self, dtype, prim_main) -> str:
        """Check ``dtype`` (GEMM/BRGEMM: f16, bf16 or fp32 as tf32; elementwise: fp32); the
        config itself is fp32 (the element type the kernel takes is ``setup_config``'s)."""
        (_ew_dtype if _elementwise(prim_main) else _dtype_name)(dtype)
        return "fp32"

    def _setup_lists(self, config: TensorConfig, dtype, optimize: bool, options: dict[str, Any]) -> error_t:
        """GEMM/BRGEMM: without prim dims (or with ``optimize=True``) the prim dims are chosen by
        `minijit.optimizer` (swap_operands, fuse, identify_primitives, reorder; no splitting: the
        GPU tiles the whole prim GEMM itself), so an all-row-major A, B, C (C-order arrays) runs
        as C^T = B^T A^T (``config.inputs_swapped``; ``execute`` takes the caller's order).
        Elementwise ops ignore exec types and ``optimize``. The CPU blocking options
        (``thread_target``, ``max_kernel_size``, ``min_kernel_size``) are refused."""
        cpu_only = [k for k, v in options.items() if v is not None and k != "min_kernel_size"]
        if options.get("min_kernel_size", optimizer.DEFAULT_MIN_KERNEL_SIZE) != optimizer.DEFAULT_MIN_KERNEL_SIZE:
            cpu_only.append("min_kernel_size")
        if cpu_only:
            raise TypeError(f"setup(): {', '.join(cpu_only)} apply to CPU targets only, not to target 'cuda'")
        if _elementwise(config.prim_main):
            return self.setup_config(config, dtype)
        if optimize:
            # a row-major C swaps the operands (C^T = B^T A^T): what the column-major kernel takes
            config = optimizer.swap_operands(config)
            config = optimizer.reorder_dims(optimizer.identify_primitives(optimizer.fuse_dims(config)))
        return self.setup_config(config, _dtype_name(dtype))

    def setup_config(self, config: TensorConfig, dtype: str | None = None) -> error_t:
        """Set up from a `TensorConfig` (its dtype_t is ignored; ``dtype``: GEMM/BRGEMM f16, bf16 or
        tf32 (the default), elementwise fp32 (the default))."""
        if config.prim_main in ELEMENTWISE_PTYPES:
            return self._setup_elementwise(config, "fp32" if dtype is None else dtype)
        dt = _dtype_name("tf32" if dtype is None else dtype)
        config.validate_executable()
        if config.prim_main not in GEMM_PTYPES:
            raise SetupError(error_t.wrong_ptype, f"the CUDA target runs gemm/brgemm, not {config.prim_main.name}")
        first = {ptype_t.none: "load", ptype_t.copy: "load", ptype_t.zero: "zero", ptype_t.relu: "relu"}
        last = {ptype_t.none: "none", ptype_t.copy: "none", ptype_t.relu: "relu"}
        if config.prim_last not in last:
            raise SetupError(error_t.wrong_ptype, f"last touch {config.prim_last.name} is not supported on CUDA")
        dims, roles = config.dims, config.prim
        es = gemm.ESIZE[dt]

        def stride(role, tensor):
            return 0 if role is None else dims[role].stride(tensor)

        def size(role):
            return 1 if role is None else dims[role].size

        def unit(role, tensor) -> bool:
            return size(role) <= 1 or stride(role, tensor) == 1

        if not unit(roles.m, "out"):
            if not unit(roles.n, "out"):
                raise SetupError(
                    error_t.wrong_stride,
                    f"dim {roles.m} ({dims[roles.m]}): out needs unit stride on prim M or prim N,"
                    f" got {stride(roles.m, 'out')} and {stride(roles.n, 'out')}",
                    dim=roles.m,
                )
            config = _swapped(config)  # C^T = B^T A^T: an N-contiguous C becomes M-contiguous
            dims, roles = config.dims, config.prim
        majors = {}
        for tensor, (r0, n0), (r1, n1), what in (
            ("in0", (roles.m, "m"), (roles.k, "k"), "A"),
            ("in1", (roles.k, "k"), (roles.n, "n"), "B"),
        ):
            if unit(r0, tensor):
                majors[tensor] = n0
            elif unit(r1, tensor):
                majors[tensor] = n1
            else:
                raise SetupError(
                    error_t.wrong_stride,
                    f"dim {r0} ({dims[r0]}): {tensor} ({what}) needs unit stride on prim {n0.upper()} or"
                    f" prim {n1.upper()}, got {stride(r0, tensor)} and {stride(r1, tensor)}",
                    dim=r0,
                )
        self.m, self.n, self.k = size(roles.m), size(roles.n), size(roles.k)
        self.lda = stride(roles.k if majors["in0"] == "m" else roles.m, "in0") * es
        self.ldb = stride(roles.n if majors["in1"] == "k" else roles.k, "in1") * es
        self.ldc = stride(roles.n, "out") * 4
        loop = [d for d in config.dims if d.exec is not exec_t.prim]
        red = [d for d in loop if d.type is dim_t.k]
        if roles.br is not None:
            red.append(dims[roles.br])
        batch = [d for d in loop if d.type is not dim_t.k]
        blocks = math.prod(d.size for d in batch)  # checked before the tables are built
        if blocks > MAX_BATCH:
            raise SetupError(error_t.wrong_size, f"{blocks} independent output blocks exceed gridDim.z = {MAX_BATCH}")
        check_alloc(math.prod(d.size for d in red) * 2 * 8, "the reduction offset table (2 int64 per K step)")
        self.red_table = _offsets(red, (("in0", es), ("in1", es)))
        self.batch_table = _offsets(batch, (("in0", es), ("in1", es), ("out", 4)))
        for name, v in (("lda", self.lda), ("ldb", self.ldb), ("ldc", self.ldc)):
            if abs(v) >= 2**62:
                raise SetupError(error_t.wrong_stride, f"{name} of {v} bytes is out of range")
        touches = {"first": first[config.prim_first], "last": last[config.prim_last]}
        touches.update(a_major=majors["in0"], b_major=majors["in1"])
        spec = gemm.default_spec(dt, self.m, self.n, self.k, **touches)
        self.config, self.dtype, self.spec, self.plan = config, dt, spec, None
        self._set_up()
        return error_t.success

    def _setup_elementwise(self, config: TensorConfig, dtype) -> error_t:
        """Plan (sort, fuse, size: `elementwise.plan` raises for what the kernel cannot run) and
        generate the elementwise kernel."""
        self.config = self.spec = self.plan = None
        dt = _ew_dtype(dtype)
        plan = elementwise.plan(config)
        _generated(plan.spec)
        self.config, self.dtype, self.plan = config, dt, plan
        self._set_up()
        return error_t.success

    def _set_up(self) -> None:
        """Forget what belonged to the previous setup: device tables, prepared launches; cache the
        element ranges each tensor's strides reach (``execute`` checks every array against them)."""
        self._dev_tables = None
        self._launches = LRUCache(LAUNCH_CACHE)
        self._ranges = {t: self.config.offset_range(t) for t in ("in0", "in1", "out")}

    def kernel_spec(self, ptr_a: int = 0, ptr_b: int = 0) -> gemm.GemmSpec | elementwise.KernelSpec:
        """The spec for operands whose first elements are at ``ptr_a``/``ptr_b`` (GEMM: the mma.sync
        tile and split-K factor of `tile_plan` (with split-K: the partials kernel), copy widths
        following the alignment of pointers, leading dims and table offsets; elementwise: one spec)."""
        if self.plan is not None:
            return self.plan.spec
        es, tp = self.spec.es, self.tile_plan
        key = (self.spec, tp, ptr_a % 16, ptr_b % 16)  # copy widths depend on 16-byte alignment only
        if key not in self._vec_cache:
            va = gemm.choose_vec(es, ptr_a, self.lda, *self.batch_table[:, 0], *self.red_table[:, 0])
            vb = gemm.choose_vec(es, ptr_b, self.ldb, *self.batch_table[:, 1], *self.red_table[:, 1])
            touches = {"first": self.spec.first, "last": self.spec.last}
            planned = tp.spec(**touches, a_major=self.spec.a_major, b_major=self.spec.b_major)
            self._vec_cache[key] = planned.aligned(va, vb)
        return self._vec_cache[key]

    @property
    def tile_plan(self):
        """The `minijit.cuda.tiling.TilePlan` of this GEMM/BRGEMM (None before setup and for
        elementwise ops): the mma.sync family's tile and split-K factor, chosen by the model of
        the device ``gpu`` (a `tiling.GpuModel`; unset, H100 SXM until the first ``execute``
        reads the device's attributes; set it before the first ``execute`` to plan for another)."""
        if self.config is None or self.plan is not None:
            return None
        gpu = getattr(self, "gpu", None)
        cached = getattr(self, "_tile_plan", None)  # (setup's spec, gpu, plan): identity checks only
        if cached is not None and cached[0] is self.spec and cached[1] is gpu:
            return cached[2]
        from minijit.cuda import tiling  # noqa: PLC0415

        dims = {"batch": len(self.batch_table), "reduce": len(self.red_table)}
        model = gpu or tiling.H100_SXM
        tp = tiling.choose(self.m, self.n, self.k, **dims, dtype=self.dtype, gpu=model, first=self.spec.first)
        self._tile_plan = (self.spec, gpu, tp)
        return tp

    def ptx(self, ptr_a: int = 0, ptr_b: int = 0) -> str:
        """PTX text of the kernel ``execute`` launches for operands at these addresses."""
        return _generated(self.kernel_spec(ptr_a, ptr_b)).text

    # -- arrays --------------------------------------------------------------------------------
    def _check(self, name: str, arr: Any, offset: int = 0, label: str | None = None) -> _Array:
        """Tensor ``name`` of the config, given by the caller as argument ``label`` (the two differ
        when the optimizer swapped the operands)."""
        cfg = self.config
        role, name = name, label or name
        if arr is None:
            raise TypeError(f"{name} is required for a {cfg.prim_main.name}")
        np_names, torch_names, typestrs = _OUT_TYPES if role == "out" else _IN_TYPES[self.dtype]

        def want() -> str:
            return "/".join(sorted(np_names | torch_names))

        if isinstance(arr, np.ndarray):
            if arr.dtype.name not in np_names:
                raise TypeError(f"{name} has dtype {arr.dtype}, the operation needs {want()}")
            if name == "out" and not arr.flags.writeable:
                raise ValueError("out is read-only")
            arr = arrays.dense_view(name, arr)  # F order, permuted axes: the block it fills (staged as is)
            item, shape, strides = arr.dtype.itemsize, arr.shape, None
            a = _Array(name, 0, arr, arr.nbytes)
        else:
            # getattr with a default: a failing hasattr costs an exception (this runs per launch)
            cai = None if hasattr(arr, "data_ptr") else getattr(arr, "__cuda_array_interface__", None)
            if cai is None and not hasattr(arr, "data_ptr"):
                if hasattr(arr, "__dlpack__"):  # read from its capsule: a CAI view of the same memory
                    arr = device_arrays.describe(arr, name).obj
                    cai = arr.__cuda_array_interface__
                else:
                    raise TypeError(
                        f"{name} must be a numpy array, a torch/cupy GPU array or expose __cuda_array_interface__"
                        f" / __dlpack__, got {type(arr).__name__}"
                    )
            if cai is None and hasattr(arr, "is_cuda"):  # torch
                if not arr.is_cuda:
                    raise TypeError(f"{name} is a CPU torch tensor: move it to the GPU or pass a numpy array")
                if str(arr.dtype) not in torch_names:
                    raise TypeError(f"{name} has dtype {arr.dtype}, the operation needs {want()}")
                item = arr.element_size()
                shape, strides = tuple(arr.shape), tuple(s * item for s in arr.stride())
                ptr = int(arr.data_ptr())
            else:
                if cai is None:
                    cai = arr.__cuda_array_interface__
                if cai["typestr"] not in typestrs:
                    raise TypeError(f"{name} has typestr {cai['typestr']}, the operation needs {want()}")
                if name == "out" and cai["data"][1]:
                    raise ValueError("out is read-only")
                item = int(cai["typestr"][2:])
                shape, strides = tuple(cai["shape"]), cai.get("strides")
                ptr = int(cai["data"][0])
            if ptr == 0 and math.prod(shape):
                raise ValueError(f"{name} is a device array with a null data pointer")
            a = _Array(name, ptr, None, item * math.prod(shape), keep=arr)
        arrays.require_dense(name, shape, strides, item)
        e_lo, e_hi = self._ranges[role]
        arrays.require_reach(name, e_lo, e_hi, offset, a.nbytes // item)
        a.origin = offset * item
        return a

    def _arrays(self, in0, in1, out, offsets=None):
        """The checked arrays; None for the inputs an elementwise op does not use."""
        if self.config is None:
            raise RuntimeError("execute before a successful setup")
        o0, o1, oo = arrays.check_offsets(offsets)
        if self.plan is not None:
            cfg = self.config
            used = (("in0", in0, cfg.uses_in0, o0), ("in1", in1, cfg.uses_in1, o1), ("out", out, True, oo))
            return tuple(self._check(name, arr, o) if use else None for name, arr, use, o in used)
        if self.config.inputs_swapped:  # the config's in0 is the caller's in1
            return self._check("in0", in1, o1, "in1"), self._check("in1", in0, o0, "in0"), self._check("out", out, oo)
        return self._check("in0", in0, o0), self._check("in1", in1, o1), self._check("out", out, oo)

    def _args(self, pa: int, pb: int, pc: int, bt, rt):
        return (pa, pb, pc, bt, rt, self.m, self.n, self.k, len(self.red_table), self.lda, self.ldb, self.ldc)

    def launch_args(self, in0: int = 0, in1: int = 0, out: int = 0, *, tables=None):
        """``(kernel name, grid, block, args)`` of the launch ``execute`` makes for tensors whose
        first elements are at these device addresses (0 for an input the op does not use); the
        kernel is in ``ptx(in0, in1)``. GEMM/BRGEMM launches also need ``tables``: the device
        addresses (or buffers) of ``batch_table`` and ``red_table``. A split-K plan
        (``tile_plan.split_k > 1``) launches two kernels into a workspace: ValueError here."""
        if self.config is None:
            raise RuntimeError("launch_args before a successful setup")
        if self.plan is None and self.tile_plan.split_k > 1:
            raise ValueError(
                f"this GEMM runs split-K ({self.tile_plan.split_k} parts: partials kernel, then the reduction);"
                " launch_args describes single-launch GEMMs only"
            )
        if self.plan is not None:
            kernel = _generated(self.plan.spec)
            return kernel.name, self.plan.grid, self.plan.block, self.plan.args({"in0": in0, "in1": in1, "out": out})
        if tables is None:
            raise ValueError("a GEMM/BRGEMM launch needs tables=(batch_table, red_table) device addresses")
        gk = _generated(self.kernel_spec(in0, in1))
        return gk.name, gk.grid(self.m, self.n, len(self.batch_table)), gk.block, self._args(in0, in1, out, *tables)

    # -- execute -------------------------------------------------------------------------------
    def execute(self, in0, in1, out, *, offsets: Offsets = None, sync: bool = True) -> None:
        """One kernel launch, two for split-K (``in1`` None for unary ops, ``in0`` too for zero). Each array
        must fill one dense block (C order, F order or any axis permutation); the strides count
        elements of that block from its lowest address, or from element ``offsets[i]`` (the rule
        of `minijit.arrays`, as on the CPU). ``sync``: wait for the
        launch (always, when numpy arrays are involved)."""
        arrays = self._arrays(in0, in1, out, offsets)
        driver = self.driver
        if not driver.available():
            raise RuntimeError(
                "CudaTensorOperation.execute needs an NVIDIA GPU with a CUDA driver and cuda-bindings"
                " (ptx.driver.available() is False)"
            )
        dev = driver.device(self.device_ordinal)
        staged = []
        for a in arrays:
            if a is not None and a.host is not None:
                flat = _flat_bytes(a.host)
                buf = driver.DeviceBuffer(max(1, flat.size))
                buf.copy_from(flat)
                a.ptr = buf.ptr
                staged.append((a, buf, flat))
        pa, pb, pc = (0 if a is None else a.address for a in arrays)
        (self._launch_splitk(dev, pa, pb, pc) or self._launcher(dev, pa, pb, pc))()
        if sync or staged:
            driver.synchronize()
        for a, buf, flat in staged:
            if a.name == "out":
                buf.copy_to(flat)

    def _launcher(self, dev, pa: int, pb: int, pc: int):
        """The prepared launch for operands at device addresses ``pa``, ``pb``, ``pc``: kernel
        choice, copy widths, tensor maps and the packed parameter block depend on nothing else once
        set up, so device arrays reused across calls cost one driver call (`LAUNCH_CACHE` entries
        per operation; staged numpy arrays get fresh addresses and fall out of it)."""
        key = (dev.ordinal, pa, pb, pc)
        launch = self._launches.get(key)
        if launch is not None:
            return launch
        if self.plan is None and self.family_for(dev.arch, pa, pb) == "sm90a":
            launch = self._launch_sm90(dev, pa, pb, pc)
        else:
            if self.plan is None and self._dev_tables is None:
                driver = self.driver
                self._dev_tables = (driver.to_device(self.batch_table), driver.to_device(self.red_table))
            fn = _loaded(self.kernel_spec(pa, pb), dev, self.driver)
            _, grid, block, args = self.launch_args(pa, pb, pc, tables=self._dev_tables)
            launch = fn.prepare(grid, block, args=args)
        return self._launches.put(key, launch)

    def simulate(
        self, in0: np.ndarray, in1: np.ndarray, out: np.ndarray, *, offsets: Offsets = None
    ) -> gemm.ModelStats:
        """Run the GEMM launch ``execute`` would make through the numpy model (numpy arrays only)."""
        if self.plan is not None:
            raise TypeError("simulate models the GEMM kernel; elementwise ops have reference()")
        arrays = self._arrays(in0, in1, out, offsets)
        if any(a.host is None for a in arrays):
            raise TypeError("simulate takes numpy arrays")
        fa, fb, fc = (_flat_bytes(a.host) for a in arrays)
        oa, ob, oc = (a.origin for a in arrays)
        bt = self.batch_table + np.array([oa, ob, oc], np.int64)
        spec = self.kernel_spec(oa, ob)
        c = np.frombuffer(fc, dtype=np.float32) if fc.size % 4 == 0 and oc % 4 == 0 else None
        if c is None:
            raise ValueError("out must be 4-byte aligned")
        if spec.split_k > 1:  # partials into a workspace, then the reduction (minijit.cuda.splitk)
            return self._simulate_splitk(spec, fa, fb, c, bt)
        c_work = c.copy()  # host arrays hold the kernel's encoding already (f16, bf16 bits, f32)
        stats = gemm.simulate(
            spec, fa, fb, c_work, self.m, self.n, self.k, self.lda, self.ldb, self.ldc, bt, self.red_table
        )
        c[...] = c_work
        return stats

    def reference(self, in0: Array, in1: Array, out: np.ndarray, *, offsets: Offsets = None) -> None:
        """What ``execute`` computes for an elementwise op, in numpy on strided views of the same
        (checked, numpy) arrays."""
        arrays = self._arrays(in0, in1, out, offsets)
        if self.plan is None:
            raise TypeError("reference computes elementwise ops; GEMM/BRGEMM have simulate()")
        if any(a is not None and a.host is None for a in arrays):
            raise TypeError("reference takes numpy arrays")
        cfg = self.config
        shape = tuple(d.size for d in cfg.dims)

        def view(a, name):
            if a is None:
                return None
            strides = tuple(d.stride(name) * a.host.itemsize for d in cfg.dims)
            origin = a.host.reshape(-1)[a.origin // a.host.itemsize :]
            return as_strided(origin, shape, strides, writeable=name == "out")

        views = [view(a, name) for a, name in zip(arrays, ("in0", "in1", "out"), strict=True)]
        elementwise.reference(cfg.prim_main.name, cfg.prim_last.name, *views)

    def __repr__(self) -> str:
        if self.config is None:
            state = "not set up"
        elif self.plan is not None:
            state = f"{self.plan.spec.name} sizes {self.plan.sizes}"
        else:
            fam = "sm90a on compute capability 9.0, else mma.sync" if self.family == "auto" else self.family
            state = f"{self.spec.name} batch {len(self.batch_table)} family {fam}"
            tp = self.tile_plan
            state += f"; mma.sync plan {tp.bm}x{tp.bn}x{tp.bk} split-K {tp.split_k} ({tp.reason})"
        return f"<CudaTensorOperation {state}>"

    # -- the Operation protocol ------------------------------------------------------------------
    def listing(self) -> str:
        """``repr`` and the PTX of the kernel a launch with 16-byte aligned operands runs."""
        if self.config is None:
            raise RuntimeError("listing before a successful setup")
        return f"// {self!r}\n{self.ptx()}"

    def info(self) -> dict[str, Any]:
        """Target, dtype, dim sizes, kernel name and GEMM family of the set-up operation."""
        cfg = self.config
        kernel = None
        if self.plan is not None:
            kernel = self.plan.spec.name
        elif self.spec is not None:
            kernel = self.spec.name
        return {
            "target": "cuda",
            "dtype": self.dtype,
            "shapes": None if cfg is None else [d.size for d in cfg.dims],
            "kernel": kernel,
            "family": self.family,
            "flops": self.flops,
        }


# the CPU plan tree's members and entry points do not apply to a launch: reading one raises
# AttributeError naming it, so hasattr() is False on a CUDA operation
CPU_ONLY = (
    "execute_ptr execute_iter blocking primitives nest loopnest a_copy n_outer pack_plan panel_plans"
    " packed_operands chunks chunk_dim chunk_kind parts iterations threads_used call_footprint"
).split()
absent(CudaTensorOperation, CPU_ONLY, "a member of the CPU TensorOperation; a CudaTensorOperation has none")
