"""`CpuSpMM`: the native target of `minijit.sparse.spmm.SpMM` (JIT'd CPU kernels, `minijit.sparse.cpu`).

Served by the shared sparse layer: S is the layer's tensor type (`Csr.tensor`: a full level,
then a segmented one) and ``C = S @ B`` runs through `minijit.sparseauto.execute.RowSpMM`, the
route sparse einsum ``ij,jk->ik`` takes for the same tensor. Rows are split over minijit's
thread pool by cost (nnz + rows). ``dtype="fp16"`` rounds S and B to
fp16 first (the GPU's input precision) and computes in fp32. Host arrays of any kind are taken for
B and C: numpy arrays, torch CPU tensors and host DLPack producers (C is written in place through
its memory, `minijit.runtime.device_arrays.host_array`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minijit.runtime.device_arrays import device_kind, host_array, is_device_array
from minijit.sparse.csr import row_major
from minijit.sparse.plan import SEG_CHUNKS
from minijit.sparse.spmm import REORDERS, STRATEGIES, SpMM
from minijit.targets import CpuTarget

__all__ = ["CpuSpMM", "spmm_target"]


def spmm_target(isa: str | None = None) -> CpuTarget:
    """The target whose CSR SpMM kernel (`CpuTarget.spmm`, in its `CpuTarget.spmm_isa`) a `CpuSpMM`
    runs: this host's (`minijit.targets.native`; RuntimeError where its CPU lacks the ISA's
    extensions), or the target of an ``isa`` override ("avx512", "avx2", "neon"; ValueError for
    any other, "sve" included: the SpMM generator has no SVE kernel)."""
    from minijit import targets

    if isa is None:
        t = targets.native()
        if not t.supported:
            raise RuntimeError(f"no native SpMM kernel for this host ({t.name} needs {t.extensions})")
        return t
    bad = ValueError(f"isa must be 'avx512', 'avx2' or 'neon', got {isa!r}")
    try:
        t = targets.for_isa(isa)
    except ValueError:
        raise bad from None
    if t.spmm_isa != isa:
        raise bad
    return t


class CpuSpMM(SpMM):
    """C = S @ B on the CPU (``SpMM(..., target="native")``).

    ``threads``: worker count (default: minijit's pool size). ``isa``: kernel override ("avx512",
    "avx2", "neon"; NEON runs emulated on non-ARM hosts, for testing only); by default the
    kernel of this host's target (`spmm_target`: `minijit.targets.native`, whose `spmm_isa` is
    NEON on an SVE host). ``target_info`` is that target object, ``isa`` the kernel's ISA. ``strategy`` "auto" or
    "tca" (the only CPU kernel); the cuda-only options raise ValueError naming them.
    """

    target = "native"

    def __init__(
        self,
        csr: object,
        n: int,
        dtype: str | None = None,
        *,
        threads: int | None = None,
        isa: str | None = None,
        seg_chunks: int = SEG_CHUNKS,
        driver: Any = None,
        strategy: str = "auto",
        reorder: str = "auto",
        window_rows: int | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if strategy == "window":
            raise ValueError("strategy='window' is a target='cuda' kernel (dtype 'fp16', 'bf16' or 'tf32')")
        if reorder not in REORDERS:
            raise ValueError(f"reorder must be one of {REORDERS}, got {reorder!r}")
        if reorder == "rows":
            raise ValueError(
                "reorder='rows' reorders the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        if window_rows is not None and (window_rows not in (8, 16) or isinstance(window_rows, bool)):
            raise ValueError(f"window_rows must be None, 16 or 8, got {window_rows!r}")
        if window_rows is not None:
            raise ValueError(
                "window_rows applies to the row-window strategy: target='cuda', strategy 'auto' or 'window'"
            )
        self._init_common(csr, n, self._checked_args(n, dtype), seg_chunks)
        self.strategy = strategy
        #: the target whose kernel runs (`spmm_target`), and the kernel's ISA
        self.target_info = spmm_target(isa)
        self.isa = self.target_info.spmm_isa
        from minijit.parallel import default_threads
        from minijit.sparseauto.execute import RowSpMM

        self.threads = max(1, int(threads) if threads is not None else default_threads())
        #: the shared layer's CSR route over S as the layer's tensor (values rounded per `dtype`)
        self._layer = RowSpMM(self.csr.tensor(self._data32), self.n, self.target_info, self.threads)
        self._kernel = self._layer.kernel

    @property
    def _splits(self) -> list[tuple[int, int]]:
        """The row ranges the threads run (`RowSpMM` splits by nnz + rows)."""
        return self._layer.splits

    def _upload_values(self, data: np.ndarray) -> None:
        self._layer.use(self.csr.tensor(self._data32))

    def _kernel_name(self) -> str:
        return f"csr_spmm_{self.isa}_n{self.n}"

    def execute(self, b: Any, c: Any) -> Any:
        """``c[:] = S @ b``; returns ``c``. Arguments are checked before any kernel runs. Host
        arrays (numpy, torch CPU tensors, host DLPack producers) are read and written in place;
        CUDA device arrays raise TypeError (they need ``target="cuda"``)."""
        out = c
        if is_device_array(b) or is_device_array(c):
            for name, x in (("B", b), ("C", c)):
                if device_kind(x, name) != "host":
                    raise TypeError(f"{name} is a CUDA device array: device arrays need target='cuda'")
            b, c = host_array(b, "B"), host_array(c, "C")
        b, c = self._check(b, c)
        if self.csr.shape[0]:
            dst = row_major(c)  # an F-order C: computed row-major, then copied in
            self._run(b, dst)
            if dst is not c:
                c[...] = dst
        return c if isinstance(out, np.ndarray) else out

    def _run(self, b: np.ndarray, c: np.ndarray) -> None:
        bb = b
        if self.dtype == "fp16":
            bb = np.asarray(b, np.float16).astype(np.float32)
        self._layer.run(np.ascontiguousarray(bb, dtype=np.float32), c)
