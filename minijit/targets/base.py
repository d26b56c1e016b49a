"""The target protocol: what the core may ask of a target family."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

#: the integer dtypes of `minijit.ir.dtype_t` and the float dtype of the same size whose zero and
#: copy kernels move their bits
INT_AS_FLOAT = {"s32": "fp32", "s64": "fp64"}


class DtypeError(TypeError):
    """A generator of the target has no kernel for this dtype (`minijit.plan.kernel`: SetupError
    wrong_dtype)."""


@dataclass(frozen=True)
class Target:
    """A target family and ISA. ``name`` is the public spelling ("x86_64-avx2", "cuda", ...)."""

    family: ClassVar[str] = ""
    #: dtypes its tensor operations take (names of `minijit.ir.dtype_t`)
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp64")
    #: the registry of operation classes: public class name (`minijit.TensorOperation`,
    #: `minijit.EinsumPlan`, `minijit.sparse.SpMM`) -> ``"module:Class"`` of the subclass that
    #: serves this family; a public class not named here serves the family itself
    operations: ClassVar[dict[str, str]] = {}

    @property
    def name(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name

    def operation_class(self, public: type) -> type:
        """The subclass of ``public`` that serves this target (``public`` itself when the registry
        names none); its module is imported on first use, so no module imports its subclasses."""
        ref = self.operations.get(public.__name__)
        if ref is None:
            return public
        module, _, name = ref.partition(":")
        impl = getattr(importlib.import_module(module), name)
        if not (isinstance(impl, type) and issubclass(impl, public)):
            raise TypeError(f"{self.name}: operations[{public.__name__!r}] = {ref!r} is not a subclass of it")
        return impl


@dataclass(frozen=True)
class CpuTarget(Target):
    """A CPU ISA: kernel generators, capabilities, cost-model parameters (sizes in elements unless
    named ``_bytes``). The generators are uncached; `minijit.kernels` puts its cache in front."""

    isa: str = ""
    operations: ClassVar[dict[str, str]] = {"SpMM": "minijit.sparse.spmm_cpu:CpuSpMM"}

    #: the ISA family of `minijit.runtime.runs_natively` ("x86_64", "aarch64")
    family: ClassVar[str] = ""
    #: whether a host of another ISA runs the code in an emulator (for correctness, not speed)
    emulable: ClassVar[bool] = False
    #: capabilities of the x86-64 kernels (False elsewhere): A/B packed in micro-panels, the
    #: kernel copying A itself, a first-touch zero / a last touch (as an elementwise epilogue of
    #: `epilogue_ops`) fused into the BRGEMM / GEMV kernel, the
    #: one-column GEMV kernel (N = 1 reads A once), chunked execution of a large A
    #: the integer dtypes (`INT_AS_FLOAT`) it has BRGEMM kernels for (wrapping multiply-adds; zero
    #: and copy as the float kernels of their size); other generators refuse them (`DtypeError`)
    int_dtypes: ClassVar[tuple[str, ...]] = ()
    packs_panels: ClassVar[bool] = False
    copies_a: ClassVar[bool] = False
    fuses_touches: ClassVar[bool] = False
    has_gemv: ClassVar[bool] = False
    chunks_a: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return f"{self.family}-{self.isa}"

    @property
    def epilogue_ops(self) -> frozenset[str]:
        """The epilogue operations (`minijit.kernels.epilogue`) its BRGEMM / GEMV kernels fuse
        (the ``epilogue`` option; none unless `fuses_touches`)."""
        return frozenset()

    @property
    def generic_epilogue_ops(self) -> frozenset[str]:
        """The epilogue operations its generic GEMM (`generic_gemm`) has a kernel for."""
        return frozenset()

    @property
    def native(self) -> bool:
        """Whether this host runs the target's code without emulation."""
        from minijit.runtime import runs_natively

        return runs_natively(self.family)

    @property
    def supported(self) -> bool:
        """Whether this host's CPU has the ISA's extensions (meaningful where `native`)."""
        return True

    @property
    def extensions(self) -> str:
        """The ISA extensions the target's code needs, in words ("AVX2+FMA", "SVE"), for messages."""
        raise NotImplementedError

    @property
    def vector_bits(self) -> int:
        """Bits of one vector register of the target's code (SVE: the vector length it is built
        for, `minijit.targets.aarch64.AArch64Target.sve_vl`)."""
        raise NotImplementedError

    def vector_lanes(self, dtype: Any) -> int:
        """Elements of ``dtype`` (a numpy dtype or anything `numpy.dtype` takes) per vector
        register of the target's code (at least 1): the lanes the sparse planner weighs its
        vector statements by (`minijit.sparseauto.plan.vector_lanes`)."""
        import numpy as np

        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    @property
    def max_prim_size(self) -> int | None:
        """The largest prim dim (elements) every kernel of the target takes; None: no limit."""
        return None

    @property
    def panel_column_bytes(self) -> int:
        """Bytes of one column of the register block of A (fp64 blocks have half the rows)."""
        raise NotImplementedError

    @property
    def b_block_l2_share(self) -> float:
        """The share of L2 the cache model's B block may take (`minijit.blocking`)."""
        return 1.0

    # -- generators (arguments as in `minijit.kernels`; machine code loaded for this target) ----
    def brgemm(
        self,
        m: int,
        n: int,
        k: int,
        br_size: int = 1,
        *,
        trans_a: bool = False,
        trans_b: bool = False,
        trans_c: bool = False,
        dtype: str = "fp32",
        **options: Any,
    ) -> Any:
        """A BRGEMM kernel; ``options`` are the family's own (x86-64: panels, fused touches, ...).
        An integer ``dtype`` the target has no kernel for: `DtypeError`."""
        self._check_int(dtype, "brgemm")
        return self._brgemm((m, n, k, br_size), (trans_a, trans_b, trans_c), dtype, options)

    def unary(
        self, m: int, n: int, *, trans_b: bool = False, dtype: str = "fp32", ptype: str = "copy", dense_b: bool = False
    ) -> Any:
        """A zero/copy/relu kernel (``dense_b``: an x86-64 store hint, see `minijit.kernels.unary`);
        integers (of `int_dtypes`): zero and copy only, the float kernel of their size."""
        if dtype in INT_AS_FLOAT:
            self._check_int(dtype, f"unary {ptype}")
            if ptype not in ("zero", "copy"):
                raise DtypeError(f"{self.name}: unary {ptype} has no integer kernel (dtype {dtype})")
            dtype = INT_AS_FLOAT[dtype]
        return self._unary(m, n, trans_b, dtype, ptype, dense_b)

    def binary(self, m: int, n: int, *, dtype: str = "fp32", ptype: str = "add") -> Any:
        """An add/sub/mul/div/min/max kernel (float dtypes: `DtypeError` for an integer one)."""
        if dtype in INT_AS_FLOAT:
            raise DtypeError(f"{self.name}: binary {ptype} has no integer kernel (dtype {dtype})")
        return self._binary(m, n, dtype, ptype)

    def _check_int(self, dtype: str, what: str) -> None:
        """`DtypeError` when ``dtype`` is an integer dtype the target has no ``what`` kernel for."""
        if dtype in INT_AS_FLOAT and dtype not in self.int_dtypes:
            raise DtypeError(f"{self.name}: {what} has no {dtype} kernel (integer dtypes: {self.int_dtypes or 'none'})")

    # the family's generators behind the three above
    def _brgemm(self, sizes: tuple[int, ...], trans: tuple[bool, ...], dtype: str, options: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _unary(self, m: int, n: int, trans_b: bool, dtype: str, ptype: str, dense_b: bool) -> Any:
        raise NotImplementedError

    def _binary(self, m: int, n: int, dtype: str, ptype: str) -> Any:
        raise NotImplementedError

    def loopnest(self, plan: Any) -> Any:
        """The compiled loop nest of a `minijit.kernels.loopnest.LoopNest`."""
        raise NotImplementedError

    def generic_gemm(self, dtype: str = "fp32", epilogue: Any = None) -> Any:
        """The generic-tier GEMM kernel (`minijit.kernels.generic`: every size and stride a run-time
        argument) for ``dtype`` and ``epilogue`` (a `minijit.kernels.epilogue.Epilogue`, its text,
        or None: none)."""
        raise NotImplementedError(f"{self.name}: no generic GEMM kernel")

    def attention_kernel(
        self, dtype: str = "fp32", g: int | None = None, s_x: int | None = None, softmax: bool = True
    ) -> tuple[Any, Any, str, int, int] | None:
        """The fused attention kernel (`minijit.attention`: both products and the online softmax in
        registers) for ``dtype`` ("fp32"/"fp64") and the tile of ``g`` query rows and ``s_x`` keys
        (the generator's defaults where None) as ``(module, kernel, isa, g, s_x)``: the generator
        module (its ``ARGS`` and ``scratch_bytes``), the loaded kernel (``.address``), the kernel's
        ISA name and the validated tile; None where the target has no such kernel or its code does
        not run on this host. ``softmax=False``: without the softmax stage (wrong results; the
        bench's measure of the softmax's share). ValueError for a tile the generator refuses."""
        return None

    def half_convert_kernel(self, src: str, dst: str) -> Any | None:
        """The ``void(const void* src, void* dst, int64_t n)`` kernel converting ``n`` contiguous
        elements from ``src`` to ``dst`` ("fp16"/"fp32", `minijit.kernels.convert`), or None where
        the target has none that runs on this host (numpy's astype then)."""
        return None

    # -- sparse generators ---------------------------------------------------------------------
    @property
    def sparse_convert_passes(self) -> bool:
        """Whether `sparse_convert_pass` hands out kernels here (natively run conversion passes)."""
        return False

    def sparse_convert_pass(self, kind: str, nd: int, dtype: str = "") -> Any:
        """The native conversion pass of `minijit.sparseauto.convert_native`: ``kind`` "csf"
        (sorted COO coordinates of ``nd`` modes to CSF levels) or "nonzero" (a dense ``dtype``
        array of ``nd`` dimensions to COO); NotImplementedError where `sparse_convert_passes` is
        False (the callers take numpy's path then)."""
        raise NotImplementedError(f"{self.name}: no native sparse conversion passes")

    @property
    def spmm_isa(self) -> str:
        """The ISA of the CSR SpMM kernel (`minijit.sparse.cpu`) this target runs: its own ISA
        where that generator has one."""
        return self.isa

    def spmm(self, n: int) -> Any:
        """The CSR SpMM kernel ``C = S @ B`` for N = ``n`` columns (`minijit.sparse.cpu.generate`),
        in `spmm_isa`; uncached."""
        from minijit.sparse import cpu

        return cpu.generate(n, self.spmm_isa)

    def sparse_program(self, nest: Any, extents: dict[str, int], dtype: str) -> Any:
        """The compiled code of a sparse loop nest (`minijit.sparseauto.nest.Nest`) for the index
        ``extents`` and value ``dtype`` ("fp32"/"fp64"): a `minijit.sparseauto.codegen.Program`,
        not loaded. ValueError for a nest, dtype or extents the generator does not take."""
        raise NotImplementedError

    # -- micro-panels (x86-64 only) ----------------------------------------------------------
    def panel_rows(self, dtype: str) -> int:
        """Rows of M in one A micro-panel (the BRGEMM's register block)."""
        raise NotImplementedError(f"{self.name} packs no micro-panels")

    def panel_width(self) -> int:
        """Columns of N in one B micro-panel."""
        raise NotImplementedError(f"{self.name} packs no micro-panels")

    def a_copy_fits(self, m: int, n: int, k: int, br: int, dtype: str) -> bool:
        """Whether the BRGEMM kernel of these prim sizes can pack its A itself (stack buffer)."""
        return False
