"""`CudaSpMM`: the cuda target of `minijit.sparse.spmm.SpMM` (TCA-SpMM tensor-core kernels,
`minijit.sparse.tca`, or row windows, `minijit.sparse.window_kernel`; see `minijit.sparse.spmm`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.cache import ScratchPool
from minijit.cuda.reorder import from_c_order, needs_reorder, to_c_order
from minijit.runtime.device_arrays import device_matrix, is_device_array
from minijit.sparse.csr import check_dense, check_out, row_major
from minijit.sparse.device import host_csr
from minijit.sparse.plan import SEG_CHUNKS
from minijit.sparse.precision import precision
from minijit.sparse.spmm import REORDERS, STRATEGIES, SpMM

__all__ = ["CudaSpMM"]


class CudaSpMM(SpMM):
    """C = S @ B on an NVIDIA GPU (``SpMM(..., target="cuda")``).

    ``driver``: the module launches go through, `ptx.driver` by default; `ptx.simdriver` runs the
    same kernels in the PTX simulator (no GPU; slow, for tests). ``strategy`` and ``reorder``: see
    `minijit.sparse.spmm`; after construction ``strategy`` is "tca" or "window", ``reordered``
    says whether the row windows hold reordered rows and ``row_order`` is the
    `minijit.sparse.reorder.RowOrder` that was considered (None when none was).
    """

    target = "cuda"

    def __init__(
        self,
        csr: object,
        n: int,
        dtype: str | None = None,
        *,
        seg_chunks: int = SEG_CHUNKS,
        driver: Any = None,
        strategy: str = "auto",
        reorder: str = "auto",
        window_rows: int | None = None,
        threads: int | None = None,
        isa: str | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if reorder not in REORDERS:
            raise ValueError(f"reorder must be one of {REORDERS}, got {reorder!r}")
        if reorder == "rows" and strategy == "tca":
            raise ValueError(
                "reorder='rows' reorders the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        if window_rows is not None and (window_rows not in (8, 16) or isinstance(window_rows, bool)):
            raise ValueError(f"window_rows must be None, 16 or 8, got {window_rows!r}")
        if window_rows is not None and strategy == "tca":
            raise ValueError(
                "window_rows applies to the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        del threads, isa  # CPU options (accepted, as ``SpMM`` takes them for every target)
        dtype = self._checked_args(n, dtype)
        from ptx.driver import resolve

        self._driver = resolve(driver)
        self._prec = precision(dtype)
        self._init_common(host_csr(csr, self._driver) or csr, n, dtype, seg_chunks)
        self.strategy = strategy  # "tca" or "window" once chosen
        self.reorder = reorder
        self.reordered = False  # whether the row-window plan runs on reordered rows
        self.row_order = None  # the `reorder.RowOrder` considered (window candidates), or None
        self.window_rows = window_rows  # rows per window of the chosen row-window plan
        self._wplan = None
        self.isa = "ptx"
        self._setup_kernels()

    def _repr_extra(self) -> str:
        return f", reordered={self.reordered}, window_rows={self.window_rows}"

    def _kernel_name(self) -> str:
        return "window_spmm" if self.strategy == "window" else "tca_spmm"

    def _upload_values(self, data: np.ndarray) -> None:
        if self.strategy == "window":
            self._d_tiles.copy_from(self._tile_values(data))
        else:
            self._d_data.copy_from(self._prec.device_array(data))

    def execute(self, b: Any, c: Any) -> Any:
        """``c[:] = S @ b``; returns ``c``. Arguments are checked before any kernel runs.

        Also takes device arrays for either argument (torch CUDA tensors, cupy,
        ``__cuda_array_interface__`` or DLPack objects): B of the kernel's type (float16 for
        "fp16", bfloat16 for "bf16", float32 for "tf32") and C float32, 16-byte aligned, each one
        dense block in C order, F order or any axis permutation (`minijit.arrays`; views with
        gaps or negative strides are refused). C-order ones are read and written in place; others
        are reordered on the device through the call's C-order scratch (one copy launch each,
        `minijit.cuda.reorder`), with no host copies. Host arrays may be in C or F order too."""
        if is_device_array(b) or is_device_array(c):
            return self._execute_device(b, c)
        b, c = self._check(b, c)
        if self.csr.shape[0]:
            dst = row_major(c)  # an F-order C: computed row-major, then copied in
            self._execute_host(b, dst)
            if dst is not c:
                c[...] = dst
        return c

    def _setup_kernels(self) -> None:
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
        the partial sums. They belong to a call (docs/decisions.md, "Plans are immutable and shareable"):
        `execute` takes a set from a pool (one per call running at once); `upload_b` and `launch`
        without addresses use the operation's own set (for timing from one thread), allocated at
        their first use."""
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
        return super().plan_summary()

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

    def _execute_host(self, b: np.ndarray, c: np.ndarray) -> None:
        scratch = self._scratch.acquire()  # this call's B, C and partials on the device
        try:
            d_b, d_c, _ = scratch
            d_b.copy_from(self._prec.device_array(b))
            self.launch(scratch=scratch)
            self._driver.synchronize()
            d_c.copy_to(c)
        finally:
            self._scratch.release(scratch)

    def _execute_device(self, b: Any, c: Any) -> Any:
        """execute() with a device B and/or C (a numpy side is copied as before); a device B or C
        in another dense order than C order goes through this call's scratch B or C."""
        m, k = self.csr.shape
        host_b = isinstance(b, np.ndarray) or not is_device_array(b)
        host_c = isinstance(c, np.ndarray) or not is_device_array(c)
        bv = cv = None  # device views read / written through the scratch
        b_ptr = c_ptr = None  # device arrays the kernels use in place
        if host_b:
            b = check_dense(b, k, self.n)
        else:
            v = device_matrix(b, "B", (k, self.n), self._prec.device_dtype)
            bv, b_ptr = (v, None) if needs_reorder(v, "B") else (None, v.ptr)
        if host_c:
            c = check_out(c, m, self.n)
        else:
            v = device_matrix(c, "C", (m, self.n), "float32", writable=True)
            cv, c_ptr = (v, None) if needs_reorder(v, "C") else (None, v.ptr)
        if m == 0:
            return c
        driver = self._driver
        scratch = self._scratch.acquire()
        try:
            if host_b:
                scratch[0].copy_from(self._prec.device_array(b))
            elif bv is not None:
                to_c_order(driver, bv, scratch[0].ptr)
            self.launch(b_ptr, c_ptr, scratch=scratch)
            if cv is not None:
                from_c_order(driver, scratch[1].ptr, cv)
            driver.synchronize()
            if host_c:
                dst = scratch[1].copy_to(row_major(c))
                if dst is not c:
                    c[...] = dst
        finally:
            self._scratch.release(scratch)
        return c
