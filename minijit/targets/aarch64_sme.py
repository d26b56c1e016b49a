"""AArch64 with SME: the BRGEMM on the ZA array in streaming mode, everything else NEON.

``aarch64-sme`` is the target of cores whose matrix unit is reached through SME (an Apple M4 runs
SVE only in streaming mode; SME2 server and client cores): `AArch64SmeTarget`. Its BRGEMM is
`minijit.kernels.aarch64.sme_brgemm.SmeBrgemm`, which enters streaming mode and ZA itself and
leaves both before it returns (nothing is called while ZA is live); every other kernel (unary,
binary, loop nests, the generic GEMM, SpMM, sparse contractions) is the NEON one, which runs in
non-streaming mode on every such core (NEON is illegal in streaming mode without FEAT_SME_FA64,
and non-streaming SVE is absent on the M4).

On other hosts the code runs in the qemu worker at streaming vector length ``sme_vl`` bits (128,
256, 512, 1024 or 2048; 512 as on the M4); the kernels are SVL-agnostic, so the length only
chooses what emulation proves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minijit.targets.aarch64 import SVE_VLS, AArch64Target

SME_VLS = (128, 256, 512, 1024, 2048)  # streaming vector lengths (powers of two)
#: ZA tiles the fp32 BRGEMM stacks along M (`SmeBrgemm.TILES_M`)
_FP32_TILES_M = 3


@dataclass(frozen=True)
class AArch64SmeTarget(AArch64Target):
    """``isa`` "sme"; ``sme_vl``: bits of the streaming vector length the emulation worker runs
    the code at on a host of another ISA (``sve_vl``, inherited, is unused by its kernels)."""

    sme_vl: int = 512

    def __post_init__(self) -> None:
        if self.isa != "sme":
            raise ValueError(f"AArch64SmeTarget isa must be 'sme', got {self.isa!r}")
        if self.sve_vl not in SVE_VLS:
            raise ValueError(f"sve_vl must be a multiple of 128 in 128..2048 (bits), got {self.sve_vl!r}")
        if self.sme_vl not in SME_VLS:
            raise ValueError(f"sme_vl must be one of {', '.join(map(str, SME_VLS))} (bits), got {self.sme_vl!r}")

    @property
    def supported(self) -> bool:
        """The host's SME flag (`minijit.runtime.features.HostInfo.sme`; meaningful where `native`)."""
        from minijit.runtime import host

        return host().sme

    @property
    def extensions(self) -> str:
        return "SME (streaming SVE, ZA) and NEON"

    @property
    def vector_bits(self) -> int:
        """128: the vector code outside the BRGEMM (what the sparse planner plans for) is NEON."""
        return 128

    @property
    def panel_column_bytes(self) -> int:
        """One column of the BRGEMM's fp32 block: 3 tiles of SVL/32 rows, 4 bytes each."""
        return _FP32_TILES_M * self.sme_vl // 8

    def describe_model(self, config: Any) -> str:
        """The SME BRGEMM's stated performance model (`minijit.kernels.aarch64.sme_brgemm.model`, the
        Apple M4's public figures, at `sme_vl`) for the main kernel of ``config`` (a
        `minijit.ir.TensorConfig`); "" where its main primitive is not a GEMM or BRGEMM."""
        from minijit.ir import GEMM_PTYPES
        from minijit.kernels.aarch64.sme_brgemm import model

        roles = config.prim
        if config.prim_main not in GEMM_PTYPES or None in (roles.m, roles.n, roles.k):
            return ""
        m, n, k = (config.dims[r].size for r in (roles.m, roles.n, roles.k))
        return model(m, n, k, config.dtype.name, sme_vl=self.sme_vl)

    # every kernel of the target is loaded into one emulation worker (sve_vl, sme_vl): a loop nest
    # calls its kernels by address in its own worker
    def _load(self, a: Any, signature: str, name: str) -> Any:
        from minijit.runtime import load

        return load(a.code(), signature, isa="aarch64", name=name, listing=a.listing(), **self._lengths)

    @property
    def _lengths(self) -> dict[str, int]:
        return {"sve_vl": self.sve_vl, "sme_vl": self.sme_vl}

    def _neon(self, module: str, cls: str, *args: Any) -> Any:
        """The NEON kernel of `minijit.kernels.aarch64.<module>.<cls>` for ``program(*args)``."""
        import importlib
        import inspect

        g = getattr(importlib.import_module(f"minijit.kernels.aarch64.{module}"), cls)
        bound = inspect.signature(g.program).bind(*args)
        bound.apply_defaults()
        a = g.program(*bound.args)
        a = a[0] if isinstance(a, tuple) else a
        return self._load(a, g.signature(bound.arguments["dtype"]), g.name(**bound.arguments))

    def _brgemm(self, sizes: tuple[int, ...], trans: tuple[bool, ...], dtype: str, options: dict[str, Any]) -> Any:
        used = sorted(name for name, v in options.items() if v is not None and v is not False and str(v) != "none")
        if used:
            raise ValueError(f"{', '.join(used)}: x86-64 kernel options, not ones of {self.name}")
        from minijit.kernels.aarch64.sme_brgemm import SmeBrgemm

        return SmeBrgemm.generate(*sizes, *trans, dtype, sme_vl=self.sme_vl, sve_vl=self.sve_vl)

    def _unary(self, m: int, n: int, trans_b: bool, dtype: str, ptype: str, dense_b: bool) -> Any:
        return self._neon("unary", "NeonUnary", m, n, trans_b, dtype, ptype)

    def _binary(self, m: int, n: int, dtype: str, ptype: str) -> Any:
        return self._neon("binary", "NeonBinary", m, n, dtype, ptype)

    def generic_gemm(self, dtype: str = "fp32", epilogue: Any = None) -> Any:
        from minijit.kernels.aarch64 import generic

        return self._load(generic.program(dtype, epilogue), generic.signature(dtype), generic.name(dtype, epilogue))

    def loopnest(self, plan: Any) -> Any:
        from minijit.kernels.aarch64 import loopnest

        return self._load(loopnest.program(plan), loopnest.SIGNATURE, "loopnest")

    def sparse_program(self, nest: Any, extents: dict[str, int], dtype: str) -> Any:
        """NEON code (`minijit.sparseauto.codegen_aarch64`)."""
        from minijit.sparseauto.codegen_aarch64 import compile_nest_aarch64

        return compile_nest_aarch64(nest, extents, dtype, "neon")
