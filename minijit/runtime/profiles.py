"""Recorded host profiles: the CPUs the project's machines have been, as the host queries of
`minijit.runtime.features` see them (cpuinfo flags, cpu0's sysfs caches, usable CPUs).

A test or a what-if listing pins one (`features.pinned(PROFILES["cascadelake"])`, or
`pin(monkeypatch, name)` in tests) and every decision that reads the host (target, blocking,
packing, threads) is made as on that CPU, on any machine; code still runs on this one. Add a
profile when a new machine kind joins: read its sysfs and cpuinfo, never guess a number you
can read (the KVM guests list only their own CPUs among a cache's sharers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minijit.runtime.features import CacheGeometry, HostInfo

__all__ = ["HostProfile", "PROFILES", "X86_PROFILES", "get"]

KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class HostProfile:
    """One host as the host queries see it: ``info`` (ISA and vector features), ``caches`` (data
    and unified caches by level 1-3, bytes), ``cores`` (usable CPUs), and the CPU's ``name``,
    ``vendor`` and ``cpu_id`` ("family 6 model 85 stepping 7"), ``source``: where the numbers
    were read."""

    key: str
    name: str
    vendor: str
    cpu_id: str
    info: HostInfo
    caches: dict[int, CacheGeometry] = field(hash=False)
    cores: int
    source: str = ""

    def __post_init__(self) -> None:
        if not self.key or not isinstance(self.key, str):
            raise ValueError(f"HostProfile.key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.cores, int) or isinstance(self.cores, bool) or self.cores < 1:
            raise ValueError(f"HostProfile.cores must be a positive int, got {self.cores!r}")
        if set(self.caches) - {1, 2, 3} or 1 not in self.caches or 2 not in self.caches:
            raise ValueError(f"HostProfile.caches must give levels 1 and 2 (and maybe 3), got {sorted(self.caches)}")
        if not all(isinstance(c, CacheGeometry) for c in self.caches.values()):
            raise ValueError("HostProfile.caches values must be CacheGeometry")


def _x86(avx512: bool, bf16: bool = False) -> HostInfo:
    return HostInfo(
        isa="x86_64",
        os="linux",
        avx2=True,
        fma=True,
        avx512f=avx512,
        avx512bw=avx512,
        avx512vl=avx512,
        bf16=bf16,
    )


PROFILES: dict[str, HostProfile] = {
    p.key: p
    for p in (
        HostProfile(
            key="zen3",
            name="AMD EPYC",
            vendor="AuthenticAMD",
            cpu_id="family 25 model 1 stepping 1",
            info=_x86(avx512=False),
            caches={
                1: CacheGeometry(32 * KiB, 8, 64),
                2: CacheGeometry(512 * KiB, 8, 64),
                3: CacheGeometry(32 * MiB, 16, 64, shared=2),
            },
            cores=2,
            source="KVM guest, sysfs and /proc/cpuinfo read 2026-11-28 (AVX2 + FMA, no AVX-512)",
        ),
        HostProfile(
            key="zen4",
            name="AMD EPYC",
            vendor="AuthenticAMD",
            cpu_id="family 25 model 17 stepping 1",
            info=_x86(avx512=True, bf16=True),
            caches={
                1: CacheGeometry(32 * KiB, 8, 64),
                2: CacheGeometry(1 * MiB, 8, 64),
                3: CacheGeometry(32 * MiB, 16, 64, shared=2),
            },
            cores=2,
            source="KVM guest, bench/results/x86_64_zen4_2026-11-26.md (AVX-512 F/DQ/BW/VL/VNNI/BF16)",
        ),
        HostProfile(
            key="cascadelake",
            name="Intel(R) Xeon(R) CPU @ 2.80GHz",
            vendor="GenuineIntel",
            cpu_id="family 6 model 85 stepping 7",
            info=_x86(avx512=True),
            caches={
                1: CacheGeometry(32 * KiB, 8, 64),
                2: CacheGeometry(1 * MiB, 16, 64),
                # a Cascade Lake server's L3: 1.375 MiB a core, 11-way; the guest lists its 2 CPUs
                3: CacheGeometry(33 * MiB, 11, 64, shared=2),
            },
            cores=2,
            source="KVM guest of issue 49 (family 6 model 85, L2 1 MiB 16-way, AVX-512 F/BW/VL, no BF16)",
        ),
        HostProfile(
            key="neoverse-v1",
            name="Neoverse-V1",
            vendor="0x41",
            cpu_id="implementer 0x41 part 0xd40",
            info=HostInfo(isa="aarch64", os="linux", neon=True, sve=True, sve_vl_bits=256, bf16=True),
            caches={
                1: CacheGeometry(64 * KiB, 4, 64),
                2: CacheGeometry(1 * MiB, 8, 64),
                3: CacheGeometry(32 * MiB, 16, 64, shared=2),
            },
            cores=2,
            source="an SVE-256 server core (Graviton3 class) from its public specification; no project machine yet",
        ),
        HostProfile(
            key="apple-m4",
            name="Apple M4",
            vendor="Apple",
            cpu_id="",  # macOS has no /proc/cpuinfo: the query answers "" there
            # SME with SVL 512 but no non-streaming SVE (sve False): NEON outside streaming mode
            info=HostInfo(isa="aarch64", os="darwin", neon=True, bf16=True, sme=True, sme_vl_bits=512),
            caches={
                # P-core: L1D 128 KiB, 128-byte lines; L2 16 MiB shared by the cluster's 4 P-cores
                1: CacheGeometry(128 * KiB, 8, 128),
                2: CacheGeometry(16 * MiB, 16, 128, shared=4),
            },
            cores=4,
            source="Apple M4 P-cluster from public figures (macOS sysctl hw.perflevel0 cache sizes and "
            "hw.cachelinesize as published; SVL 512 from Remke and Breuer, 'Hello SME!', arXiv:2409.18779); "
            "associativity (8/16 ways) is not published and is a placeholder; cores: the 4 P-cores whose "
            "cluster holds the SME unit (the 6 E-cores not counted); no project machine has one",
        ),
        HostProfile(
            key="arm-c1-ultra",
            name="Arm C1-Ultra",
            vendor="0x41",
            cpu_id="implementer 0x41",  # the MIDR part number was not checked: left out
            # SME2 with non-streaming SVE2 at 128 bits
            info=HostInfo(
                isa="aarch64", os="linux", neon=True, sve=True, sve_vl_bits=128, bf16=True, sme=True, sme_vl_bits=512
            ),
            caches={
                1: CacheGeometry(64 * KiB, 4, 64),
                2: CacheGeometry(2 * MiB, 8, 64),
                3: CacheGeometry(16 * MiB, 16, 64, shared=2),
            },
            cores=2,
            source="Arm C1-Ultra (Lumex CSS, SME2) from Arm's public product announcement (2025): L1D 64 KiB, "
            "private L2 2 MiB (3 MiB option), cluster L3 up to 16 MiB; the ways, the 2-core share and the SME2 "
            "unit's SVL (512 bits) are assumptions, not published figures checked here; no project machine has it",
        ),
    )
}
#: the x86-64 profiles, the hosts every x86-64 decision test runs under
X86_PROFILES = tuple(k for k, p in PROFILES.items() if p.info.isa == "x86_64")


def get(key: str | HostProfile) -> HostProfile:
    """The profile named ``key`` (one of `PROFILES`) or the profile itself; ValueError naming the
    choices for anything else."""
    if isinstance(key, HostProfile):
        return key
    if key not in PROFILES:
        raise ValueError(f"host profile must be one of {', '.join(PROFILES)}, got {key!r}")
    return PROFILES[key]
