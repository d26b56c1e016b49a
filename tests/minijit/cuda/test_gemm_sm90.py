"""The sm_90a GEMM family: ptxas for sm_90a (no spills, no C7508/C7511), SASS (HGMMA, no local
memory), A@B in ptx.sim with ragged edges and more K tiles than stages, and mutated kernels caught."""

import numpy as np
import pytest

from minijit.cuda import gemm_sm90 as G
from minijit.cuda.gemm import reference
from ptx import sim, toolchain
from ptx.mma import f32_to_bf16_bits
from ptx.tensormap import encode_tiled

SMALL = G.Sm90Spec("f16", bm=64, bn=64, stages=2)  # 256 threads: one producer, one consumer warpgroup


def _run(spec: G.Sm90Spec, m: int, n: int, k: int, seed: int = 0, ctas=None):
    """Launch in ptx.sim on random column-major operands; returns (got, want)."""
    rng = np.random.default_rng(seed)
    lda, ldb, ldc = -(-m // 8) * 8, -(-k // 8) * 8 + 8, m + 3  # padded leading dims (elements)
    a = rng.standard_normal((k, lda)).astype(np.float32)  # a[k, m] = A[m, k]
    b = rng.standard_normal((n, ldb)).astype(np.float32)  # b[n, k] = B[k, n]
    c = rng.standard_normal((n, ldc)).astype(np.float32)
    if spec.dtype == "f16":
        ha, hb = a.astype(np.float16), b.astype(np.float16)
    else:
        ha, hb = f32_to_bf16_bits(a).astype(np.uint16), f32_to_bf16_bits(b).astype(np.uint16)
    gk = G.generate(spec)
    mem = sim.Memory()
    pa, pb, pc = mem.upload(ha), mem.upload(hb), mem.upload(c)
    ta, tb = G.tensor_maps(spec, pa, pb, m, n, k, lda * 2, ldb * 2)
    args = (encode_tiled(**ta), encode_tiled(**tb), pc, m, n, k, ldc * 4)
    sim.launch(gk.text, gk.name, gk.grid(m, n), gk.block, args, mem, shared_bytes=gk.shared_bytes, ctas=ctas)
    got = mem.read(pc, np.float32, n * ldc).reshape(n, ldc)
    A, B = a[:, :m].T, b[:, :k].T  # M x K, K x N
    want = reference(spec.dtype, A, B, c[:, :m].T, spec.first, spec.last).T
    return got, want, c


@pytest.mark.parametrize(
    "spec,shape",
    [
        (SMALL, (100, 70, 200)),  # ragged M, N, K; 4 K tiles through 2 stages; 4 CTAs
        (G.Sm90Spec("bf16", bm=128, bn=64, stages=3, first="load", last="relu"), (130, 40, 300)),
        (G.Sm90Spec("f16", bm=64, bn=128, stages=2, first="relu"), (64, 150, 136)),
    ],
)
def test_sim_computes_a_times_b(spec, shape):
    m, n, k = shape
    got, want, c = _run(spec, m, n, k)
    np.testing.assert_allclose(got[:, :m], want, rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(got[:, m:], c[:, m:])  # padding between columns is untouched


def test_sim_default_spec_one_cta():
    spec = G.Sm90Spec("f16")  # the GPU default: 256 x 128 tile, 2 consumer warpgroups, 4 stages
    got, want, _ = _run(spec, 200, 90, 5 * 64 + 8, ctas=[(0, 0, 0)])
    np.testing.assert_allclose(got[:, :200], want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    "mutate,msg",
    [
        ("no_wgmma_fence", "missing wgmma.fence"),
        ("expect_tx_plus16", "deadlock"),
        ("wrong_swizzle", None),  # descriptors read a 64-byte swizzle: wrong data or out of bounds
    ],
)
def test_mutated_kernels_fail(mutate, msg):
    spec = G.Sm90Spec("f16", bm=64, bn=64, stages=2, mutate=mutate)
    if msg is not None:
        with pytest.raises(sim.SimError, match=msg):
            _run(spec, 64, 64, 192)
        return
    try:
        got, want, _ = _run(spec, 64, 64, 192)
    except sim.SimError as e:
        assert "descriptor reaches outside" in str(e)
        return
    assert np.abs(got[:, :64] - want).max() > 0.1


def test_spec_validation():
    with pytest.raises(ValueError, match="bn must be"):
        G.Sm90Spec(bn=256)
    with pytest.raises(ValueError, match="stages"):
        G.Sm90Spec(stages=1)
    with pytest.raises(ValueError, match="shared memory"):
        G.Sm90Spec(bm=256, bn=128, stages=6)


SPECS = [G.Sm90Spec("f16"), G.Sm90Spec("bf16", first="load", last="relu"), SMALL, G.Sm90Spec("f16", bm=128)]


def _ptxas():
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_ptxas_sm90a_no_spills_no_serialization(spec):
    _ptxas()
    gk = G.generate(spec)
    assert gk.module.target == "sm_90a"
    cub = toolchain.compile(gk.text, arch="sm_90a")
    info = cub[gk.name]
    assert info.spills == 0 and info.stack_frame == 0, cub.log
    assert "C7511" not in cub.log and "C7508" not in cub.log and "C7510" not in cub.log, cub.log


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: s.name)
def test_sass_has_hgmma_and_no_local_memory(spec):
    _ptxas()
    if toolchain.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    gk = G.generate(spec)
    sass = toolchain.sass(toolchain.compile(gk.text, arch="sm_90a"))
    ops = [line.split("*/")[1].strip() for line in sass.splitlines() if line.count("*/") >= 2]
    assert any(op.startswith("HGMMA.64x") for op in ops), sass[:2000]
    assert any(op.startswith("UTMALDG.2D") for op in ops)
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)
    assert not [op for op in ops if op.split()[0].split(".")[0] in ("LDL", "STL")]


@pytest.mark.parametrize(
    "spec,shape",
    [
        (SMALL, (100, 70, 200)),
        pytest.param(G.Sm90Spec("f16"), (1000, 700, 1000), marks=pytest.mark.gpu),
        pytest.param(G.Sm90Spec("bf16", first="load", last="relu"), (513, 257, 4100), marks=pytest.mark.gpu),
    ],
    ids=lambda x: x.name if isinstance(x, G.Sm90Spec) else str(x),
)
def test_launch_through_driver_api(cuda_backend, spec, shape):
    """Tensor maps from the backend's encode_tensor_map_tiled, dynamic shared memory > 48 KB."""
    be = cuda_backend
    if be.simulated and max(shape) > 300:
        pytest.skip("large shapes run on a GPU only")
    m, n, k = shape
    rng = np.random.default_rng(3)
    lda, ldb, ldc = -(-m // 8) * 8, -(-k // 8) * 8, m + 1
    a = rng.standard_normal((k, lda)).astype(np.float32)
    b = rng.standard_normal((n, ldb)).astype(np.float32)
    c = rng.standard_normal((n, ldc)).astype(np.float32)
    enc = (lambda x: x.astype(np.float16)) if spec.dtype == "f16" else (lambda x: f32_to_bf16_bits(x).astype(np.uint16))
    gk = G.generate(spec)
    arch = "sm_90a"
    if not be.simulated and be.dev.arch != "sm_90":
        pytest.skip(f"the sm_90a family needs compute capability 9.0, device is {be.dev.arch}")
    mod = be.driver.load(toolchain.compile(gk.text, arch=arch)) if toolchain.find_ptxas() else be.driver.load(gk.text)
    fn = mod.function(gk.name, signature=gk.signature)
    drv = be.driver
    da, db, dc = drv.to_device(enc(a)), drv.to_device(enc(b)), drv.to_device(c)
    ta, tb = G.tensor_maps(spec, da.ptr, db.ptr, m, n, k, lda * 2, ldb * 2)
    args = (drv.encode_tensor_map_tiled(**ta), drv.encode_tensor_map_tiled(**tb), dc, m, n, k, ldc * 4)
    fn.launch(gk.grid(m, n), gk.block, args=args, shared=gk.shared_bytes)
    drv.synchronize()
    got = dc.to_host(np.float32, c.size).reshape(n, ldc)
    want = reference(spec.dtype, a[:, :m].T, b[:, :k].T, c[:, :m].T, spec.first, spec.last).T
    np.testing.assert_allclose(got[:, :m], want, rtol=2e-3, atol=2e-3 * np.sqrt(k / 64))
    np.testing.assert_array_equal(got[:, m:], c[:, m:])


def _gemm_op(dtype: str, m: int, n: int, k: int, family=None):
    from minijit.cuda import CudaTensorOperation
    from minijit.ir import dim_t, exec_t, ptype_t
    from ptx import simdriver

    op = CudaTensorOperation(driver=simdriver, family=family)
    c, p = dim_t, exec_t
    op.setup(
        dtype, ptype_t.zero, ptype_t.gemm, ptype_t.none, (c.m, c.n, c.k), (p.prim, p.prim, p.prim), (m, n, k),
        (1, 0, m), (0, k, 1), (1, m, 0),
    )  # fmt: skip
    return op


def test_family_selection(monkeypatch):
    op = _gemm_op("fp16", 64, 48, 96)
    assert op.family_for("sm_90") == "sm90a" and "family sm90a on compute capability 9.0" in repr(op)
    assert op.family_for("sm_80") == "mma.sync" and op.family_for("sm_89") == "mma.sync"
    assert op.family_for("sm_90", ptr_a=8) == "mma.sync"  # TMA needs 16-byte aligned operands
    assert _gemm_op("fp32", 64, 48, 96).family_for("sm_90") == "mma.sync"  # tf32: not in this family yet
    assert _gemm_op("fp16", 64, 48, 99).family_for("sm_90") == "mma.sync"  # ldb of 198 bytes
    assert _gemm_op("fp16", 64, 48, 96, family="mma.sync").family_for("sm_90") == "mma.sync"
    monkeypatch.setenv("MINIJIT_CUDA_FAMILY", "mma.sync")
    assert _gemm_op("fp16", 64, 48, 96).family_for("sm_90") == "mma.sync"
    with pytest.raises(ValueError, match="family"):
        _gemm_op("fp16", 64, 48, 96, family="wgmma")


@pytest.mark.parametrize("family", ["sm90a", "mma.sync"])
def test_operation_execute_in_simulator(family):
    m, n, k = 72, 40, 136
    op = _gemm_op("fp16", m, n, k, family=family)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((k, m)).astype(np.float16)  # column-major A: a[k, m]
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.full((n, m), np.nan, np.float32)
    op.execute(a, b, c)
    want = reference("f16", a.T.astype(np.float32), b.T.astype(np.float32), np.zeros((m, n))).T
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-3)
