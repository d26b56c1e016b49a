"""Host feature detection: what this machine reports (`detected_host` and the queries with no
profile pinned), whatever profile a test session pins."""

from __future__ import annotations

import dataclasses
import os
import platform
import sys

import pytest

from minijit.runtime import features
from minijit.runtime.features import HostInfo, cpu_id, cpu_name, detected_host, host, normalize_isa, num_cpus

on_x86_linux = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not os.path.exists("/proc/cpuinfo"),
    reason="needs an x86-64 Linux host",
)


@pytest.fixture
def machine():
    """The host queries answer for this machine in the test, even where a profile is pinned
    (`features.pinned`: these tests check the detection, not a recorded host)."""
    with features.pinned(None):
        yield


def test_host_is_cached_and_frozen(machine) -> None:
    info = host()
    assert host() is info and detected_host() is info
    assert isinstance(info, HostInfo)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.isa = "aarch64"  # type: ignore[misc]


@on_x86_linux
def test_x86_host_flags_match_cpuinfo(machine) -> None:
    info = host()
    assert info.isa == "x86_64"
    assert info.os == "linux"
    assert info.avx2 is True
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split(":", 1)[1].split()
    for name in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl"):
        assert getattr(info, name) == (name in flags), name
    assert info.avx512 == (info.avx512f and info.avx512bw and info.avx512vl)
    assert not info.neon and not info.sve and info.sve_vl_bits == 0


def test_aarch64_fields_consistent(machine) -> None:
    info = host()
    if info.isa == "aarch64":
        assert info.neon
        assert info.sve_vl_bits in range(0, 2049, 128)
        assert info.sve == (info.sve_vl_bits > 0) or info.os != "linux"
    else:
        assert (info.neon, info.sve, info.sve_vl_bits) == (False, False, 0)


def test_sme_is_read_from_cpuinfo_features_and_the_default_length(machine, tmp_path) -> None:
    """SME: the "sme" Feature, and the default streaming vector length in bytes (x 8 = bits); an
    unreadable or bad length file is 0 bits, never an error; this host's fields agree."""
    vl = tmp_path / "sme_default_vector_length"
    vl.write_text("64\n")
    assert features._linux_sme({"fp", "asimd", "sme", "sme2"}, str(vl)) == {"sme": True, "sme_vl_bits": 512}
    assert features._linux_sme({"fp", "asimd", "sve"}, str(vl)) == {"sme": False, "sme_vl_bits": 0}
    assert features._linux_sme({"sme"}, str(tmp_path / "absent")) == {"sme": True, "sme_vl_bits": 0}
    for bad in ("", "x", "-16"):
        vl.write_text(bad)
        assert features._linux_sme({"sme"}, str(vl)) == {"sme": True, "sme_vl_bits": 0}
    info = host()
    assert info.sme_vl_bits in range(0, 2049, 128) and (info.sme or info.sme_vl_bits == 0)
    if info.isa != "aarch64":
        assert not info.sme


def test_cpu_name_and_count(machine) -> None:
    assert isinstance(cpu_name(), str)
    n = num_cpus()
    assert isinstance(n, int) and n >= 1
    if hasattr(os, "sched_getaffinity"):
        assert n == len(os.sched_getaffinity(0))


def test_cpu_id_names_the_first_processors_family_and_model(machine, monkeypatch) -> None:
    """x86-64 family/model/stepping or AArch64 implementer/part of the first processor's block of
    /proc/cpuinfo (read once: `features._cpu_id` is cached); "" without it."""
    import builtins
    import io

    real_open = builtins.open

    def fake(text):
        return lambda path, *a, **k: io.StringIO(text) if path == "/proc/cpuinfo" else real_open(path, *a, **k)

    x86 = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nstepping\t: 1\n\n"
    x86 += "processor\t: 1\ncpu family\t: 6\nmodel\t\t: 143\nstepping\t: 8\n"
    arm = "processor\t: 0\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd4f\n"
    for text, want in ((x86, "family 25 model 17 stepping 1"), (arm, "implementer 0x41 part 0xd4f"), ("", "")):
        features._cpu_id.cache_clear()
        monkeypatch.setattr(builtins, "open", fake(text))
        assert cpu_id() == want
    monkeypatch.undo()
    features._cpu_id.cache_clear()
    if host().isa == "x86_64" and sys.platform.startswith("linux"):
        assert cpu_id().startswith("family ") and " model " in cpu_id()


@pytest.mark.parametrize(
    "name, isa",
    [("x86_64", "x86_64"), ("AMD64", "x86_64"), ("aarch64", "aarch64"), ("arm64", "aarch64")],
)
def test_normalize_isa(name: str, isa: str) -> None:
    assert normalize_isa(name) == isa


@pytest.mark.parametrize("name", ["mips", "riscv64", "", "x86"])
def test_normalize_isa_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="unsupported ISA"):
        normalize_isa(name)
