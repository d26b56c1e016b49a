"""AArch64: NEON and SVE (emulated in the qemu worker on other hosts, at ``sve_vl`` bits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from minijit.targets.base import CpuTarget

ISAS = ("neon", "sve")
SVE_VLS = tuple(range(128, 2049, 128))


@dataclass(frozen=True)
class AArch64Target(CpuTarget):
    """``isa`` "neon" or "sve"; ``sve_vl``: bits of the SVE vector length the emulation worker
    runs the code at on a host of another ISA (every kernel of one operation shares it)."""

    sve_vl: int = 128

    family: ClassVar[str] = "aarch64"
    emulable: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.isa not in ISAS:
            raise ValueError(f"aarch64 isa must be one of {ISAS}, got {self.isa!r}")
        if self.sve_vl not in SVE_VLS:
            raise ValueError(f"sve_vl must be a multiple of 128 in 128..2048 (bits), got {self.sve_vl!r}")

    @property
    def int_dtypes(self) -> tuple[str, ...]:  # type: ignore[override]
        """NEON: int32 (``mla`` by element; NEON has no 64-bit integer multiply); SVE: int32 and
        int64 (predicated ``mla``); other ISAs of subclasses (SME): none."""
        return {"neon": ("s32",), "sve": ("s32", "s64")}.get(self.isa, ())

    @property
    def supported(self) -> bool:
        from minijit.runtime import host

        return self.isa != "sve" or host().sve

    @property
    def extensions(self) -> str:
        return "SVE" if self.isa == "sve" else "NEON"

    @property
    def vector_bits(self) -> int:
        """NEON: 128; SVE: `sve_vl`, the length the code is built and emulated at (the native
        target is built at 128 bits whatever this host's SVE length, `minijit.targets.native`)."""
        return self.sve_vl if self.isa == "sve" else 128

    @property
    def max_prim_size(self) -> int | None:
        """The NEON kernels' limit (SVE kernels have none; an SVE operation may run NEON ones)."""
        from minijit.kernels.aarch64.brgemm import NeonBrgemm

        return NeonBrgemm.MAX_SIZE

    @property
    def panel_column_bytes(self) -> int:
        return 4 * self.sve_vl // 8 if self.isa == "sve" else 64

    def _kind(self, module: str, neon: str, sve: str) -> Any:
        """The generator class of one kernel kind for this ISA."""
        import importlib

        mod = importlib.import_module(f"minijit.kernels.aarch64.{module}")
        return getattr(mod, neon if self.isa == "neon" else sve)

    def _brgemm(self, sizes: tuple[int, ...], trans: tuple[bool, ...], dtype: str, options: dict[str, Any]) -> Any:
        # an option is used unless None/False, or the none epilogue (`minijit.kernels.epilogue`)
        used = sorted(name for name, v in options.items() if v is not None and v is not False and str(v) != "none")
        if used:
            raise ValueError(f"{', '.join(used)}: x86-64 kernel options, not ones of {self.name}")
        g = self._kind("brgemm", "NeonBrgemm", "SveBrgemm")
        return g.generate(*sizes, *trans, dtype, sve_vl=self.sve_vl)

    def _unary(self, m: int, n: int, trans_b: bool, dtype: str, ptype: str, dense_b: bool) -> Any:
        # ``dense_b`` is an x86-64 store hint; these kernels read ``ldb`` and need none
        g = self._kind("unary", "NeonUnary", "SveUnary")
        return g.generate(m, n, trans_b, dtype, ptype, sve_vl=self.sve_vl)

    def _binary(self, m: int, n: int, dtype: str, ptype: str) -> Any:
        g = self._kind("binary", "NeonBinary", "SveBinary")
        return g.generate(m, n, dtype, ptype, sve_vl=self.sve_vl)

    @property
    def generic_epilogue_ops(self) -> frozenset[str]:
        from minijit.kernels.aarch64.common import EPILOGUE_OPS

        return EPILOGUE_OPS

    def generic_gemm(self, dtype: str = "fp32", epilogue: Any = None) -> Any:
        # NEON on SVE targets too: a generic kernel has no fixed vector length to plan for, and
        # every SVE core runs NEON
        from minijit.kernels.aarch64 import generic

        return generic.generate(dtype, epilogue)

    def attention_kernel(
        self, dtype: str = "fp32", g: int | None = None, s_x: int | None = None, softmax: bool = True
    ) -> tuple[Any, Any, str, int, int] | None:
        # native only: the API calls it through ctypes (the emulated kernel is tested on its own)
        if not self.native:
            return None
        from minijit.kernels.aarch64 import attention

        isa = f"sve{self.sve_vl}" if self.isa == "sve" else "neon"
        if isa not in attention.ISAS:  # SVE past 512 bits: the NEON kernel, at its own default key tile
            isa, s_x = "neon", None
        g, s_x = attention.check_tiles(dtype, isa, g, s_x)
        return attention, attention.generate(dtype, isa, g, s_x, softmax), isa, g, s_x

    def half_convert_kernel(self, src: str, dst: str) -> Any | None:
        if not self.native:  # native only (the emulated kernel is tested on its own)
            return None
        from minijit.kernels.aarch64 import convert

        return convert.generate(src, dst)

    def loopnest(self, plan: Any) -> Any:
        from minijit.kernels.aarch64 import loopnest

        return loopnest.generate(plan, sve_vl=self.sve_vl)

    @property
    def spmm_isa(self) -> str:
        """NEON on both ISAs: the CSR SpMM generator (`minijit.sparse.cpu`) has no SVE kernel, and
        every SVE CPU runs NEON (Advanced SIMD is mandatory in ARMv8-A), so an SVE target's SpMM
        runs the NEON kernel. The choice is made here only; the SpMM stack asks for it."""
        return "neon"

    def sparse_program(self, nest: Any, extents: dict[str, int], dtype: str) -> Any:
        """NEON or SVE code (`minijit.sparseauto.codegen_aarch64`; SVE's is vector-length agnostic)."""
        from minijit.sparseauto.codegen_aarch64 import compile_nest_aarch64

        return compile_nest_aarch64(nest, extents, dtype, self.isa)
