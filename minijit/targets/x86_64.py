"""x86-64: AVX-512 and AVX2 from one set of parameterised generators (`minijit.kernels.x86_64`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from minijit.targets.base import CpuTarget

ISAS = ("avx512", "avx2")
#: the BRGEMM kernel's own options (`minijit.kernels.x86_64.brgemm.generate`)
BRGEMM_OPTIONS = ("a_panel", "b_panel", "zero_c", "epilogue", "a_copy", "n_outer")


@dataclass(frozen=True)
class X86Target(CpuTarget):
    """``isa`` "avx512" (F, BW and VL) or "avx2" (with FMA)."""

    family: ClassVar[str] = "x86_64"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp64", "s32", "s64")
    int_dtypes: ClassVar[tuple[str, ...]] = ("s32", "s64")
    packs_panels: ClassVar[bool] = True
    copies_a: ClassVar[bool] = True
    fuses_touches: ClassVar[bool] = True
    has_gemv: ClassVar[bool] = True
    chunks_a: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.isa not in ISAS:
            raise ValueError(f"x86-64 isa must be one of {ISAS}, got {self.isa!r}")

    @property
    def epilogue_ops(self) -> frozenset[str]:
        from minijit.kernels.x86_64.common import EPILOGUE_OPS

        return EPILOGUE_OPS

    @property
    def generic_epilogue_ops(self) -> frozenset[str]:
        from minijit.kernels.x86_64.common import EPILOGUE_OPS

        return EPILOGUE_OPS

    @property
    def supported(self) -> bool:
        """AVX-512: F, BW and VL; AVX2: AVX2 and FMA (every x86-64 kernel fuses its multiply-adds)."""
        from minijit.runtime import host

        h = host()
        return h.avx512 if self.isa == "avx512" else h.avx2 and h.fma

    @property
    def extensions(self) -> str:
        return "AVX-512 (F, BW, VL)" if self.isa == "avx512" else "AVX2+FMA"

    @property
    def vector_bits(self) -> int:
        return 512 if self.isa == "avx512" else 256

    @property
    def max_prim_size(self) -> int | None:
        """The smallest ``MAX_SIZE`` of the BRGEMM, GEMV, unary and binary kernels (65536)."""
        from minijit.kernels.x86_64 import binary, brgemm, gemv, unary

        return min(brgemm.MAX_SIZE, gemv.MAX_SIZE, unary.MAX_SIZE, binary.MAX_SIZE)

    @property
    def panel_column_bytes(self) -> int:
        return 256 if self.isa == "avx512" else 64

    @property
    def b_block_l2_share(self) -> float:
        # AVX-512 register blocks have 256-byte A columns, so the L1 bound caps their prim K at 128
        # and a larger B block only widens N: each M block's sweep then also walks its rows x prim N
        # of C through L2 next to B; AVX2 blocks reach K 512 with the whole L2
        # (bench/results/model_constants_measurements.md)
        return 0.25 if self.isa == "avx512" else 1.0

    def _brgemm(self, sizes: tuple[int, ...], trans: tuple[bool, ...], dtype: str, options: dict[str, Any]) -> Any:
        from minijit.kernels.x86_64 import brgemm

        unknown = sorted(set(options) - set(BRGEMM_OPTIONS))
        if unknown:
            raise TypeError(f"brgemm: unknown option(s) {', '.join(unknown)}")
        return brgemm.generate(*sizes, *trans, dtype, isa=self.isa, **options)

    def _unary(self, m: int, n: int, trans_b: bool, dtype: str, ptype: str, dense_b: bool) -> Any:
        from minijit.kernels.x86_64 import unary

        return unary.generate(m, n, trans_b, dtype, ptype, isa=self.isa, dense_b=dense_b)

    def _binary(self, m: int, n: int, dtype: str, ptype: str) -> Any:
        from minijit.kernels.x86_64 import binary

        return binary.generate(m, n, dtype, ptype, isa=self.isa)

    def generic_gemm(self, dtype: str = "fp32", epilogue: Any = None) -> Any:
        from minijit.kernels.x86_64 import generic

        return generic.generate(dtype, self.isa, epilogue)

    def attention_kernel(
        self, dtype: str = "fp32", g: int | None = None, s_x: int | None = None, softmax: bool = True
    ) -> tuple[Any, Any, str, int, int] | None:
        if not self.native:
            return None
        from minijit.kernels.x86_64 import attention

        g, s_x = attention.check_tiles(dtype, self.isa, g, s_x)
        return attention, attention.generate(dtype, self.isa, g, s_x, softmax), self.isa, g, s_x

    def half_convert_kernel(self, src: str, dst: str) -> Any | None:
        # F16C's VEX forms (on AVX-512 hosts too: the EVEX form has not run on hardware yet)
        from minijit.runtime import features

        if not self.native or "f16c" not in features._cpuinfo_flags():
            return None
        from minijit.kernels.x86_64 import convert

        return convert.generate(src, dst, "avx2")

    @property
    def sparse_convert_passes(self) -> bool:
        return self.native

    def sparse_convert_pass(self, kind: str, nd: int, dtype: str = "") -> Any:
        if not self.native:
            raise NotImplementedError(f"{self.name}: the conversion passes run natively only")
        from minijit.sparseauto import convert_native_x86 as gen

        if kind == "csf":
            return gen.csf_pass(nd, vector=True)  # both x86-64 targets have AVX2
        if kind == "nonzero":
            return gen.nonzero_pass(nd, dtype)
        raise ValueError(f"kind must be 'csf' or 'nonzero', got {kind!r}")

    def loopnest(self, plan: Any) -> Any:
        from minijit.kernels.x86_64 import loopnest

        return loopnest.generate(plan)

    def sparse_program(self, nest: Any, extents: dict[str, int], dtype: str) -> Any:
        from minijit.sparseauto.codegen import compile_nest

        return compile_nest(nest, extents, dtype, self.isa)

    def panel_rows(self, dtype: str) -> int:
        from minijit.kernels.x86_64.brgemm_plan import panel_rows

        return panel_rows(self.isa, dtype)

    def panel_width(self) -> int:
        from minijit.kernels.x86_64.brgemm_plan import panel_width

        return panel_width(self.isa)

    def a_copy_fits(self, m: int, n: int, k: int, br: int, dtype: str) -> bool:
        from minijit.kernels.x86_64.brgemm_plan import a_copy_fits

        return a_copy_fits(m, n, k, br, self.isa, dtype)
