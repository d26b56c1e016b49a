"""`minijit.cuda.families`: which GPU kernel families run on a device and why the others do not,
on the simulator and on a stand-in driver of any compute capability; ptxas is the oracle for
which generated PTX a device of each architecture can take."""

from __future__ import annotations

import pytest

from minijit.cuda import families as F
from ptx import simdriver, toolchain
from ptx.errors import PtxError

NAMES = [f.name for f in F.FAMILIES]


def _fake(monkeypatch, arch: str | None, ptxas: str | None = "/opt/cuda/bin/ptxas", release: str = "13.0"):
    """`ptx.driver` answering with one device of ``arch`` (None: no device), ptxas at ``ptxas``."""
    import ptx
    from ptx import driver

    class Dev:
        name = "Fake GPU"

    Dev.arch = arch
    monkeypatch.setattr(driver, "available", lambda: arch is not None)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: Dev())
    monkeypatch.setattr(ptx, "find_ptxas", lambda: ptxas)
    monkeypatch.setattr(toolchain, "ptxas_version", lambda path=None: f"Cuda compilation tools, release {release}, V")


def _by_name(statuses):
    return {s.family.name: s for s in statuses}


def test_every_family_runs_in_the_simulator():
    st = F.status(simdriver)
    assert [s.family.name for s in st] == NAMES
    assert all(s.state == "yes" and not s.why and s.device.startswith("ptx.sim") for s in st)
    needs = _by_name(st)
    assert set(needs["sm90a GEMM (wgmma/TMA)"].targets.values()) == {("sm_90a", "8.0")}
    assert needs["SpMM TCA (seed 003)"].needs == "fp16: sm_75 (PTX 6.5); bf16, tf32: sm_80 (PTX 7.0)"


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"])
def test_a_variant_runs_where_ptxas_assembles_it_for_the_device(monkeypatch, arch):
    """The families' answer for a device of ``arch`` against ptxas: a variant runs exactly when
    ptxas assembles its PTX for the device (architecture-specific ``sm_90a`` code for ``arch``
    with the suffix, which only a 9.0 device can load)."""
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    real_version = toolchain.ptxas_version()
    for fam in F.FAMILIES:
        for variant, make in fam.variants.items():
            text = make()
            target, _ = F.requirement(fam.name, variant)
            try:
                if target.endswith("a") and target != arch + "a":
                    raise PtxError(f"{target} code loads only on {target[:-1]}")
                toolchain.compile(text, arch=arch + "a" if target.endswith("a") else arch)
                ok = True
            except PtxError:
                ok = False
            _fake(monkeypatch, arch, release=real_version.split("release ")[1].split(",")[0])
            s = _by_name(F.status())[fam.name]
            assert (variant in s.runs) == ok, (fam.name, variant, arch, s.why)
            monkeypatch.undo()


def test_why_not_names_the_compute_capability(monkeypatch):
    _fake(monkeypatch, "sm_75")
    st = _by_name(F.status())
    assert st["mma.sync GEMM"].state == "no"
    assert st["mma.sync GEMM"].why == "needs compute capability 8.0 (sm_80); the device has 7.5"
    tca = st["SpMM TCA (seed 003)"]
    assert tca.state == "partly" and tca.runs == ("fp16",)
    assert tca.why == "bf16, tf32: needs compute capability 8.0 (sm_80); the device has 7.5"
    assert st["elementwise"].state == "yes" and st["elementwise"].device == "Fake GPU (sm_75)"
    _fake(monkeypatch, "sm_100")
    why = _by_name(F.status())["sm90a GEMM (wgmma/TMA)"].why
    assert (
        why == "sm_90a code runs only on compute capability 9.0 (architecture-specific features); the device has 10.0"
    )


def test_why_not_names_ptxas(monkeypatch):
    _fake(monkeypatch, "sm_90", ptxas=None)
    assert {(s.state, s.why) for s in F.status()} == {("no", F.NO_PTXAS)}
    _fake(monkeypatch, "sm_90", release="11.8")
    st = _by_name(F.status())
    assert st["sm90a GEMM (wgmma/TMA)"].why == "ptxas 11.8 is too old for PTX 8.0 (CUDA 12.0 or newer)"
    assert st["mma.sync GEMM"].state == "yes"  # PTX 7.0: CUDA 11.0

    def broken(path=None):
        raise FileNotFoundError(path)

    monkeypatch.setattr(toolchain, "ptxas_version", broken)
    assert {s.why for s in F.status()} == {"ptxas /opt/cuda/bin/ptxas does not run (FileNotFoundError)"}


def test_why_not_names_the_driver(monkeypatch):
    import importlib.util

    from ptx import CudaError, driver

    _fake(monkeypatch, None)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n.startswith("cuda") else real_find_spec(n))
    assert {s.why for s in F.status()} == {
        "no CUDA driver bindings (cuda-bindings not installed: pip install -e '.[gpu]')"
    }
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())

    def no_device():
        raise CudaError("cuInit", 100, "CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(driver, "init", no_device)
    st = F.status()
    assert {(s.state, s.why, s.device) for s in st} == {("no", "no GPU (cuInit: CUDA_ERROR_NO_DEVICE)", "")}
    assert st[0].as_dict()["needs"]["fp16"] == {"target": "sm_80", "ptx": "7.0"}

    def no_libcuda():
        raise RuntimeError("cannot load libcuda.so.1")

    monkeypatch.setattr(driver, "init", no_libcuda)
    assert {s.why for s in F.status()} == {"no NVIDIA driver (libcuda not loadable: RuntimeError)"}


def test_unknown_architecture_is_refused():
    with pytest.raises(ValueError, match="not of the form sm_NN"):
        F.variant_problem("sm_80", (7, 0), "compute_80", None)
