"""mma fragment tables and the numpy warp model."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ptx import mma

COMBOS = sorted(mma.MMA_SHAPES)


def _rand(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    return mma.quantize(dtype, x)


@pytest.mark.parametrize("shape,dtype", COMBOS)
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_every_entry_covered_exactly_once(shape, dtype, operand):
    lay = mma.layout(shape, dtype, operand)
    rows, cols = mma.info(shape, dtype).dims(operand)
    counts = np.zeros((rows, cols), dtype=int)
    np.add.at(counts, (lay[..., 0], lay[..., 1]), 1)
    assert (counts == 1).all()
    assert lay.shape[0] * lay.shape[1] == rows * cols


@pytest.mark.parametrize("shape,dtype", COMBOS)
def test_warp_model_matches_matmul(shape, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{shape}.{dtype}".encode()))
    inf = mma.info(shape, dtype)
    a = _rand(rng, (inf.m, inf.k), dtype)
    b = _rand(rng, (inf.k, inf.n), dtype)
    c = rng.standard_normal((inf.m, inf.n)).astype(np.float32)
    fa, fb, fc = (mma.scatter(shape, dtype, op, x) for op, x in (("a", a), ("b", b), ("c", c)))
    assert fa.shape == (32, inf.elems_a) and fb.shape == (32, inf.elems_b) and fc.shape == (32, 4)
    fd = mma.mma_sync(shape, dtype, fa, fb, fc)
    d = mma.gather(shape, dtype, "d", fd)
    ref = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,dtype", COMBOS)
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_scatter_gather_roundtrip(shape, dtype, operand):
    dims = mma.info(shape, dtype).dims(operand)
    tile = np.arange(dims[0] * dims[1], dtype=np.float32).reshape(dims)
    assert (mma.gather(shape, dtype, operand, mma.scatter(shape, dtype, operand, tile)) == tile).all()


# spot checks written out from the PTX ISA figures (lane -> (row, col) per element)
SPOT = [
    # m16n8k16 A: lane 5 is g=1, t=1
    ("m16n8k16", "f16", "a", 5, [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]),
    ("m16n8k16", "bf16", "b", 30, [(4, 7), (5, 7), (12, 7), (13, 7)]),  # g=7, t=2
    ("m16n8k8", "f16", "a", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
    ("m16n8k8", "f16", "b", 6, [(4, 1), (5, 1)]),
    ("m16n8k8", "tf32", "a", 7, [(1, 3), (9, 3), (1, 7), (9, 7)]),  # g=1, t=3
    ("m16n8k8", "tf32", "b", 9, [(1, 2), (5, 2)]),  # g=2, t=1
    ("m16n8k16", "f16", "c", 0, [(0, 0), (0, 1), (8, 0), (8, 1)]),
    ("m16n8k8", "tf32", "c", 29, [(7, 2), (7, 3), (15, 2), (15, 3)]),
]


@pytest.mark.parametrize("shape,dtype,operand,lane,expect", SPOT)
def test_spot_checks_from_isa_figures(shape, dtype, operand, lane, expect):
    assert [tuple(map(int, p)) for p in mma.layout(shape, dtype, operand)[lane]] == expect


def test_ldmatrix_x4_and_x2_trans_give_m16n8k16_fragments():
    """The address scheme of tests.ptx.kernels.mma_ldmatrix_f16, run through the
    ldmatrix model, must yield exactly the A and B fragment tables."""
    a = np.arange(256, dtype=np.float32).reshape(16, 16)  # row-major A (m x k)
    b = np.arange(128, dtype=np.float32).reshape(16, 8) + 1000  # row-major B (k x n)
    # lane l points at A row l%16, column block l/16 -> matrices in lane-group order
    mats_a = np.stack([a[(8 * j) % 16 : (8 * j) % 16 + 8, 8 * (j // 2) : 8 * (j // 2) + 8] for j in range(4)])
    rows_a = [(lane % 16, 8 * (lane // 16)) for lane in range(32)]
    for j in range(4):  # addresses given by lanes 8j..8j+7 are the rows of matrix j
        for r in range(8):
            row, col = rows_a[8 * j + r]
            assert (a[row, col : col + 8] == mats_a[j, r]).all()
    got_a = mma.ldmatrix(mats_a).reshape(32, 8)
    assert (got_a == mma.scatter("m16n8k16", "f16", "a", a)).all()
    mats_b = np.stack([b[0:8], b[8:16]])  # lanes 0..15 point at B rows 0..15
    got_b = mma.ldmatrix(mats_b, trans=True).reshape(32, 4)
    assert (got_b == mma.scatter("m16n8k16", "f16", "b", b)).all()


def test_ldmatrix_model_rows():
    mats = np.arange(64).reshape(1, 8, 8)
    out = mma.ldmatrix(mats)
    assert out.shape == (32, 1, 2)
    assert list(out[5, 0]) == [mats[0, 1, 2], mats[0, 1, 3]]
    assert list(mma.ldmatrix(mats, trans=True)[5, 0]) == [mats[0, 2, 1], mats[0, 3, 1]]


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_pack_unpack_registers(dtype):
    rng = np.random.default_rng(1)
    per = 1 if dtype == "tf32" else 2
    frags = _rand(rng, (32, 4 * per), dtype)
    regs = mma.pack_regs(dtype, frags)
    assert regs.dtype == np.uint32 and regs.shape == (32, 4)
    assert (mma.unpack_regs(dtype, regs) == frags).all()
    if per == 2:  # element 2j in the low half
        lo = (regs[0, 0] & 0xFFFF).astype(np.uint16)
        val = lo.view(np.float16) if dtype == "f16" else mma.bf16_bits_to_f32(lo)
        assert float(val) == float(frags[0, 0])


def test_number_formats():
    x = np.array([1.0 + 2**-8 + 2**-9, -3.0, 1.0 + 2**-11], dtype=np.float32)
    assert mma.bf16_bits_to_f32(mma.f32_to_bf16_bits(x))[0] == np.float32(1.0 + 2**-7)  # tie to even -> up
    assert mma.round_tf32(x)[2] == np.float32(1.0 + 2**-10)  # tie away from zero
    assert mma.quantize("tf32", x)[2] == np.float32(1.0)  # hardware truncates unrounded inputs


def test_model_rejects_bad_shapes():
    with pytest.raises(ValueError, match="unsupported"):
        mma.info("m8n8k4", "f16")
    with pytest.raises(ValueError, match="expected"):
        mma.mma_sync("m16n8k16", "f16", np.zeros((32, 4)), np.zeros((32, 4)), np.zeros((32, 4)))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_encode_rounds_through_float32_as_quantize_does(dtype):
    """Device bytes of float64 values decode to what `quantize` models (tf32 rounds in the kernel),
    including a float64 2^-40 below a float16 halfway point, which float32 lands on the halfway
    point (float16 then rounds it to even); bad types are refused."""
    rng = np.random.default_rng(7)
    below = 1903.5 * 2.0**-11 - 2.0**-40
    x = np.concatenate([rng.uniform(-3e4, 3e4, 200), rng.standard_normal(200), [below, -below, 0.0]])
    raw = mma.encode(dtype, x)
    assert raw.dtype == {"f16": np.float16, "bf16": np.uint16, "tf32": np.float32}[dtype]
    got = mma.decode(dtype, raw)
    want = mma.quantize(dtype, x)
    if dtype == "tf32":  # the bytes stay float32; the tensor core keeps the upper 19 bits
        got = mma.quantize("tf32", got)
    np.testing.assert_array_equal(got, want)
    if dtype == "f16":
        assert raw[-3] == np.float16(1904 * 2.0**-11)
    with pytest.raises(ValueError, match="dtype"):
        mma.encode("f8", x)
    with pytest.raises(ValueError, match="dtype"):
        mma.decode("f8", raw)
