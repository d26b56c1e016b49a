"""Launch builder kernels and compare with numpy: in the PTX simulator (always) and on a GPU
(``gpu`` mark), through the same driver API (the ``cuda_backend`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

from ptx import mma
from tests.ptx import kernels as K


def _load(be, m, k):
    return be.load(m.text(), k.name, k.signature)


@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_vadd(cuda_backend, n):
    drv = cuda_backend.driver
    m, k = K.vadd()
    mod, fn = _load(cuda_backend, m, k)
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db = drv.to_device(a), drv.to_device(b)
    dc = drv.to_device(np.full(n + 64, 7.0, np.float32))  # guard zone past n must stay untouched
    start, stop = drv.Event(), drv.Event()
    start.record()
    fn.launch(grid=((n + 255) // 256,), block=(256,), args=(da, db, dc, n))
    stop.record()
    assert stop.elapsed_ms(start) >= 0.0
    drv.synchronize()
    out = dc.to_host(np.float32, n + 64)
    np.testing.assert_array_equal(out[:n], a + b)
    assert (out[n:] == 7.0).all()


def test_mma_ldmatrix_f16(cuda_backend):
    drv = cuda_backend.driver
    m, k = K.mma_ldmatrix_f16()
    mod, fn = _load(cuda_backend, m, k)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    bufs = [drv.to_device(x) for x in (a, b, c)]
    dd = drv.DeviceBuffer(16 * 8 * 4)
    fn.launch(grid=(1,), block=(32,), args=(*bufs, dd))
    drv.synchronize()
    d = dd.to_host(np.float32, (16, 8))
    ref = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape,dtype", sorted(mma.MMA_SHAPES))
def test_mma_direct_matches_fragment_tables(cuda_backend, shape, dtype):
    """Fragments loaded by the offsets the layout tables give: a wrong table entry
    shows up as a wrong D on the hardware."""
    drv = cuda_backend.driver
    inf = mma.info(shape, dtype)
    m, k = K.mma_direct(shape, dtype)
    mod, fn = _load(cuda_backend, m, k)
    rng = np.random.default_rng(1)
    a = mma.quantize(dtype, rng.standard_normal((inf.m, inf.k)).astype(np.float32))
    b = mma.quantize(dtype, rng.standard_normal((inf.k, inf.n)).astype(np.float32))
    c = rng.standard_normal((inf.m, inf.n)).astype(np.float32)
    if dtype == "f16":
        ha, hb = a.astype(np.float16), np.ascontiguousarray(b.T).astype(np.float16)
    elif dtype == "bf16":
        ha, hb = mma.f32_to_bf16_bits(a), mma.f32_to_bf16_bits(np.ascontiguousarray(b.T))
    else:
        ha, hb = a, b
    bufs = [drv.to_device(np.ascontiguousarray(x)) for x in (ha, hb, c)]
    dd = drv.DeviceBuffer(inf.m * inf.n * 4)
    fn.launch(grid=(1,), block=(32,), args=(*bufs, dd))
    drv.synchronize()
    d = dd.to_host(np.float32, (inf.m, inf.n))
    model = mma.gather(
        shape,
        dtype,
        "d",
        mma.mma_sync(
            shape,
            dtype,
            mma.scatter(shape, dtype, "a", a),
            mma.scatter(shape, dtype, "b", b),
            mma.scatter(shape, dtype, "c", c),
        ),
    )
    np.testing.assert_allclose(d, model, rtol=1e-3, atol=1e-3)


def test_cp_async_stage_reverse(cuda_backend):
    drv = cuda_backend.driver
    threads, blocks = 128, 3
    m, k = K.stage_reverse(threads=threads)
    mod, fn = _load(cuda_backend, m, k)
    x = np.arange(blocks * 4 * threads, dtype=np.float32)
    dx, dy = drv.to_device(x), drv.DeviceBuffer(x.nbytes)
    fn.launch(grid=(blocks,), block=(threads,), args=(dx, dy))
    drv.synchronize()
    y = dy.to_host(np.float32, x.shape)
    ref = (2 * x.reshape(blocks, -1)[:, ::-1]).reshape(-1)
    np.testing.assert_array_equal(y, ref)


def test_warp_sum_pack(cuda_backend):
    drv = cuda_backend.driver
    m, k = K.warp_sum_pack()
    mod, fn = _load(cuda_backend, m, k)
    x = (np.arange(32, dtype=np.float32) - 10) / 4
    dx, ds, dp = drv.to_device(x), drv.DeviceBuffer(4), drv.DeviceBuffer(4)
    fn.launch(grid=(1,), block=(32,), args=(dx, ds, dp))
    drv.synchronize()
    s = ds.to_host(np.float32, 1)[0]
    assert s == np.float32(x.sum())
    packed = dp.to_host(np.uint32, 1)[0]
    hi = np.uint16(packed >> 16).view(np.float16)
    lo = np.uint16(packed & 0xFFFF).view(np.float16)
    assert (float(hi), float(lo)) == (float(np.float16(s)), float(np.float16(-s)))
