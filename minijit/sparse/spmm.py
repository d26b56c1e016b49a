"""``SpMM``: C = S @ B for a CSR matrix S, planned once per sparsity pattern.

    op = SpMM(S, n=256, target="cuda")        # or target="native"
    op.execute(B, C)                           # C[:] = S @ B
    op.update_values(new_data)                 # same pattern, new values: no re-planning
    C = spmm(S, B)                             # one-shot, native

Operands: ``S`` a ``scipy.sparse`` CSR matrix or ``(indptr, indices, data,
shape)`` (validated by `minijit.sparse.csr.as_csr`); with ``target="cuda"``
also a torch ``sparse_csr`` tensor or ``(indptr, indices, data, shape)`` of
device arrays (`minijit.sparse.device.host_csr`: read back once, validated and
planned on the host, before any launch); ``B`` K x N, float16 or float32,
row-major (C-contiguous) or column-major (F-contiguous); ``C`` M x N float32,
C-contiguous, overwritten. The kernels read B row-major: an F-order B, or one
whose dtype is not the kernel's, is converted (one copy) per call.

Targets and precision (``dtype`` is chosen at construction, since the kernel is
specialised for it; it is not inferred from B):

* ``target="cuda"``: TCA-SpMM tensor-core kernels (`minijit.sparse.tca`), fp32
  accumulation, ``dtype`` "fp16" (default), "bf16" or "tf32" (fp32 S and B
  rounded with cvt.rna.tf32.f32); a device B must hold float16, bfloat16 or
  float32 respectively (numpy B is converted on upload); ``plan`` is the
  seed-003 warp assignment (`minijit.sparse.plan`).
  ``strategy`` "tca" (seed 003), "window" (row windows) or "auto" (the one
  `window_plan.choose_strategy` picks). ``reorder`` (row windows only): "auto" reorders the
  rows (`minijit.sparse.reorder`) when that saves at least `window_plan.MIN_REORDER_GAIN` of
  the window mma instructions, "rows" always, "none" never. The kernel stores C through the
  plan's row table, so C is in the caller's row order either way; ``reordered`` and
  ``row_order`` record the choice (shown in ``repr`` and `SpMM.plan_summary`).
  ``window_rows`` (row windows only): 16 (tiles are the mma's A), 8 (FlashSparse's
  swap-and-transpose: C^T = B^T S^T, 8-row windows, fewer padded zeros on scattered columns) or
  None (default: whichever issues fewer mma instructions); after construction the chosen plan's
  rows per window (None for seed 003's plan).
* ``target="native"`` (dtype "fp32" by default): JIT'd CPU kernel
  (`minijit.sparse.cpu`; AVX-512/AVX2 on x86-64, NEON on AArch64), rows split
  over the minijit thread pool by nnz. ``dtype="fp16"`` rounds S and B to
  fp16 first (the GPU's input precision) and computes in fp32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.cache import ScratchPool
from minijit.runtime.device_arrays import device_matrix, is_device_array
from minijit.sparse import cpu
from minijit.sparse.csr import Csr, as_csr, check_dense, check_out
from minijit.sparse.device import host_csr
from minijit.sparse.plan import SEG_CHUNKS, Plan, make_plan
from minijit.sparse.precision import precision

__all__ = ["SpMM", "spmm"]

TARGETS = ("cuda", "native")
#: cuda work splits: seed 003's plan ("tca"), row windows split by non-zeros ("window"), or the
#: one `window_plan.choose_strategy` picks from the pattern ("auto")
STRATEGIES = ("auto", "tca", "window")
#: row reordering for the row-window strategy (`minijit.sparse.reorder`)
REORDERS = ("auto", "none", "rows")
DTYPES = {"native": ("fp16", "fp32"), "cuda": ("fp16", "bf16", "tf32")}


def _native_isa(isa: str | None) -> str:
    from minijit.runtime.features import host

    if isa is not None:
        if isa not in ("avx512", "avx2", "neon"):
            raise ValueError(f"isa must be 'avx512', 'avx2' or 'neon', got {isa!r}")
        return isa
    h = host()
    if h.isa == "aarch64":
        return "neon"
    if h.isa == "x86_64" and getattr(h, "avx512f", False):
        return "avx512"
    if h.isa == "x86_64" and getattr(h, "avx2", False):
        return "avx2"
    raise RuntimeError(f"no native SpMM kernel for this host ({h.isa} without AVX2)")


class SpMM:
    """C = S @ B for one sparsity pattern and N (see the module docstring).

    ``threads``: native worker count (default: minijit's pool size).
    ``isa``: native kernel override ("avx512", "avx2", "neon"; NEON runs
    emulated on non-ARM hosts, for testing only). ``seg_chunks``: 64-nnz
    chunks per multiblock_per_row block (cuda). ``driver``: the module the cuda
    target launches through, `ptx.driver` by default; `ptx.simdriver` runs the
    same kernels in the PTX simulator (no GPU; slow, for tests). ``strategy`` and ``reorder``
    (cuda): see the module docstring; after construction ``strategy`` is "tca" or "window",
    ``reordered`` says whether the row windows hold reordered rows and ``row_order`` is the
    `minijit.sparse.reorder.RowOrder` that was considered (None when none was).
    """

    def __init__(
        self,
        csr: object,
        n: int,
        dtype: str | None = None,
        target: str = "cuda",
        *,
        threads: int | None = None,
        isa: str | None = None,
        seg_chunks: int = SEG_CHUNKS,
        driver=None,
        strategy: str = "auto",
        reorder: str = "auto",
        window_rows: int | None = None,
    ) -> None:
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if strategy == "window" and target != "cuda":
            raise ValueError("strategy='window' is a target='cuda' kernel (dtype 'fp16', 'bf16' or 'tf32')")
        if reorder not in REORDERS:
            raise ValueError(f"reorder must be one of {REORDERS}, got {reorder!r}")
        if reorder == "rows" and (target != "cuda" or strategy == "tca"):
            raise ValueError(
                "reorder='rows' reorders the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        if window_rows is not None and (window_rows not in (8, 16) or isinstance(window_rows, bool)):
            raise ValueError(f"window_rows must be None, 16 or 8, got {window_rows!r}")
        if window_rows is not None and (target != "cuda" or strategy == "tca"):
            raise ValueError(
                "window_rows applies to the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= int(n) <= cpu.MAX_N:
            raise ValueError(f"n must be an int in 1..{cpu.MAX_N}, got {n!r}")
        dtype = dtype if dtype is not None else ("fp16" if target == "cuda" else "fp32")
        if dtype not in DTYPES[target]:
            hint = " (fp32 inputs on the tensor cores: dtype='tf32')" if dtype == "fp32" else ""
            raise ValueError(f"dtype must be one of {DTYPES[target]} for target={target!r}, got {dtype!r}{hint}")
        if target == "cuda":
            from ptx.driver import resolve

            self._driver = resolve(driver)
            self._prec = precision(dtype)
            csr = host_csr(csr, self._driver) or csr
        self.csr: Csr = as_csr(csr)
        self.n = int(n)
        self.dtype = dtype
        self.target = target
        self.seg_chunks = seg_chunks
        self.strategy = strategy  # "tca" or "window" once chosen (cuda)
        self.reorder = reorder
        self.reordered = False  # whether the row-window plan runs on reordered rows
        self.row_order = None  # the `reorder.RowOrder` considered (cuda, window candidates), or None
        self.window_rows = window_rows  # rows per window of the chosen row-window plan (cuda)
        self._wplan = None
        self._plan: Plan | None = None
        self._data32 = self._values(self.csr.data)
        if target == "native":
            self.isa = _native_isa(isa)
            self._kernel = cpu.generate(self.n, self.isa)
            from minijit.parallel import default_threads

            self.threads = max(1, int(threads) if threads is not None else default_threads())
            self._splits = self._row_splits(self.threads)
        else:
            self.isa = "ptx"
            self._cuda_setup()

    def __repr__(self) -> str:
        m, k = self.csr.shape
        extra = f", reordered={self.reordered}, window_rows={self.window_rows}" if self.target == "cuda" else ""
        return (
            f"SpMM({m}x{k}, nnz={self.csr.nnz}, n={self.n}, dtype={self.dtype!r}, target={self.target!r},"
            f" strategy={self.strategy!r}{extra})"
        )

    # ------------------------------------------------------------------ common
    @property
    def shape(self) -> tuple[int, int]:
        return self.csr.shape

    @property
    def plan(self) -> Plan:
        """The TCA-SpMM warp plan (built on first use for native targets)."""
        if self._plan is None:
            self._plan = make_plan(self.csr.indptr, self.n, self.seg_chunks)
        return self._plan

    def _values(self, data: np.ndarray) -> np.ndarray:
        d = np.asarray(data, dtype=np.float32)
        if self.dtype == "fp16":
            d = d.astype(np.float16).astype(np.float32)
        return np.ascontiguousarray(d)

    def update_values(self, data: np.ndarray) -> None:
        """New non-zero values for the same pattern (length nnz, float, contiguous); the plan is kept."""
        if not isinstance(data, np.ndarray):
            raise TypeError(f"data must be a numpy array, got {type(data).__name__}")
        if data.ndim != 1 or data.shape[0] != self.csr.nnz:
            raise ValueError(f"data must be 1-D with nnz = {self.csr.nnz} entries, got shape {data.shape}")
        if data.dtype not in (np.float16, np.float32, np.float64):
            raise TypeError(f"data must be float16, float32 or float64, got {data.dtype}")
        if not data.flags.c_contiguous:
            raise ValueError("data must be contiguous")
        self.csr = Csr(self.csr.indptr, self.csr.indices, data, self.csr.shape)
        self._data32 = self._values(data)
        if self.target == "cuda" and self.strategy == "window":
            self._d_tiles.copy_from(self._tile_values(data))
        elif self.target == "cuda":
            self._d_data.copy_from(self._prec.device_array(data))

    def _check(self, b: object, c: object) -> tuple[np.ndarray, np.ndarray]:
        m, k = self.csr.shape
        b = check_dense(b, k, self.n)
        c = check_out(c, m, self.n)
        return b, c

    def execute(self, b: Any, c: Any) -> Any:
        """``c[:] = S @ b``; returns ``c``. Arguments are checked before any kernel runs.

        ``target="cuda"`` also takes device arrays for either argument (torch CUDA tensors, cupy,
        ``__cuda_array_interface__`` or DLPack objects): B of the kernel's type (float16 for
        "fp16", bfloat16 for "bf16", float32 for "tf32") and C float32, C-contiguous, 16-byte
        aligned. They are read and written in place, with no host copies."""
        if is_device_array(b) or is_device_array(c):
            if self.target != "cuda":
                raise TypeError("device arrays need target='cuda'; target='native' takes numpy arrays")
            return self._cuda_execute_device(b, c)
        b, c = self._check(b, c)
        if self.csr.shape[0] == 0:
            return c
        if self.target == "native":
            self._native_execute(b, c)
        else:
            self._cuda_execute(b, c)
        return c

    def model(self, b: np.ndarray) -> np.ndarray:
        """The numpy model of the TCA-SpMM kernels for ``b`` (any target; for checking)."""
        from minijit.sparse import model

        m, k = self.csr.shape
        b = check_dense(b, k, self.n)
        dt = self.dtype if self.dtype in ("bf16", "tf32") else "fp16"
        if self.strategy == "window":
            from minijit.sparse import window_plan

            return window_plan.model(self._wplan, self.csr.data, b, precision(dt).quantize)
        return model.tca_spmm(self.plan, self.csr, np.asarray(b, np.float32), dt)

    # ------------------------------------------------------------------ native
    def _row_splits(self, threads: int) -> list[tuple[int, int]]:
        """Contiguous row ranges of about equal cost (nnz + rows)."""
        m = self.csr.shape[0]
        if m == 0:
            return []
        cost = self.csr.indptr.astype(np.int64) + np.arange(m + 1)
        parts = max(1, min(threads, m))
        cuts = np.searchsorted(cost, np.linspace(0, cost[-1], parts + 1)[1:-1])
        bounds = [0, *sorted(set(int(x) for x in cuts if 0 < x < m)), m]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def _native_execute(self, b: np.ndarray, c: np.ndarray) -> None:
        bb = b
        if self.dtype == "fp16":
            bb = np.asarray(b, np.float16).astype(np.float32)
        bb = np.ascontiguousarray(bb, dtype=np.float32)
        indptr, indices, data = self.csr.indptr, self.csr.indices, self._data32
        if indices.shape[0] == 0:  # pointers must reference something
            indices, data = np.zeros(1, np.int32), np.zeros(1, np.float32)
        kern = self._kernel

        def run(r0: int, r1: int) -> None:
            kern(indptr[r0:], indices, data, bb, c[r0:], r1 - r0)

        if len(self._splits) <= 1:
            for r0, r1 in self._splits:
                run(r0, r1)
            return
        from minijit.parallel import _pool

        pool = _pool(len(self._splits) - 1)
        futures = [pool.submit(run, r0, r1) for r0, r1 in self._splits[1:]]
        run(*self._splits[0])
        for f in futures:
            f.result()

    # ------------------------------------------------------------------ cuda
    def _cuda_setup(self) -> None:
        from minijit.sparse import tca

        driver = self._driver
        if not driver.available():
            raise RuntimeError(
                "target='cuda' needs a CUDA device and cuda-bindings (ptx.driver.available() is False);"
                " use target='native'"
            )
        plan = self.plan
        dev = driver.device()
        if self.strategy != "tca":
            from minijit.sparse import window_plan
            from minijit.sparse.reorder import reorder_rows

            indptr, indices = self.csr.indptr, self.csr.indices
            if self.reorder != "none":
                self.row_order = reorder_rows(indptr, indices)

            def candidates(window: int):
                """(plan in the given row order, plan on reordered rows or None) for ``window``:
                rows are reordered when that saves MIN_REORDER_GAIN of the 16-row tiles."""
                tf32 = self._prec.mma == "tf32"
                wp = window_plan.make_window_plan(indptr, indices, self.n, window=window, tf32=tf32)
                order = self.row_order
                if order is None or (self.reorder == "auto" and order.gain < window_plan.MIN_REORDER_GAIN):
                    return wp, None
                wpr = window_plan.make_window_plan(
                    indptr, indices, self.n, row_order=order.perm, window=window, tf32=tf32
                )
                return (wpr, None) if self.reorder == "rows" else (wp, wpr)

            wp, wpr = candidates(self.window_rows or window_plan.WINDOW)
            ws = None
            if self.window_rows is None:  # the swapped 8-row windows, in the better of their two orders
                ws = window_plan.pick_window(*candidates(window_plan.SWAP_WINDOW))
            if self.strategy == "auto":  # up to four candidates: tca, windows, reordered, swapped
                pick = window_plan.choose_strategy(plan, indptr, wp, wpr, swapped=ws)
            else:
                best = window_plan.pick_window(wp, wpr)
                pick = "window_reordered" if best is not wp else "window"
                gain = 1.0 - window_plan.MIN_SWAP_GAIN
                if ws is not None and window_plan.window_mmas(ws) <= gain * window_plan.window_mmas(best):
                    pick = "window_swapped"
            self._wplan = {"window_reordered": wpr, "window_swapped": ws}.get(pick, wp)
            self.strategy = "tca" if pick == "tca" else "window"
            self.reordered = self.strategy == "window" and self._wplan.reordered
        else:
            self.strategy = "tca"
        self.window_rows = self._wplan.window if self.strategy == "window" else None
        if self.strategy == "window":
            self._window_setup(dev)
            return
        module = tca.build(self.n, self.seg_chunks, dtype=self.dtype)
        self.ptx_text = module.text()
        self._module = driver.load_ptx(self.ptx_text, dev.arch)
        sig_main = tuple(p.type for p in module.kernels[0].params)
        sig_red = tuple(p.type for p in module.kernels[1].params)
        self._f_main = self._module.function("tca_spmm", signature=sig_main)
        self._f_reduce = self._module.function("tca_reduce", signature=sig_red)

        def up(a: np.ndarray):
            return driver.to_device(a if a.size else np.zeros(1, a.dtype))

        self._d_indptr = up(self.csr.indptr)
        self._d_indices = up(self.csr.indices)
        self._d_data = up(self._prec.device_array(self.csr.data))
        self._d_plan = [
            up(plan.row_id_for_each_warp),
            up(plan.num_warps_per_row),
            up(plan.warpid_within_row),
            up(plan.partial_slot_for_each_warp),
        ]
        self._d_reduce = [up(plan.reduce_rows), up(plan.reduce_slot_begin), up(plan.reduce_slot_count)]
        self._scratch_setup(plan.num_partials)

    def _window_setup(self, dev) -> None:
        """Modules and device arrays of the row-window strategy (`minijit.sparse.window_plan`)."""
        from minijit.sparse import window_kernel

        driver, wp = self._driver, self._wplan
        module = window_kernel.build(self.n, self.dtype, row_table=wp.reordered, window=wp.window)
        self.ptx_text = module.text()
        self._module = driver.load_ptx(self.ptx_text, dev.arch)
        self._f_main = self._module.function("window_spmm", signature=tuple(p.type for p in module.kernels[0].params))
        self._f_reduce = self._module.function("tca_reduce", signature=tuple(p.type for p in module.kernels[1].params))

        def up(a: np.ndarray):
            return driver.to_device(a if a.size else np.zeros(1, a.dtype))

        self._d_tiles = up(self._tile_values(self.csr.data))
        items = (wp.item_row0, wp.item_blk_begin, wp.item_blk_end, wp.item_pslot, wp.item_pstride)
        self._d_window = [up(np.ascontiguousarray(wp.block_cols.reshape(-1)))] + [up(x) for x in items]
        self._d_reduce = [up(wp.reduce_rows), up(wp.reduce_slot_begin), up(wp.reduce_slot_count)]
        self._d_rows = [up(wp.rows)] if wp.reordered else []  # window row -> C row
        self._scratch_setup(wp.num_partials)

    def _scratch_setup(self, partials: int) -> None:
        """What a call writes on the device: B (a host B uploaded), C (a host C's device copy) and
        the partial sums. They belong to a call (DESIGN.md 12): `execute` takes a set from a pool
        (one per call running at once); `upload_b` and `launch` without addresses use the
        operation's own set (for timing from one thread), allocated at their first use."""
        m, k = self.csr.shape
        self._scratch_bytes = (max(1, k * self.n * self._prec.bytes), max(1, m * self.n * 4),
                               max(1, partials * self.n * 4))  # fmt: skip
        self._scratch = ScratchPool(self._new_scratch)
        self._own_set: tuple | None = None

    def _new_scratch(self) -> tuple:
        return tuple(self._driver.DeviceBuffer(n) for n in self._scratch_bytes)

    def _own(self) -> tuple:
        if self._own_set is None:
            self._own_set = self._new_scratch()
        return self._own_set

    def _tile_values(self, data: np.ndarray) -> np.ndarray:
        """The row-window tiles of ``data`` as the kernel reads them (fp16, bf16 bits, or fp32
        already rounded to tf32 with cvt.rna's rule: the kernel does not round them again)."""
        t = self._wplan.tiles(data).reshape(-1)
        return self._prec.device_array(self._prec.quantize(t) if self._prec.mma == "tf32" else t)

    def plan_summary(self) -> str:
        """The chosen strategy and its plan, in words."""
        if self.strategy == "window":
            order = f"; {self.row_order.summary()}" if self.reordered else ""
            return f"row windows: {self._wplan.summary()}{order}"
        return f"seed 003: {self.plan.summary()}"

    def upload_b(self, b: np.ndarray) -> None:
        """Copy B (row-major, as the kernel's input type: fp16, bf16 bits or fp32) to the
        operation's own device B (for `launch`; one thread)."""
        self._own()[0].copy_from(self._prec.device_array(b))

    def launch(self, b_ptr: int | None = None, c_ptr: int | None = None, *, scratch: tuple | None = None) -> None:
        """Run the kernels (asynchronous; for timing) on the uploaded B, or on device B and C at
        these addresses (checked by the caller). ``scratch``: the (B, C, partials) device
        buffers to use (default: the operation's own set, for timing from one thread)."""
        plan = self.plan if self.strategy == "tca" else self._wplan
        own_b, own_c, d_p = self._own() if scratch is None else scratch
        d_b = own_b if b_ptr is None else b_ptr
        d_c = own_c if c_ptr is None else c_ptr
        if self.strategy == "window":
            from minijit.sparse.window_kernel import WARPS

            if plan.num_items:
                cols, *items = self._d_window
                self._f_main.launch(
                    grid=(-(-plan.num_items // WARPS),),
                    block=(32 * WARPS,),
                    args=(self._d_tiles, cols, d_b, d_c, d_p, *items, plan.num_items, plan.m, *self._d_rows),
                )
        elif plan.num_blocks:
            self._f_main.launch(
                grid=(plan.num_blocks,),
                block=(32 * 8,),
                args=(
                    self._d_indptr,
                    self._d_indices,
                    self._d_data,
                    d_b,
                    d_c,
                    d_p,
                    *self._d_plan,
                ),
            )
        if plan.needs_second_pass:
            self._f_reduce.launch(
                grid=(plan.reduce_rows.shape[0], -(-self.n // 256)),
                block=(256,),
                args=(d_c, d_p, *self._d_reduce),
            )

    def _cuda_execute(self, b: np.ndarray, c: np.ndarray) -> None:
        scratch = self._scratch.acquire()  # this call's B, C and partials on the device
        try:
            d_b, d_c, _ = scratch
            d_b.copy_from(self._prec.device_array(b))
            self.launch(scratch=scratch)
            self._driver.synchronize()
            d_c.copy_to(c)
        finally:
            self._scratch.release(scratch)

    def _cuda_execute_device(self, b: Any, c: Any) -> Any:
        """execute() with a device B and/or C (a numpy side is copied as before)."""
        m, k = self.csr.shape
        host_b = isinstance(b, np.ndarray) or not is_device_array(b)
        host_c = isinstance(c, np.ndarray) or not is_device_array(c)
        if host_b:
            b = check_dense(b, k, self.n)
            b_ptr = None
        else:
            b_ptr = device_matrix(b, "B", (k, self.n), self._prec.device_dtype)
        if host_c:
            c = check_out(c, m, self.n)
            c_ptr = None
        else:
            c_ptr = device_matrix(c, "C", (m, self.n), "float32", writable=True)
        if m == 0:
            return c
        scratch = self._scratch.acquire()
        try:
            if host_b:
                scratch[0].copy_from(self._prec.device_array(b))
            self.launch(b_ptr, c_ptr, scratch=scratch)
            self._driver.synchronize()
            if host_c:
                scratch[1].copy_to(c)
        finally:
            self._scratch.release(scratch)
        return c


def spmm(s: object, b: np.ndarray, target: str = "native", dtype: str | None = None) -> np.ndarray:
    """One-shot ``S @ B`` (float32 result); plans and JITs on every call, so prefer `SpMM` for repeats."""
    csr = as_csr(s)
    if not isinstance(b, np.ndarray) or b.ndim != 2:
        raise TypeError("B must be a 2-D numpy array")
    op = SpMM(csr, b.shape[1], dtype=dtype, target=target)
    c = np.empty((csr.shape[0], b.shape[1]), np.float32)
    return op.execute(b, c)
