"""minijit.einsum on the CUDA target, in the PTX simulator (and on a GPU where there is one):
tiny shapes against np.einsum in float64; fp32 (as tf32), fp16 and bf16 inputs; numpy and
device (``__cuda_array_interface__``) arrays in and out; errors before any launch."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from ptx.mma import bf16_bits_to_f32, f32_to_bf16_bits

EXPRS = [
    ("ij,jk->ik", [(16, 8), (8, 12)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 16, 8), (1, 2, 12, 8)]),  # attention scores: both K-contiguous (a permute)
    ("ij,jk,kl->il", [(8, 6), (6, 10), (10, 4)]),
    ("abc,ai,bj,ck->ijk", [(6, 5, 4), (6, 3), (5, 2), (4, 3)]),  # Tucker: permutes and three GEMMs
    ("ijk->k", [(3, 4, 5)]),  # a sum: GEMM with ones
    ("ij->ji", [(5, 7)]),  # a permute only
    ("ij,ij->", [(6, 7), (6, 7)]),  # a scalar
    ("ab,bc->ca", [(8, 1), (1, 9)]),  # size-1 dims (an outer product)
]
#: relative error bound per element against the scale sum(|a||b|): tf32 rounding of fp32 data and
#: of fp32 intermediates (2^-11 each), fp32 accumulation
TOL = 4e-3


def _host(shape, dtype, rng):
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    if dtype == "bfloat16":
        return f32_to_bf16_bits(x)
    return x.astype(dtype)


def _as_f64(x, dtype):
    return (bf16_bits_to_f32(x) if dtype == "bfloat16" else x).astype(np.float64)


def _check(got, subs, ops, dtype):
    ref64 = [_as_f64(o, dtype) for o in ops]
    ref = np.einsum(subs, *ref64)
    scale = np.einsum(subs, *[np.abs(o) for o in ref64])
    assert got.dtype == np.float32 and got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= TOL * (scale + 1e-6)).all(), f"{subs}: max error {err.max()} (scale {scale.max()})"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("subs", "shapes"), EXPRS)
def test_cuda_plans_match_numpy(cuda_backend, subs, shapes, dtype):
    rng = np.random.default_rng(1)
    plan = minijit.EinsumPlan(subs, *shapes, dtype=dtype, target="cuda", driver=cuda_backend.driver)
    assert plan.nodes and str(plan).startswith("CudaEinsumPlan")
    for _ in range(2):  # re-run with new arrays: no re-planning
        ops = [_host(s, dtype, rng) for s in shapes]
        _check(plan(*ops), subs, ops, dtype)


def test_cuda_einsum_numpy_in_out(cuda_backend):
    rng = np.random.default_rng(2)
    a, b = _host((12, 8), "float16", rng), _host((8, 10), "float16", rng)
    got = minijit.einsum("ij,jk->ik", a, b, target="cuda", driver=cuda_backend.driver)
    _check(got, "ij,jk->ik", [a, b], "float16")
    out = np.full((12, 10), np.nan, np.float32)
    assert minijit.einsum("ij,jk->ik", a, b, out=out, target="cuda", driver=cuda_backend.driver) is out
    _check(out, "ij,jk->ik", [a, b], "float16")
    bits = [_host((4, 6), "bfloat16", rng), _host((6, 5), "bfloat16", rng)]  # uint16 data needs dtype=
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        minijit.einsum("ij,jk->ik", *bits, target="cuda", driver=cuda_backend.driver, dtype=None)
    got = minijit.einsum("ij,jk->ik", *bits, target="cuda", driver=cuda_backend.driver, dtype="bfloat16")
    _check(got, "ij,jk->ik", bits, "bfloat16")


class _Cai:
    """A bare ``__cuda_array_interface__`` over a driver buffer (what cupy / torch CUDA expose)."""

    def __init__(self, buf, shape, typestr: str, strides=None):
        self.buf = buf
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (buf.ptr, False), "version": 3, "strides": strides,
        }  # fmt: skip


def test_cuda_device_arrays_in_and_out(cuda_backend):
    drv = cuda_backend.driver
    rng = np.random.default_rng(3)
    subs, shapes = "bij,bjk->bik", [(2, 8, 6), (2, 6, 10)]
    ops = [_host(s, "float16", rng) for s in shapes]
    dev = [_Cai(drv.to_device(o), o.shape, "<f2") for o in ops]
    out_buf = drv.to_device(np.full((2, 8, 10), np.nan, np.float32))
    out = _Cai(out_buf, (2, 8, 10), "<f4")
    assert minijit.einsum(subs, *dev, out=out, target="cuda", driver=drv) is out
    _check(out_buf.to_host(np.float32, (2, 8, 10)), subs, ops, "float16")
    mixed = minijit.EinsumPlan(subs, *shapes, dtype="float16", target="cuda", driver=drv)(ops[0], dev[1])
    _check(mixed, subs, ops, "float16")  # a numpy operand with a bare device one: numpy result
    _check(minijit.einsum(subs, *dev, target="cuda", driver=drv), subs, ops, "float16")
    # errors name the operand, before anything runs
    # a dense block in another axis order (axes (0, 2, 1) of a C-order array) is read as its memory
    permuted = _Cai(dev[1].buf, (2, 6, 10), "<f2", strides=(120, 2, 12))
    as_held = np.lib.stride_tricks.as_strided(ops[1], (2, 6, 10), (120, 2, 12))  # the same bytes on the host
    assert minijit.einsum(subs, dev[0], permuted, out=out, target="cuda", driver=drv) is out
    _check(out_buf.to_host(np.float32, (2, 8, 10)), subs, [ops[0], as_held], "float16")
    gapped = _Cai(dev[1].buf, (2, 6, 5), "<f2", strides=(120, 20, 4))  # every other element of the rows
    with pytest.raises(ValueError, match="operand 1 is not one dense block"):
        minijit.einsum(subs, dev[0], gapped, target="cuda", driver=drv)
    with pytest.raises(TypeError, match="operand 1 holds float32"):
        minijit.einsum(subs, dev[0], _Cai(out_buf, (2, 6, 10), "<f4"), target="cuda", driver=drv, dtype="float16")
    with pytest.raises(TypeError, match="operand 1 holds float32, operand 0 float16"):
        minijit.einsum(subs, dev[0], _Cai(out_buf, (2, 6, 10), "<f4"), target="cuda", driver=drv)


def test_cuda_errors():
    from ptx import driver

    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        minijit.einsum("ij->ji", np.ones((2, 2)), target="cuda")
    with pytest.raises(TypeError, match="target='cuda' only"):
        minijit.einsum("ij->ji", np.ones((2, 2)), driver=driver)
    plan = minijit.EinsumPlan("ij,jk->ik", (4, 3), (3, 5), dtype="float32", target="cuda")  # no GPU needed
    with pytest.raises(ValueError, match="operand 1 has shape"):
        plan(np.ones((4, 3), np.float32), np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="operand 0 has dtype float64"):
        plan(np.ones((4, 3)), np.ones((3, 5), np.float32))
    if not driver.available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            plan(np.ones((4, 3), np.float32), np.ones((3, 5), np.float32))


def test_cuda_plan_sync_false_queues_the_nodes(cuda_backend, monkeypatch):
    # sync=False with device operands and out: the nodes are launched without a wait (the bench
    # times them with CUDA events); host operands or a host result still wait, before the uploads
    # are freed or the result is read
    drv = cuda_backend.driver
    waits = []
    real_sync = drv.synchronize
    monkeypatch.setattr(drv, "synchronize", lambda: (waits.append(1), real_sync())[1])
    rng = np.random.default_rng(4)
    subs, shapes = "abc,ai,bj,ck->ijk", [(6, 5, 4), (6, 3), (5, 2), (4, 3)]  # several nodes
    ops = [_host(s, "float32", rng) for s in shapes]  # (fp16 device operands it permutes would need torch)
    plan = minijit.EinsumPlan(subs, *shapes, dtype="float32", target="cuda", driver=drv)
    assert len(plan.nodes) > 2
    dev = [_Cai(drv.to_device(o), o.shape, "<f4") for o in ops]
    out_buf = drv.to_device(np.full((3, 2, 3), np.nan, np.float32))
    out = _Cai(out_buf, (3, 2, 3), "<f4")
    assert plan(*dev, out=out, sync=False) is out
    assert waits == []
    real_sync()
    _check(out_buf.to_host(np.float32, (3, 2, 3)), subs, ops, "float32")
    plan(*dev, out=out)
    assert waits == [1]
    _check(plan(*ops, sync=False), subs, ops, "float32")  # numpy in and out: waits anyway
    assert len(waits) >= 2
