"""Launch builder kernels through the CUDA driver and compare with numpy (needs a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import ptx
from ptx import driver, mma
from tests.ptx import kernels as K

pytestmark = pytest.mark.gpu


def _load(dev, m, k):
    cub = ptx.compile(m.text(), arch=dev.arch)
    mod = driver.load(cub)
    return mod, mod.function(k.name, signature=k.signature)


@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_vadd(dev, n):
    m, k = K.vadd()
    mod, fn = _load(dev, m, k)
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db = driver.to_device(a), driver.to_device(b)
    dc = driver.to_device(np.full(n + 64, 7.0, np.float32))  # guard zone past n must stay untouched
    start, stop = driver.Event(), driver.Event()
    start.record()
    fn.launch(grid=((n + 255) // 256,), block=(256,), args=(da, db, dc, n))
    stop.record()
    assert stop.elapsed_ms(start) >= 0.0
    driver.synchronize()
    out = dc.to_host(np.float32, n + 64)
    np.testing.assert_array_equal(out[:n], a + b)
    assert (out[n:] == 7.0).all()


def test_mma_ldmatrix_f16(dev):
    m, k = K.mma_ldmatrix_f16()
    mod, fn = _load(dev, m, k)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    bufs = [driver.to_device(x) for x in (a, b, c)]
    dd = driver.DeviceBuffer(16 * 8 * 4)
    fn.launch(grid=(1,), block=(32,), args=(*bufs, dd))
    driver.synchronize()
    d = dd.to_host(np.float32, (16, 8))
    ref = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape,dtype", sorted(mma.MMA_SHAPES))
def test_mma_direct_matches_fragment_tables(dev, shape, dtype):
    """Fragments loaded by the offsets the layout tables give: a wrong table entry
    shows up as a wrong D on the hardware."""
    inf = mma.info(shape, dtype)
    m, k = K.mma_direct(shape, dtype)
    mod, fn = _load(dev, m, k)
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
    bufs = [driver.to_device(np.ascontiguousarray(x)) for x in (ha, hb, c)]
    dd = driver.DeviceBuffer(inf.m * inf.n * 4)
    fn.launch(grid=(1,), block=(32,), args=(*bufs, dd))
    driver.synchronize()
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


def test_cp_async_stage_reverse(dev):
    threads, blocks = 128, 3
    m, k = K.stage_reverse(threads=threads)
    mod, fn = _load(dev, m, k)
    x = np.arange(blocks * 4 * threads, dtype=np.float32)
    dx, dy = driver.to_device(x), driver.DeviceBuffer(x.nbytes)
    fn.launch(grid=(blocks,), block=(threads,), args=(dx, dy))
    driver.synchronize()
    y = dy.to_host(np.float32, x.shape)
    ref = (2 * x.reshape(blocks, -1)[:, ::-1]).reshape(-1)
    np.testing.assert_array_equal(y, ref)


def test_warp_sum_pack(dev):
    m, k = K.warp_sum_pack()
    mod, fn = _load(dev, m, k)
    x = (np.arange(32, dtype=np.float32) - 10) / 4
    dx, ds, dp = driver.to_device(x), driver.DeviceBuffer(4), driver.DeviceBuffer(4)
    fn.launch(grid=(1,), block=(32,), args=(dx, ds, dp))
    driver.synchronize()
    s = ds.to_host(np.float32, 1)[0]
    assert s == np.float32(x.sum())
    packed = dp.to_host(np.uint32, 1)[0]
    hi = np.uint16(packed >> 16).view(np.float16)
    lo = np.uint16(packed & 0xFFFF).view(np.float16)
    assert (float(hi), float(lo)) == (float(np.float16(s)), float(np.float16(-s)))
