"""Core models: the few numbers of a CPU core that the cost models need and its ISA does not tell,
chosen from the host's vendor and family/model (`minijit.runtime.features`; a pinned host profile
answers the same queries).

- ``fma_bytes``: bytes of multiply-add operands the core retires per cycle at one vector width
  (FMA pipes x vector bytes; Zen 4 runs a 512-bit FMA as two 256-bit halves, so its AVX-512 rate
  is its AVX2 rate).
- ``llc_stream``: bytes per cycle one core sustains reading a stream from the last-level cache.
  AMD's core complexes fill L2 from their L3 at about 32 B/cycle; Intel's server meshes
  (Skylake-SP to Emerald Rapids) deliver far less per core: on the Cascade Lake guest of
  bench/results/x86_64_cascadelake_tune_2026-11-28.md an A block streamed from L3 once per
  6 columns held one core to 66 GFLOPS fp32, about 8 B/cycle.

A kernel whose order re-reads a block from the last-level cache at more bytes per cycle than
``llc_stream`` waits on it (`minijit.schedule.kernel_n_outer`). This is the only module outside
the runtime that reads CPU vendor and model numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from minijit.runtime import features

__all__ = ["CoreModel", "GENERIC", "INTEL_MESH", "ZEN", "ZEN5", "core_model"]


@dataclass(frozen=True)
class CoreModel:
    """One core class: ``fma_bytes`` per ISA name ("avx2", "avx512", "neon", "sve"; bytes of
    multiply-add operands per cycle), ``llc_stream`` (bytes per cycle from the last-level cache)."""

    name: str
    fma_bytes: dict[str, int]
    llc_stream: float

    def __post_init__(self) -> None:
        if not self.fma_bytes or any(not isinstance(v, int) or v < 1 for v in self.fma_bytes.values()):
            raise ValueError(f"CoreModel.fma_bytes must map ISA names to positive ints, got {self.fma_bytes!r}")
        if not self.llc_stream > 0:
            raise ValueError(f"CoreModel.llc_stream must be positive, got {self.llc_stream!r}")

    def fma_rate(self, isa: str) -> int:
        """Bytes of multiply-add operands per cycle at ``isa`` (two pipes of its width if unknown)."""
        if isa in self.fma_bytes:
            return self.fma_bytes[isa]
        return 2 * {"avx512": 64, "avx2": 32}.get(isa, 16)


#: two 256-bit FMA pipes; AVX-512 double-pumped on Zen 4 (Zen 3 has none)
ZEN = CoreModel("AMD Zen 3/4", {"avx2": 64, "avx512": 64}, 32.0)
#: Zen 5: two full 512-bit FMA pipes (the desktop and server parts)
ZEN5 = CoreModel("AMD Zen 5", {"avx2": 64, "avx512": 128}, 32.0)
#: Intel Xeon Scalable (Skylake-SP, Cascade Lake, Cooper Lake, Ice Lake-SP, Sapphire/Emerald
#: Rapids): two 512-bit FMA pipes on the Gold 6000 / Platinum parts, a mesh L3
INTEL_MESH = CoreModel("Intel Xeon Scalable (mesh L3)", {"avx2": 64, "avx512": 128}, 8.0)
#: anything else: two pipes of the vector width, the L3 -> L2 fill rate of `minijit.blocking`
GENERIC = CoreModel("generic", {"avx2": 64, "avx512": 128, "neon": 32, "sve": 32}, 16.0)

#: Intel family 6 models with a mesh L3: 85 Skylake-SP/Cascade Lake/Cooper Lake, 106/108 Ice
#: Lake-SP/-D, 143 Sapphire Rapids, 207 Emerald Rapids
_INTEL_MESH_MODELS = frozenset({85, 106, 108, 143, 207})


def _family_model(cpu_id: str) -> tuple[int | None, int | None]:
    """(family, model) of `features.cpu_id` text ("family 6 model 85 stepping 7")."""
    words = cpu_id.split()
    found: dict[str, int] = {}
    for key, value in zip(words, words[1:], strict=False):
        if key in ("family", "model") and value.isdigit():
            found.setdefault(key, int(value))
    return found.get("family"), found.get("model")


def core_model() -> CoreModel:
    """The core model of the host (or of the pinned host profile)."""
    vendor = features.cpu_vendor()
    family, model = _family_model(features.cpu_id())
    if vendor == "AuthenticAMD" and family == 25:
        return ZEN
    if vendor == "AuthenticAMD" and family == 26:
        return ZEN5
    if vendor == "GenuineIntel" and family == 6 and model in _INTEL_MESH_MODELS:
        return INTEL_MESH
    return GENERIC
