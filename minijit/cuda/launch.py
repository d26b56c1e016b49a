"""The launches of `CudaTensorOperation` beyond one mma.sync kernel: the sm90a (wgmma/TMA) family
choice and its prepared launch, split-K (partials, then the reduction) and its numpy model, and
the cached generated/loaded kernels they share (`cuda.kernels` in `minijit.cache_info`)."""

from __future__ import annotations

import threading

import numpy as np

from minijit import limits
from minijit.cache import LRUCache
from minijit.cuda import elementwise, gemm, gemm_sm90
from minijit.errors import SetupError, error_t

#: the most generated kernels, loaded modules and functions kept (least recently used first out)
KERNEL_CACHE_SIZE = 256
_kernels = LRUCache(lambda: KERNEL_CACHE_SIZE, name="cuda.kernels")


class Launches:
    """Mixin of `CudaTensorOperation`: family choice, sm90a and split-K launches."""

    def family_for(self, arch: str, ptr_a: int = 0, ptr_b: int = 0) -> str:
        """The GEMM family a launch on a device of ``arch`` ("sm_90", ...) uses: "sm90a" on compute
        capability 9.0 when `gemm_sm90.plan` accepts the GEMM, else "mma.sync"; ``family``
        overrides. sm90a runs f16/bf16 in all 4 operand orientations (so all 8 with the C^T trick)
        and tf32 with A and B K-major (``a[k + m*lda]``, ``b[k + n*ldb]``; other tf32 orientations:
        mma.sync, as wgmma has no tf32 transpose), batched when the A and B columns of the batch
        table are uniform strides (C's may be anything) and reduced (BRGEMM, K loop dims) when the
        reduction table is; TMA needs 16-byte aligned pointers, leading dims and strides."""
        if self.config is None or self.plan is not None:
            raise RuntimeError("family_for needs a GEMM/BRGEMM setup")
        S = self.spec
        args = (self.dtype, self.m, self.n, self.k, S.a_major, S.b_major, self.lda, self.ldb)
        ok = gemm_sm90.plan(*args, self.batch_table, self.red_table, ptr_a, ptr_b) is not None
        if self.family == "sm90a":
            if not ok:
                raise SetupError(
                    error_t.wrong_dtype,
                    "family 'sm90a' needs f16/bf16 (any orientation) or tf32 with K-major A and B, TMA-aligned"
                    " operands and uniform batch/reduction strides",
                )
            return "sm90a"
        if self.family == "mma.sync":
            return "mma.sync"
        return "sm90a" if ok and arch == "sm_90" else "mma.sync"

    def sm90_spec(self) -> gemm_sm90.Sm90Spec:
        """The sm_90a kernel spec of this GEMM (tile 256 x 128, 4 stages; 128 x 128 when M <= 128;
        orientation, batch and reduction dims from `gemm_sm90.plan`; persistent: one CTA per SM
        walks the tiles, see `gemm_sm90`)."""
        S = self.spec
        args = (self.dtype, self.m, self.n, self.k, S.a_major, S.b_major, self.lda, self.ldb)
        p = gemm_sm90.plan(*args, self.batch_table, self.red_table)
        if p is None:
            raise SetupError(error_t.wrong_dtype, "this GEMM does not fit the sm90a family (see family_for)")
        bm = 128 if self.m <= 128 else 256
        return gemm_sm90.Sm90Spec(
            self.dtype, bm=bm, bn=128, stages=4, first=S.first, last=S.last, a_major=S.a_major, b_major=S.b_major,
            batch=p.batch, reduce=p.reduce, persistent=True,
        )  # fmt: skip

    def _launch_sm90(self, dev, pa: int, pb: int, pc: int):
        """The prepared sm_90a launch (tensor maps encoded for these addresses, the batch table on
        the device when batched); call it to launch."""
        driver = self.driver
        spec = self.sm90_spec()

        def load():
            gk = gemm_sm90.generate(spec)
            mod = driver.load_ptx(gk.text, "sm_90a")
            return mod, mod.function(gk.name, signature=gk.signature), gk

        _, fn, gk = _kernels.get_or_create(("fn90", spec, dev.ordinal, driver.__name__), load)
        S = self.spec
        args = (self.dtype, self.m, self.n, self.k, S.a_major, S.b_major, self.lda, self.ldb)
        p = gemm_sm90.plan(*args, self.batch_table, self.red_table)
        ta, tb = gemm_sm90.tensor_maps(spec, pa, pb, self.m, self.n, self.k, self.lda, self.ldb, **p.map_strides())
        enc = driver.encode_tensor_map_tiled
        head, sizes = [enc(**ta), enc(**tb), pc], [self.m, self.n, self.k]
        if spec.batch:
            if self._dev_tables is None:
                self._dev_tables = (driver.to_device(self.batch_table), driver.to_device(self.red_table))
            head.append(self._dev_tables[0])
        if spec.reduce:
            sizes.append(len(self.red_table))
        if spec.persistent:  # the batch count; one CTA per SM (a stage ring of ~200 KB: one fits)
            sizes.append(len(self.batch_table))
            if getattr(self, "gpu", None) is None:
                from minijit.cuda import tiling  # noqa: PLC0415

                self.gpu = tiling.GpuModel.from_device(dev)
            grid = gk.grid(self.m, self.n, len(self.batch_table), ctas=self.gpu.sms)
        else:
            grid = gk.grid(self.m, self.n, len(self.batch_table))
        return fn.prepare(grid, gk.block, args=(*head, *sizes, self.ldc), shared=gk.shared_bytes)

    def _launch_splitk(self, dev, pa: int, pb: int, pc: int):
        """The prepared split-K launch (partials kernel into the workspace, then the reduction
        kernel of `minijit.cuda.splitk` applying the touches to C) for operands at these device
        addresses; None when this launch is not split-K (elementwise ops, a plan with split_k 1,
        or the sm90a family). The first call reads the device model (``gpu``) if unset; the
        workspace (``batch * split_k`` fp32 M x N planes) is allocated on the first split-K launch
        of a setup and kept for its later ones."""
        if self.plan is not None:
            return None
        if getattr(self, "gpu", None) is None:
            from minijit.cuda import tiling  # noqa: PLC0415

            self.gpu = tiling.GpuModel.from_device(dev)
        tp = self.tile_plan
        if tp.split_k == 1:
            return None
        key = ("splitk", dev.ordinal, pa, pb, pc)
        launch = self._launches.get(key)
        if launch is None:
            launch = self._launches.put(key, self._prepare_splitk(dev, pa, pb, pc, tp))
        return launch or None

    def _prepare_splitk(self, dev, pa: int, pb: int, pc: int, tp):
        """`_launch_splitk`'s launch pair as one callable (False for the sm90a family)."""
        from minijit.cuda import splitk  # noqa: PLC0415

        if self.family_for(dev.arch, pa, pb) != "mma.sync":
            return False
        driver, m, n, batch = self.driver, self.m, self.n, len(self.batch_table)
        if self._dev_tables is None:
            self._dev_tables = (driver.to_device(self.batch_table), driver.to_device(self.red_table))
        ws = getattr(self, "_workspace", None)
        if ws is None or ws[0] is not self.spec or ws[1] != dev.ordinal:
            nbytes = splitk.workspace_bytes(tp.split_k, m, n, batch)
            limits.check_alloc(nbytes, "split-K workspace")
            self._workspace = ws = (self.spec, dev.ordinal, driver.DeviceBuffer(nbytes))
        bt, rt = self._dev_tables
        spec = self.kernel_spec(pa, pb)
        gk = _generated(spec)
        args = (pa, pb, ws[2], bt, rt, m, n, self.k, len(self.red_table), self.lda, self.ldb, m * 4)
        main = _loaded(spec, dev, driver).prepare(gk.grid(m, n, batch), gk.block, args=args)
        rspec = tp.reduce_spec(self.spec.first, self.spec.last)

        def load():
            rk = splitk.generate(rspec)
            mod = driver.load_ptx(rk.text, dev.arch)
            return mod, mod.function(rk.name, signature=rk.signature), rk

        _, rfn, rk = _kernels.get_or_create(("fn", rspec, dev.ordinal, driver.__name__), load)
        red = rfn.prepare(rk.grid(m, n, batch), rk.block, args=(ws[2], pc, bt, m, n, self.ldc))
        pair = threading.Lock()

        def launch(stream=None) -> None:
            # the workspace is the operation's: the two launches of one call enter the stream
            # together, so another thread's partials never land between them (stream order)
            with pair:
                main(stream)
                red(stream)

        return launch

    def _simulate_splitk(self, spec: gemm.GemmSpec, fa, fb, c: np.ndarray, bt: np.ndarray) -> gemm.ModelStats:
        """`simulate` for a split-K plan: the partials kernel's model into a workspace, then the
        reduction's (`minijit.cuda.splitk.simulate`) into ``c`` (float32 view of out's memory)."""
        from minijit.cuda import splitk  # noqa: PLC0415

        m, n, batch = self.m, self.n, len(bt)
        nbytes = splitk.workspace_bytes(spec.split_k, m, n, batch)
        limits.check_alloc(nbytes, "split-K workspace")
        ws = np.zeros(nbytes // 4, np.float32)
        stats = gemm.simulate(spec, fa, fb, ws, m, n, self.k, self.lda, self.ldb, m * 4, bt, self.red_table)
        c_work = c.copy()
        splitk.simulate(self.tile_plan.reduce_spec(self.spec.first, self.spec.last), ws, c_work, m, n, self.ldc, bt)
        c[...] = c_work
        return stats


def _generated(spec):
    """The generated kernel of a `gemm.GemmSpec` or an `elementwise.KernelSpec` (cached)."""
    gen = elementwise.generate if isinstance(spec, elementwise.KernelSpec) else gemm.generate
    return _kernels.get_or_create(("gen", spec), lambda: gen(spec))


def _loaded(spec, dev, driver):
    def load():
        gk = _generated(spec)
        mod = driver.load_ptx(gk.text, dev.arch)
        return mod, mod.function(gk.name, signature=gk.signature)

    return _kernels.get_or_create(("fn", spec, dev.ordinal, driver.__name__), load)[1]
