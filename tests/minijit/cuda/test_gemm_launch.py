"""Generated GEMM/BRGEMM kernels launched in the PTX simulator (always) and on a GPU (``gpu``
mark) through the same driver API, and CudaTensorOperation on a GPU, against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from minijit.cuda import CudaTensorOperation, gemm
from ptx import mma
from tests.conftest import CudaBackend
from tests.minijit.cuda.helpers import check_result, gemm_problem
from tests.minijit.helpers import seed_layout

#: per input type: (rtol, atol per sqrt(reduction length)); inputs are quantized exactly in the
#: reference, so only the fp32 accumulation order differs. tf32 is held instead to the reference
#: with cvt.rna-rounded operands (what the mma.sync kernels do) within the fp32 accumulation bound
#: over all checked elements (helpers.check_result, helpers.accumulation_bound)
TOL = {"f16": (1e-4, 2e-5), "bf16": (1e-4, 2e-5), "tf32": (1e-4, 2e-5)}


def _launch(be: CudaBackend, spec, m, n, k, r, z, seed=0, pad=(0, 0, 0)):
    spec, p = gemm_problem(spec, m, n, k, r, z, seed, pad)
    es, lda, ldb, ldc, C = spec.es, p.lda, p.ldb, p.ldc, p.C
    ha, hb = gemm.encode(spec.dtype, p.A), gemm.encode(spec.dtype, p.B)
    bt, rt = gemm.tables(p.bt, p.rt)
    gk = gemm.generate(spec)
    mod, fn = be.load(gk.text, gk.name, gk.signature)
    driver = be.driver
    guard = 256
    c_host = np.concatenate([C.ravel(), np.full(guard, 7.0, np.float32)])
    da, db, dc = driver.to_device(ha), driver.to_device(hb), driver.to_device(c_host)
    dbt, drt = driver.to_device(bt), driver.to_device(rt)
    args = (da, db, dc, dbt, drt, m, n, k, r, lda * es, ldb * es, ldc * 4)
    fn.launch(gk.grid(m, n, z), gk.block, args=args)
    driver.synchronize()
    out = dc.to_host(np.float32, c_host.size)
    assert (out[C.size :] == 7.0).all(), "store past C"
    out = out[: C.size].reshape(C.shape)
    rtol, atol = TOL[spec.dtype]
    check_result(spec, p, out, rtol=rtol, atol=atol * np.sqrt(k * r) + 1e-5)
    return out


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (256, 384, 512), (136, 72, 50), (1, 1, 1), (33, 17, 9)])
def test_gemm_kernel(cuda_backend, dtype, m, n, k):
    spec = gemm.default_spec(dtype, m, n, k)
    if cuda_backend.simulated and (m, n, k) == (256, 384, 512):
        n, k = 256, 128  # same kernel (tiles, stages; K steps > stages), 4 CTAs x 4 K steps instead of 6 x 16
        assert gemm.default_spec(dtype, m, n, k) == spec
    _launch(cuda_backend, spec, m, n, k, 1, 1)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("first,last", [("zero", "relu"), ("load", "none"), ("relu", "relu")])
def test_brgemm_kernel_touches(cuda_backend, dtype, first, last):
    # full and edge tiles in M and N, K steps across reductions, batches; in the simulator the same
    # kernel with fewer K steps and reductions (K 40 = a full step and an edge, R = 2)
    k, r = (40, 2) if cuda_backend.simulated else (70, 3)
    spec = gemm.default_spec(dtype, 200, 130, k, first=first, last=last)
    assert spec == gemm.default_spec(dtype, 200, 130, 70, first=first, last=last)
    _launch(cuda_backend, spec, 200, 130, k, r, 2, pad=(8, 0, 5))


def _problems(mn: int, k: int, rz: int) -> dict:
    """Strategies of a GEMM sweep: dtype, M, N (1..mn), K (1..k), R, Z (1..rz), leading-dim pads."""
    pads = st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9))
    sizes = {"m": st.integers(1, mn), "n": st.integers(1, mn), "k": st.integers(1, k)}
    counts = {"r": st.integers(1, rz), "z": st.integers(1, rz)}
    return {"dtype": st.sampled_from(["f16", "bf16", "tf32"]), **sizes, **counts, "pad": pads}


@settings(max_examples=40, deadline=None)
@given(**_problems(300, 200, 3))
@pytest.mark.gpu
def test_gemm_kernel_hypothesis(dev, dtype, m, n, k, r, z, pad):
    from ptx import driver

    _launch(CudaBackend("gpu", driver, dev), gemm.default_spec(dtype, m, n, k), m, n, k, r, z, pad=pad)


@settings(max_examples=12, deadline=None)
@given(**_problems(140, 80, 2), stages=st.integers(2, 4))
def test_gemm_kernel_hypothesis_simulated(dtype, m, n, k, r, z, pad, stages):
    """The same sweep, smaller, in the PTX simulator (which also checks races and bounds)."""
    from ptx import simdriver

    spec = replace(gemm.default_spec(dtype, m, n, k), stages=stages)
    assume(spec.smem_bytes <= 48 * 1024)  # deeper pipelines of big tiles exceed static shared memory
    _launch(CudaBackend("sim", simdriver, simdriver.device()), spec, m, n, k, r, z, pad=pad)


SEED_CASES = [
    ("gemm", ("seq", "seq", "seq", "prim", "prim", "prim"), "none", "none"),
    ("brgemm", ("seq", "seq", "prim", "prim", "prim", "prim"), "none", "none"),
    ("brgemm", ("seq", "seq", "prim", "prim", "prim", "prim"), "zero", "relu"),
    ("brgemm", ("shared", "shared", "prim", "prim", "prim", "prim"), "zero", "relu"),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("main,exec_types,first,last", SEED_CASES)
def test_seed_configs_numpy(cuda_backend, dtype, main, exec_types, first, last):
    """Seed 004's configuration (32, 32, 8, 32, 32, 32) with numpy arrays (copied to the device);
    in the simulator with fewer outer blocks (2, 3, 4, 32, 32, 32)."""
    m0, n0, k0 = (32, 32, 8) if not cuda_backend.simulated else (2, 3, 4)
    dims, sizes, s0, s1, so = seed_layout(m0, n0, k0, 32, 32, 32)
    op = CudaTensorOperation(driver=cuda_backend.driver)
    op.setup(dtype, first, main, last, dims, exec_types, sizes, s0, s1, so)
    rng = np.random.default_rng(4)
    A = rng.standard_normal((m0, k0, 32, 32)).astype(np.float32)
    B = rng.standard_normal((n0, k0, 32, 32)).astype(np.float32)
    C = rng.standard_normal((m0, n0, 32, 32)).astype(np.float32)
    ha, hb = gemm.encode(op.dtype, A), gemm.encode(op.dtype, B)
    qa, qb = (gemm.decode(op.dtype, h) if op.dtype != "tf32" else mma.round_tf32(h) for h in (ha, hb))
    ref = np.einsum("akcb,dkec->adeb", qa, qb, optimize=True).astype(np.float64)
    ref = ref + (C if first == "none" else 0)
    ref = np.maximum(ref, 0) if last == "relu" else ref
    out = C.copy()
    op.execute(ha, hb, out)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.gpu
def test_seed_configs_torch(dev, dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    dims, sizes, s0, s1, so = seed_layout(32, 32, 8, 32, 32, 32)
    op = CudaTensorOperation()
    op.setup(dtype, "zero", "brgemm", "relu", dims, ("seq", "seq", "prim", "prim", "prim", "prim"), sizes, s0, s1, so)
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    A = torch.randn((32, 8, 32, 32), device="cuda", generator=g).to(tdt)
    B = torch.randn((32, 8, 32, 32), device="cuda", generator=g).to(tdt)
    C = torch.empty((32, 32, 32, 32), device="cuda", dtype=torch.float32)
    op.execute(A, B, C)
    ref = torch.relu(torch.einsum("akcb,dkec->adeb", A.double(), B.double())).float()
    tol = 1e-2 if dtype == "fp32" else 1e-3  # tf32 rounding vs exact fp32 inputs
    torch.testing.assert_close(C, ref, rtol=tol, atol=tol * 16)


@pytest.mark.gpu
def test_torch_bounds_checked_before_launch(dev):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    dims, sizes, s0, s1, so = seed_layout(2, 2, 2, 32, 32, 32)
    op = CudaTensorOperation()
    op.setup("fp16", "zero", "gemm", "none", dims, ("seq", "seq", "seq", "prim", "prim", "prim"), sizes, s0, s1, so)
    A = torch.zeros((2, 2, 32, 32), device="cuda", dtype=torch.float16)
    C = torch.zeros((2, 2, 32, 32), device="cuda", dtype=torch.float32)
    with pytest.raises(ValueError, match="outside"):
        op.execute(A[:1], A, C)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(A.float(), A, C)


# --------------------------------------------------------------------------- split-K


def _launch_splitk(be: CudaBackend, dtype, split, first, last, m, n, k, r, z, pad=(0, 0, 0)):
    """The split-K pair (partials kernel into a workspace, reduction with the touches into C) on a
    batch x BRGEMM problem: C against numpy, C's padding and the words after it untouched, the
    reduction's C equal to its numpy model on the kernel's workspace bit for bit."""
    from minijit.cuda import splitk

    bk = 16 if dtype == "tf32" else 32
    base = gemm.GemmSpec(dtype, 32, 32, bk, 1, 1, 2, split_k=split)
    spec, p = gemm_problem(base, m, n, k, r, z, seed=3, pad=pad)
    rspec = splitk.ReduceSpec(split, first, last)
    es, driver, guard = spec.es, be.driver, 64
    bt, rt = gemm.tables(p.bt, p.rt)
    gk, rk = gemm.generate(spec), splitk.generate(rspec)
    _, fn = be.load(gk.text, gk.name, gk.signature)
    _, rfn = be.load(rk.text, rk.name, rk.signature)
    c_host = np.concatenate([p.C.ravel(), np.full(guard, 7.0, np.float32)])
    da, db = driver.to_device(gemm.encode(dtype, p.A)), driver.to_device(gemm.encode(dtype, p.B))
    dc, dbt, drt = driver.to_device(c_host), driver.to_device(bt), driver.to_device(rt)
    ws = driver.DeviceBuffer(splitk.workspace_bytes(split, m, n, z))
    fn.launch(gk.grid(m, n, z), gk.block, args=(da, db, ws, dbt, drt, m, n, k, r, p.lda * es, p.ldb * es, m * 4))
    rfn.launch(rk.grid(m, n, z), rk.block, args=(ws, dc, dbt, m, n, p.ldc * 4))
    driver.synchronize()
    out = dc.to_host(np.float32, c_host.size)
    assert (out[p.C.size :] == 7.0).all(), "store past C"
    want = c_host.copy()
    splitk.simulate(rspec, ws.to_host(np.float32, ws.nbytes // 4), want, m, n, p.ldc * 4, bt)
    np.testing.assert_array_equal(out, want)
    rtol, atol = TOL[dtype]
    check_result(
        replace(spec, split_k=1, first=first, last=last),
        p,
        out[: p.C.size].reshape(p.C.shape),
        rtol,
        atol * np.sqrt(k * r) + 1e-5,
    )


@pytest.mark.parametrize(
    "dtype,first,last",
    [
        ("f16", "zero", "none"),
        ("bf16", "load", "relu"),
        ("tf32", "relu", "none"),
        ("f16", "relu", "relu"),
        ("tf32", "load", "none"),
        ("bf16", "zero", "relu"),
    ],
)
def test_splitk_kernels_batch_and_brgemm(cuda_backend, dtype, first, last):
    """Ragged 36 x 20 tiles (edges in M and N), 2 batch entries x 2 BRGEMM blocks of K 40 (a full
    and an edge K tile each), split 3: parts of 1 and 2 K tiles, one crossing a BRGEMM block."""
    _launch_splitk(cuda_backend, dtype, 3, first, last, 36, 20, 40 if dtype != "tf32" else 20, 2, 2, pad=(4, 0, 3))


def test_splitk_more_parts_than_k_tiles(cuda_backend):
    """split 3 over 2 K tiles: one part has none and writes zero partials."""
    _launch_splitk(cuda_backend, "f16", 3, "load", "none", 20, 12, 40, 1, 1)


def test_operation_splitk(cuda_backend):
    """CudaTensorOperation with a split-K plan (a model whose launches and waves cost nothing, so
    any split that spreads the work wins): BRGEMM blocks (k0) in the reduction table, (m0, n0)
    batch entries; execute (through the driver) and simulate against numpy, and the workspace is
    allocated once."""
    from minijit.cuda import tiling

    m0, n0, k0 = 2, 1, 4
    dims, sizes, s0, s1, so = seed_layout(m0, n0, k0, 32, 32, 32)
    op = CudaTensorOperation(driver=cuda_backend.driver, family="mma.sync")
    op.gpu = replace(tiling.H100_SXM, launch_s=0.0, wave_s=0.0)
    op.setup("fp16", "relu", "brgemm", "relu", dims, ("seq", "seq", "prim", "prim", "prim", "prim"), sizes, s0, s1, so)
    assert op.tile_plan.split_k > 1 and f"split-K {op.tile_plan.split_k}" in repr(op)
    assert op.kernel_spec().split_k == op.tile_plan.split_k
    rng = np.random.default_rng(5)
    A = rng.standard_normal((m0, k0, 32, 32)).astype(np.float32)
    B = rng.standard_normal((n0, k0, 32, 32)).astype(np.float32)
    C = rng.standard_normal((m0, n0, 32, 32)).astype(np.float32)
    ha, hb = gemm.encode("f16", A), gemm.encode("f16", B)
    qa, qb = gemm.decode("f16", ha), gemm.decode("f16", hb)
    ref = np.maximum(np.einsum("akcb,dkec->adeb", qa, qb, optimize=True) + np.maximum(C, 0), 0)
    out = C.copy()
    op.execute(ha, hb, out)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
    ws = op._workspace[2]
    out2 = C.copy()
    op.execute(ha, hb, out2)  # staged numpy arrays: new addresses, same workspace
    assert op._workspace[2] is ws
    np.testing.assert_array_equal(out2, out)
    out3 = C.copy()
    op.simulate(ha, hb, out3)
    np.testing.assert_allclose(out3, ref, rtol=1e-3, atol=1e-3)


@settings(max_examples=3, deadline=None)
@given(**_problems(40, 60, 2), split=st.integers(2, 4), touches=st.sampled_from([("zero", "none"), ("load", "relu")]))
def test_splitk_hypothesis_simulated(dtype, m, n, k, r, z, pad, split, touches):
    """Split-K over random ragged problems in the PTX simulator (K from 1: parts without K tiles)."""
    from ptx import simdriver

    _launch_splitk(CudaBackend("sim", simdriver, simdriver.device()), dtype, split, *touches, m, n, k, r, z, pad)


def test_launch_args_refuses_a_split_k_plan():
    """launch_args describes one launch; a split-K GEMM (partials kernel + reduction) says so."""
    op = CudaTensorOperation(family="mma.sync")
    m = n = 64
    k = 16384
    op.setup(
        "fp16", "zero", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [m, n, k], [1, 0, m], [0, k, 1], [1, m, 0]
    )
    assert op.tile_plan.split_k > 1
    with pytest.raises(ValueError, match="split-K"):
        op.launch_args(0, 0, 0, tables=(1, 2))


@pytest.mark.parametrize(
    ("types", "sizes", "strides", "message"),
    [
        # a batch dim of 2**33: more blocks than gridDim.z (the fuzz batch of 2026-11-27 drew it)
        (["n", "k", "m", "c"], [1, 7, 4, 2**33], ([0, 12, 3, 1], [21, 1, 0, 7], [12, 0, 1, 4]), "gridDim.z"),
        # a loop K dim of 2**33: a 128 GiB reduction table
        (
            ["m", "n", "k", "k"],
            [4, 3, 9, 2**33],
            ([9, 0, 1, 36], [0, 9, 1, 27], [3, 1, 0, 0]),
            "reduction offset table",
        ),
    ],
)
def test_setup_refuses_launch_tables_past_their_bounds_before_building_them(types, sizes, strides, message):
    """The batch and reduction tables are sized before they are built: a SetupError naming the
    bound, not a MemoryError from numpy."""
    from minijit.errors import SetupError
    from ptx import simdriver

    op = CudaTensorOperation(driver=simdriver)
    with pytest.raises(SetupError, match=message):
        op.setup("fp32", "zero", "gemm", "none", types, ["undefined"] * 4, sizes, *strides)
