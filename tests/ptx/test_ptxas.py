"""ptxas as the oracle: every generated kernel assembles for sm_80 and sm_90 without
spills, and the inferred .version/.target are the lowest ptxas accepts."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

import ptx
from ptx import Module, PtxError, mma, toolchain
from ptx import types as T
from tests.ptx import kernels as K

ARCHS = ("sm_80", "sm_90")


@pytest.fixture(scope="module")
def ptxas():
    path = toolchain.find_ptxas()
    if path is None:
        pytest.skip("ptxas not found (MINIJIT_PTXAS, PATH, CUDA_HOME, nvidia-cuda-nvcc wheel)")
    return path


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MINIJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "minijit-cache"))


KERNELS = {
    "vadd": K.vadd,
    "mma_ldmatrix_f16": K.mma_ldmatrix_f16,
    "stage_reverse": K.stage_reverse,
    "warp_sum_pack": K.warp_sum_pack,
    **{f"mma_{s}_{d}": (lambda s=s, d=d: K.mma_direct(s, d)) for s, d in sorted(mma.MMA_SHAPES)},
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_assemble_without_spills(ptxas, name, arch):
    m, k = KERNELS[name]()
    cub = ptx.compile(m.text(), arch=arch)
    assert cub.data[:4] == b"\x7fELF"
    info = cub[k.name]
    assert info.registers > 0
    assert (info.spill_stores, info.spill_loads, info.stack_frame) == (0, 0, 0)
    assert info.shared_bytes == k.shared_bytes


def test_kernels_in_one_module(ptxas):
    m = Module()
    for f in (K.vadd, K.mma_ldmatrix_f16, K.warp_sum_pack):
        f(m)
    cub = ptx.compile(m.text(), arch="sm_90")
    assert set(cub.functions) == {"vadd", "mma_ldmatrix_f16", "warp_sum_pack"}
    assert cub.spill_bytes == 0


# --------------------------------------------------------------------------- minimal version/target

_VERSIONS = (
    ["5.0", "6.0", "6.1", "6.2", "6.3", "6.4", "6.5"] + [f"7.{i}" for i in range(9)] + [f"8.{i}" for i in range(9)]
)


def _lower(seq, value):
    return seq[seq.index(value) - 1]


def _mma(shape, dtype):
    inf = mma.info(shape, dtype)
    return lambda k: k.mma(
        shape, dtype, k.regs("f32", 4), k.regs("b32", inf.regs_a), k.regs("b32", inf.regs_b), k.regs("f32", 4)
    )


FEATURES = {
    "shfl.sync": lambda k: k.shfl_sync("bfly", *k.regs("b32", 2), 1, 31),
    "f16 add": lambda k: k.add(*k.regs("f16", 3)),
    "ldmatrix": lambda k: k.ldmatrix(k.regs("b32", 4), k.reg("u32")),
    "cp.async": lambda k: (k.cp_async(k.reg("u32"), k.reg("u64"), 16), k.cp_async_commit(), k.cp_async_wait(0)),
    "cvt tf32": lambda k: k.cvt_tf32(k.reg("b32"), k.reg("f32")),
    "cvt f16x2": lambda k: k.cvt_pack(k.reg("b32"), *k.regs("f32", 2)),
    "cvt bf16": lambda k: k.cvt(k.reg("bf16"), k.reg("f32"), rnd="rn"),
    "cvt f32.bf16": lambda k: k.cvt(k.reg("f32"), k.reg("bf16")),
    "ld.b128": lambda k: k.ld("global", k.reg("b128"), k.reg("u64")),
    "add.bf16": lambda k: k.add(*k.regs("bf16", 3)),
    **{f"mma {s}.{d}": _mma(s, d) for s, d in sorted(mma.MMA_SHAPES)},
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_inferred_version_and_target_are_minimal(ptxas, feature):
    m = Module()
    k = m.kernel("t")
    FEATURES[feature](k)
    k.ret()
    text = m.text()
    version, target = m.version, m.target
    ptx.compile(text, arch="sm_90")  # accepted as inferred
    sm = T.parse_target(target)[0]
    checked = 0
    if version != "6.0" or feature == "shfl.sync":
        low = _lower(_VERSIONS, version)
        with pytest.raises(PtxError) as e:
            ptx.compile(text.replace(f".version {version}", f".version {low}"), arch="sm_90")
        assert f"requires PTX ISA .version {version} or later" in e.value.log
        checked += 1
    if sm > 50:
        low_sm = _lower(sorted(T.TARGET_MIN_VERSION), sm)
        with pytest.raises(PtxError) as e:
            ptx.compile(text.replace(f".target {target}", f".target sm_{low_sm}"), arch="sm_90")
        assert f"requires .target {target} or higher" in e.value.log
        checked += 1
    assert checked


# --------------------------------------------------------------------------- errors, cache, log parsing, lookup


def test_error_quotes_offending_line(ptxas):
    m, k = K.vadd()
    text = m.text().replace("add.f32", "add.f33", 1)
    with pytest.raises(PtxError) as e:
        ptx.compile(text, arch="sm_80")
    bad = [i + 1 for i, line in enumerate(text.splitlines()) if "add.f33" in line]
    assert bad and bad[0] in e.value.lines
    assert "add.f33" in e.value.lines[bad[0]]
    assert f"line {bad[0]}" in str(e.value) and "add.f33" in str(e.value)
    assert "ptxas" in e.value.log


def test_cache_hit(ptxas, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIJIT_CACHE_DIR", str(tmp_path))
    m, _ = K.warp_sum_pack()
    first = ptx.compile(m.text(), arch="sm_80")
    second = ptx.compile(m.text(), arch="sm_80")
    assert not first.cached and second.cached
    assert first.data == second.data and first.functions == second.functions
    assert len(list((tmp_path / "ptxas").glob("*.cubin"))) == 1
    third = ptx.compile(m.text(), arch="sm_90")
    assert not third.cached


def test_compile_runs_ptxas_with_an_argument_list(ptxas, monkeypatch, tmp_path):
    monkeypatch.setenv("MINIJIT_CACHE_DIR", str(tmp_path))
    calls = []
    real = subprocess.run

    def spy(cmd, *a, **kw):
        calls.append((cmd, kw))
        return real(cmd, *a, **kw)

    monkeypatch.setattr(toolchain.subprocess, "run", spy)
    m, _ = K.vadd()
    ptx.compile(m.text(), arch="sm_80")
    cmd, kw = calls[-1]
    assert isinstance(cmd, list) and "-v" in cmd and "-arch=sm_80" in cmd
    assert not kw.get("shell")


LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'big' for 'sm_80'
ptxas info    : Function properties for big
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 392 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compiling entry function 'small' for 'sm_80'
ptxas info    : Function properties for small
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 364 bytes cmem[0]
"""


def test_parse_log():
    f = toolchain.parse_log(LOG)
    assert f["big"] == toolchain.FunctionInfo("big", 255, 40, 36, 48, 49152, 1, {0: 392, 2: 8})
    assert f["small"].registers == 8 and f["small"].spills == 0 and f["small"].shared_bytes == 0


def _fake_ptxas(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho fake\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_find_ptxas_search_order(tmp_path, monkeypatch):
    env = _fake_ptxas(tmp_path / "env" / "ptxas")
    home = _fake_ptxas(tmp_path / "cuda" / "bin" / "ptxas")
    wheel12 = _fake_ptxas(tmp_path / "sp" / "nvidia" / "cuda_nvcc" / "bin" / "ptxas")  # nvidia-cuda-nvcc-cu12
    monkeypatch.setattr(toolchain.site, "getsitepackages", lambda: [str(tmp_path / "sp")])
    monkeypatch.setattr(toolchain.site, "getusersitepackages", lambda: str(tmp_path / "none"))
    monkeypatch.setattr(toolchain.sys, "path", [])  # no wheel installed on this machine may interfere
    monkeypatch.setenv("MINIJIT_PTXAS", env)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert toolchain.find_ptxas() == env
    monkeypatch.delenv("MINIJIT_PTXAS")
    monkeypatch.setenv("PATH", str(tmp_path / "env"))
    assert toolchain.find_ptxas() == os.path.join(str(tmp_path / "env"), "ptxas")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert toolchain.find_ptxas() == home
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert toolchain.find_ptxas() == wheel12
    wheel13 = _fake_ptxas(tmp_path / "sp" / "nvidia" / "cu13" / "bin" / "ptxas")  # nvidia-cuda-nvcc 13.x
    assert toolchain.find_ptxas() == wheel13
    target = _fake_ptxas(tmp_path / "t" / "nvidia" / "cu13" / "bin" / "ptxas")  # pip install --target t
    monkeypatch.setattr(toolchain.site, "getsitepackages", lambda: [])
    monkeypatch.setattr(toolchain.sys, "path", [str(tmp_path / "t")])
    assert toolchain.find_ptxas() == target


def test_missing_ptxas_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIJIT_PTXAS", str(tmp_path / "nope"))
    assert toolchain.find_ptxas() is None
    with pytest.raises(PtxError, match="ptxas not found"):
        ptx.compile(".version 7.0\n.target sm_80\n.address_size 64\n", arch="sm_80")
