"""Targets: one object per target family, the only place that reads a target's name.

    t = minijit.targets.get("native")      # X86Target("avx512") or X86Target("avx2") on x86-64 ...
    t.name, t.native, t.max_prim_size, t.panel_column_bytes
    k = t.brgemm(64, 48, 32, 1, dtype="fp32")  # uncached; minijit.kernels.brgemm caches

CPU families: `X86Target` (AVX-512, AVX2) and `AArch64Target` (NEON, SVE at a vector length;
`AArch64SmeTarget`: the SME BRGEMM in streaming mode, NEON elsewhere);
the GPU: `CudaTarget` (mma.sync on sm_80+, wgmma/TMA on sm_90a). The core asks a target for its
capabilities (maximum prim sizes, micro-panel geometry, kernel-side A copy, fused touches, dtypes),
its generators and its cost-model parameters; it never parses a target string. Host facts (ISA,
caches, cores) are in `minijit.runtime.features`.

`native` is the one decision of which ISA this host runs, for every stack: dense operations,
einsum, the CSR SpMM (`CpuTarget.spmm`, in `CpuTarget.spmm_isa`) and sparse contractions
(`CpuTarget.sparse_program`, planned at `CpuTarget.vector_lanes`). No module outside this package
reads the host's ISA flags or switches on a family or ISA name to pick a generator
(`tests/minijit/test_targets.py` guards it).
"""

from __future__ import annotations

from minijit.targets.aarch64 import AArch64Target
from minijit.targets.aarch64_sme import SME_VLS, AArch64SmeTarget
from minijit.targets.base import CpuTarget, Target
from minijit.targets.cuda import CudaTarget
from minijit.targets.x86_64 import X86Target

__all__ = [
    "AArch64SmeTarget",
    "AArch64Target",
    "CPU_TARGETS",
    "CpuTarget",
    "CudaTarget",
    "Target",
    "X86Target",
    "for_isa",
    "get",
    "get_cpu",
    "native",
]

#: the CPU target names `get` accepts besides "native", each with its family class and ISA
_CPU = {
    "aarch64-neon": (AArch64Target, "neon"),
    "aarch64-sve": (AArch64Target, "sve"),
    "aarch64-sme": (AArch64SmeTarget, "sme"),
    "x86_64-avx512": (X86Target, "avx512"),
    "x86_64-avx2": (X86Target, "avx2"),
}
CPU_TARGETS = tuple(_CPU)
#: the ISA names `for_isa` takes: "sme" is not one (an SME target's SpMM is NEON, `spmm_isa`)
_SPMM_ISAS = {name: v for name, v in _CPU.items() if v[1] != "sme"}


def native(sve_vl: int = 128) -> CpuTarget:
    """The fastest CPU target this host runs natively (``sve_vl``: see `get`): x86-64 AVX-512
    where the host has F, BW and VL, else AVX2; AArch64 SME where the host has it (its BRGEMM is
    the matrix unit's outer products, at the host's streaming vector length), else SVE where the
    host has it, else NEON. Every stack takes its ISA from here; the host is
    `minijit.runtime.features.host` (a pinned profile where one is pinned)."""
    from minijit.runtime import host

    h = host()
    if h.isa == "x86_64":
        return X86Target("avx512" if h.avx512 else "avx2")
    if h.sme and h.sme_vl_bits in SME_VLS:
        return AArch64SmeTarget("sme", sve_vl=sve_vl, sme_vl=h.sme_vl_bits)
    return AArch64Target("sve" if h.sve else "neon", sve_vl=sve_vl)


def get(target: str | Target = "native", *, sve_vl: int = 128) -> Target:
    """The target object for a name ("native", one of `CPU_TARGETS`, or "cuda") or the object
    itself; ValueError naming the choices for anything else. ``sve_vl``: bits of the SVE vector
    length AArch64 code is emulated at on other hosts (ignored by other families)."""
    if isinstance(target, Target):
        return target
    if target == "native":
        return native(sve_vl)
    if target == "cuda":
        return CudaTarget()
    if isinstance(target, str) and target in _CPU:
        cls, isa = _CPU[target]
        return cls(isa, sve_vl=sve_vl) if issubclass(cls, AArch64Target) else cls(isa)
    raise ValueError(f"target must be 'native', 'cuda' or one of {', '.join(CPU_TARGETS)}, got {target!r}")


def for_isa(isa: str, *, sve_vl: int = 128) -> CpuTarget:
    """The CPU target of an ISA name ("avx512", "avx2", "neon", "sve": each belongs to one
    family), for the ``isa`` override of `minijit.sparse.spmm_cpu.CpuSpMM`; ValueError naming them
    otherwise."""
    for name, (_, own) in _SPMM_ISAS.items():
        if own == isa:
            return get_cpu(name, sve_vl=sve_vl)
    raise ValueError(f"isa must be one of {', '.join(own for _, own in _SPMM_ISAS.values())}, got {isa!r}")


def get_cpu(target: str | Target = "native", *, sve_vl: int = 128) -> CpuTarget:
    """`get` for a CPU target; ValueError naming the CPU choices for "cuda" or anything else."""
    if isinstance(target, CpuTarget):
        return target
    if target == "native" or (isinstance(target, str) and target in _CPU):
        return get(target, sve_vl=sve_vl)  # type: ignore[return-value]
    raise ValueError(f"target must be 'native' or one of {', '.join(CPU_TARGETS)}, got {target!r}")
