"""Host facts: the CPU's features, its caches and its core count.

`host()` reports the instruction set architecture, the operating system and
the vector extensions the kernel generators care about. On Linux x86-64 the
flags come from ``/proc/cpuinfo``; on Linux AArch64 from ``getauxval`` (via
cffi ABI mode on libc) and ``prctl(PR_SVE_GET_VL)``, SME from /proc/cpuinfo's Features
(``sme``) and its streaming vector length from ``/proc/sys/abi/sme_default_vector_length``
(bytes); on macOS arm64 from ``sysctl`` (NEON always, SVE and SME never). Anything that cannot be determined is
reported as False (or 0). `cache_geometries`, `last_level_cache_bytes` and
`last_level_cache_sharing` read cpu0's caches from Linux sysfs (`read_sysfs_caches`;
defaults elsewhere); `cpu_vendor` and `cpu_id` name the CPU; `num_cpus` counts the
CPUs this process may use.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "CacheGeometry",
    "HostInfo",
    "cache_geometries",
    "cpu_id",
    "cpu_name",
    "cpu_vendor",
    "detected_host",
    "host",
    "last_level_cache_bytes",
    "last_level_cache_sharing",
    "normalize_isa",
    "num_cpus",
    "parse_cpu_list",
    "pinned",
    "read_sysfs_caches",
]

# Linux auxv keys and AArch64 hwcap bits (arch/arm64/include/uapi/asm/hwcap.h).
_AT_HWCAP = 16
_AT_HWCAP2 = 26
_HWCAP_ASIMD = 1 << 1
_HWCAP_SVE = 1 << 22
_HWCAP2_BF16 = 1 << 14
_PR_SVE_GET_VL = 51
_PR_SVE_VL_LEN_MASK = 0xFFFF
#: Linux's default streaming vector length of new processes, in bytes (Documentation/arch/arm64/sme.rst)
SME_DEFAULT_VL_PATH = "/proc/sys/abi/sme_default_vector_length"

_ISA_ALIASES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
}


def normalize_isa(name: str) -> str:
    """Map an architecture name (``platform.machine()`` style) to "x86_64" or "aarch64".

    Raises ValueError for any other architecture.
    """
    isa = _ISA_ALIASES.get(name.strip().lower())
    if isa is None:
        raise ValueError(f"unsupported ISA {name!r}: expected one of {sorted(set(_ISA_ALIASES.values()))}")
    return isa


@dataclass(frozen=True)
class HostInfo:
    """What the host CPU can run.

    ``isa`` is "x86_64" or "aarch64" (or the raw ``platform.machine()`` text
    for anything else); ``os`` is ``sys.platform`` ("linux", "darwin", ...).
    x86-64 flags are False on AArch64 hosts and vice versa.
    ``sve_vl_bits`` is the SVE vector length in bits (0 without SVE); ``sme`` the Scalable Matrix
    Extension (streaming mode and ZA) and ``sme_vl_bits`` its streaming vector length in bits (0
    without SME). An Apple M4 has SME but no non-streaming SVE (``sve`` False).
    """

    isa: str
    os: str
    avx2: bool = False
    fma: bool = False
    avx512f: bool = False
    avx512bw: bool = False
    avx512vl: bool = False
    neon: bool = False
    sve: bool = False
    sve_vl_bits: int = 0
    bf16: bool = False
    sme: bool = False
    sme_vl_bits: int = 0

    @property
    def avx512(self) -> bool:
        """AVX-512 F, BW and VL together (what the x86-64 generators need)."""
        return self.avx512f and self.avx512bw and self.avx512vl


def _cpuinfo_flags() -> set[str]:
    """The ``flags`` line of the first processor in /proc/cpuinfo (empty if unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def _linux_sme(flags: set[str], path: str = SME_DEFAULT_VL_PATH) -> dict[str, object]:
    """``sme`` (the "sme" Feature of /proc/cpuinfo, ``flags``) and ``sme_vl_bits``: the default
    streaming vector length ``path`` gives in bytes, times 8; 0 where it cannot be read or is not a
    positive number. Never raises."""
    if "sme" not in flags:
        return {"sme": False, "sme_vl_bits": 0}
    try:
        with open(path, encoding="ascii") as f:
            vl_bytes = int(f.read().strip())
    except (OSError, ValueError):
        vl_bytes = 0
    return {"sme": True, "sme_vl_bits": 8 * vl_bytes if vl_bytes > 0 else 0}


def _linux_aarch64() -> dict[str, object]:
    try:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("unsigned long getauxval(unsigned long type); int prctl(int option, ...);")
        libc = ffi.dlopen(None)
        hwcap = int(libc.getauxval(_AT_HWCAP))
        hwcap2 = int(libc.getauxval(_AT_HWCAP2))
        sve = bool(hwcap & _HWCAP_SVE)
        vl_bits = 0
        if sve:
            ret = int(libc.prctl(_PR_SVE_GET_VL))
            if ret >= 0:
                vl_bits = (ret & _PR_SVE_VL_LEN_MASK) * 8  # bytes -> bits
    except Exception:  # no cffi, no libc symbol: report nothing
        flags = _cpuinfo_flags()
        return {"neon": "asimd" in flags, "sve": "sve" in flags, "sve_vl_bits": 0, "bf16": "bf16" in flags}
    return {"neon": bool(hwcap & _HWCAP_ASIMD), "sve": sve, "sve_vl_bits": vl_bits, "bf16": bool(hwcap2 & _HWCAP2_BF16)}


def _sysctl(name: str) -> str:
    import subprocess  # macOS only: not loaded elsewhere

    try:
        proc = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, check=False, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


#: a recorded host profile (`minijit.runtime.profiles.HostProfile`) that answers the host queries
#: below instead of this machine (`pinned`); None: the machine answers
_pinned = None


@contextlib.contextmanager
def pinned(profile) -> Iterator[None]:
    """Within the block, the host queries (`host`, `cpu_name`, `cpu_vendor`, `cpu_id`,
    `num_cpus` and the cache queries) answer from ``profile`` (a
    `minijit.runtime.profiles.HostProfile`) instead of this machine, so decisions (target, blocking,
    packing, threads) are made as on that host; code still loads and runs on this machine
    (`detected_host`). Process-wide and not thread-safe: for tests and what-if listings. Nested
    pins restore the outer one."""
    global _pinned
    outer, _pinned = _pinned, profile
    try:
        yield
    finally:
        _pinned = outer


def host() -> HostInfo:
    """The host's HostInfo: the pinned profile's (`pinned`), else this machine's (`detected_host`).
    Decisions (targets, blockings, packing) read this; loading code to run reads `detected_host`."""
    if _pinned is not None:
        return _pinned.info
    return detected_host()


@functools.cache
def detected_host() -> HostInfo:
    """Detect this machine once (cached) and return its HostInfo (never a pinned profile)."""
    machine = platform.machine()
    try:
        isa = normalize_isa(machine)
    except ValueError:
        isa = machine.lower()
    osname = sys.platform
    if isa == "x86_64":
        flags = _cpuinfo_flags() if osname.startswith("linux") else set()
        return HostInfo(
            isa=isa,
            os=osname,
            avx2="avx2" in flags,
            fma="fma" in flags,
            avx512f="avx512f" in flags,
            avx512bw="avx512bw" in flags,
            avx512vl="avx512vl" in flags,
            bf16="avx512_bf16" in flags,
        )
    if isa == "aarch64":
        if osname.startswith("linux"):
            found = {**_linux_aarch64(), **_linux_sme(_cpuinfo_flags())}
            return HostInfo(isa=isa, os=osname, **found)  # type: ignore[arg-type]
        if osname == "darwin":
            return HostInfo(isa=isa, os=osname, neon=True, bf16=_sysctl("hw.optional.arm.FEAT_BF16") == "1")
        return HostInfo(isa=isa, os=osname, neon=True)  # Advanced SIMD is mandatory in ARMv8-A
    return HostInfo(isa=isa, os=osname)


def cpu_name() -> str:
    """Human-readable CPU model name ("" when unknown); the pinned profile's where one is pinned."""
    return _pinned.name if _pinned is not None else _cpu_name()


@functools.cache
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        name = _sysctl("machdep.cpu.brand_string")
        if name:
            return name
    return platform.processor() or ""


def cpu_vendor() -> str:
    """The CPU vendor: ``vendor_id`` of /proc/cpuinfo on x86-64 ("GenuineIntel", "AuthenticAMD"),
    "CPU implementer" on AArch64 Linux; "" when unknown; the pinned profile's where one is pinned."""
    return _pinned.vendor if _pinned is not None else _cpu_vendor()


@functools.cache
def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("vendor_id", "CPU implementer"):
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_id() -> str:
    """The CPU's family and model numbers, which tell apart cores that share a name (a KVM guest
    calls Zen 3 and Zen 4 both "AMD EPYC"): "family 25 model 17 stepping 1" on x86-64 ("cpu
    family", "model", "stepping" of /proc/cpuinfo), "implementer 0x41 part 0xd4f" on AArch64
    Linux; "" when unknown; the pinned profile's where one is pinned."""
    return _pinned.cpu_id if _pinned is not None else _cpu_id()


@functools.cache
def _cpu_id() -> str:
    keys = {
        "cpu family": "family",
        "model": "model",
        "stepping": "stepping",
        "CPU implementer": "implementer",
        "CPU part": "part",
    }
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if found:
                        break  # the first processor's block only
                    continue
                key, sep, value = line.partition(":")
                name = keys.get(key.strip())
                if sep and name and name not in found:
                    found[name] = value.strip()
    except OSError:
        return ""
    return " ".join(f"{name} {found[name]}" for name in keys.values() if name in found)


def num_cpus() -> int:
    """CPUs this process may run on (sched affinity where available), at least 1; the pinned
    profile's cores where one is pinned."""
    if _pinned is not None:
        return _pinned.cores
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    if hasattr(os, "process_cpu_count"):  # Python 3.13+
        n = os.process_cpu_count()
        if n:
            return n
    return os.cpu_count() or 1


# -- caches ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheGeometry:
    """Data cache geometry (bytes): total size, associativity, line size, and ``shared``: how many
    logical CPUs share it (sysfs ``shared_cpu_list``; 1 for a private cache). A shared last-level
    cache gives each of its CPUs ``size // shared`` (`per_cpu`): on a mesh or chiplet L3, 300 MiB
    shared by 120 CPUs is 2.5 MiB per thread, not 300 MiB. A virtual machine's sysfs lists only
    its own CPUs among the sharers, so there the share is an upper bound (`minijit.tune` measures
    where the model is unsure)."""

    size: int = 32 * 1024
    ways: int = 8
    line: int = 64
    shared: int = 1

    def __post_init__(self) -> None:
        for name in ("size", "ways", "line", "shared"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"CacheGeometry.{name} must be a positive int, got {value!r}")

    @property
    def sets(self) -> int:
        return max(1, self.size // (self.ways * self.line))

    @property
    def per_cpu(self) -> int:
        """Bytes of the cache per sharing CPU (``size // shared``)."""
        return max(1, self.size // self.shared)


#: used where sysfs does not tell: L1 32 KiB 8-way, L2 1 MiB 16-way, 64-byte lines
DEFAULT_CACHES = (CacheGeometry(32 * 1024, 8, 64), CacheGeometry(1024 * 1024, 16, 64))
#: used where sysfs names no L3
DEFAULT_LLC_BYTES = 8 * 1024 * 1024
#: where Linux describes cpu0's caches
SYSFS_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"


def parse_cpu_list(text: str) -> int:
    """How many CPUs a sysfs CPU list names ("0-1,4,6-7" -> 5); ValueError on anything else."""
    count = 0
    for part in text.strip().split(","):
        lo, sep, hi = part.strip().partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first < 0 or last < first:
            raise ValueError(f"bad CPU list {text!r}")
        count += last - first + 1
    if count < 1:
        raise ValueError(f"bad CPU list {text!r}")
    return count


def _size_bytes(text: str) -> int:
    size = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024**3}.get(size[-1:], 1)
    return int(size.rstrip("KMG")) * scale


def read_sysfs_caches(base: str = SYSFS_CACHE_DIR) -> dict[int, CacheGeometry]:
    """The data/unified caches of one CPU's sysfs cache directory ``base`` (``index*/{level, type,
    size, ways_of_associativity, coherency_line_size, shared_cpu_list}``) by level 1-3; empty
    where it cannot be read. A missing ``shared_cpu_list`` counts as a private cache."""
    found: dict[int, CacheGeometry] = {}
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return found
    for entry in entries:
        path = os.path.join(base, entry)
        if not entry.startswith("index"):
            continue

        def read(name: str, path: str = path) -> str:
            with open(os.path.join(path, name)) as f:
                return f.read().strip()

        try:
            level = int(read("level"))
            if level not in (1, 2, 3) or read("type") not in ("Data", "Unified"):
                continue
            try:
                shared = parse_cpu_list(read("shared_cpu_list"))
            except (OSError, ValueError):
                shared = 1
            ways, line = int(read("ways_of_associativity")), int(read("coherency_line_size"))
            found[level] = CacheGeometry(_size_bytes(read("size")), max(1, ways), max(1, line), shared)
        except (OSError, ValueError):
            continue
    return found


def _sysfs_caches() -> dict[int, CacheGeometry]:
    """cpu0's data/unified caches by level (Linux sysfs, read once); empty where sysfs does not
    tell; the pinned profile's caches where one is pinned."""
    if _pinned is not None:
        return dict(_pinned.caches)
    return dict(_read_host_caches())


@functools.cache
def _read_host_caches() -> dict[int, CacheGeometry]:
    return read_sysfs_caches(SYSFS_CACHE_DIR)


def cache_geometries() -> tuple[CacheGeometry, CacheGeometry]:
    """The host's L1 data and L2 caches (Linux sysfs of cpu0), else `DEFAULT_CACHES`."""
    found = _sysfs_caches()
    return found.get(1, DEFAULT_CACHES[0]), found.get(2, DEFAULT_CACHES[1])


def last_level_cache_bytes() -> int:
    """The host's last-level cache in bytes (the whole cache, all sharers): the highest level
    cpu0's sysfs lists (L3 on the hosts measured), else `DEFAULT_LLC_BYTES`."""
    found = _sysfs_caches()
    return found[max(found)].size if found else DEFAULT_LLC_BYTES


def last_level_cache_sharing() -> int:
    """How many logical CPUs share the host's last-level cache (sysfs ``shared_cpu_list`` of the
    level `last_level_cache_bytes` reads; 1 where sysfs does not tell)."""
    found = _sysfs_caches()
    return found[max(found)].shared if found else 1
