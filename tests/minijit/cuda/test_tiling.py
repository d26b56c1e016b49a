"""The mma.sync tile/split-K model (`minijit.cuda.tiling`) and the split-K reduction kernel
(`minijit.cuda.splitk`): model properties and figures against their formulas, every plan's spec
valid, the reduction kernel through ptxas (no spills) and in the PTX simulator against its numpy
model, bit for bit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import ptx
from minijit.cuda import gemm, splitk, tiling
from minijit.cuda.tiling import A100_SXM, H100_SXM, GpuModel, TilePlan

HAVE_PTXAS = ptx.find_ptxas() is not None
DTYPES = ("f16", "bf16", "tf32")
GPUS = (H100_SXM, A100_SXM)


# --------------------------------------------------------------------------- device models


def test_gpu_model_validation_names_the_field():
    with pytest.raises(ValueError, match="GpuModel.sms"):
        replace(H100_SXM, sms=0)
    with pytest.raises(ValueError, match="GpuModel.dram_bw"):
        replace(H100_SXM, dram_bw=-1.0)
    with pytest.raises(ValueError, match="GpuModel.launch_s"):
        replace(H100_SXM, launch_s=-1e-6)
    with pytest.raises(ValueError, match="TilePlan.split_k"):
        TilePlan("f16", 64, 64, 32, 1, 2, 3, 0)
    with pytest.raises(ValueError, match="TilePlan.dtype"):
        TilePlan("f32", 64, 64, 32, 1, 2, 3, 1)
    with pytest.raises(ValueError, match="ReduceSpec.first"):
        splitk.ReduceSpec(2, first="copy")
    with pytest.raises(ValueError, match="ReduceSpec.split"):
        splitk.ReduceSpec(1)


def test_defaults_and_arch():
    assert (H100_SXM.sms, H100_SXM.l2_bytes, H100_SXM.smem_per_sm) == (132, 50 * 2**20, 228 * 1024)
    assert (A100_SXM.sms, A100_SXM.l2_bytes, A100_SXM.smem_per_sm) == (108, 40 * 2**20, 164 * 1024)
    assert GpuModel.for_arch("sm_90") is H100_SXM and GpuModel.for_arch("sm_90a") is H100_SXM
    assert GpuModel.for_arch("sm_80") is A100_SXM
    assert GpuModel.for_arch("sm_86").mma_per_clk < A100_SXM.mma_per_clk


def test_from_attributes_and_device():
    attrs = {
        "COMPUTE_CAPABILITY_MAJOR": 9,
        "COMPUTE_CAPABILITY_MINOR": 0,
        "MULTIPROCESSOR_COUNT": 114,
        "L2_CACHE_SIZE": 50 * 2**20,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
        "CLOCK_RATE": 1_755_000,
        "MEMORY_CLOCK_RATE": 1_593_000,
        "GLOBAL_MEMORY_BUS_WIDTH": 5120,
    }
    g = GpuModel.from_attributes(attrs, name="H100 PCIe")
    assert g.name == "H100 PCIe" and g.sms == 114 and g.smem_per_sm == 233472
    assert g.dram_bw == pytest.approx(2 * attrs["MEMORY_CLOCK_RATE"] * 1e3 * attrs["GLOBAL_MEMORY_BUS_WIDTH"] / 8)
    assert g.l2_bw == pytest.approx(H100_SXM.l2_bw * 114 / 132)  # same clock: scaled by SMs
    assert g.regs_per_sm == H100_SXM.regs_per_sm  # not given: the base's
    assert GpuModel.from_attributes({**attrs, "COMPUTE_CAPABILITY_MAJOR": 8}).mma_per_clk == A100_SXM.mma_per_clk

    class Dev:
        arch, name = "sm_80", "fake A100"

        def attribute(self, key):
            return {"MULTIPROCESSOR_COUNT": 100}.get(key, 0)

    class Refusing(Dev):
        def attribute(self, key):
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE")

    assert GpuModel.from_device(Dev()).sms == 100
    assert GpuModel.from_device(Dev()).l2_bytes == A100_SXM.l2_bytes  # 0: the arch's default
    assert GpuModel.from_device(Refusing()) is A100_SXM

    class Partial(Dev):  # bindings without one attribute: the rest still count
        def attribute(self, key):
            if key == "CLOCK_RATE":
                raise AttributeError(key)
            return {"MULTIPROCESSOR_COUNT": 100, "CLOCK_RATE": 1}.get(key, 0)

    partial = GpuModel.from_device(Partial())
    assert partial.sms == 100 and partial.clock_hz == A100_SXM.clock_hz
    from ptx import simdriver

    assert GpuModel.from_device(simdriver.device()) is GpuModel.for_arch(simdriver.device().arch)


# --------------------------------------------------------------------------- plans


SHAPES = [
    (512, 512, 512, 1, 1),
    (1024, 1024, 1024, 1, 1),
    (8192, 128, 8192, 1, 1),
    (100, 300, 17, 1, 1),
    (1, 1, 1, 1, 1),
    (200, 130, 70, 2, 3),
    (4096, 4096, 4096, 1, 1),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_plan_validates_in_every_orientation(dtype):
    for m, n, k, batch, reduce in SHAPES:
        plans = tiling.rank(m, n, k, batch=batch, reduce=reduce, dtype=dtype)
        assert plans and plans[0] == tiling.choose(m, n, k, batch=batch, reduce=reduce, dtype=dtype)
        times = [p.figure("time_s") for p in plans]
        assert times == sorted(times)
        for p in plans:
            for first, last in (("zero", "none"), ("load", "relu")):
                for a_major, b_major in (("m", "k"), ("k", "n")):
                    s = p.spec(first, last, a_major=a_major, b_major=b_major).validate()
                    assert (s.bm, s.bn, s.bk, s.stages, s.split_k) == (p.bm, p.bn, p.bk, p.stages, p.split_k)
                    assert (s.first, s.last) == ((first, last) if p.split_k == 1 else ("zero", "none"))
            r = p.reduce_spec("relu", "relu")
            assert (r is None) == (p.split_k == 1) and (r is None or r.split == p.split_k)
            seq = reduce * -(-k // p.bk)
            assert p.split_k == 1 or seq >= tiling.MIN_PART_TILES * p.split_k


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_waves_and_traffic_follow_the_formulas(gpu):
    for m, n, k, batch, reduce in SHAPES:
        for p in tiling.rank(m, n, k, batch=batch, reduce=reduce, gpu=gpu):
            spec = p.spec()
            tiles = math.ceil(m / p.bm) * math.ceil(n / p.bn) * batch
            ctas = tiles * p.split_k
            regs = tiling.registers(spec)
            per_sm = min(
                gpu.ctas_per_sm,
                gpu.threads_per_sm // spec.threads,
                gpu.regs_per_sm // (regs * spec.threads),
                gpu.smem_per_sm // (spec.smem_bytes + gpu.smem_reserved),
            )
            slots = gpu.sms * per_sm
            waves = math.ceil(ctas / slots)
            assert p.figure("ctas") == ctas and p.figure("ctas_per_sm") == per_sm
            assert p.figure("waves") == waves
            assert p.figure("tail_efficiency") == pytest.approx(ctas / (waves * slots))
            assert p.figure("workspace_bytes") == (4 * batch * p.split_k * m * n if p.split_k > 1 else 0)
            seq = reduce * math.ceil(k / p.bk)
            l2_ab = tiles * (p.bm + p.bn) * seq * p.bk * spec.es
            compulsory = batch * reduce * (m * k + k * n) * spec.es
            assert p.figure("l2_smem_bytes") >= l2_ab
            assert p.figure("dram_bytes") >= compulsory
            assert p.figure("time_s") >= max(p.figure("compute_s"), p.figure("dram_s"), p.figure("l2_s"))
            assert (p.figure("reduction_s") >= gpu.launch_s) == (p.split_k > 1)
            assert f"split-K {p.split_k}" in p.reason and f"{p.bm}x{p.bn}x{p.bk}" in p.reason


def test_wave_count_on_hand_checked_cases():
    """Waves of a 128x128 tile (8 warps, 3 stages): CTAs per SM from registers and shared memory,
    on a model with 10 SMs."""
    gpu = replace(H100_SXM, sms=10)
    spec = gemm.GemmSpec("f16", 128, 128, 32, 2, 4, 3).validate()
    per_sm = min(
        gpu.regs_per_sm // (tiling.registers(spec) * spec.threads),
        gpu.smem_per_sm // (spec.smem_bytes + gpu.smem_reserved),
    )
    assert tiling.ctas_per_sm(spec, gpu) == per_sm
    for m, n, split in ((1280, 256, 1), (1280, 256, 3), (129, 129, 2), (128 * 10 * per_sm, 128, 1)):
        f = tiling.evaluate(spec, split, m, n, 4096, gpu=gpu)
        ctas = math.ceil(m / 128) * math.ceil(n / 128) * split
        assert f["waves"] == math.ceil(ctas / (10 * per_sm))
    one_wave = tiling.evaluate(spec, 1, 128 * 10 * per_sm, 128, 4096, gpu=gpu)
    assert one_wave["tail_efficiency"] == 1.0
    over = tiling.evaluate(spec, 1, 128 * (10 * per_sm + 1), 128, 4096, gpu=gpu)
    assert over["waves"] == 2 and over["compute_s"] > one_wave["compute_s"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_small_mn_large_k_splits_large_square_does_not(dtype, gpu):
    for m, n, k in ((256, 256, 16384), (128, 128, 8192), (64, 512, 32768)):
        p = tiling.choose(m, n, k, dtype=dtype, gpu=gpu)
        assert p.split_k > 1, p.reason
        assert p.figure("ctas") > math.ceil(m / p.bm) * math.ceil(n / p.bn)
    for size in (4096, 8192):
        p = tiling.choose(size, size, size, dtype=dtype, gpu=gpu)
        assert p.split_k == 1 and p.figure("waves") > 1 and p.figure("tail_efficiency") > 0.9, p.reason
    # many independent blocks fill the GPU without split-K; a long BRGEMM reduction does not
    assert tiling.choose(256, 256, 256, batch=64, dtype=dtype, gpu=gpu).split_k == 1
    assert tiling.choose(128, 128, 64, reduce=256, dtype=dtype, gpu=gpu).split_k > 1


def test_small_shapes_use_more_ctas_than_the_fixed_tile():
    """The small shapes that were far behind cuBLAS on an H100 with the fixed 128x128 tile."""
    for m, n, k in ((512, 512, 512), (1024, 1024, 1024), (8192, 128, 8192)):
        p = tiling.choose(m, n, k, dtype="f16", gpu=H100_SXM)
        fixed = math.ceil(m / 128) * math.ceil(n / 128)
        assert p.figure("ctas") > fixed, p.reason
        old = tiling.evaluate(gemm.default_spec("f16", m, n, k), 1, m, n, k, gpu=H100_SXM)
        assert p.figure("time_s") < old["time_s"]


def test_split_k_pays_its_traffic():
    """The same tile with more parts: more workspace bytes and reduction time, and past the point
    where the CTAs fill the GPU, no gain."""
    spec = gemm.GemmSpec("f16", 64, 64, 32, 1, 2, 3).validate()
    fs = [tiling.evaluate(spec, s, 256, 256, 8192) for s in (1, 2, 4, 8)]
    assert [f["workspace_bytes"] for f in fs] == [0] + [4 * s * 256 * 256 for s in (2, 4, 8)]
    assert fs[1]["reduction_s"] < fs[2]["reduction_s"] < fs[3]["reduction_s"]
    assert fs[2]["compute_s"] < fs[0]["compute_s"]
    big = tiling.evaluate(spec, 16, 8192, 8192, 8192)
    assert big["time_s"] > tiling.evaluate(spec, 1, 8192, 8192, 8192)["time_s"]


def test_rank_rejects_bad_problems():
    with pytest.raises(ValueError, match="k must be"):
        tiling.choose(1, 1, 0)
    with pytest.raises(ValueError, match="batch must be"):
        tiling.choose(1, 1, 1, batch=0)


# --------------------------------------------------------------------------- reduction kernel


REDUCE_SPECS = [splitk.ReduceSpec(s, f, last) for s in (2, 3, 16) for f in gemm.FIRST_TOUCH for last in gemm.LAST_TOUCH]


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_reduction_and_split_gemm_no_spills(arch):
    for spec in REDUCE_SPECS:
        rk = splitk.generate(spec)
        info = ptx.compile(rk.text, arch=arch)[rk.name]
        assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)
    for dtype in DTYPES:
        for split in (2, 5):
            spec = replace(gemm.default_spec(dtype), split_k=split)
            gk = gemm.generate(spec)
            info = ptx.compile(gk.text, arch=arch)[gk.name]
            assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)
            assert spec.threads != 256 or info.registers <= 128


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_candidate_tiles_no_spills_within_the_register_table(arch):
    """Every tile the model proposes assembles without spills, in no more registers than the
    model's occupancy assumes (bf16 kernels are f16's with another mma type)."""
    for dtype in ("f16", "tf32"):
        for tile in tiling.tiles(dtype):
            for first, last, split in (("load", "relu", 1), ("zero", "none", 3)):
                spec = replace(tile, first=first, last=last, split_k=split)
                gk = gemm.generate(spec)
                info = ptx.compile(gk.text, arch=arch)[gk.name]
                assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)
                assert info.registers <= tiling.registers(spec), (spec.name, info.registers)


def test_split_spec_validation():
    with pytest.raises(ValueError, match="split_k"):
        replace(gemm.default_spec("f16"), split_k=0).validate()
    with pytest.raises(ValueError, match="split_k"):
        replace(gemm.default_spec("f16"), split_k=gemm.MAX_SPLIT + 1).validate()
    with pytest.raises(ValueError, match="first touch 'zero'"):
        replace(gemm.default_spec("f16", first="load"), split_k=2).validate()
    assert gemm.generate(replace(gemm.default_spec("f16"), split_k=3)).grid(100, 200, 5) == (1, 2, 15)


@pytest.mark.parametrize("spec", [splitk.ReduceSpec(3, "load", "relu"), splitk.ReduceSpec(2, "relu", "none")])
def test_reduction_kernel_in_the_simulator_equals_its_model(spec):
    """Ragged M x N (edge CTAs in both), two batch entries with padded C: the kernel's f32 sums in
    the fixed order are the model's bit for bit, and C's padding stays untouched."""
    from ptx import simdriver

    m, n, z, pad = 37, 11, 2, 3
    ldc = m + pad
    rng = np.random.default_rng(1)
    w = rng.standard_normal(splitk.workspace_bytes(spec.split, m, n, z) // 4).astype(np.float32)
    c = rng.standard_normal((z, n, ldc)).astype(np.float32)
    bt = np.array([(0, 0, i * n * ldc * 4) for i in range(z)], np.int64)
    rk = splitk.generate(spec)
    fn = simdriver.load_ptx(rk.text).function(rk.name, signature=rk.signature)
    dw, dc, dbt = simdriver.to_device(w), simdriver.to_device(c), simdriver.to_device(bt)
    fn.launch(rk.grid(m, n, z), rk.block, args=(dw, dc, dbt, m, n, ldc * 4))
    got = dc.to_host(np.float32, c.shape)
    want = c.copy()
    splitk.simulate(spec, w, want.reshape(-1), m, n, ldc * 4, bt)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[:, :, m:], c[:, :, m:])
    planes = w.reshape(z, spec.split, n, m).astype(np.float64).sum(axis=1)
    old = np.maximum(c[:, :, :m], 0) if spec.first == "relu" else c[:, :, :m]
    ref = planes + old
    np.testing.assert_allclose(got[:, :, :m], np.maximum(ref, 0) if spec.last == "relu" else ref, rtol=1e-5, atol=1e-5)
